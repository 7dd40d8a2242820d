"""Complex elementwise math on (re, im) pairs of real tensors.

Complex arrays are pairs of real tensors (see ``_array.py``), so every complex function is
a composition of the real ones in ``ir/graph/elementary.py``: one implementation, on every
device that has float32/float64. The textbook formula is the body of each function; the
special values the standard (after C99 Annex G) fixes at zeros, infinities and nans are
laid over it with WHERE, one line per family of cases, where the formula alone would give
a nan from inf*0 or inf-inf.
"""

from __future__ import annotations

import math

from ir.graph import compose
from ir.graph import elementary as cm
from ir.graph.compose import logical_and, logical_not, logical_or

# ---- spellings ------------------------------------------------------------------------------


def _k(x, v):
    return x.p_const(v)


def _sub(a, b):
    return a.p_add(b.p_neg())


def _sel(c, a, b):
    return c.p_where(a, b)


def _pick(c, z1, z2):
    return _sel(c, z1[0], z2[0]), _sel(c, z1[1], z2[1])


def _eq(a, v):
    return compose.eq(a, _k(a, v))


def _is_zero(a):
    return _eq(a, 0.0)


def _fin(a):
    return cm.isfinite(a)


def _inf(a):
    return cm.isinf(a)


def _nan(a):
    return cm.isnan(a)


def _pos_inf(a):
    return _eq(a, math.inf)


def _neg_inf(a):
    return _eq(a, -math.inf)


def _c(x, v):
    """A constant pair shaped like the tensor x."""
    v = complex(v)
    return _k(x, v.real), _k(x, v.imag)


# ---- arithmetic -----------------------------------------------------------------------------


def add(z, w):
    return z[0].p_add(w[0]), z[1].p_add(w[1])


def sub(z, w):
    return _sub(z[0], w[0]), _sub(z[1], w[1])


def neg(z):
    return z[0].p_neg(), z[1].p_neg()


def conj(z):
    return z[0], z[1].p_neg()


def mul(z, w):
    """The textbook product (ac - bd) + (ad + bc)j."""
    a, b = z
    c, d = w
    return _sub(a.p_mul(c), b.p_mul(d)), a.p_mul(d).p_add(b.p_mul(c))


def mul_real(z, r):
    """z times a real number, part by part (the standard's table for mixed operands)."""
    return z[0].p_mul(r), z[1].p_mul(r)


def div(z, w):
    """Smith's division: scale by the larger of |c|, |d| so nothing squares into overflow."""
    a, b = z
    c, d = w
    wide = compose.ge(cm.fabs(c), cm.fabs(d))
    # |c| >= |d|: r = d/c, den = c + d r; else r = c/d, den = c r + d
    r1 = cm.divide(d, c)
    den1 = c.p_add(d.p_mul(r1))
    re1 = cm.divide(a.p_add(b.p_mul(r1)), den1)
    im1 = cm.divide(_sub(b, a.p_mul(r1)), den1)
    r2 = cm.divide(c, d)
    den2 = c.p_mul(r2).p_add(d)
    re2 = cm.divide(a.p_mul(r2).p_add(b), den2)
    im2 = cm.divide(_sub(b.p_mul(r2), a), den2)
    re, im = _sel(wide, re1, re2), _sel(wide, im1, im2)
    # a zero divisor: each part divides by +0 (the real rule applied part by part)
    zero = logical_and(_is_zero(c), _is_zero(d))
    re = _sel(zero, cm.divide(a, cm.fabs(c)), re)
    im = _sel(zero, cm.divide(b, cm.fabs(c)), im)
    # an infinite divisor over a finite dividend gives zero
    zero_q = logical_and(logical_or(_inf(c), _inf(d)), logical_and(_fin(a), _fin(b)))
    return _sel(zero_q, _k(a, 0.0), re), _sel(zero_q, _k(a, 0.0), im)


def div_real(z, r):
    return cm.divide(z[0], r), cm.divide(z[1], r)


def square(z):
    return mul(z, z)


def absolute(z):
    return cm.hypot(z[0], z[1])


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
    m = cm.hypot(a, b)
    out = cm.divide(a, m), cm.divide(b, m)
    # an infinite part: the direction of the infinity
    ia = _sel(_inf(a), cm.copysign(_k(a, 1.0), a), _k(a, 0.0))
    ib = _sel(_inf(b), cm.copysign(_k(b, 1.0), b), _k(b, 0.0))
    n = cm.hypot(ia, ib)
    out = _pick(isinf(z), (cm.divide(ia, n), cm.divide(ib, n)), out)
    out = _pick(is_zero(z), _c(a, 0), out)
    nan = isnan(z)
    return _sel(nan, _k(a, math.nan), out[0]), _sel(nan, _k(a, math.nan), out[1])


