"""The stage viewer in a real browser: headless chromium loads the page, clicks through it,
and the highlighted lines must be the ones the page's own data links.

CI installs Debian's chromium (``.ci/run``); without one these tests skip, saying so,
except where ``LIMN_REQUIRE_CHROMIUM=1`` (``.ci/run`` sets it): there they fail.
"""

import json
import os
import sys
import time

import numpy as np
import pytest
from chromium import Chromium, find
from test_viewer import page_data

import limn
from limn import Tensor, nn, optim

EXE = find()
if EXE is None:
    _why = "no chromium found (CI installs it: apt-get install chromium)"
    if os.environ.get("LIMN_REQUIRE_CHROMIUM") == "1":
        _why += "; LIMN_REQUIRE_CHROMIUM=1 makes that a failure"
        pytestmark = pytest.mark.usefixtures("_chromium_is_required")
    else:
        pytestmark = pytest.mark.skip(reason=_why)


@pytest.fixture(scope="module")
def _chromium_is_required():
    pytest.fail(_why, pytrace=False)


@pytest.fixture(scope="module")
def browser():
    b = Chromium(EXE)
    yield b
    b.close()


def load(browser, path):
    browser.errors.clear()
    browser.open(path.as_uri())
    return page_data(path.read_text())["graphs"][0]


def lines(browser, selector):
    return browser.eval(
        f"[...document.querySelectorAll({json.dumps(selector)})].map(e => +e.dataset.line)"
    )


@pytest.fixture(scope="module")
def matmul_page(tmp_path_factory):
    x = (Tensor.randn((16, 8)) @ Tensor.randn((8, 12))).relu().sum(1)
    return limn.viz(x, tmp_path_factory.mktemp("viz") / "matmul.html")


def test_the_page_loads_without_console_errors(browser, matmul_page):
    g = load(browser, matmul_page)
    n = browser.eval("document.querySelectorAll('#drawing g.node').length")
    assert n == browser.eval("drawn.keys.length") and n >= len(g["nodes"]) - 2
    assert browser.eval("document.querySelectorAll('#kernels .krow').length") == len(g["kernels"])
    assert browser.errors == []


def test_clicking_a_node_highlights_its_kernel_nest_lines_and_c_lines(browser, matmul_page):
    g = load(browser, matmul_page)
    mul = next(i for i, n in enumerate(g["nodes"]) if n["op"] == "MUL")
    item = browser.eval(f"drawn.keys.indexOf({mul})")
    browser.click(f'#drawing g.node[data-i="{item}"]')
    browser.wait_for(f"sel.node === {mul}")
    k = g["nodes"][mul]["home"]
    kernel, pipe = g["kernels"][k], g["kernels"][k]["pipelines"]["c"]
    assert browser.eval("document.querySelector('#kernels .krow.sel').dataset.k") == str(k)
    assert browser.eval("document.querySelector('#drawing g.node.sel').dataset.i") == str(item)
    final = [s for s in pipe["steps"] if "lines" in s][-1]
    rows = {r for r, nid in enumerate(kernel["rows"]) if nid == mul}
    folded = {int(i): set(f) for i, f in final.get("folded", {}).items()}  # the MUL in an FMA
    want_nest = [i for i, r in enumerate(final["rows"]) if r in rows or rows & folded.get(i, set())]
    assert want_nest and lines(browser, ".nest .ln.hl") == want_nest
    want_c = [i for i, o in enumerate(pipe["origin"]) if o in want_nest]
    assert want_c and lines(browser, ".source .ln.hl") == want_c
    # the C of a MUL multiplies (in a tiled contraction, in the FMA it is folded into)
    assert all("*" in pipe["source"][i] or "fma" in pipe["source"][i] for i in want_c)
    assert browser.errors == []


