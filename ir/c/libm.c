/* The composite math rows in C: the inline functions the c device emits (ir/c/libm.py).
   Each piece starts with a line  @limn <name>: <helpers it uses>  and runs to the next;
   ir/c/libm.py reads them and emits a piece, and its helpers, only where a kernel calls it. */

// @limn bits_d:
static inline double limn_dfrom(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static inline uint64_t limn_dbits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
/* fmin and fmax without their nan rule, which does not vectorize: a nan gives b */
static inline double limn_dmin(double a, double b) { return a < b ? a : b; }
static inline double limn_dmax(double a, double b) { return a > b ? a : b; }

// @limn bits_f:
static inline float limn_ffrom(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t limn_fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// @limn exp_d: bits_d
/* The double cores below serve the float32 functions only (float64 calls the C library),
   so their series stop near 1e-12 relative: far below float32's half-ulp of 3e-8, so a
   float32 result is still rounded once from a value good to ~2**-40. */

/* e**x for |x| <= 708 (callers clamp): 2**k * e**r, |r| <= ln2/2, Taylor to r**10 */
static inline double limn_exp_d(double x) {
  double k = rint(x * 1.4426950408889634);
  double r = fma(k, -0x1.62e42fee00000p-1, x);
  r = fma(k, -0x1.a39ef35793c76p-33, r);
  double p = 1.0 / 3628800.0;
  p = fma(p, r, 1.0 / 362880.0);
  p = fma(p, r, 1.0 / 40320.0); p = fma(p, r, 1.0 / 5040.0); p = fma(p, r, 1.0 / 720.0);
  p = fma(p, r, 1.0 / 120.0); p = fma(p, r, 1.0 / 24.0); p = fma(p, r, 1.0 / 6.0);
  p = fma(p, r, 0.5); p = fma(p, r, 1.0); p = fma(p, r, 1.0);
  return p * limn_dfrom((uint64_t)((int64_t)k + 1023) << 52);
}

// @limn expm1_d: exp_d
/* e**x - 1 for |x| <= 708: Taylor to x**11 below |x| = 0.35, where e**x - 1 would cancel */
static inline double limn_expm1_d(double x) {
  double p = 1.0 / 39916800.0;
  p = fma(p, x, 1.0 / 3628800.0); p = fma(p, x, 1.0 / 362880.0);
  p = fma(p, x, 1.0 / 40320.0); p = fma(p, x, 1.0 / 5040.0); p = fma(p, x, 1.0 / 720.0);
  p = fma(p, x, 1.0 / 120.0); p = fma(p, x, 1.0 / 24.0); p = fma(p, x, 1.0 / 6.0);
  p = fma(p, x, 0.5);
  double near = fma(p * x, x, x);
  return fabs(x) < 0.35 ? near : limn_exp_d(x) - 1.0;
}

// @limn log_d: bits_d
/* log(x) = e ln2 + log(m) for positive finite normal x, m in [sqrt(1/2), sqrt(2)):
   log(m) = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172, the series to s**15.
   Returns log(m) and sets *e; callers add e * ln2 (or e itself, for log2). */
static inline double limn_logm_d(double x, double *e) {
  uint64_t u = limn_dbits(x);
  int64_t ex = (int64_t)(u >> 52) - 1023;
  double m = limn_dfrom((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
  int64_t big = m > 1.4142135623730951;
  m = big ? m * 0.5 : m;
  *e = (double)(ex + big);
  double s = (m - 1.0) / (m + 1.0), z = s * s;
  double p = 2.0 / 15;
  p = fma(p, z, 2.0 / 13); p = fma(p, z, 2.0 / 11); p = fma(p, z, 2.0 / 9);
  p = fma(p, z, 2.0 / 7); p = fma(p, z, 2.0 / 5); p = fma(p, z, 2.0 / 3);
  return fma(s * z, p, 2.0 * s);
}
static inline double limn_log_d(double x) {
  double e, lm = limn_logm_d(x, &e);
  return fma(e, 0x1.62e42fefa39efp-1, lm);
}

// @limn log1p_d: log_d
/* log(1 + x) for x > -1 finite, by Kahan's trick: log(u) * x / (u - 1), u = 1 + x */
static inline double limn_log1p_d(double x) {
  double u = 1.0 + x;
  double um1 = u - 1.0;
  double r = limn_log_d(u) * (x / (um1 == 0.0 ? 1.0 : um1));
  return um1 == 0.0 ? x : r;
}

// @limn atan_d: bits_d
/* atan(t) for 0 <= t <= 1: past tan(pi/8), pi/4 + atan((t-1)/(t+1)); |u| <= 0.415,
   the series to u**23 */
static inline double limn_atan01_d(double t) {
  int64_t mid = t > 0.41421356237309503;
  double u = mid ? (t - 1.0) / (t + 1.0) : t, z = u * u;
  double p = -1.0 / 23;
  p = fma(p, z, 1.0 / 21); p = fma(p, z, -1.0 / 19); p = fma(p, z, 1.0 / 17);
  p = fma(p, z, -1.0 / 15); p = fma(p, z, 1.0 / 13); p = fma(p, z, -1.0 / 11);
  p = fma(p, z, 1.0 / 9); p = fma(p, z, -1.0 / 7); p = fma(p, z, 1.0 / 5);
  p = fma(p, z, -1.0 / 3);
  double a = fma(u * z, p, u);
  return mid ? 0.78539816339744831 + a : a;
}
/* the angle of (x, y) for doubles: atan of the smaller over the larger, then the quadrant */
static inline double limn_atan2_d(double y, double x) {
  double ax = fabs(x), ay = fabs(y);
  int64_t swap = ay > ax;
  double num = swap ? ax : ay, den = swap ? ay : ax;
  int64_t both_inf = (ax == INFINITY) & (ay == INFINITY);
  double a = limn_atan01_d(both_inf ? 1.0 : (den == 0.0 ? 0.0 : num / den));
  a = swap ? 1.5707963267948966 - a : a;
  a = ay == 0.0 ? 0.0 : a;
  a = (limn_dbits(x) >> 63) ? 3.1415926535897931 - a : a;
  a = copysign(a, y);
  return (x != x || y != y) ? x + y : a;
}

// @limn rem_pio2_f: bits_d
/* bits 32k - 31 .. 32k + 32 of 2/pi (bit 1 is the first past the point), k in 0..6,
   chosen by masks: a table lookup would be a gather, which gcc avoids on many cores,
   and a chain of selects becomes a switch */
static inline uint64_t limn_2opi_pair(int32_t k) {
  uint64_t p = 0x00000000a2f9836eull;
  p ^= 0xa2f9836eecbd9647ull & (0 - (uint64_t)(k >= 1));
  p ^= 0xecbd9647b26342f8ull & (0 - (uint64_t)(k >= 2));
  p ^= 0xb26342f809138a11ull & (0 - (uint64_t)(k >= 3));
  p ^= 0x09138a112e564859ull & (0 - (uint64_t)(k >= 4));
  p ^= 0x2e564859e72105d8ull & (0 - (uint64_t)(k >= 5));
  p ^= 0xe72105d8c212f3eaull & (0 - (uint64_t)(k >= 6));
  return p;
}
/* |x| = n pi/2 + r, |r| <= pi/4 (a hair more at the rounding edge), for finite float |x|:
   |x| = M 2**E with a 24-bit M; the 96 bits of 2/pi from bit E - 1 on, times M, give
   |x| 2/pi mod 4 as a 64-bit fixed-point number with 62 fractional bits. */
static inline int64_t limn_rem_pio2_f(float ax, double *r) {
  uint32_t u; memcpy(&u, &ax, 4);
  int32_t be = (int32_t)(u >> 23);
  uint64_t m = (uint64_t)((u & 0x7fffffu) | (be ? 0x800000u : 0u));
  int32_t a = (be ? be : 1) - 151 + 31;
  a = a < 0 ? 0 : a;
  int32_t q = a >> 5, s = a & 31;
  uint64_t w2 = (limn_2opi_pair(q) >> (32 - s)) & 0xffffffffu;
  uint64_t w1 = (limn_2opi_pair(q + 1) >> (32 - s)) & 0xffffffffu;
  uint64_t w0 = (limn_2opi_pair(q + 2) >> (32 - s)) & 0xffffffffu;
  uint64_t y = ((m * w2) << 32) + m * w1 + ((m * w0) >> 32);
  uint64_t n = (y + (1ull << 61)) >> 62;
  int64_t f = (int64_t)(y - (n << 62));
  double rr = (double)f * 0x1.921fb54442d18p-62;
  int64_t small = ax < 0.78539816f;
  *r = small ? (double)ax : rr;
  return small ? 0 : (int64_t)(n & 3);
}
// @limn sincos_d:
/* sin and cos of r in [-pi/4 - eps, pi/4 + eps]: Taylor to r**13 and r**14 */
static inline double limn_sin_kernel_d(double r) {
  double z = r * r, p = 1.0 / 6227020800.0;
  p = fma(p, z, -1.0 / 39916800.0);
  p = fma(p, z, 1.0 / 362880.0); p = fma(p, z, -1.0 / 5040.0); p = fma(p, z, 1.0 / 120.0);
  p = fma(p, z, -1.0 / 6.0);
  return fma(r * z, p, r);
}
static inline double limn_cos_kernel_d(double r) {
  double z = r * r, p = -1.0 / 87178291200.0;
  p = fma(p, z, 1.0 / 479001600.0);
  p = fma(p, z, -1.0 / 3628800.0); p = fma(p, z, 1.0 / 40320.0); p = fma(p, z, -1.0 / 720.0);
  p = fma(p, z, 1.0 / 24.0); p = fma(p, z, -0.5);
  return fma(z, p, 1.0);
}
/* sin, cos and tan of x from its reduction |x| = n pi/2 + r */
static inline float limn_sin_of(float x, int64_t n, double r) {
  double s = limn_sin_kernel_d(r), c = limn_cos_kernel_d(r);
  double v = (n & 1) ? c : s;
  v = (n & 2) ? LIMN_NEG(v) : v;
  float y = (float)v;
  y = signbit(x) ? LIMN_NEG(y) : y;
  return (x - x != 0.0f) ? NAN : (fabsf(x) < 0x1p-12f ? x : y);
}
static inline float limn_cos_of(float x, int64_t n, double r) {
  double s = limn_sin_kernel_d(r), c = limn_cos_kernel_d(r);
  double v = (n & 1) ? LIMN_NEG(s) : c;
  v = (n & 2) ? LIMN_NEG(v) : v;
  return (x - x != 0.0f) ? NAN : (float)v;
}
static inline float limn_tan_of(float x, int64_t n, double r) {
  double s = limn_sin_kernel_d(r), c = limn_cos_kernel_d(r);
  double v = (n & 1) ? LIMN_NEG(c) / s : s / c;
  float y = (float)v;
  y = signbit(x) ? LIMN_NEG(y) : y;
  return (x - x != 0.0f) ? NAN : (fabsf(x) < 0x1p-12f ? x : y);
}

// @limn sin_float: rem_pio2_f sincos_d
static inline float limn_sin_float(float x) {
  double r; int64_t n = limn_rem_pio2_f(fabsf(x), &r);
  return limn_sin_of(x, n, r);
}

// @limn cos_float: rem_pio2_f sincos_d
static inline float limn_cos_float(float x) {
  double r; int64_t n = limn_rem_pio2_f(fabsf(x), &r);
  return limn_cos_of(x, n, r);
}

// @limn tan_float: rem_pio2_f sincos_d
static inline float limn_tan_float(float x) {
  double r; int64_t n = limn_rem_pio2_f(fabsf(x), &r);
  return limn_tan_of(x, n, r);
}

// @limn tanh_float: bits_f
/* In float lanes (sixteen to an AVX-512 vector), not double: t = |x|, below 1
   t + t**3 P(t**2), P of degree 6 fitted for relative error on [0, 1]; from 1 on
   1 - 2 / (e**2t + 1), e**2t = 2**k e**r, k = rint(2t / ln2), r = 2t - k ln2 (ln2 in two
   parts), e**r = 1 + r + r**2 Q(r), Q of degree 4 fitted on [-ln2/2, ln2/2]; t is clamped
   at 9.5, where the quotient is 1 in float. Worst 0.95 ulp over every float32
   (examples/fit_float32_libm.py fits the coefficients and measures it). */
static inline float limn_tanh_float(float x) {
  float t = fabsf(x);
  t = t < 9.5f ? t : 9.5f;
  float z = t * t;
  float p = -0x1.77d5e2p-12f;
  p = fmaf(p, z, 0x1.2da1d2p-9f); p = fmaf(p, z, -0x1.045fb4p-7f);
  p = fmaf(p, z, 0x1.600938p-6f); p = fmaf(p, z, -0x1.b96214p-5f);
  p = fmaf(p, z, 0x1.110be2p-3f); p = fmaf(p, z, -0x1.55553cp-2f);
  float small = fmaf(t * z, p, t);
  float y = 2.0f * t;
  float k = rintf(y * 0x1.715476p+0f);
  float r = fmaf(k, -0x1.62e43p-1f, y);
  r = fmaf(k, 0x1.05c610p-29f, r);
  float q = 0x1.6a1a4ep-10f;
  q = fmaf(q, r, 0x1.123fd0p-7f); q = fmaf(q, r, 0x1.555916p-5f);
  q = fmaf(q, r, 0x1.55548ap-3f); q = fmaf(q, r, 0x1.fffffcp-2f);
  float s = limn_ffrom((uint32_t)((int32_t)k + 127) << 23);
  float e = s * fmaf(q * r, r, r) + s;
  float v = t < 1.0f ? small : 1.0f - 2.0f / (e + 1.0f);
  v = copysignf(v, x);
  return x != x ? x : v;
}

// @limn expm1_float: expm1_d
static inline float limn_expm1_float(float x) {
  float y = (float)limn_expm1_d(limn_dmin(limn_dmax((double)x, -110.0), 100.0));
  return (x != x || x == 0.0f) ? x : y;
}

// @limn exp2_float: exp_d
static inline float limn_exp2_float(float x) {
  double d = limn_dmin(limn_dmax((double)x, -160.0), 130.0);
  float y = (float)limn_exp_d(d * 0.69314718055994531);
  return x != x ? x : y;
}

// @limn sinh_float: expm1_d
/* (e - 1/e) / 2 as (em1 + em1 / (em1 + 1)) / 2, em1 = e**t - 1: no cancellation near 0 */
static inline float limn_sinh_float(float x) {
  double t = limn_dmin(fabs((double)x), 100.0);
  double e = limn_expm1_d(t);
  float y = (float)(0.5 * (e + e / (e + 1.0)));
  y = copysignf(y, x);
  return x != x ? x : y;
}

// @limn cosh_float: exp_d
static inline float limn_cosh_float(float x) {
  double e = limn_exp_d(limn_dmin(fabs((double)x), 100.0));
  float y = (float)(0.5 * (e + 1.0 / e));
  return x != x ? x : y;
}

// @limn log_specials_f:
/* what log gives at 0, below 0, at +inf and at nan, over r computed for positive finite x */
static inline float limn_log_special_f(float x, float r) {
  r = x == 0.0f ? -INFINITY : r;
  r = x < 0.0f ? NAN : r;
  r = x == INFINITY ? INFINITY : r;
  return x != x ? x : r;
}
static inline double limn_log_arg_f(float x) {
  return (x > 0.0f && x < INFINITY) ? (double)x : 1.0;
}

// @limn log2_float: log_d log_specials_f
static inline float limn_log2_float(float x) {
  double e, lm = limn_logm_d(limn_log_arg_f(x), &e);
  return limn_log_special_f(x, (float)fma(lm, 1.4426950408889634, e));
}

// @limn log10_float: log_d log_specials_f
static inline float limn_log10_float(float x) {
  double e, lm = limn_logm_d(limn_log_arg_f(x), &e);
  double r = fma(e, 0.30102999566398120, lm * 0.43429448190325182);
  return limn_log_special_f(x, (float)r);
}

// @limn log1p_float: bits_f
/* In float lanes: u = 1 + x rounded, c = 1 + x - u exactly (Fast2Sum), u = 2**k m with
   m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact); log(1 + f) = f - f*f/2 + s (f*f/2 + R),
   s = f / (2 + f), R = the series 2 s**2/3 + 2 s**4/5 + 2 s**6/7 + 2 s**8/9 of 2 atanh(s)/s - 2
   (|s| <= 0.172: the first term left out is below 2**-28 of the result); log1p(x) =
   k ln2 + log(1 + f) + c/u, f added last so its bits are kept. Worst 0.86 ulp over every
   float32 above -1 (examples/fit_float32_libm.py). */
static inline float limn_log1p_float(float x) {
  float a = (x > -1.0f && x < INFINITY) ? x : 0.0f;
  float u = 1.0f + a;
  float c = a > 1.0f ? 1.0f - (u - a) : a - (u - 1.0f);
  uint32_t iu = limn_fbits(u) + (0x3f800000u - 0x3f3504f3u);
  float k = (float)((int32_t)(iu >> 23) - 127);
  float f = limn_ffrom((iu & 0x7fffffu) + 0x3f3504f3u) - 1.0f;
  float s = f / (2.0f + f), z = s * s, hf = 0.5f * f * f;
  float R = 0x1.c71c72p-3f;
  R = fmaf(R, z, 0x1.24924ap-2f); R = fmaf(R, z, 0x1.99999ap-2f);
  R = fmaf(R, z, 0x1.555556p-1f); R = R * z;
  float lo = fmaf(k, 0x1.7f7d1cp-20f, c / u);
  float r = fmaf(k, 0x1.62e4p-1f, (fmaf(s, hf + R, lo) - hf) + f);
  r = x == -1.0f ? -INFINITY : r;
  r = x < -1.0f ? NAN : r;
  r = x == INFINITY ? INFINITY : r;
  return (x != x || x == 0.0f) ? x : r;
}

// @limn atan_float: atan_d
static inline float limn_atan_float(float x) {
  double t = fabs((double)x);
  int64_t inv = t > 1.0;
  double a = limn_atan01_d(inv ? 1.0 / t : t);
  a = inv ? 1.5707963267948966 - a : a;
  float y = copysignf((float)a, x);
  return x != x ? x : y;
}

// @limn atan2_float: atan_d
static inline float limn_atan2_float(float y, float x) {
  return (float)limn_atan2_d((double)y, (double)x);
}

// @limn asin_float: atan_d
static inline float limn_asin_float(float x) {
  double d = (double)x;
  return (float)limn_atan2_d(d, sqrt((1.0 - d) * (1.0 + d)));
}

// @limn acos_float: atan_d
static inline float limn_acos_float(float x) {
  double d = (double)x;
  return (float)limn_atan2_d(sqrt((1.0 - d) * (1.0 + d)), d);
}

// @limn asinh_float: log1p_d
/* log1p(t + t*t / (1 + sqrt(1 + t*t))), t = |x|: in double t*t cannot overflow */
static inline float limn_asinh_float(float x) {
  double t = fabs((double)x);
  t = t == INFINITY ? 1.0 : t;
  double r = limn_log1p_d(t + t * t / (1.0 + sqrt(1.0 + t * t)));
  float y = copysignf((float)r, x);
  y = (x == INFINITY || x == -INFINITY) ? x : y;
  return x != x ? x : y;
}

// @limn acosh_float: log1p_d
static inline float limn_acosh_float(float x) {
  double t = (x >= 1.0f && x < INFINITY) ? (double)x - 1.0 : 0.0;
  float y = (float)limn_log1p_d(t + sqrt(2.0 * t + t * t));
  y = x == INFINITY ? x : y;
  y = x < 1.0f ? NAN : y;
  return x != x ? x : y;
}

// @limn atanh_float: log1p_d
/* log1p(2t / (1 - t)) / 2, t = |x|, written 2t + 2t*t / (1 - t) */
static inline float limn_atanh_float(float x) {
  double t = fabs((double)x);
  double ts = t < 1.0 ? t : 0.0;
  float y = (float)(0.5 * limn_log1p_d(2.0 * ts + 2.0 * ts * ts / (1.0 - ts)));
  y = t == 1.0 ? INFINITY : y;
  y = t > 1.0 ? NAN : y;
  y = copysignf(y, x);
  return x != x ? x : y;
}

// @limn hypot_float:
static inline float limn_hypot_float(float a, float b) {
  double da = (double)a, db = (double)b;
  float r = (float)sqrt(da * da + db * db);
  return (fabsf(a) == INFINITY || fabsf(b) == INFINITY) ? INFINITY : r;
}

// @limn logaddexp_float: exp_d log1p_d
/* max + log1p(e**-|a - b|); equal infinities give themselves */
static inline float limn_logaddexp_float(float a, float b) {
  double da = (double)a, db = (double)b;
  double m = da > db ? da : db;
  double d = limn_dmax(LIMN_NEG(fabs(da - db)), -700.0);
  float r = (float)(m + limn_log1p_d(limn_exp_d(d)));
  r = (a == b && fabsf(a) == INFINITY) ? a : r;
  return (a != a || b != b) ? a + b : r;
}

// @limn pow_float: exp_d log_d
/* e**(y log|x|) in double, signed for an odd integer y, with IEEE pow's special cases */
static inline float limn_pow_float(float x, float y) {
  double ax = fabs((double)x), dy = (double)y;
  int64_t safe = (ax > 0.0) & (ax < INFINITY) & (fabs(dy) < INFINITY);
  double t = limn_log_d(safe ? ax : 1.0) * (safe ? dy : 0.0);
  double r = limn_exp_d(limn_dmin(limn_dmax(t, -700.0), 700.0));
  /* zero, infinite base or infinite exponent: only the signs decide */
  double big = (ax > 1.0) == (dy > 0.0) ? INFINITY : 0.0;
  double edge = ax == 0.0 ? (dy > 0.0 ? 0.0 : INFINITY)
              : (ax == INFINITY ? (dy > 0.0 ? INFINITY : 0.0) : big);
  edge = (ax == 1.0) ? 1.0 : edge;
  r = safe ? r : edge;
  int64_t is_int = floor(dy) == dy;
  int64_t odd = is_int & (floor(dy * 0.5) != dy * 0.5);
  r = (odd & (signbit(x) != 0)) ? LIMN_NEG(r) : r;
  r = (x < 0.0f && x > -INFINITY && !is_int && fabs(dy) < INFINITY) ? NAN : r;
  r = (x != x || y != y) ? NAN : r;
  r = x == 1.0f ? 1.0 : r;
  r = y == 0.0f ? 1.0 : r;
  return (float)r;
}

// @limn fmod_float:
static inline float limn_fmod_float(float a, float b) { return fmodf(a, b); }

// @limn logaddexp_double:
static inline double limn_logaddexp_double(double a, double b) {
  double m = a > b ? a : b;
  double r = m + log1p(exp(LIMN_NEG(fabs(a - b))));
  r = (a == b && fabs(a) == INFINITY) ? a : r;
  return (a != a || b != b) ? a + b : r;
}
