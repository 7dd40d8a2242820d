"""Sorting: ``sort`` and ``argsort``, stable: one ARGSORT node along the last axis.

The permutation is one graph node (``_order.sort_last``); the sorted values gather
through it, so they move bit for bit and -0.0 and nan payloads survive. The numpy device
evaluates it with numpy's stable argsort, the c device as a merge sort per row (one
kernel, O(n log n), rows across threads), and a device that renders only primitives as a
bitonic sorting network (``ir/graph/sorting.py``: O(n log^2 n) work in
log2(N)(log2(N)+1)/2 stored rounds). nans sort last (numpy's order), in both directions;
equal keys keep their original order, also when descending.
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
