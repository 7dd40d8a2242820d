"""The c device, held to the numpy device: the corpus, threads, the disk cache and capture."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpus import CASES, assert_matches, reference

import limn
from ir.kernel.schedule import schedule
from limn import Tensor
from limn.runtime import get_device
from limn.runtime.c import CDevice

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def c():
    return get_device("c")


@pytest.fixture(scope="module")
def serial():
    return CDevice(openmp=False)


def _buffers_of(outs):
    """The input buffers a case's graph reads, so assign cases can compare them afterwards."""
    return [n.arg for n in schedule([t.node for t in outs]).inputs]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_matches_the_numpy_device(case, c):
    outs = case.build()
    got = [b.data for b in c.realize([t.node for t in outs])]
    ref_outs = case.build()  # a fresh graph: realizing one marks its nodes as computed
    want = reference(ref_outs)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, f"{case.name} output {i}")
    if "assign" in case.tags:
        for a, b in zip(_buffers_of(outs), _buffers_of(ref_outs)):
            assert_matches(a.data, b.data, f"{case.name} assigned buffer")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_threaded_nest_matches_serial_bit_for_bit(case, c, serial):
    if "assign" in case.tags:
        pytest.skip("assign writes its inputs; the corpus test covers it")
    threaded = [b.data for b in c.realize([t.node for t in case.build()])]
    alone = [b.data for b in serial.realize([t.node for t in case.build()])]
    for g, w in zip(threaded, alone):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), case.name


def _big_cases():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    w = rng.standard_normal((257, 130)).astype(np.float32)
    return [
        lambda: Tensor(x) @ Tensor(w),
        lambda: Tensor(x) @ Tensor(w.T.copy()).T,
        lambda: (Tensor(x) * 2 + 1).relu().sum(),
        lambda: Tensor(x).softmax(1),
        lambda: Tensor(x).max(0),
        lambda: Tensor(x).pad(((1, 1), (3, 2))).exp().sum(0),
    ]


@pytest.mark.parametrize("i", range(6))
def test_large_nests_use_threads_and_still_match_serial_and_numpy(i, c, serial):
    build = _big_cases()[i]
    threaded = c.realize([build().node])[0].data
    alone = serial.realize([build().node])[0].data
    assert threaded.tobytes() == alone.tobytes()
    want = get_device("numpy").realize([build().node])[0].data
    np.testing.assert_allclose(threaded, want, rtol=2e-5, atol=2e-5)


def test_thread_count_does_not_change_a_bit(c):
    x = np.random.default_rng(3).standard_normal((512, 300)).astype(np.float32)
    outs = []
    for n in (1, 2, 3):
        c.set_threads(n)
        outs.append(c.realize([(Tensor(x) @ Tensor(x).T).sum(1).node])[0].data.tobytes())
    c.set_threads(limn.runtime.c.default_threads())
    assert outs[0] == outs[1] == outs[2]


def test_a_training_step_compiles_once(c):
    limn.set_seed(0)
    w = Tensor.randn((8, 4), requires_grad=True, device="c")
    x = Tensor.randn((16, 8), device="c")
    before = c.stats["plans"]
    for _ in range(3):
        loss = ((x @ w).relu() ** 2).mean()
        loss.backward()
        limn.realize(w.assign(w.detach() - w.grad * 0.1), loss)
        w.grad = None
    assert c.stats["plans"] - before == 1  # the first step plans; the others hit the cache


def test_disk_cache_survives_a_second_process(tmp_path):
    code = (
        "import limn; from limn import Tensor; limn.set_device('c');"
        "x = Tensor.ones((5, 7)); print((x * 3 + 1).sum().item());"
        "print(limn.get_device('c').toolchain.stats['compiles'])"
    )
    env = {**os.environ, "LIMN_CACHE_DIR": str(tmp_path)}
    run = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT
    )
    first, second = run(), run()
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["140.0", "1"]
    assert second.stdout.split() == ["140.0", "0"]  # loaded from disk, not compiled
    mode = (tmp_path / "c").stat().st_mode & 0o777
    assert mode == 0o700


def test_corrupted_cache_entry_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path))
    dev = CDevice()
    x = Tensor(np.arange(6, dtype=np.float32))
    assert dev.realize([(x * 2).node])[0].data.tolist() == [0, 2, 4, 6, 8, 10]
    (so,) = list((tmp_path / "c").glob("*.so"))
    broken = so.with_suffix(".tmp")
    broken.write_bytes(so.read_bytes()[:100])  # truncated bytes under the entry's name
    os.replace(broken, so)  # a new inode: the library this process mapped stays intact
    fresh = CDevice()
    before = fresh.toolchain.stats["compiles"]
    assert fresh.realize([(Tensor(np.arange(6, dtype=np.float32)) * 2).node])[0].data[5] == 10
    assert fresh.toolchain.stats["compiles"] == before + 1


