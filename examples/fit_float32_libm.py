"""Fit the c device's float32 tanh and log1p polynomials; measure the C over every float32.

``ir/c/libm.c`` computes float32 ``tanh`` and ``log1p`` in float lanes. Their coefficients
come from here:

* tanh(t) = t + t**3 P(t**2) on [0, 1], P of degree 6; e**r = 1 + r + r**2 Q(r) on
  [-ln2/2, ln2/2], Q of degree 4: each a weighted least-squares fit on Chebyshev points,
  reweighted until the largest relative error of the result stops falling (close to
  minimax), the exact values from mpmath at 100 bits; the coefficients are rounded to
  float32 and printed as C hex literals.
* log1p's R is the series of 2 atanh(s)/s - 2 truncated after s**8 (2/3, 2/5, 2/7, 2/9).

``--measure`` compiles the functions as the c device emits them (``ir.c.libm.definitions``,
the device's cc flags) into a loop over every float32 (tanh: 0 to 10, odd; log1p: above
-1) against the C library's double tanh and log1p, and prints the worst error in ulps of
the double result rounded to float32. It takes a minute or two of one core.

    uv run python examples/fit_float32_libm.py [--measure]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import mpmath
import numpy as np

mpmath.mp.prec = 100


def fit(f, lo, hi, degree, weight, n=800, rounds=30):
    """Coefficients c[0..degree-1] of sum c_i x**i ~ f on [lo, hi], error weighted by weight."""
    x = np.cos(np.linspace(0, np.pi, n)) * (hi - lo) / 2 + (hi + lo) / 2
    a = np.stack([x**i for i in range(degree)], 1)
    y, w, ww = f(x), weight(x), np.ones(n)
    for _ in range(rounds):
        c, *_ = np.linalg.lstsq(a * (w * ww)[:, None], y * w * ww, rcond=None)
        err = np.abs((a @ c - y) * w)
        ww = ww * (err / err.max()) ** 0.3 + 1e-12
        ww /= ww.max()
    return c, err.max()


def tanh_p():
    def g(z):  # (tanh t - t) / t**3 at t = sqrt(z)
        out = []
        for v in z:
            t = mpmath.sqrt(mpmath.mpf(v))
            out.append(float((mpmath.tanh(t) - t) / t**3) if v > 1e-30 else -1 / 3)
        return np.array(out)

    t = lambda z: np.sqrt(np.maximum(z, 1e-300))  # noqa: E731
    return fit(g, 0.0, 1.0, 7, lambda z: z * t(z) / np.tanh(t(z) + 1e-300), n=600)


def exp_q():
    h = float(mpmath.log(2) / 2)

    def g(r):  # (e**r - 1 - r) / r**2
        out = []
        for v in r:
            m = mpmath.mpf(v)
            out.append(float((mpmath.exp(m) - 1 - m) / m**2) if abs(v) > 1e-20 else 0.5)
        return np.array(out)

    return fit(g, -h * 1.01, h * 1.01, 5, lambda r: r * r / np.exp(r))


def c_hex(c) -> str:
    return ", ".join(float(np.float32(v)).hex().replace("0000000p", "p") + "f" for v in c)


MEASURE = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
%s
static double ulps(float g, double ex) {
  double ulp = fmax(ldexp(1.0, ilogb((float)ex) - 23), 0x1p-149);
  return fabs((double)g - ex) / ulp;
}
int main(void) {
  double wt = 0, wl = 0; float xt = 0, xl = 0;
  for (uint64_t v = 0; v < 0x100000000ull; v++) {
    uint32_t u = (uint32_t)v; float x; memcpy(&x, &u, 4);
    if (x >= 0.0f && x <= 10.0f) {
      double e = ulps(limn_tanh_float(x), tanh((double)x));
      if (e > wt) { wt = e; xt = x; }
    }
    if (x > -1.0f && x < INFINITY) {
      double e = ulps(limn_log1p_float(x), log1p((double)x));
      if (e > wl) { wl = e; xl = x; }
    }
  }
  printf("tanh float32: worst %%.3f ulp at %%a\nlog1p float32: worst %%.3f ulp at %%a\n",
         wt, xt, wl, xl);
  return 0;
}
"""


def measure() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from ir.c.libm import definitions
    from limn.runtime.cc import FLAGS

    flags = [f for f in FLAGS if f not in ("-shared", "-fPIC")]
    src = MEASURE % definitions(["tanh_float", "log1p_float"])
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "m.c").write_text(src)
        subprocess.run(["cc", *flags, "-o", f"{d}/m", f"{d}/m.c", "-lm"], check=True)
        print(subprocess.run([f"{d}/m"], check=True, capture_output=True, text=True).stdout)


if __name__ == "__main__":
    for name, (c, err) in (("tanh P", tanh_p()), ("exp Q", exp_q())):
        print(f"{name}: fitted relative error {err:.3g}\n  {c_hex(c)}")
    print("log1p R:", c_hex([2 / 3, 2 / 5, 2 / 7, 2 / 9]))
    if "--measure" in sys.argv:
        measure()
