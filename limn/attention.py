"""scaled_dot_product_attention: fused where the device has the kernels, composed elsewhere.

The fused path is three CUSTOM nodes (``limn/sdpa.py`` has their numpy reference and says
what each computes): the forward gives the answer and one logsumexp per query row, and
the gradient recomputes the probabilities from it in two passes, one owning dq and one
owning dk and dv. No node of either path is t_q x t_k. A device that registers no
``sdpa`` kernel never sees such a node: the same function spells attention in primitives
instead (a matmul, a masked softmax, a matmul), which is also the oracle the fused path is
tested against.

Where q, k and v are (B, H, t, d) views of (B, t, H * d) tensors (the heads split off a
projection's output, as ``nn.MultiHeadAttention`` makes them), the nodes read those tensors
as they are, in the packed layout of ``limn/sdpa.py`` (``heads`` = H in the params), and
the answer and the gradients come back the same way: no copy into heads and back on
either side of the kernels.

A CUSTOM node has no gradient rule of its own; the fused forward's tensor records
``_sdpa_grad`` as its rule. With ``create_graph=True`` that rule builds the composed backward,
spelled in primitives, so a second derivative exists.
"""

from __future__ import annotations

import math

from ir.graph import compose, dtypes
from ir.graph.node import Node
from ir.graph.ops import Op
from limn import autograd
from limn.runtime.device import get_device
from limn.tensor import Tensor

FUSED = ("sdpa", "sdpa_bwd_q", "sdpa_bwd_kv")


def compute_dtype(d: dtypes.DType) -> dtypes.DType:
    """Where the kernels compute: float64 at its width, every narrower float in float32."""
    return dtypes.float64 if d == dtypes.float64 else dtypes.float32


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, *, is_causal=False, key_mask: Tensor | None = None, scale=None
) -> Tensor:
    """softmax(q @ k.T * scale + mask) @ v over (..., t, d) tensors, as torch defines it.

    ``is_causal`` lets query i see keys 0..i (torch's top-left alignment when
    t_q != t_k); ``key_mask`` is one bool per key, shape broadcastable to (..., t_k),
    True where the key takes part; the two compose. ``scale`` defaults to 1/sqrt(d). A
    query that sees no key gives zeros.
    """
    _check(q, k, v, key_mask)
    batch = compose.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], op="sdpa")
    t_q, d = q.shape[-2:]
    t_k, dv = v.shape[-2:]
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    q = q.expand(*batch, t_q, d)
    k = k.expand(*batch, t_k, d)
    v = v.expand(*batch, t_k, dv)
    if key_mask is not None:
        key_mask = key_mask.expand(*batch, t_k)
    if not fused_on(q.device):
        return composed(q, k, v, is_causal, key_mask, scale)
    packed = [_packed(t) for t in (q, k, v)] if q.ndim == 4 else [None]
    acc = compute_dtype(q.dtype)
    mask = [key_mask] if key_mask is not None else []
    if all(p is not None for p in packed):
        (b, heads), srcs = batch, packed
        outs = [(q.dtype, (b, t_q, heads * dv)), (acc, (b, t_q, heads))]
    else:
        heads, srcs, packed = 0, [q, k, v], None
        outs = [(q.dtype, (*batch, t_q, dv)), (acc, (*batch, t_q))]
    params = (scale, bool(is_causal), heads)
    o_node, lse_node = _custom("sdpa", srcs + mask, params, outs)
    lse = Tensor._make(lse_node, q.device)
    saved = (lse, key_mask, params, packed)
    if packed:
        o_node = _heads(Tensor._make(o_node, q.device), heads).node
    return Tensor._make(o_node, q.device, _sdpa_grad, (q, k, v), saved)


def fused_on(device: str) -> bool:
    return all(get_device(device).has_kernel(n) for n in FUSED)


def _check(q, k, v, key_mask) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.ndim < 2:
            shape = getattr(t, "shape", type(t).__name__)
            raise ValueError(f"sdpa: {name} must be a Tensor of shape (..., t, d), got {shape}")
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_float:
        raise TypeError(
            f"sdpa: q, k, v must share one float dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"sdpa: q {q.shape}, k {k.shape}, v {v.shape} do not fit: need q and k to share "
            f"d (last dim) and k and v to share t_k (second to last)"
        )
    if len({q.device, k.device, v.device}) != 1:
        raise ValueError(f"sdpa: q, k, v live on {q.device}, {k.device}, {v.device}")
    if key_mask is not None:
        if not isinstance(key_mask, Tensor) or key_mask.dtype != dtypes.bool_:
            raise TypeError(
                f"sdpa: key_mask must be a bool Tensor of shape (..., t_k), got "
                f"{getattr(key_mask, 'dtype', type(key_mask).__name__)}"
            )
        if key_mask.ndim < 1 or key_mask.shape[-1] != k.shape[-2]:
            raise ValueError(
                f"sdpa: key_mask {key_mask.shape} must end in t_k={k.shape[-2]} (one flag "
                f"per key), broadcastable to the batch dims"
            )


