"""SciPy's ``permutation_test`` on limn's namespace: the c device's CPU time against the
numpy device's (issue 45's target: at most 2x).

    uv run python examples/bench_permutation.py [--rounds 3] [--resamples 1000] [--cold]

``stats.permutation_test((x, y), mean difference, batch=1, n_resamples=...)`` over arrays
of limn's Array API namespace builds one lazy graph of ``resamples`` small pieces; reading
the p-value plans and runs it. Each device runs in a process of its own (this script with
``--worker``), interleaved over the rounds; a worker reports the CPU seconds (its own
process, threads included) from the call to the p-value read. Plans on disk are off
(``LIMN_PLAN_CACHE=0``), so every round plans; with ``--cold`` each round also gets an empty
compile cache (every unit compiled, as on a fresh machine), else the libraries are
loaded (filled by one c run first). Needs SciPy (the dev environment has it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(device: str, resamples: int) -> dict:
    os.environ["SCIPY_ARRAY_API"] = "1"
    import numpy as np
    from scipy import stats

    import limn

    limn.set_device(device)
    import limn_array as xp

    rng = np.random.default_rng(0)
    x, y = xp.asarray(rng.standard_normal(10)), xp.asarray(rng.standard_normal(10))

    def statistic(a, b, axis=-1):
        return xp.mean(a, axis=axis) - xp.mean(b, axis=axis)

    t0 = time.process_time()
    r = stats.permutation_test(
        (x, y), statistic, n_resamples=resamples, batch=1, vectorized=True,
        random_state=np.random.default_rng(1),
    )  # fmt: skip
    p = float(r.pvalue)
    return {"cpu_s": time.process_time() - t0, "pvalue": p}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--cold", action="store_true", help="an empty compile cache each round")
    ap.add_argument("--worker", choices=["c", "numpy"])
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.resamples)))
        return 0
    got: dict[str, list[dict]] = {"c": [], "numpy": []}
    warm = tempfile.mkdtemp(prefix="limn-bench-")
    if not args.cold:  # a first c run fills the compile cache the rounds load from
        env = {**os.environ, "LIMN_PLAN_CACHE": "0", "LIMN_CACHE_DIR": warm}
        subprocess.run([sys.executable, __file__, "--worker", "c"], capture_output=True, env=env)
    for _ in range(args.rounds):
        cache = tempfile.mkdtemp(prefix="limn-bench-") if args.cold else warm
        env = {**os.environ, "LIMN_PLAN_CACHE": "0", "LIMN_CACHE_DIR": cache}
        for device in got:
            cmd = [sys.executable, __file__, "--worker", device]
            cmd += ["--resamples", str(args.resamples)]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode:
                sys.exit(f"bench_permutation: the {device} worker failed:\n{r.stderr[-2000:]}")
            got[device].append(json.loads(r.stdout.splitlines()[-1]))
    pvalues = {run["pvalue"] for runs in got.values() for run in runs}
    print(
        f"permutation_test, batch=1, {args.resamples} resamples, {args.rounds} interleaved "
        f"rounds, {'an empty' if args.cold else 'a filled'} compile cache, plans built, "
        f"p-values {sorted(pvalues)}; CPU seconds, median (min..max)"
    )
    for device, runs in got.items():
        cpu = [run["cpu_s"] for run in runs]
        print(f"  {device:6} {statistics.median(cpu):.2f} ({min(cpu):.2f}..{max(cpu):.2f}) s")
    ratios = [a["cpu_s"] / b["cpu_s"] for a, b in zip(got["c"], got["numpy"])]
    mid = statistics.median(ratios)
    print(
        f"  c / numpy per round: {mid:.2f}x ({min(ratios):.2f}..{max(ratios):.2f}) "
        f"(target <= 2: {'met' if mid <= 2 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
