"""Real client code on limn_array: scikit-learn under array_api_dispatch, SciPy's Array API.

Each client call runs on the numpy device and on the c device, is held to the same call
on plain numpy arrays, and the c device's wall time (first call included: that is what a
user waits for) must stay within 3x of the numpy device's. Slow (minutes on a loaded
machine): ``uv run pytest -m slow tests/test_clients.py``.
"""

import os
import time

import numpy as np
import pytest

os.environ.setdefault("SCIPY_ARRAY_API", "1")  # before scipy is imported anywhere

sklearn = pytest.importorskip("sklearn")
scipy_special = pytest.importorskip("scipy.special")
scipy_stats = pytest.importorskip("scipy.stats")

import limn_array as xp  # noqa: E402

pytestmark = pytest.mark.slow

RNG = np.random.default_rng(0)
X = RNG.standard_normal((200, 5))
Y = (X[:, 0] + 0.3 * RNG.standard_normal(200) > 0).astype(np.int64)
YR = X @ np.arange(1, 6.0) + 0.1 * RNG.standard_normal(200)


def _sk(fn):
    def run(x, y, yr):
        with sklearn.config_context(array_api_dispatch=True):
            return fn(x, y, yr)

    return run


def _estimators():
    from sklearn import metrics
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    return {
        "StandardScaler": _sk(lambda x, y, yr: StandardScaler().fit_transform(x)),
        "MinMaxScaler": _sk(lambda x, y, yr: MinMaxScaler().fit_transform(x)),
        "PCA": _sk(lambda x, y, yr: PCA(2, svd_solver="full").fit_transform(x)),
        "Ridge": _sk(lambda x, y, yr: Ridge(solver="svd").fit(x, yr).predict(x)),
        "LinearDiscriminantAnalysis": _sk(
            lambda x, y, yr: LinearDiscriminantAnalysis().fit(x, y).predict(x)
        ),
        "accuracy_score": _sk(lambda x, y, yr: metrics.accuracy_score(y, 1 - y)),
        "r2_score": _sk(lambda x, y, yr: metrics.r2_score(yr, yr * 0.9)),
        "mean_squared_error": _sk(lambda x, y, yr: metrics.mean_squared_error(yr, yr * 0.9)),
        "logsumexp": lambda x, y, yr: scipy_special.logsumexp(x, axis=1),
        "softmax": lambda x, y, yr: scipy_special.softmax(x, axis=1),
        "zscore": lambda x, y, yr: scipy_stats.zscore(x, axis=0),
        "skew": lambda x, y, yr: scipy_stats.skew(x, axis=0),
    }


CLIENTS = _estimators()


def _timed(fn, device):
    args = [xp.asarray(a, device=xp.Device(device)) for a in (X, Y, YR)]
    t = time.perf_counter()
    out = np.asarray(fn(*args))
    return out, time.perf_counter() - t


@pytest.mark.parametrize("name", list(CLIENTS))
def test_client_code_matches_numpy_and_the_c_device_keeps_up(name):
    fn = CLIENTS[name]
    want = np.asarray(fn(X, Y, YR))
    got_np, t_np = _timed(fn, "numpy")
    got_c, t_c = _timed(fn, "c")
    np.testing.assert_allclose(got_np, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_c, want, rtol=1e-9, atol=1e-9)
    assert t_c <= 3 * max(t_np, 0.1), f"{name}: c {t_c:.2f} s, numpy device {t_np:.2f} s"
