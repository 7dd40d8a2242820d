"""The plan driver: a c device plan runs as one C call over its steps, its intermediates
in one arena made once per plan and reused, never in a buffer someone still holds; what
``limn.ir`` prints is the plan that runs."""

import re

import numpy as np
import pytest

import limn
from limn import Tensor, nn, optim
from limn.runtime.device import get_device, install
from limn.runtime.driver import COPY, HOST, pack
from limn.runtime.target import detect


def _device(**settings):
    try:
        from limn.runtime.c import CDevice

        get_device("c")  # the default one exists before a test puts its own in its place
        return CDevice(**settings)
    except RuntimeError as e:
        pytest.skip(f"no c toolchain: {e}")


def _mlp(dev, x, w1, w2, hidden=False):
    """relu(x @ w1) @ w2 on ``dev``: its (128, 128) hidden layer is an intermediate, or
    with ``hidden`` a result as well (then both are returned)."""
    h = (Tensor(x) @ Tensor(w1)).relu()
    roots = [h.node] if hidden else []
    out = [b.data for b in dev.realize([*roots, (h @ Tensor(w2)).node])]
    return out if hidden else out[0]


def _weights(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (64, 128), (128, 32))]


def test_a_plans_arena_is_made_once_and_reused_by_its_next_runs():
    dev = _device()
    want = _mlp(dev, *_weights(0))
    (plan,) = dev.plans.values()
    (arena,) = plan.runner.free
    assert plan.runner.size >= 128 * 128 * 4  # the hidden layer lives there
    for seed in (1, 0):
        got = _mlp(dev, *_weights(seed))
        assert plan.runner.free == [arena]  # the same memory, not a new one
    assert got.tobytes() == want.tobytes()


def test_intermediates_whose_lives_do_not_meet_share_bytes_and_the_others_do_not():
    lives = {0: [0, 1], 1: [1, 2], 2: [2, 3], 3: [0, 3]}
    where, size = pack(lives, [100, 100, 100, 64])
    assert where[0] == where[2]  # 0 dies at kernel 1, 2 is born at kernel 2
    spans = {b: range(where[b], where[b] + 128 if b < 3 else where[b] + 64) for b in lives}
    for a in lives:
        for b in lives:
            meet = lives[a][0] <= lives[b][1] and lives[b][0] <= lives[a][1]
            if a != b and meet:
                assert not set(spans[a]) & set(spans[b]), (a, b)
    assert size <= 3 * 128


def test_an_output_a_user_holds_is_never_overwritten_by_a_later_run():
    dev = _device()
    held = [a for i in range(3) for a in _mlp(dev, *_weights(i), hidden=True)]
    kept = [a.copy() for a in held]
    for i in range(3, 8):  # the same plans and others reuse their arenas meanwhile
        _mlp(dev, *_weights(i))
        _mlp(dev, *_weights(i), hidden=True)
        x = Tensor(np.full((128, 128), float(i), np.float32))
        dev.realize([((x * 2).exp() + 1).node])
    for a, b in zip(held, kept):
        assert a.tobytes() == b.tobytes()
    arenas = [arena[4] for plan in dev.plans.values() for arena in plan.runner.free]
    assert arenas and not any(np.shares_memory(a, h) for a in arenas for h in held)


def _gpt(dev, steps, captured):
    """Losses and final weights of a few AdamW steps of a small GPT (fused attention) on
    ``dev``, called plainly or through ``limn.capture``."""
    old = install("c", dev)  # _device made the default c device first: old is never None
    limn.set_device("c")
    try:
        limn.set_seed(0)
        block, head = nn.GPTBlock(32, 2, activation="relu"), nn.Linear(32, 64)
        params = [*block.parameters(), *head.parameters()]
        opt = optim.AdamW(params, lr=1e-2)
        rng = np.random.default_rng(3)
        x = Tensor(rng.standard_normal((2, 64, 32)).astype(np.float32))
        y = Tensor(rng.integers(0, 64, (128,)).astype(np.int32))

        def step():
            opt.zero_grad()
            loss = nn.cross_entropy(head(block(x)).reshape(-1, 64), y)
            loss.backward()
            opt.step(loss)
            return loss

        f = limn.capture(step) if captured else step
        losses = [f() for _ in range(steps)]  # every returned loss is held to the end
        assert not captured or f.records == 1
        return [t.numpy().tobytes() for t in losses], [p.numpy().tobytes() for p in params]
    finally:
        install("c", old)
        limn.set_device("numpy")


