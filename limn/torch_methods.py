"""The torch-like surface of limn.Tensor: elementwise math, reductions, movement, indexing.

Every method here is a few lines that check arguments, apply the Tensor's surface rules
(promotion and broadcasting through ``_align``, torch's names and signatures) and hand the
work to ``ir/graph/compose.py`` or to a primitive. ``TorchMethods`` is a mixin: ``limn/tensor.py``
owns the Tensor itself (its node, device, bytes, primitives and autograd bookkeeping), and
nothing here touches a node directly.
"""

from __future__ import annotations

import math
from typing import Self

import numpy as np

from ir.graph import compose, dtypes, functions
from ir.graph.dtypes import DType, as_dtype, promote, promote_scalar


class TorchMethods:
    # ---- elementwise ----------------------------------------------------------------

    def __add__(self, o):
        a, b = self._align(o, "add")
        return a.p_add(b)

    def __radd__(self, o):
        a, b = self._align(o, "add", True)
        return a.p_add(b)

    def __sub__(self, o):
        return compose.sub(*self._align(o, "sub"))

    def __rsub__(self, o):
        return compose.sub(*self._align(o, "sub", True))

    def __mul__(self, o):
        a, b = self._align(o, "mul")
        return a.p_mul(b)

    def __rmul__(self, o):
        a, b = self._align(o, "mul", True)
        return a.p_mul(b)

    def __truediv__(self, o):
        a, b = self._align(o, "div")
        return functions.divide(a._float(), b._float())

    def __rtruediv__(self, o):
        a, b = self._align(o, "div", True)
        return functions.divide(a._float(), b._float())

    def __neg__(self):
        return self.p_neg()

    def __pos__(self):
        return self

    def __pow__(self, o):
        if isinstance(o, int) and not isinstance(o, bool) and self.dtype.is_int:
            if o < 0:
                raise ValueError(
                    f"pow: a {self.dtype} tensor to the negative power {o} has no integer "
                    "result; accepted: a non-negative exponent, or a float tensor (.float())"
                )
            return compose.pow_int(self, o)  # exact: a few multiplies for a known exponent
        return _pow(*self._align(o, "pow"))  # floats: one POW node, as xp.pow

    def __rpow__(self, o):
        return _pow(*self._align(o, "pow", True))

    def __matmul__(self, o):
        return self.matmul(o)

    def __rmatmul__(self, o):
        return self._lift(o).matmul(self)

    def __lt__(self, o):
        return self._compare(o, "lt")

    def __gt__(self, o):
        return self._compare(o, "gt")

    def __le__(self, o):
        return self._compare(o, "le")

    def __ge__(self, o):
        return self._compare(o, "ge")

    def __eq__(self, o):  # elementwise, as in torch
        return self._compare(o, "eq")

    def __ne__(self, o):
        return self._compare(o, "ne")

    def _compare(self, o, op: str) -> Self:
        """A comparison; an int outside the integer dtype it would take is never wrapped.

        Such an int lies above (or below) every value of the dtype, so each comparison has
        one answer for the whole tensor, as the exact numbers would give.
        """
        if isinstance(o, int) and not isinstance(o, bool):
            d = promote_scalar(self.dtype, o)
            if d.is_int and not dtypes.min_value(d) <= o <= dtypes.max_value(d):
                above = o > dtypes.max_value(d)  # the tensor is below o everywhere
                answer = {"lt": above, "le": above, "gt": not above, "ge": not above}
                value = answer.get(op, op == "ne")
                return self.p_const(value, dtype=dtypes.bool_)
        return getattr(compose, op)(*self._align(o, op))

    def _logical(self, o, fn, name):
        a, b = self._align(o, name)
        if a.dtype != dtypes.bool_:
            raise TypeError(f"{name}: needs bool tensors, got {a.dtype}")
        return fn(a, b)

    def __and__(self, o):
        return self._logical(o, compose.logical_and, "and")

    def __or__(self, o):
        return self._logical(o, compose.logical_or, "or")

    def __xor__(self, o):
        return self._logical(o, compose.logical_xor, "xor")

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        if self.dtype != dtypes.bool_:
            raise TypeError(f"invert: needs a bool tensor, got {self.dtype}")
        return compose.logical_not(self)

    def add(self, o):
        return self + o

    def sub(self, o):
        return self - o

    def mul(self, o):
        return self * o

    def div(self, o):
        return self / o

    def pow(self, o):
        return self**o

    def neg(self):
        return -self

    def exp(self):
        return self._float().p_exp()

    def log(self):
        return self._float().p_log()

    def sqrt(self):
        return self._float().p_sqrt()

    def rsqrt(self):
        return self._float().p_sqrt().p_recip()

    def reciprocal(self):
        return self._float().p_recip()

    def exp2(self):
        return functions.exp2(self._float())

    def log2(self):
        return functions.log2(self._float())

    def log10(self):
        return functions.log10(self._float())

    def expm1(self):
        return functions.expm1(self._float())

    def log1p(self):
        return functions.log1p(self._float())

    def sin(self):
        return functions.sin(self._float())

    def cos(self):
        return functions.cos(self._float())

    def tan(self):
        return functions.tan(self._float())

    def asin(self):
        return functions.asin(self._float())

    def acos(self):
        return functions.acos(self._float())

    def atan(self):
        return functions.atan(self._float())

    def sinh(self):
        return functions.sinh(self._float())

    def cosh(self):
        return functions.cosh(self._float())

    def asinh(self):
        return functions.asinh(self._float())

    def acosh(self):
        return functions.acosh(self._float())

    def atanh(self):
        return functions.atanh(self._float())

    def atan2(self, other):
        a, b = self._align(other, "atan2")
        return functions.atan2(a._float(), b._float())

    def hypot(self, other):
        a, b = self._align(other, "hypot")
        return functions.hypot(a._float(), b._float())

    def logaddexp(self, other):
        a, b = self._align(other, "logaddexp")
        return functions.logaddexp(a._float(), b._float())

    def fmod(self, other):
        a, b = self._align(other, "fmod")
        return functions.fmod(a, b) if a.dtype.is_float else a.p_mod(b)

    def square(self):
        return compose.square(self)

    def abs(self):
        return functions.fabs(self) if self.dtype.is_float else compose.abs_(self)

    def sign(self):
        return compose.sign(self)

    def relu(self):
        return compose.relu(self)

    def sigmoid(self):
        return compose.sigmoid(self._float())

    def tanh(self):
        return functions.tanh(self._float())

    def gelu(self, approximate: str = "none"):
        return compose.gelu(self._float(), approximate)

    def silu(self):
        return self * self.sigmoid()

    def softplus(self):
        return compose.softplus(self._float())

    def erf(self):
        return compose.erf(self._float())

    def floor(self):
        return functions.floor(self)

    def ceil(self):
        return functions.ceil(self)

    def trunc(self):
        return functions.trunc(self)

    def round(self):
        return functions.rint(self)

    def isnan(self):
        return compose.isnan(self)

    def isinf(self):
        return compose.isinf(self)

    def isfinite(self):
        return compose.isfinite(self)

    def maximum(self, o):
        return compose.maximum(*self._align(o, "maximum"))

    def minimum(self, o):
        return compose.minimum(*self._align(o, "minimum"))

    def clamp(self, min=None, max=None):
        x = self
        if min is not None:
            x = x.maximum(min)
        if max is not None:
            x = x.minimum(max)
        return x

    clip = clamp

    def lerp(self, end, weight):
        """torch's two-sided form: ``self + w*(end - self)`` where ``|w| < 0.5``, else
        ``end - (end - self)*(1 - w)``; exact at both ends, and no inf - inf where an end
        is infinite (``lerp(inf, 0, 0.5)`` is inf, as in torch)."""
        diff = end - self
        if not isinstance(weight, TorchMethods):
            return self + diff * weight if abs(weight) < 0.5 else end - diff * (1 - weight)
        near_self = weight.abs() < 0.5
        return near_self.where(self + diff * weight, end - diff * (1 - weight))

    # ---- reductions -----------------------------------------------------------------

    def _axes(self, axis, op):
        return compose.normalize_axes(axis, self.ndim, op)

    def sum(self, axis=None, keepdim: bool = False, dtype=None):
        x = self._total(dtype)
        return compose.sum_(x, self._axes(axis, "sum"), keepdim)

    def _total(self, dtype):
        """The operand of a sum or cumsum, cast to its total's dtype (integers: int64)."""
        want = as_dtype(dtype) if dtype is not None else dtypes.total_dtype(self.dtype, False)
        return self if want == self.dtype else self.p_cast(want)

    def max(self, axis=None, keepdim: bool = False):
        self._nonempty(axis, "max")
        return compose.max_(self, self._axes(axis, "max"), keepdim)

    def min(self, axis=None, keepdim: bool = False):
        self._nonempty(axis, "min")
        return compose.min_(self, self._axes(axis, "min"), keepdim)

    def _nonempty(self, axis, op):
        axes = self._axes(axis, op)
        if any(self.shape[a] == 0 for a in axes):
            raise ValueError(f"{op}: cannot reduce a zero-size axis of shape {self.shape}")

    def mean(self, axis=None, keepdim: bool = False):
        return compose.mean(self._float(), self._axes(axis, "mean"), keepdim)

    def var(self, axis=None, keepdim: bool = False, correction: float = 1):
        return compose.var(self._float(), self._axes(axis, "var"), keepdim, correction)

    def std(self, axis=None, keepdim: bool = False, correction: float = 1):
        return compose.std(self._float(), self._axes(axis, "std"), keepdim, correction)

    def logsumexp(self, axis=None, keepdim: bool = False):
        return compose.logsumexp(self._float(), self._axes(axis, "logsumexp"), keepdim)

    def softmax(self, axis: int = -1):
        x = self._float()
        return compose.softmax(x, compose.normalize_axis(axis, self.ndim, "softmax"))

    def log_softmax(self, axis: int = -1):
        x = self._float()
        return compose.log_softmax(x, compose.normalize_axis(axis, self.ndim, "log_softmax"))

    def _arg(self, fn, axis, keepdim, name):
        if axis is None:
            return fn(self.reshape(-1), 0, False)
        self._nonempty(axis, name)
        return fn(self, compose.normalize_axis(axis, self.ndim, name), keepdim)

    def argmax(self, axis=None, keepdim: bool = False):
        return self._arg(compose.argmax, axis, keepdim, "argmax")

    def argmin(self, axis=None, keepdim: bool = False):
        return self._arg(compose.argmin, axis, keepdim, "argmin")

    def cumsum(self, axis: int = 0, dtype=None):
        axis = compose.normalize_axis(axis, self.ndim, "cumsum")
        return compose.cumsum(self._total(dtype), axis)

    def any(self, axis=None, keepdim: bool = False):
        return self.p_cast(dtypes.bool_).max(axis, keepdim)

    def all(self, axis=None, keepdim: bool = False):
        return self.p_cast(dtypes.bool_).min(axis, keepdim)

    # ---- linear algebra -------------------------------------------------------------

    def matmul(self, o) -> Self:
        o = o if isinstance(o, TorchMethods) else self._lift(o)
        if self.ndim == 0 or o.ndim == 0:
            raise ValueError(f"matmul: needs at least 1-d operands, got {self.shape} and {o.shape}")
        d = promote(self.dtype, o.dtype)
        return compose.matmul(self.p_cast(d), o.p_cast(d))

    def dot(self, o):
        return self.matmul(o)

    def linear(self, weight: Self, bias: Self | None = None) -> Self:
        out = self @ weight.T
        return out if bias is None else out + bias

    # ---- movement -------------------------------------------------------------------

    def reshape(self, *shape) -> Self:
        shape = compose.resolve_shape(_shape_arg(shape), self.shape)
        return self.p_reshape(shape)

    view = reshape

    def permute(self, *order) -> Self:
        order = _shape_arg(order)
        norm = tuple(compose.normalize_axis(a, self.ndim, "permute") for a in order)
        if sorted(norm) != list(range(self.ndim)):
            raise ValueError(
                f"permute: {order} is not a permutation of the {self.ndim} dims of {self.shape}"
            )
        return self.p_permute(norm)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> Self:
        if self.ndim < 2 and (dim0, dim1) == (-2, -1):
            return self
        a = compose.normalize_axis(dim0, self.ndim, "transpose")
        b = compose.normalize_axis(dim1, self.ndim, "transpose")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.p_permute(tuple(order))

    @property
    def T(self) -> Self:
        return self.p_permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Self:
        return self.transpose(-2, -1)

    def expand(self, *shape) -> Self:
        shape = _shape_arg(shape)
        if len(shape) < self.ndim:
            raise ValueError(f"expand: cannot expand {self.shape} to fewer dims {shape}")
        lead = len(shape) - self.ndim
        full = tuple(
            self.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape)
        )
        for i, s in enumerate(self.shape):
            if s != 1 and s != full[i + lead]:
                raise ValueError(
                    f"expand: dim {i} of {self.shape} has size {s}, cannot expand to "
                    f"{full[i + lead]} in {shape}; only size-1 dims expand"
                )
        return compose.expand_to(self, full)

    def broadcast_to(self, shape) -> Self:
        return self.expand(*shape)

    def pad(self, pads, value: float = 0.0) -> Self:
        """``pads`` is one (before, after) per dim, or per trailing dims if fewer."""
        pads = tuple(tuple(p) for p in pads)
        if len(pads) > self.ndim or any(len(p) != 2 or min(p) < 0 for p in pads):
            raise ValueError(
                f"pad: needs up to {self.ndim} non-negative (before, after) pairs for shape "
                f"{self.shape}, got {pads}"
            )
        pads = ((0, 0),) * (self.ndim - len(pads)) + pads
        out = self.p_pad(pads)
        if value != 0:
            inside = self.p_const(True, dtype=dtypes.bool_).p_pad(pads)
            out = inside.p_where(out, out.p_const(value))
        return out

    def shrink(self, bounds) -> Self:
        bounds = tuple((0, s) if b is None else tuple(b) for b, s in zip(bounds, self.shape))
        if len(bounds) != self.ndim or any(
            not 0 <= b <= e <= s for (b, e), s in zip(bounds, self.shape)
        ):
            raise ValueError(
                f"shrink: bounds {bounds} do not fit shape {self.shape}; each needs "
                f"0 <= start <= end <= size"
            )
        return self.p_shrink(bounds)

    def flip(self, *axes) -> Self:
        axes = _shape_arg(axes)
        return self.p_flip(compose.normalize_axes(axes, self.ndim, "flip"))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        if self.ndim == 0:
            return self.reshape(1)
        s = compose.normalize_axis(start_dim, self.ndim, "flatten")
        e = compose.normalize_axis(end_dim, self.ndim, "flatten")
        shape = self.shape[:s] + (math.prod(self.shape[s : e + 1]),) + self.shape[e + 1 :]
        return self.reshape(shape)

    def squeeze(self, axis=None) -> Self:
        if axis is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        axes = compose.normalize_axes(axis, self.ndim, "squeeze")
        for a in axes:
            if self.shape[a] != 1:
                raise ValueError(
                    f"squeeze: dim {a} of {self.shape} has size {self.shape[a]}; "
                    "only size-1 dims can be squeezed"
                )
        return compose.squeeze_axes(self, axes)

    def unsqueeze(self, axis: int) -> Self:
        a = compose.normalize_axis(axis, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:a] + (1,) + self.shape[a:])

    def contiguous(self) -> Self:
        return self.p_contiguous()

    def repeat(self, *repeats) -> Self:
        reps = _shape_arg(repeats)
        if len(reps) < self.ndim:
            raise ValueError(
                f"repeat: needs at least {self.ndim} repeats for shape {self.shape}, got {reps}"
            )
        x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        shape = []
        for r, s in zip(reps, x.shape):
            shape += [r, s]
        y = x.reshape(tuple(v for s in x.shape for v in (1, s))).expand(*shape)
        return y.reshape(tuple(r * s for r, s in zip(reps, x.shape)))

    def split(self, size, axis: int = 0) -> list[Self]:
        axis = compose.normalize_axis(axis, self.ndim, "split")
        n = self.shape[axis]
        sizes = (
            [size] * (n // size) + ([n % size] if n % size else [])
            if isinstance(size, int)
            else list(size)
        )
        if sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to dim {axis} of {self.shape}")
        return compose.split(self, sizes, axis)

    def chunk(self, n: int, axis: int = 0) -> list[Self]:
        return self.split(-(-self.shape[axis] // n), axis)

    def gather(self, axis: int, index: Self) -> Self:
        """out[.., i, ..] = self[.., index[.., i, ..], ..] along ``axis`` (torch.gather)."""
        axis = compose.normalize_axis(axis, self.ndim, "gather")
        if not index.dtype.is_int or index.ndim != self.ndim:
            raise TypeError(
                f"gather: index must be an integer tensor with {self.ndim} dims, got "
                f"{index.dtype}{list(index.shape)}"
            )
        bounds = [(0, s) for s in index.shape]
        bounds[axis] = (0, self.shape[axis])
        if any(index.shape[d] > self.shape[d] for d in range(self.ndim) if d != axis):
            raise ValueError(f"gather: index {index.shape} is larger than {self.shape}")
        src = self.p_shrink(tuple(bounds))
        return src.p_gather(index, axis)

    def scatter_add(self, axis: int, index: Self, src: Self) -> Self:
        axis = compose.normalize_axis(axis, self.ndim, "scatter_add")
        if index.shape != src.shape or not index.dtype.is_int:
            raise ValueError(
                f"scatter_add: index and src must share a shape and index be an integer, got "
                f"{index.dtype}{list(index.shape)} and {src.dtype}{list(src.shape)}"
            )
        return self.p_scatter(index, src.p_cast(self.dtype), axis)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iter: cannot iterate over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, key) -> Self:
        return _index(self, key)


def _pow(a: TorchMethods, b: TorchMethods) -> TorchMethods:
    """a**b after promotion: integers stay exact integers, as in torch; the rest is float."""
    if a.dtype.is_int:
        return functions.int_pow(a, b)
    return functions.pow(a._float(), b._float())


def _index(x: TorchMethods, key) -> TorchMethods:
    """Basic indexing as views: ints, slices of any step, ``...`` and ``None``."""
    if not isinstance(key, tuple):
        key = (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("index: only one ellipsis allowed")
    if n_real > x.ndim:
        raise IndexError(f"index: too many indices ({n_real}) for a tensor of shape {x.shape}")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded += [slice(None)] * (x.ndim - n_real)
        else:
            expanded.append(k)
    expanded += [slice(None)] * (x.ndim - sum(1 for k in expanded if k is not None))
    bounds, steps, flips, out_shape, dim = [], [], [], [], 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            continue
        size = x.shape[dim]
        if isinstance(k, TorchMethods) and k.ndim == 0 and k.dtype.is_int:
            k = int(k.item())
        if isinstance(k, int) and not isinstance(k, bool):
            if not -size <= k < size:
                raise IndexError(
                    f"index: {k} is out of range for dim {dim} of size {size} in shape "
                    f"{x.shape}; accepted: {-size}..{size - 1}"
                )
            k %= size
            bounds.append((k, k + 1))
            steps.append(1)
        elif isinstance(k, slice):
            if k.step == 0:
                raise ValueError(
                    f"index: slice step cannot be zero (dim {dim} of shape {x.shape}); "
                    "accepted: any non-zero step"
                )
            start, stop, step = k.indices(size)
            if step > 0:
                lo, hi = start, max(start, stop)
                count = len(range(start, stop, step))
            else:
                count = len(range(start, stop, step))
                lo, hi = (start - (count - 1) * -step, start + 1) if count else (0, 0)
                flips.append(dim)
            bounds.append((lo, hi))
            steps.append(abs(step))
            out_shape.append(count)
        else:
            raise TypeError(
                f"index: {type(k).__name__} is not supported; accepted: int, slice, ..., None"
            )
        dim += 1
    y = x.p_shrink(tuple(bounds)).p_flip(tuple(flips)).p_step(tuple(steps))
    return y.p_reshape(tuple(out_shape))


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    try:
        return compose.as_ints(shape, "shape", "shape")
    except TypeError:
        hint = ""
        if any(isinstance(s, str | DType | np.dtype | type) for s in shape):
            hint = "; pass a dtype by keyword (dtype=...)"
        raise TypeError(f"shape: needs ints, got {shape}{hint}") from None
