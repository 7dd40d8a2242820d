"""Real client code on limn_array gives plain numpy's answers, on both devices.

The cases are tests/client_cases.py's: every scikit-learn estimator tagged
``array_api_support`` (scikit-learn under ``array_api_dispatch=True``) and every metric of
its ``array_api_metric_checkers``, and samples of SciPy's Array API functions (under
``SCIPY_ARRAY_API=1``). Each is held to the same call on plain numpy arrays. SciPy reads
the flag when it is first imported, so each device runs every case in a child process;
examples/bench_clients.py times the same cases. Slow (about a minute on the numpy device,
several on the c device from an empty cache): ``uv run pytest -m slow tests/test_clients.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("scipy")
sys.path.insert(0, str(Path(__file__).parent))
import client_cases  # noqa: E402

pytestmark = pytest.mark.slow
CASES = Path(__file__).with_name("client_cases.py")


@pytest.fixture(scope="module", params=["numpy", "c"])
def outcomes(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("clients") / f"{request.param}.json"
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run(
        [sys.executable, str(CASES), request.param, str(out)],
        env=env, capture_output=True, text=True, timeout=3000,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_every_estimator_and_metric_with_array_api_support_is_a_case():
    from sklearn.metrics.tests.test_common import array_api_metric_checkers

    names = list(client_cases.cases())
    estimators = [n for n in names if n.startswith("sklearn.") and ".metrics." not in n]
    metrics = [n for n in names if n.startswith("sklearn.metrics.")]
    assert len(metrics) == sum(len(c) for c in array_api_metric_checkers.values())
    for must in ("GaussianMixture", "LogisticRegression", "CalibratedClassifierCV", "PCA[full]"):
        assert f"sklearn.{must}" in estimators
    assert len(estimators) >= 20


@pytest.mark.parametrize("name", list(client_cases.cases()))
def test_client_code_on_limn_array_matches_plain_numpy(outcomes, name):
    assert outcomes[name] == "", outcomes[name]
