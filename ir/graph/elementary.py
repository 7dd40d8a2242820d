"""The decompositions of the composite math rows: libm spelled in primitives.

Each composite row of ``ir/graph/ops.py`` (sin, pow, division, ...) names its function
here as its ``decompose`` rule; the pass ``ir/graph/decompose.py`` applies it for a device
that does not render the composite itself. Every function is spelled against the
primitive protocol of ``ir/graph/compose.py`` (plus the integer and bit primitives
``p_idiv p_mod p_and p_or p_xor p_shl p_shr p_bitcast``) and calls the other rules
directly, never a composite node, so a device that implements the primitives alone gets
trigonometry (``ir/graph/trig.py``), hyperbolics, ``expm1``, ``log1p``, correctly rounded
division, exact ``fmod`` and the rest without a line of its own. Only EXP, LOG and SQRT
come from the device. The frontends do not call these: they build the composite node
(``ir/graph/functions.py``).

How precision is bought, function by function, is said where each is defined; the
measured error table is in ``docs/array_api.md``. Three habits run through the file:

* float32 computes in float64 and rounds once at the end, which makes most float32
  results correctly rounded and keeps one set of float64 algorithms;
* the sign bit is read and written with BITCAST and bit operations (``signbit``,
  ``copysign``, ``fabs``), because no comparison can see the sign of -0.0 or of a nan;
* exactness tricks (Dekker's split product, Knuth's two-sum, Cody-Waite and Payne-Hanek
  argument reduction) assume IEEE binary64 arithmetic with one rounding per primitive: a
  compiled device must not contract a*b+c into an FMA or reassociate (no -ffast-math).

The functions expect real floating operands (float32 or float64) unless a name says
``int``; the frontend applies its own dtype rules first.
"""

from __future__ import annotations

import math

from ir.graph import compose, dtypes
from ir.graph.compose import gt, isfinite, isinf, isnan, logical_and, logical_not, logical_or, sub
from ir.graph.dtypes import DType
from ir.graph.exact import (
    abs_mask,
    bits_of,
    const,
    fast_two_sum,
    frexp,
    horner,
    pow2,
    select,
    sign_mask,
    two_prod,
    two_sum,
    via_float64,
)

F64 = dtypes.float64

# ---- bits: sign, magnitude, exponent ------------------------------------------------------


def signbit(x):
    """True where the sign bit is set: -0.0 and negative nans included."""
    return bits_of(x).p_cmplt(bits_of(x).p_const(0))


def fabs(x):
    """|x| by clearing the sign bit: |-0.0| is +0.0 and a nan stays a nan."""
    b = bits_of(x)
    return b.p_and(abs_mask(b)).p_bitcast(x.dtype)


def copysign(a, b):
    """|a| with the sign bit of b, exactly."""
    ba, bb = bits_of(a), bits_of(b)
    return ba.p_and(abs_mask(ba)).p_or(bb.p_and(sign_mask(bb))).p_bitcast(a.dtype)


def _nan(x):
    return const(x, math.nan)


def nextafter(a, b):
    """The float after a in the direction of b, by stepping a's bit pattern by one.

    Away from zero is +1 on the pattern for either sign (sign-magnitude order), so the
    step is +1 when b lies beyond a on a's side of zero and -1 otherwise; from a zero the
    step lands on the smallest subnormal with b's sign.
    """
    ba = bits_of(a)
    one = ba.p_const(1)
    up = compose.eq(gt(b, a), gt(a, const(a, 0)))
    stepped = select(up, ba.p_add(one), sub(ba, one)).p_bitcast(a.dtype)
    tiny = copysign(const(a, 0).p_bitcast(ba.dtype).p_add(one).p_bitcast(a.dtype), b)
    r = select(compose.eq(a, const(a, 0)), tiny, stepped)
    r = select(compose.eq(a, b), b, r)
    return select(logical_or(isnan(a), isnan(b)), _nan(a), r)


# ---- rounding (signs of zero kept) ---------------------------------------------------------


