"""C spellings of the composite math rows: the inline functions the c device emits.

A composite row (``sin``, ``tanh``, ``divide``, ...) stays one op-graph node down to the
loop nest, and the c device renders it as a call to ``limn_<name>_<ctype>``, defined here:

* sin, cos, tanh, expm1, log1p, float32 pow (and the primitives exp and log at float64)
  are limn's own: range reduction in integer and bit operations, polynomials, selects for
  the special values, and no call and no branch, so that a loop of them vectorizes on
  every target; and plain C operations whose rounding does not depend on the vector width
  (``-ffp-contract=off``, each fused multiply-add an explicit ``fma``), so that every
  target computes the same bits (``tests/test_c_device.py`` compiles them for each one
  and compares). float32 computes in double and rounds once;
* the rest at float64 calls the C library (glibc: within one ulp, measured in the
  precision table of ``docs/array_api.md``); logaddexp, which C lacks, is
  max + log1p(exp(-|a - b|)); at float32 they call the same double function on the
  widened argument and round once, so a result is the float nearest a double within an
  ulp: correctly rounded but in the rare case of a double landing within an ulp of a float
  halfway point;
* division, absolute value and rounding are C's own operators and builtins (IEEE, exact
  or correctly rounded, and vectorized).

``definitions(names)`` returns the source of the named functions and of every helper
they use, helpers first, so a kernel carries only what it calls.
"""

from __future__ import annotations

# name: (helpers it uses, C source)
_SNIPPETS: dict[str, tuple[tuple[str, ...], str]] = {}


def _def(name: str, t: str, args: str, body: str, deps: tuple[str, ...] = ()) -> None:
    """``limn_<name>_<t>(args)`` returning ``body``, an expression of the arguments."""
    _SNIPPETS[f"{name}_{t}"] = (deps, f"static inline {t} limn_{name}_{t}({args}) {{ {body} }}")


for _fn in """tan asin acos atan sinh cosh asinh acosh atanh exp2 log2 log10""".split():
    _def(_fn, "double", "double x", f"return {_fn}(x);")
    _def(_fn, "float", "float x", f"return (float){_fn}((double)x);")
for _fn in ("pow", "hypot", "atan2", "fmod"):
    _def(_fn, "double", "double a, double b", f"return {_fn}(a, b);")
    if _fn != "pow":
        _def(_fn, "float", "float a, float b", f"return (float){_fn}((double)a, (double)b);")
_def(
    "logaddexp",
    "double",
    "double a, double b",
    "double m = a > b ? a : b, r = m + log1p(exp(LIMN_NEG(fabs(a - b))));\n"
    "  r = (a == b && fabs(a) == INFINITY) ? a : r;  /* equal infinities give themselves */\n"
    "  return (a != a || b != b) ? a + b : r;",
)
_def("logaddexp", "float", "float a, float b", "return (float)limn_logaddexp_double(a, b);",
     ("logaddexp_double",))  # fmt: skip
for _t, _s in (("float", "f"), ("double", "")):
    _def("abs", _t, f"{_t} x", f"return fabs{_s}(x);")
    _def("div", _t, f"{_t} a, {_t} b", "return a / b;")
    for _name, _fn in {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "rint"}.items():
        _def(_name, _t, f"{_t} x", f"return __builtin_{_fn}{_s}(x);")


