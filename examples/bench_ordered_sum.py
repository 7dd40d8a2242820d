"""The numpy device's ordered sum against np.sum: CPU ms, best of several, and their ratio.

    uv run python examples/bench_ordered_sum.py [--reps 5]

``ir/graph/semantics.ordered_sum`` folds in the order every device folds (logical lanes
of ``LANE_BYTES``, blocks of ``SUM_BLOCK``); np.sum folds in whatever order is fastest. The
issue's yardstick is the first case, a matmul-shaped reduce: within 2x np.sum.
"""

import argparse
import time

import numpy as np

from ir.graph.semantics import ordered_sum

CASES = [  # shape, axes, dtype
    ((100000, 20, 10), (2,), np.float64),
    ((100000, 20, 10), (2,), np.float32),
    ((100000, 20, 10), (0,), np.float64),
    ((100000, 20, 10), (1,), np.float64),
    ((1000, 4096), (1,), np.float64),
    ((1000, 4096), (1,), np.float32),
    ((4096, 1000), (0,), np.float32),
    ((20000, 200), (1,), np.float64),
    ((200000, 33), (1,), np.float64),
    ((4_000_000,), (0,), np.float64),
    ((2000, 2000), (0, 1), np.float32),
    ((64, 256, 256), (0, 1), np.float32),
    ((1000, 1000), (1,), np.complex128),
    ((400, 6), (1,), np.float64),
]


def cpu_ms(f, calls, reps):
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        for _ in range(calls):
            f()
        best = min(best, time.process_time() - t)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'case':34s} {'np.sum':>9s} {'ordered':>9s} {'ratio':>6s}")
    for shape, axes, dt in CASES:
        x = rng.standard_normal(shape).astype(dt)
        calls = max(1, int(2e6 // x.size))  # small cases: enough calls to see them
        base = cpu_ms(lambda x=x, axes=axes: np.sum(x, axis=axes, keepdims=True), calls, args.reps)
        ours = cpu_ms(lambda x=x, axes=axes: ordered_sum(x, axes), calls, args.reps)
        name = f"{shape} axis {axes} {np.dtype(dt).name}"
        print(f"{name:34s} {base / calls:9.3f} {ours / calls:9.3f} {ours / base:6.2f}", flush=True)


if __name__ == "__main__":
    main()
