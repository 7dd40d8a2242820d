"""limn.special: torch.special's functions, and the gamma, Bessel and inverse-erf families
torch also names at its top level and as Tensor methods (``lgamma``, ``digamma``,
``polygamma``, ``mvlgamma``, ``erfinv``, ``i0``).

Each is composed of Tensor methods, computed in float64 and rounded once to the input's
float dtype (integers and bools give float32, as torch's do). The series are written from
the math, with coefficients computed here from their formulas:

- the gamma family shifts its argument up past 8 by the recurrence (Gamma(x+1) = x
  Gamma(x)), reflects negative arguments (Gamma(x) Gamma(1-x) = pi / sin(pi x)), and sums
  Stirling's series (Bernoulli numbers) there; polygamma is a Hurwitz zeta sum shifted the
  same way, with Euler-Maclaurin's tail, and so is ``zeta``; the incomplete gamma sums
  its power series below x = a + 1 and Legendre's continued fraction above;
- I0 and I1 sum their power series (all terms positive) up to |x| = 30 and their
  asymptotic series beyond; J0, J1, Y0 and Y1 theirs up to 12 and Hankel's beyond;
- erfcx is exp(x*x) erfc(x), with erfc's continued fraction past 2.5; erfinv and ndtri
  refine an estimate by Halley's method on erf (near 0) or on erfc (in the tails, so the
  tails keep their relative precision);
- the orthogonal polynomials (Chebyshev, Hermite, Laguerre, Legendre) run their
  three-term recurrences up to the largest degree asked for.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ir.graph import dtypes
from limn.ops import inplace
from limn.special.bessel import (  # noqa: F401  (torch.special's, by its names)
    bessel_j0,
    bessel_j1,
    bessel_y0,
    bessel_y1,
    i0,
    i0e,
    i1,
    i1e,
    modified_bessel_i0,
    modified_bessel_i1,
    modified_bessel_k0,
    modified_bessel_k1,
    scaled_modified_bessel_k0,
    scaled_modified_bessel_k1,
    spherical_bessel_j0,
)
from limn.special.evaluate import F64, _in64, _poly
from limn.tensor import Tensor


def _bernoulli(n: int) -> list[Fraction]:
    """B_0 .. B_n, from sum_{k<=m} C(m+1, k) B_k = 0."""
    b = [Fraction(1)]
    for m in range(1, n + 1):
        b.append(-sum(math.comb(m + 1, k) * b[k] for k in range(m)) / (m + 1))
    return b


_B2K = [float(b) for b in _bernoulli(22)[2::2]]  # B_2, B_4, ..., B_22
_SHIFT = 9  # arguments below are moved up by the recurrence


# ---- the gamma family -----------------------------------------------------------------


def _lgamma_positive(x: Tensor) -> Tensor:
    """log Gamma(x) for x > 0 (x = +inf gives inf)."""
    small = x < _SHIFT
    z = small.where(x + _SHIFT, x)
    prod = x
    for k in range(1, _SHIFT):
        prod = prod * (x + k)
    w = 1 / (z * z)
    series = _poly(w, [b / ((2 * k + 2) * (2 * k + 1)) for k, b in enumerate(_B2K)]) / z
    stirling = (z - 0.5) * z.log() - z + 0.5 * math.log(2 * math.pi) + series
    out = small.where(stirling - small.where(prod, 1.0).log(), stirling)
    return x.isinf().where(x, out)


def _sin_pi_abs(x: Tensor) -> Tensor:
    """|sin(pi x)|, exact 0 at the integers: sin of pi times x's distance below an integer."""
    r = x - x.floor()
    return (r * math.pi).sin().abs()


def lgamma(input) -> Tensor:
    """log |Gamma(x)|; inf at 0 and the negative integers, 0 at 1 and 2 (as torch's)."""
    x, out = _in64(input)
    pos = _lgamma_positive((x > 0).where(x, 1 - x))
    pos = pos - ((x == 1) | (x == 2)).where(pos.detach(), 0.0)  # (the series is 1e-15 off)
    # (the reflection of x > 0 is not taken: it reads 0.5, whose sine has no pole, so no
    # inf is differentiated where the gradient is pos's, at 1, 2, 3, ...)
    reflected = (math.pi / _sin_pi_abs((x > 0).where(0.5, x))).log() - pos
    return (x > 0).where(pos, x.isinf().where(math.inf, reflected)).cast(out)


