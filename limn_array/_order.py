"""Order algorithms on the primitive protocol: scans, tree reductions, a sorting network.

A real prefix scan is one SCAN node (``p_scan``), a linear loop on every device. What is
left here are the data-parallel spellings for what one carried value cannot hold: the
complex product scan (a Hillis-Steele shift graph over the (re, im) pair), pairwise
halving for products, and a bitonic sorting network for stable sorts. Each is a fixed
pattern of views, WHEREs and arithmetic with no data-dependent control flow, so it stays
lazy, fuses, and runs on every device. They are written against the same ``p_*`` protocol
as ``ir/graph/compose.py``, so ``limn.Tensor`` can call them as they are.
"""

from __future__ import annotations

from ir.graph import compose, dtypes
from ir.graph.compose import logical_and, logical_not, logical_or
from ir.graph.exact import select

BOOL = dtypes.bool_


# ---- scans and tree reductions ---------------------------------------------------------


def scan(x, axis: int, op: str = "add"):
    """Inclusive prefix sums ("add"), products ("mul") or maxima ("max") along ``axis``:
    ``compose.scan``, the one Tensor's cumsum uses."""
    return compose.scan(x, axis, op)


def positions(like, n: int, dtype, start: int = 0):
    """start, start + 1, ..., start + n - 1 as one SCAN over ones: a single linear pass,
    where ``compose.arange`` (which fuses into its user) costs log2(n) adds per element."""
    ones = like.p_const(1, shape=(n,), dtype=dtype).p_scan(0, "add")
    return ones if start == 1 else ones.p_add(like.p_const(start - 1, shape=(n,), dtype=dtype))


def scan_pairs(xs: tuple, axis: int, combine) -> tuple:
    """Inclusive scan of a pair of tensors (a complex value's parts) along ``axis``.

    For a combine that mixes the parts (a complex product), which one carried value per
    part cannot express. ``combine(earlier, later)`` joins two tuples. Step k combines
    each element with the one 2**k before it (Hillis-Steele): log2(n) steps. Elements
    with nothing that far before them are left as they are, so no identity value is ever
    combined in (a -0.0 stays -0.0).
    """
    x0 = xs[0]
    n = x0.shape[axis]
    nd = len(x0.shape)
    pos = compose._index_along(x0, axis, dtypes.int64)
    k = 1
    while k < n:
        pads = [(0, 0)] * nd
        pads[axis] = (k, 0)
        bounds = [(0, s) for s in x0.shape]
        bounds[axis] = (0, n)
        before = tuple(x.p_pad(tuple(pads)).p_shrink(tuple(bounds)) for x in xs)
        both = combine(before, xs)
        early = pos.p_cmplt(pos.p_const(k))
        xs = tuple(select(early, x, b) for x, b in zip(xs, both))
        # each step is stored, so the next one reads it instead of recomputing it
        xs = tuple(x.p_contiguous() for x in xs)
        k *= 2
    return xs


def tree_reduce(xs: tuple, axis: int, combine, identity: tuple) -> tuple:
    """Reduce a tuple of tensors along ``axis`` by pairwise halving: log2(n) levels.

    The axis is padded to a power of two with ``identity`` values and halved by
    ``combine(first_half, second_half)`` until one element is left (kept as size 1). Used
    for products, which have no reduce primitive.
    """
    x0 = xs[0]
    n = x0.shape[axis]
    nd = len(x0.shape)
    size = 1
    while size < max(n, 1):
        size *= 2
    if size != n:
        pads = [(0, 0)] * nd
        pads[axis] = (0, size - n)
        inside = x0.p_const(True, dtype=BOOL).p_pad(tuple(pads))
        xs = tuple(
            select(inside, x.p_pad(tuple(pads)), x.p_const(v, shape=inside.shape))
            for x, v in zip(xs, identity)
        )
    while size > 1:
        half = size // 2
        lo = [(0, s) for s in xs[0].shape]
        hi = list(lo)
        lo[axis], hi[axis] = (0, half), (half, size)
        a = tuple(x.p_shrink(tuple(lo)) for x in xs)
        b = tuple(x.p_shrink(tuple(hi)) for x in xs)
        xs = combine(a, b)
        size = half
    return xs


# ---- sorting network --------------------------------------------------------------------------


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


def sort_last(x, descending: bool = False):
    """(sorted x, int64 permutation) along the last axis; see ``sort_keys_last``."""
    keys, perm = sort_keys_last((x,), descending)
    return keys[0], perm


def sort_keys_last(keys: tuple, descending: bool = False):
    """Sort along the last axis by several keys (lexicographic): a bitonic sorting network.

    Returns (the keys in sorted order, the int64 permutation). The axis is padded to a
    power of two N and sorted by log2(N)(log2(N)+1)/2 rounds of compare-exchange, each a
    fixed pattern of views and WHEREs: O(n log^2 n) work, no data-dependent control flow,
    exact (values are only moved, never combined), and stable because ties compare by
    original index. An element with a nan key sorts last, in both directions.
    """
    x = keys[0]
    shape = tuple(x.shape)
    n = shape[-1]
    lead = shape[:-1]
    i64 = dtypes.int64
    if n <= 1:
        return keys, x.p_const(0, shape=shape, dtype=i64)
    size = 1
    while size < n:
        size *= 2
    nd = len(shape)
    pads = ((0, 0),) * (nd - 1) + ((0, size - n),)
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