def test_clicking_a_c_line_goes_back_to_the_node_it_computes(browser, matmul_page):
    g = load(browser, matmul_page)
    k = len(g["kernels"]) - 1
    browser.click(f'#kernels .krow[data-k="{k}"]')
    browser.wait_for(f"sel.k === {k}")
    pipe = g["kernels"][k]["pipelines"]["c"]
    final = [s for s in pipe["steps"] if "lines" in s][-1]
    at = next(i for i, o in enumerate(pipe["origin"]) if o >= 0 and final["rows"][o] >= 0)
    browser.click(f'.source .ln[data-line="{at}"]')
    nid = g["kernels"][k]["rows"][final["rows"][pipe["origin"][at]]]
    browser.wait_for(f"sel.node === {nid}")
    assert at in lines(browser, ".source .ln.hl")
    assert pipe["origin"][at] in lines(browser, ".nest .ln.hl")
    item = browser.eval(f"drawn.keys.indexOf({nid})")
    assert browser.eval("document.querySelector('#drawing g.node.sel').dataset.i") == str(item)
    assert browser.errors == []


def test_a_pass_step_shows_what_it_changed_as_a_diff(browser, matmul_page):
    g = load(browser, matmul_page)
    k = 0
    steps = g["kernels"][k]["pipelines"]["c"]["steps"]
    i = next(i for i, s in enumerate(steps) if i > 0 and "lines" in s)
    before = next(s for s in reversed(steps[:i]) if "lines" in s)["lines"]
    browser.click(f'#kernels .krow[data-k="{k}"]')
    browser.click(f'.steps button[data-step="{i}"]')
    browser.wait_for(f"sel.step === {i}")
    shown = browser.eval(
        "[...document.querySelectorAll('.nest .ln')].map(e => [e.className, e.textContent])"
    )
    kinds = [c.split()[1] for c, _ in shown]
    assert "add" in kinds or "del" in kinds
    new = [t for c, t in shown if "del" not in c]
    old = [t for c, t in shown if "add" not in c]
    strip = lambda rows: [t.lstrip("0123456789") for t in rows]  # noqa: E731 (line numbers)
    assert strip(new) == steps[i]["lines"] and [t.strip() for t in strip(old)] == [
        t.strip() for t in before
    ]
    assert browser.errors == []


def test_search_keeps_the_kernels_that_match(browser, matmul_page):
    g = load(browser, matmul_page)
    browser.click("#search")
    browser.send("Input.insertText", text="WHERE")  # the relu's kernel has it, the matmul not
    want = [i for i, k in enumerate(g["kernels"]) if "where" in (k["title"] + k["summary"]).lower()]
    assert 0 < len(want) < len(g["kernels"])
    browser.wait_for(f"document.querySelectorAll('#kernels .krow').length === {len(want)}")
    shown = browser.eval("[...document.querySelectorAll('#kernels .krow')].map(e => +e.dataset.k)")
    assert shown == want
    browser.eval("document.getElementById('search').value = ''; renderKernelList()")
    assert browser.errors == []


@pytest.fixture(scope="module")
def gpt_page(tmp_path_factory):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import viz_gpt

    out = tmp_path_factory.mktemp("viz") / "gpt.html"
    viz_gpt.main(["--out", str(out), "--steps", "1"])
    return out


def test_a_gpt_training_step_opens_fast_and_links_across_hundreds_of_kernels(browser, gpt_page):
    t = time.perf_counter()
    g = load(browser, gpt_page)
    opened = time.perf_counter() - t
    assert len(g["kernels"]) > 200
    assert opened < 20, f"the page took {opened:.1f} s to open"
    k = len(g["kernels"]) // 2
    reveal(browser, g, k)
    browser.click(f'#kernels .krow[data-k="{k}"]')
    browser.wait_for(f"sel.k === {k}")
    browser.click('#views button[data-view="op"]')
    browser.wait_for("drawn.key.endsWith(':op')")
    node = next(i for i, n in enumerate(g["nodes"]) if n["home"] == k)
    item = browser.eval(f"drawn.keys.indexOf({node})")
    browser.click(f'#drawing g.node[data-i="{item}"]')
    browser.wait_for(f"sel.node === {node}")
    assert browser.eval("document.querySelector('#kernels .krow.sel').dataset.k") == str(k)
    assert browser.errors == []


# what a reader can read: a box as tall as two lines of 11-px text shrunk by at most a tenth
LEGIBLE_BOX, LEGIBLE_TEXT = 28, 9


