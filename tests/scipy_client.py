"""SciPy's array-API code paths run on limn arrays: a script, run by test_scipy_clients.py.

``SCIPY_ARRAY_API=1`` must be set before SciPy is first imported, so this runs in its own
process: ``python scipy_client.py DEVICE NAME...`` makes DEVICE the default device (SciPy
creates some arrays, such as a scalar ``dx``, on the default device), runs each named
case on limn arrays and on numpy, and prints one JSON line per case: the largest
absolute difference, whether the shapes agree, and the wall time on limn.
"""

import json
import os
import sys
import time

os.environ["SCIPY_ARRAY_API"] = "1"

import numpy as np  # noqa: E402
from scipy import integrate, signal  # noqa: E402
from scipy._lib import array_api_extra as xpx  # noqa: E402
from scipy.cluster.vq import _krandinit  # noqa: E402

import limn  # noqa: E402
import limn_array as xp  # noqa: E402

RNG = np.random.default_rng(0)
A, B = RNG.random(28), RNG.random(5)  # a full convolution of 32: a power-of-two fft
Y = RNG.standard_normal((3, 17))

CASES = {
    "oaconvolve": (lambda m: signal.oaconvolve(m(A), m(B)), 1e-12),
    "fftconvolve": (lambda m: signal.fftconvolve(m(A), m(B)), 1e-12),
    "cumulative_trapezoid": (
        lambda m: integrate.cumulative_trapezoid(m(Y), dx=0.5, axis=-1, initial=0),
        1e-12,
    ),
    "cumulative_simpson": (lambda m: integrate.cumulative_simpson(m(Y), dx=0.5, axis=-1), 1e-12),
}


def krandinit(m):
    """SciPy's ``TestKMeans::test_krandinit``: a million draws shaped by the data's covariance
    (a Cholesky factor, or an SVD where the data is wide), then their covariance: sums of a
    million products, the reduce that timed out on the numpy device."""
    from scipy.cluster.tests.test_vq import TESTDATA_2D

    ns = np if m is np.asarray else xp
    data = m(TESTDATA_2D)
    covs = []
    for d in [ns.reshape(data, (200, 2)), ns.reshape(data, (20, 20))[:10, :]]:
        init = _krandinit(d, 10**6, np.random.default_rng(1234), ns)
        covs.append(np.asarray(xpx.cov(init.T, xp=ns)).ravel())
    return np.concatenate(covs)


CASES["krandinit"] = (krandinit, 1e-9)


def main(device: str, names: list[str]) -> None:
    limn.set_device(device)
    for name in names:
        run, tol = CASES[name]
        ref = np.asarray(run(np.asarray))
        t0 = time.perf_counter()
        got = np.asarray(run(xp.asarray))
        seconds = time.perf_counter() - t0
        err = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
        row = {"device": device, "case": name, "err": err, "tol": tol, "s": seconds}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or list(CASES))
