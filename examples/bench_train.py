"""Training-speed benchmark: the kernels real models make, limn's c device against torch and numpy.

One framework per process: limn's OpenMP team, torch's and OpenBLAS's threads spin after
each call and slow whoever runs next in the same process, so each row is timed by a
subprocess per side (``--side limn``, ``--side torch``, ``--side numpy``), the sides'
processes interleaved over ``--rounds`` rounds so a busy machine slows them alike. A row
reports the medians (min..max) of all its repeats and the ratio of the two medians. Matmul
rows also say what fraction of the FMA peak (measured at the start of the run by a C
probe of 16 independent vector FMA chains a thread) they reach:

    OMP_NUM_THREADS=2 uv run python examples/bench_train.py           # the full table
    OMP_NUM_THREADS=2 uv run python examples/bench_train.py --quick   # small sizes, a smoke test
    ... --only gpt,softmax                                            # some rows
    ... --only gpt_compile                  # the captured step against torch.compile (slow)
    ... --side both                         # in one process, calls interleaved: a smoke test
    OMP_NUM_THREADS=1 uv run python examples/bench_train.py --cpu     # 1 thread, CPU time
    uv run --extra cuda python examples/bench_train.py --device cuda  # on a GPU

The references run at their defaults and at their best: torch CPU eager at the same thread
count when torch is installed (torch is a test-only dependency; without it the torch rows
are skipped), with its fused attention (sdpa) against limn's, and torch.compile against
limn's captured step; numpy at its own defaults for the matmul (its BLAS) and the fused
chain. ``ratio`` is reference time / limn time: above 1 limn is faster. Rows with a target
print it and whether this run meets it.

Rows: a GPT training step (vocab 256, context 256, d 192, 6 layers, 6 heads, 4x ReLU MLP,
pre-LN, batch 8, AdamW) with attention composed from matmul and softmax against torch's
manual attention, with fused attention against torch's sdpa, and captured
(``limn.capture``) against sdpa and torch.compile; softmax forward,
cross-entropy forward+backward, LayerNorm forward+backward, two Conv2d+ReLU forward+
backward, an MLP 784-512-512-10 step (captured with ``limn.capture``), float32 matmul in
the three layouts autograd makes (x@W, x@W.T, x.T@g), the fused chain
``((x*2+1).relu().exp()).sum()``, and the first GPT step on an empty compile cache.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

THREADS = os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)
os.environ.setdefault("MKL_NUM_THREADS", THREADS)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import limn  # noqa: E402
from limn import Tensor, nn, optim  # noqa: E402

try:
    import torch
except ImportError:  # torch is a test-only dependency
    torch = None


@dataclass
class Row:
    name: str
    limn_ms: list[float]
    ref_ms: list[float]
    ref: str  # what the reference is
    tokens: int = 0  # tokens per call, for tok/s
    flop: float = 0.0  # per call, for GFLOP/s
    target: float | None = None  # the ratio (ref / limn) this row must reach
    limit_ms: float | None = None  # or the time it must stay under

    def met(self) -> bool | None:
        """Whether this run meets the row's target (None: no target, or no reference)."""
        lm = statistics.median(self.limn_ms)
        if self.limit_ms is not None:
            return lm <= self.limit_ms
        if self.target is None or not self.ref_ms:
            return None
        return statistics.median(self.ref_ms) / lm >= self.target * 0.999

    def line(self) -> str:
        lm = statistics.median(self.limn_ms)
        spread = f"{min(self.limn_ms):.1f}..{max(self.limn_ms):.1f}"
        s = f"{self.name:<46} {lm:>9.2f} ms ({spread:>13})"
        if self.tokens:
            s += f" {self.tokens / lm * 1e3:>8.0f} tok/s"
        elif self.flop:
            s += f" {self.flop / lm / 1e6:>6.1f} GFLOP/s"
            s += f" ({self.flop / lm / 1e6 / PEAK:4.0%} of peak)" if PEAK else ""
        ok = {True: "met", False: "NOT met"}.get(self.met(), "")
        if self.ref_ms:
            rm = statistics.median(self.ref_ms)
            s += f" | {self.ref} {rm:>8.2f} ms  ratio {rm / lm:5.2f}"
            if ok:
                s += f"  (target >= {self.target:g}: {ok})"
        elif self.limit_ms is not None:
            s += f"  (target <= {self.limit_ms:g} ms: {ok})"
        return s


