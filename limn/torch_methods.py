"""The torch-like math of limn.Tensor: elementwise ops, reductions, linear algebra.

Every method here is a few lines that check arguments, apply the Tensor's surface rules
(promotion and broadcasting through ``_align``, torch's names and signatures) and hand the
work to ``ir/graph/compose.py`` or to a primitive. ``TorchMethods`` is a mixin: ``limn/tensor.py``
owns the Tensor itself (its node, device, bytes, primitives and autograd bookkeeping),
``limn/torch_movement.py`` its views and indexing, and nothing here touches a node directly.

torch's argument names are accepted beside limn's by one rule, ``torch_names``: every
method with an ``axis`` parameter also takes ``dim=`` (and ``keepdims=`` for
``keepdim=``, ``unbiased=`` for ``correction=``). ``max``/``min`` given ``dim=`` answer
torch's (values, indices) pair; given ``axis`` (or positionally) they answer the values,
as ``amax``/``amin`` do. In-place methods (``add_``, ``zero_``, ...) are ``assign``s of
the out-of-place result, so they are refused on a tensor autograd is tracking, as torch
refuses them on a leaf that requires grad.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections import namedtuple
from typing import Self

from ir.graph import compose, dtypes, functions
from ir.graph.dtypes import as_dtype, promote, promote_scalar
from limn import autograd

MinMax = namedtuple("MinMax", "values indices")  # torch.return_types.max / min / topk / sort


def _binary(name: str, fn):
    """``self <op> o`` and ``o <op> self``: ``fn`` of the operands ``_align`` promotes and
    broadcasts."""
    return (
        lambda self, o: fn(*self._align(o, name)),
        lambda self, o: fn(*self._align(o, name, True)),
    )


def _logical(name: str, fn, bits: str):
    """``&``, ``|`` or ``^``: ``fn`` of two bool operands, or the primitive ``bits`` of two
    integer ones, as torch's bitwise ops (either side first: they commute)."""

    def checked(a, b):
        if a.dtype.is_int:
            return getattr(a, bits)(b)
        if a.dtype != dtypes.bool_:
            raise TypeError(f"{name}: needs bool or integer tensors, got {a.dtype}")
        return fn(a, b)

    return _binary(name, checked)[0]


