"""The buffer pool: a compiled device's dead intermediates serve its next runs, never a
buffer someone still holds, within a bound, and with the same bits as fresh memory."""

import numpy as np
import pytest
from limn.runtime.pool import BufferPool

import limn
from limn import Tensor, nn, optim
from limn.runtime.device import get_device, install


def _device(**pool):
    try:
        from limn.runtime.c import CDevice

        get_device("c")  # the default one exists before a test puts its own in its place
        dev = CDevice()
    except RuntimeError as e:
        pytest.skip(f"no c toolchain: {e}")
    if pool:
        dev.pool = BufferPool(**pool)
    return dev


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


def test_an_intermediate_freed_in_a_plan_is_handed_to_the_next_run():
    dev = _device()
    taken = []
    empty = dev.pool.empty
    dev.pool.empty = lambda shape, dtype: taken.append(empty(shape, dtype)) or taken[-1]
    _mlp(dev, *_weights(0))
    first = [a for a in taken if a.size == 128 * 128]
    assert dev.pool.stats()["arrays"] >= 1 and len(first) == 1
    taken.clear()
    before = dev.pool.stats()
    _mlp(dev, *_weights(1))
    again = [a for a in taken if a.size == 128 * 128]
    assert again[0] is first[0]  # the same array, not a new one of the same shape
    assert dev.pool.stats()["hits"] == before["hits"] + 1  # the result, held, is made anew


def test_an_output_a_user_holds_is_never_overwritten_by_a_later_run():
    dev = _device()
    held = [a for i in range(3) for a in _mlp(dev, *_weights(i), hidden=True)]
    kept = [a.copy() for a in held]
    for i in range(3, 8):  # the same plans and others reuse the pool meanwhile
        _mlp(dev, *_weights(i))
        _mlp(dev, *_weights(i), hidden=True)
        x = Tensor(np.full((128, 128), float(i), np.float32))
        dev.realize([((x * 2).exp() + 1).node])
    for a, b in zip(held, kept):
        assert a.tobytes() == b.tobytes()
    pooled = [a for arrays in dev.pool._free.values() for a in arrays]
    assert not any(a is h or np.shares_memory(a, h) for a in pooled for h in held)


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


def test_a_captured_gpt_step_gives_the_same_bits_with_or_without_the_pool():
    """Replays reuse the pool between steps; the pool here poisons what it takes back,
    so a kernel that read memory it did not write would change the losses."""
    want = _gpt(_device(limit=0), 4, captured=False)
    pooled = _device(poison=True)
    assert _gpt(pooled, 4, captured=True) == want
    assert _gpt(_device(poison=True), 4, captured=False) == want
    assert pooled.pool.stats()["hits"] > 0


def test_the_pool_holds_at_most_its_limit_and_drops_the_oldest_first():
    pool = BufferPool(limit=3 * 4096 * 4, smallest=1)
    arrays = [np.empty((4096,), np.float32) for _ in range(5)]
    for a in arrays:
        pool.give(a)
    s = pool.stats()
    assert s["held"] <= pool.limit and s["arrays"] == 3 and s["dropped"] == 2
    assert pool.empty((4096,), np.dtype(np.float32)) is arrays[-1]  # the newest stay
    assert pool.empty((10,), np.dtype(np.float32)) is not None  # a miss makes a new one


def test_a_device_running_many_shapes_stays_within_its_pool_limit():
    dev = _device(limit=1 << 18)
    for n in range(128, 128 + 8 * 32, 32):  # each makes an (n, n) intermediate, 64-484 KiB
        x = Tensor(np.full((n, 16), 0.01, np.float32))
        dev.realize([(x @ x.T).exp().sum(axis=1).node])
        assert dev.pool.held <= dev.pool.limit
    assert dev.pool.stats()["dropped"] > 0


@pytest.mark.parametrize("name", ["LIMN_POOL_MB", "LIMN_PLANS"])
def test_a_setting_that_is_not_a_number_says_what_it_accepts(monkeypatch, name):
    from limn.runtime.c import CDevice

    for bad in ("lots", "-1"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=rf"{name}={bad!r}: expected"):
            CDevice()


def test_limn_pool_mb_sets_the_pools_limit_and_0_turns_it_off(monkeypatch):
    """The knob sets what a new device's pool may hold; at 0 no intermediate is kept."""
    from limn.runtime.c import CDevice

    monkeypatch.setenv("LIMN_POOL_MB", "2")
    assert CDevice().pool.limit == 2 << 20
    monkeypatch.setenv("LIMN_POOL_MB", "0")
    dev = CDevice()
    want = _mlp(_device(), *_weights(0))
    for _ in range(2):
        assert _mlp(dev, *_weights(0)).tobytes() == want.tobytes()
    assert dev.pool.stats()["held"] == 0 and dev.pool.stats()["hits"] == 0


def test_giving_past_the_limit_after_a_key_was_emptied_drops_the_oldest_array():
    pool = BufferPool(limit=2 * 4096 * 4, smallest=1)
    f32 = np.dtype(np.float32)
    first, second = np.empty((4096,), f32), np.empty((2, 2048), f32)
    pool.give(first)
    pool.give(second)
    assert pool.empty((4096,), f32) is first  # the oldest key now holds no array
    pool.give(np.empty((4, 1024), f32))
    pool.give(np.empty((8, 512), f32))  # past the limit: the oldest array goes
    s = pool.stats()
    assert (s["held"], s["arrays"], s["dropped"]) == (pool.limit, 2, 1)
    assert pool.empty((2, 2048), f32) is not second