def test_set_device_c_without_a_compiler_says_why(tmp_path):
    code = "import limn; limn.set_device('c')"
    env = {**os.environ, "PATH": str(tmp_path), "LIMN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("CC", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "no C compiler" in r.stderr and "'cc' is not on PATH" in r.stderr


def test_ir_stage_c_prints_exactly_the_source_the_device_compiles(c, monkeypatch):
    if not c.openmp:
        pytest.skip("this cc has no OpenMP; ir(x, stage='c') prints the OpenMP build")
    handed: list[str] = []
    compile_ = c.toolchain.libraries
    monkeypatch.setattr(
        c.toolchain, "libraries", lambda srcs: handed.extend(srcs) or compile_(srcs)
    )
    a = Tensor(np.random.default_rng(7).standard_normal((37, 11), dtype=np.float32))
    y = ((a @ a.T).exp().sum(1) / 3.0).sqrt()  # a contraction, a reduce, elementwise
    text = limn.ir(y, stage="c")
    want = np.sqrt(np.exp(a.numpy() @ a.numpy().T).sum(1) / 3.0)
    np.testing.assert_allclose(c.realize([y.node])[0].data, want, rtol=1e-5)
    assert len(handed) == 1 and text == handed[0]
    assert "void k0(" in text and "#pragma omp" in text


def test_gather_out_of_range_raises_on_the_c_device(c):
    src = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    idx = Tensor(np.array([[0, 5], [1, 2], [3, 0]]))
    with pytest.raises(IndexError, match="out of range"):
        c.realize([src.gather(1, idx).node])


def test_complex_is_refused_by_name(c):
    from ir.c.render import units
    from ir.graph import dtypes
    from ir.kernel.kernel import BufferSpec, KernelGraph

    graph = KernelGraph((BufferSpec(dtypes.complex64, (2,)),), 1, (), ())
    with pytest.raises(TypeError, match="complex64 is not supported"):
        units(graph)


def test_capture_replay_equals_the_uncaptured_loop():
    limn.set_device("c")
    try:
        results = []
        for captured in (False, True):
            limn.set_seed(0)
            w = Tensor.randn((6, 3), requires_grad=True)
            b = Tensor.zeros((3,), requires_grad=True)

            def step(x, y, w=w, b=b):
                w.grad = b.grad = None
                loss = ((x @ w + b - y) ** 2).mean()
                loss.backward()
                limn.realize(
                    w.assign(w.detach() - w.grad * 0.1), b.assign(b.detach() - b.grad * 0.1)
                )
                return loss

            f = limn.capture(step) if captured else step
            rng = np.random.default_rng(5)
            losses = []
            for _ in range(4):
                x = Tensor(rng.standard_normal((10, 6)).astype(np.float32))
                y = Tensor(rng.standard_normal((10, 3)).astype(np.float32))
                losses.append(f(x, y).numpy().tobytes())
            results.append((losses, w.numpy().tobytes(), b.numpy().tobytes()))
        assert results[0] == results[1]
    finally:
        limn.set_device("numpy")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_c_passes_keep_what_the_nest_means_under_the_interpreter(case):
    from ir.c.passes import c_passes
    from ir.loop.interp import run

    got = run([t.node for t in case.build()], passes=c_passes())
    want = reference(case.build())
    for i, (g, w) in enumerate(zip(got, want)):
        if g is not None:
            assert_matches(g, w, f"{case.name} output {i}")


def test_a_long_float32_sum_is_accurate_and_the_same_on_every_thread_count(c):
    x = np.random.default_rng(11).random(1 << 24, dtype=np.float32)
    exact = np.maximum(x.astype(np.float64) * 2 + 1, 0).sum()
    bits = set()
    for n in (1, 2):
        c.set_threads(n)
        v = c.realize([((Tensor(x) * 2 + 1).relu().sum()).node])[0].data
        assert abs(float(v) - exact) / exact < 1e-6
        bits.add(v.tobytes())
    c.set_threads(limn.runtime.c.default_threads())
    assert len(bits) == 1


def test_lanes_and_blocks_are_printed_in_the_nest():
    from ir.c.passes import c_passes

    text = limn.ir(Tensor.randn((1 << 16,)).sum(), passes=c_passes())
    assert "DEFACC  acc0[4, 16]" in text and "lanes" in text and "parallel=1" in text
    assert "FOLD    acc0 = ADD pairwise over [4, 16]" in text


def test_pad_split_changes_no_bit_and_cuts_the_loop():
    from ir.c.passes import c_passes, split_pad_masks

    plain = CDevice(passes=[p for p in c_passes() if p is not split_pad_masks])
    split = CDevice()
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    k = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)

    def graph():
        xp = Tensor(x).pad(((0, 0), (0, 0), (1, 1), (1, 1)))
        taps = [xp[:, :, i : i + 12, j : j + 12] for i in range(3) for j in range(3)]
        patches = limn.stack(taps, -1).reshape(2, 1, 3, 12, 12, 9)
        return (patches * Tensor(k).reshape(1, 4, 3, 1, 1, 9)).sum((2, 5)).node

    a = plain.realize([graph()])[0].data
    b = split.realize([graph()])[0].data
    assert a.tobytes() == b.tobytes()
    text = limn.ir(Tensor(x).pad(((0, 0), (0, 0), (1, 1), (1, 1))).exp(), passes=c_passes())
    assert "LOOP    1 <= i3 < 13" in text and " if 1 <= i3" not in text


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    spacing = np.spacing(np.abs(want).astype(np.float32))
    return float(np.max(np.abs(got.astype(np.float64) - want) / spacing))