def _trunc(x):
    """Round toward zero through an int64 cast; values past 2**52 are integers already."""
    t = x.p_cast(dtypes.int64).p_cast(x.dtype)
    big = x.p_const(2.0**52 if x.dtype == dtypes.float64 else 2.0**23)
    return compose.abs_(x).p_cmplt(big).p_where(t, x)


def _floor(x):
    t = _trunc(x)
    return x.p_cmplt(t).p_where(sub(t, t.p_const(1)), t)


def _ceil(x):
    t = _trunc(x)
    return t.p_cmplt(x).p_where(t.p_add(t.p_const(1)), t)


def _round_half_even(x):
    f = _floor(x)
    diff = sub(x, f)
    half = x.p_const(0.5)
    up = f.p_add(f.p_const(1))
    f_even = compose.eq(_floor(f.p_mul(half)), f.p_mul(half))
    tie = compose.eq(diff, half).p_where(f_even.p_where(f, up), f)
    return half.p_cmplt(diff).p_where(up, tie)


def trunc(x):
    return copysign(_trunc(x), x)


def floor(x):
    return copysign(_floor(x), x)


def ceil(x):
    return copysign(_ceil(x), x)


def rint(x):
    """Round half to even; -0.5 rounds to -0.0, as IEEE says."""
    return copysign(_round_half_even(x), x)


def _rint_small(x):
    """Round half to even for float64 |x| < 2**51: the 1.5 * 2**52 shifter, two adds."""
    big = const(x, 1.5 * 2.0**52)
    return sub(x.p_add(big), big)


# ---- division -----------------------------------------------------------------------------


def divide(a, b):
    """a / b correctly rounded, from RECIP and MUL.

    float32 divides in float64, where the quotient's error is far below the float32 rounding
    gap, and rounds once. float64 takes one Newton step on the exact residual
    r = a - q*b (Dekker's product), q' = q + r/b; where the residual cannot be formed
    (overflow, zero or infinite divisor) the first quotient stands.
    """
    if a.dtype == dtypes.float32:
        a64, b64 = a.p_cast(F64), b.p_cast(F64)
        return a64.p_mul(b64.p_recip()).p_cast(dtypes.float32)
    # operands far from 1 are first scaled by 2**+-64 (exact), so 1/b neither overflows
    # (subnormal b) nor loses bits (huge b), and the split product stays in range
    sa, sb = _divide_scales(a), _divide_scales(b)
    a2, b2 = a.p_mul(sa), b.p_mul(sb)
    back = sb.p_mul(sa.p_recip())
    y = b2.p_recip()
    q = a2.p_mul(y)
    # a quotient past 2**900 forms its residual in a frame scaled by 2**-128 (exact)
    big = gt(fabs(q), const(q, 2.0**900))
    f = select(big, const(q, 2.0**-128), const(q, 1.0))
    p, e = two_prod(q.p_mul(f), b2)
    r = sub(sub(a2.p_mul(f), p), e)
    q2 = q.p_add(r.p_mul(y).p_mul(f.p_recip()))
    keep = logical_or(logical_not(isfinite(q2)), compose.eq(r, const(r, 0)))
    return select(keep, q, q2).p_mul(back)


def _divide_scales(x):
    """2**64 for |x| < 2**-960, 2**-64 for |x| > 2**960, else 1."""
    ax = fabs(x)
    tiny, huge = ax.p_cmplt(const(x, 2.0**-960)), gt(ax, const(x, 2.0**960))
    return select(tiny, const(x, 2.0**64), select(huge, const(x, 2.0**-64), const(x, 1.0)))


# ---- exponentials and logarithms ----------------------------------------------------------


@via_float64
def expm1(x):
    """e**x - 1 by Kahan's trick: (u - 1) * x / log(u) with u = e**x.

    The rounding error of u cancels between u - 1 and log(u), leaving a few ulps.
    """
    u = x.p_exp()
    um1 = sub(u, const(x, 1))
    r = um1.p_mul(x).p_mul(u.p_log().p_recip())
    r = select(compose.eq(um1, const(x, -1)), const(x, -1), r)
    r = select(compose.eq(u, const(x, 1)), x, r)
    return select(gt(x, const(x, 700.0)), u, r)


