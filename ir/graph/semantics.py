"""What each elementwise op computes, written once in numpy: the rows' numpy evaluations.

The numpy reference device applies these to whole arrays, and the loop-nest interpreter
applies them to the values of single instructions, so the two oracles cannot drift apart.
Compiled devices render the same definitions in their own language; the edge cases here
(integer division by zero, shifts past the width, half widths computing in float32) are
the contract those renderings are tested against.

Every function takes numpy arrays already widened to the op's compute dtype (half widths
compute in float32) and returns the raw result; ``ir/graph/ops.evaluate`` widens, calls
the row's function and rounds to the node's dtype. Composite math (sin, pow, division,
...) is numpy's own function at the operand's width: float32 through numpy's float32
loops, whose measured error is the numpy column of the precision table in
``docs/array_api.md``; logaddexp alone computes float32 in float64.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# ---- primitives ------------------------------------------------------------------------


def neg(x):
    return np.negative(x) if x.dtype != np.bool_ else x.copy()


def add(a, b):
    return np.logical_or(a, b) if a.dtype == np.bool_ else np.add(a, b)


def mul(a, b):
    return np.logical_and(a, b) if a.dtype == np.bool_ else np.multiply(a, b)


def idiv(a, b):
    """Truncating integer division; x / 0 is 0."""
    safe = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe)
    r = a - q * safe
    q = np.where((r != 0) & ((a < 0) != (safe < 0)), q + 1, q)  # floor -> toward zero
    return np.where(b == 0, 0, q).astype(a.dtype)


def mod(a, b):
    """The remainder of truncating division (the dividend's sign); x % 0 is 0."""
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, a - idiv(a, safe) * safe).astype(a.dtype)


def _shift(a, b, left: bool):
    bits = a.dtype.itemsize * 8
    big = (b < 0) | (b >= bits)
    cnt = np.where(big, 0, b).astype(a.dtype)
    out = np.left_shift(a, cnt) if left else np.right_shift(a, cnt)
    fill = np.zeros_like(a) if left or a.dtype.kind == "u" else np.where(a < 0, -1, 0)
    return np.where(big, fill, out).astype(a.dtype)


shl, shr = functools.partial(_shift, left=True), functools.partial(_shift, left=False)


def logaddexp(a, b):
    """float32 through float64: numpy's float32 loop loses ~15 ulps where the result nears 0."""
    if a.dtype == np.float32:
        return np.logaddexp(a.astype(np.float64), b.astype(np.float64))
    return np.logaddexp(a, b)


# ---- sorting ---------------------------------------------------------------------------


def _reversed_order(k):
    """A key whose ascending order is ``k``'s descending one, exactly: -x for floats (nan
    stays nan, -0.0 still equals 0.0), ~x for integers (no overflow) and bools."""
    return np.negative(k) if k.dtype.kind in "fc" else np.invert(k)


def argsort(keys, descending: bool = False):
    """ARGSORT: the int64 permutation that sorts ``keys`` (one or more arrays of one shape)
    along the last axis, lexicographically, first key first.

    Stable (equal keys keep their order, also when descending); an element with a nan in
    any key sorts after every element without one, in both directions, and elements with
    nans keep their order among themselves; -0.0 equals 0.0. numpy's stable sorts.
    """
    ks = [_reversed_order(k) if descending else k for k in keys]
    if len(ks) == 1:  # numpy's own order already puts nans last, in index order
        return np.argsort(ks[0], axis=-1, kind="stable").astype(np.int64, copy=False)
    nan = np.zeros(ks[0].shape, np.bool_)
    for k in ks:
        if k.dtype.kind == "f":
            nan |= np.isnan(k)
    # an element with a nan ties every other one on the keys; only the flag orders it
    ks = [np.where(nan, np.zeros((), k.dtype), k) if nan.any() else k for k in ks]
    return np.lexsort((*reversed(ks), nan), axis=-1).astype(np.int64, copy=False)


# ---- the order of a float sum ----------------------------------------------------------

LANE_BYTES = 64  # a sum's logical lanes: 16 float32, 8 float64 partial totals, on every CPU
SUM_BLOCK = 256  # elements per block of a long whole-array sum: 16 per float32 lane


def pairwise(a: np.ndarray, combine=np.add) -> np.ndarray:
    """FOLD's fixed tree over the last axis: a[i] op= a[i + h], h = ceil(n/2), until one."""
    a, n = a.copy(), a.shape[-1]
    while n > 1:
        h = (n + 1) // 2
        a[..., : n - h] = combine(a[..., : n - h], a[..., h:n])
        n = h
    return a[..., 0]


def _grow(y: np.ndarray, shape: tuple, at: int = 0) -> np.ndarray:
    """``y`` inside zeros of ``shape``, from index ``at`` of its last axis (np.pad is ten
    times slower on the small sums the reference meets one op at a time)."""
    out = np.zeros(shape, y.dtype)
    out[(*(slice(0, e) for e in y.shape[:-1]), slice(at, at + y.shape[-1]))] = y
    return out


def ordered_sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """SUM over ``axes`` (kept as size 1) in the order every device folds, so a number never
    depends on the device, the layout or the thread count.

    Float adds do not reassociate, so the order is part of the answer. One running total
    is slow and loses accuracy as it grows, so where the reduce runs over the last axis of
    at least two sets of lanes, element ``j`` of that axis goes to lane ``j % L``, each
    lane folds its elements in row-major order, and the lanes are added by ``pairwise``.
    A whole-array sum of at least 4 blocks is cut into blocks of K rows of its outermost
    axis (K elements of a 1-d one), K*row about SUM_BLOCK, each with its own lanes, all
    added by the same tree: about numpy's pairwise accuracy. The rest fold in order. Each
    fold starts from +0.0, as a register does; an integer sum is exact in any order.
    """
    kept = [d for d in range(x.ndim) if d not in axes]
    red = [x.shape[d] for d in axes if x.shape[d] != 1]
    cells, n, lanes = math.prod(x.shape[d] for d in kept), math.prod(red), LANE_BYTES // x.itemsize
    y = np.transpose(x, kept + list(axes)).reshape(cells, n)
    shape = [1 if d in axes else e for d, e in enumerate(x.shape)]
    if not y.size or n < 2 * lanes or max(d for d, e in enumerate(x.shape) if e > 1) not in axes:
        return np.add.accumulate(_grow(y, (cells, n + 1), at=1), axis=1)[:, -1].reshape(shape)
    blocked = cells == 1 and n >= 4 * SUM_BLOCK
    if blocked:  # block b: rows b*k .. b*k + k - 1 of the outermost axis
        k = max(1, SUM_BLOCK // (n // red[0])) if len(red) > 1 else SUM_BLOCK
        rows = -(-red[0] // k) * k
        y = _grow(y.reshape(red[0], -1), (rows, n // red[0])).reshape(rows // k, -1)
    width = red[-1] if len(red) > 1 else y.shape[1]  # what lane j % L counts j along
    y = y.reshape(len(y), -1, width)
    y = _grow(y, (*y.shape[:2], width + -width % lanes))
    parts = np.add.accumulate(y.reshape(len(y), -1, lanes), axis=1)[:, -1] + 0
    return (pairwise(pairwise(parts)) if blocked else pairwise(parts)).reshape(shape)
