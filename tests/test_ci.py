"""CI's compiled pass checks limn_array on the c device, not only on the numpy reference."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import limn

ROOT = Path(__file__).parents[1]


def _collected(env_device: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "LIMN_DEVICE"}
    if env_device is not None:
        env["LIMN_DEVICE"] = env_device
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/test_array_api.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_the_compiled_ci_pass_runs_every_array_api_test_on_the_c_device():
    try:
        limn.get_device("c")
    except (ValueError, RuntimeError, OSError) as e:
        pytest.skip(f"c device: {e}")
    assert "LIMN_DEVICE=c uv run pytest" in (ROOT / ".ci" / "run").read_text()
    on_c = _collected("c")
    tests = {re.sub(r"\[.*", "", t) for t in on_c}
    with_c = {re.sub(r"\[.*", "", t) for t in on_c if re.search(r"\[(c|c-.*)\]$", t)}
    assert tests and with_c == tests, sorted(tests - with_c)
    # the default run keeps them slow: the numpy reference only
    assert not [t for t in _collected(None) if re.search(r"\[(c|c-.*)\]$", t)]