@via_float64
def log1p(x):
    """log(1 + x) by Kahan's trick: log(u) * x / (u - 1) with u = 1 + x."""
    u = x.p_add(const(x, 1))
    r = u.p_log().p_mul(x).p_mul(sub(u, const(x, 1)).p_recip())
    r = select(compose.eq(u, const(x, 1)), x, r)
    return select(compose.eq(x, const(x, math.inf)), x, r)


def _log_parts(x):
    """(e, log(m)) with x = m * 2**e and sqrt(1/2) <= m < sqrt(2), for positive finite x."""
    m, e = frexp(x)
    big = gt(m, const(m, math.sqrt(2)))
    m = select(big, m.p_mul(const(m, 0.5)), m)
    e = select(big, e.p_add(e.p_const(1)), e)
    return e.p_cast(F64), m.p_log()


def _log_special(x, r):
    """The values LOG gives at 0, negatives, inf and nan, over a result for positive x."""
    return select(logical_and(gt(x, const(x, 0)), isfinite(x)), r, x.p_log())


@via_float64
def log2(x):
    """e + log(m) / ln 2: exact at powers of two, about one ulp elsewhere."""
    e, lm = _log_parts(x)
    return _log_special(x, e.p_add(lm.p_mul(const(x, 1 / math.log(2)))))


# log10(2) = hi + lo with hi's last 12 bits clear, so e * hi is exact for any exponent e
_LOG10_2_HI = float.fromhex("0x1.34413509f7000p-2")
_LOG10_2_LO = 1.42050232272661e-13


@via_float64
def log10(x):
    """e * log10(2) + log(m) / ln 10, with log10(2) split so e * hi is exact."""
    e, lm = _log_parts(x)
    hi, lo = _LOG10_2_HI, _LOG10_2_LO
    r = e.p_mul(const(x, hi)).p_add(
        e.p_mul(const(x, lo)).p_add(lm.p_mul(const(x, 1 / math.log(10))))
    )
    return _log_special(x, r)


@via_float64
def exp2(x):
    """2**x = 2**n * e**(f ln 2) with n = round(x): exact at integers."""
    n = rint(x)
    f = sub(x, n)
    inside = logical_and(gt(x, const(x, -1022.0)), x.p_cmplt(const(x, 1023.0)))
    ns = select(inside, n, const(x, 0)).p_cast(dtypes.int64)
    r = pow2(ns, F64).p_mul(f.p_mul(const(x, math.log(2))).p_exp())
    return select(inside, r, x.p_mul(const(x, math.log(2))).p_exp())


@via_float64
def logaddexp(a, b):
    """log(e**a + e**b) = max + log1p(e**-|a - b|); equal infinities give themselves."""
    m = compose.maximum(a, b)
    d = fabs(sub(a, b)).p_neg()
    r = m.p_add(log1p(d.p_exp()))
    same_inf = logical_and(compose.eq(a, b), isinf(a))
    return select(same_inf, a, r)


# ---- hyperbolic ---------------------------------------------------------------------------


@via_float64
def sinh(x):
    """(e - 1/e)/2 through expm1 near zero; e**(|x|/2) squared far out, so no early overflow."""
    t = fabs(x)
    em1 = expm1(t)
    near = const(x, 0.5).p_mul(em1.p_add(divide(em1, em1.p_add(const(x, 1)))))
    h = t.p_mul(const(x, 0.5)).p_exp()
    far = h.p_mul(const(x, 0.5)).p_mul(h)
    r = select(t.p_cmplt(const(x, 20.0)), near, far)
    return copysign(select(isnan(x), x, r), x)


