"""Elementwise functions: the standard's surface over the shared composition layer.

Each function checks the dtypes it accepts, applies the standard's promotion
(``ir.graph.dtypes.promote_array_api``, plus its rules for Python scalars) and broadcasting, then
calls one composed spelling: ``ir/graph/compose.py`` for arithmetic and comparisons,
``ir/graph/functions.py`` for the rest of libm, ``_complex.py`` for complex pairs. Nothing
here computes a value itself.
"""

from __future__ import annotations

import builtins

from ir.graph import compose, dtypes, functions
from limn_array import _complex as complex_math
from limn_array._array import Array, lift, parts, wrap, wrap_complex
from limn_array._creation import full_array
from limn_array._data_types import cast, check_dtype, scalar_dtype

BOOL = dtypes.bool_

# ---- operands ---------------------------------------------------------------------------


def _as_array(v, like: Array, op: str) -> Array:
    if isinstance(v, Array):
        return v
    if isinstance(v, builtins.bool | int | float | complex):
        return full_array(v, (), scalar_dtype(v, like.dtype, op), like._t.device)
    raise TypeError(f"{op}: cannot combine an array with {type(v).__name__}")


def _float_scalar_meets_int(x, other):
    """An integer or bool array meeting a Python float is the default float (float64), as
    in numpy: mixed-kind promotion is the implementation's to define, and clients (cubed's
    ``n - correction``) rely on numpy's answer."""
    if isinstance(x, Array) and x.dtype.kind in "biu" and type(other) is float:
        return cast(x, dtypes.float64)
    return x


def _broadcast(x: Array, shape) -> Array:
    return x if x.shape == tuple(shape) else lift(lambda t: compose.expand_to(t, shape), x)


def operands(op: str, x1, x2, accepts: str) -> tuple[Array, Array]:
    """Two arrays of one dtype and one shape (scalars join by the standard's rules)."""
    if type(x1) is Array and type(x2) is Array:  # the common case, checked in a few compares
        d, t1, t2 = x1._dtype, x1._t, x2._t
        if d is x2._dtype and t1.shape == t2.shape and t1.device == t2.device:
            check_dtype(x1, accepts, op)
            return x1, x2
    if not isinstance(x1, Array) and not isinstance(x2, Array):
        raise TypeError(f"{op}: needs at least one array, got two scalars")
    x1, x2 = _float_scalar_meets_int(x1, x2), _float_scalar_meets_int(x2, x1)
    x1 = _as_array(x1, x2, op) if not isinstance(x1, Array) else x1
    x2 = _as_array(x2, x1, op) if not isinstance(x2, Array) else x2
    if x1._t.device != x2._t.device:
        raise ValueError(
            f"{op}: arrays on devices {x1._t.device!r} and {x2._t.device!r}; move one with "
            "to_device first"
        )
    check_dtype(x1, accepts, op)
    check_dtype(x2, accepts, op)
    d = dtypes.promote_array_api(x1.dtype, x2.dtype)
    shape = compose.broadcast_shapes(x1.shape, x2.shape, op=op)
    return _broadcast(cast(x1, d), shape), _broadcast(cast(x2, d), shape)


def _real(op: str, x: Array, accepts: str, fn) -> Array:
    check_dtype(x, accepts, op)
    return wrap(fn(x._t))


def _float_or_complex(op: str, x: Array, real_fn, complex_fn) -> Array:
    """complex64 computes in float64 parts and rounds once, as float32 does in functions."""
    check_dtype(x, "floating-point", op)
    if x.dtype.is_complex:
        re, im = parts(x)
        if x.dtype == dtypes.complex64:
            f64, f32 = dtypes.float64, dtypes.float32
            r, i = complex_fn((re.p_cast(f64), im.p_cast(f64)))
            return wrap_complex(r.p_cast(f32), i.p_cast(f32))
        return wrap_complex(*complex_fn((re, im)))
    return wrap(real_fn(x._t))


def _binary_real(op: str, x1, x2, accepts: str, fn) -> Array:
    a, b = operands(op, x1, x2, accepts)
    return wrap(fn(a._t, b._t))


# ---- arithmetic ---------------------------------------------------------------------------


def add(x1, x2, /) -> Array:
    a, b = operands("add", x1, x2, "numeric")
    if a._dtype.is_complex:
        return wrap_complex(*complex_math.add(parts(a), parts(b)))
    return Array._new(a._t.p_add(b._t))


