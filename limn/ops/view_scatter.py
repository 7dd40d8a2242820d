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

from ir.graph import compose, dtypes
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
    """``as_strided_copy``: the elements at offset + sum(i_k * stride_k) of the contiguous
    input, shaped ``size``, as a new tensor."""
    where = _strided(self, size, stride, storage_offset, "as_strided")
    if where.numel() == 0:
        return Tensor.zeros(tuple(where.shape), dtype=self.dtype, device=self.device)
    return self.reshape(-1).gather(0, where.reshape(-1)).reshape(where.shape)


def as_strided_scatter(self: Tensor, src, size, stride, storage_offset=None) -> Tensor:
    where = _strided(self, size, stride, storage_offset, "as_strided_scatter")
    return _scatter_into(self, where, src, "as_strided_scatter")


# (``as_strided`` itself is a view, ``TorchMoreMovement.as_strided``; this is its copy)
for _fn in (select_scatter, slice_scatter, diagonal_scatter, as_strided_scatter):
    setattr(Tensor, _fn.__name__, _fn)
Tensor.as_strided_copy = as_strided


def index_reduce(self: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *,
                 include_self: bool = True) -> Tensor:  # fmt: skip
    """Each slice ``index[i]`` along ``dim`` reduced ("prod", "mean", "amax", "amin")
    with ``source``'s slice i: ``scatter_reduce`` with the index spread over the slice."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ValueError(f"index_reduce: reduce={reduce!r}; accepted: prod, mean, amax, amin")
    if index.ndim > 1 or not index.dtype.is_int:
        raise ValueError(f"index_reduce: index must be a 1-d integer tensor, got {index.shape}")
    if self.ndim == 0:
        return self.reshape(1).index_reduce(0, index.reshape(-1), source.reshape(-1), reduce,
                                            include_self=include_self).reshape(())  # fmt: skip
    d = dim % self.ndim
    n = self.shape[d]
    if bool(((index < -n) | (index >= n)).any()):
        raise IndexError(f"index_reduce: an index is out of range for dim {dim} of size {n}")
    want = self.shape[:d] + (index.numel(),) + self.shape[d + 1 :]
    if tuple(source.shape) != want:
        raise ValueError(f"index_reduce: source {source.shape} must be {want} for {self.shape}")
    idx = (index < 0).where(index + n, index)
    idx = idx.reshape(*[1] * d, -1, *[1] * (self.ndim - d - 1)).expand(*want)
    return self.scatter_reduce(d, idx, source, reduce, include_self=include_self)


def index_put(self: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """``self[indices] = values`` as a value (``accumulate``: added, repeats included)."""
    where = _positions(self, lambda p: p[tuple(indices)])
    values = values if isinstance(values, Tensor) else Tensor(values, device=self.device)
    values = values.cast(self.dtype).expand(*where.shape) if where.ndim else values.reshape(())
    return _put_flat(self, where, values, accumulate)


def put(self: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
    """The flat positions ``index`` of ``self`` set to ``source`` (or added to)."""
    n = self.numel()
    if index.numel() != source.numel():
        raise ValueError(f"put: index {index.shape} and source {source.shape} differ in size")
    if index.numel() and bool(((index < -n) | (index >= n)).any()):
        raise IndexError(f"put: an index is out of range for {n} elements")
    where = (index < 0).where(index + n, index)
    return _put_flat(self, where, source.cast(self.dtype).reshape(where.shape), accumulate)


def _put_flat(x: Tensor, where: Tensor, values: Tensor, accumulate: bool) -> Tensor:
    if where.numel() == 0:
        return x.contiguous()
    flat, w, v = x.reshape(-1), where.reshape(-1), values.reshape(-1)
    out = flat.scatter_add(0, w, v) if accumulate else flat.scatter(0, w, v)
    return out.reshape(x.shape)


def masked_scatter(self: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """The positions where ``mask`` is True (broadcast), in order, take ``source``'s
    elements one after another."""
    if mask.dtype != dtypes.bool_:
        raise TypeError(f"masked_scatter: mask must be bool, got {mask.dtype}")
    if source.dtype != self.dtype:
        raise TypeError(f"masked_scatter: source {source.dtype} must be {self.dtype}")
    shape = compose.broadcast_shapes(self.shape, mask.shape, op="masked_scatter")
    x, m = self.expand(*shape), mask.expand(*shape)
    flat = m.reshape(-1)
    if int(flat.sum().item()) > source.numel():
        raise ValueError("masked_scatter: the mask picks more elements than source holds")
    if flat.numel() == 0:
        return x.contiguous()
    k = (flat.cast(dtypes.int64).cumsum(0) - 1).maximum(0).minimum(max(source.numel() - 1, 0))
    taken = source.reshape(-1).gather(0, k) if source.numel() else flat.cast(self.dtype)
    return flat.where(taken, x.reshape(-1)).reshape(shape)


for _fn in (index_reduce, index_put, put, masked_scatter):
    setattr(Tensor, _fn.__name__, _fn)