@via_float64
def cosh(x):
    t = fabs(x)
    e = t.p_exp()
    near = const(x, 0.5).p_mul(e.p_add(e.p_recip()))
    h = t.p_mul(const(x, 0.5)).p_exp()
    far = h.p_mul(const(x, 0.5)).p_mul(h)
    return select(t.p_cmplt(const(x, 20.0)), near, far)


@via_float64
def tanh(x):
    """expm1(2|x|) / (expm1(2|x|) + 2); exactly +-1 past |x| = 22."""
    t = fabs(x)
    em1 = expm1(t.p_mul(const(x, 2)))
    r = divide(em1, em1.p_add(const(x, 2)))
    r = select(gt(t, const(x, 22.0)), const(x, 1), r)
    return copysign(select(isnan(x), x, r), x)


@via_float64
def asinh(x):
    t = fabs(x)
    near = log1p(
        t.p_add(divide(t.p_mul(t), const(x, 1).p_add(t.p_mul(t).p_add(const(x, 1)).p_sqrt())))
    )
    far = t.p_log().p_add(const(x, math.log(2)))
    r = select(gt(t, const(x, 2.0**28)), far, near)
    return copysign(select(isnan(x), x, r), x)


@via_float64
def acosh(x):
    one = const(x, 1)
    t = sub(x, one)
    near = log1p(t.p_add(t.p_mul(const(x, 2)).p_add(t.p_mul(t)).p_sqrt()))
    mid = sub(x.p_mul(const(x, 2)), divide(one, x.p_add(sub(x.p_mul(x), one).p_sqrt()))).p_log()
    far = x.p_log().p_add(const(x, math.log(2)))
    r = select(gt(x, const(x, 2.0**28)), far, select(gt(x, const(x, 2.0)), mid, near))
    return select(x.p_cmplt(one), _nan(x), r)


@via_float64
def atanh(x):
    """log1p(2t/(1 - t)) / 2 for t = |x|, written 2t + 2t*t/(1 - t) to keep small t exact."""
    t = fabs(x)
    two_t = t.p_mul(const(x, 2))
    arg = two_t.p_add(divide(two_t.p_mul(t), sub(const(x, 1), t)))
    r = const(x, 0.5).p_mul(log1p(arg))
    r = select(gt(t, const(x, 1)), _nan(x), r)
    return copysign(select(isnan(x), x, r), x)


# ---- hypot and pow --------------------------------------------------------------------------


def hypot(a, b):
    """sqrt(a*a + b*b) without overflow: float32 squares in float64, float64 scales by 2**-e."""
    aa, ab = fabs(a), fabs(b)
    if a.dtype == dtypes.float32:
        a64, b64 = aa.p_cast(F64), ab.p_cast(F64)
        r = a64.p_mul(a64).p_add(b64.p_mul(b64)).p_sqrt().p_cast(dtypes.float32)
    else:
        m = compose.maximum(aa, ab)
        n = compose.minimum(aa, ab)
        _, e = frexp(select(gt(m, const(m, 0)), m, const(m, 1)))
        e = compose.clamp(e, e.p_const(-1000), e.p_const(1000))
        down, up = pow2(e.p_neg(), F64), pow2(e, F64)
        ms, ns = m.p_mul(down), n.p_mul(down)
        r = ms.p_mul(ms).p_add(ns.p_mul(ns)).p_sqrt().p_mul(up)
        r = select(compose.eq(m, const(m, 0)), const(m, 0), r)
    inf = logical_or(isinf(a), isinf(b))
    return select(inf, const(a, math.inf), r)


def _is_int(y):
    return compose.eq(_floor(y), y)


def _is_odd_int(y):
    half = y.p_mul(const(y, 0.5))
    return logical_and(_is_int(y), logical_not(_is_int(half)))


# ln 2 = hi + lo with hi's last 11 bits clear, so e * hi is exact for any exponent e
_LN2_HI = float.fromhex("0x1.62e42fefa3000p-1")
_LN2_LO = 2.8235290563031577e-13
# log(m) = 2 atanh(s) = 2s + sum 2 s**(2k+1) / (2k+1); |s| <= 0.172, so 12 terms reach 1e-20
_ATANH_TAIL = [2 / (2 * k + 1) for k in range(13, 0, -1)]


