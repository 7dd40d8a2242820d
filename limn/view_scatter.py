"""Writes into a view, as values: ``select_scatter``, ``slice_scatter``,
``diagonal_scatter`` and ``as_strided_scatter`` give the input with the elements a view
would show replaced by ``src``; ``as_strided`` reads the view a size, stride and offset
describe.

Each finds which elements the view covers by taking the same view of the positions
0..n-1 (``_positions``), so every view torch names is described once, by the view
itself; the result is a gather from, or a scatter into, the flat input. As torch's, the
strides of ``as_strided`` count in elements of a contiguous input.
"""

from __future__ import annotations

import numpy as np

from ir.graph import dtypes
from limn.tensor import Tensor


def _positions(x: Tensor, view) -> Tensor:
    pos = Tensor.arange(x.numel(), device=x.device).reshape(x.shape)
    return view(pos)


def _scatter_into(x: Tensor, where: Tensor, src, op: str) -> Tensor:
    src = src if isinstance(src, Tensor) else Tensor(src, dtype=x.dtype, device=x.device)
    if tuple(src.shape) != tuple(where.shape):
        raise ValueError(f"{op}: src {src.shape} must have the view's shape {where.shape}")
    if src.dtype != x.dtype:
        raise TypeError(f"{op}: src dtype {src.dtype} must be the input's {x.dtype}")
    flat = x.reshape(-1)
    if where.numel() == 0:
        return x.contiguous()
    return flat.scatter(0, where.reshape(-1), src.reshape(-1)).reshape(x.shape)


def select_scatter(self: Tensor, src, dim: int, index: int) -> Tensor:
    return _scatter_into(self, _positions(self, lambda p: p.select(dim, index)), src,
                         "select_scatter")  # fmt: skip


def slice_scatter(self: Tensor, src, dim: int = 0, start=None, end=None, step: int = 1):
    def view(p):
        key = [slice(None)] * p.ndim
        key[dim] = slice(start, end, step)
        return p[tuple(key)]

    return _scatter_into(self, _positions(self, view), src, "slice_scatter")


def diagonal_scatter(self: Tensor, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
    view = lambda p: p.diagonal(offset, dim1, dim2)  # noqa: E731
    return _scatter_into(self, _positions(self, view), src, "diagonal_scatter")


def _strided(x: Tensor, size, stride, storage_offset, op: str) -> Tensor:
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    offset = int(storage_offset or 0)
    if len(size) != len(stride) or min(size, default=0) < 0 or min(stride, default=0) < 0:
        raise ValueError(f"{op}: size {size} and stride {stride} must pair up, >= 0")
    grid = np.full(size, offset, np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        grid = grid + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    if grid.size and (grid.max() >= x.numel() or offset < 0):
        raise ValueError(
            f"{op}: size {size}, stride {stride} and offset {offset} reach past the "
            f"{x.numel()} elements of the input"
        )
    return Tensor(grid, dtype=dtypes.int64, device=x.device)


def as_strided(self: Tensor, size, stride, storage_offset=None) -> Tensor:
    """The elements at offset + sum(i_k * stride_k) of the contiguous input, shaped
    ``size`` (a copy: limn's views are its movements, not raw strides)."""
    where = _strided(self, size, stride, storage_offset, "as_strided")
    if where.numel() == 0:
        return Tensor.zeros(tuple(where.shape), dtype=self.dtype, device=self.device)
    return self.reshape(-1).gather(0, where.reshape(-1)).reshape(where.shape)


def as_strided_scatter(self: Tensor, src, size, stride, storage_offset=None) -> Tensor:
    where = _strided(self, size, stride, storage_offset, "as_strided_scatter")
    return _scatter_into(self, where, src, "as_strided_scatter")


for _fn in (select_scatter, slice_scatter, diagonal_scatter, as_strided, as_strided_scatter):
    setattr(Tensor, _fn.__name__, _fn)
Tensor.as_strided_copy = as_strided
