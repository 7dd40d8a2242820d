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


FOLD_BYTES = 1 << 19  # the input one step of a fold reads: it stays in cache


def _fold(y: np.ndarray, lanes: int) -> np.ndarray:
    """(cells, n) to (cells, lanes), n a multiple of ``lanes``: element ``j`` goes to lane
    ``j % lanes``, each lane folding its elements in order from +0.0.

    numpy adds in order along any axis but the fastest in memory (``np.sum``'s notes:
    pairwise only along the fast axis), so cache-sized tiles of (cells, lane groups) are
    turned, groups moved whole, to put the cells fastest, and reduced down their rows,
    row 0 carrying the totals so far."""
    cells, n = y.shape
    unit = np.dtype((np.void, lanes * y.itemsize))
    v, out = np.ascontiguousarray(y).view(unit), np.zeros((cells, lanes), y.dtype)
    step = min(cells, max(2, FOLD_BYTES // (n * y.itemsize), 1024 // unit.itemsize))
    rows = max(1, FOLD_BYTES // (step * unit.itemsize))
    buf = np.empty((rows + 1, step), unit)  # row 0 carries the totals so far
    for c in range(0, cells, step):
        tot, cols = out[c : c + step].reshape(-1), min(step, cells - c)
        for r in range(0, v.shape[1], rows):
            part = v[c : c + step, r : r + rows].T
            buf[0, :cols], buf[1 : len(part) + 1, :cols] = tot.view(unit), part
            turned = buf[: len(part) + 1, :cols].view(y.dtype)
            if turned.shape[1] > 1:  # else numpy would reduce down its fast axis, pairwise
                np.add.reduce(turned, axis=0, out=tot)
            else:
                tot[:] = np.add.accumulate(turned, axis=0)[-1]
    return out + 0


def _in_memory_order(x: np.ndarray, axes: tuple[int, ...]) -> bool:
    """Whether numpy's own reduce over ``axes`` adds in order: a kept axis is the fastest in
    memory, and numpy walks the reduced axes in row-major order (positive, falling strides)."""
    big = [d for d, e in enumerate(x.shape) if e > 1]
    red = [x.strides[d] for d in big if d in axes]
    fast = min(big, key=lambda d: abs(x.strides[d]), default=None)
    return (
        fast is not None
        and fast not in axes
        and min(x.strides[d] for d in big) > 0
        and all(a > b for a, b in zip(red, red[1:]))
    )


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
    shape = [1 if d in axes else e for d, e in enumerate(x.shape)]
    if not x.size:
        return np.zeros(shape, x.dtype)
    last = max((d for d, e in enumerate(x.shape) if e > 1), default=0)
    if (n < 2 * lanes or last not in axes) and _in_memory_order(x, axes):
        return np.add.reduce(x, axis=axes, keepdims=True) + 0
    y = np.transpose(x, kept + list(axes)).reshape(cells, n)
    if n < 2 * lanes or last not in axes:
        return _fold(y, 1).reshape(shape)
    width = red[-1] if len(red) > 1 else n  # what lane j % L counts j along
    if cells == 1 and n >= 4 * SUM_BLOCK:  # blocks of k rows of the outermost axis
        k = max(1, SUM_BLOCK // (n // red[0])) if len(red) > 1 else SUM_BLOCK
        width, rows = width if len(red) > 1 else k, -(-red[0] // k) * k
        y = _grow(y.reshape(red[0], -1), (rows, n // red[0])).reshape(rows // k, -1)
    y = y.reshape(len(y), -1, width)
    y = _grow(y, (*y.shape[:2], width + -width % lanes)) if width % lanes else y
    parts = _fold(y.reshape(len(y), -1), lanes)
    return (
        pairwise(pairwise(parts)) if cells == 1 and n >= 4 * SUM_BLOCK else pairwise(parts)
    ).reshape(shape)
