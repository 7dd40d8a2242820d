"""limn.generate: kv-cache steps against the windowed forward, one plan per step, the
sampling rule and its random numbers."""

import math
import runpy
from pathlib import Path

import numpy as np
import pytest

import limn
from limn import Tensor
from limn.generate import KVCache, Rng, empty_cache, generate, sample, step_function

EXAMPLE = Path(__file__).parent.parent / "examples" / "train_stories.py"


@pytest.fixture(scope="module")
def GPT():
    return runpy.run_path(str(EXAMPLE))["GPT"]


def _model(GPT, ctx=32, d=32, layers=2, heads=2, vocab=256):
    limn.set_seed(0)
    return GPT(ctx, d, layers, heads, vocab).eval()


@pytest.mark.parametrize("device", ["numpy", "c"])
@pytest.mark.parametrize("shape", [(32, 32, 2, 2), (80, 64, 1, 4), (8, 17, 1, 1, 3)])
def test_each_cached_step_gives_the_windowed_forwards_bits(GPT, device, shape):
    """Step p's logits over the (1, ctx) cache are the bits the (1, ctx) window gives at
    position p, the text after p padded with zeros (on c also those of the (1, p + 1) window);
    ctx 80 takes the fused attention past its 64-key tile; a width of 17 leaves a lane tail
    in every row, over a vocabulary of 3 (a case reported to differ at its last position)."""
    limn.set_device(device)
    model = _model(GPT, *shape)
    ctx = model.ctx
    toks = np.random.default_rng(1).integers(0, model.head.weight.shape[0], ctx).astype(np.int32)
    step = step_function(model)
    kv = [Tensor(a) for a in empty_cache(model)]
    check = {0, 1, 2, 3, 4, 7, 40, ctx - 1}
    with limn.no_grad():
        for p in range(ctx):
            logits, *kv = step(Tensor(toks[None, p : p + 1]), Tensor(np.array([p], np.int32)), *kv)
            if p not in check:
                continue
            window = np.where(np.arange(ctx) <= p, toks, 0).astype(np.int32)
            want = model(Tensor(window[None])).numpy()[0, p]
            assert logits.numpy()[0].tobytes() == want.tobytes(), p
            if device == "c":
                short = model(Tensor(toks[None, : p + 1])).numpy()[0, p]
                assert logits.numpy()[0].tobytes() == short.tobytes(), p


def test_every_step_replays_the_one_plan_the_first_step_compiled(GPT):
    limn.set_device("c")
    model = _model(GPT)
    dev = limn.get_device("c")
    with limn.no_grad():
        generate(model, b"Once", 2)
        plans, hits = dev.stats["plans"], dev.stats["plan_hits"]
        out = generate(model, b"Once upon", 40, top_k=5)  # past ctx 32: the cache restarts
    assert len(out) == 49
    assert dev.stats["plans"] == plans  # no step compiled, not even after the restart
    assert dev.stats["plan_hits"] <= hits + 1  # replayed by capture, not looked up


def test_generation_is_a_function_of_the_seed(GPT):
    model = _model(GPT)
    with limn.no_grad():
        a = generate(model, b"Once", 12, 0.8, 40, seed=3)
        b = generate(model, b"Once", 12, 0.8, 40, seed=3)
        c = generate(model, b"Once", 12, 0.8, 40, seed=4)
    assert a == b and a[:4] == list(b"Once") and a != c


def test_a_full_cache_restarts_from_the_last_half_of_the_text(GPT):
    """After ctx tokens the step sees the last ctx // 2 tokens from position 0: greedy
    tokens past the restart are the windowed forward's greedy tokens over that tail."""
    model = _model(GPT, ctx=16)
    with limn.no_grad():
        out = generate(model, b"Once upon a time", 6, temperature=0)
        text, start = list(b"Once upon a time"), 0
        for _ in range(6):
            if len(text) - start > 16:
                start = len(text) - 8
            logits = model(Tensor(np.array([text[start:]], np.int32))).numpy()[0, -1]
            text.append(int(np.argmax(logits)))
    assert out == text


