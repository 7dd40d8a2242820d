"""The circular functions spelled in primitives: the decompositions of the SIN, COS, TAN,
ASIN, ACOS, ATAN and ATAN2 rows of ``ir/graph/ops.py``.

sin, cos and tan share one argument reduction, x = k*pi/2 + r with r in double-double:
Cody-Waite (pi/2 in three parts) below 2**19, Payne-Hanek (the bits of 2/pi that matter at
x's exponent, looked up from a table) above, so ``sin(1e300)`` is as accurate as
``sin(1.0)``; then Taylor kernels on |r| <= pi/4. atan, atan2, asin and acos share one
series on [0, 1]. ``ir/graph/elementary.py`` says how the precision is bought and which
habits (float64 inside, one rounding at the end) the functions keep.
"""

from __future__ import annotations

import math

from ir.graph import compose, dtypes
from ir.graph.compose import gt, isfinite, isinf, isnan, logical_and, logical_not, logical_or, sub
from ir.graph.dtypes import DType
from ir.graph.elementary import (
    F64,
    _floor,
    _nan,
    _rint_small,
    _trunc,
    copysign,
    divide,
    fabs,
    signbit,
)
from ir.graph.exact import (
    const,
    fast_two_sum,
    frexp,
    horner,
    pow2,
    select,
    two_prod,
    two_sum,
    via_float64,
)

# pi/2 in three parts of 33, 33 and 53 bits: k * P1 and k * P2 are exact for k < 2**20.
_P1 = float.fromhex("0x1.921fb54400000p+0")
_P2 = float.fromhex("0x1.0b4611a600000p-34")
_P3 = float.fromhex("0x1.3198a2e037073p-69")
_PIO2_HI, _PIO2_LO = 1.5707963267948966, 6.123233995736766e-17
_PI_HI, _PI_LO = 2 * _PIO2_HI, 2 * _PIO2_LO

# 2/pi in 24-bit pieces: 2/pi = sum(C[j] * 2**(-24 * (j + 1))), enough for any float64.
_TWO_OVER_PI = (
    10680707, 7228996, 1387004, 2578385, 16069853, 12639074, 9804092, 4427841, 16666979,
    11263675, 12935607, 2387514, 4345298, 14681673, 3074569, 13734428, 16653803, 1880361,
    10960616, 8533493, 3062596, 8710556, 7349940, 6258241, 3772886, 3769171, 3798172, 8675211,
    12450088, 3874808, 9961438, 366607, 15675153, 9132554, 7151469, 3571407, 2607881, 12013382,
    4155038, 6285869, 7677882, 13102053, 15825725, 473591, 9065106, 15363067, 6271263, 9264392,
)  # fmt: skip
_PH_TERMS = 6  # pieces of 2/pi multiplied per element: ~140 bits past the leading one


def _table(like, values, dtype: DType):
    """A 1-d constant tensor from Python numbers: one padded CONST per entry, added up."""
    n = len(values)
    out = None
    for i, v in enumerate(values):
        piece = like.p_const(v, shape=(1,), dtype=dtype).p_pad(((i, n - 1 - i),))
        out = piece if out is None else out.p_add(piece)
    return out


def _lookup(table, idx):
    """table[idx] for an int64 tensor idx of any shape (indices already in range)."""
    shape = tuple(idx.shape)
    n = table.shape[0]
    col = idx.p_reshape(shape + (1,))
    src = table.p_reshape((1,) * len(shape) + (n,)).p_expand(shape + (n,))
    return src.p_gather(col, len(shape)).p_reshape(shape)


def _reduce_cody_waite(x):
    """(k, r_hi, r_lo) with x = k*pi/2 + r, for float64 |x| < 2**19."""
    k = _rint_small(x.p_mul(const(x, 2 / math.pi)))
    t = sub(x, k.p_mul(const(x, _P1)))
    w = k.p_mul(const(x, _P2))
    hi = sub(t, w)
    lo = sub(sub(t, hi), w)
    lo = sub(lo, k.p_mul(const(x, _P3)))
    hi, lo = fast_two_sum(hi, lo)
    return k, hi, lo