def subtract(x1, x2, /) -> Array:
    a, b = operands("subtract", x1, x2, "numeric")
    return _complex_or(a, b, complex_math.sub, compose.sub)


def _complex_or(a: Array, b: Array, cfn, rfn) -> Array:
    if a.dtype.is_complex:
        return wrap_complex(*cfn(parts(a), parts(b)))
    return wrap(rfn(a._t, b._t))


def _is_real_operand(v) -> bool:
    if isinstance(v, Array):
        return not v.dtype.is_complex
    return not isinstance(v, complex)


def multiply(x1, x2, /) -> Array:
    a, b = operands("multiply", x1, x2, "numeric")
    if a.dtype.is_complex:
        # a real operand multiplies each part (the standard's table), not as x + 0j
        if _is_real_operand(x1):
            return wrap_complex(*complex_math.mul_real(parts(b), parts(a)[0]))
        if _is_real_operand(x2):
            return wrap_complex(*complex_math.mul_real(parts(a), parts(b)[0]))
        return wrap_complex(*complex_math.mul(parts(a), parts(b)))
    return Array._new(a._t.p_mul(b._t))


def divide(x1, x2, /) -> Array:
    a, b = operands("divide", x1, x2, "numeric")
    if a.dtype.is_int:  # integers divide as the default float, as numpy does
        a, b = cast(a, dtypes.float64), cast(b, dtypes.float64)
    if a.dtype.is_complex:
        if _is_real_operand(x2):
            return wrap_complex(*complex_math.div_real(parts(a), parts(b)[0]))
        return wrap_complex(*complex_math.div(parts(a), parts(b)))
    return wrap(functions.divide(a._t, b._t))


def floor_divide(x1, x2, /) -> Array:
    a, b = operands("floor_divide", x1, x2, "real numeric")
    if a.dtype.is_int:
        return wrap(functions.int_floor_divide(a._t, b._t))
    return wrap(functions.float_floor_divide(a._t, b._t))


def remainder(x1, x2, /) -> Array:
    a, b = operands("remainder", x1, x2, "real numeric")
    if a.dtype.is_int:
        return wrap(functions.int_remainder(a._t, b._t))
    return wrap(functions.float_remainder(a._t, b._t))


def pow(x1, x2, /) -> Array:  # noqa: A001  (the standard's name)
    a, b = operands("pow", x1, x2, "numeric")
    if a.dtype.is_complex:
        return wrap_complex(*complex_math.pow(parts(a), parts(b)))
    if a.dtype.is_int:
        return wrap(functions.int_pow(a._t, b._t))
    return wrap(functions.pow(a._t, b._t))


def negative(x: Array, /) -> Array:
    check_dtype(x, "numeric", "negative")
    return lift(lambda t: t.p_neg(), x)


def positive(x: Array, /) -> Array:
    check_dtype(x, "numeric", "positive")
    return Array._new(x._t, x.dtype)


def square(x: Array, /) -> Array:
    check_dtype(x, "numeric", "square")
    if x.dtype.is_complex:
        return wrap_complex(*complex_math.square(parts(x)))
    return wrap(x._t.p_mul(x._t))


def reciprocal(x: Array, /) -> Array:
    check_dtype(x, "floating-point", "reciprocal")
    if x.dtype.is_complex:
        re, _ = parts(x)
        return wrap_complex(*complex_math.div(complex_math._c(re, 1), parts(x)))
    return wrap(functions.divide(x._t.p_const(1), x._t))


def abs(x: Array, /) -> Array:  # noqa: A001
    check_dtype(x, "numeric", "abs")
    if x.dtype.is_complex:
        return wrap(complex_math.absolute(parts(x)))
    if x.dtype.is_float:
        return wrap(functions.fabs(x._t))
    return wrap(compose.abs_(x._t))


def sign(x: Array, /) -> Array:
    check_dtype(x, "numeric", "sign")
    if x.dtype.is_complex:
        return wrap_complex(*complex_math.sign(parts(x)))
    return wrap(compose.sign(x._t))


def conj(x: Array, /) -> Array:
    check_dtype(x, "numeric", "conj")
    return wrap_complex(*complex_math.conj(parts(x))) if x.dtype.is_complex else positive(x)


def real(x: Array, /) -> Array:
    check_dtype(x, "numeric", "real")
    return wrap(parts(x)[0]) if x.dtype.is_complex else positive(x)


def imag(x: Array, /) -> Array:
    check_dtype(x, "numeric", "imag")
    if x.dtype.is_complex:
        return wrap(parts(x)[1])
    return wrap(x._t.p_const(0))


