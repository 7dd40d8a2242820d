"""limn.distributed: 2-rank runs under mpiexec, held to a 1-rank run on the whole batch.

The launches need the `mpi` extra (``uv sync --extra mpi``: mpi4py and the mpich wheel,
whose mpiexec is in the venv's bin); without it they skip, and CI installs it. Each
launch runs tests/mpi_worker.py on 2 ranks with a wall-clock limit, so a hang fails the
test instead of stalling the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import limn
from limn import Tensor, nn

sys.path.insert(0, str(Path(__file__).parent))
import mpi_worker  # noqa: E402

WORKER = Path(__file__).parent / "mpi_worker.py"
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def _have_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return MPIEXEC is not None


mpi = pytest.mark.skipif(not _have_mpi(), reason="needs the mpi extra: uv sync --extra mpi")


def launch(scenario: str, device: str, outdir: Path, limit: float = 60):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [MPIEXEC, "-n", "2", sys.executable, str(WORKER), scenario, device, str(outdir)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)


def rank_params(outdir: Path, scenario: str, rank: int, step: int) -> dict[str, np.ndarray]:
    with np.load(outdir / f"{scenario}_rank{rank}_step{step}.npz") as f:
        return dict(f)


def ranks_agree_with(outdir: Path, scenario: str, reference: list[dict]):
    """Both ranks' parameters at every step: identical bits, and the reference's values."""
    for s, want in enumerate(reference, start=1):
        p0, p1 = (rank_params(outdir, scenario, rank, s) for rank in (0, 1))
        for k in want:
            assert p0[k].tobytes() == p1[k].tobytes(), (s, k)
            np.testing.assert_allclose(p0[k], want[k], rtol=1e-6, atol=1e-6, err_msg=f"{s} {k}")
        yield p0, p1


@pytest.fixture(scope="module")
def reference():
    limn.set_device("numpy")
    return mpi_worker.reference()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One 2-rank numpy run (it also leaves rank 0's step-5 checkpoint)."""
    outdir = tmp_path_factory.mktemp("train")
    r = launch("train", "numpy", outdir)
    assert r.returncode == 0, r.stdout + r.stderr
    return outdir, r


@mpi
def test_parameters_are_identical_on_every_rank_after_every_step(trained):
    outdir, _ = trained
    for s in range(1, mpi_worker.STEPS + 1):
        p0, p1 = rank_params(outdir, "train", 0, s), rank_params(outdir, "train", 1, s)
        for k in p0:
            assert p0[k].tobytes() == p1[k].tobytes(), (s, k)


@mpi
def test_two_ranks_of_batch_b_equal_one_rank_of_batch_2b_for_10_adamw_steps(trained, reference):
    outdir, _ = trained
    for s, want in enumerate(reference, start=1):
        got = rank_params(outdir, "train", 0, s)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=f"{s} {k}")
    # the first step moved every parameter away from rank 1's own initialization
    limn.set_device("numpy")
    own, _ = mpi_worker.build(1)
    assert any(
        not np.array_equal(v.numpy(), rank_params(outdir, "train", 1, 1)[k])
        for k, v in own.named_parameters()
    )


@mpi
def test_rank_0_alone_logs_and_writes_the_checkpoint(trained):
    outdir, r = trained
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("step ")]
    assert [ln.split()[1] for ln in lines] == [str(s) for s in range(1, mpi_worker.STEPS + 1)]
    assert sorted(p.name for p in outdir.glob("ckpt*")) == ["ckpt.safetensors"]


@mpi
def test_a_checkpoint_from_rank_0_resumes_a_2_rank_run_on_the_same_trajectory(trained):
    outdir, _ = trained
    r = launch("resume", "numpy", outdir)
    assert r.returncode == 0, r.stdout + r.stderr
    for s in range(mpi_worker.SAVE_AFTER + 1, mpi_worker.STEPS + 1):
        want = rank_params(outdir, "train", 0, s)
        for rank in (0, 1):
            got = rank_params(outdir, "resume", rank, s)
            for k in want:
                assert got[k].tobytes() == want[k].tobytes(), (s, rank, k)


