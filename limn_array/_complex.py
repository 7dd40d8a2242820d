"""Complex elementwise math on (re, im) pairs of real tensors.

Complex arrays are pairs of real tensors (see ``_array.py``), so every complex function is
a composition of the real ones in ``ir/graph/functions.py``: one implementation, on every
device that has float32/float64. The textbook formula is the body of each function; the
special values the standard (after C99 Annex G) fixes at zeros, infinities and nans are
laid over it with WHERE, one line per family of cases, where the formula alone would give
a nan from inf*0 or inf-inf.
"""

from __future__ import annotations

import math

from ir.graph import compose, functions
from ir.graph.compose import logical_and, logical_not, logical_or
from ir.graph.compose import sub as real_sub
from ir.graph.exact import const, select

# ---- spellings ------------------------------------------------------------------------------


def _pick(c, z1, z2):
    return select(c, z1[0], z2[0]), select(c, z1[1], z2[1])


def _eq(a, v):
    return compose.eq(a, const(a, v))


def _is_zero(a):
    return _eq(a, 0.0)


_fin, _inf, _nan = compose.isfinite, compose.isinf, compose.isnan  # of one real part


def _pos_inf(a):
    return _eq(a, math.inf)


def _neg_inf(a):
    return _eq(a, -math.inf)


def _c(x, v):
    """A constant pair shaped like the tensor x."""
    v = complex(v)
    return const(x, v.real), const(x, v.imag)


# ---- arithmetic -----------------------------------------------------------------------------


def add(z, w):
    return z[0].p_add(w[0]), z[1].p_add(w[1])


def sub(z, w):
    return real_sub(z[0], w[0]), real_sub(z[1], w[1])


def neg(z):
    return z[0].p_neg(), z[1].p_neg()


def conj(z):
    return z[0], z[1].p_neg()


def mul(z, w):
    """The textbook product (ac - bd) + (ad + bc)j."""
    a, b = z
    c, d = w
    return real_sub(a.p_mul(c), b.p_mul(d)), a.p_mul(d).p_add(b.p_mul(c))


def mul_real(z, r):
    """z times a real number, part by part (the standard's table for mixed operands)."""
    return z[0].p_mul(r), z[1].p_mul(r)


def div(z, w):
    """Smith's division: scale by the larger of |c|, |d| so nothing squares into overflow."""
    a, b = z
    c, d = w
    wide = compose.ge(functions.fabs(c), functions.fabs(d))
    # |c| >= |d|: r = d/c, den = c + d r; else r = c/d, den = c r + d
    r1 = functions.divide(d, c)
    den1 = c.p_add(d.p_mul(r1))
    re1 = functions.divide(a.p_add(b.p_mul(r1)), den1)
    im1 = functions.divide(real_sub(b, a.p_mul(r1)), den1)
    r2 = functions.divide(c, d)
    den2 = c.p_mul(r2).p_add(d)
    re2 = functions.divide(a.p_mul(r2).p_add(b), den2)
    im2 = functions.divide(real_sub(b.p_mul(r2), a), den2)
    re, im = select(wide, re1, re2), select(wide, im1, im2)
    # a zero divisor: each part divides by +0 (the real rule applied part by part)
    zero = logical_and(_is_zero(c), _is_zero(d))
    re = select(zero, functions.divide(a, functions.fabs(c)), re)
    im = select(zero, functions.divide(b, functions.fabs(c)), im)
    # an infinite divisor over a finite dividend gives zero
    zero_q = logical_and(logical_or(_inf(c), _inf(d)), logical_and(_fin(a), _fin(b)))
    return select(zero_q, const(a, 0.0), re), select(zero_q, const(a, 0.0), im)


def div_real(z, r):
    return functions.divide(z[0], r), functions.divide(z[1], r)


def square(z):
    return mul(z, z)


def absolute(z):
    return functions.hypot(z[0], z[1])