# ---- exponential and logarithm -------------------------------------------------------------


def exp(z):
    a, b = z
    s, c = cm.sincos(b)
    e = a.p_exp()
    re, im = e.p_mul(c), e.p_mul(s)
    im = _sel(_is_zero(b), b, im)  # exp(x + 0j) = exp(x) + 0j, whatever x
    nonfinite_b = logical_not(_fin(b))
    re = _sel(logical_and(_neg_inf(a), nonfinite_b), _k(a, 0.0), re)
    im = _sel(logical_and(_neg_inf(a), nonfinite_b), _k(a, 0.0), im)
    re = _sel(logical_and(_pos_inf(a), nonfinite_b), _k(a, math.inf), re)
    im = _sel(logical_and(_pos_inf(a), nonfinite_b), _k(a, math.nan), im)
    return re, im


def expm1(z):
    """exp(z) - 1 with the real part as expm1(a) cos b - 2 sin(b/2)**2 (no cancellation)."""
    a, b = z
    s, c = cm.sincos(b)
    sh = cm.sin(b.p_mul(_k(b, 0.5)))
    re = _sub(cm.expm1(a).p_mul(c), _k(a, 2.0).p_mul(sh).p_mul(sh))
    re = re.p_add(_k(a, 0.0))  # expm1(-0 + 0j) is +0 + 0j (the standard), not -0
    im = a.p_exp().p_mul(s)
    ex = exp(z)
    special = logical_not(logical_and(_fin(a), _fin(b)))
    re = _sel(special, _sub(ex[0], _k(a, 1.0)), re)
    im = _sel(logical_or(special, _is_zero(b)), ex[1], im)
    return re, im


def _log_abs(a, b):
    """log|z|, through log1p where |z| is near 1 (where log(hypot) would cancel)."""
    big = cm.fabs(a)
    small = cm.fabs(b)
    m, n = compose.maximum(big, small), compose.minimum(big, small)
    near = logical_and(compose.ge(m, _k(m, 0.5)), m.p_cmplt(_k(m, 2.0)))
    t = _sub(m, _k(m, 1.0)).p_mul(m.p_add(_k(m, 1.0))).p_add(n.p_mul(n))
    close = _k(m, 0.5).p_mul(cm.log1p(t))
    far = cm.hypot(a, b).p_log()
    return _sel(logical_and(near, _fin(t)), close, far)


def log(z):
    a, b = z
    return _log_abs(a, b), cm.atan2(b, a)


def log1p(z):
    """log(1 + z): log|1 + z| from log1p(2a + a*a + b*b) / 2, so tiny z stays exact."""
    a, b = z
    w = (a.p_add(_k(a, 1.0)), b)
    t = a.p_mul(_k(a, 2.0)).p_add(a.p_mul(a)).p_add(b.p_mul(b))
    small = logical_and(cm.fabs(a).p_cmplt(_k(a, 0.5)), cm.fabs(b).p_cmplt(_k(b, 0.5)))
    re = _sel(small, _k(a, 0.5).p_mul(cm.log1p(t)), _log_abs(*w))
    return re, cm.atan2(b, w[0])


def log_base(z, base: float):
    re, im = log(z)
    inv = 1 / math.log(base)
    return re.p_mul(_k(re, inv)), im.p_mul(_k(im, inv))


def sqrt(z):
    """t = sqrt((|a| + |z|)/2); the other part is b/(2t), signs from a and b."""
    a, b = z
    huge = compose.ge(compose.maximum(cm.fabs(a), cm.fabs(b)), _k(a, 2.0**1000))
    scale = _sel(huge, _k(a, 0.25), _k(a, 1.0))
    sa, sb = a.p_mul(scale), b.p_mul(scale)
    t = _k(a, 0.5).p_mul(cm.fabs(sa).p_add(cm.hypot(sa, sb))).p_sqrt()
    t = t.p_mul(_sel(huge, _k(a, 2.0), _k(a, 1.0)))
    other = cm.divide(cm.fabs(b), t.p_mul(_k(t, 2.0)))
    neg = a.p_cmplt(_k(a, 0.0))
    re = _sel(neg, other, t)
    im = cm.copysign(_sel(neg, t, other), b)
    re = _sel(is_zero(z), _k(a, 0.0), re)
    im = _sel(is_zero(z), b, im)
    inf_b = _inf(b)
    return _sel(inf_b, _k(a, math.inf), re), _sel(inf_b, b, im)


def pow(z, w):
    """exp(w log z), with z**0 = 1 and 0**w = 0 for w of positive real part."""
    out = exp(mul(w, log(z)))
    zero_w = is_zero(w)
    out = _pick(zero_w, _c(z[0], 1), out)
    zero_z = logical_and(is_zero(z), logical_and(_is_zero(w[1]), _k(w[0], 0.0).p_cmplt(w[0])))
    return _pick(logical_and(zero_z, logical_not(zero_w)), _c(z[0], 0), out)


