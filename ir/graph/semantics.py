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
