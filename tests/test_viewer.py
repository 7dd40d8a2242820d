"""The stage viewer's data: what the page embeds is what the printers print, and its links
(node -> kernel rows -> nest lines -> C lines) point where they claim to."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpus import CASES

import limn
from ir import ir
from ir.c.passes import c_passes
from ir.c.render import render, render_mapped
from ir.c.units import compile, generic, kernel_key
from ir.cuda import render as cu
from ir.cuda.passes import cuda_passes
from ir.graph.node import format_graph
from ir.kernel.kernel import constant_kernels
from ir.kernel.schedule import schedule
from ir.loop.generic import GENERIC_PASSES, lower_generic
from ir.loop.lower import lower
from ir.loop.nest import Accum, Arith, DefAcc, Load, Loop, Store, walk
from ir.loop.passes import apply_passes
from limn import Tensor
from limn.runtime.target import detect
from limn.viewer import fill_kernels, graph_data, page

ROOT = Path(__file__).resolve().parent.parent


def page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="limn-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def data_for(outs):
    roots = [t.node for t in outs]
    data, graph = graph_data(roots)
    fill_kernels(data, graph)
    return data, graph


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_page_data_is_the_printed_stages(case):
    outs = case.build()
    data, graph = data_for(outs)
    lines = format_graph([t.node for t in outs]).splitlines()[:-1]
    assert [n["text"] for n in data["nodes"]] == [line.strip() for line in lines]
    blocks = str(graph).split("\n\n")
    assert ["\n".join(k["block"]) for k in data["kernels"]] == blocks[:-1]
    assert "\n".join(data["sinks"]) == blocks[-1]
    nests = ir(outs, passes=c_passes(detect())).split("\n\n")
    compiled = ir(outs, stage="c", target=detect())  # what the c device compiles
    try:
        cuda_program = ir(outs, stage="cuda")
    except TypeError:  # a kernel the cuda device declines (the page says so in its tab)
        cuda_program = None
    keys = [kernel_key(graph, k) for k in graph.kernels]
    generic_calls = compile(graph, None, detect()).calls
    for i, k in enumerate(data["kernels"]):
        if k["kind"] == "CUSTOM":
            continue
        pipe = k["pipelines"]["c"]
        final = [s for s in pipe["steps"] if "lines" in s][-1]
        source = "\n".join(pipe["source"])
        if pipe.get("on_host"):  # a constant kernel: computed when the plan is built
            assert "constant: numpy computes it once, at plan time" in nests[i].splitlines()[0]
            assert source == render(apply_passes(lower(graph, i), c_passes(detect())), k["name"])[0]
            assert f"void k{i}(" not in compiled and i in constant_kernels(graph)
            continue
        assert "\n".join(final["lines"]) == nests[i]
        if i in generic_calls:  # a size-generic kernel: the shared function the device calls
            nest = apply_passes(lower_generic(graph, i)[0], GENERIC_PASSES)
            assert source == render(nest, generic_calls[i][0])[0]
            assert source in compiled
        else:
            assert source == render(apply_passes(lower(graph, i), c_passes(detect())), k["name"])[0]
            # a kernel equal to an earlier one over other buffers is compiled once: the
            # copy's function calls the first's, which is this same source under its name
            j = next(j for j, o in enumerate(graph.kernels) if kernel_key(graph, o) == keys[i])
            assert source.replace(f"void k{i}(", f"void k{j}(", 1) in compiled
            if j != i:
                call = f"void k{i}(void *const *args, int64_t *err) {{ k{j}(args, err); }}"
                assert call in compiled
        cuda = k["pipelines"]["cuda"]
        if cuda["source"] is not None and cuda_program is not None:
            assert "\n".join(cuda["source"]) in cuda_program
    if cuda_program is None:
        assert any("declined" in k["pipelines"].get("cuda", {}) for k in data["kernels"])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_nest_step_is_that_pass_applied_to_the_one_before(case):
    outs = case.build()
    data, graph = data_for(outs)
    for i, k in enumerate(data["kernels"]):
        if k["kind"] == "CUSTOM":
            continue
        steps = k["pipelines"]["c"]["steps"]
        passes, sizes = c_passes(detect()), None
        on_host = i in constant_kernels(graph)
        if not on_host and generic(graph, graph.kernels[i], passes):  # what the c device runs
            first, passes = "lower_generic", GENERIC_PASSES
            nest, sizes = lower_generic(graph, i)
        else:
            first, nest = "lower", lower(graph, i)
        assert [s["pass"] for s in steps] == [first, *(p.__name__ for p in passes)]
        shown = steps[0]["lines"]
        for p, step in zip(passes, steps[1:]):
            nest = apply_passes(nest, [p])
            text = nest.format(
                [f"buf{b}" for b in graph.kernels[i].inputs],
                f"buf{graph.kernels[i].output}",
                sizes,
            )
            # a step without lines is a pass that changed nothing, and says so
            assert text.splitlines() == step.get("lines", shown)
            shown = step.get("lines", shown)


def test_each_c_statement_maps_to_the_instruction_it_spells():
    for case in CASES:
        graph = schedule([t.node for t in case.build()]).graph
        for i, k in enumerate(graph.kernels):
            if k.kind == "CUSTOM":
                continue
            nest = apply_passes(lower(graph, i), c_passes(detect()))
            text, _, origins = render_mapped(nest, f"k{i}")
            lines = text.splitlines()
            assert len(origins) == len(lines) and text == render(nest, f"k{i}")[0]
            mapped = set()
            for line, o in zip(lines, origins):
                if o is None:
                    continue
                ins = nest.lines()[o]
                mapped.add(o)
                if isinstance(ins, Arith | Load):
                    assert re.search(rf"\b{ins.out}\b", line), (case.name, line, ins)
                elif isinstance(ins, Store):
                    assert f"{ins.buf}[" in line or "acc[a][b]" in line, (case.name, line, ins)
            lines = nest.lines()
            computing = {j for j, ins in enumerate(lines) if isinstance(ins, Arith | Load)}
            assert computing <= mapped or any(getattr(x, "role", None) for x in lines)


def test_nest_lines_carry_the_row_that_computes_them():
    for case in CASES:
        graph = schedule([t.node for t in case.build()]).graph
        for i, k in enumerate(graph.kernels):
            if k.kind == "CUSTOM":
                continue
            for ins in walk(apply_passes(lower(graph, i), c_passes(detect())).body):
                if isinstance(ins, Arith) and ins.op.value not in ("CAST", "WHERE"):
                    assert ins.row is not None and k.rows[ins.row].op == ins.op, (case.name, ins)
                if isinstance(ins, Load):
                    assert k.rows[ins.row].op.value in ("BUFFER", "VIEW"), (case.name, ins)


def test_every_node_points_at_the_kernels_that_compute_and_read_it():
    for case in CASES:
        outs = case.build()
        data, graph = data_for(outs)
        sched = schedule([t.node for t in outs])
        for nid, node in enumerate(data["nodes"]):
            for k in node["fused"] + node["reads"]:
                assert nid in data["kernels"][k]["rows"]
            if node["home"] >= 0:
                kernel = data["kernels"][node["home"]]
                assert nid in kernel["rows"] or data["nodes"][nid]["op"] in ("ASSIGN", "CONTIGUOUS")
        for k, rows in enumerate(sched.row_nodes):
            assert len(rows) == len(graph.kernels[k].rows)


def test_the_page_is_one_file_that_fetches_nothing(tmp_path):
    x = (Tensor.randn((8, 4)) @ Tensor.randn((4, 3))).relu()
    html = limn.viz(x, tmp_path / "mm.html").read_text()
    without_svg_ns = html.replace('"http://www.w3.org/2000/svg"', "")
    assert not re.search(r"https?://|<link|<script src|@import|url\(", without_svg_ns)
    data = page_data(html)
    assert data["targets"] == ["c", "cuda"] and len(data["graphs"]) == 1
    assert [k["name"] for k in data["graphs"][0]["kernels"]] == ["k0", "k1"]


def test_data_that_spells_a_closing_tag_cannot_end_the_script():
    graph = {"name": "</script><b>x</b>", "nodes": [], "kernels": [], "targets": []}
    html = page([graph], "t")
    assert html.count("</script>") == 2  # the data's and the code's own
    assert page_data(html)["graphs"][0]["name"] == "</script><b>x</b>"


def test_measured_stats_reach_the_page(tmp_path):
    x = Tensor.randn((16, 8)) @ Tensor.randn((8, 4))
    stats = {0: {"calls": 10, "seconds": 0.002, "flops": 2 * 16 * 8 * 4, "ignored": 1}}
    data = page_data(limn.viz(x, tmp_path / "s.html", stats=stats).read_text())
    got = [k["stats"] for k in data["graphs"][0]["kernels"]]
    assert got[0] == {"calls": 10, "seconds": 0.002, "flops": 1024} and got[1:] == [None] * (
        len(got) - 1
    )


def test_a_value_realized_since_is_an_input_and_the_page_stops_there(tmp_path):
    a = Tensor.randn((4, 4))
    h = a * 2
    y = h.exp()  # built on h's node before h has bytes
    h.realize()
    nodes = page_data(limn.viz(y, tmp_path / "r.html").read_text())["graphs"][0]["nodes"]
    assert [(n["op"], n["srcs"], n["home"]) for n in nodes] == [("MUL", [], -1), ("EXP", [0], 0)]


def test_limn_viz_records_each_distinct_graph_once_with_its_count(tmp_path):
    out = tmp_path / "run.html"
    script = (
        "from limn import Tensor\n"
        "x = Tensor.randn((4, 3))\n"
        "for _ in range(3):\n"
        "    (x * 2 + 1).numpy()\n"
        "(x @ Tensor.randn((3, 5))).sum().item()\n"
    )
    env = {**os.environ, "LIMN_VIZ": str(out)}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "stage viewer" in r.stderr
    graphs = page_data(out.read_text())["graphs"]
    assert [g["count"] for g in graphs] == [3, 1]  # the map three times, then the matmul
    assert [g["kernels"][0]["kind"] for g in graphs] == ["MAP", "SUM"]


def test_viz_leaves_the_computation_unrealized(tmp_path):
    x = Tensor.randn((3, 3))
    y = x.exp()
    limn.viz(y, tmp_path / "p.html")
    assert y.node.op.value == "EXP"
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()), rtol=1e-6)


def _c_device():
    try:
        limn.set_device("c")
    except RuntimeError as e:
        pytest.skip(f"c device unavailable: {e}")


def test_the_profilers_measurements_reach_the_page(tmp_path):
    _c_device()
    try:
        w = Tensor.randn((16, 8))

        def step(x):
            return (x @ w).relu().sum(1)

        with limn.profile() as prof:
            for _ in range(3):
                step(Tensor.randn((4, 16))).realize()
        measured = {r["kernel"]: r for r in prof.stats()}
        data = page_data(limn.viz(step(Tensor.randn((4, 16))), tmp_path / "p.html").read_text())
    finally:
        limn.set_device("numpy")
    kernels = data["graphs"][0]["kernels"]
    assert kernels and all(k["stats"] is not None for k in kernels)
    assert all(k["stats"]["calls"] == 3 and k["stats"]["seconds"] > 0 for k in kernels)
    flops = sorted(k["stats"]["flops"] for k in kernels)
    assert flops == sorted(r["flop"] for r in measured.values())
    assert sum(k["stats"]["seconds"] for k in kernels) == pytest.approx(
        sum(r["total_s"] for r in measured.values())
    )


def test_limn_viz_with_limn_profile_shows_each_kernels_time(tmp_path):
    out = tmp_path / "run.html"
    script = (
        "import limn\n"
        "from limn import Tensor\n"
        "limn.set_device('c')\n"
        "w = Tensor.randn((8, 8))\n"
        "for _ in range(4):\n"
        "    (Tensor.randn((2, 8)) @ w).exp().sum().item()\n"
    )
    env = {**os.environ, "LIMN_VIZ": str(out), "LIMN_PROFILE": "1"}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "limn profile:" in r.stderr and "stage viewer" in r.stderr
    graphs = page_data(out.read_text())["graphs"]
    step = next(g for g in graphs if g["count"] == 4)
    assert step["kernels"] and all(k["stats"]["calls"] == 4 for k in step["kernels"])


def test_a_training_steps_kernel_times_add_up_to_the_profilers_total(tmp_path):
    """Two layers of one shape make kernels with one body: each gets its own share of the
    body's measured time, so the page adds up to what the profiler measured, not twice it."""
    from limn import nn, optim
    from limn.viewer import record

    _c_device()
    try:
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh())
        opt = optim.AdamW(model.named_parameters(), lr=1e-2)
        x, y = Tensor.randn((4, 8)), Tensor.randn((4, 8))
        with limn.profile() as prof:
            rec = record(tmp_path / "step.html", at_exit=False)
            for _ in range(3):
                opt.zero_grad()
                loss = nn.mse_loss(model(x), y)
                loss.backward()
                opt.step(loss)
            rec.stop()
        graphs = page_data(rec.write().read_text())["graphs"]
    finally:
        limn.set_device("numpy")
    kernels = [k for g in graphs for k in g["kernels"] if k["stats"]]
    total = sum(r["total_s"] for r in prof.stats())
    assert sum(k["stats"]["seconds"] for k in kernels) == pytest.approx(total, rel=1e-9)
    step = max(graphs, key=lambda g: len(g["kernels"]))
    assert step["count"] == 3 and step["name"].startswith("test_viewer.py:")
    assert all(k["stats"]["calls"] == 3 for k in step["kernels"] if k["stats"])
    assert any(r["calls"] == 6 for r in prof.stats())  # one body, the two layers' kernels
    modules = {k["module"] for k in step["kernels"]}
    assert {"0", "2", "AdamW 0.weight"} <= modules


