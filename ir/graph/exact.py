"""The exact-arithmetic kit the elementary functions are written with.

Small spellings over the primitive protocol of ``ir/graph/compose.py`` (a constant like x,
a select, a Horner polynomial, "compute a float32 in float64"), access to a float's bits
(its integer pattern, 2**e, frexp), and the error-free steps of Knuth and Dekker: two-sum,
fast two-sum, the split product. A double-double value is a (hi, lo) pair of these.

They assume IEEE binary64 arithmetic with one rounding per primitive: a compiled device
must not contract a*b+c into an FMA or reassociate (no -ffast-math).
"""

from __future__ import annotations

from ir.graph import dtypes
from ir.graph.compose import horner, sub  # noqa: F401  (horner: re-exported)
from ir.graph.dtypes import DType

F64 = dtypes.float64

# ---- small spellings ------------------------------------------------------------------


def const(x, v):
    return x.p_const(v)


def select(cond, a, b):
    return cond.p_where(a, b)


def via_float64(fn):
    """Run a float64 algorithm for float32 operands and round the result once."""

    def run(*xs, **kw):
        if xs[0].dtype == dtypes.float32:
            return fn(*(x.p_cast(F64) for x in xs), **kw).p_cast(dtypes.float32)
        return fn(*xs, **kw)

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


# ---- bits: sign, magnitude, exponent ------------------------------------------------------


def _int_of(d: DType) -> DType:
    return {dtypes.float64: dtypes.int64, dtypes.float32: dtypes.int32}[d]


def bits_of(x):
    return x.p_bitcast(_int_of(x.dtype))


def sign_mask(b):
    return b.p_const(dtypes.min_value(b.dtype))


def abs_mask(b):
    return b.p_const(dtypes.max_value(b.dtype))


def pow2(e, d: DType):
    """2**e as a float64 for integer tensors e in the normal range [-1022, 1023]."""
    i64 = dtypes.int64
    biased = e.p_cast(i64).p_add(e.p_const(1023, dtype=i64))
    return biased.p_shl(biased.p_const(52)).p_bitcast(F64).p_cast(d)


def frexp(x):
    """(m, e) with x = m * 2**e and 1 <= m < 2, for positive finite float64 x (subnormals too).

    e is an int64 tensor; zero, inf and nan give meaningless but harmless values.
    """
    i64 = dtypes.int64
    tiny = x.p_cmplt(const(x, 2.0**-1022))
    xs = select(tiny, x.p_mul(const(x, 2.0**54)), x)
    b = xs.p_bitcast(i64)
    raw = b.p_shr(b.p_const(52)).p_and(b.p_const(0x7FF))
    e = sub(raw, select(tiny, b.p_const(1023 + 54), b.p_const(1023)))
    m = b.p_and(b.p_const((1 << 52) - 1)).p_or(b.p_const(1023 << 52)).p_bitcast(F64)
    return m, e


# ---- exact products and sums (Knuth, Dekker) ------------------------------------------------


def two_sum(a, b):
    s = a.p_add(b)
    bb = sub(s, a)
    return s, sub(a, sub(s, bb)).p_add(sub(b, bb))


def fast_two_sum(a, b):
    """|a| >= |b|: s + err == a + b exactly."""
    s = a.p_add(b)
    return s, sub(b, sub(s, a))


def _split(a):
    t = a.p_mul(const(a, 134217729.0))  # 2**27 + 1
    hi = sub(t, sub(t, a))
    return hi, sub(a, hi)


def two_prod(a, b):
    """p + err == a * b exactly (|a|, |b| < 2**996 so the split cannot overflow)."""
    p = a.p_mul(b)
    ah, al = _split(a)
    bh, bl = _split(b)
    err = sub(ah.p_mul(bh), p).p_add(ah.p_mul(bl)).p_add(al.p_mul(bh)).p_add(al.p_mul(bl))
    return p, err