CLOCK = time.perf_counter  # --cpu: time.process_time, the CPU time this process used
TORCH_GPT = "cpu"  # where torch's GPT step runs ("cuda" beside limn's cuda device), or None
SIDE = "both"  # the framework this process times: limn, torch, numpy, or both (one process)
PEAK = 0.0  # the FMA peak in GFLOP/s at this run's thread count, once measured


def interleave(limn_fn, ref_fn, reps: int, warm: int = 1, ref: str = "torch"):
    """Warm, then alternate one limn call and one reference call (``ref`` names its side),
    each only where this process times that side; times in ms."""
    fns = [f if SIDE in ("both", side) else None for f, side in ((limn_fn, "limn"), (ref_fn, ref))]
    for _ in range(warm):
        for f in fns:
            f and f()
    a, b = [], []
    for _ in range(reps):
        for f, out in zip(fns, (a, b)):
            if f:
                t = CLOCK()
                f()
                out.append((CLOCK() - t) * 1e3)
    return a, b


PROBE = r"""
#include <immintrin.h>
#include <omp.h>
void limn_probe(int threads, long n, float *sink) {
  #pragma omp parallel num_threads(threads)
  {
    __m512 a[16], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
    for (int j = 0; j < 16; j++) a[j] = _mm512_set1_ps((float)j);
    for (long i = 0; i < n; i++)
      for (int j = 0; j < 16; j++) a[j] = _mm512_fmadd_ps(a[j], m, c);
    float s = 0;
    for (int j = 0; j < 16; j++) s += _mm512_reduce_add_ps(a[j]);
    sink[omp_get_thread_num() % 64] = s;
  }
}
"""


def fma_peak(threads: int) -> float:
    """GFLOP/s of 16 independent 16-lane FMA chains per thread, the best of 5 runs (0: no
    AVX-512 or no compiler)."""
    try:
        lib = limn.get_device("c").toolchain.library(PROBE)
    except Exception:  # noqa: BLE001 - a machine without AVX-512: no peak to state
        return 0.0
    sink, n = (ctypes.c_float * 64)(), 20_000_000
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        lib.limn_probe(threads, ctypes.c_long(n), sink)
        best = min(best, time.perf_counter() - t)
    return threads * n * 16 * 16 * 2 / best / 1e9


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape, seed: int = 0) -> np.ndarray:
    return rng(seed).standard_normal(shape, dtype=np.float32)


# ---- the GPT ---------------------------------------------------------------------------


class Block(nn.Module):
    """Pre-LN transformer block: causal self-attention and a 4x ReLU MLP."""

    def __init__(self, d: int, heads: int, fused: bool):
        self.heads, self.fused = heads, fused
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            y = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1 / (d // h) ** 0.5)
            y = (att + mask).softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(self.fc1(self.ln2(x)).relu())


class GPT(nn.Module):
    def __init__(self, vocab, ctx, d, layers, heads, fused=False):
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = [Block(d, heads, fused) for _ in range(layers)]
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)
        mask = np.triu(np.full((ctx, ctx), -np.inf, np.float32), 1)
        self.mask, self.positions = Tensor(mask), Tensor(np.arange(ctx))

    def forward(self, idx: Tensor) -> Tensor:
        x = self.tok(idx) + self.pos(self.positions)
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.head(self.ln(x))


def limn_gpt_step(cfg, fused=False, capture=False):
    vocab, ctx, d, layers, heads, batch = cfg
    limn.set_seed(0)
    model = GPT(vocab, ctx, d, layers, heads, fused)
    opt = optim.AdamW(model.parameters(), lr=3e-4)
    idx = Tensor(rng(1).integers(0, vocab, (batch, ctx)))
    tgt = Tensor(rng(2).integers(0, vocab, (batch * ctx,)))

    def step(idx, tgt):
        opt.zero_grad()
        loss = nn.cross_entropy(model(idx).reshape(batch * ctx, vocab), tgt)
        loss.backward()
        opt.step(loss)
        return loss

    run = limn.capture(step) if capture else step
    return lambda: run(idx, tgt).item()


