"""Elementwise math of limn.Tensor: arithmetic, comparisons, logic and bits, rounding, the
float functions (exp, log, the trigonometric family), activations and clamps.

``Math`` is a mixin of ``limn.Tensor``, like every mixin in this folder: each method is a
few lines that check arguments, apply the Tensor's surface rules (promotion and
broadcasting through ``_align``, torch's names and signatures) and hand the work to
``ir/graph/compose.py``, ``ir/graph/functions.py`` or a primitive; nothing here touches a
node directly or is a new primitive. The float functions compute in float (integers
become float32). ``frexp``, ``gcd`` and ``lcm`` are functions set on the class; ``gcd``
and ``lcm`` are Euclid's loop, whose length depends on the values, so they read them
and compute on the host, as ``nonzero`` does.

In-place methods (``add_``, ``zero_``, ...) are made from these in ``inplace.py``.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Self

import ml_dtypes
import numpy as np

from ir.graph import compose, dtypes, functions
from ir.graph.dtypes import promote_scalar
from limn import autograd
from limn.ops.arguments import accept_torch_names, on_nodes


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


def _binary_float(name: str, fn):
    """A method of two operands promoted together and computed in float."""

    def method(self, other):
        a, b = self._align(other, name)
        return fn(a._float(), b._float())

    method.__name__ = name
    return method


class Math:
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
        a, b = self._align(o, op)  # (no gradient flows through a comparison: bare nodes)
        return on_nodes(getattr(compose, op), a.p_detach(), b.p_detach())

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

    relu = compose.relu

    def sign(self):
        """-1, 0 or 1, and 0 for a nan, as torch's (the standard's sign keeps the nan)."""
        s = compose.sign(self)
        return compose.isnan(self).p_where(s.p_const(0), s) if self.dtype.is_float else s

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
        return on_nodes(compose.gelu, self._float(), approximate)

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

    def lerp(self, end, weight):
        """torch's two-sided form: ``self + w*(end - self)`` where ``|w| < 0.5``, else
        ``end - (end - self)*(1 - w)``; exact at both ends, and no inf - inf where an end
        is infinite (``lerp(inf, 0, 0.5)`` is inf, as in torch)."""
        diff = end - self
        if not isinstance(weight, Math):
            return self + diff * weight if abs(weight) < 0.5 else end - diff * (1 - weight)
        return (weight.abs() < 0.5).where(self + diff * weight, end - diff * (1 - weight))

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def positive(self):
        if self.dtype == dtypes.bool_:
            raise TypeError("positive: not defined for bool tensors, as in torch")
        return self

    def conj(self):
        return self

    conj_physical = resolve_conj = resolve_neg = real = conj

    def deg2rad(self):
        return self._float() * (math.pi / 180)

    def rad2deg(self):
        return self._float() * (180 / math.pi)

    def frac(self):
        if not self.dtype.is_float:
            raise TypeError(f"frac: needs a float tensor, got {self.dtype}")
        return self - self.trunc()

    def remainder(self, other):
        """The remainder with the divisor's sign, as torch's: Python's %, but a zero keeps
        the dividend's sign (``-3.0 % 1.5`` is -0.0)."""
        a, b = self._align(other, "remainder")
        if a.dtype.is_int:
            return functions.int_remainder(a, b)
        m = functions.float_remainder(a, b)
        return compose.eq(m, m.p_const(0)).p_where(functions.copysign(m, a), m)

    __mod__ = remainder

    def __rmod__(self, other):
        return self._lift(other).cast(self.dtype).remainder(self)

    def floor_divide(self, other):
        return self.div(other, rounding_mode="floor")

    __floordiv__ = floor_divide

    def __rfloordiv__(self, other):
        return self._lift(other).cast(self.dtype).floor_divide(self)

    def __rdiv__(self, other):
        return self.__rtruediv__(other)

    def rsub(self, other, alpha=1):
        return self._align(other, "rsub")[1] - self * alpha

    def copysign(self, other):
        a, b = self._align(other, "copysign")
        return functions.copysign(a._float(), b._float())

    def nextafter(self, other):
        a, b = self._align(other, "nextafter")
        if not a.dtype.is_float:
            raise TypeError(f"nextafter: needs float tensors, got {a.dtype}")
        return functions.nextafter(a, b)

    def signbit(self):
        if self.dtype.is_float:
            return functions.signbit(self)
        return self < 0

    def sgn(self):
        return self.sign()

    def fmax(self, other):
        """The larger, where a nan loses to a number (torch's fmax)."""
        a, b = self._align(other, "fmax")
        if not a.dtype.is_float:
            return a.maximum(b)
        return a.isnan().where(b, b.isnan().where(a, a.maximum(b)))

    def fmin(self, other):
        a, b = self._align(other, "fmin")
        if not a.dtype.is_float:
            return a.minimum(b)
        return a.isnan().where(b, b.isnan().where(a, a.minimum(b)))

    def logaddexp2(self, other):
        a, b = self._align(other, "logaddexp2")
        ln2 = math.log(2)
        return functions.logaddexp(a._float() * ln2, b._float() * ln2) / ln2

    def logical_not(self):
        return self.cast(dtypes.bool_).__invert__()

    def logical_and(self, other):
        a, b = self._align(other, "logical_and")
        return a.cast(dtypes.bool_) & b.cast(dtypes.bool_)

    def logical_or(self, other):
        a, b = self._align(other, "logical_or")
        return a.cast(dtypes.bool_) | b.cast(dtypes.bool_)

    def logical_xor(self, other):
        a, b = self._align(other, "logical_xor")
        return a.cast(dtypes.bool_) ^ b.cast(dtypes.bool_)

    def bitwise_left_shift(self, other):
        a, b = self._align(other, "bitwise_left_shift")
        if not a.dtype.is_int:
            raise TypeError(f"bitwise_left_shift: needs integer tensors, got {a.dtype}")
        return a.p_shl(b)

    def bitwise_right_shift(self, other):
        a, b = self._align(other, "bitwise_right_shift")
        if not a.dtype.is_int:
            raise TypeError(f"bitwise_right_shift: needs integer tensors, got {a.dtype}")
        return a.p_shr(b)

    __lshift__, __rshift__ = bitwise_left_shift, bitwise_right_shift

    def heaviside(self, values):
        a, b = self._align(values, "heaviside")
        if self.dtype != a.dtype:
            raise TypeError(f"heaviside: needs one dtype, got {self.dtype} and {values.dtype}")
        zero = a.zeros_like()
        return (a == 0).where(b, (a > 0).where(zero + 1, zero)).cast(a.dtype)

    def isclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
        if rtol < 0 or atol < 0:
            raise ValueError(f"isclose: rtol and atol must be >= 0, got {rtol} and {atol}")
        a, b = self._align(other, "isclose")
        if a.dtype == dtypes.bool_ or not a.dtype.is_float:
            return a == b
        close = (a == b) | ((a - b).abs() <= atol + rtol * b.abs())
        close = close & (a.isfinite() & b.isfinite()) | (a == b)
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def isposinf(self):
        return (self == math.inf) if self.dtype.is_float else self.zeros_like(dtypes.bool_)

    def isneginf(self):
        return (self == -math.inf) if self.dtype.is_float else self.zeros_like(dtypes.bool_)

    def isreal(self):
        return self.ones_like(dtypes.bool_)

    def sinc(self):
        """sin(pi x) / (pi x), 1 at 0."""
        x = self._float()
        px = x * math.pi
        return (x == 0).where(1.0, px.sin() / px).cast(x.dtype)

    def angle(self):
        x = self._float()
        return x.isnan().where(x, (x < 0).where(math.pi, 0.0).cast(x.dtype))

    def float_power(self, exponent):
        a, b = self._align(exponent, "float_power")
        return a.cast(dtypes.float64) ** b.cast(dtypes.float64)

    def xlogy(self, other):
        """x log y, 0 where x is 0 (unless y is nan)."""
        x, y = self._align(other, "xlogy")
        x, y = x._float(), y._float()
        return ((x == 0) & ~y.isnan()).where(0.0, x * y.log()).cast(x.dtype)

    def logit(self, eps: float | None = None):
        x = self._float()
        if eps is not None:
            x = x.clamp(eps, 1 - eps)
        return (x / (1 - x)).log()

    def erfc(self):
        return 1 - self._float().erf()

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf=None):
        if not self.dtype.is_float:
            return self
        big = float(ml_dtypes.finfo(dtypes.to_numpy(self.dtype)).max)
        x = self.isnan().where(nan, self)
        x = (x == math.inf).where(big if posinf is None else posinf, x)
        return (x == -math.inf).where(-big if neginf is None else neginf, x).cast(self.dtype)

    def addcmul(self, tensor1, tensor2, *, value=1):
        return self + value * tensor1 * tensor2

    def addcdiv(self, tensor1, tensor2, *, value=1):
        if tensor1.dtype.is_int and tensor2.dtype.is_int:
            raise TypeError("addcdiv: integer division of tensors is not supported, as in torch")
        return self + value * (tensor1 / tensor2)

    def ldexp(self, other):
        return self._float() * (2.0**other)

    def equal(self, other) -> bool:
        return self.shape == other.shape and bool((self == other).all().item())


