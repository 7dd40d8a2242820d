"""SciPy's array-API paths on limn arrays (``SCIPY_ARRAY_API=1``) give numpy's answers.

``scipy.signal.oaconvolve`` adds overlapping blocks with ``part += other`` into views of
its result (the case that was silently wrong before views wrote through), ``fftconvolve``
runs limn's FFTs, and the cumulative integrators run its scans and slicing. The flag
must be set before SciPy is first imported, so each device runs in a child process
(``tests/scipy_client.py``). On the c device the two convolutions compile several FFT
plans (about 9 s together with an empty compile cache, 3 s with a warm one, on a loaded
2-core machine), so those two cases there are slow tests (``uv run pytest -m slow``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("scipy")

from limn.runtime import get_device  # noqa: E402

CLIENT = Path(__file__).with_name("scipy_client.py")
FAST = ["cumulative_trapezoid", "cumulative_simpson"]
CONVOLUTIONS = ["oaconvolve", "fftconvolve"]


def _has_c() -> bool:
    try:
        get_device("c")
        return True
    except RuntimeError:
        return False


def run_client(device: str, cases: list[str]) -> list[dict]:
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run(
        [sys.executable, str(CLIENT), device, *cases],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        cwd=CLIENT.parents[1],
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


C = pytest.mark.skipif(not _has_c(), reason="the c device cannot start here")
PARAMS = [
    pytest.param("numpy", FAST + CONVOLUTIONS, id="numpy"),
    pytest.param("c", FAST, id="c-integrate", marks=C),
    pytest.param("c", CONVOLUTIONS, id="c-convolve", marks=[C, pytest.mark.slow]),
    # SciPy's TestKMeans::test_krandinit: a million draws and their covariance (tens of s)
    pytest.param("numpy", ["krandinit"], id="numpy-krandinit", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("device", "cases"), PARAMS)
def test_scipy_on_limn_arrays_matches_scipy_on_numpy(device, cases):
    rows = run_client(device, cases)
    assert [r["case"] for r in rows] == cases
    for r in rows:
        assert r["err"] <= r["tol"], r
