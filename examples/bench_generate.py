"""Tokens per second of kv-cache generation, limn against torch, one framework per process.

    uv run python examples/bench_generate.py [--rounds 5] [--tokens 100] [--threads 2]
        [--model story|gpt] [--smoke]

The model is train_stories' GPT (byte vocab, learned positions, pre-norm blocks, ReLU MLP)
with random weights: ``story`` is the default story model (ctx 128, d 192, 4 layers, 6
heads), ``gpt`` the 6-layer d 192 GPT at ctx 256. Both sides sample ``--tokens`` bytes
after a one-byte prompt with top-k 40 at temperature 0.8, one token per step:

* limn: ``limn.generate.stream`` on the c device, a fixed-size cache and one captured plan;
* torch eager: the same model in ``torch.nn``, its cache written the usual way (each step's
  key and value concatenated onto the layer's past ones), ``F.scaled_dot_product_attention``
  over them, ``torch.topk`` + ``torch.multinomial``, under ``torch.inference_mode``.

Each side runs in a process of its own (this script with ``--worker``), interleaved: every
round starts limn, then torch. A worker generates once untimed (limn compiles then), then
times a second generation of ``--tokens`` steps; its tokens/s is the steps over their
total, and it reports the median step time over the first and the last quarter of the
positions, which one plan keeps equal. Figures: medians over the rounds with min..max.

``--python`` adds, in a process of its own, the Python of one captured limn step: the
step called over and over with the driver's one C call replaced by a no-op (what is left
is the replay's guard, binding the buffers and wrapping the results), min of 7 x 200 calls.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODELS = {
    "story": dict(ctx=128, d=192, layers=4, heads=6),
    "gpt": dict(ctx=256, d=192, layers=6, heads=6),
}
SMOKE = dict(ctx=16, d=32, layers=1, heads=2)
TEMPERATURE, TOP_K = 0.8, 40


def limn_worker(cfg: dict, tokens: int) -> list[float]:
    sys.path.insert(0, str(Path(__file__).parent))
    from train_stories import GPT

    import limn
    from limn.generate import stream

    limn.set_device("c")
    limn.set_seed(0)
    model = GPT(cfg["ctx"], cfg["d"], cfg["layers"], cfg["heads"])
    for _ in stream(model, [10], TEMPERATURE, TOP_K, seed=1):
        break  # compiles and records the step
    times, it = [], stream(model, [10], TEMPERATURE, TOP_K, seed=2)
    next(it)
    for _ in range(tokens):
        t = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - t)
    return times


def python_worker(cfg: dict) -> list[float]:
    """Microseconds of Python in one captured step, its C call a no-op (``--python``)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import numpy as np
    from train_stories import GPT

    import limn
    from limn.capture import capture
    from limn.generate import empty_cache, step_function
    from limn.runtime.driver import Driver

    limn.set_device("c")
    limn.set_seed(0)
    model = GPT(cfg["ctx"], cfg["d"], cfg["layers"], cfg["heads"])
    step, kv = capture(step_function(model)), [limn.Tensor(a) for a in empty_cache(model)]

    def call():
        nonlocal kv
        token, pos = (limn.Tensor(np.array(a, np.int32)) for a in ([[10]], [3]))
        _, *kv = step(token, pos, *kv)

    call()  # records
    run = Driver.run

    def without_c(self, *args):
        real, self.drive = self.drive, lambda *a: 0
        try:
            return run(self, *args)
        finally:
            self.drive = real

    Driver.run = without_c
    out = []
    for _ in range(8):
        t = time.perf_counter()
        for _ in range(200):
            call()
        out.append((time.perf_counter() - t) / 200 * 1e6)
    return out[1:]  # (the first warms up)