# ---- trigonometric and hyperbolic -----------------------------------------------------------


def sinh(z):
    a, b = z
    s, c = cm.sincos(b)
    re = cm.sinh(a).p_mul(c)
    im = cm.cosh(a).p_mul(s)
    nonfinite_b = logical_not(_fin(b))
    zero_a = _is_zero(a)
    re = _sel(logical_and(zero_a, nonfinite_b), a, re)
    im = _sel(logical_and(zero_a, nonfinite_b), _k(a, math.nan), im)
    im = _sel(_is_zero(b), b, im)
    inf_a = logical_and(_inf(a), nonfinite_b)
    re = _sel(inf_a, a, re)
    im = _sel(inf_a, _k(a, math.nan), im)
    return re, im


def cosh(z):
    a, b = z
    s, c = cm.sincos(b)
    re = cm.cosh(a).p_mul(c)
    im = cm.sinh(a).p_mul(s)
    nonfinite_b = logical_not(_fin(b))
    zero_a = _is_zero(a)
    re = _sel(logical_and(zero_a, nonfinite_b), _k(a, math.nan), re)
    im = _sel(logical_and(zero_a, nonfinite_b), _k(a, 0.0), im)
    im = _sel(_is_zero(b), _sel(cm.signbit(a), b.p_neg(), b), im)
    inf_a = logical_and(_inf(a), nonfinite_b)
    re = _sel(inf_a, _k(a, math.inf), re)
    im = _sel(inf_a, _k(a, math.nan), im)
    return re, im


def tanh(z):
    """Kahan's form: with t = tan b, s = sinh a, beta = 1 + t*t, rho = sqrt(1 + s*s),
    tanh z = (beta rho s + t j) / (1 + beta s*s); past |a| = 22 it is +-1 + 0 sin(2b) j."""
    a, b = z
    t = cm.tan(b)
    s = cm.sinh(a)
    beta = _k(a, 1.0).p_add(t.p_mul(t))
    rho = _k(a, 1.0).p_add(s.p_mul(s)).p_sqrt()
    den = _k(a, 1.0).p_add(beta.p_mul(s).p_mul(s))
    re = cm.divide(beta.p_mul(rho).p_mul(s), den)
    im = cm.divide(t, den)
    far = compose.ge(cm.fabs(a), _k(a, 22.0))
    far_im = cm.copysign(_k(a, 0.0), b)  # the standard's +-0 (C99 has 0 * sin(2b))
    re = _sel(far, cm.copysign(_k(a, 1.0), a), re)
    im = _sel(far, far_im, im)
    nonfinite_b = logical_not(_fin(b))
    zero_a = _is_zero(a)
    re = _sel(logical_and(zero_a, nonfinite_b), a, re)
    im = _sel(logical_and(zero_a, nonfinite_b), _k(a, math.nan), im)
    finite_a = logical_and(_fin(a), logical_not(zero_a))
    re = _sel(logical_and(finite_a, nonfinite_b), _k(a, math.nan), re)
    im = _sel(logical_and(finite_a, nonfinite_b), _k(a, math.nan), im)
    im = _sel(logical_and(_nan(a), _is_zero(b)), b, im)
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
    neg = cm.signbit(a)
    a = cm.fabs(a)
    w = (a, b)
    s = sqrt(add(square(w), _c(a, 1)))
    re, im = log(add(w, s))
    # tiny |z|: asinh z = z to first order (log of 1 + tiny would lose it)
    tiny = logical_and(cm.fabs(a).p_cmplt(_k(a, 1e-8)), cm.fabs(b).p_cmplt(_k(b, 1e-8)))
    re, im = _sel(tiny, a, re), _sel(tiny, b, im)
    # huge |z|: log(2z) (z*z would overflow)
    huge = compose.ge(compose.maximum(a, cm.fabs(b)), _k(a, 2.0**500))
    lr, li = log((a, b))
    re = _sel(huge, lr.p_add(_k(a, math.log(2))), re)
    im = _sel(huge, li, im)
    # infinities and nans
    inf_b = _inf(b)
    re = _sel(inf_b, _k(a, math.inf), re)
    im = _sel(inf_b, _sel(_fin(a), cm.copysign(_k(a, math.pi / 2), b), im), im)
    re = _sel(_inf(a), _k(a, math.inf), re)
    nan_b = _nan(b)
    re = _sel(logical_and(nan_b, _inf(a)), _k(a, math.inf), re)
    im = _sel(nan_b, _k(a, math.nan), im)
    nan_a = _nan(a)
    re = _sel(nan_a, _sel(inf_b, _k(a, math.inf), _k(a, math.nan)), re)
    im = _sel(nan_a, _sel(_is_zero(b), b, _k(a, math.nan)), im)
    return _sel(neg, re.p_neg(), re), im