def drawn_sizes(browser):
    """The heights on screen of the boxes and of their text inside the drawing's panel."""
    return browser.eval(
        "(() => { const s = document.getElementById('drawing').getBoundingClientRect();"
        " const on = (r) => r.bottom > s.top && r.top < s.bottom && r.right > s.left"
        " && r.left < s.right; const h = (sel) => [...document.querySelectorAll(sel)]"
        ".filter(e => e.tagName === 'rect' || e.textContent)"
        ".map(e => e.getBoundingClientRect()).filter(on).map(r => r.height);"
        " return [h('#drawing g.node rect'), h('#drawing g.node text')]; })()"
    )


def assert_legible(browser, at_least):
    boxes, texts = drawn_sizes(browser)
    assert len(boxes) >= at_least, f"only {len(boxes)} boxes on screen"
    assert min(boxes) >= LEGIBLE_BOX, f"boxes drawn {min(boxes):.1f} px tall"
    assert min(texts) >= LEGIBLE_TEXT, f"text drawn {min(texts):.1f} px tall"


def test_a_gpt_steps_page_opens_on_its_layers_readable_and_a_layer_opens_readable(
    browser, gpt_page
):
    g = load(browser, gpt_page)
    assert browser.eval("sel.view") == "op"
    layer_boxes = browser.eval("drawn.keys.filter(k => typeof k === 'string').length")
    assert 5 < layer_boxes == browser.eval("drawn.keys.length") < len(g["nodes"]) / 50
    assert_legible(browser, 8)  # the model's layers, each one labelled box
    item = browser.eval("drawn.keys.indexOf('layer:blocks.0')")
    browser.eval(f"drawn.zoom.focus(drawn.box.x[{item}], drawn.box.y[{item}])")
    browser.click(f'#drawing g.node[data-i="{item}"]')
    browser.wait_for("layers.open.has('blocks.0')")
    mine = browser.eval(
        "drawn.keys.filter(k => typeof k === 'number' && layerOfKey(graph(), k) === 'blocks.0')"
    )
    assert len(mine) > 100  # the layer's nodes are drawn now, and the view is on them
    on_screen = browser.eval(
        "(() => { const s = document.getElementById('drawing').getBoundingClientRect();"
        " return drawn.groups.map((e, i) => [drawn.keys[i], e.getBoundingClientRect()])"
        ".filter(([k, r]) => r.top > s.top && r.bottom < s.bottom && r.left > s.left"
        " && r.right < s.right).map(([k]) => k); })()"
    )
    assert set(on_screen) & set(mine)
    assert_legible(browser, 8)
    browser.click("#layers")  # every node, then every layer closed again
    browser.wait_for("!layers.on.op")
    browser.click("#layers")
    browser.wait_for("layers.on.op")
    assert browser.eval("drawn.keys.includes('layer:blocks.0')")
    assert browser.eval("drawn.keys.length") == layer_boxes
    browser.click('#views button[data-view="kernel"]')
    browser.wait_for("drawn.key.endsWith(':kernel')")
    assert_legible(browser, 8)
    assert browser.errors == []


def groups_of(g):
    """The kernel list's groups, as the page should fold it: the same kind, loop and ops."""
    groups = {}
    for i, k in enumerate(g["kernels"]):
        groups.setdefault(f"{k['kind']}|{k['loop']}|{k['summary']}", []).append(i)
    return groups


def reveal(browser, g, k):
    """Unfold the group that holds kernel ``k`` (a kernel alone in its group is a plain row)."""
    key = next(key for key, ks in groups_of(g).items() if k in ks)
    if len(groups_of(g)[key]) > 1:
        browser.click(f"#kernels details[data-group={json.dumps(key)}] > summary")
        browser.wait_for(f"document.querySelector('#kernels .krow[data-k=\"{k}\"]')")


def visible(browser, selector):
    return browser.eval(
        f"[...document.querySelectorAll({json.dumps(selector)})]"
        ".filter(e => e.checkVisibility()).map(e => +e.dataset.k)"
    )