def test_a_captured_gpt_step_gives_the_same_bits_as_calling_it():
    """Replays run the recorded plans again on their arenas: the losses and the weights
    are the bits of plain calls."""
    want = _gpt(_device(), 4, captured=False)
    assert _gpt(_device(), 4, captured=True) == want


def test_a_setting_that_is_not_a_number_says_what_it_accepts(monkeypatch):
    from limn.runtime.c import CDevice

    for bad in ("lots", "-1"):
        monkeypatch.setenv("LIMN_PLANS", bad)
        with pytest.raises(ValueError, match=rf"LIMN_PLANS={bad!r}: expected"):
            CDevice()


def test_ir_prints_the_plan_the_device_runs_with_its_passes_and_held_values():
    """With other passes than the default, and a value the runtime holds: the kernels
    ``limn.ir`` prints are the kernels the run launches, one driver row each, and the C
    it prints holds every function those rows call."""
    from ir.c.passes import c_passes

    dev = _device(passes=c_passes(detect())[:-1])
    old = install("c", dev)
    try:
        rng = np.random.default_rng(0)
        a, b = (Tensor(rng.standard_normal((16, 16)).astype(np.float32), device="c") for _ in "ab")
        h = (a @ b).relu()
        h.sum().item()  # h is held now
        z = (h * 2).exp().sum(axis=1) + (a @ b).max()
        text, c_text = limn.ir(z, stage="loop"), limn.ir(z, stage="c")
        printed = re.findall(r"^k(\d+) ", text, re.M)
        assert " = held " in text
        with limn.profile() as prof:
            z.numpy()
        launches = sum(r["calls"] for r in prof.stats())
        (plan,) = [p for p in dev.plans.values() if len(p.graph.kernels) == len(printed)]
        rows = [r for r in plan.runner.rows if r.kind not in (COPY, HOST)]
        assert len(printed) == len(plan.graph.kernels) == len(rows) == launches
        assert all(f" {r.fn}(" in c_text for r in rows)
    finally:
        install("c", old)


def test_the_arenas_of_every_plan_stay_under_limn_memory():
    dev = _device()
    x, w1, w2 = _weights(0)
    for n in range(1, 8):  # seven shapes, each a plan with a (128 - n, 128) hidden layer
        got = _mlp(dev, x[n:], w1, w2)
        np.testing.assert_allclose(got, np.maximum(x[n:] @ w1, 0) @ w2, rtol=1e-4, atol=1e-3)
        dev.memory = 3 * dev.held + 1000 if n == 1 else dev.memory  # about three plans' arenas
        assert dev.held <= dev.memory
    assert len(dev.plans) == 3 and dev.held == sum(p.runner.size for p in dev.plans.values())
    np.testing.assert_array_equal(_mlp(dev, x[1:], w1, w2), _mlp(dev, x[1:], w1, w2))  # anew


def test_packed_buffers_whose_lives_meet_never_share_a_byte():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        lives = {}
        for b in range(n):
            start = int(rng.integers(0, 10))
            lives[b] = [0, 10] if rng.random() < 0.2 else [start, int(rng.integers(start, 11))]
        sizes = [int(s) for s in rng.integers(0, 300, n)]
        where, total = pack(lives, sizes)
        span = {b: (where[b], where[b] + max(sizes[b], 1)) for b in lives}
        assert all(o % 64 == 0 and e <= total for o, e in span.values())
        for a in lives:
            for b in range(a):
                if lives[a][0] <= lives[b][1] and lives[b][0] <= lives[a][1]:
                    assert span[a][1] <= span[b][0] or span[b][1] <= span[a][0], (lives, sizes)
        assert total <= sum(-(-max(s, 1) // 64) * 64 for s in sizes)


def test_the_replay_benchmark_runs_on_the_runtimes_api():
    """``examples/bench_replay.py`` reaches into the runtime (``walk``, ``plan_for``, the
    driver's arena): it runs, and reports a plan of its 100 steps."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "examples" / "bench_replay.py"
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"kernels \d+ rows \d+", done.stdout), done.stdout
