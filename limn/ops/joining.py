"""Joining: ``cat``, ``stack`` and torch's stacks by dim (``hstack``, ``vstack``,
``dstack``, ``column_stack``, ``row_stack``, ``block_diag``, ``atleast_*d``), and the
grids of several vectors (``meshgrid``, ``cartesian_prod``). Their inverses, the splits,
are views: ``movement.py``.

Free functions over tensors (``limn.cat(xs)``), composed of Tensor methods and
``compose.cat``. ``stack`` of many views of one tensor taken in one pattern (a Dataset's
rows) is one gather (``stacked_rows``).
"""

from __future__ import annotations

import numpy as np

from ir.graph import compose, dtypes
from ir.graph.dtypes import promote
from ir.graph.ops import Op
from limn.ops.arguments import _tensors, torch_names
from limn.tensor import Tensor


def stacked_rows(ts: list) -> Tensor | None:
    """The stack of views of one tensor taken in one pattern at other offsets (the rows a
    Dataset over a tensor hands the default collate, ``X[i]`` in a loop) as one gather of
    their elements, or None for any other stack. Concatenated, a thousand rows would be a
    thousand pieces to build, walk and plan; gathered, they are one index array bound per
    call, and one plan serves every batch."""
    base, first = ts[0]._view_root()[0], ts[0].node
    if first.op is not Op.VIEW or first.arg.mask is not None or first.srcs[0] is not base.node:
        return None
    v, offsets = first.arg, []
    for t in ts:
        n = t.node
        if n.op is not Op.VIEW or n.srcs[0] is not first.srcs[0] or n.arg.mask is not None:
            return None
        if n.arg.shape != v.shape or n.arg.strides != v.strides:
            return None
        offsets.append(n.arg.offset)
    cells = np.indices(v.shape, dtype=np.int64)  # each element's place in its row
    inner = sum((s * c for s, c in zip(v.strides, cells)), np.zeros(v.shape, np.int64))
    at = np.asarray(offsets, np.int64).reshape((-1,) + (1,) * len(v.shape)) + inner
    flat = base._lift(at.reshape(-1))  # (every index in range: no check)
    return base.reshape(-1).gather(0, flat).reshape(at.shape)


@torch_names
def cat(tensors, axis: int = 0) -> Tensor:
    ts = list(tensors)
    if not ts:
        raise ValueError("cat: needs at least one tensor")
    d = ts[0].dtype
    for t in ts[1:]:
        d = promote(d, t.dtype)
    if any(t.shape != (0,) for t in ts):  # torch's legacy rule: a 1-d empty one is skipped
        ts = [t for t in ts if t.shape != (0,)]
    axis = compose.normalize_axis(axis, ts[0].ndim, "cat")
    for t in ts[1:]:
        if t.ndim != ts[0].ndim or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != axis
        ):
            raise ValueError(
                f"cat: shapes {[tuple(t.shape) for t in ts]} differ outside axis {axis}"
            )
    out = compose.cat([t.p_cast(d) for t in ts], axis)
    return out.clone() if out is ts[0] else out  # (one tensor: a copy, as torch's)


@torch_names
def stack(tensors, axis: int = 0) -> Tensor:
    ts = list(tensors)
    if not ts:
        raise ValueError("stack: needs at least one tensor")
    if any(t.shape != ts[0].shape for t in ts):
        raise ValueError(f"stack: shapes differ: {[tuple(t.shape) for t in ts]}")
    axis = compose.normalize_axis(axis, ts[0].ndim + 1, "stack")
    rows = stacked_rows(ts) if axis == 0 and len(ts) >= 4 else None
    return rows if rows is not None else cat([t.unsqueeze(axis) for t in ts], axis)


def atleast_1d(*tensors):
    ts = [t.reshape(1) if t.ndim == 0 else t for t in _tensors(tensors, "atleast_1d")]
    return ts[0] if len(ts) == 1 and not isinstance(tensors[0], list | tuple) else tuple(ts)


def atleast_2d(*tensors):
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in _tensors(tensors, "atleast_2d")]
    return ts[0] if len(ts) == 1 and not isinstance(tensors[0], list | tuple) else tuple(ts)


def atleast_3d(*tensors):
    def up(t):
        if t.ndim == 0:
            return t.reshape(1, 1, 1)
        if t.ndim == 1:
            return t.reshape(1, -1, 1)
        return t.unsqueeze(-1) if t.ndim == 2 else t

    ts = [up(t) for t in _tensors(tensors, "atleast_3d")]
    return ts[0] if len(ts) == 1 and not isinstance(tensors[0], list | tuple) else tuple(ts)


def hstack(tensors):
    ts = atleast_1d(list(tensors))
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    return cat(atleast_2d(list(tensors)), 0)


row_stack = vstack


def dstack(tensors):
    return cat(atleast_3d(list(tensors)), 2)


def column_stack(tensors):
    ts = [t.reshape(-1, 1) if t.ndim < 2 else t for t in _tensors((tensors,), "column_stack")]
    return cat(ts, 1)


def block_diag(*tensors):
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in tensors]
    if any(t.ndim != 2 for t in ts):
        raise ValueError(
            f"block_diag: needs tensors of at most 2 dims, got {[t.shape for t in ts]}"
        )
    if not ts:
        return Tensor.zeros(1, 0)
    d = ts[0].dtype
    for t in ts[1:]:
        d = dtypes.promote(d, t.dtype)
    width = sum(t.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        rows.append(t.cast(d).pad([(0, 0), (left, width - left - t.shape[1])]))
        left += t.shape[1]
    return cat(rows, 0)


def split_with_sizes_copy(input: Tensor, split_sizes, dim: int = 0) -> list:
    return [t.contiguous() for t in input.split(list(split_sizes), dim)]


def meshgrid(*tensors, indexing: str = "ij"):
    ts = _tensors(tensors, "meshgrid")
    if indexing not in ("ij", "xy") or any(t.ndim > 1 for t in ts):
        raise ValueError(
            f"meshgrid: needs 0-d or 1-d tensors and indexing 'ij' or 'xy', got "
            f"{[t.shape for t in ts]} and {indexing!r}"
        )
    ts = [t.reshape(-1) for t in ts]
    xy = indexing == "xy" and len(ts) > 1
    if xy:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    grids = [
        t.reshape(*[-1 if d == i else 1 for d in range(len(ts))]).expand(*shape)
        for i, t in enumerate(ts)
    ]
    if xy:  # the grids of the swapped pair, given back in the caller's order
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors):
    ts = _tensors(tensors, "cartesian_prod")
    if len(ts) == 1:
        return ts[0]
    return stack([g.reshape(-1) for g in meshgrid(*ts, indexing="ij")], 1)


Tensor.split_with_sizes_copy = split_with_sizes_copy
