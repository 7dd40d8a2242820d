"""Order statistics: median, k-th value, quantiles, mode, each read off a sorted copy.

torch's answers by position in the sorted order: the median is the lower of the two
middle values (``(n - 1) // 2``), ``kthvalue(k)`` the k-th smallest, a quantile the value
at ``q (n - 1)``, interpolated between its neighbours as ``interpolation`` says. A NaN
sorts last: ``median`` and ``quantile`` answer NaN for a row that holds one, their
``nan*`` forms count only the numbers. The indices are where the chosen value sits in
the input (torch's; among equal values, any of their places).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ir.graph import compose, dtypes
from limn.tensor import Tensor

ValuesIndices = namedtuple("ValuesIndices", "values indices")  # torch.return_types.median/...


def _sorted_along(x: Tensor, dim: int, op: str):
    dim = compose.normalize_axis(dim, x.ndim, op) if x.ndim else 0
    y = x if x.ndim else x.reshape(1)
    s = y.sort(dim)
    return y, dim, s.values, s.indices


def _pick(values: Tensor, indices: Tensor, at: Tensor, dim: int, keepdim: bool, x: Tensor):
    """The sorted values and their indices at position ``at`` (keepdim-shaped) along dim."""
    v, i = values.gather(dim, at), indices.gather(dim, at)
    if not keepdim or x.ndim == 0:
        v, i = v.squeeze(dim), i.squeeze(dim)
    return ValuesIndices(v.reshape(x.shape) if x.ndim == 0 else v,
                         i.reshape(x.shape) if x.ndim == 0 else i)  # fmt: skip


def _count_numbers(y: Tensor, dim: int) -> Tensor:
    return (~y.isnan()).sum(dim, keepdim=True) if y.dtype.is_float else None


def median(self: Tensor, dim=None, keepdim: bool = False):
    """The lower median: of every element (a 0-d value), or along ``dim`` (values and
    indices); NaN where a NaN is among them."""
    return _median(self, dim, keepdim, nan=False)


def nanmedian(self: Tensor, dim=None, keepdim: bool = False):
    """The lower median of the numbers, NaNs left out (NaN where there are none)."""
    return _median(self, dim, keepdim, nan=True)


def _median(x: Tensor, dim, keepdim: bool, nan: bool):
    op = "nanmedian" if nan else "median"
    if dim is None:
        if x.numel() == 0:
            raise ValueError(f"{op}: needs at least one element")
        return _median(x.reshape(-1), 0, False, nan).values
    if x.ndim and x.shape[compose.normalize_axis(dim, x.ndim, op)] == 0:
        raise ValueError(f"{op}: dim {dim} of {x.shape} is empty")
    y, dim, values, indices = _sorted_along(x, dim, op)
    n = y.shape[dim]
    keep = list(y.shape)
    keep[dim] = 1
    numbers = _count_numbers(y, dim)
    if numbers is None:
        at = Tensor.full(tuple(keep), (n - 1) // 2, dtypes.int64, y.device)
    elif nan:  # the middle of the numbers (position 0, a NaN, where there are none)
        at = (numbers - 1).maximum(0).div(2, rounding_mode="floor").cast(dtypes.int64)
    else:  # the first NaN where there is one: NaN sorts last
        at = (numbers < n).where(numbers, (n - 1) // 2).cast(dtypes.int64)
    return _pick(values, indices, at, dim, keepdim, x)


def kthvalue(self: Tensor, k: int, dim: int = -1, keepdim: bool = False):
    """The k-th smallest (k from 1) along ``dim``, and where it is."""
    y, d, values, indices = _sorted_along(self, dim, "kthvalue")
    if not 1 <= k <= y.shape[d]:
        raise ValueError(f"kthvalue: k={k} is out of range for dim {dim} of size {y.shape[d]}")
    keep = list(y.shape)
    keep[d] = 1
    at = Tensor.full(tuple(keep), k - 1, dtypes.int64, y.device)
    return _pick(values, indices, at, d, keepdim, self)


def msort(self: Tensor) -> Tensor:
    """Sorted along the first dim."""
    return self.sort(0).values


def mode(self: Tensor, dim: int = -1, keepdim: bool = False):
    """The most frequent value along ``dim`` (the smallest of the most frequent), and a
    place where it is: in the sorted order each value counts its equals, and the first
    position with the highest count wins."""
    y, d, values, indices = _sorted_along(self, dim, "mode")
    if y.shape[d] == 0:
        raise ValueError(f"mode: dim {dim} of {self.shape} is empty")
    s = values.movedim(d, -1)
    counts = (s.unsqueeze(-1) == s.unsqueeze(-2)).sum(-1)  # (..., n): equals of each
    best = counts.argmax(-1, keepdim=True).movedim(-1, d)
    return _pick(values, indices, best, d, keepdim, self)


INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(self: Tensor, q, dim=None, keepdim: bool = False, *, interpolation="linear"):
    """The value at ``q * (n - 1)`` in sorted order along ``dim`` (every element by
    default), between its neighbours by ``interpolation``; a 1-d ``q`` puts its
    quantiles first in the result. NaN for a row with a NaN."""
    return _quantile(self, q, dim, keepdim, interpolation, nan=False)


def nanquantile(self: Tensor, q, dim=None, keepdim: bool = False, *, interpolation="linear"):
    """``quantile`` of the numbers, NaNs left out."""
    return _quantile(self, q, dim, keepdim, interpolation, nan=True)


def _quantile(x: Tensor, q, dim, keepdim: bool, interpolation: str, nan: bool):
    op = "nanquantile" if nan else "quantile"
    if not x.dtype.is_float:
        raise TypeError(f"{op}: needs a float input, got {x.dtype}")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"{op}: interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}"
        )
    qs = np.asarray(q.numpy() if isinstance(q, Tensor) else q, np.float64)
    if qs.ndim > 1 or ((qs < 0) | (qs > 1)).any():
        raise ValueError(f"{op}: q must be a number or 1-d in [0, 1], got {qs}")
    if isinstance(q, Tensor) and q.dtype != x.dtype:
        raise TypeError(f"{op}: q must have the input's dtype {x.dtype}, got {q.dtype}")
    if x.numel() == 0:
        raise ValueError(f"{op}: needs a non-empty input")
    flat = dim is None
    y = x.reshape(-1) if flat else x
    d = 0 if flat else compose.normalize_axis(dim, y.ndim, op) if y.ndim else 0
    y = y if y.ndim else y.reshape(1)
    s = y.sort(d).values.movedim(d, -1).unsqueeze(0)  # (1, ..., n)
    n = y.shape[d]
    numbers = (~s.isnan()).sum(-1, keepdim=True).cast(dtypes.float64)  # (1, ..., 1)
    qt = Tensor(qs.reshape(-1), dtype=dtypes.float64, device=x.device)
    qt = qt.reshape(-1, *([1] * (s.ndim - 1)))  # (k, 1, ..., 1)
    last = (numbers - 1).maximum(0) if nan else Tensor(float(n - 1), dtype=dtypes.float64)
    rank = qt * last
    lo, hi = rank.floor(), rank.ceil()
    if interpolation == "nearest":
        lo = hi = rank.round()
    elif interpolation == "lower":
        hi = lo
    elif interpolation == "higher":
        lo = hi
    shape = (qt.shape[0], *s.shape[1:-1], 1)
    vlo = s.expand(*shape[:-1], n).gather(-1, lo.cast(dtypes.int64).expand(*shape))
    vhi = s.expand(*shape[:-1], n).gather(-1, hi.cast(dtypes.int64).expand(*shape))
    weight = 0.5 if interpolation == "midpoint" else (rank - lo).cast(x.dtype).expand(*shape)
    out = vlo.lerp(vhi, weight) if interpolation in ("linear", "midpoint") else vlo
    if nan:
        out = (numbers == 0).where(math.nan, out).cast(x.dtype)
    else:
        out = (numbers < n).where(math.nan, out).cast(x.dtype)
    out = out.squeeze(-1)  # (k, ...rest)
    if keepdim and x.ndim:
        out = out.reshape(qt.shape[0], *[1] * x.ndim) if flat else out.unsqueeze(d + 1)
    return out[0] if qs.ndim == 0 else out


# torch's Tensor methods and free functions of the same (``x.median()``, ``limn.quantile``)
for _fn in (median, nanmedian, kthvalue, msort, mode, quantile, nanquantile):
    setattr(Tensor, _fn.__name__, _fn)
