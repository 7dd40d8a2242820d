"""Sorting: ``sort`` and ``argsort``, stable, by a bitonic sorting network.

The network (``_order.sort_last``) is a fixed pattern of views and WHEREs, so it
is lazy, runs on any device and fuses like the rest of the graph. It costs
O(n log^2 n) work and log2(N)(log2(N)+1)/2 rounds for an axis padded to N = 2**k, against
O(n log n) for a comparison sort on one core; in exchange there is no data-dependent
control flow and every round is one parallel pass. Values are moved, never combined, so
-0.0 and nan payloads survive. nans sort last (numpy's order), in both directions; equal
keys keep their original order, also when descending.
"""

from __future__ import annotations

from ir.graph import compose
from limn_array import _order as order
from limn_array._array import Array, wrap
from limn_array._data_types import check_dtype


def _sorted(x: Array, axis: int, descending: bool, op: str):
    check_dtype(x, "real numeric", op)
    if x.ndim == 0:
        raise ValueError(f"{op}: needs at least a 1-d array")
    axis = compose.normalize_axis(axis, x.ndim, op)
    t = compose.movedim(x._t, axis, -1) if axis != x.ndim - 1 else x._t
    values, perm = order.sort_last(t, descending)
    if axis != x.ndim - 1:
        values, perm = compose.movedim(values, -1, axis), compose.movedim(perm, -1, axis)
    return values, perm


def sort(x: Array, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    return wrap(_sorted(x, axis, descending, "sort")[0])


def argsort(x: Array, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    return wrap(_sorted(x, axis, descending, "argsort")[1])