def _packed(t: Tensor) -> Tensor | None:
    """(B, H, s, w) ``t`` as the (B, s, H * w) tensor it is a view of, where reading that
    costs no copy (it is a node of its own, not a view); None elsewhere."""
    b, h, s, w = t.shape
    p = t.detach().transpose(1, 2).reshape(b, s, h * w)
    return p if p.node.op != Op.VIEW else None


def _heads(p: Tensor, heads: int) -> Tensor:
    """(B, s, H * w) -> the (B, H, s, w) view."""
    b, s, hw = p.shape
    return p.reshape(b, s, heads, hw // heads).transpose(1, 2)


def _custom(name: str, srcs: list[Tensor], params: tuple, outs: list[tuple]) -> list[Node]:
    """One CUSTOM node per output, sharing sources and params: the device runs one call."""
    nodes = tuple(s.node for s in srcs)
    return [
        Node(Op.CUSTOM, d, tuple(shape), nodes, (name, i, params))
        for i, (d, shape) in enumerate(outs)
    ]


# ---- the composed form: primitives only -------------------------------------------


def _visible(q: Tensor, k: Tensor, causal: bool, key_mask: Tensor | None) -> Tensor | None:
    """(..., t_q, t_k) bool, lazily broadcast from a (t_q, t_k) compare and the key flags."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    ok = None
    if causal:
        rows = Tensor.arange(t_q, dtype=dtypes.int32, device=q.device).reshape(t_q, 1)
        cols = Tensor.arange(t_k, dtype=dtypes.int32, device=q.device).reshape(1, t_k)
        ok = cols <= rows
    if key_mask is not None:
        km = key_mask.unsqueeze(-2)
        ok = km if ok is None else ok & km
    return ok


def probabilities(q, k, causal: bool, key_mask, scale: float) -> Tensor:
    """softmax over keys of the scaled, masked scores; an all-masked row is all zeros."""
    s = (q @ k.mT) * scale
    ok = _visible(q, k, causal, key_mask)
    if ok is None:
        return s.softmax(-1)
    s = ok.where(s, -math.inf)
    m = s.amax(-1, keepdim=True).detach()  # any m gives the same p; this one keeps exp finite
    m = (m > -math.inf).where(m, 0.0)
    e = ok.where((s - m).exp(), 0.0)
    den = e.sum(-1, keepdim=True)
    return e / (den > 0).where(den, 1.0)


def composed(q, k, v, causal: bool, key_mask, scale: float) -> Tensor:
    return probabilities(q, k, causal, key_mask, scale) @ v


def composed_grad(q, k, v, g, causal: bool, key_mask, scale: float):
    """dq, dk, dv spelled in primitives (so they can be differentiated again)."""
    p = probabilities(q, k, causal, key_mask, scale)
    dv = p.mT @ g
    dp = g @ v.mT
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    return (ds @ k) * scale, (ds.mT @ q) * scale, dv


# ---- the fused gradient ------------------------------------------------------------


def _sdpa_grad(ctx, out, g):
    q, k, v = ctx.parents
    lse, key_mask, params, packed = ctx.saved
    scale, causal, heads = params
    if autograd.grad_enabled():  # create_graph=True: the backward must itself have a backward
        return composed_grad(q, k, v, g, causal, key_mask, scale)
    acc = compute_dtype(q.dtype)
    g = g if g.dtype == q.dtype else g.cast(q.dtype)
    o = out.detach()
    if packed:  # the packed layout: g and o as (B, t_q, H * dv), delta (B, t_q, H)
        (q, k, v), (g, o) = packed, (_pack(g), _pack(o))
        delta = (g.cast(acc) * o.cast(acc)).reshape(*lse.shape, -1).sum(-1)
    else:
        q, k, v = (t.detach() for t in (q, k, v))
        delta = (g.cast(acc) * o.cast(acc)).sum(-1)
    srcs = [q, k, v, g, lse, delta] + ([key_mask] if key_mask is not None else [])
    (dq,) = _custom("sdpa_bwd_q", srcs, params, [(q.dtype, q.shape)])
    dk, dv = _custom("sdpa_bwd_kv", srcs, params, [(k.dtype, k.shape), (v.dtype, v.shape)])
    grads = [Tensor._make(n, q.device) for n in (dq, dk, dv)]
    return tuple(_heads(t, heads) for t in grads) if packed else tuple(grads)


def _pack(t: Tensor) -> Tensor:
    """(B, H, s, w) -> (B, s, H * w): free where ``t`` is such a view, a copy elsewhere."""
    b, h, s, w = t.shape
    return t.transpose(1, 2).reshape(b, s, h * w)
