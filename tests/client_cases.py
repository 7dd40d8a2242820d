"""Real client code for limn_array: every scikit-learn estimator and metric with Array API
support, and samples of SciPy's Array API functions. Shared by tests/test_clients.py
(which holds each case to plain numpy) and examples/bench_clients.py (which times them).

A case is ``run(to)``: ``to`` turns a numpy array into the namespace's array (``np.asarray``
for plain numpy, ``limn_array.asarray`` on a device, ``array_api_strict.asarray``), and the
case returns what the client computed, as a numpy array. The lists are computed from the
libraries themselves, not written down: the estimators are those scikit-learn tags
``array_api_support`` (in the configurations that earn the tag), the metrics are the keys
of scikit-learn's ``array_api_metric_checkers``. scikit-learn runs under
``array_api_dispatch=True`` except on plain numpy (its default path, what users run);
SciPy needs ``SCIPY_ARRAY_API=1`` before it is imported, which the caller sets.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings

import numpy as np

RNG = np.random.default_rng(0)
N, D = 400, 6  # the shapes the issue measured (GaussianMixture on 400 x 6)
X = RNG.standard_normal((N, D))
Y2 = (X[:, 0] + 0.5 * RNG.standard_normal(N) > 0).astype(np.int64)  # binary labels
Y3 = np.digitize(X[:, 1] + 0.3 * RNG.standard_normal(N), [-0.5, 0.5]).astype(np.int64)
YR = X @ np.arange(1.0, D + 1) + 0.1 * RNG.standard_normal(N)
YR2 = np.stack([YR, X[:, 2] - X[:, 3]], axis=1)
POS = np.abs(YR) + 0.5  # positive targets (Poisson, Gamma, Tweedie, log errors)
PROB = 1 / (1 + np.exp(-X[:, 0]))  # a binary score in (0, 1)
PROB3 = np.exp(X[:, :3]) / np.exp(X[:, :3]).sum(axis=1, keepdims=True)
ML = (X[:, :3] > 0).astype(np.int64)  # multilabel indicators
ML_PRED = (X[:, :3] + 0.5 * RNG.standard_normal((N, 3)) > 0).astype(np.int64)
SIG = RNG.standard_normal(257)  # a signal of odd length: non-power-of-two transforms
KER = RNG.standard_normal(31)


def sklearn_context(plain: bool):
    import sklearn

    return contextlib.nullcontext() if plain else sklearn.config_context(array_api_dispatch=True)


# ---- scikit-learn estimators -------------------------------------------------------------------

# the configurations under which an estimator earns the tag, beyond its defaults
CONFIGS = {
    "GaussianMixture": [dict(n_components=2, init_params="random", random_state=0)],
    "CalibratedClassifierCV": [dict(method="temperature")],
    "PCA": [
        dict(n_components=3, svd_solver="full"),
        dict(n_components=3, svd_solver="covariance_eigh"),
        dict(
            n_components=3, svd_solver="randomized", power_iteration_normalizer="QR", random_state=0
        ),
    ],  # fmt: skip
    "LogisticRegression": [dict(max_iter=200)],
    "PoissonRegressor": [dict(max_iter=200)],
    "Nystroem": [dict(n_components=50, random_state=0)],
}
# meta-estimators are built around an estimator that has the tag
META = {
    "CalibratedClassifierCV": lambda cls, kw: cls(_logistic(), **kw),
    "FeatureUnion": lambda cls, kw: cls([("scale", _standard_scaler()), ("minmax", _minmax())]),
    "GridSearchCV": lambda cls, kw: cls(_ridge(), {"alpha": [0.1, 1.0]}, cv=2),
    "RandomizedSearchCV": lambda cls, kw: cls(
        _ridge(), {"alpha": [0.1, 1.0]}, n_iter=2, cv=2, random_state=0
    ),
    "Pipeline": lambda cls, kw: cls([("scale", _standard_scaler()), ("ridge", _ridge())]),
    "TransformedTargetRegressor": lambda cls, kw: cls(_ridge()),
}


def _logistic():
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=200)


def _ridge():
    from sklearn.linear_model import Ridge

    return Ridge()


def _standard_scaler():
    from sklearn.preprocessing import StandardScaler

    return StandardScaler()


def _minmax():
    from sklearn.preprocessing import MinMaxScaler

    return MinMaxScaler()


def _instances():
    """(case name, a fresh instance maker) for every estimator configuration with the tag."""
    from sklearn.utils import all_estimators

    out = []
    for name, cls in all_estimators():
        for kw in CONFIGS.get(name, [{}]):
            make = functools.partial(META[name], cls, kw) if name in META else (
                functools.partial(cls, **kw)
            )  # fmt: skip
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tagged = make().__sklearn_tags__().array_api_support
            except Exception:  # noqa: BLE001  (needs arguments this table does not give)
                continue
            if tagged:
                label = name if len(CONFIGS.get(name, [{}])) == 1 else f"{name}[{kw['svd_solver']}]"
                out.append((label, make))
    return out


def _fit_and_use(make):
    def run(to, plain):
        est = make()
        kind = est.__sklearn_tags__().estimator_type
        if type(est).__name__ == "LabelEncoder":
            with sklearn_context(plain):
                return est.fit_transform(to(Y3))
        y = {"classifier": Y3, "regressor": POS}.get(kind)
        x = to(X[:60] @ X[:60].T if type(est).__name__ == "KernelCenterer" else X)
        with sklearn_context(plain), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(x, to(y)) if y is not None else est.fit(x)
            for method in ("predict_proba", "predict", "transform"):
                if hasattr(est, method):
                    return getattr(est, method)(x)
        raise TypeError(f"{type(est).__name__}: no predict_proba, predict or transform")

    return run


# ---- scikit-learn metrics -----------------------------------------------------------------------

# what each of scikit-learn's checkers passes the metric
INPUTS = {
    "binary_classification": (Y2, 1 - Y2 * (X[:, 3] > -1)),
    "multiclass_classification": (Y3, (Y3 + (X[:, 4] > 1)) % 3),
    "multilabel_classification": (ML, ML_PRED),
    "binary_continuous_classification": (Y2, PROB),
    "multiclass_continuous_classification": (Y3, PROB3),
    "multilabel_continuous_classification": (ML, 1 / (1 + np.exp(-X[:, :3]))),
    "regression": (POS, POS * (1 + 0.1 * X[:, 0].clip(-2, 2))),
    "regression_multioutput": (np.abs(YR2) + 0.5, np.abs(YR2) * 1.1 + 0.5),
    "metric_pairwise": (np.abs(X[:50]), np.abs(X[50:100])),
}
# the keywords scikit-learn's checkers add where a metric takes them
KEYWORDS = {"beta": 0.5, "average": "macro"}


def _metric_cases():
    from sklearn.metrics.tests.test_common import array_api_metric_checkers

    out = []
    for metric, checkers in array_api_metric_checkers.items():
        name = getattr(metric, "__name__", None) or metric.func.__name__
        if isinstance(metric, functools.partial):
            name += "(" + ",".join(f"{k}={v}" for k, v in metric.keywords.items()) + ")"
        for checker in checkers:
            kind = checker.__name__.removeprefix("check_array_api_").removesuffix("_metric")
            kind = kind if kind in INPUTS else kind.replace("_metric", "")
            inputs = INPUTS[kind]
            if name == "average_precision_score" and kind == "multiclass_classification":
                inputs = (Y3, PROB3)  # a score per class, as the checker passes
            params = inspect.signature(metric).parameters
            kw = {k: v for k, v in KEYWORDS.items() if k in params}
            if kind.startswith("binary") or kind == "regression":
                kw.pop("average", None)
            out.append((f"{name}[{kind}]", _metric(metric, inputs, kw)))
    return out


def _metric(metric, inputs, kw):
    def run(to, plain):
        a, b = (to(v) for v in inputs)
        with sklearn_context(plain), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = metric(a, b, **kw)
        return tuple(out) if isinstance(out, tuple) else out

    return run


# ---- SciPy ------------------------------------------------------------------------------------


def _scipy_cases():
    from scipy import fft, integrate, signal, special, stats

    x, y = X[:, :3], X[:, 3:]
    pos = np.abs(X[:, :3]) + 0.1
    cases = {
        "fft.fft": lambda t: fft.fft(t(SIG)),
        "fft.ifft(fft)": lambda t: fft.ifft(fft.fft(t(SIG))),
        "fft.rfft": lambda t: fft.rfft(t(SIG)),
        "fft.irfft": lambda t: fft.irfft(fft.rfft(t(SIG)), n=SIG.size),
        "fft.fftn": lambda t: fft.fftn(t(X)),
        "fft.fftfreq": lambda t: fft.fftfreq(64, d=0.1, xp=_namespace(t(X))),
        "special.logsumexp": lambda t: special.logsumexp(t(x), axis=1),
        "special.softmax": lambda t: special.softmax(t(x), axis=1),
        "special.log_softmax": lambda t: special.log_softmax(t(x), axis=0),
        "special.erf": lambda t: special.erf(t(x)),
        "special.erfc": lambda t: special.erfc(t(x)),
        "special.expit": lambda t: special.expit(t(x)),
        "special.logit": lambda t: special.logit(t(PROB)),
        "special.gammaln": lambda t: special.gammaln(t(pos)),
        "special.xlogy": lambda t: special.xlogy(t(pos), t(pos + 1)),
        "special.entr": lambda t: special.entr(t(pos)),
        "special.rel_entr": lambda t: special.rel_entr(t(pos), t(pos + 0.5)),
        "special.ndtr": lambda t: special.ndtr(t(x)),
        "stats.zscore": lambda t: stats.zscore(t(X), axis=0),
        "stats.skew": lambda t: stats.skew(t(X), axis=0),
        "stats.kurtosis": lambda t: stats.kurtosis(t(X), axis=0),
        "stats.moment": lambda t: stats.moment(t(X), order=3, axis=0),
        "stats.variation": lambda t: stats.variation(t(pos), axis=0),
        "stats.sem": lambda t: stats.sem(t(X), axis=0),
        "stats.gmean": lambda t: stats.gmean(t(pos), axis=0),
        "stats.hmean": lambda t: stats.hmean(t(pos), axis=0),
        "stats.entropy": lambda t: stats.entropy(t(pos), axis=0),
        "stats.pearsonr": lambda t: stats.pearsonr(t(x[:, 0]), t(y[:, 0])).statistic,
        "stats.ttest_ind": lambda t: stats.ttest_ind(t(x), t(y), axis=0).statistic,
        "signal.fftconvolve": lambda t: signal.fftconvolve(t(SIG), t(KER)),
        "signal.oaconvolve": lambda t: signal.oaconvolve(t(SIG), t(KER)),
        "integrate.trapezoid": lambda t: integrate.trapezoid(t(X), dx=0.5, axis=0),
        "integrate.simpson": lambda t: integrate.simpson(t(X), dx=0.5, axis=0),
        "integrate.cumulative_trapezoid": lambda t: integrate.cumulative_trapezoid(
            t(X), dx=0.5, axis=0, initial=0
        ),
        "integrate.cumulative_simpson": lambda t: integrate.cumulative_simpson(
            t(X), dx=0.5, axis=0
        ),
    }
    return [(f"scipy.{name}", _scipy(fn)) for name, fn in cases.items()]


def _namespace(a):
    return a.__array_namespace__() if hasattr(a, "__array_namespace__") else np


def _scipy(fn):
    def run(to, plain):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(to)

    return run


@functools.cache
def cases() -> dict[str, callable]:
    """Every case, by name: ``cases()[name](to, plain)``."""
    out = [(f"sklearn.{n}", _fit_and_use(m)) for n, m in _instances()]
    out += [(f"sklearn.metrics.{n}", r) for n, r in _metric_cases()]
    out += _scipy_cases()
    return dict(out)


def as_numpy(value) -> np.ndarray | tuple:
    """A case's result as numpy arrays (a tuple stays a tuple)."""
    if isinstance(value, tuple):
        return tuple(as_numpy(v) for v in value)
    return np.asarray(value)


