"""The kernel profiler: per-kernel calls, time and work, named by the user's source line."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import limn
from limn import Tensor
from limn.runtime import profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def c():
    try:
        limn.set_device("c")
    except RuntimeError as e:
        pytest.skip(f"c device unavailable: {e}")
    return limn.get_device("c")


def test_profile_counts_each_kernel_call_and_names_the_line_that_made_it(c):
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4) + 0.5, requires_grad=True)
    with limn.profile() as prof:
        for _ in range(3):
            y = (x * 3).log().sum()  # the line every kernel is charged to
            y.backward()
            limn.realize(y, x.grad)
            x.grad = None
    rows = prof.stats()
    assert rows and all(r["calls"] == 3 for r in rows)
    assert all(
        r["source"] == "y = (x * 3).log().sum()  # the line every kernel is charged to"
        for r in rows
    )
    assert any(r["site"].endswith("(grad)") for r in rows)
    assert any(not r["site"].endswith("(grad)") for r in rows)
    forward = next(r for r in rows if r["kind"] == "SUM")
    assert forward["kernel"] == "SUM [3, 4] -> [1, 1]"
    assert forward["flop"] == 12 * 3  # MUL, LOG and the fold, once per element
    assert forward["bytes"] == 12 * 4 + 4
    times = [r["total_s"] for r in rows]
    assert times == sorted(times, reverse=True) and all(t > 0 for t in times)
    assert "LOOP" in prof.stats(nest=True)[0]["nest"]
    assert profile.active() is None  # the block ended it


def test_the_driver_times_each_kernel_of_each_run(c):
    """One plan run by the C driver three times: every kernel counted once a run, with a
    time of its own."""
    x = Tensor(np.full((256, 64), 0.01, np.float32))
    with limn.profile() as prof:
        for _ in range(3):  # the (256, 256) products live in the plan's arena
            limn.realize((x @ x.T).exp().sum(axis=1))
    rows = prof.stats()
    assert rows and all(r["calls"] == 3 and r["total_s"] > 0 for r in rows)


def test_profile_off_records_nothing_and_leaves_no_hook(c):
    from ir.graph import node as graph

    assert profile.active() is None and graph._on_create is None
    (Tensor(np.ones(4, np.float32)) + 1).realize()
    assert profile.active() is None


def test_limn_profile_env_prints_the_table_at_exit(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        "import numpy as np, limn\n"
        "limn.set_device('c')\n"
        "x = limn.Tensor(np.ones((64, 64), np.float32))\n"
        "(x @ x).relu().realize()\n"
    )
    env = {"LIMN_PROFILE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    import os

    env = {**os.environ, **env}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "limn profile:" in out.stderr
    assert "run.py:4" in out.stderr and "(x @ x).relu().realize()" in out.stderr


ROWS = "gpt,softmax,ce,layernorm,conv,mlp,matmul,chain"  # all but the empty-cache compile


def test_bench_train_quick_runs_every_row():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import bench_train
    finally:
        sys.path.pop(0)
    try:
        rows = bench_train.main(["--quick", "--reps", "1", "--only", ROWS, "--side", "both"])
    finally:
        limn.set_device("numpy")
    names = " ".join(r.name for r in rows)
    for part in ("GPT", "softmax", "cross_entropy", "LayerNorm", "Conv2d", "MLP", "x.T@g", "exp"):
        assert part in names
    assert all(min(r.limn_ms) > 0 for r in rows)
    text = bench_train.summary(rows)  # every row with a target is judged, met or not
    judged = [r for r in rows if r.met() is not None]
    assert text.startswith(f"targets: {sum(r.met() for r in judged)} of {len(judged)} met")
    assert text.count("NOT met:") == sum(not r.met() for r in judged)
    gpt = next(r for r in rows if r.name.startswith("GPT"))
    assert gpt.met() is None or (gpt.met() == ("met" in gpt.line() and "NOT" not in gpt.line()))
    assert bench_train.Row("x", [4.0], [], "", limit_ms=5.0).met() is True
    assert bench_train.Row("x", [6.0], [], "", limit_ms=5.0).met() is False
