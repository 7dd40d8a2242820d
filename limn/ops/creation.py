"""torch's free functions that make tensors: ranges (``linspace``, ``logspace``), index
tables (``tril_indices``, ``triu_indices``, ``unravel_index``), ``normal`` draws, and the
makers of uninitialized memory (``empty``, ``empty_strided``, ``empty_permuted``), which
in limn are zeros: limn never hands out uninitialized memory, and has one layout.

The Tensor's own constructors (``zeros``, ``ones``, ``full``, ``arange``, ``eye``,
``rand``, ``randn``, ``randint``, ``from_numpy``, the ``*_like`` and ``new_*`` forms and
the in-place draws ``uniform_``, ``normal_`` ...) are classmethods and methods of the
``Creation`` mixin in ``limn/creation.py``, which ``limn/tensor.py`` builds the class
from; these free functions need the class itself, so they live here.
"""

from __future__ import annotations

import numpy as np

from ir.graph import dtypes
from ir.graph.dtypes import as_dtype
from limn.ops.movement import broadcast_shapes
from limn.tensor import Tensor


def _fma(a, b, c):
    """a * b + c with one rounding, in float64 arrays: the product exact as two doubles
    (Dekker's split), added to c by a two-sum, the small parts last."""
    p, big = a * b, 134217729.0  # 2**27 + 1
    ah, bh = a * big - (a * big - a), b * big - (b * big - b)
    err = ((ah * bh - p) + ah * (b - bh) + (a - ah) * bh) + (a - ah) * (b - bh)
    s = p + c
    back = s - p
    return np.where(np.isfinite(p), s + (((p - (s - back)) + (c - back)) + err), s)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad=False, **_):
    """``steps`` values from ``start`` to ``end``, as torch computes them: from the start
    for the first half and from the end for the second, the step in the dtype and each
    value ``start + step * i`` rounded once (an fma), so the bits are torch's."""
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    d = as_dtype(dtype) if dtype is not None else dtypes.float32
    start, end = float(start), float(end)
    if d.is_int:  # torch's: the ends cast to the dtype first
        start, end = float(int(start)), float(int(end))
    i = np.arange(steps, dtype=np.float64)
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    if steps == 1:
        return Tensor([start], dtype=d, device=device)
    if d.is_int:
        vals = np.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))
        vals = np.trunc(vals)
    else:
        at = np.float32 if d != dtypes.float64 else np.float64
        with np.errstate(invalid="ignore", over="ignore"):  # an infinite end: nan, as torch
            s, e = at(start), at(end)
            st = np.float64((e - s) / at(steps - 1))
            s, e = np.float64(s), np.float64(e)
            if at is np.float32:  # float32 times an index is exact in float64: one rounding
                vals = np.where(i < steps // 2, s + st * i, e - st * (steps - 1 - i)).astype(at)
            else:
                vals = np.where(i < steps // 2, _fma(st, i, s), _fma(-st, steps - 1 - i, e))
    out = Tensor(vals, dtype=d, device=device)
    return out.requires_grad_() if requires_grad else out


def logspace(start, end, steps: int, base: float = 10.0, dtype=None, device=None, **_):
    d = as_dtype(dtype) if dtype is not None else dtypes.float32
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if d.is_int:  # torch's: the exponents' ends cast to the dtype first
        start, end = int(start), int(end)
    exps = linspace(start, end, steps, dtype=dtypes.float64 if d.is_int else d).numpy()
    vals = np.power(base, exps.astype(np.float64) if d.is_int else exps)
    return Tensor(np.trunc(vals) if d.is_int else vals, dtype=d, device=device)


def empty(*size, dtype=None, device=None, requires_grad=False, **_):
    """Zeros: limn never hands out uninitialized memory."""
    return Tensor.zeros(*size, dtype=dtype or dtypes.float32, device=device,
                        requires_grad=requires_grad)  # fmt: skip


def scalar_tensor(s, dtype=None, device=None, requires_grad=False, **_):
    return Tensor.full((), s, dtype or dtypes.float32, device, requires_grad)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None, **_):
    """Draws of N(mean, std): tensors of means and deviations broadcast, or numbers with
    ``size``."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        m = mean if isinstance(mean, Tensor) else Tensor.full((), mean)
        s = std if isinstance(std, Tensor) else Tensor.full((), std, m.dtype)
        shape = broadcast_shapes(m.shape, s.shape)
        like = m if isinstance(mean, Tensor) else s
        return (
            Tensor.randn(shape, dtype=like.dtype, device=like.device, generator=generator) * s + m
        )
    d = dtype or dtypes.float32
    return Tensor.randn(size, dtype=d, device=device, generator=generator) * std + mean


def _tri_indices(row: int, col: int, offset: int, keep, dtype, device):
    i, j = np.indices((row, col))
    r, c = np.nonzero(keep(j - i, offset))
    return Tensor(np.stack([r, c]).astype(np.int64), dtype or dtypes.int64, device=device)


def tril_indices(row: int, col: int, offset: int = 0, dtype=None, device=None, **_):
    return _tri_indices(row, col, offset, lambda d, k: d <= k, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, dtype=None, device=None, **_):
    return _tri_indices(row, col, offset, lambda d, k: d >= k, dtype, device)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False) -> Tensor:  # fmt: skip
    """Zeros of ``size``: limn never hands out uninitialized memory, and has one layout."""
    return Tensor.zeros(tuple(size), dtype=dtype or dtypes.float32, device=device,
                        requires_grad=requires_grad)  # fmt: skip


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                   requires_grad=False, pin_memory=False) -> Tensor:  # fmt: skip
    if sorted(physical_layout) != list(range(len(size))):
        raise ValueError(f"empty_permuted: {physical_layout} is no order of {len(size)} dims")
    return empty_strided(size, (), dtype=dtype, device=device, requires_grad=requires_grad)


def new_empty_strided(self: Tensor, size, stride, *, dtype=None, device=None,
                      requires_grad=False, **_) -> Tensor:  # fmt: skip
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)  # fmt: skip


def fill(input: Tensor, value) -> Tensor:
    """``input``'s shape and dtype, every element ``value`` (a number or a 0-d tensor)."""
    if isinstance(value, Tensor):
        if value.ndim:
            raise ValueError(f"fill: value must be a number or a 0-d tensor, got {value.shape}")
        return value.cast(input.dtype).expand(*input.shape).contiguous()
    return input.full_like(value)


def unravel_index(indices, shape) -> tuple:
    """The coordinates in ``shape`` of each flat (row-major) index."""
    idx = indices if isinstance(indices, Tensor) else Tensor(indices)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not idx.dtype.is_int or idx.dtype == dtypes.bool_:
        raise TypeError(f"unravel_index: needs integer indices, got {idx.dtype}")
    if any(s < 0 for s in shape):
        raise ValueError(f"unravel_index: sizes must be >= 0, got {shape}")
    total = int(np.prod(shape, dtype=np.int64))
    if idx.numel() and bool(((idx < -total) | (idx >= total)).any()):
        raise ValueError(f"unravel_index: an index is out of range for shape {shape}")
    flat = (idx < 0).where(idx + total, idx).cast(dtypes.int64)
    out = []
    for s in reversed(shape):
        out.append(flat.remainder(s) if s else flat * 0)
        flat = flat.div(s, rounding_mode="floor") if s else flat
    return tuple(reversed(out))


for _fn in (fill, new_empty_strided):
    setattr(Tensor, _fn.__name__, _fn)