# ---- exponentials, logarithms, powers -------------------------------------------------------


def exp(x: Array, /) -> Array:
    return _float_or_complex("exp", x, functions.exp, complex_math.exp)


def expm1(x: Array, /) -> Array:
    return _float_or_complex("expm1", x, functions.expm1, complex_math.expm1)


def log(x: Array, /) -> Array:
    return _float_or_complex("log", x, functions.log, complex_math.log)


def log1p(x: Array, /) -> Array:
    return _float_or_complex("log1p", x, functions.log1p, complex_math.log1p)


def log2(x: Array, /) -> Array:
    return _float_or_complex("log2", x, functions.log2, lambda z: complex_math.log_base(z, 2))


def log10(x: Array, /) -> Array:
    return _float_or_complex("log10", x, functions.log10, lambda z: complex_math.log_base(z, 10))


def sqrt(x: Array, /) -> Array:
    return _float_or_complex("sqrt", x, lambda t: t.p_sqrt(), complex_math.sqrt)


def logaddexp(x1, x2, /) -> Array:
    return _binary_real("logaddexp", x1, x2, "real floating-point", functions.logaddexp)


def hypot(x1, x2, /) -> Array:
    return _binary_real("hypot", x1, x2, "real floating-point", functions.hypot)


# ---- trigonometric and hyperbolic -------------------------------------------------------------


def sin(x: Array, /) -> Array:
    return _float_or_complex("sin", x, functions.sin, complex_math.sin)


def cos(x: Array, /) -> Array:
    return _float_or_complex("cos", x, functions.cos, complex_math.cos)


def tan(x: Array, /) -> Array:
    return _float_or_complex("tan", x, functions.tan, complex_math.tan)


def asin(x: Array, /) -> Array:
    return _float_or_complex("asin", x, functions.asin, complex_math.asin)


def acos(x: Array, /) -> Array:
    return _float_or_complex("acos", x, functions.acos, complex_math.acos)


def atan(x: Array, /) -> Array:
    return _float_or_complex("atan", x, functions.atan, complex_math.atan)


def atan2(x1, x2, /) -> Array:
    return _binary_real("atan2", x1, x2, "real floating-point", functions.atan2)


def sinh(x: Array, /) -> Array:
    return _float_or_complex("sinh", x, functions.sinh, complex_math.sinh)


def cosh(x: Array, /) -> Array:
    return _float_or_complex("cosh", x, functions.cosh, complex_math.cosh)


def tanh(x: Array, /) -> Array:
    return _float_or_complex("tanh", x, functions.tanh, complex_math.tanh)


def asinh(x: Array, /) -> Array:
    return _float_or_complex("asinh", x, functions.asinh, complex_math.asinh)


def acosh(x: Array, /) -> Array:
    return _float_or_complex("acosh", x, functions.acosh, complex_math.acosh)


def atanh(x: Array, /) -> Array:
    return _float_or_complex("atanh", x, functions.atanh, complex_math.atanh)


# ---- rounding and bits of floats ------------------------------------------------------------


def _rounding(op: str, x: Array, fn) -> Array:
    check_dtype(x, "numeric" if op == "round" else "real numeric", op)
    if x.dtype.kind not in "fc":
        return positive(x)
    return lift(fn, x)


def floor(x: Array, /) -> Array:
    return _rounding("floor", x, functions.floor)


def ceil(x: Array, /) -> Array:
    return _rounding("ceil", x, functions.ceil)


def trunc(x: Array, /) -> Array:
    return _rounding("trunc", x, functions.trunc)


def round(x: Array, /) -> Array:  # noqa: A001
    return _rounding("round", x, functions.rint)


def signbit(x: Array, /) -> Array:
    return _real("signbit", x, "real floating-point", functions.signbit)


def copysign(x1, x2, /) -> Array:
    return _binary_real("copysign", x1, x2, "real floating-point", functions.copysign)


def nextafter(x1, x2, /) -> Array:
    return _binary_real("nextafter", x1, x2, "real floating-point", functions.nextafter)


def isnan(x: Array, /) -> Array:
    check_dtype(x, "numeric", "isnan")
    if x.dtype.is_complex:
        return wrap(complex_math.isnan(parts(x)))
    return wrap(functions.isnan(x._t))


def isinf(x: Array, /) -> Array:
    check_dtype(x, "numeric", "isinf")
    if x.dtype.is_complex:
        return wrap(complex_math.isinf(parts(x)))
    return wrap(functions.isinf(x._t))


