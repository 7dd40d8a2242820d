"""What planning a graph costs on the c device, per node, from 100 to 20,000 nodes.

    uv run python examples/bench_planning.py                 # the four curves
    uv run python examples/bench_planning.py --only chain --sizes 100,1000

Four graphs that grow: ``chain``, a permutation test's thousand tiny lazy reductions (a
statistic on each resample of two 10-element arrays, read as one p-value); ``rnn``, a
recurrence unrolled over T steps, forward and backward; ``gpt``, one training step of a
small GPT of L layers (forward, backward, AdamW; its step realizes as it is built, so
building its graph counts in ``plan``, and a second step is a new graph of the same
structure); ``pieces``, a concatenation of n small pieces, summed (a size-generic kernel
that names each piece's sizes: its planning was quadratic in them once). Each size runs
in a fresh process with an empty compile cache and no stored plans, and is realized
twice: the first call plans, compiles and runs; the second finds its plan. A row gives
the graph's nodes (the plan key's rows) and seconds: ``plan``, everything the first call
does but compile and run (walk, decompose, schedule, lower, passes, render, the plan's
recipe), with its parts, ``compile`` (cc, separately: it is spread over the cores), and
the first and second calls whole. ``us/node`` is ``plan`` per node: linear planning
keeps it flat.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {  # the size argument of each graph, about 100 to 20,000 nodes
    "chain": [10, 30, 100, 300, 1000, 2000],
    "rnn": [2, 6, 20, 60, 200, 400],
    "gpt": [1, 2, 4, 8, 16],
    "pieces": [10, 30, 100, 300],
}


def chain(n: int):
    """``n`` resamples of a difference of means, compared with the observed one."""
    import numpy as np

    import limn_array as xp

    rng = np.random.default_rng(0)
    x, y = xp.asarray(rng.standard_normal(10)), xp.asarray(rng.standard_normal(10))
    obs = xp.mean(x) - xp.mean(y)
    stats = []
    for _ in range(n):
        idx = xp.asarray(rng.permutation(10))
        stats.append(xp.mean(xp.take(x, idx)) - xp.mean(xp.take(y, idx)))
    null = xp.stack(stats)
    p = xp.mean(xp.astype(xp.abs(null) >= xp.abs(obs), xp.float64))
    return lambda: float(p)


def rnn(steps: int):
    """An Elman recurrence of width 16 over ``steps`` steps, then the weights' gradients."""
    import numpy as np

    from limn import Tensor

    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((16, 16)).astype(np.float32) * 0.1, requires_grad=True)
    u = Tensor(rng.standard_normal((8, 16)).astype(np.float32) * 0.1, requires_grad=True)
    xs = [Tensor(rng.standard_normal((4, 8)).astype(np.float32)) for _ in range(steps)]
    h = Tensor(np.zeros((4, 16), np.float32))
    for x in xs:
        h = (h @ w + x @ u).tanh()
    (h * h).sum().backward()
    return lambda: (w.grad.numpy(), u.grad.numpy())


def pieces(n: int):
    """One array concatenated from ``n`` small pieces of different lengths, then summed:
    a size-generic kernel of ``n`` pieces (its sizes named one by one), and a reduce."""
    import numpy as np

    import limn_array as xp

    parts = [xp.asarray(np.arange(k + 1, dtype=np.float32)) for k in range(n)]
    total = xp.sum(xp.concat(parts) * 2)
    return lambda: float(total)


