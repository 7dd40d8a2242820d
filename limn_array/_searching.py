"""Searching functions: argmax/argmin, where, nonzero, count_nonzero, searchsorted.

``argmax`` is ``ir/graph/compose.py``'s first-index-of-the-max; ``where`` is WHERE after the
standard's promotion; ``searchsorted`` is numpy's on a host device (one CUSTOM node) and
elsewhere a binary search of log2(n + 1) GATHER steps per query (O(m log n) work, lazy).
``nonzero`` has a data-dependent shape: the count of nonzeros is computed, and the
positions are then gathered lazily (see ``_indexing.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ir.graph import compose, dtypes, functions
from limn_array._array import Array, lift, on_host, wrap
from limn_array._data_types import cast, check_dtype, convert
from limn_array._elementwise import _as_array, operands
from limn_array._indexing import _flat_positions, running_count, take
from limn_array._linalg import KERNELS, _custom, _kernel

INDEX = dtypes.int64


def _arg(x: Array, axis, keepdims: bool, fn, op: str) -> Array:
    check_dtype(x, "real numeric", op)
    if x.size == 0:
        raise ValueError(f"{op}: an empty array has no {op[3:]}imum")
    t = x._t
    if axis is None:
        r = fn(t.p_reshape((x.size,)), 0, False)
        return wrap(r.p_reshape((1,) * x.ndim) if keepdims else r)
    return wrap(fn(t, compose.normalize_axis(axis, x.ndim, op), keepdims))


def argmax(x: Array, /, *, axis: int | None = None, keepdims: bool = False) -> Array:
    return _arg(x, axis, keepdims, compose.argmax, "argmax")


def argmin(x: Array, /, *, axis: int | None = None, keepdims: bool = False) -> Array:
    return _arg(x, axis, keepdims, compose.argmin, "argmin")


def where(condition: Array, x1, x2, /) -> Array:
    if not isinstance(condition, Array) or condition.dtype != dtypes.bool_:
        raise TypeError("where: the condition must be a bool array")
    if not isinstance(x1, Array) and not isinstance(x2, Array):
        raise TypeError("where: x1 and x2 cannot both be scalars")
    a, b = operands("where", x1, x2, "any")
    shape = compose.broadcast_shapes(condition.shape, a.shape, op="where")
    c = compose.expand_to(condition._t, shape)
    a = lift(lambda t: compose.expand_to(t, shape), a)
    b = lift(lambda t: compose.expand_to(t, shape), b)
    return lift(lambda s, t: c.p_where(s, t), a, b)


def count_nonzero(x: Array, /, *, axis=None, keepdims: bool = False) -> Array:
    truth = convert(x, dtypes.bool_)._t.p_cast(INDEX)
    axes = compose.normalize_axes(axis, x.ndim, "count_nonzero")
    return wrap(compose.sum_(truth, axes, keepdims))


def nonzero(x: Array, /) -> tuple[Array, ...]:
    if x.ndim == 0:
        raise ValueError("nonzero: a 0-d array has no positions; use x[None] first")
    m = convert(x, dtypes.bool_)._t
    rank, count = running_count(m)
    flat = _flat_positions(m, count, rank)
    out = []
    stride = x.size
    for s in x.shape:
        stride //= max(s, 1)
        c = flat.p_idiv(flat.p_const(max(stride, 1))).p_mod(flat.p_const(max(s, 1)))
        out.append(wrap(c))
    return tuple(out)


def searchsorted(x1: Array, x2, /, *, side: str = "left", sorter: Array | None = None):
    """For each value, how many of the sorted x1 lie before it (binary search by GATHER)."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    check_dtype(x1, "real numeric", "searchsorted")
    if x1.ndim != 1:
        raise ValueError(f"searchsorted: x1 must be 1-d, got shape {x1.shape}")
    x2 = _as_array(x2, x1, "searchsorted")
    if sorter is not None:
        x1 = take(x1, sorter)
    d = dtypes.promote_array_api(x1.dtype, x2.dtype)
    if on_host(x1):  # one numpy call (nan after every number, as below)
        a, b = cast(x1, d), cast(x2, d)
        out = [(INDEX, b.shape)]
        return _custom("searchsorted", [a, b], out, side=side)[0]
    s, v = cast(x1, d)._t, cast(x2, d)._t
    n = x1.shape[0]
    shape = tuple(v.shape)
    lo = v.p_const(0, dtype=INDEX)
    hi = v.p_const(n, dtype=INDEX)
    if n == 0:
        return wrap(lo)
    table = s.p_reshape((1,) * len(shape) + (n,)).p_expand(shape + (n,))
    v_nan = functions.isnan(v) if d.is_float else v.p_const(False, dtype=dtypes.bool_)
    for _ in range(math.ceil(math.log2(n + 1))):
        mid = lo.p_add(hi).p_idiv(lo.p_const(2))
        at = compose.clamp(mid, mid.p_const(0), mid.p_const(n - 1))
        val = table.p_gather(at.p_reshape(shape + (1,)), len(shape)).p_reshape(shape)
        val_nan = functions.isnan(val) if d.is_float else v_nan
        if side == "left":  # val < v, with nan after every number
            right = compose.logical_or(
                val.p_cmplt(v), compose.logical_and(v_nan, compose.logical_not(val_nan))
            )
        else:  # val <= v
            right = compose.logical_or(
                compose.logical_not(v.p_cmplt(val)) if not d.is_float else compose.le(val, v),
                v_nan,
            )
        active = lo.p_cmplt(hi)
        go = compose.logical_and(active, right)
        stay = compose.logical_and(active, compose.logical_not(right))
        lo = go.p_where(mid.p_add(mid.p_const(1)), lo)
        hi = stay.p_where(mid, hi)
    return wrap(lo)


KERNELS["searchsorted"] = _kernel("searchsorted", np.searchsorted)