# The bits of 2/pi after two zero words, so that a window may start before the point: a
# double's reduction reads 192 bits from bit e - 53 on (e its exponent, up to 1023), so
# 1184 bits (tests/test_c_device.py checks them against mpmath).
_SNIPPETS["2opi"] = (
    (),
    r"""static const uint32_t limn_2opi[39] = {
  0x00000000u, 0x00000000u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u,
  0xdb629599u, 0x3c439041u, 0xfe5163abu, 0xdebbc561u, 0xb7246e3au, 0x424dd2e0u,
  0x06492eeau, 0x09d1921cu, 0xfe1deb1cu, 0xb129a73eu, 0xe88235f5u, 0x2ebb4484u,
  0xe99c7026u, 0xb45f7e41u, 0x3991d639u, 0x835339f4u, 0x9c845f8bu, 0xbdf9283bu,
  0x1ff897ffu, 0xde05980fu, 0xef2f118bu, 0x5a0a6d1fu, 0x6d367ecfu, 0x27cb09b7u,
  0x4f463f66u, 0x9e5fea2du, 0x7527bac7u, 0xebe5f17bu, 0x3d0739f7u, 0x8a5292eau,
  0x6bfb5fb1u, 0x1f8d5d08u, 0x56033046u,
};
/* the 32 bits of 2/pi from bit 32 j + s of limn_2opi on, s in [0, 32) */
static inline uint64_t limn_2opi_at(int32_t j, int32_t s) {
  uint64_t pair = ((uint64_t)limn_2opi[j] << 32) | limn_2opi[j + 1];
  return (uint32_t)(pair >> (32 - s));
}
/* a double of an integer below 2**52, by its bits (AVX2 cannot convert 64-bit integers) */
static inline double limn_u52(uint64_t c) {
  uint64_t b = c | 0x4330000000000000ull;
  double d; memcpy(&d, &b, 8); return d - 0x1p52;
}""",
)
# Argument reduction for sin and cos, branch-free so that a loop of them vectorizes, and
# exact in integers so that every target gets the same bits (Payne and Hanek): |x| * 2/pi
# modulo 4 is the low bits of the integer significand times a window of 2/pi's bits that
# starts where the bits before it only add multiples of 4. Its quadrant and its fraction,
# centred on 0 and times pi/2, are returned as a double-double hi + lo; |x| < pi/4 is itself.
_SNIPPETS["rem_pio2_double"] = (
    ("2opi",),
    r"""static inline double limn_rem_pio2(double ax, double *lo, int32_t *quadrant) {
  uint64_t u; memcpy(&u, &ax, 8);
  int32_t b = (int32_t)(u >> 52);
  b = b < 1022 ? 1022 : b;
  b = b > 2046 ? 2046 : b;
  int32_t g = b - 1013, j = g >> 5, s = g & 31;  /* bit e - 53 of 2/pi, after the zeros */
  uint64_t m = (u & 0xfffffffffffffull) | 0x10000000000000ull;
  uint64_t m0 = m & 0xffffffffu, m1 = m >> 32, lo32 = 0xffffffffu;
  uint64_t w5 = limn_2opi_at(j, s), w4 = limn_2opi_at(j + 1, s), w3 = limn_2opi_at(j + 2, s);
  uint64_t w2 = limn_2opi_at(j + 3, s), w1 = limn_2opi_at(j + 4, s), w0 = limn_2opi_at(j + 5, s);
  uint64_t a0 = w0 * m0, a1 = w1 * m0, a2 = w2 * m0, a3 = w3 * m0, a4 = w4 * m0, a5 = w5 * m0;
  uint64_t b0 = w0 * m1, b1 = w1 * m1, b2 = w2 * m1, b3 = w3 * m1, b4 = w4 * m1;
  /* the low 192 bits of m * window, 32 at a time with their carries; the top two are the
     quadrant, the rest the fraction */
  uint64_t t = (a0 >> 32) + (a1 & lo32) + (b0 & lo32);
  t = (t >> 32) + (a1 >> 32) + (a2 & lo32) + (b0 >> 32) + (b1 & lo32);
  uint64_t r2 = t & lo32;
  t = (t >> 32) + (a2 >> 32) + (a3 & lo32) + (b1 >> 32) + (b2 & lo32);
  uint64_t r3 = t & lo32;
  t = (t >> 32) + (a3 >> 32) + (a4 & lo32) + (b2 >> 32) + (b3 & lo32);
  uint64_t r4 = t & lo32;
  t = (t >> 32) + (a4 >> 32) + (a5 & lo32) + (b3 >> 32) + (b4 & lo32);
  uint64_t hi = ((t & lo32) << 32) | r4, low = (r3 << 32) | r2;
  uint64_t c0 = (hi >> 20) & 0x3ffffffffffull;
  uint64_t c1 = ((hi & 0xfffffu) << 22) | (low >> 42), c2 = low & 0x3ffffffffffull;
  int32_t up = (int32_t)(c0 >> 41);  /* the fraction is past 1/2: take it from the next */
  double f0 = limn_u52(c0) * 0x1p-42 - (double)up;
  double f1 = limn_u52(c1) * 0x1p-84, f2 = limn_u52(c2) * 0x1p-126;
  double fh = f0 + f1, fl = ((f0 - fh) + f1) + f2;
  double rh = fh * 0x1.921fb54442d18p0;
  double rl = fma(fh, 0x1.921fb54442d18p0, -rh);
  rl += fh * 0x1.1a62633145c07p-54 + fl * 0x1.921fb54442d18p0;
  double yh = rh + rl, yl = rl - (yh - rh);
  int32_t small = ax < 0x1.921fb54442d18p-1;
  *quadrant = small ? 0 : (int32_t)(hi >> 62) + up;
  *lo = small ? 0.0 : yl;
  return small ? ax : yh;
}""",
)
# sin and cos on [-pi/4, pi/4] as a double-double x + y: FreeBSD's __kernel_sin and
# __kernel_cos (Sun's fdlibm), each within an ulp.
_SNIPPETS["sincos_kernels_double"] = (
    (),
    r"""static inline double limn_ksin(double x, double y) {
  const double s1 = -1.66666666666666324348e-01, s2 = 8.33333333332248946124e-03;
  const double s3 = -1.98412698298579493134e-04, s4 = 2.75573137070700676789e-06;
  const double s5 = -2.50507602534068634195e-08, s6 = 1.58969099521155010221e-10;
  double z = x * x, v = z * x, r = s2 + z * (s3 + z * (s4 + z * (s5 + z * s6)));
  return x - ((z * (0.5 * y - v * r) - y) - v * s1);
}
static inline double limn_kcos(double x, double y) {
  const double c1 = 4.16666666666666019037e-02, c2 = -1.38888888888741095749e-03;
  const double c3 = 2.48015872894767294178e-05, c4 = -2.75573143513906633035e-07;
  const double c5 = 2.08757232129817482790e-09, c6 = -1.13596475577881948265e-11;
  double z = x * x, w = z * z;
  double r = z * (c1 + z * (c2 + z * c3)) + w * w * (c4 + z * (c5 + z * c6));
  double hz = 0.5 * z;
  w = 1.0 - hz;
  return w + (((1.0 - w) - hz) + (z * r - x * y));
}
/* sin(x + q pi/2) from the reduced x + y: the quadrant picks the kernel and the sign */
static inline double limn_sincos_quadrant(double x, double y, int32_t q) {
  double s = limn_ksin(x, y), c = limn_kcos(x, y), r = (q & 1) ? c : s;
  return (q & 2) ? -r : r;
}""",
)
# float32: the same reduction on the 24-bit significand (96 bits of 2/pi hold the fraction
# to 2**-62, past the deepest cancellation of a float), then FreeBSD's __kernel_sindf and
# __kernel_cosdf, double polynomials within 2**-34 for a float result rounded once.
_SNIPPETS["rem_pio2_float"] = (
    ("2opi",),
    r"""/* word j + k of limn_2opi for j in [1, 5] by masks, which vectorize where a gather
   would be scalar loads (and a chain of selects becomes a switch) */
static inline uint32_t limn_2opi_sel(int32_t j, int k) {
  uint32_t w = 0;
  for (int32_t i = 1; i <= 5; i++) w |= limn_2opi[i + k] & (0u - (uint32_t)(j == i));
  return w;
}
static inline uint32_t limn_2opi_funnel(uint32_t hi, uint32_t lo, uint32_t s) {
  return (hi << s) | ((lo >> 1) >> (31 - s));
}
static inline double limn_rem_pio2f(float ax, int32_t *quadrant) {
  uint32_t u; memcpy(&u, &ax, 4);
  int32_t b = (int32_t)(u >> 23);
  b = b < 126 ? 126 : b;
  b = b > 254 ? 254 : b;
  int32_t g = b - 88, j = g >> 5;  /* bit e - 24 of 2/pi, after the zeros */
  uint32_t s = (uint32_t)g & 31u, m = (u & 0x7fffffu) | 0x800000u;
  uint32_t t0 = limn_2opi_sel(j, 0), t1 = limn_2opi_sel(j, 1), t2 = limn_2opi_sel(j, 2);
  uint32_t t3 = limn_2opi_sel(j, 3);
  uint64_t a2 = (uint64_t)limn_2opi_funnel(t0, t1, s) * m;
  uint64_t a1 = (uint64_t)limn_2opi_funnel(t1, t2, s) * m;
  uint64_t a0 = (uint64_t)limn_2opi_funnel(t2, t3, s) * m;
  uint64_t t = (a0 >> 32) + (a1 & 0xffffffffu);
  uint64_t r1 = t & 0xffffffffu;
  t = (t >> 32) + (a1 >> 32) + a2;
  uint64_t f = ((t & 0xffffffffu) << 32) | r1;
  uint64_t c0 = (f >> 20) & 0x3ffffffffffull;
  int32_t up = (int32_t)(c0 >> 41);
  double d = (limn_u52(c0) * 0x1p-42 - (double)up) + limn_u52(f & 0xfffffu) * 0x1p-62;
  int32_t small = ax < 0x1.921fb6p-1f;
  *quadrant = small ? 0 : (int32_t)(f >> 62) + up;
  return small ? (double)ax : d * 0x1.921fb54442d18p0;
}
static inline float limn_sincosf_quadrant(double x, int32_t q) {
  double z = x * x, w = z * z;
  double s = (x + z * x * (-0x15555554cbac77.0p-55 + z * 0x111110896efbb2.0p-59))
    + z * x * w * (-0x1a00f9e2cae774.0p-65 + z * 0x16cd878c3b46a7.0p-71);
  double c = ((1.0 + z * -0x1ffffffd0c5e81.0p-54) + w * 0x155553e1053a42.0p-57)
    + (w * z) * (-0x16c087e80f1e27.0p-62 + z * 0x199342e0ee5069.0p-68);
  double r = (q & 1) ? c : s;
  return (float)((q & 2) ? -r : r);
}""",
)
# sin and cos of either type: sin is odd, so the sign of x goes on after; inf gives nan
_SINCOS = r"""static inline {t} limn_sincos_{s}({t} x, int32_t is_cos) {{
  {u} bits; memcpy(&bits, &x, {n});
  {u} sign = bits & {sign};
  bits ^= sign;
  {t} ax; memcpy(&ax, &bits, {n});
  int32_t q;
  double {reduce};
  {t} y = {kernel};
  {u} yb; memcpy(&yb, &y, {n}); yb ^= is_cos ? 0 : sign; memcpy(&y, &yb, {n});
  y = ax == INFINITY ? NAN : y;
  return x != x ? x : y;
}}"""
_SNIPPETS["sincos_d"] = (
    ("rem_pio2_double", "sincos_kernels_double"),
    _SINCOS.format(t="double", s="d", u="uint64_t", n=8, sign="0x8000000000000000ull",
                   reduce="lo, r = limn_rem_pio2(ax, &lo, &q)",
                   kernel="limn_sincos_quadrant(r, lo, q + is_cos)"),
)  # fmt: skip
_SNIPPETS["sincos_f"] = (
    ("rem_pio2_float",),
    _SINCOS.format(t="float", s="f", u="uint32_t", n=4, sign="0x80000000u",
                   reduce="r = limn_rem_pio2f(ax, &q)",
                   kernel="limn_sincosf_quadrant(r, q + is_cos)"),
)  # fmt: skip
for _t, _s in (("double", "d"), ("float", "f")):
    _def("sin", _t, f"{_t} x", f"return limn_sincos_{_s}(x, 0);", (f"sincos_{_s}",))
    _def("cos", _t, f"{_t} x", f"return limn_sincos_{_s}(x, 1);", (f"sincos_{_s}",))