def _digamma_positive(x: Tensor) -> Tensor:
    small = x < _SHIFT
    z = small.where(x + _SHIFT, x)
    steps = 1 / x
    for k in range(1, _SHIFT):
        steps = steps + 1 / (x + k)
    w = 1 / (z * z)
    series = w * _poly(w, [b / (2 * k + 2) for k, b in enumerate(_B2K)])
    asym = z.log() - 0.5 / z - series
    return small.where(asym - steps, asym)


def digamma(input) -> Tensor:
    """d/dx log Gamma(x): -inf at +0 (inf at -0.0), nan at the negative integers."""
    x, out = _in64(input)
    pos = _digamma_positive((x > 0).where(x, 1 - x))
    frac = x - x.trunc()  # tan(pi x) = tan(pi frac), with no large multiple of pi to round
    reflected = pos - math.pi / (frac * math.pi).tan()
    at_int = (frac == 0) & (x < 0)
    zero = (x == 0).where(x.signbit().where(math.inf, -math.inf), reflected)
    got = (x > 0).where(pos, at_int.where(math.nan, zero))
    return (x == math.inf).where(math.inf, got).cast(out)


def _zeta_tail(s: int, z: Tensor) -> Tensor:
    """sum_{k>=0} (z + k)**-s for z >= _SHIFT, by Euler-Maclaurin."""
    zs = z ** (-s)
    total = z * zs / (s - 1) + 0.5 * zs
    rising, power = s, zs / z  # s (s+1) ... (s+2j-2), z**(-s-2j+1)
    for j, b in enumerate(_B2K[:12], start=1):
        total = total + power * (b / math.factorial(2 * j) * rising)
        rising *= (s + 2 * j - 1) * (s + 2 * j)
        power = power / (z * z)
    return total


def polygamma(n: int, input) -> Tensor:
    """The n-th derivative of digamma: (-1)**(n+1) n! zeta(n + 1, x) for n >= 1."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"polygamma: n must be an integer >= 0, got {n!r}")
    if n == 0:
        return digamma(input)
    x, out = _in64(input)
    lowest = x.min().item() if x.numel() else _SHIFT
    steps = max(0, math.ceil(_SHIFT - lowest)) if math.isfinite(lowest) else 0
    total = _zeta_tail(n + 1, x + steps)
    for k in range(steps):
        r = 1 / (x + k)
        total = total + r ** (n + 1)
    return (total * ((-1) ** (n + 1) * math.factorial(n))).cast(out)


def _pair64(a, b, op: str) -> tuple[Tensor, Tensor, object]:
    """Two operands (a number on one side at most) promoted together, as float64, and the
    float dtype the result rounds to (integers and bools give float32, as torch's)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(
            f"{op}: needs a tensor operand, got {type(a).__name__} and {type(b).__name__}"
        )
    a, b = a._align(b, op) if isinstance(a, Tensor) else b._align(a, op, True)
    out = a.dtype if a.dtype.is_float else dtypes.float32
    return a.cast(F64), b.cast(F64), out


def zeta(input, other) -> Tensor:
    """Hurwitz's zeta, sum over k >= 0 of (q + k)**-x, x = ``input``, q = ``other``: the
    terms up to q + k >= 9 summed (their count read from the data, as ``polygamma``
    does), the rest by Euler-Maclaurin with the Bernoulli numbers. inf at x = 1 and at q
    a non-positive integer; nan for x < 1, and for q < 0 with x not an integer (torch's)."""
    x, q, out = _pair64(input, other, "special.zeta")
    lowest = q.min().item() if q.numel() else _SHIFT
    steps = max(0, math.ceil(_SHIFT - lowest)) if math.isfinite(lowest) else 0
    z = q + steps
    zx = z ** (-x)
    total = z * zx / (x - 1) + 0.5 * zx
    rising, power = x, zx / z  # x (x+1) ... (x+2j-2), z**(-x-2j+1)
    for j, b in enumerate(_B2K[:12], start=1):
        total = total + power * rising * (b / math.factorial(2 * j))
        rising = rising * (x + 2 * j - 1) * (x + 2 * j)
        power = power / (z * z)
    for k in range(steps):
        total = total + (q + k) ** (-x)
    pole = (x == 1) | (q <= 0) & (q == q.floor())
    undefined = (x < 1) | (q < 0) & (x != x.floor())
    return undefined.where(math.nan, pole.where(math.inf, total)).cast(out)