def is_zero(z):
    return logical_and(_is_zero(z[0]), _is_zero(z[1]))


def equal(z, w):
    return logical_and(compose.eq(z[0], w[0]), compose.eq(z[1], w[1]))


def isnan(z):
    return logical_or(_nan(z[0]), _nan(z[1]))


def isinf(z):
    return logical_or(_inf(z[0]), _inf(z[1]))


def isfinite(z):
    return logical_and(_fin(z[0]), _fin(z[1]))


def sign(z):
    """z / |z|; zero stays zero, a nan part makes both parts nan."""
    a, b = z
    m = functions.hypot(a, b)
    out = functions.divide(a, m), functions.divide(b, m)
    # an infinite part: the direction of the infinity
    ia = select(_inf(a), functions.copysign(const(a, 1.0), a), const(a, 0.0))
    ib = select(_inf(b), functions.copysign(const(b, 1.0), b), const(b, 0.0))
    n = functions.hypot(ia, ib)
    out = _pick(isinf(z), (functions.divide(ia, n), functions.divide(ib, n)), out)
    out = _pick(is_zero(z), _c(a, 0), out)
    nan = isnan(z)
    return select(nan, const(a, math.nan), out[0]), select(nan, const(a, math.nan), out[1])


# ---- exponential and logarithm -------------------------------------------------------------


def exp(z):
    a, b = z
    s, c = functions.sincos(b)
    e = a.p_exp()
    re, im = e.p_mul(c), e.p_mul(s)
    im = select(_is_zero(b), b, im)  # exp(x + 0j) = exp(x) + 0j, whatever x
    nonfinite_b = logical_not(_fin(b))
    re = select(logical_and(_neg_inf(a), nonfinite_b), const(a, 0.0), re)
    im = select(logical_and(_neg_inf(a), nonfinite_b), const(a, 0.0), im)
    re = select(logical_and(_pos_inf(a), nonfinite_b), const(a, math.inf), re)
    im = select(logical_and(_pos_inf(a), nonfinite_b), const(a, math.nan), im)
    return re, im


def expm1(z):
    """exp(z) - 1 with the real part as expm1(a) cos b - 2 sin(b/2)**2 (no cancellation)."""
    a, b = z
    s, c = functions.sincos(b)
    sh = functions.sin(b.p_mul(const(b, 0.5)))
    re = real_sub(functions.expm1(a).p_mul(c), const(a, 2.0).p_mul(sh).p_mul(sh))
    re = re.p_add(const(a, 0.0))  # expm1(-0 + 0j) is +0 + 0j (the standard), not -0
    im = a.p_exp().p_mul(s)
    ex = exp(z)
    special = logical_not(logical_and(_fin(a), _fin(b)))
    re = select(special, real_sub(ex[0], const(a, 1.0)), re)
    im = select(logical_or(special, _is_zero(b)), ex[1], im)
    return re, im


def _log_abs(a, b):
    """log|z|, through log1p where |z| is near 1 (where log(hypot) would cancel)."""
    big = functions.fabs(a)
    small = functions.fabs(b)
    m, n = compose.maximum(big, small), compose.minimum(big, small)
    near = logical_and(compose.ge(m, const(m, 0.5)), m.p_cmplt(const(m, 2.0)))
    t = real_sub(m, const(m, 1.0)).p_mul(m.p_add(const(m, 1.0))).p_add(n.p_mul(n))
    close = const(m, 0.5).p_mul(functions.log1p(t))
    far = functions.hypot(a, b).p_log()
    return select(logical_and(near, _fin(t)), close, far)


def log(z):
    a, b = z
    return _log_abs(a, b), functions.atan2(b, a)