# exp, expm1 and tanh in double, branch-free: x = k ln2 + r with |r| <= ln2/2, r held as a
# double-double (k ln2's high part leaves r exact, its low part is the tail), expm1(r) =
# r + tail with the tail a Taylor polynomial of degree 13 (under 2**-57 of the result past
# it), then exp(x) = 2**k (1 + r + tail), the 1 + r exactly, and
# expm1(x) = 2**k expm1(r) + (2**k - 1). k comes from the bits of x/ln2 + 1.5 * 2**52,
# whose rounding is rint's, as C's conversion would not vectorize on AVX2.
_SNIPPETS["expm1_reduced"] = (
    (),
    r"""static inline double limn_exp_r(double x, int32_t *k, double *tail) {
  double t = x * 0x1.71547652b82fep0 + 0x1.8p52, kd = t - 0x1.8p52;
  uint64_t tb; memcpy(&tb, &t, 8);
  *k = (int32_t)(uint32_t)tb;
  double r1 = fma(kd, -0x1.62e42fefa39efp-1, x), c = kd * -0x1.abc9e3b39803fp-56;
  double r = r1 + c, rl = (r1 - r) + c;
  double p = 0x1.6124613a86d09p-33;  /* 1/13! */
  p = fma(p, r, 0x1.1eed8eff8d898p-29); p = fma(p, r, 0x1.ae64567f544e4p-26);
  p = fma(p, r, 0x1.27e4fb7789f5cp-22); p = fma(p, r, 0x1.71de3a556c734p-19);
  p = fma(p, r, 0x1.a01a01a01a01ap-16); p = fma(p, r, 0x1.a01a01a01a01ap-13);
  p = fma(p, r, 0x1.6c16c16c16c17p-10); p = fma(p, r, 0x1.1111111111111p-7);
  p = fma(p, r, 0x1.5555555555555p-5); p = fma(p, r, 0x1.5555555555555p-3);
  p = fma(p, r, 0.5);
  *tail = fma(r * r, p, rl * (1.0 + r));
  return r;
}
/* 2**k for k in [-1022, 1023], by its bits */
static inline double limn_pow2i(int32_t k) {
  uint64_t b = (uint64_t)(k + 1023) << 52; double d; memcpy(&d, &b, 8); return d;
}
static inline double limn_expm1_d(double x) {
  double xc = x > 710.0 ? 710.0 : x;
  xc = x < -40.0 ? -40.0 : xc;  /* expm1 is -1 there, and 2**k stays normal */
  int32_t k;
  double tail, r = limn_exp_r(xc, &k, &tail);
  double e = r + tail, s = limn_pow2i(k - 1);  /* halved: k can be 1024 */
  double y = 2.0 * fma(s, e, s - 0.5);
  y = x == 0.0 ? x : y;  /* -0 */
  return x != x ? x : y;
}
/* tanh(|x|) = e / (e + 2), e = expm1(2|x|), with the sign of x; past 22 it rounds to 1 */
static inline double limn_tanh_d(double x) {
  uint64_t bits; memcpy(&bits, &x, 8);
  uint64_t sign = bits & 0x8000000000000000ull;
  bits ^= sign;
  double ax; memcpy(&ax, &bits, 8);
  double e = limn_expm1_d(2.0 * (ax > 22.0 ? 22.0 : ax)), y = e / (e + 2.0);
  uint64_t yb; memcpy(&yb, &y, 8); yb ^= sign; memcpy(&y, &yb, 8);
  return x != x ? x : y;
}""",
)
_def(
    "exp",
    "double",
    "double x",
    "double xc = x > 710.0 ? 710.0 : x;\n"
    "  xc = x < -746.0 ? -746.0 : xc;\n"
    "  int32_t k;\n"
    "  double tail, r = limn_exp_r(xc, &k, &tail), h = 1.0 + r;\n"
    "  double y = h + (((1.0 - h) + r) + tail);\n"
    "  int32_t k1 = k / 2;  /* two factors, so that 2**k may be subnormal or 2**1024 */\n"
    "  y = y * limn_pow2i(k1) * limn_pow2i(k - k1);\n"
    "  return x != x ? x : y;",
    ("expm1_reduced",),
)
for _name in ("expm1", "tanh"):
    _def(_name, "double", "double x", f"return limn_{_name}_d(x);", ("expm1_reduced",))

