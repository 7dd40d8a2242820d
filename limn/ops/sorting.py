"""Sorting of limn.Tensor: ``argsort``, ``sort`` and ``topk``, each one stable sort along a
dim (``compose.argsort``, a NaN last as torch's), the values gathered by the order.

``Sorting`` is a mixin of ``limn.Tensor`` (see ``math.py``). What is read off a sorted
copy (median, k-th value, quantiles, mode) is in ``order_statistics.py``.
"""

from __future__ import annotations

from ir.graph import compose
from limn.ops.arguments import accept_torch_names, scalar_dims
from limn.ops.reductions import MinMax


class Sorting:
    def argsort(self, axis: int = -1, descending: bool = False, stable: bool = True):
        axis = compose.normalize_axis(axis, self.ndim, "argsort")
        keys = (self.transpose(axis, -1),)
        if descending and self.dtype.is_float:  # torch's nan is the largest: first, in order
            nan = keys[0].isnan()
            keys = (nan, nan.where(0, keys[0]))
        return keys[0].p_argsort(*keys[1:], descending=descending).transpose(axis, -1)

    def sort(self, axis: int = -1, descending: bool = False, stable: bool = True):
        order = self.argsort(axis, descending)
        return MinMax(self.gather(axis, order), order)

    def topk(self, k: int, axis: int = -1, largest: bool = True, sorted: bool = True):
        axis = compose.normalize_axis(axis, self.ndim, "topk")
        if not 0 <= k <= self.shape[axis]:
            raise ValueError(f"topk: k={k} is out of range for dim {axis} of {self.shape}")
        order = self.argsort(axis, descending=largest)
        order = order.shrink([(0, k) if d == axis else None for d in range(self.ndim)])
        return MinMax(self.gather(axis, order), order)


for _name in ("argsort", "sort", "topk"):
    setattr(Sorting, _name, scalar_dims(getattr(Sorting, _name)))
accept_torch_names(Sorting)
