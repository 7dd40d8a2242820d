"""limn.masked: torch.masked's reductions and normalizations over the elements a mask keeps.

Each is the plain op over the input with its masked-out elements replaced by the op's
identity (``_IDENTITY``: 0 for a sum, -inf for a maximum, ...), so they do not count; the
mask is boolean-like and broadcasts to the input. Where an op has no identity (mean,
var, std) the kept elements are counted instead, and a slice with none kept gives nan.
torch's dtype rules come with them: a sum or product of small integers or bools is
int64, ``argmax``'s index takes the input's dtype, a median of integers is computed in
float.
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from limn.nn import functional as F
from limn.ops.linalg import linalg
from limn.tensor import Tensor

_SMALL_INTS = (dtypes.uint8, dtypes.bool_, dtypes.int8, dtypes.int16, dtypes.int32)


def _dims(dim, ndim: int, op: str) -> tuple[int, ...]:
    """dim as sorted dims; None (or ()) is every dim."""
    if dim is None or dim == ():
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    n = max(ndim, 1)
    if any(not -n <= d < n for d in dims) or len(set(d % n for d in dims)) != len(dims):
        raise IndexError(f"masked.{op}: dims {dims} must be distinct and in [{-n}, {n - 1}]")
    return tuple(sorted(d % n for d in dims))


def _axes(dim, input: Tensor, op: str):
    """The dims to reduce, as Tensor's reductions take them (a 0-d input: None)."""
    return _dims(dim, input.ndim, op) if input.ndim else None


def _mask(input: Tensor, mask, op: str) -> Tensor:
    """The mask as bools of the input's shape."""
    mask = mask if isinstance(mask, Tensor) else Tensor(mask)
    if mask.ndim > input.ndim:
        raise IndexError(f"masked.{op}: mask {mask.shape} has more dims than input {input.shape}")
    return (mask != 0).expand(*input.shape)


def _extreme(input: Tensor, sign: int):
    """+-inf, or an integer dtype's largest or smallest value."""
    if input.dtype.is_float:
        return sign * math.inf
    return dtypes.max_value(input.dtype) if sign > 0 else dtypes.min_value(input.dtype)


# what a masked-out element becomes, per op: it leaves the op's result as it is
_IDENTITY = {
    "sum": lambda x: 0, "prod": lambda x: 1, "amax": lambda x: _extreme(x, -1),
    "amin": lambda x: _extreme(x, 1), "norm": lambda x: 0, "median": lambda x: math.nan,
}  # fmt: skip


def _filled(input: Tensor, mask, kind: str, op: str) -> Tensor:
    if mask is None:
        return input
    return _mask(input, mask, op).where(input, input._lift(_IDENTITY[kind](input)))


def _sum_dtype(input: Tensor, dtype):
    if dtype is not None:
        return dtype
    return dtypes.int64 if input.dtype in _SMALL_INTS else input.dtype