def test_a_gpt_steps_kernel_list_folds_into_groups_of_the_same_kernel(browser, gpt_page):
    g = load(browser, gpt_page)
    groups = groups_of(g)
    assert len(groups) < len(g["kernels"]) / 2  # the step repeats itself: layers, parameters
    shown = browser.eval(
        "[...document.querySelectorAll('#kernels > *')].map(e => e.dataset.group !== undefined"
        " ? [e.dataset.group, e.querySelector('summary .kname').textContent, e.open]"
        " : [null, +e.dataset.k, false])"
    )
    want = [
        [key, f"{len(ks)}\u00d7", False] if len(ks) > 1 else [None, ks[0], False]
        for key, ks in groups.items()
    ]
    assert shown == want  # first-seen order; every group folded (k0, selected, is alone)
    assert browser.eval("document.getElementById('kernel-count').textContent") == (
        f"{len(g['kernels'])} kernels in {len(groups)} groups"
    )
    key, ks = max(groups.items(), key=lambda kv: len(kv[1]))
    head = f"#kernels details[data-group={json.dumps(key)}] > summary"
    assert visible(browser, "#kernels .krow") == [
        i for i in range(len(g["kernels"])) if [i] in groups.values()
    ]
    browser.click(head)  # unfold: its kernels show, in run order
    browser.wait_for(f"document.querySelector({json.dumps(head)}).parentElement.open")
    assert [i for i in visible(browser, "#kernels .krow") if i in ks] == ks
    browser.click(head)  # fold it again: they hide
    browser.wait_for(f"!document.querySelector({json.dumps(head)}).parentElement.open")
    assert not set(visible(browser, "#kernels .krow")) & set(ks)
    # selecting a kernel elsewhere (here: in the kernel graph) unfolds its group
    browser.click('#views button[data-view="kernel"]')
    browser.wait_for("drawn.key.endsWith(':kernel')")
    k = ks[len(ks) // 2]
    item = browser.eval(f"drawn.keys.indexOf({k})")
    browser.eval(f"drawn.zoom.focus(drawn.box.x[{item}], drawn.box.y[{item}])")  # on screen
    browser.click(f'#drawing g.node[data-i="{item}"]')
    browser.wait_for(f"sel.k === {k}")
    assert visible(browser, "#kernels .krow.sel") == [k]
    # and a search unfolds the groups it matches, saying how many of each match
    browser.click("#search")
    browser.send("Input.insertText", text="SQRT")
    want = [
        i for i, kk in enumerate(g["kernels"]) if "sqrt" in (kk["title"] + kk["summary"]).lower()
    ]
    browser.wait_for(f"document.querySelectorAll('#kernels .krow').length === {len(want)}")
    assert sorted(visible(browser, "#kernels .krow")) == want
    browser.eval("document.getElementById('search').value = ''; renderKernelList()")
    # grouped by kind instead: one group per kind, with its count
    browser.eval("const s = $('group-by'); s.value = 'kind'; s.onchange()")
    kinds = {}
    for kk in g["kernels"]:
        kinds[kk["kind"]] = kinds.get(kk["kind"], 0) + 1
    got = browser.eval(
        "[...document.querySelectorAll('#kernels details')]"
        ".map(e => [e.dataset.group, e.querySelector('.kname').textContent])"
    )
    assert got == [[kind, f"{n}\u00d7"] for kind, n in kinds.items() if n > 1]
    assert browser.errors == []


def test_a_page_with_nothing_left_to_compute_still_loads(browser, tmp_path):
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    loss = (model(Tensor(np.ones((2, 3), np.float32))) ** 2).mean()
    loss.backward()
    opt.step(loss)  # the weight is a buffer now: its page has one node and no kernel
    g = load(browser, limn.viz(model.weight, tmp_path / "w.html"))
    assert g["kernels"] == [] and browser.errors == []


def test_the_cuda_tab_shows_its_own_passes_and_source(browser, matmul_page):
    g = load(browser, matmul_page)
    cuda = g["kernels"][0]["pipelines"]["cuda"]
    browser.click('#kernels .krow[data-k="0"]')
    browser.click('.steps button[data-target="cuda"]')
    browser.wait_for('sel.target === "cuda"')
    shown = browser.eval(
        "[...document.querySelectorAll('.steps button[data-step]')].map(b => b.textContent)"
    )
    assert shown == [f"{i}. {s['pass']}" for i, s in enumerate(cuda["steps"])] + ["final"]
    assert browser.eval("document.querySelectorAll('.source .ln').length") == len(cuda["source"])
    assert browser.errors == []


def test_the_cuda_tab_links_a_node_to_its_cuda_lines_and_back(browser, matmul_page):
    g = load(browser, matmul_page)
    mul = next(i for i, n in enumerate(g["nodes"]) if n["op"] == "MUL")
    k = g["nodes"][mul]["home"]
    pipe = g["kernels"][k]["pipelines"]["cuda"]
    final = [s for s in pipe["steps"] if "lines" in s][-1]
    rows = {r for r, nid in enumerate(g["kernels"][k]["rows"]) if nid == mul}
    want_nest = [i for i, r in enumerate(final["rows"]) if r in rows]
    want = [i for i, o in enumerate(pipe["origin"]) if o in want_nest]
    browser.click(f'#kernels .krow[data-k="{k}"]')
    browser.click('.steps button[data-target="cuda"]')
    browser.wait_for('sel.target === "cuda"')
    browser.click(f'#drawing g.node[data-i="{browser.eval(f"drawn.keys.indexOf({mul})")}"]')
    browser.wait_for(f"sel.node === {mul}")
    assert want and lines(browser, ".source .ln.hl") == want
    assert all(" * " in pipe["source"][i] for i in want)  # the CUDA of a MUL multiplies
    # and back: a CUDA line of another instruction selects the node it computes
    at = next(
        i
        for i, o in enumerate(pipe["origin"])
        if o >= 0 and final["rows"][o] >= 0 and g["kernels"][k]["rows"][final["rows"][o]] != mul
    )
    nid = g["kernels"][k]["rows"][final["rows"][pipe["origin"][at]]]
    browser.click(f'.source .ln[data-line="{at}"]')
    browser.wait_for(f"sel.node === {nid}")
    assert at in lines(browser, ".source .ln.hl")
    assert pipe["origin"][at] in lines(browser, ".nest .ln.hl")
    assert browser.eval("document.querySelector('#kernels .krow.sel').dataset.k") == str(k)
    assert browser.errors == []


def test_a_training_steps_op_graph_opens_as_named_layers_and_a_layer_opens_to_its_nodes(
    browser, gpt_page
):
    g = load(browser, gpt_page)
    assert (
        len(g["nodes"]) > 1500 and g["name"].startswith("viz_gpt.py:") and "opt.step" in g["name"]
    )
    assert browser.eval(
        "document.getElementById('graph-select').selectedOptions[0].text"
    ).startswith(g["name"])
    browser.click('#views button[data-view="op"]')
    browser.wait_for("drawn.key.endsWith(':op')")
    browser.eval("layers.open.clear(); renderDrawing()")
    boxes = browser.eval("drawn.keys.filter(k => typeof k === 'string').map(k => k.slice(6))")
    assert 5 < len(boxes) < 60 and len(boxes) == browser.eval("drawn.keys.length")
    for name in ("blocks.0", "blocks.1", "blocks.1 (grad)", "AdamW blocks.0", "head"):
        assert name in boxes, name
    item = browser.eval("drawn.keys.indexOf('layer:blocks.1')")
    browser.eval(f"drawn.zoom.focus(drawn.box.x[{item}], drawn.box.y[{item}])")
    browser.click(f'#drawing g.node[data-i="{item}"]')
    browser.wait_for("layers.open.has('blocks.1')")
    node = next(
        i
        for i, n in enumerate(g["nodes"])
        if (n.get("module") or "").startswith("blocks.1.attn") and "(grad)" not in n["site"]
    )
    at = browser.eval(f"drawn.keys.indexOf({node})")
    assert at >= 0 and "layer:blocks.1" not in browser.eval("drawn.keys")
    browser.eval(f"drawn.zoom.focus(drawn.box.x[{at}], drawn.box.y[{at}])")
    browser.click(f'#drawing g.node[data-i="{at}"]')
    browser.wait_for(f"sel.node === {node}")
    made = browser.eval("document.querySelector('#details .made').textContent")
    assert made.startswith("made by viz_gpt.py:") and made.endswith(
        "in " + g["nodes"][node]["module"]
    )
    browser.click("#layers")  # every node again
    browser.wait_for("!layers.on.op")
    assert browser.eval("drawn.keys.filter(k => typeof k === 'string').length") == 0
    assert browser.errors == []