def test_the_browser_tests_fail_rather_than_skip_where_chromium_is_required(tmp_path):
    # .ci/run sets LIMN_REQUIRE_CHROMIUM=1: there a missing chromium is a failure, not a skip
    def run(**env):
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "loads"]
        cmd.append(str(ROOT / "tests" / "test_viewer_browser.py"))
        env = {**os.environ, "LIMN_REQUIRE_CHROMIUM": "", **env}
        env["LIMN_CHROMIUM"] = str(tmp_path / "no-such-chromium")
        return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path)

    optional, required = run(), run(LIMN_REQUIRE_CHROMIUM="1")
    assert optional.returncode == 0 and "skipped" in optional.stdout, optional.stdout
    assert required.returncode == 1 and "no chromium" in required.stdout, required.stdout
    assert "LIMN_REQUIRE_CHROMIUM" in required.stdout


def test_a_mul_folded_into_an_fma_still_links_to_the_line_that_computes_it():
    x = Tensor.randn((16, 8)) @ Tensor.randn((8, 12))
    data, graph = data_for([x])
    mul = next(i for i, n in enumerate(data["nodes"]) if n["op"] == "MUL")
    k = data["kernels"][data["nodes"][mul]["home"]]
    row = k["rows"].index(mul)
    final = [s for s in k["pipelines"]["c"]["steps"] if "lines" in s][-1]
    assert row not in final["rows"]  # tile_contraction folded the MUL into the ACCUM
    (at,) = [int(i) for i, rows in final.get("folded", {}).items() if row in rows]
    assert "FMA" in final["lines"][at]
    origin = k["pipelines"]["c"]["origin"]
    assert any(o == at for o in origin)  # and the C the FMA became is lit with it