def test_the_vectorizable_exp_and_log_stay_within_a_few_ulp(c):
    rng = np.random.default_rng(12)
    x = np.concatenate([rng.uniform(-87, 88, 20000), rng.uniform(-1, 1, 2000)]).astype(np.float32)
    got = c.realize([Tensor(x).exp().node])[0].data
    assert _ulps(got, np.exp(x.astype(np.float64))) <= 2
    y = np.exp(rng.uniform(-80, 80, 20000)).astype(np.float32)
    y = np.concatenate([y, rng.uniform(0.5, 2, 2000).astype(np.float32), [1e-40, 3e38]])
    y = y.astype(np.float32)
    got = c.realize([Tensor(y).log().node])[0].data
    assert _ulps(got, np.log(y.astype(np.float64))) <= 2
    edge = np.array([0, np.inf, -np.inf, np.nan, 100, -200], np.float32)
    with np.errstate(all="ignore"):
        want_exp, want_log = np.exp(edge), np.log(edge)
    np.testing.assert_array_equal(c.realize([Tensor(edge).exp().node])[0].data, want_exp)
    np.testing.assert_array_equal(c.realize([Tensor(edge).log().node])[0].data, want_log)


def test_tiny_graphs_can_run_on_the_reference_instead_of_compiling(monkeypatch):
    monkeypatch.setenv("LIMN_TINY", "64")
    dev = CDevice()
    small = dev.realize([(Tensor(np.arange(6.0, dtype=np.float32)) * 2).node])[0].data
    assert small.tolist() == [0, 2, 4, 6, 8, 10] and dev.stats["plans"] == 0
    big = dev.realize([(Tensor(np.ones(100, np.float32)) * 2).sum().node])[0].data
    assert float(big) == 200 and dev.stats["plans"] == 1


def test_custom_siblings_run_as_one_call_on_the_c_device():
    from ir.graph import dtypes
    from ir.graph.node import Node
    from ir.graph.ops import Op

    dev = CDevice()
    calls = []

    def twice(vals, params):
        calls.append(params)
        return [vals[0] * 2, vals[0] * 3]

    dev.register_kernel("twice", twice)
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    src = (a + 1).node
    outs = [Node(Op.CUSTOM, dtypes.float32, (2, 3), (src,), ("twice", i, ())) for i in range(2)]
    got = [b.data for b in dev.realize(outs)]
    np.testing.assert_array_equal(got[0], (a.numpy() + 1) * 2)
    np.testing.assert_array_equal(got[1], (a.numpy() + 1) * 3)
    assert len(calls) == 1


def test_tensors_move_freely_between_the_host_devices():
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device="numpy")
    b = Tensor(np.ones((3, 2), np.float32), device="c")
    on_c = (b.T + a).realize()  # the left operand's device runs it, reading numpy's bytes
    assert on_c.device == "c"
    back = (a * 2 + on_c).numpy()  # and numpy reads the bytes c produced
    np.testing.assert_array_equal(back, a.numpy() * 3 + 1)


def test_a_host_call_replays_between_the_recorded_kernels():
    from limn.capture import host_call

    limn.set_device("c")
    try:
        held = Tensor(np.zeros(3, np.float32))  # a buffer that outlives the calls
        box = held.node.arg.data
        seen = []

        def step(x):
            limn.realize(x * 2)
            host_call(lambda: (np.add(box, 1, out=box), seen.append(box.copy())))
            return x + held

        f = limn.capture(step)
        outs = [f(Tensor(np.full(3, float(i), np.float32))).numpy() for i in range(3)]
        assert [s[0] for s in seen] == [1, 2, 3]  # the host call ran on every replay
        assert [o[0] for o in outs] == [1, 1 + 2, 2 + 3]
    finally:
        limn.set_device("numpy")


def test_two_processes_compiling_one_kernel_publish_the_same_bytes(tmp_path, monkeypatch):
    # a library records no file name of its source, so racing compiles agree byte for byte
    # (MPI ranks and cubed's worker processes share one cache)
    libs = []
    for sub in ("one", "two"):
        monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path / sub))
        dev = CDevice()
        assert dev.realize([(Tensor(np.arange(4, dtype=np.float32)) * 3).node])[0].data[3] == 9
        (so,) = (tmp_path / sub / "c").glob("*.so")
        libs.append((so.name, so.read_bytes()))
    assert libs[0] == libs[1]
