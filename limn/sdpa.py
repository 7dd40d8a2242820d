"""The numpy reference for the three fused attention kernels: the oracle for every device.

Fused attention is three CUSTOM kernels (``limn/attention.py`` builds the nodes):

* ``sdpa`` (q, k, v [, key_mask]) -> (o, lse): the answer and, per query row, the
  logsumexp of its scaled scores, L = m + log(sum exp(s - m));
* ``sdpa_bwd_q`` (q, k, v, do, lse, delta [, key_mask]) -> (dq,);
* ``sdpa_bwd_kv`` (q, k, v, do, lse, delta [, key_mask]) -> (dk, dv).

``delta`` is rowsum(do * o), one number per query row. Because a probability is
exp(s - L), a compiled backward recomputes the probabilities from L instead of keeping
them; dq sums over keys and dk, dv over queries, hence two kernels. These functions
compute the same quantities a query tile at a time (the backward recomputes each tile's
softmax as the forward made it), so no t_q x t_k array exists here either: the largest
temporary is one tile of rows against every key, and no product is a BLAS call.

The shapes are (..., t_q, d) for q, (..., t_k, d) for k, (..., t_k, dv) for v, and
(..., t_k) of bool for key_mask, every leading dim already equal. Key j is visible to
query i when key_mask[j] holds and, under ``causal``, j <= i (torch's top-left causal
mask, so t_q != t_k aligns the first query with the first key). A query that sees no key
gets o = 0, lse = -inf and zero gradients, as torch gives for a fully masked row.

float16 and bfloat16 compute in float32, as every device does; float32 and float64 at
their own width. ``lse`` and ``delta`` are kept in that compute width.

``params`` is (scale, causal, heads). ``heads`` 0 is the layout above. ``heads`` H > 0 is
the packed layout a projection writes, the heads side by side in each row: q is
(B, t_q, H * d), k (B, t_k, H * d), v (B, t_k, H * dv), and so are o, dq, dk, dv; lse and
delta are (B, t_q, H); key_mask stays (B, H, t_k). Attention then reads the projection's
output and writes what the output projection reads, with no copy into (B, H, t, d) and
back.
"""

from __future__ import annotations

import math

import numpy as np

TILE = 128  # query rows per step
PRODUCT = 1 << 20  # elements _dot multiplies at once (4 MB in float32)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def visible(rows: np.ndarray, t_k: int, causal: bool, key_mask) -> np.ndarray:
    """(..., len(rows), t_k) bool: which keys each of these query rows may attend to."""
    keys = np.arange(t_k)
    ok = np.ones((len(rows), t_k), bool) if not causal else keys[None, :] <= rows[:, None]
    if key_mask is not None:
        ok = ok & key_mask[..., None, :]
    return ok


def _unpack(a: np.ndarray, heads: int) -> np.ndarray:
    """(B, t, H * w) -> (B, H, t, w), or (B, t, H) -> (B, H, t): a view."""
    return np.swapaxes(a.reshape(*a.shape[:2], heads, -1), 1, 2)


def _pack(a: np.ndarray) -> np.ndarray:
    """(B, H, t, w) -> (B, t, H * w)."""
    return np.ascontiguousarray(np.swapaxes(a, 1, 2)).reshape(a.shape[0], a.shape[2], -1)