def _log_dd(x):
    """log(x) as a double-double (hi, lo) for positive finite float64 x, ~100 bits.

    x = m * 2**e with sqrt(1/2) <= m < sqrt(2); log(m) = 2 atanh(s) with s = (m-1)/(m+1)
    carried to double-double (the residual of the division is formed exactly), the small
    tail of the series in plain doubles, and e * ln 2 from a split constant.
    """
    m, e = frexp(x)
    big = gt(m, const(m, math.sqrt(2)))
    m = select(big, m.p_mul(const(m, 0.5)), m)
    e = select(big, e.p_add(e.p_const(1)), e).p_cast(F64)
    num = sub(m, const(m, 1.0))  # exact: m is within a factor 2 of 1
    den, den_lo = two_sum(m, const(m, 1.0))
    s = divide(num, den)
    p, pe = two_prod(s, den)
    s_lo = divide(sub(sub(sub(num, p), pe), s.p_mul(den_lo)), den)
    z = s.p_mul(s)
    tail = s.p_mul(z).p_mul(horner(z, _ATANH_TAIL))
    hi, lo = fast_two_sum(s.p_mul(const(s, 2.0)), tail.p_add(s_lo.p_mul(const(s, 2.0))))
    t_hi, t_lo = two_sum(e.p_mul(const(x, _LN2_HI)), hi)
    t_lo = t_lo.p_add(lo).p_add(e.p_mul(const(x, _LN2_LO)))
    return fast_two_sum(t_hi, t_lo)


@via_float64
def pow(x, y):
    """x**y = e**(y log|x|), signed for an odd integer y, with IEEE pow's special cases.

    log|x| is carried in double-double and multiplied by y exactly (Dekker), so the
    rounding of the logarithm is not magnified by y; e**(t_hi + t_lo) is taken as
    e**t_hi * (1 + t_lo). The result is within about one ulp of x**y.
    """
    ax = fabs(x)
    safe = logical_and(logical_and(gt(ax, const(x, 0.0)), isfinite(ax)), isfinite(y))
    safe = logical_and(safe, fabs(y).p_cmplt(const(y, 2.0**900)))
    axs = select(safe, ax, const(x, 1.0))
    ys = select(safe, y, const(y, 1.0))
    l_hi, l_lo = _log_dd(axs)
    p, pe = two_prod(ys, l_hi)
    t_hi, t_lo = fast_two_sum(p, pe.p_add(ys.p_mul(l_lo)))
    e = t_hi.p_exp()
    precise = e.p_add(e.p_mul(t_lo))
    precise = select(isfinite(precise), precise, e)
    r = select(safe, precise, y.p_mul(ax.p_log()).p_exp())
    odd = _is_odd_int(y)
    r = select(logical_and(odd, signbit(x)), r.p_neg(), r)
    neg_nonint = logical_and(x.p_cmplt(const(x, 0)), logical_not(_is_int(y)))
    r = select(logical_and(neg_nonint, logical_and(isfinite(x), isfinite(y))), _nan(x), r)
    r = select(logical_and(compose.eq(ax, const(x, 1)), isinf(y)), const(x, 1), r)
    r = select(compose.eq(x, const(x, 1)), const(x, 1), r)
    return select(compose.eq(y, const(y, 0)), const(x, 1), r)


