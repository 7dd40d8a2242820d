"""Fused against composed attention, forward and backward, with torch's sdpa in the same run.

    uv run python examples/bench_attention.py [--device c|numpy|cuda] [--T 256 1024 4096]
        [--reps 5] [--composed-max 1024] [--threads N] [--gpt [--share]]

Causal attention over 6 heads of width 32, batch 1. For each T it prints the median time
(min..max over the repeats) of the fused forward and of the fused forward + backward,
the same for the composed form (matmul, masked softmax, matmul, and autograd's backward
of those), and torch's CPU ``scaled_dot_product_attention`` on as many threads (on
``--device cuda``, torch's on the same GPU, when its build has cuda). Memory is
the peak of the training step's intermediates as the plan allocates them: every buffer
the kernels write, alive from the kernel that writes it to the last one that reads it
(the inputs q, k, v and the incoming gradient are not counted). It comes from the
schedule, so it is printed even where the composed form is too big to run
(``--composed-max``).

The targets (issue 12) are checked and printed as met or MISSED: the fused step's
intermediates at T = 4096 under 64 MB; fused forward+backward within 2x of torch's sdpa
at T = 1024 and 4096; with ``--gpt``, the GPT step with fused attention at least 2x the
same step with composed attention, judged for the step called plainly and under
``limn.capture``; torch's same GPT step with manual attention and with its sdpa runs
beside them, so its own ratio for the same swap is printed too (``--share`` also prints
how much of each step is attention and the best ratio the rest of the step allows;
``--T`` with no sizes times the GPT step alone). Timings on a shared machine are noisy:
the ratios are of medians over interleaved repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import time

import numpy as np

import limn
from ir.kernel.schedule import schedule
from limn import Tensor, nn
from limn.attention import FUSED, composed
from limn.runtime.device import get_device

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # torch is a dev dependency: the comparison is optional
    torch = None


def peak_intermediates(roots) -> int:
    """Peak bytes of the plan's live intermediates, in the executor's own allocation order."""
    g = schedule(roots).graph
    keep = {s.buffer for s in g.sinks}
    last = {}
    for i, k in enumerate(g.kernels):
        for b in k.inputs:
            last[b] = i
    live, peak = 0, 0
    sizes = {b: math.prod(s.shape) * s.dtype.itemsize for b, s in enumerate(g.buffers)}
    for i, k in enumerate(g.kernels):
        live += sizes[k.output]
        peak = max(peak, live)
        for b in set(k.inputs):
            if b >= g.n_inputs and last.get(b) == i and b not in keep:
                live -= sizes[b]
    return peak


def timed(fn, reps: int) -> tuple[float, float, float]:
    fn()  # compile and warm
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts), max(ts)


def limn_step(arrays, fused: bool, backward: bool):
    """Build one forward (+ backward) graph; returns the roots to realize."""
    q, k, v = (Tensor(a, requires_grad=backward) for a in arrays[:3])
    if fused:
        o = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        o = composed(q, k, v, True, None, 1 / math.sqrt(q.shape[-1]))
    if not backward:
        return [o]
    (o * Tensor(arrays[3])).sum().backward()
    return [o, q.grad, k.grad, v.grad]


def bench_limn(arrays, fused: bool, reps: int):
    def fwd():
        limn.realize(*limn_step(arrays, fused, False))

    def both():
        limn.realize(*limn_step(arrays, fused, True))

    return timed(fwd, reps), timed(both, reps)


def bench_torch(arrays, reps: int, device: str = "cpu"):
    tq, tk, tv = (torch.tensor(a, requires_grad=True, device=device) for a in arrays[:3])
    g = torch.tensor(arrays[3], device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        sync()

    def both():
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(g)
        sync()

    return timed(fwd, reps), timed(both, reps)


def verdict(ok: bool, what: str) -> str:
    return f"  target {'met' if ok else 'MISSED'}: {what}"


def fmt(t) -> str:
    med, lo, hi = t
    return f"{med * 1e3:8.1f} ms ({lo * 1e3:.0f}..{hi * 1e3:.0f})"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="c", choices=["c", "numpy", "cuda"])
    ap.add_argument("--T", type=int, nargs="*", default=[256, 1024, 4096])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--composed-max", type=int, default=1024, help="largest T to time composed")
    ap.add_argument(
        "--gpt", action="store_true", help="also time a GPT training step, fused vs composed"
    )
    ap.add_argument(
        "--share",
        action="store_true",
        help="with --gpt: profile every step and print attention's share and the bound it sets",
    )
    ap.add_argument(
        "--threads", type=int, default=0, help="the c device's threads (0: its default)"
    )
    args = ap.parse_args(argv)
    try:
        limn.set_device(args.device)
    except (RuntimeError, OSError) as e:  # cuda without a driver or NVRTC says why
        sys.exit(f"bench_attention: device {args.device!r} is not available: {e}")
    dev = get_device(args.device)
    if args.threads and hasattr(dev, "set_threads"):
        dev.set_threads(args.threads)
    threads = getattr(dev, "threads", 1)
    # on cuda, torch's sdpa runs on the same GPU when its build has one, else it is skipped
    torch_on = "cuda" if args.device == "cuda" else "cpu"
    ref = torch
    if ref is not None and torch_on == "cuda" and not ref.cuda.is_available():
        print("this torch build has no cuda: its rows are skipped")
        ref = None
    if ref is not None:
        ref.set_num_threads(threads)
    print(
        f"causal attention, batch 1, {args.heads} heads, d {args.d}, on {args.device} "
        f"({threads} threads); torch {torch.__version__ if torch else 'not installed'}"
    )
    rng = np.random.default_rng(0)
    for T in args.T:
        shape = (1, args.heads, T, args.d)
        arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
        print(f"\nT = {T}")
        rows = {}
        for fused in (True, False):
            name = "fused" if fused else "composed"
            mem = peak_intermediates([r.node for r in limn_step(arrays, fused, True)])
            run = fused or T <= args.composed_max
            fwd = both = None
            if run:
                fwd, both = bench_limn(arrays, fused, args.reps)
                rows[name] = both[0]
            rows[name + " memory"] = mem
            line = f"  limn {name:<9} step memory {mem / 2**20:9.1f} MB"
            if run:
                line += f"   fwd {fmt(fwd)}   fwd+bwd {fmt(both)}"
            else:
                line += "   (not timed: above --composed-max)"
            print(line, flush=True)
        if ref is not None:
            tf, tb = bench_torch(arrays, args.reps, torch_on)
            rows["torch"] = tb[0]
            print(f"  torch sdpa{'':<24}   fwd {fmt(tf)}   fwd+bwd {fmt(tb)}")
        ratios = []
        if "torch" in rows:
            ratios.append(f"fused / torch {rows['fused'] / rows['torch']:.2f}x (target <= 2)")
        if "composed" in rows:
            ratios.append(f"composed / fused {rows['composed'] / rows['fused']:.1f}x")
        if ratios:
            print("  fwd+bwd: " + ", ".join(ratios))
        if T == 4096:
            mb = rows["fused memory"] / 2**20
            print(verdict(mb < 64, f"fused step intermediates at T=4096 {mb:.1f} MB < 64 MB"))
        if T in (1024, 4096) and "torch" in rows:
            r = rows["fused"] / rows["torch"]
            print(verdict(r <= 2, f"fused fwd+bwd at T={T} within 2x of torch sdpa ({r:.2f}x)"))
    if args.gpt:
        gpt_step(dev, args.reps, share=args.share, torch_on=torch_on if ref is not None else None)


@contextlib.contextmanager
def composed_attention(dev):
    """The device without its sdpa kernels, so attention is spelled in primitives."""
    saved = {n: dev.kernels.pop(n) for n in FUSED if n in dev.kernels}
    try:
        yield
    finally:
        dev.kernels.update(saved)


def gpt_step(
    dev, reps: int, ctx=256, d=192, layers=6, heads=6, batch=8, share=False, torch_on="cpu"
) -> None:
    """One AdamW step of a byte-level GPT (ReLU MLP, pre-norm), fused against composed
    attention, each called plainly and under ``limn.capture`` (as train_stories runs it),
    and torch's same GPT (``bench_train.torch_gpt_step``) with manual attention and with
    its sdpa: all six interleaved, one of each per repeat, so all see the same load.
    ``torch_on`` is where torch runs (None: not at all).

    With ``share`` every plain step runs under the kernel profiler, and each variant's
    attention is the kernels that its step has and the other's has not (the CUSTOM nodes,
    their delta and the projections' bias adds, against the t x t maps and reductions
    and the head copies): the rest of each step (wall time less those) is common work.
    Amdahl's bound for the target is the composed step over the fused step's rest: the
    ratio fused attention would give if it cost nothing."""
    from collections import Counter

    from limn import optim
    from limn.runtime import profile

    rng = np.random.default_rng(1)
    x = Tensor(rng.integers(0, 256, (batch, ctx)).astype(np.int32))
    y = Tensor(rng.integers(0, 256, (batch * ctx,)).astype(np.int32))
    steps = {}
    for name in ("fused", "composed"):
        limn.set_seed(0)
        blocks = [nn.GPTBlock(d, heads, activation="relu") for _ in range(layers)]
        tok, pos, ln, head = (
            nn.Embedding(256, d),
            nn.Embedding(ctx, d),
            nn.LayerNorm(d),
            nn.Linear(d, 256),
        )
        model = [tok, pos, ln, head, *blocks]
        opt = optim.AdamW([p for m in model for p in m.parameters()], lr=1e-3)

        def step(blocks=blocks, tok=tok, pos=pos, ln=ln, head=head, opt=opt):
            opt.zero_grad()
            h = tok(x) + pos(Tensor.arange(ctx, dtype="int32"))
            for b in blocks:
                h = b(h)
            loss = nn.cross_entropy(head(ln(h)).reshape(-1, 256), y)
            loss.backward()
            opt.step(loss)
            return loss

        steps[name] = step
        steps[name + " captured"] = limn.capture(step)
    if torch is not None and torch_on is not None:
        for name, fused in (("torch manual", False), ("torch sdpa", True)):
            steps[name] = torch_gpt((256, ctx, d, layers, heads, batch), sdpa=fused, where=torch_on)

    def run(name):
        """(wall seconds, {kernel name: (calls, seconds)} or None) of one step"""
        composing = name.startswith("composed")
        with composed_attention(dev) if composing else contextlib.nullcontext():
            prof = profile.profile() if share and name in ("fused", "composed") else None
            t = time.perf_counter()
            steps[name]()
            wall = time.perf_counter() - t
            if prof is None:
                return wall, None
            profile.stop()
        per = {}
        for r in prof.stats():
            c, sec = per.get(r["kernel"], (0, 0.0))
            per[r["kernel"]] = (c + r["calls"], sec + r["total_s"])
        return wall, per

    own = {}
    for name in steps:  # the first call compiles (records, for a captured step), the second
        own[name] = run(name)[1]  # replays; the plain ones find each variant's kernels
        run(name)
    if share:
        calls = {n: Counter({k: c for k, (c, _) in own[n].items()}) for n in ("fused", "composed")}
        own = {"fused": calls["fused"] - calls["composed"]}
        own["composed"] = calls["composed"] - calls["fused"]
    times = {name: [] for name in steps}
    attn = {"fused": [], "composed": []}
    for _ in range(reps):
        for name in steps:
            wall, per = run(name)
            times[name].append(wall)
            if per is not None:  # the kernels only this variant has, pro rata by calls
                attn[name].append(
                    sum(sec * min(1, own[name][k] / c) for k, (c, sec) in per.items())
                )
    med = {n: statistics.median(t) for n, t in times.items()}
    tok_n = batch * ctx
    print(
        f"\nGPT step (ctx {ctx}, d {d}, {layers} layers, {heads} heads, batch {batch}, AdamW), "
        f"median (min..max) of {reps} interleaved repeats:"
    )
    for n in steps:
        print(
            f"  {n:<18} {fmt((med[n], min(times[n]), max(times[n])))}  {tok_n / med[n]:7.0f} tok/s"
        )
    ratios = {
        "plain": med["composed"] / med["fused"],
        "captured": med["composed captured"] / med["fused captured"],
    }
    print(
        f"  composed / fused: {ratios['plain']:.2f}x plain, {ratios['captured']:.2f}x captured; "
        f"capture speeds the fused step {med['fused'] / med['fused captured']:.2f}x"
    )
    if "torch sdpa" in med:
        print(
            f"  torch manual / torch sdpa: {med['torch manual'] / med['torch sdpa']:.2f}x (the "
            f"same swap in torch); torch sdpa / limn fused captured: "
            f"{med['torch sdpa'] / med['fused captured']:.2f}x (above 1 limn is faster)"
        )
    if share:
        rest = {n: [w - a for w, a in zip(times[n], attn[n])] for n in attn}
        for n in attn:
            a, r = statistics.median(attn[n]), statistics.median(rest[n])
            print(
                f"  {n:<9} attention {a * 1e3:6.1f} ms ({min(attn[n]) * 1e3:.0f}.."
                f"{max(attn[n]) * 1e3:.0f}), {100 * a / med[n]:.0f}% of the plain step; the "
                f"rest {r * 1e3:6.1f} ms ({min(rest[n]) * 1e3:.0f}..{max(rest[n]) * 1e3:.0f})"
            )
        bound = med["composed"] / statistics.median(rest["fused"])
        print(
            f"  Amdahl: even free fused attention gives at most composed / fused rest = "
            f"{bound:.2f}x"
        )
    for mode, r in ratios.items():
        print(verdict(r >= 2, f"GPT step with fused attention >= 2x composed, {mode} ({r:.2f}x)"))


def torch_gpt(cfg, sdpa: bool, where: str):
    """torch's GPT step of bench_train.py (the same model), on ``where``; timed by its
    ``loss.item()``, which waits for the step."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / "bench_train.py"
    spec = importlib.util.spec_from_file_location("bench_train", path)
    module = sys.modules.get("bench_train")
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_train"] = module
        spec.loader.exec_module(module)
    return module.torch_gpt_step(cfg, sdpa=sdpa, dev=where)


if __name__ == "__main__":
    main()