def torch_gpt_step(cfg, sdpa=False, dev="cpu", compile=False):
    vocab, ctx, d, layers, heads, batch = cfg
    F = torch.nn.functional
    torch.manual_seed(0)

    class TBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x, mask):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            q, k, v = (z.reshape(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1 / (d // heads) ** 0.5)
                y = (att + mask).softmax(-1) @ v
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.relu(self.fc1(self.ln2(x))))

    class TGPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(ctx, d)
            self.blocks = torch.nn.ModuleList(TBlock() for _ in range(layers))
            self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)
            self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(ctx, device=idx.device))
            for blk in self.blocks:
                x = blk(x, self.mask)
            return self.head(self.ln(x))

    model = TGPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    forward = torch.compile(model) if compile else model
    idx = torch.from_numpy(rng(1).integers(0, vocab, (batch, ctx))).to(dev)
    tgt = torch.from_numpy(rng(2).integers(0, vocab, (batch * ctx,))).to(dev)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(forward(idx).reshape(batch * ctx, vocab), tgt)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def gpt(cfg, reps) -> list[Row]:
    """Manual attention on both sides, fused on both (torch's sdpa), and limn's fused step
    captured against torch eager sdpa."""
    tokens = cfg[1] * cfg[5]
    name = f"GPT step (ctx {cfg[1]}, d {cfg[2]}, {cfg[3]} layers)"

    def ref(**kw):
        return torch_gpt_step(cfg, dev=TORCH_GPT, **kw) if TORCH_GPT else None

    a, b = interleave(limn_gpt_step(cfg), ref(), reps)
    rows = [Row(name + ", manual attn", a, b, "torch manual", tokens=tokens, target=1.0)]
    sdpa = ref(sdpa=True)
    a, b = interleave(limn_gpt_step(cfg, fused=True), sdpa, reps)
    rows.append(Row("  fused attention", a, b, "torch sdpa", tokens=tokens, target=1.0))
    a, b = interleave(limn_gpt_step(cfg, fused=True, capture=True), sdpa, reps, warm=2)
    rows.append(Row("  fused attention, captured", a, b, "torch sdpa", tokens=tokens, target=1.3))
    return rows


def gpt_compile(cfg, reps) -> Row:
    """limn's captured fused step against torch.compile's (its first calls compile)."""
    ref = torch_gpt_step(cfg, sdpa=True, dev=TORCH_GPT, compile=True) if TORCH_GPT else None
    a, b = interleave(limn_gpt_step(cfg, fused=True, capture=True), ref, reps, warm=2)
    name = f"GPT step (ctx {cfg[1]}, d {cfg[2]}), fused, captured"
    return Row(name, a, b, "torch.compile", tokens=cfg[1] * cfg[5], target=1.0)


def first_step(cfg) -> Row:
    """The first GPT step on an empty disk cache and a device with no plans (schedule + cc)."""
    from limn.runtime.c import CDevice
    from limn.runtime.device import install

    with tempfile.TemporaryDirectory() as tmp:
        old_dir = os.environ.get("LIMN_CACHE_DIR")
        os.environ["LIMN_CACHE_DIR"] = tmp
        old = install("c", CDevice())
        limn.set_device("c")
        try:
            step = limn_gpt_step(cfg)
            t = time.perf_counter()
            step()
            ms = (time.perf_counter() - t) * 1e3
        finally:
            install("c", old)
            limn.set_device("c")
            if old_dir is None:
                del os.environ["LIMN_CACHE_DIR"]
            else:
                os.environ["LIMN_CACHE_DIR"] = old_dir
    return Row("GPT first step, empty cache", [ms], [], "", limit_ms=5000.0)


# ---- single layers ---------------------------------------------------------------------


def softmax(shape, reps) -> Row:
    x = randn(*shape)
    tx = Tensor(x)
    ref = (lambda: torch.softmax(torch.from_numpy(x), -1)) if torch else None
    a, b = interleave(lambda: tx.softmax(-1).realize(), ref, reps)
    return Row(f"softmax fwd {shape}", a, b, "torch", target=0.5)


def cross_entropy(shape, reps) -> Row:
    x = randn(*shape)
    t = rng(3).integers(0, shape[1], shape[0])
    tt = Tensor(t)

    def run():
        logits = Tensor(x, requires_grad=True)
        loss = nn.cross_entropy(logits, tt)
        loss.backward()
        limn.realize(loss, logits.grad)

    def ref():
        logits = torch.from_numpy(x).requires_grad_()
        torch.nn.functional.cross_entropy(logits, torch.from_numpy(t)).backward()

    a, b = interleave(run, ref if torch else None, reps)
    return Row(f"cross_entropy fwd+bwd {shape}", a, b, "torch", target=0.5)