def log1p(z):
    """log(1 + z): log|1 + z| from log1p(2a + a*a + b*b) / 2, so tiny z stays exact."""
    a, b = z
    w = (a.p_add(const(a, 1.0)), b)
    t = a.p_mul(const(a, 2.0)).p_add(a.p_mul(a)).p_add(b.p_mul(b))
    small = logical_and(
        functions.fabs(a).p_cmplt(const(a, 0.5)), functions.fabs(b).p_cmplt(const(b, 0.5))
    )
    re = select(small, const(a, 0.5).p_mul(functions.log1p(t)), _log_abs(*w))
    return re, functions.atan2(b, w[0])


def log_base(z, base: float):
    re, im = log(z)
    inv = 1 / math.log(base)
    return re.p_mul(const(re, inv)), im.p_mul(const(im, inv))


def sqrt(z):
    """t = sqrt((|a| + |z|)/2); the other part is b/(2t), signs from a and b."""
    a, b = z
    huge = compose.ge(compose.maximum(functions.fabs(a), functions.fabs(b)), const(a, 2.0**1000))
    scale = select(huge, const(a, 0.25), const(a, 1.0))
    sa, sb = a.p_mul(scale), b.p_mul(scale)
    t = const(a, 0.5).p_mul(functions.fabs(sa).p_add(functions.hypot(sa, sb))).p_sqrt()
    t = t.p_mul(select(huge, const(a, 2.0), const(a, 1.0)))
    other = functions.divide(functions.fabs(b), t.p_mul(const(t, 2.0)))
    neg = a.p_cmplt(const(a, 0.0))
    re = select(neg, other, t)
    im = functions.copysign(select(neg, t, other), b)
    re = select(is_zero(z), const(a, 0.0), re)
    im = select(is_zero(z), b, im)
    inf_b = _inf(b)
    return select(inf_b, const(a, math.inf), re), select(inf_b, b, im)


def pow(z, w):
    """exp(w log z), with z**0 = 1 and 0**w = 0 for w of positive real part."""
    out = exp(mul(w, log(z)))
    zero_w = is_zero(w)
    out = _pick(zero_w, _c(z[0], 1), out)
    zero_z = logical_and(is_zero(z), logical_and(_is_zero(w[1]), const(w[0], 0.0).p_cmplt(w[0])))
    return _pick(logical_and(zero_z, logical_not(zero_w)), _c(z[0], 0), out)


# ---- trigonometric and hyperbolic -----------------------------------------------------------


def sinh(z):
    a, b = z
    s, c = functions.sincos(b)
    re = functions.sinh(a).p_mul(c)
    im = functions.cosh(a).p_mul(s)
    nonfinite_b = logical_not(_fin(b))
    zero_a = _is_zero(a)
    re = select(logical_and(zero_a, nonfinite_b), a, re)
    im = select(logical_and(zero_a, nonfinite_b), const(a, math.nan), im)
    im = select(_is_zero(b), b, im)
    inf_a = logical_and(_inf(a), nonfinite_b)
    re = select(inf_a, a, re)
    im = select(inf_a, const(a, math.nan), im)
    return re, im


def cosh(z):
    a, b = z
    s, c = functions.sincos(b)
    re = functions.cosh(a).p_mul(c)
    im = functions.sinh(a).p_mul(s)
    nonfinite_b = logical_not(_fin(b))
    zero_a = _is_zero(a)
    re = select(logical_and(zero_a, nonfinite_b), const(a, math.nan), re)
    im = select(logical_and(zero_a, nonfinite_b), const(a, 0.0), im)
    im = select(_is_zero(b), select(functions.signbit(a), b.p_neg(), b), im)
    inf_a = logical_and(_inf(a), nonfinite_b)
    re = select(inf_a, const(a, math.inf), re)
    im = select(inf_a, const(a, math.nan), im)
    return re, im