# log and log1p in double, branch-free: y = 2**k m with m in [sqrt(1/2), sqrt(2)) from the
# bits (a subnormal scaled up first), f = m - 1, s = f / (2 + f) and
# log1p(f) = f - (f*f/2 - s (f*f/2 + R(s*s))): fdlibm's e_log.c, whose error of s only
# touches the small correction terms. log1p(x) takes y = 1 + x and adds the rounding error
# of that sum, c / y with c = (1 + x) - y exactly.
_SNIPPETS["log_reduced"] = (
    (),
    r"""static inline double limn_log_kernel(double y, double c) {
  uint64_t u; memcpy(&u, &y, 8);
  int32_t sub = u < 0x0010000000000000ull;
  double ys = sub ? y * 0x1p54 : y;
  memcpy(&u, &ys, 8);
  int32_t k = (int32_t)((u >> 52) & 0x7ff) - 1023 - (sub ? 54 : 0);
  uint64_t mb = (u & 0xfffffffffffffull) | 0x3ff0000000000000ull;
  double m; memcpy(&m, &mb, 8);
  int32_t big = m > 0x1.6a09e667f3bcdp0;
  m = big ? m * 0.5 : m;
  k += big;
  const double g1 = 6.666666666666735130e-01, g2 = 3.999999999940941908e-01;
  const double g3 = 2.857142874366239149e-01, g4 = 2.222219843214978396e-01;
  const double g5 = 1.818357216161805012e-01, g6 = 1.531383769920937332e-01;
  const double g7 = 1.479819860511658591e-01;
  double f = m - 1.0, s = f / (2.0 + f), z = s * s, w = z * z, dk = (double)k;
  double r = w * (g2 + w * (g4 + w * g6)) + z * (g1 + w * (g3 + w * (g5 + w * g7)));
  double hfsq = 0.5 * f * f;
  double lo = s * (hfsq + r) + (dk * 1.90821492927058770002e-10 + c);
  return dk * 6.93147180369123816490e-01 - ((hfsq - lo) - f);
}
static inline double limn_log_d(double x) {
  double y = limn_log_kernel(x, 0.0);
  y = x == 0.0 ? -INFINITY : y;
  y = x < 0.0 ? NAN : y;
  y = x == INFINITY ? INFINITY : y;
  return x != x ? x : y;
}
static inline double limn_log1p_d(double x) {
  double u = 1.0 + x;
  double c = (u > 2.0 ? 1.0 - (u - x) : x - (u - 1.0)) / u;
  c = u > 0x1p53 ? 0.0 : c;
  double y = limn_log_kernel(u, c);
  y = x == -1.0 ? -INFINITY : y;
  y = x < -1.0 ? NAN : y;
  y = x == INFINITY ? INFINITY : y;
  y = x == 0.0 ? x : y;  /* -0 */
  return x != x ? x : y;
}""",
)
_def("log", "double", "double x", "return limn_log_d(x);", ("log_reduced",))
_def("log1p", "double", "double x", "return limn_log1p_d(x);", ("log_reduced",))