def isfinite(x: Array, /) -> Array:
    check_dtype(x, "numeric", "isfinite")
    if x.dtype.is_complex:
        return wrap(complex_math.isfinite(parts(x)))
    return wrap(functions.isfinite(x._t))


# ---- comparison -------------------------------------------------------------------------------


def equal(x1, x2, /) -> Array:
    a, b = operands("equal", x1, x2, "any")
    if a.dtype.is_complex:
        return wrap(complex_math.equal(parts(a), parts(b)))
    return wrap(compose.eq(a._t, b._t))


def not_equal(x1, x2, /) -> Array:
    return logical_not(equal(x1, x2))


def less(x1, x2, /) -> Array:
    return _binary_real("less", x1, x2, "real numeric", compose.lt)


def less_equal(x1, x2, /) -> Array:
    return _binary_real("less_equal", x1, x2, "real numeric", compose.le)


def greater(x1, x2, /) -> Array:
    return _binary_real("greater", x1, x2, "real numeric", compose.gt)


def greater_equal(x1, x2, /) -> Array:
    return _binary_real("greater_equal", x1, x2, "real numeric", compose.ge)


def maximum(x1, x2, /) -> Array:
    return _binary_real("maximum", x1, x2, "real numeric", compose.maximum)


def minimum(x1, x2, /) -> Array:
    return _binary_real("minimum", x1, x2, "real numeric", compose.minimum)


def clip(x: Array, /, min=None, max=None) -> Array:  # noqa: A002
    """min/max in x's dtype; a nan anywhere gives nan; the result has x's dtype."""
    check_dtype(x, "real numeric", "clip")
    out = x
    shapes = [x.shape] + [b.shape for b in (min, max) if isinstance(b, Array)]
    shape = compose.broadcast_shapes(*shapes, op="clip")
    out = _broadcast(out, shape)
    for bound, fn in ((min, compose.maximum), (max, compose.minimum)):
        if bound is None:
            continue
        if isinstance(bound, Array):
            if bound._t.device != x._t.device:
                raise ValueError("clip: bounds must be on the array's device")
            b = _broadcast(cast(bound, x.dtype), shape)
        else:
            if x.dtype.is_int and isinstance(bound, float):
                raise TypeError("clip: a float bound does not fit an integer array")
            if x.dtype.is_int:
                bound = builtins.min(
                    builtins.max(int(bound), dtypes.min_value(x.dtype)), dtypes.max_value(x.dtype)
                )
            b = _broadcast(full_array(bound, (), x.dtype, x._t.device), shape)
        out = wrap(fn(out._t, b._t))
    return out


# ---- logic and bits ---------------------------------------------------------------------------


def logical_and(x1, x2, /) -> Array:
    return _binary_real("logical_and", x1, x2, "boolean", compose.logical_and)


def logical_or(x1, x2, /) -> Array:
    return _binary_real("logical_or", x1, x2, "boolean", compose.logical_or)


def logical_xor(x1, x2, /) -> Array:
    return _binary_real("logical_xor", x1, x2, "boolean", compose.logical_xor)


def logical_not(x: Array, /) -> Array:
    return _real("logical_not", x, "boolean", compose.logical_not)


def bitwise_and(x1, x2, /) -> Array:
    return _binary_real("bitwise_and", x1, x2, "integer or boolean", lambda a, b: a.p_and(b))


def bitwise_or(x1, x2, /) -> Array:
    return _binary_real("bitwise_or", x1, x2, "integer or boolean", lambda a, b: a.p_or(b))


def bitwise_xor(x1, x2, /) -> Array:
    return _binary_real("bitwise_xor", x1, x2, "integer or boolean", lambda a, b: a.p_xor(b))


def bitwise_invert(x: Array, /) -> Array:
    check_dtype(x, "integer or boolean", "bitwise_invert")
    t = x._t
    if t.dtype == BOOL:
        return wrap(compose.logical_not(t))
    ones = -1 if t.dtype.kind == "i" else dtypes.max_value(t.dtype)
    return wrap(t.p_xor(t.p_const(ones)))


def bitwise_left_shift(x1, x2, /) -> Array:
    return _binary_real("bitwise_left_shift", x1, x2, "integer", lambda a, b: a.p_shl(b))


def bitwise_right_shift(x1, x2, /) -> Array:
    return _binary_real("bitwise_right_shift", x1, x2, "integer", lambda a, b: a.p_shr(b))