@mpi
def test_a_captured_step_on_the_c_device_trains_like_the_reference(tmp_path, reference):
    r = launch("capture", "c", tmp_path, limit=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(list(ranks_agree_with(tmp_path, "capture", reference))) == len(reference)


@mpi
def test_a_rank_that_raises_makes_every_rank_raise(tmp_path):
    r = launch("raise", "numpy", tmp_path)
    assert r.returncode != 0
    assert "ValueError: rank 1 fails on purpose in step 3" in r.stderr
    assert "RankFailed" in r.stderr and "rank 1 of 2 failed" in r.stderr
    assert not list(tmp_path.glob("raise_rank0_step3.npz"))


@mpi
def test_a_rank_that_stops_taking_part_times_out_instead_of_hanging(tmp_path):
    r = launch("silent", "numpy", tmp_path, limit=40)
    assert r.returncode != 0
    assert "DistributedTimeout" in r.stderr and "not finished after 3 s on rank 0" in r.stderr


def _branch_reference() -> list[dict[str, np.ndarray]]:
    """The branch scenario in one process: rank 0's extra gradient, averaged with rank 1's
    none, is half of it."""
    from limn import optim

    limn.set_device("numpy")
    limn.set_seed(0)
    m = nn.Sequential(nn.Linear(6, 3))
    m.extra, m.unused = nn.Linear(6, 3), nn.Linear(6, 3)
    opt = optim.SGD(m.named_parameters(), lr=0.1, momentum=0.9)
    out = []
    for s in range(1, 4):
        opt.zero_grad()
        x = Tensor(np.full((4, 6), float(s), np.float32))
        (m(x).sum() + m.extra(x).sum() * 0.5).backward()
        opt.step()
        out.append({k: v.numpy() for k, v in m.named_parameters()})
    return out


@mpi
@pytest.mark.parametrize("scenario,device", [("branch", "numpy"), ("branch-captured", "c")])
def test_a_parameter_with_a_gradient_on_some_ranks_only_is_stepped_alike_on_every_rank(
    tmp_path, scenario, device
):
    r = launch(scenario, device, tmp_path, limit=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for p0, p1 in ranks_agree_with(tmp_path, "branch", _branch_reference()):
        assert sorted(p0) == sorted(p1) and "grad.extra.weight" in p1
        assert not any(k.startswith("grad.unused") for k in p0)  # no gradient anywhere


@mpi
def test_every_collective_refuses_ranks_that_disagree_on_every_rank_and_they_go_on(tmp_path):
    r = launch("disagree", "numpy", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    cases = ["lengths", "dtypes", "roots", "object roots", "shapes", "names", "extra"]
    cases.append("collectives")
    for rank in (0, 1):
        for case in cases:
            assert f"rank {rank} refused {case}: " in r.stdout, (rank, case, r.stdout)
        assert f"rank {rank} still in step" in r.stdout
    assert "accepted" not in r.stdout
    assert "ranks [1] call another collective or hold other tensors" in r.stdout


@mpi
def test_a_rank_whose_program_ends_early_makes_the_others_raise_at_once(tmp_path):
    start = time.monotonic()
    r = launch("exit", "numpy", tmp_path)
    assert r.returncode != 0
    assert "RankFailed" in r.stderr and "rank 1 of 2 ended its program" in r.stderr
    assert time.monotonic() - start < 30  # the worker's timeout is 60 s


@mpi
def test_a_rank_that_is_killed_ends_the_launch(tmp_path):
    start = time.monotonic()
    r = launch("killed", "numpy", tmp_path)
    assert r.returncode != 0 and time.monotonic() - start < 30
    assert not list(tmp_path.glob("killed_rank0_step3.npz"))


def test_importing_without_mpi4py_works_and_init_says_how_to_install(monkeypatch):
    import limn.distributed as dist

    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setattr(dist, "_world", [None])
    with pytest.raises(RuntimeError, match="uv sync --extra mpi"):
        dist.init()
    with pytest.raises(RuntimeError, match="call distributed.init"):
        dist.current()


@mpi
def test_a_one_rank_world_shards_nothing_and_trains_like_plain_limn():
    from limn import distributed

    world = distributed.init()
    assert (world.rank, world.size) == (0, 1)
    x, y = mpi_worker.batch(1)
    assert world.shard(x) is not None and world.shard(x).shape == x.shape
    model, opt = mpi_worker.build(0)
    ddp = distributed.DataParallel(model, world)
    for s in range(1, 4):
        x, y = mpi_worker.batch(s)
        opt.zero_grad()
        loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
        loss.backward()
        (mean,) = ddp.sync_gradients(loss)
        assert mean.item() == pytest.approx(loss.item(), rel=1e-7)
        opt.step()
    want = mpi_worker.reference(range(1, 4))[-1]
    for k, v in mpi_worker.params(model).items():
        np.testing.assert_array_equal(v, want[k])  # the slot holds grad / 1: the same bits


def test_limn_dist_timeout_sets_the_default_timeout():
    """The default of ``init(timeout=...)``; importing the module needs no MPI."""
    code = "import limn.distributed as d; print(d.DEFAULT_TIMEOUT)"
    env = {**os.environ, "LIMN_DIST_TIMEOUT": "7.5"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "7.5", out.stderr[-2000:]
