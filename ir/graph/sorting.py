"""ARGSORT's decomposition: a bitonic sorting network, in the primitive protocol.

A device that does not render ARGSORT (``ir/graph/decompose.py``) gets this instead: the
axis padded to a power of two N and sorted by log2(N)(log2(N)+1)/2 rounds of
compare-exchange, each a fixed pattern of views and WHEREs, so it runs on any device that
runs the primitives. O(n log^2 n) work, no data-dependent control flow, exact (values are
only moved, never combined), and stable because ties compare by original index. An
element with a nan key sorts last, in both directions; -0.0 equals 0.0. Each round is a
stored pass (its values feed two selects of the next), so a sort costs that many kernels;
the c device renders ARGSORT as one kernel instead (``ir/c/sort.py``).
"""

from __future__ import annotations

from ir.graph import compose, dtypes
from ir.graph.compose import logical_and, logical_not, logical_or
from ir.graph.exact import select

BOOL = dtypes.bool_


def argsort(descending: bool, *keys):
    """The ARGSORT row's rule: the int64 permutation of ``network``."""
    return network(keys, descending)[1]


def _before(a, b, descending: bool):
    """Does element a (keys..., nan, pad, index) sort strictly before element b?

    Real elements come before padding, numbers before nans, then keys in lexicographic
    order (ties broken by original index, which makes the sort stable).
    """
    *ka, na, pa, ia = a
    *kb, nb, pb, ib = b
    r = ia.p_cmplt(ib)
    for x, y in reversed(list(zip(ka, kb))):
        less = y.p_cmplt(x) if descending else x.p_cmplt(y)
        same = logical_not(logical_or(x.p_cmplt(y), y.p_cmplt(x)))
        r = logical_or(less, logical_and(same, r))
    nan_order = logical_and(nb, logical_not(na))  # a is a number, b a nan
    r = select(compose.ne(na, nb), nan_order, select(na, ia.p_cmplt(ib), r))
    return select(compose.ne(pa, pb), pb, r)


def network(keys: tuple, descending: bool = False):
    """(the keys in sorted order, the int64 permutation) along the last axis, by several
    keys (lexicographic, first key first): the bitonic network of the module docstring."""
    x = keys[0]
    shape = tuple(x.shape)
    n, lead, i64 = shape[-1], shape[:-1], dtypes.int64
    if n <= 1:
        return keys, x.p_const(0, shape=shape, dtype=i64)
    size = 1 << (n - 1).bit_length()  # the power of two at or above n
    pads = ((0, 0),) * len(lead) + ((0, size - n),)
    idx = compose.expand_to(compose.arange(x, size, i64), lead + (size,))
    pad = compose.logical_not(x.p_const(True, dtype=BOOL).p_pad(pads))
    padded = tuple(k.p_pad(pads) for k in keys)
    nan = pad.p_const(False, dtype=BOOL)
    for k in padded:
        if k.dtype.is_float:
            nan = logical_or(nan, compose.isnan(k))
    fields = padded + (nan, pad, idx)
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            fields = _exchange(fields, lead, size, k, j, descending)
            j //= 2
        k *= 2
    bounds = tuple((0, s) for s in lead) + ((0, n),)
    return tuple(f.p_shrink(bounds) for f in fields[: len(keys)]), fields[-1].p_shrink(bounds)


def _exchange(fields, lead, size: int, k: int, j: int, descending: bool):
    """One round: element i meets i XOR j; blocks of k alternate direction."""
    blocks = size // (2 * j)
    split = lead + (blocks, 2, j)
    parts = [f.p_reshape(split) for f in fields]
    nl = len(lead)

    def half(t, h):
        bounds = tuple((0, s) for s in lead) + ((0, blocks), (h, h + 1), (0, j))
        return t.p_shrink(bounds).p_reshape(lead + (blocks, j))

    lo = tuple(half(p, 0) for p in parts)
    hi = tuple(half(p, 1) for p in parts)
    b = compose.arange(fields[0], blocks, dtypes.int64)
    per = max(k // (2 * j), 1)
    up = compose.eq(b.p_idiv(b.p_const(per)).p_mod(b.p_const(2)), b.p_const(0))
    up = compose.expand_to(up.p_reshape((blocks, 1)), lead + (blocks, j))
    swap = select(up, _before(hi, lo, descending), _before(lo, hi, descending))
    out = []
    for a, c in zip(lo, hi):
        first, second = select(swap, c, a), select(swap, a, c)
        pads_a = ((0, 0),) * (nl + 1) + ((0, 1), (0, 0))
        pads_b = ((0, 0),) * (nl + 1) + ((1, 0), (0, 0))
        first = first.p_reshape(lead + (blocks, 1, j)).p_pad(pads_a)
        second = second.p_reshape(lead + (blocks, 1, j)).p_pad(pads_b)
        top = a.p_const(True, shape=lead + (blocks, 1, j), dtype=BOOL).p_pad(pads_a)
        out.append(select(top, first, second).p_reshape(lead + (size,)))
    return tuple(out)
