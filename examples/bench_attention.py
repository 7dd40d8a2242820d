"""Fused attention against torch, one framework per process, measured as a user measures.

    uv run python examples/bench_attention.py [--T 256 1024 4096] [--rounds 5] [--iters 3]
        [--batch 1] [--heads 6] [--d 32] [--threads N] [--no-compile] [--composed] [--smoke]

Causal attention (float32, batch 1, 6 heads of width 32 by default), the forward alone and
forward + backward, by

* limn fused: ``nn.scaled_dot_product_attention`` on the c device (its CUSTOM kernels);
* torch eager ``F.scaled_dot_product_attention``: the reference, at its defaults;
* torch.compile of the same function, where it compiles (``--no-compile`` skips it);
* limn composed (``--composed``): attention spelled in primitives, for T <= 1024.

Each side runs in a process of its own (this script with ``--worker``), so no two OpenMP
or BLAS thread pools share the cores, and the sides are interleaved: each round starts
every side once, on the same inputs, and the side times ``--iters`` calls after a warm-up
call (which compiles) and reports their median. The figures are the median over the
rounds, with min..max, at least 5 rounds by default. Memory is the worker's peak resident
set over its timed calls above what it held with the inputs made (the high-water mark
reset after the warm-up, so a compile's transient peak is not counted; what the warm-up
left resident is). GFLOP/s counts the work attention needs (the causal half of the score
matrix: 4 t_q t_k d flop forward, 10 t_q t_k d more backward, halved), and each is given
as a fraction of the machine's FMA peak at the same thread count, measured at the start of
the same run by a probe of 16 independent fused multiply-add chains per thread (compiled
here; it agrees with the project's yardstick, probe_peak.py). limn's kernels are also
timed one by one by its profiler in the worker's last call.

``--smoke`` runs one small size, one round, no torch.compile: a check that every side
runs, fast enough for the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PEAK_C = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef float v16 __attribute__((vector_size(64)));
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec;
}
static float chains(long n) {  /* 16 independent FMA chains of 16 lanes */
  v16 a[16], m = (v16){} + 0.999999f, c = (v16){} + 1e-7f;
  for (int i = 0; i < 16; i++) a[i] = (v16){} + (float)i;
  for (long it = 0; it < n; it++)
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) a[i] = a[i] * m + c;
  float s = 0; for (int i = 0; i < 16; i++) s += a[i][0]; return s;
}
int main(int argc, char **argv) {
  int threads = atoi(argv[1]); long n = 20000000; double best = 0; volatile float sink = 0;
  omp_set_num_threads(threads);
  for (int rep = 0; rep < 5; rep++) {
    double t = now();
#pragma omp parallel reduction(+ : sink)
    sink += chains(n);
    t = now() - t;
    double g = 16.0 * 16 * 2 * n * threads / t / 1e9; if (g > best) best = g;
  }
  printf("%.1f\n", best); return 0;
}
"""


