"""The math functions both frontends call: each composite is one node of its op row.

``limn.Tensor`` and ``limn_array`` reach libm here, so an op is computed one way
everywhere: ``sin(x)`` is one SIN node (its decomposition, numpy evaluation, C spelling
and gradient are rows of ``ir/graph/ops.py``), division is one correctly rounded DIV,
rounding keeps the sign of zero. The sign-bit functions and integer arithmetic are small
compositions and stay that (from ``ir/graph/elementary.py``); Python's float ``%`` and
``//`` are composed here from composite nodes.
"""

from __future__ import annotations

from ir.graph import compose
from ir.graph.compose import (  # noqa: F401  (isnan, isinf, isfinite: re-exported)
    isfinite,
    isinf,
    isnan,
    logical_and,
    logical_not,
    logical_or,
)
from ir.graph.elementary import (  # noqa: F401  (re-exported for the frontends)
    copysign,
    int_floor_divide,
    int_pow,
    int_remainder,
    nextafter,
    signbit,
)
from ir.graph.opcodes import Op


def _unary(op: Op):
    def fn(x):
        return x.p_op(op) if x.dtype.is_float else x

    fn.__name__ = op.value.lower()
    fn.__doc__ = f"One {op.value} node (ir/graph/ops.py); non-float operands pass through."
    return fn


def _binary(op: Op):
    def fn(a, b):
        return a.p_op(op, b)

    fn.__name__ = op.value.lower()
    fn.__doc__ = f"One {op.value} node (ir/graph/ops.py)."
    return fn


fabs = _unary(Op.ABS)
floor, ceil, trunc, rint = (_unary(o) for o in (Op.FLOOR, Op.CEIL, Op.TRUNC, Op.ROUND))
sin, cos, tan = _unary(Op.SIN), _unary(Op.COS), _unary(Op.TAN)
asin, acos, atan = _unary(Op.ASIN), _unary(Op.ACOS), _unary(Op.ATAN)
sinh, cosh, tanh = _unary(Op.SINH), _unary(Op.COSH), _unary(Op.TANH)
asinh, acosh, atanh = _unary(Op.ASINH), _unary(Op.ACOSH), _unary(Op.ATANH)
exp2, expm1, log1p = _unary(Op.EXP2), _unary(Op.EXPM1), _unary(Op.LOG1P)
log2, log10 = _unary(Op.LOG2), _unary(Op.LOG10)
divide, fmod, pow = _binary(Op.DIV), _binary(Op.FMOD), _binary(Op.POW)  # noqa: A001
hypot, atan2, logaddexp = _binary(Op.HYPOT), _binary(Op.ATAN2), _binary(Op.LOGADDEXP)


def exp(x):
    """The EXP primitive itself (the device's exp; its error is in the precision table)."""
    return x.p_exp()


def log(x):
    return x.p_log()


def sincos(x):
    return sin(x), cos(x)


def float_remainder(a, b):
    """Python's %: fmod moved to the divisor's sign; a zero takes the divisor's sign."""
    m = fmod(a, b)
    zero = m.p_const(0)
    fix = logical_and(compose.ne(m, zero), compose.ne(m.p_cmplt(zero), b.p_cmplt(zero)))
    m = fix.p_where(m.p_add(b), m)
    # an infinite divisor with the other sign leaves an infinity; Python gives b there
    return compose.eq(m, zero).p_where(copysign(zero, b), m)


def float_floor_divide(a, b):
    """Python's //: (a - fmod(a, b)) / b, stepped down with the remainder, then rounded."""
    m = fmod(a, b)
    zero, one = m.p_const(0), m.p_const(1)
    q = divide(compose.sub(a, m), b)
    fix = logical_and(compose.ne(m, zero), compose.ne(m.p_cmplt(zero), b.p_cmplt(zero)))
    q = fix.p_where(compose.sub(q, one), q)
    fl = floor(q)
    fl = m.p_const(0.5).p_cmplt(compose.sub(q, fl)).p_where(fl.p_add(one), fl)
    plain = divide(a, b)  # b == 0 or an infinite operand: the quotient's own special value
    fl = compose.eq(q, zero).p_where(copysign(zero, plain), fl)
    special = logical_or(compose.eq(b, zero), logical_not(logical_and(isfinite(a), isfinite(b))))
    fl = special.p_where(floor(plain), fl)
    # a finite number over an infinity is a signed zero (the standard; Python says -1 or 0)
    return logical_and(isfinite(a), isinf(b)).p_where(copysign(zero, plain), fl)
