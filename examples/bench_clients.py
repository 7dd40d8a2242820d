"""Real client code on both devices: tests/test_clients.py's clients, timed one by one.

Each client (scikit-learn under array_api_dispatch, SciPy under SCIPY_ARRAY_API=1) runs
first on the numpy device, then on the c device, first call included, as the test times
them; the c device's plans built, kernels compiled and build seconds (schedule, lower,
passes, render and cc) are printed beside. Run it with an empty compile cache to see what a
user waits for the first time:

    LIMN_CACHE_DIR=$(mktemp -d) uv run python examples/bench_clients.py [name ...]

The last line gives the totals and the ratio the issue's target speaks of (c within 3x).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("SCIPY_ARRAY_API", "1")  # before scipy is imported anywhere
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import numpy as np  # noqa: E402
from test_clients import CLIENTS, YR, X, Y, _timed  # noqa: E402

import limn  # noqa: E402


def main(names: list[str]) -> None:
    c = limn.get_device("c")
    totals = {"numpy": 0.0, "c": 0.0}
    print(f"{'client':<28} {'numpy dev':>9} {'c dev':>9} {'ratio':>6} {'plans':>5} "
          f"{'kernels':>7} {'build':>7}")  # fmt: skip
    for name in names or list(CLIENTS):
        fn = CLIENTS[name]
        want = np.asarray(fn(X, Y, YR))
        got_np, t_np = _timed(fn, "numpy")
        plans, build = c.stats["plans"], c.stats["build_s"]
        before = c.stats["kernels"]
        got_c, t_c = _timed(fn, "c")
        kernels = c.stats["kernels"] - before
        for got in (got_np, got_c):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        totals["numpy"] += t_np
        totals["c"] += t_c
        print(
            f"{name:<28} {t_np:>8.2f}s {t_c:>8.2f}s {t_c / t_np:>5.1f}x "
            f"{c.stats['plans'] - plans:>5} {kernels:>7} {c.stats['build_s'] - build:>6.2f}s"
        )
    tn, tc = totals["numpy"], totals["c"]
    print(f"{'total':<28} {tn:>8.2f}s {tc:>8.2f}s {tc / tn:>5.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