def fma_peak(threads: int) -> float:
    """GFLOP/s of ``threads`` threads of fused multiply-adds, the best of 5 runs."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        src.write_text(PEAK_C)
        cmd = [
            "cc",
            "-O2",
            "-march=native",
            "-ffp-contract=fast",
            "-fopenmp",
            str(src),
            "-o",
            str(exe),
        ]
        subprocess.run(cmd, check=True)
        return float(
            subprocess.run(
                [str(exe), str(threads)], capture_output=True, text=True, check=True
            ).stdout
        )


def flops(b: int, h: int, t: int, d: int) -> tuple[float, float]:
    """Forward and forward+backward flop of causal attention over (b, h, t, d), the causal
    half of every t x t product: QK^T and PV forward; S, dP, dV, dK and dQ backward."""
    pairs = b * h * t * (t + 1) / 2
    return 4 * pairs * d, 14 * pairs * d


# ---- a worker: one side, one size, in a process of its own -----------------------------


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the resident set's high-water mark, from now on
    except OSError:
        pass


def worker(side: str, shape: tuple[int, ...], iters: int, threads: int) -> dict:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    if side.startswith("limn"):
        fwd, both, kernels = _limn(side, arrays, threads)
    else:
        fwd, both, kernels = _torch(side, arrays, threads)
    base = _rss("VmRSS:")
    out = {}
    for name, fn in (("fwd", fwd), ("both", both)):
        fn()  # the warm-up: compiles
        _reset_peak()
        ts = []
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        out[name] = statistics.median(ts)
    out["memory"] = max(0, _rss("VmHWM:") - base)
    out["kernels"] = kernels()
    return out


def _limn(side, arrays, threads):
    import limn
    from limn import Tensor, nn
    from limn.attention import composed
    from limn.runtime import profile
    from limn.runtime.device import get_device

    limn.set_device("c")
    if threads:
        get_device("c").set_threads(threads)

    def step(backward: bool):
        q, k, v = (Tensor(a, requires_grad=backward) for a in arrays[:3])
        if side == "limn":
            o = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = composed(q, k, v, True, None, 1 / math.sqrt(q.shape[-1]))
        if not backward:
            return limn.realize(o)
        (o * Tensor(arrays[3])).sum().backward()
        limn.realize(o, q.grad, k.grad, v.grad)

    def kernels():
        """(name, seconds, flop) of each kernel of one fwd+bwd call; the two gradient
        kernels, which run as one call, as one row"""
        prof = profile.profile()
        step(True)
        profile.stop()
        rows = {}
        for r in prof.stats():
            name = r["kernel"]
            if name.startswith("CUSTOM sdpa_bwd"):
                name = "CUSTOM sdpa_bwd_q + sdpa_bwd_kv (one call) " + name.split(" ", 3)[2]
            sec, flop = rows.get(name, (0.0, 0))
            rows[name] = (sec + r["total_s"], flop + r["flop"])
        return sorted(((n, s, f) for n, (s, f) in rows.items()), key=lambda r: -r[1])

    return (lambda: step(False)), (lambda: step(True)), kernels


def _torch(side, arrays, threads):
    import torch
    import torch.nn.functional as F

    if threads:
        torch.set_num_threads(threads)
    attend = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    if side == "torch.compile":
        attend = torch.compile(attend)
    q, k, v = (torch.tensor(a, requires_grad=True) for a in arrays[:3])
    g = torch.tensor(arrays[3])

    def fwd():
        with torch.no_grad():
            attend(q, k, v)

    def both():
        attend(q, k, v).backward(g)

    return fwd, both, list


# ---- the driver ---------------------------------------------------------------------------


def run_worker(side: str, shape, iters: int, threads: int) -> dict | None:
    cmd = [sys.executable, __file__, "--worker", side, "--shape", *map(str, shape)]
    cmd += ["--iters", str(iters), "--threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    got = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if got.returncode != 0:
        print(f"  {side}: failed ({got.stderr.strip().splitlines()[-1:]})", flush=True)
        return None
    return json.loads(got.stdout.strip().splitlines()[-1])


def fmt(ts) -> str:
    return f"{statistics.median(ts) * 1e3:8.2f} ms ({min(ts) * 1e3:.2f}..{max(ts) * 1e3:.2f})"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3, help="timed calls per worker")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="0: the c device's default")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--composed", action="store_true", help="also limn composed, T <= 1024")
    ap.add_argument("--smoke", action="store_true", help="one small size, one round")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--shape", type=int, nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, tuple(args.shape), args.iters, args.threads)))
        return
    if args.smoke:
        args.T, args.rounds, args.iters, args.no_compile = [64], 1, 1, True
    if not args.threads:
        from limn.runtime.c import default_threads

        args.threads = default_threads()
    peak = fma_peak(args.threads)
    print(
        f"causal attention, float32, batch {args.batch}, {args.heads} heads of {args.d}, "
        f"{args.threads} threads; FMA peak measured now: {peak:.0f} GFLOP/s; one process per "
        f"side, {args.rounds} interleaved rounds of {args.iters} timed calls; median (min..max)"
    )
    for T in args.T:
        shape = (args.batch, args.heads, T, args.d)
        sides = ["limn", "torch"] + ([] if args.no_compile else ["torch.compile"])
        sides += ["limn composed"] if args.composed and T <= 1024 else []
        runs = {s: [] for s in sides}
        for _ in range(args.rounds):
            for s in sides:
                got = run_worker(s, shape, args.iters, args.threads)
                if got is not None:
                    runs[s].append(got)
        f_fwd, f_both = flops(args.batch, args.heads, T, args.d)
        print(f"\nT = {T}")
        for s, rs in runs.items():
            if not rs:
                continue
            fwd, both = [r["fwd"] for r in rs], [r["both"] for r in rs]
            mem = statistics.median(r["memory"] for r in rs) / 2**20
            print(
                f"  {s:<14} fwd {fmt(fwd)} {f_fwd / statistics.median(fwd) / 1e9 / peak:5.0%}"
                f"   fwd+bwd {fmt(both)} {f_both / statistics.median(both) / 1e9 / peak:5.0%}"
                f" of peak   memory {mem:7.1f} MB"
            )
        for other in ("torch", "torch.compile"):
            if runs["limn"] and runs.get(other):
                r = [t["both"] / m["both"] for m, t in zip(runs["limn"], runs[other])]
                print(
                    f"  {other} / limn fused, fwd+bwd, per round: {statistics.median(r):.2f}x "
                    f"({min(r):.2f}..{max(r):.2f}; above 1: limn is faster)"
                )
        if runs["limn"]:
            print("  limn's kernels (its profiler, one fwd+bwd call):")
            for name, sec, flop in runs["limn"][-1]["kernels"][:6]:
                work = {"sdpa": f_fwd, "sdpa_bwd_q": f_both - f_fwd}.get(name.split()[1], flop)
                frac = work / sec / 1e9 / peak if sec else 0.0
                print(f"    {sec * 1e3:8.2f} ms {frac:5.0%} of peak  {name}")


if __name__ == "__main__":
    main()
