"""Batches taken from a limn tensor, as a training loop takes them: one plan for every batch.

    uv run python examples/bench_batches.py [--rounds 5] [--steps 40]

Three workloads of issue 45, each in a process of its own (this script with ``--worker``),
interleaved over ``--rounds``; figures are medians with min..max:

* ``gather``: a Linear stack trained on batches of 16 rows taken by ``X[int(i)]`` and
  stacked, against the same loop fed the same rows as numpy (``numpy``): the step time of
  steps 5..end, the plans built after the first step, and peak RSS at step 5 and at the
  end (flat means the loop holds no more memory as it goes).
* ``collate``: ``default_collate`` of 1,000 ``TensorDataset`` items (2-d rows and scalar
  targets) against ``np.stack`` of the same rows as numpy arrays.
* ``loader``: a ``DataLoader`` over 1,000 samples in batches of 64, an MLP trained two
  epochs with ``drop_last`` False and True: the plans each builds (the short last batch
  may add one).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def gather(mode: str, steps: int) -> dict:
    import numpy as np

    import limn
    from limn import nn

    limn.manual_seed(0)
    rng = np.random.default_rng(0)
    xn, yn = rng.standard_normal((2000, 64), np.float32), rng.standard_normal((2000, 1), np.float32)
    x, y = limn.tensor(xn), limn.tensor(yn)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
    opt = limn.optim.SGD(model.parameters(), lr=0.01)
    dev = limn.get_device()
    times, rss5, plans1 = [], 0.0, 0
    for step in range(steps):
        idx = rng.integers(0, 2000, 16)
        t0 = time.perf_counter()
        if mode == "gather":
            xb = limn.stack([x[int(i)] for i in idx])
            yb = limn.stack([y[int(i)] for i in idx])
        else:
            xb, yb = limn.tensor(xn[idx]), limn.tensor(yn[idx])
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
        rss5 = _rss_mb() if step == 5 else rss5
        plans1 = dev.stats["plans"] if step == 0 else plans1
    return {
        "step_ms": statistics.median(times[5:]) * 1e3,
        "plans_after_first": dev.stats["plans"] - plans1,
        "rss5": rss5,
        "rss_end": _rss_mb(),
    }


def collate() -> dict:
    import numpy as np

    import limn
    from limn.utils.data import TensorDataset, default_collate

    rng = np.random.default_rng(0)
    xn = rng.standard_normal((5000, 4, 8), np.float32)
    ds = TensorDataset(limn.tensor(xn), limn.tensor(rng.standard_normal(5000, np.float32)))
    best_limn = best_np = float("inf")
    for rep in range(7):
        idx = rng.integers(0, 5000, 1000)
        items, rows = [ds[int(i)] for i in idx], [xn[int(i)] for i in idx]
        t0 = time.perf_counter()
        xb, yb = default_collate(items)
        xb.numpy(), yb.numpy()
        t1 = time.perf_counter()
        np.stack(rows)
        t2 = time.perf_counter()
        if rep:  # the first builds the plan
            best_limn, best_np = min(best_limn, t1 - t0), min(best_np, t2 - t1)
        assert (xb.numpy() == xn[idx]).all()
    return {"collate_ms": best_limn * 1e3, "np_stack_ms": best_np * 1e3}


def loader(drop_last: bool) -> dict:
    import numpy as np

    import limn
    from limn import nn
    from limn.utils.data import DataLoader, TensorDataset

    limn.manual_seed(0)
    rng = np.random.default_rng(0)
    x = limn.tensor(rng.standard_normal((1000, 8), np.float32))
    y = limn.tensor(rng.standard_normal((1000, 1), np.float32))
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = limn.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=drop_last)
    for _ in range(2):
        for xb, yb in data:
            loss = ((model(xb) - yb) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
    return {"plans": limn.get_device().stats["plans"]}


def worker(what: str, steps: int) -> dict:
    if what in ("gather", "numpy"):
        return gather(what, steps)
    if what == "collate":
        return collate()
    return loader(what == "drop_last")


def _span(values) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}..{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.steps)))
        return
    kinds = ("gather", "numpy", "collate", "keep_last", "drop_last")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(a.rounds):
        for k in kinds:
            cmd = [sys.executable, __file__, "--worker", k, "--steps", str(a.steps)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs[k].append(json.loads(out.strip().splitlines()[-1]))
    col = lambda k, f: [r[f] for r in runs[k]]  # noqa: E731
    print(f"batches from a limn tensor, {a.rounds} interleaved rounds, one process each; "
          "median (min..max)")  # fmt: skip
    for k in ("gather", "numpy"):
        print(f"  {k:7} step ms {_span(col(k, 'step_ms'))}  plans after step 1 "
              f"{_span(col(k, 'plans_after_first'))}  peak RSS MB at step 5 "
              f"{_span(col(k, 'rss5'))}, at the end {_span(col(k, 'rss_end'))}")  # fmt: skip
    ratio = [g / n for g, n in zip(col("gather", "step_ms"), col("numpy", "step_ms"))]
    growth = [e / f - 1 for e, f in zip(col("gather", "rss_end"), col("gather", "rss5"))]
    print(f"  gathered / numpy-batch step: {_span(ratio)}x (target <= 2); peak RSS growth "
          f"after step 5: {_span([100 * g for g in growth])}% (target <= 10)")  # fmt: skip
    c = [x / y for x, y in zip(col("collate", "collate_ms"), col("collate", "np_stack_ms"))]
    print(f"  collate 1,000 rows ms {_span(col('collate', 'collate_ms'))}, np.stack ms "
          f"{_span(col('collate', 'np_stack_ms'))}: {_span(c)}x (target <= 10)")  # fmt: skip
    extra = [k - d for k, d in zip(col("keep_last", "plans"), col("drop_last", "plans"))]
    print(f"  DataLoader, two epochs: plans {_span(col('keep_last', 'plans'))} with the short "
          f"batch, {_span(col('drop_last', 'plans'))} without: {_span(extra)} more "
          "(target <= 1)")  # fmt: skip


if __name__ == "__main__":
    main()