class TorchMethods:
    # ---- elementwise ----------------------------------------------------------------

    __add__, __radd__ = _binary("add", lambda a, b: a.p_add(b))
    __sub__, __rsub__ = _binary("sub", compose.sub)
    __mul__, __rmul__ = _binary("mul", lambda a, b: a.p_mul(b))
    __truediv__, __rtruediv__ = _binary(
        "div", lambda a, b: functions.divide(a._float(), b._float())
    )

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

    def __rmatmul__(self, o):
        return self._lift(o).matmul(self)

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
                return self.p_const(answer.get(op, op == "ne"), dtype=dtypes.bool_)
        return getattr(compose, op)(*self._align(o, op))

    __and__ = __rand__ = bitwise_and = _logical("and", compose.logical_and, "p_and")
    __or__ = __ror__ = bitwise_or = _logical("or", compose.logical_or, "p_or")
    __xor__ = __rxor__ = bitwise_xor = _logical("xor", compose.logical_xor, "p_xor")
    pow, true_divide = __pow__, __truediv__

    def add(self, other, *, alpha=1):
        return self + (other if alpha == 1 else other * alpha)

    def sub(self, other, *, alpha=1):
        return self - (other if alpha == 1 else other * alpha)

    def mul(self, other):
        return self * other

    def neg(self):
        if self.dtype == dtypes.bool_:
            raise TypeError("neg: a bool tensor has no negation; accepted: ~x (logical not)")
        return -self

    def div(self, other, *, rounding_mode: str | None = None):
        """``/``, or torch's ``rounding_mode``: "trunc" toward zero, "floor" down."""
        if rounding_mode is None:
            return self / other
        a, b = self._align(other, "div")
        if rounding_mode == "trunc":
            return a.p_idiv(b) if a.dtype.is_int else functions.trunc(functions.divide(a, b))
        if rounding_mode == "floor":
            if a.dtype.is_int:
                return functions.int_floor_divide(a, b)
            return functions.float_floor_divide(a, b)
        raise ValueError(
            f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}"
        )

    multiply, divide, subtract = mul, div, sub

    def __invert__(self):
        if self.dtype.is_int:
            ones = -1 if self.dtype.kind == "i" else dtypes.max_value(self.dtype)
            return self.p_xor(self.p_const(ones))
        if self.dtype != dtypes.bool_:
            raise TypeError(f"invert: needs a bool or integer tensor, got {self.dtype}")
        return compose.logical_not(self)

    bitwise_not = __invert__

    def sqrt(self):
        return self._float().p_sqrt()

    def rsqrt(self):
        return self._float().p_sqrt().p_recip()

    def reciprocal(self):
        return self._float().p_recip()

    def fmod(self, other):
        a, b = self._align(other, "fmod")
        return functions.fmod(a, b) if a.dtype.is_float else a.p_mod(b)

    def abs(self):
        return functions.fabs(self) if self.dtype.is_float else compose.abs_(self)

    sign, relu = compose.sign, compose.relu

    def square(self):
        """x * x; a bool tensor's in int64, as torch's (its square is a power)."""
        return compose.square(self.p_cast(dtypes.int64) if self.dtype == dtypes.bool_ else self)

    isnan, isinf, isfinite = compose.isnan, compose.isinf, compose.isfinite
    floor, ceil, trunc = functions.floor, functions.ceil, functions.trunc

    def round(self, decimals: int = 0):
        """Half to even, as torch; ``decimals`` scales by 10**decimals first (as torch does,
        so a value whose scaled form rounds in float rounds the same)."""
        if decimals == 0 or self.dtype.is_int:
            return self if self.dtype.is_int else functions.rint(self)
        scale = 10.0 ** abs(decimals)
        if decimals > 0:
            return functions.rint(self * scale) / scale
        return functions.rint(self / scale) * scale

    def softplus(self, beta: float = 1.0, threshold: float = 20.0):
        """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's)."""
        x = self._float()
        y = compose.softplus(x if beta == 1 else x * beta)
        y = y if beta == 1 else y / beta
        return (x * beta > threshold).where(x, y)

    def gelu(self, approximate: str = "none"):
        return compose.gelu(self._float(), approximate)

    def silu(self):
        return self * self.sigmoid()

    maximum = _binary("maximum", compose.maximum)[0]
    minimum = _binary("minimum", compose.minimum)[0]

    def clamp(self, min=None, max=None):
        x = self
        if min is not None:
            x = x.maximum(min)
        if max is not None:
            x = x.minimum(max)
        return x

    clip = clamp

    def masked_fill(self, mask, value):
        """``value`` (a number or a 0-d tensor) where ``mask`` (broadcast to this shape) is
        True, else this tensor."""
        if isinstance(value, TorchMethods) and value.ndim:
            raise ValueError(
                f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}"
            )
        if mask.dtype != dtypes.bool_:
            raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype}")
        return mask.where(value, self).cast(self.dtype)

    def clone(self, memory_format=None):
        """A copy (limn has one memory format: ``memory_format`` is accepted)."""
        return self.p_contiguous()

    def tril(self, diagonal: int = 0):
        return self._triangle(diagonal, lambda d, k: d <= k, "tril")

    def triu(self, diagonal: int = 0):
        return self._triangle(diagonal, lambda d, k: d >= k, "triu")

    def _triangle(self, k: int, keep, op: str):
        """Zero the elements of the last two dims whose diagonal j - i is not kept."""
        if self.ndim < 2:
            raise ValueError(f"{op}: needs at least 2 dims, got shape {self.shape}")
        n, m = self.shape[-2:]
        i = type(self).arange(n, device=self.device).reshape(n, 1)
        j = type(self).arange(m, device=self.device).reshape(1, m)
        return keep(j - i, compose.as_int(k, "diagonal", op)).where(self, self.p_const(0))

    def lerp(self, end, weight):
        """torch's two-sided form: ``self + w*(end - self)`` where ``|w| < 0.5``, else
        ``end - (end - self)*(1 - w)``; exact at both ends, and no inf - inf where an end
        is infinite (``lerp(inf, 0, 0.5)`` is inf, as in torch)."""
        diff = end - self
        if not isinstance(weight, TorchMethods):
            return self + diff * weight if abs(weight) < 0.5 else end - diff * (1 - weight)
        return (weight.abs() < 0.5).where(self + diff * weight, end - diff * (1 - weight))

    # ---- reductions -----------------------------------------------------------------

    def _axes(self, axis, op):
        return compose.normalize_axes(axis, self.ndim, op)

    def sum(self, axis=None, keepdim: bool = False, dtype=None):
        return _labelled(compose.sum_(self._total(dtype), self._axes(axis, "sum"), keepdim), "Sum")

    def _total(self, dtype):
        """The operand of a sum or cumsum, cast to its total's dtype (integers: int64)."""
        want = as_dtype(dtype) if dtype is not None else dtypes.total_dtype(self.dtype, False)
        return self if want == self.dtype else self.p_cast(want)

    def amax(self, axis=None, keepdim: bool = False):
        self._nonempty(axis, "max")
        return compose.max_(self, self._axes(axis, "max"), keepdim)

    def amin(self, axis=None, keepdim: bool = False):
        self._nonempty(axis, "min")
        return compose.min_(self, self._axes(axis, "min"), keepdim)

    def max(self, dim=None, keepdim: bool = False, *, axis=None):
        """torch's three forms: ``max()`` the largest, ``max(dim)`` the pair (values,
        indices), ``max(other)`` the elementwise ``maximum``; limn's ``max(axis=)`` is the
        values alone, as ``amax``."""
        if isinstance(dim, TorchMethods):
            return self.maximum(dim)
        if dim is None or isinstance(dim, tuple | list):  # several dims: limn's, the values
            return self.amax(axis if dim is None else dim, keepdim)
        return MinMax(self.amax(dim, keepdim), self.argmax(dim, keepdim))

    def min(self, dim=None, keepdim: bool = False, *, axis=None):
        """As ``max``: the smallest, the pair (values, indices), or ``minimum``."""
        if isinstance(dim, TorchMethods):
            return self.minimum(dim)
        if dim is None or isinstance(dim, tuple | list):
            return self.amin(axis if dim is None else dim, keepdim)
        return MinMax(self.amin(dim, keepdim), self.argmin(dim, keepdim))

    def _nonempty(self, axis, op):
        if any(self.shape[a] == 0 for a in self._axes(axis, op)):
            raise ValueError(f"{op}: cannot reduce a zero-size axis of shape {self.shape}")

    def mean(self, axis=None, keepdim: bool = False, dtype=None):
        return _labelled(self._mean(axis, keepdim, dtype), "Mean")

    def _mean(self, axis, keepdim, dtype):
        if dtype is None and not self.dtype.is_float:
            raise TypeError(
                f"mean: needs a float tensor, got {self.dtype}; accepted: x.float().mean() "
                "or mean(dtype=...), as in torch"
            )
        x = self if dtype is None else self.cast(dtype)
        return compose.mean(x, self._axes(axis, "mean"), keepdim)

    def var(self, axis=None, keepdim: bool = False, correction: float = 1):
        if isinstance(axis, bool):  # torch's var(x, unbiased)
            axis, correction = None, int(axis)
        return compose.var(self._float(), self._axes(axis, "var"), keepdim, correction)

    def std(self, axis=None, keepdim: bool = False, correction: float = 1):
        if isinstance(axis, bool):  # torch's std(x, unbiased)
            axis, correction = None, int(axis)
        return compose.std(self._float(), self._axes(axis, "std"), keepdim, correction)

    def logsumexp(self, axis=None, keepdim: bool = False):
        return compose.logsumexp(self._float(), self._axes(axis, "logsumexp"), keepdim)

    def softmax(self, axis: int = -1, dtype=None):
        x = self._float() if dtype is None else self.cast(dtype)
        return compose.softmax(x, compose.normalize_axis(axis, self.ndim, "softmax"))

    def log_softmax(self, axis: int = -1, dtype=None):
        x = self._float() if dtype is None else self.cast(dtype)
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
        return self.p_cast(dtypes.bool_).amax(axis, keepdim)

    def all(self, axis=None, keepdim: bool = False):
        return self.p_cast(dtypes.bool_).amin(axis, keepdim)

    def norm(self, p="fro", axis=None, keepdim: bool = False, dtype=None):
        """The vector p-norm over ``axis`` (all dims by default): 0, 1, 2, inf, -inf or any
        p; "fro" (the default) is 2 over the dims given; "nuc", the nuclear norm of the
        matrices over ``axis`` (every dim by default: a 2-d tensor's, as torch's)."""
        if p == "nuc":  # the singular values' sum: ``linalg.matrix_norm``, set on the class
            dims = tuple(range(self.ndim)) if axis is None else axis  # by limn.torch_functions
            return self._nuclear_norm(dims, keepdim, dtype)
        if p is not None and not isinstance(p, int | float) and p != "fro":
            raise ValueError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
        p = 2 if p is None or p == "fro" else p
        a = (self._float() if dtype is None else self.cast(dtype)).abs()
        if p == 0:  # torch's "norm" of order 0: how many are not zero
            return (a != 0).sum(axis, keepdim).cast(a.dtype)
        if p == math.inf:
            return a.amax(axis, keepdim)
        if p == -math.inf:
            return a.amin(axis, keepdim)
        if p in (1, 2):
            return (a if p == 1 else a * a).sum(axis, keepdim) ** (1 / p)
        return (a**p).sum(axis, keepdim) ** (1 / p)

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

    # ---- linear algebra -------------------------------------------------------------

    def matmul(self, o) -> Self:
        o = o if isinstance(o, TorchMethods) else self._lift(o)
        if self.ndim == 0 or o.ndim == 0:
            raise ValueError(f"matmul: needs at least 1-d operands, got {self.shape} and {o.shape}")
        d = promote(self.dtype, o.dtype)
        return compose.matmul(self.p_cast(d), o.p_cast(d))

    dot = __matmul__ = matmul

    def linear(self, weight: Self, bias: Self | None = None) -> Self:
        out = self @ weight.T
        return out if bias is None else out + bias