def tanh(z):
    """Kahan's form: with t = tan b, s = sinh a, beta = 1 + t*t, rho = sqrt(1 + s*s),
    tanh z = (beta rho s + t j) / (1 + beta s*s); past |a| = 22 it is +-1 + 0 sin(2b) j."""
    a, b = z
    t = functions.tan(b)
    s = functions.sinh(a)
    beta = const(a, 1.0).p_add(t.p_mul(t))
    rho = const(a, 1.0).p_add(s.p_mul(s)).p_sqrt()
    den = const(a, 1.0).p_add(beta.p_mul(s).p_mul(s))
    re = functions.divide(beta.p_mul(rho).p_mul(s), den)
    im = functions.divide(t, den)
    far = compose.ge(functions.fabs(a), const(a, 22.0))
    far_im = functions.copysign(const(a, 0.0), b)  # the standard's +-0 (C99 has 0 * sin(2b))
    re = select(far, functions.copysign(const(a, 1.0), a), re)
    im = select(far, far_im, im)
    nonfinite_b = logical_not(_fin(b))
    zero_a = _is_zero(a)
    re = select(logical_and(zero_a, nonfinite_b), a, re)
    im = select(logical_and(zero_a, nonfinite_b), const(a, math.nan), im)
    finite_a = logical_and(_fin(a), logical_not(zero_a))
    re = select(logical_and(finite_a, nonfinite_b), const(a, math.nan), re)
    im = select(logical_and(finite_a, nonfinite_b), const(a, math.nan), im)
    im = select(logical_and(_nan(a), _is_zero(b)), b, im)
    return re, im


def sin(z):
    """sin z = -i sinh(i z)."""
    a, b = z
    re, im = sinh((b.p_neg(), a))
    return im, re.p_neg()


def cos(z):
    """cos z = cosh(i z)."""
    a, b = z
    return cosh((b.p_neg(), a))


def tan(z):
    """tan z = -i tanh(i z)."""
    a, b = z
    re, im = tanh((b.p_neg(), a))
    return im, re.p_neg()


def asinh(z):
    """log(z + sqrt(z*z + 1)) on the right half-plane, odd symmetry for the left."""
    a, b = z
    neg = functions.signbit(a)
    a = functions.fabs(a)
    w = (a, b)
    s = sqrt(add(square(w), _c(a, 1)))
    re, im = log(add(w, s))
    # tiny |z|: asinh z = z to first order (log of 1 + tiny would lose it)
    tiny = logical_and(
        functions.fabs(a).p_cmplt(const(a, 1e-8)), functions.fabs(b).p_cmplt(const(b, 1e-8))
    )
    re, im = select(tiny, a, re), select(tiny, b, im)
    # huge |z|: log(2z) (z*z would overflow)
    huge = compose.ge(compose.maximum(a, functions.fabs(b)), const(a, 2.0**500))
    lr, li = log((a, b))
    re = select(huge, lr.p_add(const(a, math.log(2))), re)
    im = select(huge, li, im)
    # infinities and nans
    inf_b = _inf(b)
    re = select(inf_b, const(a, math.inf), re)
    im = select(inf_b, select(_fin(a), functions.copysign(const(a, math.pi / 2), b), im), im)
    re = select(_inf(a), const(a, math.inf), re)
    nan_b = _nan(b)
    re = select(logical_and(nan_b, _inf(a)), const(a, math.inf), re)
    im = select(nan_b, const(a, math.nan), im)
    nan_a = _nan(a)
    re = select(nan_a, select(inf_b, const(a, math.inf), const(a, math.nan)), re)
    im = select(nan_a, select(_is_zero(b), b, const(a, math.nan)), im)
    return select(neg, re.p_neg(), re), im


def asin(z):
    """asin z = -i asinh(i z)."""
    a, b = z
    re, im = asinh((b.p_neg(), a))
    return im, re.p_neg()


