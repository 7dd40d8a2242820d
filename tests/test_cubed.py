"""limn_array as cubed's chunk namespace: cubed computations on the c device, held to numpy.

tests/cubed_worker.py runs them in a fresh interpreter (cubed picks its backend when it is
imported), with limn_array chunks on the c device, under cubed's single-threaded executor
and (slow: its workers spawn and import everything again) its processes executor.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cubed")
sys.path.insert(0, str(Path(__file__).parent))
import cubed_worker  # noqa: E402

WORKER = Path(__file__).parent / "cubed_worker.py"


@pytest.fixture(
    scope="module",
    params=["single", pytest.param("processes", marks=pytest.mark.slow)],  # spawns: ~20 s
)
def computed(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("cubed") / "results.npz"
    env = {
        **os.environ,
        "CUBED_BACKEND_ARRAY_API_MODULE": "limn_array",
        "LIMN_DEVICE": "c",
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [sys.executable, str(WORKER), str(out), request.param], env=env, capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr[-6000:]
    with np.load(out) as f:
        return dict(f)


def expected() -> dict[str, np.ndarray]:
    d = cubed_worker.inputs()
    a, b, i = d["a"], d["b"], d["i"]
    return {
        "elementwise": np.exp(np.sin(a)) * 2 - np.sqrt(np.abs(a)) / (a * a + 1),
        "int_math": (i * 3 + 7) // 4 - (i % 5),
        "sum_axis0": a.sum(axis=0),
        "max_axis1": a.max(axis=1),
        "mean": np.mean(a),
        "int_sum": i.sum(axis=1),
        "matmul": a @ b,
        "rechunk": (a + 1) * 0.5,
        "var_axis0": a.var(axis=0, ddof=1),
        "std": a.std(),
        "argmax_axis1": a.argmax(axis=1),
        "argmin_axis0": a.argmin(axis=0),
        "ones_cpu": 1 + a,
    }


@pytest.mark.parametrize("name", list(expected()))
def test_a_cubed_computation_over_limn_array_chunks_matches_numpy(computed, name):
    want = expected()[name]
    got = computed[name]
    assert str(computed[f"{name}.type"]).startswith("limn_array")
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:  # a few ulps: sin and exp are limn's own, and chunked sums add in another order
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["numpy", "c"])
def test_cubeds_own_array_api_tests_pass_over_limn_array_chunks(device, tmp_path):
    """Every operation of cubed's own Array API tests (its tests/test_array_api.py), with
    limn_array as the chunk namespace, on the single-threaded executor (the others run the
    same chunk functions; the worker above covers processes). Cloud stores are left out."""
    import cubed

    tests = Path(cubed.__file__).parent / "tests" / "test_array_api.py"
    env = {**os.environ, "CUBED_BACKEND_ARRAY_API_MODULE": "limn_array", "LIMN_DEVICE": device}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--assert=plain",
         "--tb=short", str(tests), "-k", "not threads and not processes and not cloud"],
        env=env, capture_output=True, text=True, timeout=1200, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-6000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-2000:]