def _labelled(out, label: str):
    """``out`` whose autograd record prints torch's name for the composite that made it
    (``<SumBackward>``, not the reshape that ended it)."""
    if out._ctx is not None:
        out._ctx.label = label
    return out


def _pow(a: TorchMethods, b: TorchMethods) -> TorchMethods:
    """a**b after promotion: integers stay exact integers, as in torch; the rest is float."""
    return functions.int_pow(a, b) if a.dtype.is_int else functions.pow(a._float(), b._float())


def _float_math(name: str):
    """A method computing ``functions.<name>`` (or ``compose.<name>``) in float (integers
    become float32)."""
    fn = getattr(functions, name, None) or getattr(compose, name)

    def method(self, *other):
        xs = self._align(other[0], name) if other else (self,)
        return fn(*(x._float() for x in xs))

    method.__name__ = name
    return method


for _name in (
    "exp log sigmoid erf exp2 log2 log10 expm1 log1p sin cos tan asin acos atan sinh "
    "cosh tanh asinh acosh atanh atan2 hypot logaddexp"
).split():
    setattr(TorchMethods, _name, _float_math(_name))
TorchMethods.arctan2 = TorchMethods.atan2


def _sigmoid_grad(ctx, out, g):
    """sigmoid's gradient from its result, s * (1 - s), as torch's: finite everywhere.
    Through sigmoid's primitives, 1 / (1 + exp(-x)), it is 0 * inf at x below about -88 in
    float32 (exp overflows while the reciprocal's gradient underflows): NaN."""
    return (g * out * (1 - out),)


