"""CI: its compiled pass checks limn_array on the c device, and its line budget counts and
fails as ``.ci/loc.py`` says."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import limn

ROOT = Path(__file__).parents[1]


def _collected(env_device: str | None, args=("-m", "pytest", "-q")) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "LIMN_DEVICE"}
    if env_device is not None:
        env["LIMN_DEVICE"] = env_device
    out = subprocess.run(
        [sys.executable, *args, "--collect-only", "tests/test_array_api.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def _compiled_pass() -> tuple[str, list[str]]:
    """The device and the pytest arguments of the line of ``.ci/run`` that runs the suite
    with ``LIMN_DEVICE`` set (its own words, parsed, not matched against a string)."""
    runs = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if line.startswith("LIMN_DEVICE="):  # a command, not a comment or a log line
            runs.append(shlex.split(line, comments=True))
    assert len(runs) == 1, runs
    env, uv, run, pytest_, *args = runs[0]
    assert (uv, run, pytest_) == ("uv", "run", "pytest"), runs[0]
    return env.split("=", 1)[1], args


def test_the_compiled_ci_pass_runs_every_array_api_test_on_the_c_device():
    """CI's own command line (its device and arguments) collects each array API test with
    the c device as a parameter; the default run keeps the numpy reference only."""
    try:
        limn.get_device("c")
    except (ValueError, RuntimeError, OSError) as e:
        pytest.skip(f"c device: {e}")
    device, args = _compiled_pass()
    assert device == "c"
    on_c = _collected(device, ("-m", "pytest", *args))
    tests = {re.sub(r"\[.*", "", t) for t in on_c}
    with_c = {re.sub(r"\[.*", "", t) for t in on_c if re.search(r"\[(c|c-.*)\]$", t)}
    assert tests and with_c == tests, sorted(tests - with_c)
    assert not [t for t in _collected(None) if re.search(r"\[(c|c-.*)\]$", t)]


def _loc():
    spec = importlib.util.spec_from_file_location("loc", ROOT / ".ci" / "loc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_line_count_takes_lines_holding_code_not_docstrings_comments_or_blanks():
    src = '''"""A module docstring,
over two lines."""

import os  # a comment


def f(x):
    """Its docstring."""
    # a comment line
    s = """a string that is
a value, over two lines"""
    return (x,
            s)
'''
    # import, def, s = (two lines), return (two lines)
    assert _loc().python_lines(src) == 6


def _tree(tmp_path: Path, lines: int, c_lines: int = 0, surface: int = 0) -> Path:
    for pkg in ("ir", "limn", "limn/runtime", "limn_array"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "ir" / "a.py").write_text("".join(f"x{i} = {i}\n" for i in range(lines)))
    (tmp_path / "limn" / "runtime" / "k.c").write_text("int x;\n\n" * c_lines)
    (tmp_path / "limn" / "nn.py").write_text("".join(f"y{i} = {i}\n" for i in range(surface)))
    return tmp_path


def _budget(root: Path, budget: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / ".ci" / "loc.py"), "-q", "--root", str(root)]
    return subprocess.run(cmd + ["--budget", str(budget)], capture_output=True, text=True)


def test_the_line_budget_fails_above_it_and_on_a_file_over_600_lines(tmp_path):
    # 300 Python lines in ir/, 20 non-blank C lines in the runtime: the core; 50 lines of
    # torch surface are counted apart and never fail the budget
    root = _tree(tmp_path, 300, c_lines=20, surface=50)
    ok, over = _budget(root, 320), _budget(root, 319)
    assert ok.returncode == 0 and "core: ir 300  limn/runtime 20 total 320 / 320" in ok.stdout
    assert "surface: limn 50  limn_array 0 total 50" in ok.stdout
    assert over.returncode == 1 and "over the line budget by 1" in over.stdout
    (tmp_path / "long").mkdir()
    long = _budget(_tree(tmp_path / "long", 601), 10**6)
    assert long.returncode == 1 and "ir/a.py: over 600 lines" in long.stdout


def test_the_core_is_within_its_line_budget():
    """What CI's budget step runs (``.ci/loc.py -q``), on this tree."""
    out = _budget(ROOT, _loc().BUDGET)
    assert out.returncode == 0, out.stdout