_SERIES, _FRACTION = 160, 80  # terms of P's series, steps of Q's continued fraction


def _incomplete_gamma(a: Tensor, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(P, Q, which): P(a, x) by its power series where x < a + 1, Q(a, x) by Legendre's
    continued fraction (modified Lentz) elsewhere; ``which`` is where the series holds."""
    series = x < a + 1
    xs = series.where(x, 0.5)  # each form evaluated where it converges, a placeholder elsewhere
    term = total = xs * 0 + 1
    for n in range(1, _SERIES):
        term = term * xs / (a + n)
        total = total + term
    p = (a * xs.log() - xs - _lgamma_positive(a + 1)).exp() * total
    xf = series.where(a + 2, x)
    tiny = 1e-300
    b = xf + 1 - a
    c, d = b * 0 + 1 / tiny, 1 / b
    h = d
    for i in range(1, _FRACTION):
        an = -i * (i - a)
        b = b + 2
        d = an * d + b
        d = (d.abs() < tiny).where(tiny, d)
        c = b + an / c
        c = (c.abs() < tiny).where(tiny, c)
        d = 1 / d
        h = h * d * c
    q = (a * xf.log() - xf - _lgamma_positive(a)).exp() * h
    return p, q, series


def _igamma(input, other, op: str, upper: bool) -> Tensor:
    a, x, out = _pair64(input, other, op)
    safe_a = (a > 0) & a.isfinite()
    p, q, series = _incomplete_gamma(safe_a.where(a, 1.0), (x > 0).where(x, 1.0))
    lower = series.where(p, 1 - q)
    value = series.where(1 - p, q) if upper else lower
    edge_low, edge_high = (1.0, 0.0) if upper else (0.0, 1.0)  # at x = 0, at x = inf
    value = (x == 0).where(edge_low, x.isinf().where(edge_high, value))
    value = a.isinf().where(x.isinf().where(math.nan, edge_low), value)
    value = (a == 0).where((x > 0).where(edge_high, math.nan), value)
    return ((a < 0) | (x < 0) | a.isnan() | x.isnan()).where(math.nan, value).cast(out)


def igamma(input, other) -> Tensor:
    """The regularized lower incomplete gamma P(a, x), a = ``input``, x = ``other``; nan
    where either is negative, torch's limits at a = 0, x = 0 and infinities."""
    return _igamma(input, other, "igamma", upper=False)


def igammac(input, other) -> Tensor:
    """The regularized upper incomplete gamma Q(a, x) = 1 - P(a, x)."""
    return _igamma(input, other, "igammac", upper=True)


gammainc, gammaincc = igamma, igammac


def mvlgamma(input, p: int) -> Tensor:
    """The multivariate log-gamma of dimension p, defined above (p - 1) / 2; below, the
    sum of lgamma's values (inf at its poles), as torch's, which checks no domain."""
    if not isinstance(p, int) or p < 1:
        raise ValueError(f"mvlgamma: p must be an integer >= 1, got {p!r}")
    x, out = _in64(input)
    total = lgamma(x)
    for j in range(1, p):
        total = total + lgamma(x - j / 2)
    return (total + p * (p - 1) / 4 * math.log(math.pi)).cast(out)


# ---- erf's relatives ------------------------------------------------------------------


def _erfcx64(x: Tensor) -> Tensor:
    """exp(x*x) erfc(x) in float64: directly below 2.5, by erfc's continued fraction
    1 / sqrt(pi) / (x + (1/2) / (x + (2/2) / (x + ...))) at and beyond."""
    below = x < 2.5
    direct = below.where(x * x, 0.0).exp() * (1 - below.where(x, 0.0).erf())
    t = below.where(2.5, x)
    cf = t
    for k in range(30, 0, -1):
        cf = t + (k / 2) / cf
    return below.where(direct, 1 / (cf * math.sqrt(math.pi)))


def _erfc64(x: Tensor) -> Tensor:
    """erfc in float64, relatively accurate in the right tail."""
    return (x < 0.5).where(1 - x.erf(), (-x * x).exp() * _erfcx64(x))


def erfcx(input) -> Tensor:
    """exp(x*x) erfc(x), with no overflow where erfc underflows."""
    x, out = _in64(input)
    return _erfcx64(x).cast(out)


def log_ndtr(input) -> Tensor:
    """log of the standard normal CDF, accurate in both tails."""
    x, out = _in64(input)
    z = x * (1 / math.sqrt(2))
    left = (_erfcx64(-z) / 2).log() - z * z
    right = (-_erfc64(z) / 2).log1p()
    return (x < -1).where(left, right).cast(out)


def _halley(x: Tensor, step, iterations: int = 3) -> Tensor:
    """x refined by Halley's method for erf-like f (f'' = -2 x f'): ``step(x)`` is f / f'."""
    for _ in range(iterations):
        d = step(x)
        x = x - d / (1 + x * d)
    return x


def _erfinv_abs(a: Tensor, c: Tensor) -> Tensor:
    """x >= 0 with erf(x) = a, for a in [0, 1] given with c = 1 - a (exactly): Winitzki's
    estimate, then Halley on erf where a < 0.5 and on erfc(x) = c beyond, so the tail
    keeps the relative precision c has."""
    inner = (c > 0).where(c * (2 - c), 1.0)  # 1 - a*a, kept clear of log(0)
    w = inner.log()
    k = 0.147
    b = 2 / (math.pi * k) + w / 2
    x0 = ((b * b - w / k).sqrt() - b).sqrt()
    half = math.sqrt(math.pi) / 2
    central = _halley(x0, lambda x: (x.erf() - a) * (x * x).exp() * half)
    tail = _halley(x0, lambda x: (c * (x * x).exp() - _erfcx64(x)) * half)
    x = (a < 0.5).where(central, tail)
    x = (c == 0).where(math.inf, (c < 0).where(math.nan, x))  # (c: a may round to 1)
    return (a == 0).where(0.0, x)


def erfinv(input) -> Tensor:
    """The inverse of erf on [-1, 1]: +-inf at +-1, nan beyond."""
    y, out = _in64(input)
    a = y.abs()
    x = _erfinv_abs(a, 1 - a)
    return y.isnan().where(y, y.signbit().where(-x, x)).cast(out)


def ndtri(input) -> Tensor:
    """The standard normal quantile: ndtr(ndtri(p)) = p; -inf at 0, inf at 1."""
    p, out = _in64(input)
    # erfc(|x| / sqrt 2) = 2q for q = min(p, 1 - p), which is exact (Sterbenz)
    q = (p < 0.5).where(p, 1 - p)
    x = _erfinv_abs(1 - 2 * q, 2 * q) * math.sqrt(2)
    return p.isnan().where(p, (p < 0.5).where(-x, x)).cast(out)


# ---- orthogonal polynomials ----------------------------------------------------------


def _polynomial(name: str, first, step, shifted: bool = False):
    """torch.special's ``name``(x, n): the degree-n member of a family by its three-term
    recurrence, p(k+1) = step(k, x, p(k), p(k-1)) from p(0) = 1 and p(1) = first(x). n is
    truncated to an integer, and a negative degree gives 0 (torch's rules)."""

    def fn(input, n) -> Tensor:
        x = input if isinstance(input, Tensor) else n._lift(input)
        n = n if isinstance(n, Tensor) else x._lift(n)
        x, n = x._align(n, name)
        out = x.dtype if x.dtype.is_float else dtypes.float32
        x, k = x.cast(F64), n.cast(F64).trunc()
        x = 2 * x - 1 if shifted else x
        top = int(k.max().item()) if k.numel() else 0
        prev, cur = x * 0 + 1, first(x)
        result = (k == 1).where(cur, prev)
        for j in range(1, top):
            prev, cur = cur, step(j, x, cur, prev)
            result = (k == j + 1).where(cur, result)
        return (k < 0).where(0.0, result).cast(out)

    fn.__name__ = name
    return fn


def _chebyshev(name: str, first, shifted: bool = False):
    return _polynomial(name, first, lambda j, x, p, q: 2 * x * p - q, shifted)


chebyshev_polynomial_t = _chebyshev("chebyshev_polynomial_t", lambda x: x)
chebyshev_polynomial_u = _chebyshev("chebyshev_polynomial_u", lambda x: 2 * x)
chebyshev_polynomial_v = _chebyshev("chebyshev_polynomial_v", lambda x: 2 * x - 1)
chebyshev_polynomial_w = _chebyshev("chebyshev_polynomial_w", lambda x: 2 * x + 1)
shifted_chebyshev_polynomial_t = _chebyshev("shifted_chebyshev_polynomial_t", lambda x: x, True)
shifted_chebyshev_polynomial_u = _chebyshev("shifted_chebyshev_polynomial_u", lambda x: 2 * x, True)
shifted_chebyshev_polynomial_v = _chebyshev(
    "shifted_chebyshev_polynomial_v", lambda x: 2 * x - 1, True
)
shifted_chebyshev_polynomial_w = _chebyshev(
    "shifted_chebyshev_polynomial_w", lambda x: 2 * x + 1, True
)
hermite_polynomial_h = _polynomial(
    "hermite_polynomial_h", lambda x: 2 * x, lambda j, x, p, q: 2 * x * p - 2 * j * q
)
hermite_polynomial_he = _polynomial(
    "hermite_polynomial_he", lambda x: x, lambda j, x, p, q: x * p - j * q
)
laguerre_polynomial_l = _polynomial(
    "laguerre_polynomial_l",
    lambda x: 1 - x,
    lambda j, x, p, q: ((2 * j + 1 - x) * p - j * q) / (j + 1),
)
legendre_polynomial_p = _polynomial(
    "legendre_polynomial_p", lambda x: x, lambda j, x, p, q: ((2 * j + 1) * x * p - j * q) / (j + 1)
)


# ---- the rest of torch.special -------------------------------------------------------


def ndtr(input) -> Tensor:
    x = input._float()
    return (1 + (x * (1 / math.sqrt(2))).erf()) * 0.5


def entr(input) -> Tensor:
    """-x log x, 0 at 0, -inf below."""
    x = input._float()
    return (x > 0).where(-x * x.log(), (x == 0).where(0.0, x.isnan().where(x, -math.inf)))


def xlog1py(input, other) -> Tensor:
    """x * log1p(y), 0 where x is 0 (unless y is nan)."""
    x = input if isinstance(input, Tensor) else other._lift(input)
    y = other if isinstance(other, Tensor) else x._lift(other)
    a, b = x._align(y, "xlog1py")
    a, b = a._float(), b._float()
    return ((a == 0) & ~b.isnan()).where(0.0, a * b.log1p()).cast(a.dtype)


def xlogy(input, other) -> Tensor:
    return input.xlogy(other) if isinstance(input, Tensor) else other._lift(input).xlogy(other)


expit, log1p, expm1, exp2, erf = Tensor.sigmoid, Tensor.log1p, Tensor.expm1, Tensor.exp2, Tensor.erf
gammaln, psi, multigammaln = lgamma, digamma, mvlgamma


def logit(input, eps=None) -> Tensor:
    return input.logit(eps)


def erfc(input) -> Tensor:
    return input.erfc()


def sinc(input) -> Tensor:
    return input.sinc()


def softmax(input, dim, dtype=None) -> Tensor:
    return input.softmax(dim, dtype)


def log_softmax(input, dim, dtype=None) -> Tensor:
    return input.log_softmax(dim, dtype)


def logsumexp(input, dim, keepdim=False) -> Tensor:
    return input.logsumexp(dim, keepdim)


def round(input, decimals=0) -> Tensor:  # noqa: A001
    return input.round(decimals)


# the Tensor methods torch has for these (and so limn.lgamma, ... as functions), and
# their in-place forms (lgamma_, ...)
for _fn in (lgamma, digamma, mvlgamma, erfinv, i0, igamma, igammac):
    setattr(Tensor, _fn.__name__, _fn)
Tensor.polygamma = lambda self, n: polygamma(n, self)
inplace.install(Tensor)
