"""The Bessel functions of torch.special: I0 and I1 (and scaled), K0 and K1 (and scaled),
J0, J1, Y0, Y1 and the spherical j0, each composed of Tensor methods in float64
(``limn/special/evaluate.py``), their series' coefficients computed from the formulas."""

from __future__ import annotations

import math

from limn.special.evaluate import _in64, _poly
from limn.tensor import Tensor

# ---- modified Bessel functions of the first kind ----------------------------------------

_NEAR = 30.0  # the power series below, the asymptotic series above


def _bessel_i(input, nu: int, scaled: bool) -> Tensor:
    """I_nu(x) (times exp(-|x|) when ``scaled``) for nu in (0, 1)."""
    x, out = _in64(input)
    a = x.abs()
    near = a <= _NEAR
    q = near.where(a * a / 4, 0.0)  # (the series unused past _NEAR must not overflow)
    series = _poly(q, [1 / (math.factorial(k) * math.factorial(k + nu)) for k in range(70)])
    series = series * (a / 2) ** nu if nu else series
    far = near.where(_NEAR, a)
    terms, c = [], 1.0
    for k in range(30):  # (-1)**k prod_{j<=k} (4 nu**2 - (2j-1)**2) / (k! 8**k)
        terms.append(c)
        c *= -(4 * nu * nu - (2 * k + 1) ** 2) / ((k + 1) * 8)
    asym = _poly(1 / far, terms) / (2 * math.pi * far).sqrt()
    if scaled:
        value = near.where(series * (-a).exp(), asym)
    else:  # e**a in halves: it overflows before I(a) does
        value = near.where(series, asym * (far / 2).exp() * (far / 2).exp())
    value = x.isnan().where(x, a.isinf().where(0.0 if scaled else math.inf, value))
    return ((x < 0).where(-value, value) if nu else value).cast(out)


def i0(input) -> Tensor:
    return _bessel_i(input, 0, False)


def i0e(input) -> Tensor:
    return _bessel_i(input, 0, True)


def i1(input) -> Tensor:
    return _bessel_i(input, 1, False)


def i1e(input) -> Tensor:
    return _bessel_i(input, 1, True)


modified_bessel_i0, modified_bessel_i1 = i0, i1


# ---- modified Bessel functions of the second kind ---------------------------------------

_K_NEAR, _K_NODES = 2.0, 48  # the power series up to |x| = 2; the integral above it


def _bessel_k(input, nu: int, scaled: bool) -> Tensor:
    """K_nu(x) (times e**x when ``scaled``) for nu in (0, 1), x > 0 (nan below 0, inf at 0).

    Up to x = 2, A&S 9.6.11: the series of I_nu with the logarithm and digamma sums.
    Above, e**x K_nu(x) = the integral over t > 0 of exp(-x (cosh t - 1)) cosh(nu t),
    by the trapezoid rule to where the integrand is below e**-40: exponentially accurate
    for an integrand analytic in a strip, and free of cancellation and overflow.
    """
    x, out = _in64(input)
    near = x <= _K_NEAR
    z = near.where(x, 1.0).clamp(min=0.0)
    q, term, i, tail = z * z / 4, z * 0 + 1, 0, 0  # term: q^k / (k! (k + nu)!)
    harmonic = [0.0]
    for k in range(30):
        if k:
            term = term * q / (k * (k + nu))
            harmonic.append(harmonic[-1] + 1 / k)
        i = i + term
        tail = tail + term * (
            2 * harmonic[k] if nu == 0 else harmonic[k] + harmonic[k] + 1 / (k + 1)
        )
    if nu == 0:
        k_near = -((z / 2).log() + _EULER) * i + tail / 2
    else:  # (I_1 is (z/2) times the sum; the digamma terms carry -2 Euler's constant)
        k_near = 1 / z + (z / 2).log() * (z / 2) * i - (z / 4) * (tail - 2 * _EULER * i)
    w = near.where(3.0, x)  # the integral's argument, away from the series' range
    h = (1 + 40 / w).acosh() / _K_NODES
    k_far = 0.5  # the node at t = 0, weighted a half
    for j in range(1, _K_NODES + 1):
        t = h * j
        f = (-w * (t.cosh() - 1)).exp()
        k_far = k_far + (f * (t * nu).cosh() if nu else f)
    k_far = k_far * h
    got = near.where(
        k_near * x.exp() if scaled else k_near, k_far if scaled else k_far * (-w).exp()
    )
    got = (x == math.inf).where(0.0, got)
    return (x < 0).where(math.nan, (x == 0).where(math.inf, got)).cast(out)


