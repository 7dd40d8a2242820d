"""Time float32 reductions over several axes on the c device: ms per call, median (min..max).

    uv run python examples/bench_reduce.py [--reps 7]

Each case reads a realized input (built whole, from slices, or as a view) and folds it;
the plan is compiled before the timed calls. One framework, one process.
"""

import argparse
import time

import numpy as np

import limn
from limn import Tensor, cat


def cases():
    r = np.random.default_rng(0)
    m = r.standard_normal((1024, 1024)).astype(np.float32)
    c = r.standard_normal((64, 256, 256)).astype(np.float32)
    o = r.standard_normal((1000, 1000)).astype(np.float32)
    mt, ot = Tensor(np.ascontiguousarray(m.T)), Tensor(np.ascontiguousarray(o.T))
    halves = [Tensor(o[:500]), Tensor(o[500:])]
    return {
        "1024x1024 sum(0,1)": lambda: Tensor(m).sum((0, 1)),
        "64x256x256 sum(0,1)": lambda: Tensor(c).sum((0, 1)),
        "1024x1024 transposed view sum(0,1)": lambda: mt.permute(1, 0).sum((0, 1)),
        "1000x1000 sum(0,1)": lambda: Tensor(o).sum((0, 1)),
        "1000x1000 from 2 slices sum(0,1)": lambda: cat(halves, 0).sum((0, 1)),
        "1000x1000 transposed view sum(0,1)": lambda: ot.permute(1, 0).sum((0, 1)),
        "1000x1000 var(0,1)": lambda: Tensor(o).var((0, 1)),
        "1000x1000 sum(1)": lambda: Tensor(o).sum(1),
        "1000x1000 transposed view sum(1)": lambda: ot.permute(1, 0).sum(1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    limn.set_device("c")
    for name, build in cases().items():
        build().numpy()  # compile
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            for _ in range(args.calls):
                build().numpy()
            times.append((time.perf_counter() - t) / args.calls * 1e3)
        times.sort()
        med = times[len(times) // 2]
        print(f"{name:38s} {med:8.3f} ms  ({times[0]:.3f}..{times[-1]:.3f})", flush=True)


if __name__ == "__main__":
    main()