def agree(got, want, rtol: float = 1e-7, atol: float = 1e-9) -> None:
    """Raise unless ``got`` is ``want`` up to rounding (shapes, dtype kinds, values)."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            agree(g, w, rtol, atol)
        return
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype.kind == want.dtype.kind or {got.dtype.kind, want.dtype.kind} <= set("iub")
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


__all__ = ["agree", "as_numpy", "cases"]


def check(device: str) -> dict[str, str]:
    """Every case on limn_array on ``device`` held to plain numpy: case -> '' where they
    agree, else what differed (the comparison's message or the error raised)."""
    import limn
    import limn_array

    limn.set_device(device)  # as a user does: SciPy makes some arrays on the default device
    out = {}
    for name, case in cases().items():
        try:
            want = as_numpy(case(np.asarray, True))
            got = as_numpy(case(lambda a: limn_array.asarray(a, device=device), False))
            agree(got, want)
            out[name] = ""
        except Exception as e:  # noqa: BLE001  (reported per case by the test)
            out[name] = f"{type(e).__name__}: {e}"[:2000]
    return out


if __name__ == "__main__":  # python tests/client_cases.py DEVICE OUT.json (SCIPY_ARRAY_API=1)
    import json
    import sys

    with open(sys.argv[2], "w") as f:
        json.dump(check(sys.argv[1]), f)