def layernorm(shape, reps) -> Row:
    x, g = randn(*shape), randn(*shape, seed=1)
    limn.set_seed(0)
    layer, tg = nn.LayerNorm(shape[-1]), Tensor(g)

    def run():
        xt = Tensor(x, requires_grad=True)
        y = layer(xt)
        (y * tg).sum().backward()
        limn.realize(y, xt.grad, layer.weight.grad, layer.bias.grad)
        layer.zero_grad()

    ref = None
    if torch:
        tl, tg_ = torch.nn.LayerNorm(shape[-1]), torch.from_numpy(g)

        def ref():
            xt = torch.from_numpy(x).requires_grad_()
            (tl(xt) * tg_).sum().backward()
            tl.zero_grad()

    a, b = interleave(run, ref, reps)
    return Row(f"LayerNorm({shape[-1]}) fwd+bwd {shape}", a, b, "torch", target=0.5)


def conv(shape, reps) -> Row:
    n, c, h, w = shape
    x = randn(*shape)
    limn.set_seed(0)
    c1, c2 = nn.Conv2d(c, 2 * c, 3, padding=1), nn.Conv2d(2 * c, 2 * c, 3, padding=1)

    def run():
        xt = Tensor(x, requires_grad=True)
        y = c2(c1(xt).relu()).relu()
        y.sum().backward()
        limn.realize(y, xt.grad, c1.weight.grad, c2.weight.grad, c1.bias.grad, c2.bias.grad)
        c1.zero_grad()
        c2.zero_grad()

    ref = None
    if torch:
        t1 = torch.nn.Conv2d(c, 2 * c, 3, padding=1)
        t2 = torch.nn.Conv2d(2 * c, 2 * c, 3, padding=1)

        def ref():
            xt = torch.from_numpy(x).requires_grad_()
            t2(t1(xt).relu()).relu().sum().backward()
            t1.zero_grad()
            t2.zero_grad()

    a, b = interleave(run, ref, reps)
    return Row(f"2x Conv2d+relu fwd+bwd {list(shape)}", a, b, "torch", target=0.5)