def int_pow(x, y):
    """x**y for integer tensors by binary powering over y's bits; y < 0 gives 0 (1 for |x|=1)."""
    bits = x.dtype.bits
    result = x.p_const(1)
    base = x
    e = y
    one, zero = y.p_const(1), y.p_const(0)
    for _ in range(bits):
        odd = compose.eq(e.p_and(one), one)
        result = select(odd, result.p_mul(base), result)
        base = base.p_mul(base)
        e = e.p_shr(one)
    if x.dtype.kind == "i":
        neg = y.p_cmplt(zero)
        xone = compose.eq(x, x.p_const(1))
        xm1 = compose.eq(x, x.p_const(-1))
        odd = compose.eq(y.p_and(one), one)
        neg_val = select(
            xone, x.p_const(1), select(xm1, select(odd, x, x.p_const(1)), x.p_const(0))
        )
        result = select(neg, neg_val, result)
    return result


# ---- division with remainder ------------------------------------------------------------------


def int_floor_divide(a, b):
    """Floor division for integers: IDIV truncates, so step down when signs differ."""
    q = a.p_idiv(b)
    if a.dtype.kind == "u":
        return q
    r = a.p_mod(b)
    zero = r.p_const(0)
    fix = logical_and(compose.ne(r, zero), compose.ne(r.p_cmplt(zero), b.p_cmplt(zero)))
    return select(fix, sub(q, q.p_const(1)), q)


def int_remainder(a, b):
    """The remainder with the divisor's sign (Python's %): MOD keeps the dividend's."""
    r = a.p_mod(b)
    if a.dtype.kind == "u":
        return r
    zero = r.p_const(0)
    fix = logical_and(compose.ne(r, zero), compose.ne(r.p_cmplt(zero), b.p_cmplt(zero)))
    return select(fix, r.p_add(b), r)


def _fmod_steps(d: DType) -> int:
    # each step removes ~50 bits of the exponent gap: 2097 bits for float64, 277 for float32
    return 6 if d == dtypes.float32 else 42


def _scale(x, e):
    """x * 2**e for an int64 e in [-2100, 2100], in two exact halves (no early overflow)."""
    h = e.p_idiv(e.p_const(2))
    return x.p_mul(pow2(h, F64)).p_mul(pow2(sub(e, h), F64))


@via_float64
def _fmod64(a, b, steps: int):
    """|a| - trunc(|a|/|b|)*|b| exactly, with a's sign, for finite a and finite b != 0.

        Each step works in a frame scaled by a power of two so that |b|'s mantissa B is in
        [1, 2) and the part of |a| being reduced, A, is in [2**50, 2**51) (or below, on the
        last step): the quotient q = trunc(A / B) is then an integer the division gets within
        one of, A - q*B is formed exactly by Dekker's product, and one B added or taken off
        lands it in [0, B) (decided before the last rounding, since the uncorrected remainder
    can need 54 bits). Each step shrinks the exponent gap by ~50 bits.
    """
    ax, bx = fabs(a), fabs(b)
    bm, eb = frexp(bx)
    rb = bm.p_recip()
    for _ in range(steps):
        _, ea = frexp(select(gt(ax, const(ax, 0)), ax, bx))
        gap = sub(ea, eb)
        s = compose.clamp(sub(gap, gap.p_const(50)), gap.p_const(0), gap.p_const(2200))
        frame = eb.p_add(s)
        A = _scale(ax, frame.p_neg())
        q = _trunc(A.p_mul(rb))
        p, e = two_prod(q, bm)
        hi = sub(A, p)  # exact; the remainder is hi - e, which may need 54 bits until fixed
        under, over = hi.p_cmplt(e), logical_not(sub(hi, bm).p_cmplt(e))
        r = select(under, hi.p_add(bm), select(over, sub(hi, bm), hi))
        r = sub(r, e)
        ax = select(logical_not(ax.p_cmplt(bx)), _scale(r, frame), ax)
    return copysign(ax, a)


def fmod(a, b):
    """C's fmod: the remainder of truncated division, exact, with a's sign."""
    r = _fmod64(a, b, steps=_fmod_steps(a.dtype))
    bad = logical_or(
        logical_or(isnan(a), isnan(b)), logical_or(isinf(a), compose.eq(b, const(b, 0)))
    )
    r = select(logical_and(isinf(b), isfinite(a)), a, r)
    return select(bad, _nan(a), r)
