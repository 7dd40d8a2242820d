"""Set functions: ``unique_*`` and ``isin``.

On a host device the unique functions are numpy's (their shape depends on the values, so
the input is computed first). Elsewhere they sort (the bitonic network of
``_sorting.py``), mark where each run of equal values starts (every nan starts its own run:
nans are distinct), compute the number of runs (the one data-dependent shape, realized),
and gather the run starts lazily. Counts are differences of start positions; inverse
indices are run numbers (a prefix sum of the marks) scattered back through the sort
permutation. ``isin`` sorts the second operand and binary-searches it.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ir.graph import compose, dtypes
from limn_array import _order as order
from limn_array._array import (
    Array,
    host,
    lift,
    on_host,
    parts,
    stack_parts,
    tensor_from_numpy,
    wrap,
)
from limn_array._data_types import cast
from limn_array._elementwise import _as_array, equal, logical_not
from limn_array._indexing import _flat_positions, take
from limn_array._manipulation import reshape
from limn_array._searching import searchsorted

INDEX = dtypes.int64

UniqueAllResult = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])
UniqueCountsResult = namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def _runs(x: Array, op: str):
    """(sorted values, permutation, run-start positions, run count) of x flattened.

    Complex values sort by (re, im); equality is all that grouping needs.
    """
    n = x.size
    flat = reshape(x, (n,))
    keys = parts(flat) if x.dtype.is_complex else (flat._t,)
    keys, perm = order.sort_keys_last(keys)
    values = Array._new(stack_parts(*keys), x.dtype) if x.dtype.is_complex else wrap(keys[0])
    if n == 0:
        return values, perm, perm.p_const(0, shape=(0,), dtype=dtypes.bool_), 0
    first = perm.p_const(True, shape=(1,), dtype=dtypes.bool_).p_pad(((0, n - 1),))
    new = None
    for k in keys:
        prev = k.p_pad(((1, 0),)).p_shrink(((0, n),))
        differs = compose.ne(k, prev)
        new = differs if new is None else compose.logical_or(new, differs)
    starts = compose.logical_or(first, new)
    count = int(host(starts.p_cast(INDEX).p_sum((0,))).reshape(()))
    return values, perm, starts, count


def _take(values: Array, pos) -> Array:
    return lift(lambda t: t.p_gather(pos, 0), values)


def _numpy_unique(x: Array, index: bool, inverse: bool, counts: bool) -> tuple:
    """numpy's unique on a host device: the shape depends on the values, so the bytes are
    needed anyway, and numpy's answer is the one the composition gives (a stable sort,
    each run's first element, every nan a run of its own, -0.0 equal to 0.0)."""
    a = x._host().reshape(-1)
    got = np.unique(a, index, inverse, counts, equal_nan=False)
    got = got if isinstance(got, tuple) else (got,)
    device = x._t.device
    out = [Array._new(tensor_from_numpy(got[0], x.dtype, device), x.dtype)]
    for g in got[1:]:
        out.append(wrap(tensor_from_numpy(g.astype(np.int64, copy=False), INDEX, device)))
    if inverse:
        out[2 if index else 1] = reshape(out[2 if index else 1], x.shape)
    return tuple(out)


def unique_values(x: Array, /) -> Array:
    if on_host(x):
        return _numpy_unique(x, False, False, False)[0]
    values, _, starts, count = _runs(x, "unique_values")
    if count == 0:
        return values
    return _take(values, _flat_positions(starts, count))


def _counts(starts, count: int, n: int):
    pos = _flat_positions(starts, count)
    nxt = pos.p_pad(((0, 1),)).p_shrink(((1, count + 1),))
    last = compose.eq(compose.arange(pos, count, INDEX), pos.p_const(count - 1))
    nxt = last.p_where(pos.p_const(n), nxt)
    return pos, nxt.p_add(pos.p_neg())


def _inverse(x: Array, perm, starts):
    run = order.scan(starts.p_cast(INDEX), 0, "add").p_add(perm.p_const(-1))
    inv = perm.p_const(0).p_scatter(perm, run, 0)
    return wrap(inv.p_reshape(x.shape))


def unique_counts(x: Array, /) -> UniqueCountsResult:
    if on_host(x):
        return UniqueCountsResult(*_numpy_unique(x, False, False, True))
    values, _, starts, count = _runs(x, "unique_counts")
    if count == 0:
        return UniqueCountsResult(values, wrap(starts.p_cast(INDEX)))
    pos, counts = _counts(starts, count, x.size)
    return UniqueCountsResult(_take(values, pos), wrap(counts))


def unique_inverse(x: Array, /) -> UniqueInverseResult:
    if on_host(x):
        return UniqueInverseResult(*_numpy_unique(x, False, True, False))
    values, perm, starts, count = _runs(x, "unique_inverse")
    if count == 0:
        empty = perm.p_const(0, shape=x.shape, dtype=INDEX)
        return UniqueInverseResult(values, wrap(empty))
    pos = _flat_positions(starts, count)
    return UniqueInverseResult(_take(values, pos), _inverse(x, perm, starts))


def unique_all(x: Array, /) -> UniqueAllResult:
    if on_host(x):
        return UniqueAllResult(*_numpy_unique(x, True, True, True))
    values, perm, starts, count = _runs(x, "unique_all")
    if count == 0:
        empty = wrap(starts.p_cast(INDEX))
        inv = wrap(perm.p_const(0, shape=x.shape, dtype=INDEX))
        return UniqueAllResult(values, empty, inv, empty)
    pos, counts = _counts(starts, count, x.size)
    # a stable sort puts each run's first occurrence at its start
    return UniqueAllResult(
        _take(values, pos),
        wrap(perm.p_gather(pos, 0)),
        _inverse(x, perm, starts),
        wrap(counts),
    )


def isin(x1, x2, /, *, invert: bool = False) -> Array:
    if not isinstance(x1, Array) and not isinstance(x2, Array):
        raise TypeError("isin: needs at least one array")
    x1 = x1 if isinstance(x1, Array) else _as_array(x1, x2, "isin")
    x2 = x2 if isinstance(x2, Array) else _as_array(x2, x1, "isin")
    d = dtypes.promote_array_api(x1.dtype, x2.dtype)
    a, b = cast(x1, d), cast(x2, d)
    n = b.size
    if n == 0:
        out = wrap(a._t.p_const(bool(invert), shape=a.shape, dtype=dtypes.bool_))
        return out
    srt = wrap(order.sort_last(b._t.p_reshape((n,)))[0])
    at = searchsorted(srt, a)
    at = wrap(compose.clamp(at._t, at._t.p_const(0), at._t.p_const(n - 1)))
    found = equal(
        Array._new(take(srt, Array._new(at._t.p_reshape((a.size,))))._t.p_reshape(a.shape)), a
    )
    return logical_not(found) if invert else found
