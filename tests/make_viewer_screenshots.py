"""Regenerate the stage viewer's screenshots in docs/ (needs chromium).

    uv run python tests/make_viewer_screenshots.py

One page for a matmul with a ReLU (the MUL node clicked, so its links are lit) and one for
a tiny GPT's training step (the first softmax kernel selected, its EXP clicked: the op
graph shows its layer opened among the closed ones; the kernel list folded into groups,
the selected kernel's unfolded).
"""

import json
import sys
import tempfile
import time
from pathlib import Path

from chromium import Chromium, find

import limn
from limn import Tensor

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def save(browser, name: str) -> None:
    time.sleep(0.3)
    assert not browser.errors, browser.errors
    browser.screenshot(str(ROOT / "docs" / name))
    print(ROOT / "docs" / name)


def main() -> None:
    import viz_gpt
    from test_viewer import page_data

    exe = find()
    if exe is None:
        sys.exit("no chromium found (apt-get install chromium)")
    tmp = Path(tempfile.mkdtemp())
    limn.set_seed(0)
    matmul = limn.viz((Tensor.randn((64, 32)) @ Tensor.randn((32, 48))).relu(), tmp / "mm.html")
    gpt = Path(viz_gpt.main(["--out", str(tmp / "gpt.html"), "--steps", "1"]))
    m = page_data(matmul.read_text())["graphs"][0]
    mul = next(i for i, n in enumerate(m["nodes"]) if n["op"] == "MUL")
    g = page_data(gpt.read_text())["graphs"][0]
    k = next(i for i, k in enumerate(g["kernels"]) if "EXP" in k["summary"] and k["kind"] == "SUM")
    kernel = g["kernels"][k]
    exp = next(i for i in kernel["rows"] if g["nodes"][i]["op"] == "EXP")
    b = Chromium(exe, width=1600, height=1000)
    try:
        b.open(matmul.as_uri())
        b.click(f'#drawing g.node[data-i="{b.eval(f"drawn.keys.indexOf({mul})")}"]')
        b.wait_for(f"sel.node === {mul}")
        save(b, "viewer-matmul.png")
        b.open(gpt.as_uri())
        group = f"{kernel['kind']}|{kernel['loop']}|{kernel['summary']}"
        if any(
            f"{o['kind']}|{o['loop']}|{o['summary']}" == group for o in g["kernels"] if o != kernel
        ):
            b.click(f"#kernels details[data-group={json.dumps(group)}] > summary")  # unfold it
            b.wait_for(f"document.querySelector('#kernels .krow[data-k=\"{k}\"]')")
        b.click(f'#kernels .krow[data-k="{k}"]')
        b.wait_for(f"sel.k === {k}")
        row_line = kernel["rows"].index(exp) + 2 + len(kernel["inputs"])  # title, ins, out
        b.click(f'.block .ln[data-line="{row_line}"]')
        b.wait_for(f"sel.node === {exp}")
        b.click("#details details summary")  # fold the kernel's block: the nest and C show
        save(b, "viewer-gpt.png")
    finally:
        b.close()


if __name__ == "__main__":
    main()