def test_splitmix64_gives_its_published_first_numbers():
    rng = Rng(1234567)
    assert [rng.next() for _ in range(3)] == [
        6457827717110365317,
        3203168211198807973,
        9817491932198370423,
    ]
    u = Rng(0).uniform()
    assert 0 <= u < 1 and u == (0xE220A8397B1DCDAF >> 11) * 2.0**-53


def test_sampling_follows_the_tempered_top_k_distribution():
    logits = np.array([2.0, 1.0, 0.5, -1.0, 3.0], np.float32)
    rng = Rng(7)
    draws = np.bincount([sample(logits, 0.5, 3, rng) for _ in range(6000)], minlength=5)
    w = np.exp((logits - 3.0) / 0.5)
    w[[2, 3]] = 0  # outside the top 3
    np.testing.assert_allclose(draws / 6000, w / w.sum(), atol=0.02)
    assert sample(logits, 0, None, rng) == 4  # temperature 0: the first maximum
    ties = np.zeros(4, np.float32)
    assert {sample(ties, 1.0, 2, Rng(s)) for s in range(50)} == {0, 1}  # ties in index order


def test_the_sampling_rule_is_its_documented_arithmetic():
    logits = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    for seed in range(20):
        u = Rng(seed).uniform()
        order = sorted(range(256), key=lambda i: (-logits[i], i))[:40]
        w = [math.exp((float(logits[i]) - float(logits[order[0]])) / 0.8) for i in order]
        total = 0.0
        for x in w:
            total += x
        run, want = 0.0, order[-1]
        for i, x in zip(order, w):
            run += x
            if u * total < run:
                want = i
                break
        assert sample(logits, 0.8, 40, Rng(seed)) == want


def test_a_cache_refuses_more_than_one_position_a_step():
    z = Tensor(np.zeros((1, 8, 4), np.float32))
    cache = KVCache(z, z, Tensor(np.array([0], np.int32)))
    with pytest.raises(ValueError, match=r"KVCache.write: .*\(1, 1, 4\)"):
        cache.write(
            Tensor(np.zeros((1, 2, 4), np.float32)), Tensor(np.zeros((1, 2, 4), np.float32))
        )


def test_generate_needs_a_prompt(GPT):
    with pytest.raises(ValueError, match="at least one token"):
        generate(_model(GPT), b"", 3)


def test_the_generation_benchmark_runs_both_sides_in_their_own_processes():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "examples" / "bench_generate.py"
    r = subprocess.run(
        [sys.executable, str(script), "--smoke", "--tokens", "6", "--python"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "limn / torch tok/s per round" in r.stdout
    assert "limn's Python of one captured step" in r.stdout


def test_limn_generate_samples_a_batch_of_prompts_each_as_it_would_alone(GPT):
    model = _model(GPT)
    prompts = Tensor(np.array([list(b"Once"), list(b"Upon")]))
    with limn.no_grad():
        out = limn.generate(model, prompts, 5, 0.8, 40, seed=3)
        assert out.shape == (2, 9) and out.dtype == prompts.dtype
        assert out.tolist()[0] == generate(model, b"Once", 5, 0.8, 40, seed=3)
        assert out.tolist()[1] == generate(model, b"Upon", 5, 0.8, 40, seed=4)
        assert generate(model, [list(b"Once"), list(b"Upon")], 5, 0.8, 40, seed=3) == out.tolist()


def test_limn_generate_runs_any_model_by_its_window_and_names_a_wrong_one(GPT):
    """A module without a kv cache is sampled by running its window again: greedy, the
    same tokens as the cached path; a forward that does not give (B, T, V) is named."""
    model = _model(GPT)

    class Plain(limn.nn.Module):  # what a torch port looks like: forward(idx) -> logits
        def __init__(self, inner):
            self.inner = inner

        def forward(self, idx):
            return self.inner(idx)

    prompts = Tensor(np.array([list(b"Once"), list(b"Upon")]))
    with limn.no_grad():
        windowed = limn.generate(Plain(model), prompts, 6, temperature=0)
        cached = limn.generate(model, prompts, 6, temperature=0)
    assert windowed.tolist() == cached.tolist()

    class Last(Plain):
        def forward(self, idx):
            return self.inner(idx)[:, -1]

    with pytest.raises(ValueError, match=r"Last maps ids \(2, 4\) to \(2, 256\).*\(B, T, vocab\)"):
        limn.generate(Last(model), prompts, 1)
