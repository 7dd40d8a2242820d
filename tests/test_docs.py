"""The docs say what is true: every name the API reference lists exists, the torch port's
diff is the one the test applies, and the commands install what they need and no more."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_torch_port import PORT

import limn

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = {"limn.Tensor": limn.Tensor, "limn": limn, "limn.nn": limn.nn, "limn.optim": limn.optim}


def listed_names() -> list[tuple[str, str]]:
    """(section, name) for the first cell of every table row of docs/api.md."""
    out, section = [], None
    for line in (ROOT / "docs" / "api.md").read_text().splitlines():
        head = re.match(r"## `([\w.]+)`", line)
        if head:
            section = head.group(1)
        row = re.match(r"\| `([A-Za-z_][\w.]*)", line)
        if row and section:
            out.append((section, row.group(1)))
    return out


def test_every_name_the_api_reference_lists_exists():
    names = listed_names()
    assert len(names) > 300 and {s for s, _ in names} == set(SECTIONS)
    missing = []
    for section, name in names:
        obj = SECTIONS[section]
        for part in name.split(".") if name != section.split(".")[-1] else ():
            obj = getattr(obj, part, None)
        if obj is None:
            missing.append(f"{section}: {name}")
    assert not missing


def test_the_api_reference_lists_every_public_tensor_method():
    listed = {n for s, n in listed_names() if s == "limn.Tensor"}
    public = {n for n in dir(limn.Tensor) if not n.startswith(("_", "p_"))}
    assert public - listed == set()


def test_the_torch_page_shows_the_diff_the_port_test_applies():
    text = (ROOT / "docs" / "torch.md").read_text()
    diff = text.split("```diff\n")[1].split("```")[0].splitlines()
    assert diff == [f"-{a.strip()}" for a, _ in PORT] + [f"+{b.strip()}" for _, b in PORT]


def _commands(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if "uv run" in ln or "uv sync" in ln]


@pytest.mark.parametrize("doc", ["README.md", "docs/distributed.md"])
def test_training_and_mpi_commands_install_the_runtime_not_the_dev_group(doc):
    for line in _commands(ROOT / doc):
        runs = re.search(r"uv run[^`]* python examples/(train_stories|bench_distributed)\.py", line)
        if runs or re.match(r"uv sync .*--extra mpi", line):
            assert "--no-dev" in line or line.startswith("uv sync --extra mpi --extra cuda"), line


def test_the_mpi_and_cuda_extras_install_together_without_one_removing_the_other():
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    doc = (ROOT / "docs" / "distributed.md").read_text()
    assert "uv sync --no-dev --extra mpi --extra cuda" in doc
    r = subprocess.run(
        [uv, "sync", "--dry-run", "--offline", "--extra", "mpi", "--extra", "cuda"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if r.returncode and "offline" in r.stderr.lower():
        pytest.skip(f"uv cannot resolve offline here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    removed = re.findall(r"^ - (\S+)==", r.stdout + r.stderr, re.M)
    assert not [p for p in removed if p.startswith(("nvidia-cuda", "mpi4py", "mpich"))]
