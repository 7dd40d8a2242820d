"""xp.sin, exp, tanh (and the other vectorized transcendentals) on the c device against numpy.

Each framework runs in a process of its own (so neither one's threads, caches or allocator
disturb the other), the processes take turns round after round, and each case's figure is
the median over the rounds, printed with its min..max:

    uv run python examples/bench_math.py                 # 5 rounds, 2**22 values
    uv run python examples/bench_math.py --rounds 7 --n 1048576 --funcs sin,exp

In a round a process times each case ``--calls`` times after a warm-up call and reports
the median of those. numpy runs its ufuncs (one thread); the c device runs with its default
threads. The ratio column is the c device's median over numpy's: the target of issue 29 is
at most 1.2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FUNCS = "sin,cos,exp,tanh,log,log1p,expm1,pow"


def _inputs(name: str, dtype: str, n: int) -> list[np.ndarray]:
    """Arguments where each function is neither overflowing nor trivial."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(n) * 3
    if name in ("log", "log1p"):
        x = np.abs(x) + 0.01
    if name == "pow":
        return [np.abs(x).astype(dtype) + 0.5, (rng.standard_normal(n) * 2).astype(dtype)]
    return [x.astype(dtype)]


def _one(framework: str, funcs: list[str], n: int, calls: int) -> dict:
    """This process's median time of each case, in seconds."""
    if framework == "limn":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import limn_array as m

        dev = m.Device("c")

        def put(a):
            return m.asarray(a, device=dev)

        def run(f, args):
            return np.asarray(f(*args))
    else:
        m = np

        def put(a):
            return a

        def run(f, args):
            return f(*args)

    out = {}
    for name in funcs:
        f = getattr(m, "power" if name == "pow" and m is np else name)
        for dtype in ("float32", "float64"):
            args = [put(a) for a in _inputs(name, dtype, n)]
            run(f, args)
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                run(f, args)
                times.append(time.perf_counter() - t)
            out[f"{name} {dtype}"] = statistics.median(times)
    return out


def isa() -> str:
    """The vector ISA the c device compiles for here, from gcc's macros under -march=native."""
    macros = subprocess.run(
        ["gcc", "-march=native", "-dM", "-E", "-"], input="", capture_output=True, text=True
    ).stdout
    for macro, name in (("__AVX512F__", "AVX-512"), ("__AVX2__", "AVX2"), ("__ARM_NEON", "NEON")):
        if f"#define {macro} " in macros:
            return name + (" + FMA" if "#define __FMA__ " in macros else "")
    return "no vector ISA gcc knows"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--n", type=int, default=1 << 22)
    p.add_argument("--funcs", default=FUNCS)
    p.add_argument("--one", help=argparse.SUPPRESS)  # a worker: the framework it times
    a = p.parse_args()
    funcs = a.funcs.split(",")
    if a.one:
        print(json.dumps(_one(a.one, funcs, a.n, a.calls)))
        return
    rounds: dict[str, dict[str, list[float]]] = {"numpy": {}, "limn": {}}
    for _ in range(a.rounds):
        for fw in ("numpy", "limn"):
            cmd = [sys.executable, __file__, "--one", fw, "--n", str(a.n)]
            cmd += ["--calls", str(a.calls), "--funcs", a.funcs]
            got = json.loads(subprocess.check_output(cmd).decode().splitlines()[-1])
            for case, t in got.items():
                rounds[fw].setdefault(case, []).append(t)
    print(f"{a.n} values, {a.rounds} rounds of {a.calls} calls; median ms (min..max); {isa()}")
    print(f"{'case':<16}{'numpy':>22}{'limn c':>22}{'c / numpy':>11}")
    for case, ts in rounds["limn"].items():
        cells = []
        for t in (rounds["numpy"].get(case), ts):
            if t is None:
                cells.append(f"{'-':>22}")
            else:
                lo, mid, hi = min(t) * 1e3, statistics.median(t) * 1e3, max(t) * 1e3
                cells.append(f"{mid:9.2f} ({lo:.2f}..{hi:.2f})".rjust(22))
        ratio = (
            ""
            if case not in rounds["numpy"]
            else statistics.median(ts) / statistics.median(rounds["numpy"][case])
        )
        print(f"{case:<16}{cells[0]}{cells[1]}{ratio if ratio == '' else f'{ratio:10.2f}x'}")


if __name__ == "__main__":
    main()
