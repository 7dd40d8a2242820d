"""Writes by index, as values: ``scatter``, ``scatter_add``, ``scatter_reduce``,
``index_add``, ``index_copy`` and ``index_fill`` give the input with the elements an
index picks replaced or combined with ``src``.

``Scatter`` is a mixin of ``limn.Tensor`` (see ``math.py``); each is a comparison of
every target position with the index, reduced, so it stays lazy and takes gradients.
Their in-place forms (``scatter_``, ``index_add_``) are made in ``inplace.py``; the
scatters into a view (``select_scatter`` ...) and ``index_put`` are in
``view_scatter.py``.
"""

from __future__ import annotations

from typing import Self

from ir.graph import compose, dtypes
from limn.ops.arguments import accept_torch_names


class Scatter:
    def scatter_add(self, axis: int, index: Self, src: Self) -> Self:
        if self.ndim == 0 and index.ndim == src.ndim == 0:  # one element: as a 1-d one
            one = self.reshape(1).scatter_add(axis, index.reshape(1), src.reshape(1))
            return one.reshape(())
        axis = compose.normalize_axis(axis, self.ndim, "scatter_add")
        if index.shape != src.shape or not index.dtype.is_int:
            raise ValueError(
                f"scatter_add: index and src must share a shape and index be an integer, got "
                f"{index.dtype}{list(index.shape)} and {src.dtype}{list(src.shape)}"
            )
        return self.p_scatter(index, src.p_cast(self.dtype), axis)

    def index_fill(self, axis: int, index, value):
        axis = compose.normalize_axis(axis, self.ndim, "index_fill")
        if self.ndim and self.shape[axis] == 0 and index.numel():
            raise IndexError(
                f"index_fill: index out of range for dim {axis} of size 0 in {self.shape}"
            )
        hit = self._index_mask(axis, index)
        return hit.where(value, self).cast(self.dtype)

    def _index_mask(self, axis, index):
        n = self.shape[axis] if self.ndim else 1
        pos = type(self).arange(n, device=self.device)
        i = index.reshape(-1)
        i = (i < 0).where(i + n, i)
        hit = (pos.reshape(n, 1) == i.reshape(1, -1)).any(1)
        return hit.reshape(n, *[1] * (self.ndim - axis - 1)) if self.ndim else hit.reshape(())

    def index_add(self, axis: int, index, source, *, alpha=1):
        if self.ndim == 0:
            return (
                self.reshape(1)
                .index_add(0, index.reshape(-1), source.reshape(-1), alpha=alpha)
                .reshape(())
            )
        axis = compose.normalize_axis(axis, self.ndim, "index_add")
        src = source if alpha == 1 else source * alpha
        want = self.shape[:axis] + (index.numel(),) + self.shape[axis + 1 :]
        if src.shape != want and src.ndim:
            raise ValueError(f"index_add: source {src.shape} must be {want} for {self.shape}")
        src = (
            src.reshape(self.shape[:axis] + (1,) + self.shape[axis + 1 :]) if src.ndim == 0 else src
        )
        shape = list(src.shape)
        idx = index.reshape(*[1] * axis, -1, *[1] * (src.ndim - axis - 1)).expand(*shape)
        return self.scatter_add(axis, idx, src)

    def index_copy(self, axis: int, index, source):
        axis = compose.normalize_axis(axis, self.ndim, "index_copy")
        kept = self.index_fill(axis, index, 0)
        return kept.index_add(axis, index, source)

    def scatter(self, axis: int, index, src=None, *, value=None, reduce=None):
        """out[.., index[i], ..] = src[i] along ``axis`` (each target written once); with
        ``reduce="add"`` or ``"multiply"``, each target accumulates what lands on it."""
        if reduce not in (None, "add", "multiply"):
            raise ValueError(
                f"scatter: reduce={reduce!r} is not supported; accepted: 'add', 'multiply'"
            )
        axis = compose.normalize_axis(axis, self.ndim, "scatter")
        if index.ndim != self.ndim or not index.dtype.is_int:
            raise ValueError(
                f"scatter: index must be an integer tensor with {self.ndim} dims, got "
                f"{index.dtype}{list(index.shape)}"
            )
        if src is None or not hasattr(src, "shape"):
            src = self.full(index.shape, value if src is None else src, self.dtype, self.device)
        if src.dtype != self.dtype:
            raise TypeError(f"scatter: src dtype {src.dtype} must be the target's {self.dtype}")
        src = src.shrink([(0, s) for s in index.shape])
        if reduce == "add":
            return self.scatter_add(axis, index, src)
        if reduce == "multiply":
            return self.scatter_reduce(axis, index, src, "prod")
        hit = self.zeros_like(dtypes.int64).scatter_add(axis, index, index.ones_like())
        # added to -0.0, which keeps every value as it is (a -0.0 too, where 0.0 would not)
        zero = -0.0 if self.dtype.is_float else 0
        placed = self.full(self.shape, zero, self.dtype, self.device).scatter_add(axis, index, src)
        return (hit > 0).where(placed, self)

    def scatter_reduce(self, axis: int, index, src, reduce: str, *, include_self: bool = True):
        """Each target along ``axis`` reduced ("sum", "prod", "mean", "amax", "amin") with
        the ``src`` values whose ``index`` names it, and its own value unless
        ``include_self=False``; a target nothing lands on keeps its value.

        Composed as a comparison, not a scatter: position j of the target dim collects
        ``where(index == j, src, identity)`` reduced over the index's own run along that
        dim, so any reduction works (a scatter only adds), at (index size x dim size)."""
        kinds = ("sum", "prod", "mean", "amax", "amin")
        if reduce not in kinds:
            raise ValueError(f"scatter_reduce: reduce={reduce!r}; accepted: {', '.join(kinds)}")
        if self.ndim == 0:
            one = self.reshape(1).scatter_reduce(
                axis, index.reshape(-1), src.reshape(-1), reduce, include_self=include_self
            )
            return one.reshape(())
        axis = compose.normalize_axis(axis, self.ndim, "scatter_reduce")
        if index.ndim != self.ndim or src.ndim != self.ndim or not index.dtype.is_int:
            raise ValueError(
                f"scatter_reduce: index and src must have {self.ndim} dims and index be an "
                f"integer, got {index.dtype}{list(index.shape)} and {src.dtype}{list(src.shape)}"
            )
        if any(i > t for i, t in zip(index.shape, src.shape)):
            raise ValueError(f"scatter_reduce: index {index.shape} is larger than src {src.shape}")
        if any(i > t for d, (i, t) in enumerate(zip(index.shape, self.shape)) if d != axis):
            raise ValueError(f"scatter_reduce: index {index.shape} is larger than {self.shape}")
        n = self.shape[axis]
        src = src.shrink([(0, s) for s in index.shape]).cast(self.dtype)
        pos = type(self).arange(n, device=self.device)
        hit = index.unsqueeze(-1) == pos  # (*index.shape, n)
        vals = src.unsqueeze(-1)
        if reduce in ("sum", "mean"):
            got = hit.where(vals, 0).sum(axis)
        elif reduce == "prod":
            got = hit.where(vals, 1).prod(axis)
        else:
            fill = (
                dtypes.min_value(self.dtype) if reduce == "amax" else dtypes.max_value(self.dtype)
            )
            got = hit.where(vals, fill)
            got = got.amax(axis) if reduce == "amax" else got.amin(axis)
        count = hit.sum(axis)
        back = list(range(self.ndim - 1))  # the target dim (last now) back to ``axis``
        back.insert(axis, self.ndim - 1)
        got, count = got.cast(self.dtype).permute(*back), count.permute(*back)
        pads = [(0, t - g) for t, g in zip(self.shape, got.shape)]  # targets past the index box
        got, count = got.pad(pads), count.pad(pads)
        mine = self
        if reduce == "sum":
            out = mine + got if include_self else got
        elif reduce == "prod":
            out = mine * got if include_self else got
        elif reduce == "mean":
            total = mine + got if include_self else got
            k = count + 1 if include_self else count.maximum(1)
            out = total / k if self.dtype.is_float else total.div(k, rounding_mode="floor")
        else:
            out = (
                (mine.maximum(got) if reduce == "amax" else mine.minimum(got))
                if include_self
                else got
            )
        return (count > 0).where(out, mine).cast(self.dtype)


accept_torch_names(Scatter)