def _cuda_graphs():
    """The corpus, and graphs big enough for the cuda renderer's tile and split shapes."""
    yield from ([t.node for t in case.build()] for case in CASES)
    a, b = Tensor.randn((70, 40)), Tensor.randn((40, 90))
    yield [(a @ b).relu().sum(1).node]  # a tile, then cells
    yield [(Tensor.randn((3, 20, 33)) @ Tensor.randn((3, 33, 17))).node]  # a batched tile
    yield [Tensor.randn((8192,)).exp().sum().node]  # a split reduce, one cell
    yield [(Tensor.randn((2, 9000)) * 2).amax(1).sqrt().node]  # a split over two cells


def test_each_cuda_line_maps_to_the_instruction_it_spells():
    shapes = set()
    for roots in _cuda_graphs():
        graph = schedule(roots).graph
        for i, k in enumerate(graph.kernels):
            if k.kind == "CUSTOM":
                continue
            nest = apply_passes(lower(graph, i), cuda_passes())
            try:
                kernel, origins = cu.render_mapped(nest, f"k{i}")
            except (TypeError, NotImplementedError):  # a kernel the cuda device declines
                continue
            assert kernel == cu.render(nest, f"k{i}")  # the map changes nothing it renders
            lines = kernel.source.splitlines()
            assert len(origins) == len(lines)
            shapes |= {launch.shape for launch in kernel.launches}
            spelled = {j: [] for j in range(len(nest.lines()))}
            for line, o in zip(lines, origins):
                if o is not None:
                    spelled[o].append(line)
            for j, ins in enumerate(nest.lines()):
                if isinstance(ins, Loop) and any(x is ins for x in nest.lines()[:j]):
                    continue  # a loop's ENDLOOP line: its LOOP line is checked
                got = spelled[j]
                if isinstance(ins, Arith):  # every line of a value names it
                    assert got and all(re.search(rf"\b{ins.out}\b", t) for t in got), (ins, got)
                elif isinstance(ins, DefAcc):  # its register, or a tile's array of them
                    assert any(re.search(rf"\b({ins.out}|acc)\b", t) for t in got), (ins, got)
                elif isinstance(ins, Load):  # its own line, or its staging into a tile
                    assert any(re.search(rf"\b(s_)?{ins.out}\b", t) for t in got), (ins, got)
                elif isinstance(ins, Store):
                    assert any(f"{ins.buf}[" in t for t in got), (ins, got)
                elif isinstance(ins, Accum):  # into a register, a cell, an atomic, a tile's
                    assert any(re.search(rf"\b{ins.dst}\b|acc\[a\]\[b\] =", t) for t in got)
                elif isinstance(ins, Loop):  # its for, or the cells it was decoded from
                    assert any(re.search(rf"\b{ins.var}\b", t) for t in got), (ins, got)
    assert shapes == {"cells", "tile", "split"}  # every shape's map was checked


def test_the_cuda_tab_links_nodes_to_the_lines_written_for_them():
    x = (Tensor.randn((70, 40)) @ Tensor.randn((40, 90))).relu().sum(1)
    data, graph = data_for([x])
    for i, k in enumerate(data["kernels"]):
        pipe = k["pipelines"]["cuda"]
        final = [s for s in pipe["steps"] if "lines" in s][-1]
        assert len(pipe["origin"]) == len(pipe["source"])
        assert {o for o in pipe["origin"] if o >= 0} <= set(range(len(final["lines"])))
        for row, nid in enumerate(k["rows"]):
            op = data["nodes"][nid]["op"]
            if op not in ("MUL", "CMPLT", "WHERE", "SUM") or i not in data["nodes"][nid]["fused"]:
                continue  # another kernel's output, read here as a buffer
            nest = [i for i, r in enumerate(final["rows"]) if r == row]
            cuda = [pipe["source"][i] for i, o in enumerate(pipe["origin"]) if o in nest]
            assert nest and cuda, (k["name"], op)
            sym = {"MUL": " * ", "CMPLT": " < ", "WHERE": " ? ", "SUM": " + "}[op]
            assert any(sym in line for line in cuda), (op, cuda)
