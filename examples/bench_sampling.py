"""Tokens per second of a torch-style sampling loop whose context grows, limn against torch.

    uv run python examples/bench_sampling.py [--rounds 5] [--tokens 100] [--threads 2]
        [--smoke]

No cache: each step runs the whole model on ``idx[:, -ctx:]``, takes the last position's
logits, softmax, ``multinomial`` and ``cat``, as nanoGPT's ``generate`` (and
``examples/torch_gpt.py``) does. So the sequence axis grows by one every step, and every
shape of the forward pass is new: the loop a compiled device must serve without a compile
per length (issue 30's target: at most 3 compiles in 100 tokens after the first step, and
at least half of torch eager's tokens/s).

The model is a 2-layer character transformer (vocab 256, d 64, 4 heads, context 128,
pre-norm blocks, GELU MLP) with random weights, written once against the torch API and
run on torch or, with its imports swapped, on limn's c device (``limn``, ``limn.nn``,
``limn.nn.functional``). Each side runs in a process of its own (this script with
``--worker``), interleaved: every round starts limn, then torch. A worker samples
``--tokens`` tokens after a one-token prompt and reports each step's time; the limn worker
also the plans it built, the cc runs they took (a compile, one per translation unit) and
the seconds it spent building plans, per step. Figures:
medians over the rounds with min..max.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

CFG = dict(vocab=256, d=64, heads=4, layers=2, ctx=128)
SMOKE = dict(vocab=256, d=16, heads=2, layers=1, ctx=16)


def model_for(torch, nn, F, cfg: dict):
    """The model, written once against the torch API (``torch`` may be limn)."""
    d, h, ctx = cfg["d"], cfg["heads"], cfg["ctx"]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.register_buffer("tril", torch.tril(torch.ones(ctx, ctx)))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // h))
            att = F.softmax(att.masked_fill(self.tril[:T, :T] == 0, float("-inf")), dim=-1)
            return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2, self.attn = nn.LayerNorm(d), nn.LayerNorm(d), Attention()
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(cfg["vocab"], d), nn.Embedding(ctx, d)
            self.h = nn.ModuleList([Block() for _ in range(cfg["layers"])])
            self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, cfg["vocab"], bias=False)

        def forward(self, idx):
            pos = torch.arange(0, idx.size(1), dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return Model()


def worker(side: str, cfg: dict, tokens: int, threads: int) -> dict:
    names = {"limn": ("limn", "limn.nn", "limn.nn.functional")}
    names["torch"] = ("torch", "torch.nn", "torch.nn.functional")
    torch, nn, F = (importlib.import_module(n) for n in names[side])
    stats = cc = None
    if side == "limn":
        from limn.runtime import get_device

        torch.set_device("c")
        stats, cc = get_device("c").stats, get_device("c").toolchain.stats
    else:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = model_for(torch, nn, F, cfg)
    idx = torch.zeros((1, 1), dtype=torch.long)
    out: dict[str, list] = {"s": [], "plans": [], "cc": [], "build_s": []}
    with torch.no_grad():
        for _ in range(tokens):
            before = {**stats, "cc": cc["compiles"]} if stats is not None else None
            t = time.perf_counter()
            logits = model(idx[:, -cfg["ctx"] :])[:, -1, :]
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
            int(idx[0, -1])
            out["s"].append(time.perf_counter() - t)
            if stats is not None:
                out["plans"].append(stats["plans"] - before["plans"])
                out["cc"].append(cc["compiles"] - before["cc"])
                out["build_s"].append(stats["build_s"] - before["build_s"])
    return out


def median_range(xs: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="a tiny model, one round: it runs")
    ap.add_argument("--worker", choices=["limn", "torch"])
    args = ap.parse_args()
    cfg = SMOKE if args.smoke else CFG
    if args.worker:
        print(json.dumps(worker(args.worker, cfg, args.tokens, args.threads)))
        return 0
    rounds = 1 if args.smoke else args.rounds
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    got: dict[str, list[dict]] = {"limn": [], "torch": []}
    for _ in range(rounds):
        for side in got:
            cmd = [sys.executable, __file__, "--worker", side, "--tokens", str(args.tokens)]
            cmd += ["--threads", str(args.threads)] + ["--smoke"] * args.smoke
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode:
                sys.exit(f"bench_sampling: the {side} worker failed:\n{r.stderr[-2000:]}")
            got[side].append(json.loads(r.stdout.splitlines()[-1]))
    print(
        f"growing-context sampling, no cache, {cfg}, {args.tokens} tokens after a 1-token "
        f"prompt, {args.threads} threads, {rounds} interleaved rounds, one process per side; "
        "median (min..max)"
    )
    rate = {s: [len(r["s"]) / sum(r["s"]) for r in runs] for s, runs in got.items()}
    for side, runs in got.items():
        line = f"  {side:6} {median_range(rate[side], '{:.1f}')} tok/s"
        if side == "limn":
            later = [sum(r["plans"][1:]) for r in runs]  # plans built after the first step
            build = [sum(r["build_s"]) for r in runs]
            cc = [sum(r["cc"][1:]) for r in runs]
            line += f"   after step 1: plans built {median_range(later, '{:.0f}')}"
            line += f", cc runs {median_range(cc, '{:.0f}')}"
            line += f", building plans: {median_range(build, '{:.1f}')} s"
        print(line)
    ratios = [a / b for a, b in zip(rate["limn"], rate["torch"])]
    later = statistics.median(sum(r["plans"][1:]) for r in got["limn"])
    print(
        f"  limn / torch tok/s per round: {median_range(ratios, '{:.3f}')}x (target >= 0.5: "
        f"{'met' if statistics.median(ratios) >= 0.5 else 'MISSED'}); plans after the first "
        f"step: {later:.0f} (target <= 3: {'met' if later <= 3 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