# float32 expm1, tanh, log1p and pow compute in double to a float's need and round once:
# exp(x) = 2**k (1 + p), |r| <= ln2/2 with a one-part ln2 (off by under 2**-47 of r) and
# p = expm1(r) to degree 9 (Taylor, under 2**-34 of it); log1p(f) = f - f*f/2 + f**3 Q(f)
# on f in [sqrt(1/2) - 1, sqrt(2) - 1] with Q of degree 12 fitted at Chebyshev nodes
# (under 2**-38 of it), no division. So a result is within 2**-30 of an ulp of the exact
# value before its one rounding (tests/test_precision.py: 0.50 ulps measured). tanh's
# e / (e + 2) divides in float32 (16 lanes, where a double division is the cost of the
# whole function) and a Newton step in double makes the quotient good to 2**-46.
_SNIPPETS["float_kernels"] = (
    (),
    r"""static inline double limn_expf_r(double x, double *s) {
  double t = x * 0x1.71547652b82fep0 + 0x1.8p52, k = t - 0x1.8p52;
  uint64_t tb; memcpy(&tb, &t, 8);
  uint64_t sb = (uint64_t)((int64_t)(int32_t)(uint32_t)tb + 1023) << 52; memcpy(s, &sb, 8);
  double r = fma(k, -0x1.62e42fefa39efp-1, x), p = 0x1.71de3a556c734p-19;  /* 1/9! */
  p = fma(p, r, 0x1.a01a01a01a01ap-16); p = fma(p, r, 0x1.a01a01a01a01ap-13);
  p = fma(p, r, 0x1.6c16c16c16c17p-10); p = fma(p, r, 0x1.1111111111111p-7);
  p = fma(p, r, 0x1.5555555555555p-5); p = fma(p, r, 0x1.5555555555555p-3);
  p = fma(p, r, 0.5);
  return fma(r * r, p, r);
}
static inline double limn_expm1f_d(double x) {  /* x in [-30, 100] */
  double s, p = limn_expf_r(x, &s);
  return fma(s, p, s - 1.0);
}
/* log(x) for x > 0 a float (so a normal double), or log1p(x) from 1 + x, exact past the
   range where x itself is f */
static inline double limn_logf_d(double u, double x) {
  uint64_t b; memcpy(&b, &u, 8);
  int32_t k = (int32_t)(b >> 52) - 1023;
  uint64_t mb = (b & 0xfffffffffffffull) | 0x3ff0000000000000ull;
  double m; memcpy(&m, &mb, 8);
  int32_t big = m > 0x1.6a09e667f3bcdp0;
  m = big ? m * 0.5 : m;
  k += big;
  double f = k == 0 ? x : m - 1.0, q = 0x1.7d527a2272befp-5;
  q = fma(q, f, -0x1.5d3e46773d98cp-4); q = fma(q, f, 0x1.5cbaee7d4f349p-4);
  q = fma(q, f, -0x1.5277e6af41c09p-4); q = fma(q, f, 0x1.7090bb6b74921p-4);
  q = fma(q, f, -0x1.99849b8922484p-4); q = fma(q, f, 0x1.c74ce7d498db9p-4);
  q = fma(q, f, -0x1.00013ae210dccp-3); q = fma(q, f, 0x1.2491bd0ca7896p-3);
  q = fma(q, f, -0x1.55554e8be9634p-3); q = fma(q, f, 0x1.99999ac7f09a6p-3);
  q = fma(q, f, -0x1.0000000451e24p-2); q = fma(q, f, 0x1.555555551ef50p-2);
  return fma((double)k, 0x1.62e42fefa39efp-1, fma(f * f, fma(f, q, -0.5), f));
}
/* float32 pow as exp(b log|a|) (the exponent good to 2**-31), then C's special cases */
static inline float limn_expm1_float(float x) {
  double xc = x > 100.0f ? 100.0 : x, y = limn_expm1f_d(x < -30.0f ? -30.0 : xc);
  return x == 0.0f || x != x ? x : (float)y;
}
static inline float limn_tanh_float(float x) {
  double ax = fabs((double)x), e = limn_expm1f_d(2.0 * (ax > 10.0 ? 10.0 : ax));
  double d = e + 2.0, r = (double)(1.0f / (float)d);
  float y = (float)(e * fma(r, fma(-d, r, 1.0), r));
  return x == 0.0f || x != x ? x : x < 0.0f ? -y : y;
}
static inline float limn_log1p_float(float x) {
  float y = (float)limn_logf_d(1.0 + (double)x, x);
  y = x == -1.0f ? -INFINITY : x < -1.0f ? NAN : x == INFINITY ? INFINITY : y;
  return x == 0.0f || x != x ? x : y;
}
static inline float limn_pow_float(float a, float b) {
  double ax = fabs((double)a), z = b * limn_logf_d(ax, ax - 1.0), s;
  double p = limn_expf_r(z > 200.0 ? 200.0 : z < -200.0 ? -200.0 : z, &s);
  float r = (float)fma(s, p, s), fa = fabsf(a);
  r = fa == 0.0f ? (b < 0.0f ? INFINITY : 0.0f) : fa == INFINITY ? (b < 0.0f ? 0.0f : INFINITY) : r;
  int32_t whole = __builtin_rintf(b) == b, odd = whole && __builtin_rintf(b * 0.5f) != b * 0.5f;
  uint32_t ab; memcpy(&ab, &a, 4);
  r = fa == 1.0f ? 1.0f : r;  /* also (-1) ** +-inf */
  r = (ab >> 31) && odd ? -r : r;
  r = (a < 0.0f && a > -INFINITY && !whole) || a != a || b != b ? NAN : r;
  return a == 1.0f || b == 0.0f ? 1.0f : r;
}""",
)
_SNIPPETS.update(
    {f"{n}_float": (("float_kernels",), "") for n in ("expm1", "tanh", "log1p", "pow")}
)


def available() -> frozenset[str]:
    """The ``<name>_<ctype>`` pairs this file defines as functions."""
    return frozenset(_SNIPPETS)


def definitions(names) -> str:
    """The C source of the named functions and their helpers, each once, helpers first."""
    out: list[str] = []
    done: set[str] = set()

    def visit(n: str) -> None:
        if n in done:
            return
        done.add(n)
        deps, src = _SNIPPETS[n]
        for d in deps:
            visit(d)
        out.append(src)

    for n in sorted(names):
        visit(n)
    return "\n".join(out)