def modified_bessel_k0(input) -> Tensor:
    """The modified Bessel function of the second kind of order 0."""
    return _bessel_k(input, 0, False)


def modified_bessel_k1(input) -> Tensor:
    return _bessel_k(input, 1, False)


def scaled_modified_bessel_k0(input) -> Tensor:
    """exp(x) K_0(x)."""
    return _bessel_k(input, 0, True)


def scaled_modified_bessel_k1(input) -> Tensor:
    return _bessel_k(input, 1, True)


_BESSEL_FAR = 12.0  # the power series below, Hankel's asymptotic series above
_EULER = 0.5772156649015329


def _hankel(nu: int, k: int) -> float:
    """a_k(nu) of Hankel's expansion: prod over j <= k of (4 nu^2 - (2j - 1)^2), / k! 8^k."""
    return math.prod(4 * nu * nu - (2 * j - 1) ** 2 for j in range(1, k + 1)) / (
        math.factorial(k) * 8**k
    )


def _bessel(input, nu: int, second: bool) -> Tensor:
    """J_nu (``second``: Y_nu) for nu in (0, 1): the power series (with Y's logarithm and
    harmonic numbers) below |x| = 12, Hankel's P and Q beyond."""
    x, out = _in64(input)
    ax = x.abs()
    near = ax < _BESSEL_FAR
    z = near.where(ax, 1.0)
    q = -(z * z) / 4
    term, j, y = (z / 2) ** nu, 0, 0  # term: (-z^2/4)^k (z/2)^nu / (k! (k + nu)!)
    harmonic = [0.0]
    for k in range(40):
        if k:
            term = term * q / (k * (k + nu))
            harmonic.append(harmonic[-1] + 1 / k)
        j = j + term
        weight = (
            2 * harmonic[k] if nu == 0 else harmonic[k] + harmonic[k] + 1 / (k + 1) - 2 * _EULER
        )
        y = y + term * weight
    if nu == 0:
        y_near = (2 / math.pi) * (((z / 2).log() + _EULER) * j - y / 2)
    else:
        y_near = -2 / (math.pi * z) + (2 / math.pi) * (z / 2).log() * j - y / math.pi
    w = near.where(1.0, ax)
    inv2 = 1 / (w * w)
    p = _poly(inv2, [(-1) ** k * _hankel(nu, 2 * k) for k in range(13)])
    qq = _poly(inv2, [(-1) ** k * _hankel(nu, 2 * k + 1) for k in range(12)]) / w
    chi = w - (nu / 2 + 0.25) * math.pi
    scale = (2 / (math.pi * w)).sqrt()
    if second:
        far = scale * (p * chi.sin() + qq * chi.cos())
        got = near.where(y_near, far)
        got = ax.isinf().where(0.0, got)
        return (x < 0).where(math.nan, (x == 0).where(-math.inf, got)).cast(out)
    far = scale * (p * chi.cos() - qq * chi.sin())
    got = ax.isinf().where(0.0, near.where(j, far))
    return ((x < 0) & (nu == 1)).where(-got, got).cast(out)


def bessel_j0(input) -> Tensor:
    """The Bessel function of the first kind of order 0."""
    return _bessel(input, 0, second=False)


def bessel_j1(input) -> Tensor:
    return _bessel(input, 1, second=False)


def bessel_y0(input) -> Tensor:
    """The Bessel function of the second kind of order 0: nan below 0, -inf at 0."""
    return _bessel(input, 0, second=True)


def bessel_y1(input) -> Tensor:
    return _bessel(input, 1, second=True)


def spherical_bessel_j0(input) -> Tensor:
    """sin(x) / x: 1 at 0, 0 at the infinities."""
    x, out = _in64(input)
    j = (x == 0).where(1.0, x.sin() / x)
    return x.isinf().where(0.0, j).cast(out)
