"""limn.generate: sample a language model, one token per step.

``limn.generate(model, idx, max_new_tokens, temperature, top_k)`` takes any module whose
forward maps token ids (B, T) to logits (B, T, V) and runs the (cropped) window again for
every new token, as torch programs do; a model that offers a kv cache (below) is sampled
over it instead, one prompt at a time.

Sampling by the window runs the whole (1, ctx) window again for every token. A kv cache
keeps each attention layer's keys and values of the tokens so far instead, in (1, ctx,
embed) tensors of a fixed size: a step embeds one token, writes its key and value at its
position (``KVCache.write``, a select against the position) and attends over the whole
cache, ``key_mask`` marking the filled part. Every step has the same shapes, so one plan
serves them all and costs the same at every position; a hidden key weighs exactly 0, so a
step's logits are the bits the windowed forward gives at its last position.

A model takes part by having ``ctx`` (its context) and ``forward(idx, cache=None)``: with
``cache``, a list of one ``KVCache`` per ``nn.MultiHeadAttention`` (in ``named_modules``
order), ``idx`` is (1, 1) and the token's position is ``cache[0].pos``. When the cache is
full, the text so far is cut to its last ``ctx // 2`` tokens and fed again from position 0.

The sampling rule is written so that a few lines of C compute the same token
(``examples/export_story.py`` does): splitmix64 for the random numbers, the ``top_k``
largest logits by a stable sort (ties in index order), weights exp((logit - max) / T) in
double by the C library's ``exp``, summed in that order, and the first token whose running
sum exceeds u * total for u uniform in [0, 1). Temperature 0 takes the first maximum.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Iterator

import numpy as np

from ir.graph import dtypes
from limn.autograd import no_grad
from limn.capture import capture
from limn.nn import Module, MultiHeadAttention
from limn.tensor import Tensor

MASK64 = (1 << 64) - 1


class KVCache:
    """One attention layer's keys and values, (1, ctx, embed), and this step's position
    ``pos`` ((1,) int32); ``write`` returns the next cache's tensors and keeps them."""

    def __init__(self, k: Tensor, v: Tensor, pos: Tensor):
        self.k, self.v, self.pos = k, v, pos

    def write(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Put one position's key and value (each (1, 1, embed)) at ``pos``; return every
        key, every value and the (1, ctx) mask of the filled part, positions 0..pos."""
        if k.shape != (1, 1, self.k.shape[2]) or v.shape != k.shape:
            raise ValueError(
                f"KVCache.write: key {k.shape} and value {v.shape} must be (1, 1, "
                f"{self.k.shape[2]}): one new position per step"
            )
        ctx = self.k.shape[1]
        cols = Tensor.arange(ctx, dtype=dtypes.int32, device=k.device).reshape(1, ctx)
        here = (cols == self.pos).reshape(1, ctx, 1)
        self.k, self.v = here.where(k, self.k), here.where(v, self.v)
        return self.k, self.v, cols <= self.pos


def step_function(model: Module):
    """``step(token (1, 1) int32, pos (1,) int32, k0, v0, k1, v1, ...)`` -> (logits (1, V),
    k0', v0', ...): one token through ``model`` over the caches, the next caches out."""

    def step(token: Tensor, pos: Tensor, *kv: Tensor):
        caches = [KVCache(kv[i], kv[i + 1], pos) for i in range(0, len(kv), 2)]
        logits = model(token, cache=caches)
        return (logits[:, -1], *[t for c in caches for t in (c.k, c.v)])

    return step


def empty_cache(model: Module) -> list[np.ndarray]:
    """Zeroed keys and values for every attention layer of ``model``: k0, v0, k1, v1, ..."""
    widths = [m.embed_dim for _, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    if not widths:
        raise ValueError(f"generate: {type(model).__name__} has no nn.MultiHeadAttention")
    return [np.zeros((1, model.ctx, e), np.float32) for e in widths for _ in "kv"]


class Rng:
    """splitmix64: a 64-bit state, one add and three xor-shift-multiplies per number."""

    def __init__(self, seed: int):
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self) -> float:
        """A double in [0, 1): the top 53 bits over 2**53."""
        return (self.next() >> 11) * 2.0**-53


def sample(logits: np.ndarray, temperature: float, top_k: int | None, rng: Rng) -> int:
    """One token id from ``logits`` by the rule in the module docstring."""
    logits = np.asarray(logits, np.float32).reshape(-1)
    if temperature <= 0:
        return int(np.argmax(logits))
    order = np.argsort(-logits, kind="stable")[: top_k or logits.size].tolist()
    top = float(logits[order[0]])
    weights = [math.exp((float(logits[i]) - top) / temperature) for i in order]
    total = 0.0
    for w in weights:  # left to right (sum() of floats compensates since Python 3.12)
        total += w
    r, run = rng.uniform() * total, 0.0
    for i, w in zip(order, weights):
        run += w
        if r < run:
            return i
    return order[-1]


def generate(
    model: Module,
    idx,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
):
    """``idx`` followed by ``max_new_tokens`` sampled ids, in its own form: a (B, T) Tensor
    of token ids gives a (B, T + n) Tensor, nested lists give lists; one prompt (a 1-d
    Tensor, a list, bytes) gives one row.

    A model that offers a kv cache (``ctx``, ``nn.MultiHeadAttention`` layers and a
    ``forward(idx, cache=None)``) samples each prompt over it (``stream``); any other module
    whose forward maps (B, T) ids to (B, T, V) logits (or the last position's (B, 1, V),
    or either first in a tuple, as nanoGPT's ``(logits, loss)``) runs the window again
    for every token, all prompts at once, cropped to its context when it names one (``ctx``, or
    nanoGPT's ``block_size`` or ``config.block_size``). Prompt r draws from
    ``Rng(seed + r)``, so a batch of equal prompts gives different samples.
    """
    if not isinstance(idx, Tensor):
        idx = list(idx)
        lengths = {len(p) for p in idx if isinstance(p, list | tuple | np.ndarray)}
        if len(lengths) > 1:
            raise ValueError(
                f"generate: the prompts of a batch must have one length, got lengths "
                f"{sorted(lengths)}; generate each prompt alone, or pad them to one length"
            )
    given = idx.numpy() if isinstance(idx, Tensor) else np.asarray(idx)
    rows = given.reshape(1, -1) if given.ndim == 1 else given
    if rows.ndim != 2 or not rows.shape[1] or rows.dtype.kind not in "iu":
        raise ValueError(
            f"generate: needs integer token ids, at least one token per prompt: (B, T) or "
            f"one prompt as a list; got {rows.dtype}{list(rows.shape)}"
        )
    with no_grad():
        if _has_cache(model):
            out = [
                row.tolist()
                + list(
                    itertools.islice(
                        stream(model, row, temperature, top_k, seed + r), max_new_tokens
                    )
                )
                for r, row in enumerate(rows)
            ]
        else:
            out = _windowed(model, rows, max_new_tokens, temperature, top_k, seed)
    out = np.asarray(out)[0] if given.ndim == 1 else np.asarray(out)
    if not isinstance(idx, Tensor):
        return out.tolist()
    return Tensor(out, dtype=idx.dtype, device=idx.device)


def _has_cache(model) -> bool:
    takes_cache = "cache" in inspect.signature(model.forward).parameters
    attention = any(isinstance(m, MultiHeadAttention) for m in model.modules())
    return hasattr(model, "ctx") and takes_cache and attention


def _windowed(model, rows: np.ndarray, n: int, temperature, top_k, seed) -> list[list[int]]:
    config = getattr(model, "config", None)
    ctx = getattr(model, "ctx", None) or getattr(model, "block_size", None)
    ctx = ctx or getattr(config, "block_size", None)
    rngs = [Rng(seed + r) for r in range(len(rows))]
    out = rows.tolist()
    for _ in range(n):
        window = np.asarray(out, rows.dtype)[:, -ctx:] if ctx else np.asarray(out, rows.dtype)
        logits = model(Tensor(window))
        if isinstance(logits, tuple | list):  # nanoGPT's (logits, loss): the first item
            logits = logits[0]
        b, t = window.shape
        fits = isinstance(logits, Tensor) and logits.ndim == 3
        if not fits or logits.shape[:2] not in ((b, t), (b, 1)):
            got = logits.shape if isinstance(logits, Tensor) else type(logits).__name__
            raise ValueError(
                f"generate: {type(model).__name__} maps ids {window.shape} to {got}; it "
                f"must give logits (B, T, vocab) or the last position's (B, 1, vocab), "
                f"alone or first in a tuple"
            )
        last = logits[:, -1].numpy()
        for r, row in enumerate(out):
            row.append(sample(last[r], temperature, top_k, rngs[r]))
    return out


def stream(
    model: Module, prompt, temperature: float = 1.0, top_k: int | None = None, seed: int = 0
) -> Iterator[int]:
    """Sampled token ids after ``prompt``, one step over the kv cache each (captured on a
    compiled device: every step replays one plan), for as long as they are asked for."""
    tokens = [int(t) for t in prompt]
    if not tokens:
        raise ValueError("generate: the prompt must hold at least one token")
    ctx = model.ctx
    step, rng = capture(step_function(model)), Rng(seed)
    kv = [Tensor(a) for a in empty_cache(model)]
    pos, logits = 0, None

    def push(j: int) -> None:  # feed tokens[j], which follows tokens[:j]
        nonlocal pos
        if pos == ctx:  # full: the last ctx // 2 tokens again, from position 0
            pos = 0
            for kept in tokens[j + 1 - ctx // 2 : j]:
                push_one(kept)
        push_one(tokens[j])

    def push_one(token: int) -> None:
        nonlocal pos, kv, logits
        tok = Tensor(np.array([[token]], np.int32))
        logits, *kv = step(tok, Tensor(np.array([pos], np.int32)), *kv)
        pos += 1

    for j in range(len(tokens)):
        push(j)
    while True:
        tokens.append(sample(logits.numpy(), temperature, top_k, rng))
        yield tokens[-1]
        push(len(tokens) - 1)