def _reduce_payne_hanek(ax):
    """(k, r_hi, r_lo) with ax = k*pi/2 + r for positive float64 ax >= 2**19 (Payne-Hanek).

    ax = M * 2**E with M a 53-bit integer. Pieces of 2/pi that would only add multiples
    of 4 to ax * 2/pi are skipped (the first piece used depends on E: a table lookup), the
    next few are multiplied exactly (M split in two so each product fits 53 bits), each
    product is reduced mod 4, and the sum is carried in double-double arithmetic.
    """
    m, e = frexp(ax)
    big_m = m.p_mul(const(ax, 2.0**52))  # the integer mantissa, exact
    E = sub(e, e.p_const(52))
    m_hi = _trunc(big_m.p_mul(const(ax, 2.0**-26)))
    m_lo = sub(big_m, m_hi.p_mul(const(ax, 2.0**26)))
    # first useful piece: j0 = floor((E - 2) / 24), clamped so the lookups stay in range
    j0 = sub(E, E.p_const(2)).p_add(E.p_const(24 * 64)).p_idiv(E.p_const(24))
    j0 = sub(j0, j0.p_const(64))
    j0 = compose.clamp(j0, j0.p_const(0), j0.p_const(len(_TWO_OVER_PI) - _PH_TERMS))
    table = _table(ax, _TWO_OVER_PI, F64)
    pieces = []
    for t in range(_PH_TERMS):
        j = j0.p_add(j0.p_const(t))
        c = _lookup(table, j)
        shift = sub(E, j.p_add(j.p_const(1)).p_mul(j.p_const(24)))  # int64 exponent
        scale = pow2(compose.clamp(shift, shift.p_const(-1022), shift.p_const(1023)), F64)
        hi = m_hi.p_mul(c).p_mul(scale).p_mul(const(ax, 2.0**26))
        lo = m_lo.p_mul(c).p_mul(scale)
        pieces += [hi, lo]
    reduced = []
    for p in pieces[:4]:
        four = const(p, 4.0)
        reduced.append(sub(p, _floor(p.p_mul(const(p, 0.25))).p_mul(four)))
    reduced += pieces[4:]
    s_hi, s_lo = reduced[-1], const(ax, 0.0)
    for p in reversed(reduced[:-1]):
        s_hi, err = two_sum(p, s_hi)
        s_lo = s_lo.p_add(err)
    s_hi, s_lo = fast_two_sum(s_hi, s_lo)
    k = _rint_small(s_hi)
    f_hi, f_lo = fast_two_sum(sub(s_hi, k), s_lo)
    p, err = two_prod(f_hi, const(ax, _PIO2_HI))
    lo = err.p_add(f_hi.p_mul(const(ax, _PIO2_LO))).p_add(f_lo.p_mul(const(ax, _PIO2_HI)))
    r_hi, r_lo = fast_two_sum(p, lo)
    return k, r_hi, r_lo


def _reduce(x):
    """(quadrant in 0..3 as float64, r_hi, r_lo): x = (4n + quadrant) * pi/2 + r, |r| <= pi/4."""
    ax = fabs(x)
    small = ax.p_cmplt(const(x, 2.0**19))
    k1, h1, l1 = _reduce_cody_waite(select(small, x, const(x, 0)))
    k2, h2, l2 = _reduce_payne_hanek(select(small, const(x, 2.0**20), ax))
    neg = signbit(x)  # Payne-Hanek reduced |x|: sin is odd, cos even, fixed by the quadrant
    k2, h2, l2 = (
        select(neg, k2.p_neg(), k2),
        select(neg, h2.p_neg(), h2),
        select(neg, l2.p_neg(), l2),
    )
    k = select(small, k1, k2)
    q = sub(k, _floor(k.p_mul(const(k, 0.25))).p_mul(const(k, 4.0)))
    return q, select(small, h1, h2), select(small, l1, l2)


# Taylor coefficients of sin and cos on |r| <= pi/4: the first dropped terms are < 1e-20.
_SIN = [(-1) ** n / math.factorial(2 * n + 1) for n in range(10, 0, -1)]
_COS = [(-1) ** n / math.factorial(2 * n) for n in range(10, 0, -1)]