def asin(z):
    """asin z = -i asinh(i z)."""
    a, b = z
    re, im = asinh((b.p_neg(), a))
    return im, re.p_neg()


def acos(z):
    """acos z = pi/2 - asin z, with C99's special values."""
    a, b = z
    s = asin(z)
    re = _sub(_k(a, math.pi / 2), s[0])
    im = s[1].p_neg()
    # the real part at infinities follows the angle of the point at infinity
    inf_b = _inf(b)
    re = _sel(logical_and(inf_b, _fin(a)), _k(a, math.pi / 2), re)
    ang = cm.atan2(cm.fabs(b), a.p_neg())
    ang = _sub(_k(a, math.pi), ang)
    re = _sel(
        logical_and(_inf(a), logical_not(_nan(b))),
        _sel(inf_b, ang, _sel(a.p_cmplt(_k(a, 0.0)), _k(a, math.pi), _k(a, 0.0))),
        re,
    )
    im = _sel(
        logical_and(_inf(a), logical_not(_nan(b))), cm.copysign(_k(a, math.inf), b.p_neg()), im
    )
    im = _sel(inf_b, cm.copysign(_k(a, math.inf), b.p_neg()), im)
    # nans
    nan_b = _nan(b)
    zero_a = _is_zero(a)
    re = _sel(logical_and(nan_b, zero_a), _k(a, math.pi / 2), re)
    re = _sel(logical_and(nan_b, logical_not(zero_a)), _k(a, math.nan), re)
    im = _sel(nan_b, _sel(_inf(a), _k(a, math.inf), _k(a, math.nan)), im)
    nan_a = _nan(a)
    re = _sel(nan_a, _k(a, math.nan), re)
    im = _sel(nan_a, _sel(inf_b, cm.copysign(_k(a, math.inf), b.p_neg()), _k(a, math.nan)), im)
    return re, im


def acosh(z):
    """acosh z = +-i acos z: the sign that keeps the real part non-negative."""
    a, b = z
    re_c, im_c = acos(z)
    # i * acos z = -im_c + re_c j; flip both when that real part is negative
    re, im = im_c.p_neg(), re_c
    flip = cm.signbit(re)
    re = _sel(flip, re.p_neg(), re)
    im = _sel(flip, im.p_neg(), im)
    nan_a, nan_b = _nan(a), _nan(b)
    re = _sel(logical_and(nan_a, _inf(b)), _k(a, math.inf), re)
    im = _sel(logical_and(nan_a, _inf(b)), _k(a, math.nan), im)
    re = _sel(logical_and(nan_b, _inf(a)), _k(a, math.inf), re)
    im = _sel(nan_b, _k(a, math.nan), im)
    re = _sel(logical_and(nan_b, logical_not(_inf(a))), _k(a, math.nan), re)
    im = _sel(logical_and(nan_b, _is_zero(a)), _k(a, math.pi / 2), im)
    both = logical_and(nan_a, logical_not(_inf(b)))
    return _sel(both, _k(a, math.nan), re), _sel(both, _k(a, math.nan), im)


def atanh(z):
    """(log1p(z) - log1p(-z)) / 2, with C99's special values."""
    a, b = z
    p = log1p(z)
    m = log1p(neg(z))
    re = _k(a, 0.5).p_mul(_sub(p[0], m[0]))
    im = _k(a, 0.5).p_mul(_sub(p[1], m[1]))
    one = logical_and(_eq(cm.fabs(a), 1.0), _is_zero(b))
    re = _sel(one, cm.copysign(_k(a, math.inf), a), re)
    im = _sel(one, b, im)
    big = logical_or(_inf(a), _inf(b))
    re = _sel(big, cm.copysign(_k(a, 0.0), a), re)
    im = _sel(big, cm.copysign(_k(a, math.pi / 2), b), im)
    nan_a, nan_b = _nan(a), _nan(b)
    re = _sel(
        nan_b, _sel(_is_zero(a), a, _sel(_inf(a), cm.copysign(_k(a, 0.0), a), _k(a, math.nan))), re
    )
    im = _sel(nan_b, _k(a, math.nan), im)
    re = _sel(nan_a, _sel(_inf(b), cm.copysign(_k(a, 0.0), a), _k(a, math.nan)), re)
    im = _sel(logical_and(nan_a, logical_not(_inf(b))), _k(a, math.nan), im)
    return re, im


def atan(z):
    """atan z = -i atanh(i z)."""
    a, b = z
    re, im = atanh((b.p_neg(), a))
    return im, re.p_neg()


def round_(z):
    return cm.rint(z[0]), cm.rint(z[1])