_sigmoid_grad.reads = "result"  # torch saves the result alone
_sigmoid_grad.__name__ = "sigmoid"  # its record prints as torch's: <SigmoidBackward>


def _sigmoid(self):
    x = self._float()
    with autograd.no_grad():
        s = compose.sigmoid(x)
    return x._wrap(s.node, _sigmoid_grad, (x,))


TorchMethods.sigmoid = _sigmoid


def _comparison(op: str):
    """``x < o`` and the rest, elementwise (``==`` too, as in torch): ``_compare``."""
    return lambda self, o: self._compare(o, op)


for _name in ("lt", "gt", "le", "ge", "eq", "ne"):
    setattr(TorchMethods, _name, _comparison(_name))
    setattr(TorchMethods, f"__{_name}__", getattr(TorchMethods, _name))


def scalar_dims(fn):
    """``fn`` taking torch's dim 0 or -1 on a 0-d tensor (``x.sum(0)``, ``x.argmax(-1)``):
    computed on it as shape (1,), each tensor it answers made 0-d again."""
    sig = inspect.signature(fn)
    key = "axis" if "axis" in sig.parameters else "dim"

    @functools.wraps(fn)
    def method(self, *args, **kw):
        if self.ndim == 0:
            bound = sig.bind(self, *args, **kw)
            bound.apply_defaults()
            axis = bound.arguments.get(key)
            axes = axis if isinstance(axis, tuple | list) else (axis,)
            if axis is not None and axes and all(type(a) is int and a in (0, -1) for a in axes):
                out = fn(self.reshape(1), *args, **kw)
                if isinstance(out, tuple):
                    return type(out)(*(t.reshape(()) for t in out))
                return out.reshape(())
        return fn(self, *args, **kw)

    return method


for _name in (
    "sum amax amin max min mean var std logsumexp softmax log_softmax argmax argmin cumsum "
    "any all norm argsort sort topk"
).split():
    setattr(TorchMethods, _name, scalar_dims(getattr(TorchMethods, _name)))


TORCH_NAMES = {"dim": "axis", "keepdims": "keepdim", "unbiased": "correction"}


def torch_names(fn):
    """``fn`` (with an ``axis`` parameter) taking torch's names too: ``dim`` for ``axis``,
    ``keepdims`` for ``keepdim``, ``unbiased`` for ``correction``."""

    @functools.wraps(fn)
    def method(*args, **kw):
        if kw:
            for torch_name, ours in TORCH_NAMES.items():
                if torch_name in kw:
                    kw[ours] = kw.pop(torch_name)
            if "correction" in kw and isinstance(kw["correction"], bool | None):
                c = kw["correction"]  # torch's None: the default, 1
                kw["correction"] = 1 if c is None else int(c)
        return fn(*args, **kw)

    return method


def accept_torch_names(cls):
    """Every method of ``cls`` with an ``axis`` parameter, wrapped by ``torch_names``."""
    for name, fn in list(vars(cls).items()):
        params = inspect.signature(fn).parameters if inspect.isfunction(fn) else {}
        if "axis" in params and "dim" not in params:
            setattr(cls, name, torch_names(fn))
    return cls


accept_torch_names(TorchMethods)