def gpt(layers: int):
    """One AdamW step of a GPT (vocab 32, context 8, width 16, 2 heads) of ``layers`` layers."""
    import numpy as np

    from limn import Tensor, nn, optim

    class Block(nn.Module):
        def __init__(self, d):
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            q, k, v = (z.reshape(b, t, 2, d // 2).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1 / (d // 2) ** 0.5)
            y = att.softmax(-1) @ v
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(self.fc1(self.ln2(x)).relu())

    rng = np.random.default_rng(0)
    tok, blocks = nn.Embedding(32, 16), [Block(16) for _ in range(layers)]
    head = nn.Linear(16, 32)
    params = [*tok.parameters(), *head.parameters()]
    for b in blocks:
        params += b.parameters()
    opt = optim.AdamW(params, lr=1e-3)
    idx = Tensor(rng.integers(0, 32, (2, 8)))
    tgt = Tensor(rng.integers(0, 32, (16,)))

    def step():  # the optimizer's step realizes: building the step's graph counts as plan
        x = tok(idx)
        for b in blocks:
            x = b(x)
        nn.cross_entropy(head(x).reshape(16, 32), tgt).backward()
        opt.step()
        return [p.numpy() for p in params]

    return step


def measure(name: str, size: int) -> dict:
    """One row, in this process (which the parent made fresh for it)."""
    import limn
    from limn.runtime import c as cdev
    from limn.runtime import jit

    limn.set_device("c")
    device = limn.runtime.get_device("c")
    spent = {"walk": 0.0, "decompose": 0.0, "schedule": 0.0, "units": 0.0, "compile": 0.0}
    nodes = [0]

    def timed(part, fn, count=False):
        def wrapper(*args, **kw):
            t = time.perf_counter()
            out = fn(*args, **kw)
            spent[part] += time.perf_counter() - t
            if count:
                nodes[0] = max(nodes[0], len(out[0][0]))
            return out

        return wrapper

    jit.walk = timed("walk", jit.walk, count=True)
    jit.decompose = timed("decompose", jit.decompose)
    jit.schedule = timed("schedule", jit.schedule)
    cdev.compile = timed("units", cdev.compile)
    device.toolchain.libraries = timed("compile", device.toolchain.libraries)
    t = time.perf_counter()
    read = {"chain": chain, "rnn": rnn, "gpt": gpt, "pieces": pieces}[name](size)
    built = time.perf_counter() - t
    execute, ran = jit.execute, [0.0]

    def run(*args, **kw):
        t = time.perf_counter()
        out = execute(*args, **kw)
        ran[0] += time.perf_counter() - t
        return out

    jit.execute = run
    t = time.perf_counter()
    read()
    first = time.perf_counter() - t
    parts = dict(spent)
    plan = first - parts["compile"] - ran[0]
    t = time.perf_counter()
    read()
    second = time.perf_counter() - t
    return {"graph": name, "size": size, "nodes": nodes[0], "build_graph_s": built,
            "plan_s": plan, **{f"{k}_s": v for k, v in parts.items()}, "run_s": ran[0],
            "first_s": first, "second_s": second, "kernels": device.stats["kernels"]}  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="chain,rnn,gpt,pieces")
    ap.add_argument("--sizes", default="")
    ap.add_argument("--row", nargs=2, help=argparse.SUPPRESS)  # name size: one row, here
    args = ap.parse_args()
    if args.row:
        print(json.dumps(measure(args.row[0], int(args.row[1]))))
        return
    cols = "plan walk decompose schedule units".split()
    head = ["graph", "size", "nodes", "kernels", "us/node", *cols, "compile", "first", "second"]
    print(" ".join(f"{h:>9s}" for h in head))
    for name in args.only.split(","):
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else SIZES[name]
        for size in sizes:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, LIMN_CACHE_DIR=cache, LIMN_PLAN_CACHE="0")
                done = subprocess.run(
                    [sys.executable, __file__, "--row", name, str(size)],
                    capture_output=True, text=True, env=env, cwd=ROOT,
                )  # fmt: skip
            if done.returncode:
                print(done.stderr[-2000:], file=sys.stderr)
                continue
            r = json.loads(done.stdout.splitlines()[-1])
            per = r["plan_s"] / max(1, r["nodes"]) * 1e6
            cells = [name, size, r["nodes"], r["kernels"], f"{per:.1f}"]
            cells += [f"{r[c + '_s']:.3f}" for c in [*cols, "compile", "first", "second"]]
            print(" ".join(f"{c:>9}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