def torch_worker(cfg: dict, tokens: int, threads: int) -> list[float]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    d, h = cfg["d"], cfg["heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, past):
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            if past is not None:
                k, v = torch.cat([past[0], k], 1), torch.cat([past[1], v], 1)
            heads = [t.view(1, t.shape[1], h, d // h).transpose(1, 2) for t in (q, k, v)]
            y = F.scaled_dot_product_attention(*heads, is_causal=past is None)
            x = x + self.proj(y.transpose(1, 2).reshape(1, -1, d))
            return x + self.fc2(self.fc1(self.ln2(x)).relu()), (k, v)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(256, d), nn.Embedding(cfg["ctx"], d)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, 256)

        def forward(self, idx, pos, past):
            x = self.tok(idx) + self.pos(torch.arange(pos, pos + idx.shape[1]))
            out = []
            for block, p in zip(self.blocks, past or [None] * len(self.blocks)):
                x, kv = block(x, p)
                out.append(kv)
            return self.head(self.ln(x))[:, -1], out

    model = Model().eval()
    gen = torch.Generator().manual_seed(2)

    def run(n):
        times, idx, past = [], torch.tensor([[10]]), None
        with torch.inference_mode():
            for pos in range(n + 1):
                t = time.perf_counter()
                logits, past = model(idx, pos, past)
                top, at = torch.topk(logits[0] / TEMPERATURE, TOP_K)
                pick = at[torch.multinomial(torch.softmax(top, -1), 1, generator=gen)]
                idx = pick.view(1, 1)
                int(idx)
                times.append(time.perf_counter() - t)
        return times[1:]

    run(4)
    return run(tokens)


def median_range(xs: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="story")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="a tiny model, one round: it runs")
    ap.add_argument("--python", action="store_true", help="also the Python of a limn step")
    ap.add_argument("--worker", choices=["limn", "torch", "python"])
    args = ap.parse_args()
    cfg = SMOKE if args.smoke else MODELS[args.model]
    if args.tokens >= cfg["ctx"]:
        ap.error(f"--tokens {args.tokens} must be under the model's context {cfg['ctx']}")
    if args.worker:
        if args.worker == "limn":
            times = limn_worker(cfg, args.tokens)
        elif args.worker == "python":
            times = python_worker(cfg)
        else:
            times = torch_worker(cfg, args.tokens, args.threads)
        print(json.dumps(times))
        return 0
    rounds = 1 if args.smoke else args.rounds
    env = {"OMP_NUM_THREADS": str(args.threads)}
    got: dict[str, list[list[float]]] = {"limn": [], "torch": []}
    for _ in range(rounds):
        for side in got:
            cmd = [sys.executable, __file__, "--worker", side, "--tokens", str(args.tokens)]
            cmd += ["--threads", str(args.threads), "--model", args.model] + [
                "--smoke"
            ] * args.smoke
            r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
            if r.returncode:
                sys.exit(f"bench_generate: the {side} worker failed:\n{r.stderr[-2000:]}")
            got[side].append(json.loads(r.stdout.splitlines()[-1]))
    print(
        f"kv-cache generation, {cfg}, {args.tokens} tokens after a 1-byte prompt, top-k "
        f"{TOP_K} at T {TEMPERATURE}, {args.threads} threads, {rounds} interleaved rounds, "
        "one process per side; median (min..max)"
    )
    rate = {s: [len(t) / sum(t) for t in runs] for s, runs in got.items()}
    q = max(1, args.tokens // 4)
    for side, runs in got.items():
        first = [1e3 * statistics.median(t[:q]) for t in runs]
        last = [1e3 * statistics.median(t[-q:]) for t in runs]
        print(
            f"  {side:6} {median_range(rate[side], '{:.0f}')} tok/s   step ms, first quarter "
            f"{median_range(first, '{:.2f}')}, last quarter {median_range(last, '{:.2f}')}"
        )
    if args.python:
        cmd = [sys.executable, __file__, "--worker", "python", "--tokens", str(args.tokens)]
        cmd += ["--model", args.model]
        r = subprocess.run(cmd + ["--smoke"] * args.smoke, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"bench_generate: the python worker failed:\n{r.stderr[-2000:]}")
        us = json.loads(r.stdout.splitlines()[-1])
        print(f"  limn's Python of one captured step, its C call a no-op: min {min(us):.1f} us")
    ratios = [a / b for a, b in zip(rate["limn"], rate["torch"])]
    verdict = "met" if statistics.median(ratios) >= 1.2 else "MISSED"
    print(
        f"  limn / torch tok/s per round: {median_range(ratios, '{:.2f}')}x"
        f"  (issue 38's target >= 1.2: {verdict})"
    )
    return 0 if all(math.isfinite(r) for r in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