def mlp(batch, reps) -> Row:
    x = randn(batch, 784)
    y = rng(4).integers(0, 10, batch)
    limn.set_seed(0)
    model = nn.Sequential(
        nn.Linear(784, 512), Tensor.relu, nn.Linear(512, 512), Tensor.relu, nn.Linear(512, 10)
    )
    opt = optim.AdamW(model.parameters(), lr=1e-3)

    @limn.capture
    def step(xb, yb):
        opt.zero_grad()
        loss = nn.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step(loss)
        return loss

    tx, ty = Tensor(x), Tensor(y)
    ref = None
    if torch:
        torch.manual_seed(0)
        tm = torch.nn.Sequential(
            torch.nn.Linear(784, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )
        topt = torch.optim.AdamW(tm.parameters(), lr=1e-3)
        xx, yy = torch.from_numpy(x), torch.from_numpy(y)

        def ref():
            topt.zero_grad()
            torch.nn.functional.cross_entropy(tm(xx), yy).backward()
            topt.step()

    a, b = interleave(lambda: step(tx, ty).numpy(), ref, reps, warm=2)
    return Row(f"MLP 784-512-512-10 step, batch {batch}, capture", a, b, "torch", target=1 / 1.5)


def matmul(n, reps) -> list[Row]:
    """The three layouts, against numpy's BLAS and torch.mm (each in its own process)."""
    a, b = randn(n, n), randn(n, n, seed=1)
    ta, tb = Tensor(a), Tensor(b)
    t = (torch.from_numpy(a), torch.from_numpy(b)) if torch else None
    layouts = {
        "x@W": (lambda: ta @ tb, lambda: a @ b, t and (lambda: t[0] @ t[1])),
        "x@W.T": (lambda: ta @ tb.T, lambda: a @ b.T, t and (lambda: t[0] @ t[1].T)),
        "x.T@g": (lambda: ta.T @ tb, lambda: a.T @ b, t and (lambda: t[0].T @ t[1])),
    }
    rows = []
    for name, (lf, nf, tf) in layouts.items():
        if SIDE in ("both", "limn"):  # four rows by exact sums, no BLAS (its threads spin)
            x, w = {"x@W": (a, b), "x@W.T": (a, b.T), "x.T@g": (a.T, b)}[name]
            got, want = lf().numpy()[:4], np.einsum("ik,kj->ij", x[:4], w)
            err = np.abs(got - want).max() / np.abs(want).max()
            assert err < 1e-5, f"matmul {n} {name}: relative error {err}"
        la, lb = interleave(lambda lf=lf: lf().realize(), nf, reps, ref="numpy")
        rows.append(Row(f"matmul {n} {name}", la, lb, "numpy", flop=2 * n**3, target=0.95))
        _, lt = interleave(None, tf, reps)
        rows.append(
            Row(f"matmul {n} {name} (torch)", la, lt, "torch.mm", flop=2 * n**3, target=0.95)
        )
    return rows


def chain(n, reps) -> Row:
    x = rng(5).random(n, dtype=np.float32)
    tx = Tensor(x)

    def ref():
        return np.exp(np.maximum(x * 2 + 1, 0)).sum()

    if SIDE in ("both", "limn"):
        got, want = tx.mul(2).add(1).relu().exp().sum().item(), ref()
        assert abs(got - want) <= 1e-4 * abs(want), f"fused chain: {got} vs numpy {want}"
    a, b = interleave(lambda: ((tx * 2 + 1).relu().exp()).sum().realize(), ref, reps, ref="numpy")
    return Row(f"fused ((x*2+1).relu().exp()).sum() {n}", a, b, "numpy", target=3.0)


# ---- the table -------------------------------------------------------------------------

FULL = {
    "gpt": (256, 256, 192, 6, 6, 8),
    "gpt_compile": (256, 256, 192, 6, 6, 8),
    "softmax": (8192, 4096),
    "ce": (8192, 4096),
    "layernorm": (8192, 768),
    "conv": (8, 16, 32, 32),
    "mlp": 128,
    "matmul": (256, 1024, 2048),
    "chain": 1 << 24,
    "first": (256, 256, 192, 6, 6, 8),
}
QUICK = {
    "gpt": (64, 32, 32, 2, 2, 2),
    "softmax": (64, 128),
    "ce": (64, 128),
    "layernorm": (64, 96),
    "conv": (2, 4, 8, 8),
    "mlp": 16,
    "matmul": (64,),
    "chain": 1 << 12,
    "first": (64, 32, 32, 2, 2, 2),
}


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, two repeats: a smoke test")
    ap.add_argument("--reps", type=int, default=None, help="timed repeats per row and process")
    ap.add_argument("--rounds", type=int, default=3, help="processes per side and row")
    ap.add_argument(
        "--side",
        default="auto",
        choices=["auto", "both", "limn", "torch", "numpy"],
        help="auto: a process per side, interleaved; both: one process (a smoke test); "
        "limn, torch, numpy: time that side alone and print the rows as JSON",
    )
    ap.add_argument("--only", default="", help=f"comma-separated rows of: {', '.join(FULL)}")
    ap.add_argument(
        "--cpu",
        action="store_true",
        help="one thread each, timed by process CPU time: steadier on a shared machine",
    )
    ap.add_argument(
        "--device",
        default="c",
        choices=["c", "cuda"],
        help="limn's device; on cuda the GPT rows compare torch on the same GPU (when its "
        "build has cuda), the other torch rows are skipped and 'first' is c-only",
    )
    args = ap.parse_args(argv)
    global torch, TORCH_GPT, SIDE
    SIDE = "both" if args.device == "cuda" else args.side
    if SIDE in ("limn", "numpy"):
        torch = None  # never imported into a process that times another framework
    if args.device == "cuda":
        try:
            limn.set_device("cuda")
        except (RuntimeError, OSError) as e:  # no driver or no NVRTC: say why
            sys.exit(f"bench_train: device 'cuda' is not available: {e}")
        TORCH_GPT = "cuda" if torch is not None and torch.cuda.is_available() else None
        torch = None  # the other rows' torch references run on the host
        return _run(ap, args)
    TORCH_GPT = "cpu" if torch is not None else None
    return _run(ap, args)


def _run(ap, args) -> list[Row]:
    sizes = QUICK if args.quick else FULL
    reps = args.reps or (2 if args.quick else 3 if SIDE != "both" else 7)
    only = [s for s in args.only.split(",") if s] or list(sizes)
    for key in only:
        if key not in FULL:
            ap.error(f"--only: unknown row {key!r}; rows are {', '.join(FULL)}")
    sizes = {**FULL, **sizes} if args.quick else sizes  # gpt_compile: no quick size
    if args.device == "cuda":
        only = [s for s in only if s != "first"]  # the empty-cache step times cc
    else:
        limn.set_device("c")
    threads = 1 if args.cpu else int(THREADS)
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter
    if args.cpu:
        try:  # numpy's BLAS reads its thread count at import; threadpoolctl can change it
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        except ImportError:
            pass
    if args.device == "c":
        limn.get_device("c").set_threads(threads)
    if torch:
        torch.set_num_threads(threads)
    if SIDE in ("limn", "torch", "numpy"):
        rows = [r for key in only for r in _rows(RUNNERS[key](sizes[key], reps))]
        print("ROWS " + json.dumps([asdict(r) for r in rows]))
        return rows
    global PEAK
    PEAK = fma_peak(threads) if args.device == "c" else 0.0
    where = f"c ({limn.get_device('c').toolchain.version})" if args.device == "c" else "cuda"
    how = (
        f"{reps} repeats in each of {args.rounds} processes a side, interleaved"
        if SIDE == "auto"
        else f"{reps} interleaved repeats in one process"
    )
    print(
        f"limn {where} vs torch "
        f"{torch.__version__ if torch else TORCH_GPT or '(not installed)'} and numpy "
        f"{np.__version__}; {threads} threads; medians of {how}"
        + (" (CPU time)" if args.cpu else "")
        + (f"; FMA peak {PEAK:.0f} GFLOP/s" if PEAK else "")
    )
    rows: list[Row] = []

    def show(new):
        for r in new if isinstance(new, list) else [new]:
            rows.append(r)
            print(r.line(), flush=True)

    for key in only:
        show(_sides(key, args, reps) if SIDE == "auto" else _rows(RUNNERS[key](sizes[key], reps)))
    print(summary(rows))
    return rows


RUNNERS = {
    "gpt": lambda s, reps: gpt(s, max(2, reps // 2)),
    "gpt_compile": lambda s, reps: gpt_compile(s, max(2, reps // 2)),
    "softmax": softmax,
    "ce": cross_entropy,
    "layernorm": layernorm,
    "conv": conv,
    "mlp": mlp,
    "matmul": lambda s, reps: [r for n in s for r in matmul(n, reps)],
    "chain": chain,
    "first": lambda s, reps: first_step(s) if SIDE in ("both", "limn") else [],
}


def _rows(new) -> list[Row]:
    return new if isinstance(new, list) else [new]


def _sides(key: str, args, reps: int) -> list[Row]:
    """Row ``key`` timed by a process per side, ``--rounds`` times, the order of the sides
    turning each round; every row's repeats gathered from all of them."""
    base = [sys.executable, __file__, "--only", key, "--reps", str(reps), "--device", args.device]
    base += ["--quick"] * args.quick + ["--cpu"] * args.cpu
    rows: dict[str, Row] = {}

    def run(side: str) -> list[dict]:
        out = subprocess.run([*base, "--side", side], capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"bench_train: the {side} process of {key!r} failed:\n{out.stderr}")
        got = json.loads(out.stdout.splitlines()[-1].removeprefix("ROWS "))
        for d in got:
            row = rows.setdefault(d["name"], Row(**{**d, "limn_ms": [], "ref_ms": []}))
            row.limn_ms += d["limn_ms"]
            row.ref_ms += d["ref_ms"]
        return got

    refs = {"numpy" if d["ref"].startswith("numpy") else "torch" for d in run("limn") if d["ref"]}
    refs = sorted(refs if torch else refs - {"torch"})
    for side in refs:
        run(side)
    for r in range(1, args.rounds):
        for side in [*refs, "limn"] if r % 2 else ["limn", *refs]:
            run(side)
    return list(rows.values())


def summary(rows: list[Row]) -> str:
    """The targets of this run: which rows met theirs and which did not."""
    judged = [(r, r.met()) for r in rows if r.met() is not None]
    met = [r.name.strip() for r, ok in judged if ok]
    missed = [r.name.strip() for r, ok in judged if not ok]
    lines = [f"targets: {len(met)} of {len(judged)} met in this run"]
    lines += [f"  NOT met: {name}" for name in missed]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