def acos(z):
    """acos z = pi/2 - asin z, with C99's special values."""
    a, b = z
    s = asin(z)
    re = real_sub(const(a, math.pi / 2), s[0])
    im = s[1].p_neg()
    # the real part at infinities follows the angle of the point at infinity
    inf_b = _inf(b)
    re = select(logical_and(inf_b, _fin(a)), const(a, math.pi / 2), re)
    ang = functions.atan2(functions.fabs(b), a.p_neg())
    ang = real_sub(const(a, math.pi), ang)
    re = select(
        logical_and(_inf(a), logical_not(_nan(b))),
        select(inf_b, ang, select(a.p_cmplt(const(a, 0.0)), const(a, math.pi), const(a, 0.0))),
        re,
    )
    im = select(
        logical_and(_inf(a), logical_not(_nan(b))),
        functions.copysign(const(a, math.inf), b.p_neg()),
        im,
    )
    im = select(inf_b, functions.copysign(const(a, math.inf), b.p_neg()), im)
    # nans
    nan_b = _nan(b)
    zero_a = _is_zero(a)
    re = select(logical_and(nan_b, zero_a), const(a, math.pi / 2), re)
    re = select(logical_and(nan_b, logical_not(zero_a)), const(a, math.nan), re)
    im = select(nan_b, select(_inf(a), const(a, math.inf), const(a, math.nan)), im)
    nan_a = _nan(a)
    re = select(nan_a, const(a, math.nan), re)
    im = select(
        nan_a,
        select(inf_b, functions.copysign(const(a, math.inf), b.p_neg()), const(a, math.nan)),
        im,
    )
    return re, im


def acosh(z):
    """acosh z = +-i acos z: the sign that keeps the real part non-negative."""
    a, b = z
    re_c, im_c = acos(z)
    # i * acos z = -im_c + re_c j; flip both when that real part is negative
    re, im = im_c.p_neg(), re_c
    flip = functions.signbit(re)
    re = select(flip, re.p_neg(), re)
    im = select(flip, im.p_neg(), im)
    nan_a, nan_b = _nan(a), _nan(b)
    re = select(logical_and(nan_a, _inf(b)), const(a, math.inf), re)
    im = select(logical_and(nan_a, _inf(b)), const(a, math.nan), im)
    re = select(logical_and(nan_b, _inf(a)), const(a, math.inf), re)
    im = select(nan_b, const(a, math.nan), im)
    re = select(logical_and(nan_b, logical_not(_inf(a))), const(a, math.nan), re)
    im = select(logical_and(nan_b, _is_zero(a)), const(a, math.pi / 2), im)
    both = logical_and(nan_a, logical_not(_inf(b)))
    return select(both, const(a, math.nan), re), select(both, const(a, math.nan), im)


def atanh(z):
    """(log1p(z) - log1p(-z)) / 2, with C99's special values."""
    a, b = z
    p = log1p(z)
    m = log1p(neg(z))
    re = const(a, 0.5).p_mul(real_sub(p[0], m[0]))
    im = const(a, 0.5).p_mul(real_sub(p[1], m[1]))
    one = logical_and(_eq(functions.fabs(a), 1.0), _is_zero(b))
    re = select(one, functions.copysign(const(a, math.inf), a), re)
    im = select(one, b, im)
    big = logical_or(_inf(a), _inf(b))
    re = select(big, functions.copysign(const(a, 0.0), a), re)
    im = select(big, functions.copysign(const(a, math.pi / 2), b), im)
    nan_a, nan_b = _nan(a), _nan(b)
    re = select(
        nan_b,
        select(
            _is_zero(a),
            a,
            select(_inf(a), functions.copysign(const(a, 0.0), a), const(a, math.nan)),
        ),
        re,
    )
    im = select(nan_b, const(a, math.nan), im)
    re = select(
        nan_a, select(_inf(b), functions.copysign(const(a, 0.0), a), const(a, math.nan)), re
    )
    im = select(logical_and(nan_a, logical_not(_inf(b))), const(a, math.nan), im)
    return re, im


def atan(z):
    """atan z = -i atanh(i z)."""
    a, b = z
    re, im = atanh((b.p_neg(), a))
    return im, re.p_neg()