def _in_layout(kernel):
    """Run ``kernel`` (written for the (..., t, d) layout, params (scale, causal)) on the
    params (scale, causal, heads) of either layout."""

    def run(vals, params):
        scale, causal, heads = params
        if not heads:
            return kernel(vals, (scale, causal))
        n = 4 if len(vals) >= 6 else 3  # q, k, v (and do) are packed rows
        rows = [_unpack(a, heads) for a in vals[:n]]
        if n == 4:  # lse and delta: (B, t, H) -> (B, H, t)
            rows += [np.swapaxes(a, 1, 2) for a in vals[4:6]]
        outs = kernel(rows + list(vals[len(rows) :]), (scale, causal))
        return tuple(np.swapaxes(o, 1, 2).copy() if o.ndim == 3 else _pack(o) for o in outs)

    run.__name__, run.__doc__ = kernel.__name__, kernel.__doc__
    return run


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b.T over the last axes, each cell numpy's sum of its row of products: the same
    bits for a row whatever the other rows and whatever the threads (a BLAS matmul's
    depend on the shape and the thread count), so one query's answer is the bits its row
    gets in a longer block (a kv-cache step's). The products are made PRODUCT at a time,
    so a tile against every key never holds tile x keys x d of them at once."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = np.empty((*batch, a.shape[-2], b.shape[-2]), np.result_type(a, b))
    pair = max(1, math.prod(batch) * a.shape[-1])  # the products of one (row, key) pair
    keys = max(1, min(b.shape[-2], PRODUCT // pair))
    rows = max(1, PRODUCT // (pair * keys))
    for i in range(0, a.shape[-2], rows):
        for j in range(0, b.shape[-2], keys):
            part = np.multiply(a[..., i : i + rows, None, :], b[..., None, j : j + keys, :])
            out[..., i : i + rows, j : j + keys] = part.sum(-1)
    return out


def _probs(q, k, rows, scale, causal, key_mask):
    """These query rows' exp(s - m) against every key (0 where hidden), m, their sum, and
    which keys each row sees."""
    ok = visible(rows, k.shape[-2], causal, key_mask)
    s = np.where(ok, _dot(q[..., rows, :], k) * scale, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isneginf(m), 0, m)
    p = np.where(ok, np.exp(s - m), 0)
    return p, m, p.sum(axis=-1, keepdims=True), ok


def sdpa(vals, params):
    q, k, v = vals[:3]
    key_mask = vals[3] if len(vals) > 3 else None
    scale, causal = params
    acc = compute_dtype(q.dtype)
    q, k, v = (a.astype(acc) for a in (q, k, v))
    o = np.zeros(q.shape[:-1] + v.shape[-1:], acc)
    lse = np.full(q.shape[:-1], -np.inf, acc)
    with np.errstate(all="ignore"):
        for i0 in range(0, q.shape[-2], TILE):
            rows = np.arange(i0, min(i0 + TILE, q.shape[-2]))
            p, m, den, _ = _probs(q, k, rows, acc.type(scale), causal, key_mask)
            seen = den != 0  # a row that sees some key, or a nan row (which stays nan)
            o[..., rows, :] = _dot(p, np.swapaxes(v, -1, -2)) / np.where(seen, den, 1)
            lse[..., rows] = np.where(seen[..., 0], m[..., 0] + np.log(den[..., 0]), -np.inf)
    return o.astype(vals[0].dtype), lse


def _backward(vals, params, want_dq: bool) -> tuple:
    """dq, or dk and dv, a query tile at a time. The probabilities are the forward's own,
    computed again from the scores (not exp(s - lse): with logits in the thousands, lse's
    rounding alone moves every probability by 1e-5 where torch, which keeps them, is
    exact), and every product is ``_dot``'s, so no bit depends on the thread count."""
    acc = compute_dtype(vals[0].dtype)
    q, k, v, do = (a.astype(acc) for a in vals[:4])
    delta, key_mask, (scale, causal) = vals[5], vals[6] if len(vals) > 6 else None, params
    grads = [np.zeros(a.shape, acc) for a in ((q,) if want_dq else (k, v))]
    with np.errstate(all="ignore"):
        for i0 in range(0, q.shape[-2], TILE):
            rows = np.arange(i0, min(i0 + TILE, q.shape[-2]))
            p, _, den, ok = _probs(q, k, rows, acc.type(scale), causal, key_mask)
            p = np.where(ok, p / np.where(den != 0, den, 1), 0)  # a nan row's hidden keys: 0
            ds = p * (_dot(do[..., rows, :], v) - delta[..., rows, None]) * acc.type(scale)
            if want_dq:
                grads[0][..., rows, :] = _dot(ds, np.swapaxes(k, -1, -2))
                continue
            grads[0] += _dot(np.swapaxes(ds, -1, -2), np.swapaxes(q[..., rows, :], -1, -2))
            grads[1] += _dot(np.swapaxes(p, -1, -2), np.swapaxes(do[..., rows, :], -1, -2))
    return tuple(g.astype(vals[0].dtype) for g in grads)


def sdpa_bwd_q(vals, params):
    return _backward(vals, params, True)


def sdpa_bwd_kv(vals, params):
    return _backward(vals, params, False)


KERNELS = {fn.__name__: _in_layout(fn) for fn in (sdpa, sdpa_bwd_q, sdpa_bwd_kv)}
