"""examples/train_stories.py for a handful of steps: the loss falls, a checkpoint resumes
the same trajectory, and nothing reads outside the repository."""

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import limn

EXAMPLE = Path(__file__).parent.parent / "examples" / "train_stories.py"
TINY = ["--ctx", "16", "--d", "32", "--layers", "1", "--heads", "2", "--batch", "4"]


def _main():
    return runpy.run_path(str(EXAMPLE))["main"]


def _run(*args):
    device = limn.current_device()
    return _main()([*TINY, "--device", device, "--log-every", "1", "--sample", "8", *args])


def test_train_stories_loss_falls_on_the_shipped_slice():
    out = _run("--steps", "8", "--lr", "1e-2")
    losses = [loss for _, loss in out["losses"]]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.5
    assert 2 < out["bigram"] < 3  # the bigram model of the slice, nats per byte
    assert np.isfinite(out["held_out"])


def test_a_resumed_run_takes_the_uninterrupted_trajectory(tmp_path):
    ckpt = str(tmp_path / "stories.safetensors")
    straight = _run("--steps", "6")
    _run("--steps", "6", "--stop-at", "3", "--checkpoint", ckpt)
    resumed = _run("--steps", "6", "--checkpoint", ckpt, "--resume")
    assert resumed["losses"] == straight["losses"][3:]
    a, b = straight["model"].state_dict(), resumed["model"].state_dict()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k].numpy(), b[k].numpy(), err_msg=k)


def test_the_log_line_gives_the_rate_over_recent_steps_not_the_first_compile(capsys):
    _run("--steps", "4")
    steps = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step")]
    assert len(steps) == 4 and "- tok/s  ETA -" in steps[0]  # the first step compiled
    assert all(" tok/s  ETA " in ln and "ETA -" not in ln for ln in steps[1:])


@pytest.mark.parametrize(
    "args,message",
    [
        (["--checkpoint", "{tmp}/missing.safetensors", "--resume"], "--resume: cannot read"),
        (["--checkpoint", "{tmp}/junk.safetensors", "--resume"], "--resume: checkpoint"),
        (["--data", "{tmp}/missing.txt"], "cannot read --data"),
    ],
)
def test_a_missing_or_broken_input_is_one_line_not_a_traceback(tmp_path, args, message):
    (tmp_path / "junk.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit) as e:
        _run("--steps", "1", *[a.format(tmp=tmp_path) for a in args])
    assert str(e.value).startswith("train_stories: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_gpu_check_without_a_gpu_says_so_in_one_line():
    try:
        limn.get_device("cuda")
        pytest.skip("this machine has a GPU")
    except RuntimeError:
        pass
    gpu_check = EXAMPLE.parent / "gpu_check.py"
    out = subprocess.run([sys.executable, str(gpu_check)], capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("gpu_check: needs a GPU") and out.stderr.count("\n") == 1


def test_the_shipped_slice_is_small_and_carries_its_license():
    data = EXAMPLE.parent / "data"
    assert (data / "tinystories-sample.txt").stat().st_size <= 256 * 1024
    assert "CDLA-Sharing-1.0" in (data / "README.md").read_text()
    assert "shared" not in EXAMPLE.read_text()  # a fresh clone has no ../shared


# ---- --distributed: 2 ranks under mpiexec (skipped without the mpi extra) -------------

MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def _have_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return MPIEXEC is not None


mpi = pytest.mark.skipif(not _have_mpi(), reason="needs the mpi extra: uv sync --extra mpi")
DIST = [*TINY[:-1], "8", "--steps", "6", "--log-every", "1", "--sample", "0", "--device", "numpy"]


def _launch(*args, limit: float = 120):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [MPIEXEC, "-n", "2", sys.executable, str(EXAMPLE), *DIST, "--distributed", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _step_losses(stdout: str) -> list[float]:
    return [float(ln.split()[3]) for ln in stdout.splitlines() if ln.startswith("step ")]


@mpi
def test_distributed_two_ranks_take_the_steps_of_one_process_on_the_whole_batch(tmp_path):
    """2 ranks of batch 4 against 1 process of batch 8: the same losses and parameters to
    float32 rounding, the same parameters on both ranks, rank 0 alone logging and writing
    the checkpoint; then a 2-rank run stopped at step 3 and resumed from rank 0's
    checkpoint ends on the uninterrupted 2-rank run's parameters, bit for bit."""
    from limn import serialize

    straight, stopped = tmp_path / "straight.safetensors", tmp_path / "stopped.safetensors"
    out = _launch("--checkpoint", str(straight))
    limn.set_device("numpy")
    one = _main()([*DIST, "--checkpoint", str(tmp_path / "one.safetensors")])
    two = _step_losses(out)
    assert len(two) == 6 and two[-1] < two[0]  # each step logged once: rank 0 alone
    np.testing.assert_allclose(two, [loss for _, loss in one["losses"]], rtol=2e-4)
    assert "parameters identical on all 2 ranks" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.safetensors", "straight.safetensors"]
    got, want = (serialize.load(p, numpy=True) for p in (straight, tmp_path / "one.safetensors"))
    assert got.keys() == want.keys()
    for k in want:
        a, b = got[k], want[k]
        if k.endswith("attn.in_proj_bias"):
            # the key bias adds one number to a query's every score: softmax ignores it, its
            # gradient is rounding noise, and AdamW turns noise into lr-sized steps
            d = a.size // 3
            a, b = np.delete(a, np.s_[d : 2 * d]), np.delete(b, np.s_[d : 2 * d])
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=k)

    _launch("--stop-at", "3", "--checkpoint", str(stopped))
    out = _launch("--resume", "--checkpoint", str(stopped))
    assert "resumed from" in out and "at step 3" in out
    assert _step_losses(out) == two[3:]
    resumed = serialize.load(stopped, numpy=True)
    for k in got:
        assert resumed[k].tobytes() == got[k].tobytes(), k


@pytest.mark.slow
@mpi
def test_a_hostfile_naming_localhost_twice_runs_the_two_machine_launch_and_resumes(tmp_path):
    """docs/distributed.md's two-machine command, with both hosts this one: rank 0 writes
    the checkpoint, a stopped run resumes from it, the ranks end identical."""
    doc = (EXAMPLE.parent.parent / "docs" / "distributed.md").read_text()
    assert "mpiexec -f hosts -n 2 -ppn 1" in doc
    hosts, ckpt = tmp_path / "hosts", tmp_path / "s.safetensors"
    hosts.write_text("localhost:1\nlocalhost:1\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [MPIEXEC, "-f", str(hosts), "-n", "2", "-ppn", "1", sys.executable, str(EXAMPLE)]
    cmd += [*DIST, "--distributed", "--checkpoint", str(ckpt)]
    for extra in (["--stop-at", "3"], ["--resume"]):
        r = subprocess.run(cmd + extra, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "parameters identical on all 2 ranks" in r.stdout and ckpt.exists()
    assert "resumed from" in r.stdout and len(_step_losses(r.stdout)) == 3