def _sin_kernel(hi, lo):
    z = hi.p_mul(hi)
    s = hi.p_add(hi.p_mul(z).p_mul(horner(z, _SIN)))
    return s.p_add(lo.p_mul(sub(const(hi, 1), z.p_mul(const(hi, 0.5)))))


def _cos_kernel(hi, lo):
    z = hi.p_mul(hi)
    c = const(hi, 1).p_add(z.p_mul(horner(z, _COS)))
    return sub(c, lo.p_mul(hi))


def _sincos64(x):
    q, hi, lo = _reduce(x)
    s, c = _sin_kernel(hi, lo), _cos_kernel(hi, lo)
    qs = [compose.eq(q, const(q, float(i))) for i in range(4)]
    sin = select(qs[0], s, select(qs[1], c, select(qs[2], s.p_neg(), c.p_neg())))
    cos = select(qs[0], c, select(qs[1], s.p_neg(), select(qs[2], c.p_neg(), s)))
    bad = logical_not(isfinite(x))
    tiny = fabs(x).p_cmplt(const(x, 2.0**-27))  # sin x = x there, signed zeros included
    sin = select(bad, _nan(x), select(tiny, x, sin))
    cos = select(bad, _nan(x), cos)
    return sin, cos, q


def sincos(x):
    """(sin x, cos x) with one argument reduction: Cody-Waite below 2**19, Payne-Hanek above."""
    if x.dtype == dtypes.float32:
        s, c, _ = _sincos64(x.p_cast(F64))
        return s.p_cast(dtypes.float32), c.p_cast(dtypes.float32)
    s, c, _ = _sincos64(x)
    return s, c


def sin(x):
    return sincos(x)[0]


def cos(x):
    return sincos(x)[1]


@via_float64
def tan(x):
    s, c, _ = _sincos64(x)
    return divide(s, c)


# atan(u) = sum (-1)**n u**(2n+1) / (2n+1) for |u| <= tan(pi/8): 22 terms reach 1e-18.
_ATAN = [(-1) ** n / (2 * n + 1) for n in range(22, -1, -1)]


def _atan01(t):
    """atan(t) for 0 <= t <= 1 (float64): past tan(pi/8) use pi/4 + atan((t-1)/(t+1))."""
    mid = gt(t, const(t, math.sqrt(2) - 1))
    u = select(mid, divide(sub(t, const(t, 1)), t.p_add(const(t, 1))), t)
    a = u.p_mul(horner(u.p_mul(u), _ATAN))
    return select(mid, const(t, math.pi / 4).p_add(a), a)


@via_float64
def atan(x):
    t = fabs(x)
    inv = gt(t, const(t, 1))
    a = _atan01(select(inv, divide(const(t, 1), t), t))
    a = select(inv, sub(const(t, _PIO2_HI), a).p_add(const(t, _PIO2_LO)), a)
    return copysign(select(isnan(x), x, a), x)


@via_float64
def atan2(y, x):
    """The angle of (x, y): atan of the smaller over the larger, then the quadrant."""
    ax, ay = fabs(x), fabs(y)
    swap = gt(ay, ax)
    num, den = select(swap, ax, ay), select(swap, ay, ax)
    a = _atan01(divide(num, den))
    a = select(logical_and(isinf(ax), isinf(ay)), const(x, math.pi / 4), a)
    a = select(swap, sub(const(x, _PIO2_HI), a).p_add(const(x, _PIO2_LO)), a)
    a = select(compose.eq(ay, const(y, 0)), const(x, 0), a)
    a = select(signbit(x), sub(const(x, _PI_HI), a).p_add(const(x, _PI_LO)), a)
    r = copysign(a, y)
    return select(logical_or(isnan(x), isnan(y)), _nan(x), r)


def _one_minus_sq(x):
    """1 - x*x as (1 - x)(1 + x), exact in the first factor near |x| = 1."""
    return sub(const(x, 1), x).p_mul(x.p_add(const(x, 1)))


@via_float64
def asin(x):
    return atan2(x, _one_minus_sq(x).p_sqrt())


@via_float64
def acos(x):
    return atan2(_one_minus_sq(x).p_sqrt(), x)
