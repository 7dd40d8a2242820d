"""Order algorithms on the primitive protocol: scans, tree reductions, sorts.

A real prefix scan is one SCAN node (``p_scan``), a linear loop on every device, and a
stable sort is one ARGSORT node (``p_argsort``). What is left here are the data-parallel
spellings for what one carried value cannot hold: the complex product scan (a
Hillis-Steele shift graph over the (re, im) pair) and pairwise halving for products.
Each is a fixed pattern of views, WHEREs and arithmetic with no data-dependent control
flow, so it stays lazy, fuses, and runs on every device. They are written against the
same ``p_*`` protocol as ``ir/graph/compose.py``, so ``limn.Tensor`` can call them as
they are.
"""

from __future__ import annotations

from ir.graph import compose, dtypes
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


# ---- sorting ---------------------------------------------------------------------------------


def sort_last(x, descending: bool = False):
    """(sorted x, int64 permutation) along the last axis; see ``sort_keys_last``."""
    keys, perm = sort_keys_last((x,), descending)
    return keys[0], perm


def sort_keys_last(keys: tuple, descending: bool = False):
    """Sort along the last axis by several keys (lexicographic, first key first).

    Returns (the keys in sorted order, the int64 permutation). The permutation is one
    ARGSORT node (stable, nans last in both directions, -0.0 equal to 0.0); the sorted
    keys are gathers through it, so values move bit for bit. The c device runs it as a
    merge sort per row; other devices as a bitonic network (``ir/graph/sorting.py``).
    """
    x = keys[0]
    if x.shape[-1] <= 1:
        return keys, x.p_const(0, shape=x.shape, dtype=dtypes.int64)
    perm = x.p_argsort(*keys[1:], descending=descending)
    last = len(x.shape) - 1
    return tuple(k.p_gather(perm, last) for k in keys), perm