def _pow(a: Math, b: Math) -> Math:
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
    setattr(Math, _name, _float_math(_name))
Math.arctan2 = Math.atan2


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


Math.sigmoid = _sigmoid


def _comparison(op: str):
    """``x < o`` and the rest, elementwise (``==`` too, as in torch): ``_compare``."""
    return lambda self, o: self._compare(o, op)


for _name in ("lt", "gt", "le", "ge", "eq", "ne"):
    setattr(Math, _name, _comparison(_name))
    setattr(Math, f"__{_name}__", getattr(Math, _name))

Frexp = namedtuple("Frexp", "mantissa exponent")


def frexp(self: Math) -> Frexp:
    """x = mantissa * 2**exponent, |mantissa| in [0.5, 1) (0, inf and nan: exponent 0)."""
    if not self.dtype.is_float:
        raise TypeError(f"frexp: needs a float input, got {self.dtype}")
    x = self.cast(dtypes.float64)
    finite = (x != 0) & x.isfinite()
    safe = finite.where(x.abs(), 1.0)
    e = safe.log2().floor() + 1
    half = (e / 2).floor()
    m = x / (2.0**half) / (2.0 ** (e - half))  # in two steps: 2**e alone may overflow
    big, small = m.abs() >= 1, m.abs() < 0.5
    e = big.where(e + 1, small.where(e - 1, e))
    m = big.where(m / 2, small.where(m * 2, m))
    return Frexp(finite.where(m, x).cast(self.dtype), finite.where(e, 0).cast(dtypes.int32))


def _host_integers(a, b, fn, op: str) -> Math:
    a = a if isinstance(a, Math) else b._lift(a)
    b = b if isinstance(b, Math) else a._lift(b)
    a, b = a._align(b, op)
    if not a.dtype.is_int or a.dtype == dtypes.bool_:
        raise TypeError(f"{op}: needs integer tensors, got {a.dtype}")
    out = fn(a.numpy(), b.numpy())
    return type(a)(np.asarray(out).astype(dtypes.to_numpy(a.dtype)), dtype=a.dtype,
                  device=a.device)  # fmt: skip


def gcd(self: Math, other) -> Math:
    return _host_integers(self, other, np.gcd, "gcd")


def lcm(self: Math, other) -> Math:
    return _host_integers(self, other, np.lcm, "lcm")


for _fn in (frexp, gcd, lcm):
    setattr(Math, _fn.__name__, _fn)
accept_torch_names(Math)
