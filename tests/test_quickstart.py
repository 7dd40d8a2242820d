"""The README: its snippets run, its gradient matches torch's, and its layout is the tree."""

import re
from pathlib import Path

import numpy as np
import torch

from limn import Tensor

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_snippet_gradient_matches_torch():
    x = Tensor.randn((4, 3), requires_grad=True)
    w = Tensor.randn((3, 2))
    loss = ((x @ w).relu() ** 2).sum()
    loss.backward()
    tx = torch.tensor(x.numpy(), requires_grad=True)
    ((tx @ torch.tensor(w.numpy())).relu() ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_every_python_block_of_the_readme_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert "void k0(" in capsys.readouterr().out  # the compiler's block printed its C


def _layout() -> dict[str, list[str]]:
    """The README's layout block as {folder: the names its line lists}."""
    block = re.search(r"## Layout\n\n```\n(.*?)```", README, re.S).group(1)
    entries, top = {}, ""
    for line in block.splitlines():
        m = re.match(r"^( ?)( ?)(\S+/|\S+\.py)\s+(.*)$", line)
        if m:
            folder = m.group(3) if not m.group(1) else top + m.group(3)
            top = folder if not m.group(1) else top
            entries[folder] = [m.group(4)]
        elif line.strip() and entries:
            entries[folder].append(line.strip())
    out = {}
    for folder, text in entries.items():
        words = re.sub(r"\([^()]*\)", "", " ".join(text)).split(";")[0].split(":")[-1]
        out[folder] = [w for w in re.split(r"[,\s]+", words) if w]
    return out


def test_the_readme_layout_lists_every_module_and_only_modules_that_exist():
    layout = _layout()
    for folder in ("ir/graph/", "ir/kernel/", "ir/loop/", "ir/c/", "ir/cuda/", "limn/"):
        assert folder in layout, folder
    layout["limn/runtime/"] = layout.pop("limn/runtime/", None) or layout.pop("runtime/")
    for folder in ("ir/graph/", "ir/kernel/", "ir/loop/", "ir/c/", "ir/cuda/", "limn/",
                   "limn/runtime/", "examples/"):  # fmt: skip
        listed = set(layout[folder])
        have = {p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"}
        have |= {p.parent.name for p in (ROOT / folder).glob("*/__init__.py")} - {"runtime"}
        assert listed == have, (folder, sorted(listed - have), sorted(have - listed))


def test_the_readme_is_a_front_page():
    assert len(README.splitlines()) <= 120
    for path in re.findall(r"`((?:ir|limn|limn_array|examples|tests|\.ci)/[\w/.]+)`", README):
        assert (ROOT / path).exists(), path