def sum(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A001
    x = _filled(input, mask, "sum", "sum")
    return x.sum(_axes(dim, input, "sum"), keepdim, dtype=_sum_dtype(input, dtype))


def prod(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    x = _filled(input, mask, "prod", "prod").cast(_sum_dtype(input, dtype))
    for d in reversed(_dims(dim, input.ndim, "prod")):
        x = x.prod(d if input.ndim else None, keepdim)
    return x


def cumsum(input, dim: int, *, dtype=None, mask=None) -> Tensor:
    d = _dims(dim, input.ndim, "cumsum")[0]
    x = _filled(input, mask, "sum", "cumsum")
    return x.cumsum(d, dtype=dtype or input.dtype).cast(dtype or input.dtype)


def cumprod(input, dim: int, *, dtype=None, mask=None) -> Tensor:
    d = _dims(dim, input.ndim, "cumprod")[0]
    x = _filled(input, mask, "prod", "cumprod")
    return x.cumprod(d, dtype=dtype or input.dtype).cast(dtype or input.dtype)


def amax(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    x = _filled(input, mask, "amax", "amax")
    return x.amax(_axes(dim, input, "amax"), keepdim).cast(dtype or input.dtype)


def amin(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    x = _filled(input, mask, "amin", "amin")
    return x.amin(_axes(dim, input, "amin"), keepdim).cast(dtype or input.dtype)


def argmax(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    x = _filled(input, mask, "amax", "argmax")
    return x.argmax(dim, keepdim).cast(dtype or input.dtype)


def argmin(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    x = _filled(input, mask, "amin", "argmin")
    return x.argmin(dim, keepdim).cast(dtype or input.dtype)


def _count(input, mask, dim, keepdim, op) -> Tensor:
    """How many elements each result reduces: the kept ones where a mask is given."""
    keep = Tensor.ones(*input.shape, dtype=dtypes.bool_, device=input.device)
    keep = keep if mask is None else _mask(input, mask, op)
    return sum(keep, dim, keepdim=keepdim)


def mean(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    dtype = dtype or input.dtype
    if not dtype.is_float:
        raise TypeError(f"masked.mean: needs a float dtype (the input's or dtype=), got {dtype}")
    total = sum(input, dim, keepdim=keepdim, dtype=dtype, mask=mask)
    return total / _count(input, mask, dim, keepdim, "mean")


def _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, op) -> Tensor:
    if unbiased is not None and correction is not None:
        raise ValueError(f"masked.{op}: give unbiased or correction, not both")
    c = float(correction) if correction is not None else 1.0 if unbiased in (None, True) else 0.0
    dtype = dtype or (input.dtype if input.dtype.is_float else dtypes.float32)
    count = _count(input, mask, dim, True, op)
    centered = input - sum(input, dim, keepdim=True, dtype=dtype, mask=mask) / count
    total = sum(centered * centered, dim, keepdim=keepdim, dtype=dtype, mask=mask)
    count = count.reshape(total.shape).cast(dtype)
    out = total / (count - c).clamp(min=0) if c else total / count
    return out.sqrt() if op == "std" else out


def var(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None,
        mask=None) -> Tensor:  # fmt: skip
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, "var")


def std(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None,
        mask=None) -> Tensor:  # fmt: skip
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, "std")


def median(input, dim: int = -1, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    """The median of the kept elements (nanmedian over them); nan where none is kept, which
    an integer result cannot hold."""
    d = _dims(dim, input.ndim, "median")[0]
    x = input if input.dtype.is_float else input.cast(dtypes.float32)
    out = _filled(x, mask, "median", "median").nanmedian(d, keepdim).values
    if input.dtype.is_float:
        return out
    if bool(out.isnan().any()):
        raise ValueError("masked.median: a slice keeps no element, and an integer has no nan")
    return out.cast(dtype or input.dtype)


def logsumexp(input, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    x = _filled(input, mask, "amax", "logsumexp")
    return x.logsumexp(_axes(dim, input, "logsumexp"), keepdim).cast(dtype or input.dtype)


def logaddexp(input, other, *, dtype=None, input_mask=None, other_mask=None) -> Tensor:
    a = _filled(input, input_mask, "amax", "logaddexp")
    b = _filled(other, other_mask, "amax", "logaddexp")
    return a.logaddexp(b).cast(dtype or input.dtype)


def norm(input, ord=2.0, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:
    kind = "amin" if ord == -math.inf else "norm"  # a masked-out element is +inf for min |x|
    x = _filled(input, mask, kind, "norm")
    return linalg.vector_norm(x, ord, _axes(dim, input, "norm"), keepdim, dtype=dtype)


def softmax(input, dim: int, *, dtype=None, mask=None) -> Tensor:
    return F.softmax(_filled(input, mask, "amax", "softmax"), dim, dtype=dtype)


def log_softmax(input, dim: int, *, dtype=None, mask=None) -> Tensor:
    return F.log_softmax(_filled(input, mask, "amax", "log_softmax"), dim, dtype=dtype)


def softmin(input, dim: int, *, dtype=None, mask=None) -> Tensor:
    return F.softmin(_filled(input, mask, "amin", "softmin"), dim, dtype=dtype)


def normalize(input, ord: float, dim: int, *, eps: float = 1e-12, dtype=None, mask=None):
    """The kept elements over their ord-norm along dim (at least eps); masked-out ones 0."""
    n = norm(input, ord, dim, keepdim=True, dtype=dtype, mask=mask)
    return _filled(input, mask, "sum", "normalize") / n.clamp(min=eps)
