"""examples/train_stories.py for a handful of steps: the loss falls, a checkpoint resumes
the same trajectory, and nothing reads outside the repository."""

import runpy
from pathlib import Path

import numpy as np

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


def test_the_shipped_slice_is_small_and_carries_its_license():
    data = EXAMPLE.parent / "data"
    assert (data / "tinystories-sample.txt").stat().st_size <= 256 * 1024
    assert "CDLA-Sharing-1.0" in (data / "README.md").read_text()
    assert "shared" not in EXAMPLE.read_text()  # a fresh clone has no ../shared
