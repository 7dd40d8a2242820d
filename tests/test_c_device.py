"""The c device, held to the numpy device: the corpus, threads, the disk cache and capture."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from corpus import CASES, assert_matches, reference
from hypothesis import given, settings
from hypothesis import strategies as st

import ir.c.block as c_block_module
import ir.c.units as c_units
import limn
import limn_array as xp
from ir.c.passes import c_passes
from ir.c.target import ISAS
from ir.c.units import compile
from ir.graph import dtypes
from ir.kernel.schedule import schedule
from ir.loop.interp import run
from ir.printer import ir
from limn import Tensor, cat, where
from limn.runtime import cc, get_device
from limn.runtime.c import CDevice
from limn.runtime.target import detect

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


@pytest.fixture(scope="module")
def eager():
    """A c device of its own, for plans built with the threading threshold lowered."""
    return CDevice()


FIRED: dict[str, set[str]] = {}  # case name -> the loop attributes its nests carried


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_threaded_nest_matches_serial_bit_for_bit(case, eager, serial, monkeypatch):
    if "assign" in case.tags:
        pytest.skip("assign writes its inputs; the corpus test covers it")
    # every corpus nest is small: thread any nest with work at all, so this compares a
    # threaded (and tiled) build with the serial one rather than the same C twice
    monkeypatch.setattr(c_block_module, "MIN_PARALLEL_WORK", 1)
    monkeypatch.setattr(c_block_module, "MIN_PARALLEL_FMAS", 1)
    monkeypatch.setattr(c_block_module, "MIN_BLOCK_WORK", 0)  # and schedule every contraction
    monkeypatch.setattr(c_units, "GENERIC_WORK", 0)  # a generic kernel never threads
    text = ir([t.node for t in case.build()], passes=c_passes(detect()))
    FIRED[case.name] = {a for a in ("parallel=", "tile=") if a in text}
    threaded = [b.data for b in eager.realize([t.node for t in case.build()])]
    alone = [b.data for b in serial.realize([t.node for t in case.build()])]
    for g, w in zip(threaded, alone):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), case.name


def test_the_threaded_corpus_test_ran_threads_and_tiles_of_every_kind():
    if not FIRED:
        pytest.skip("runs after test_threaded_nest_matches_serial_bit_for_bit")
    threaded = [n for n, f in FIRED.items() if "parallel=" in f]
    assert len(threaded) >= len(FIRED) // 2, f"only {threaded} ran threaded"
    for name in (
        "tiled_matmul_with_row_and_column_tails",
        "tiled_matmul_float64",
        "tiled_max_contraction",
    ):
        assert FIRED.get(name) == {"parallel=", "tile="}, (name, FIRED.get(name))


def _big_cases():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    w = rng.standard_normal((257, 130)).astype(np.float32)
    return [
        lambda: Tensor(x) @ Tensor(w),
        lambda: Tensor(x) @ Tensor(w.T.copy()).T,
        lambda: (Tensor(x) * 2 + 1).relu().sum(),
        lambda: Tensor(x).softmax(1),
        lambda: Tensor(x).amax(0),
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


def test_the_plan_cache_keeps_the_most_recently_used_plans(monkeypatch):
    """At most ``max_plans`` plans stay (LIMN_PLANS); a hit makes a plan the most recent;
    a dropped plan met again is built again, with the same bits and nothing compiled, from
    the libraries the device still holds."""
    monkeypatch.setenv("LIMN_PLANS", "2")
    dev = CDevice()
    assert dev.max_plans == 2
    xs = {n: np.arange(n, dtype=np.float32) for n in (3, 4, 5)}

    def run(n):
        return dev.realize([(Tensor(xs[n]) * 2.0 + 1.0).node])[0].data.copy()

    first = run(3)
    libs = list(dev.by_key.values())
    run(4)
    run(3)  # a hit: 3 is now the most recent, 4 the least
    run(5)  # drops 4
    assert dev.stats["plans"] == 3 and len(dev.plans) == 2
    assert sorted(p.graph.buffers[0].shape for p in dev.plans.values()) == [(3,), (5,)]
    compiles, loads = dev.toolchain.stats["compiles"], dev.toolchain.stats["loads"]
    run(4)  # built again (dropping 3), its kernels already compiled
    assert sorted(p.graph.buffers[0].shape for p in dev.plans.values()) == [(4,), (5,)]
    again = run(3)  # built again, the same bits
    assert dev.stats["plans"] == 5 and dev.toolchain.stats["compiles"] == compiles
    assert dev.toolchain.stats["loads"] == loads
    assert np.array_equal(first.view(np.uint32), again.view(np.uint32))
    assert np.array_equal(first, xs[3] * 2 + 1)
    assert all(lib in dev.by_key.values() for lib in libs)


def test_a_realized_node_is_recalled_only_while_it_lives_and_only_for_itself():
    import gc

    from ir.graph.node import Node
    from ir.graph.ops import Op
    from limn.runtime import device

    x = Tensor(np.arange(6, dtype=np.float32))
    node = (x + 1).node
    buf = device.Buffer(dtypes.float32, (6,), np.zeros(6, np.float32))
    device.remember(node, buf)
    assert device.recall(node) is buf and device.recall(x.node) is None
    key = id(node)
    del node
    gc.collect()
    assert key not in device._realized  # the entry went with its node
    # an entry whose node is gone never answers for another node, whatever its id
    other = Node(Op.NEG, dtypes.float32, (6,), (x.node,))
    dead = Node(Op.NEG, dtypes.float32, (6,), (x.node,))
    device._realized[id(other)] = (device.weakref.ref(dead), buf)
    assert device.recall(other) is None
    del device._realized[id(other)]


def test_the_plan_key_numbers_inputs_in_toposort_order_and_shares_aliases(c):
    from ir.graph.node import Node, toposort
    from ir.graph.ops import Op
    from limn.runtime.jit import walk

    plan_key = lambda roots: walk(roots)[:2]  # noqa: E731

    a = Tensor(np.ones((3, 4), np.float32))
    b = Tensor(np.ones((4, 3), np.float32))
    a2 = Tensor._make(Node(Op.BUFFER, a.dtype, a.shape, (), a.node.arg), "c")  # a's bytes
    y = (a @ b).realize()  # a realized node is an input, its graph not walked
    build = lambda u: (((a + b.T) * u).sum() + y.sum() + (y.T @ a2).sum()).node  # noqa: E731
    key, inputs = plan_key([build(a)])
    order = toposort([build(a)], lambda n: n.op == Op.BUFFER)
    assert [n.shape for n in inputs] == [n.shape for n in order if n.op == Op.BUFFER]
    rows, roots = key
    assert len(rows) == len(order) and roots == (len(order) - 1,)
    assert inputs[0] is a.node and inputs[-1] is a2.node and len(inputs) == 4
    assert [r[3] for r in rows if r[0] == "in"] == [0, 1, 2, 0]  # a2 is a: one number
    assert plan_key([build(a)])[0] == key  # the same structure, built again, finds its plan
    assert plan_key([build(b.T)])[0] != key  # another structure under the same shapes
    y2 = (a @ b).realize()  # another buffer in y's place: the same plan
    other = (((a + b.T) * a).sum() + y2.sum() + (y2.T @ a2).sum()).node
    assert plan_key([other])[0] == key and plan_key([other])[1][2] is y2.node
    shared = (((a + b.T) * a).sum() + y.sum() + (y.T @ y).sum()).node  # y read twice
    assert [r[3] for r in plan_key([shared])[0][0] if r[0] == "in"] == [0, 1, 2]


def test_a_slice_at_every_offset_runs_the_plan_the_first_built(c):
    data = Tensor(np.arange(7 * 6 * 4, dtype=np.float32).reshape(7, 6, 4)).realize()
    rows, before = data.numpy(), 0
    for i in range(7):  # batches, rows, column blocks and broadcast rows, as a step takes them
        x, y, col, row = data[i, :-1], data[i, 1:], data[i, :, 1:3], data[i, 2].expand(3, 4)
        picked = limn.stack([data[j % 7, 1] for j in (i, 3 * i + 1, 5 * i + 2)])  # rows, stacked
        got = ((x * 2 - y).sum(0) + col.sum() + row.sum(0) + picked.sum(0)).numpy()
        a = rows[i]
        want = (a[:-1] * 2 - a[1:]).sum(0) + a[:, 1:3].sum() + 3 * a[2]
        want += sum(rows[j % 7, 1] for j in (i, 3 * i + 1, 5 * i + 2))
        np.testing.assert_array_equal(got, want)
        before = c.stats["plans"] if i == 0 else before
    assert c.stats["plans"] == before  # the first slice's plan, found for every other


def test_a_window_read_in_a_batch_that_writes_its_buffer_reads_the_old_bytes(c):
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    s = x[1].sum()  # a window of x's buffer, read lazily
    x.mul_(10)  # written in place when realized with s
    limn.realize(x, s)
    assert s.item() == 4 + 5 + 6 + 7
    np.testing.assert_array_equal(x.numpy(), np.arange(12).reshape(3, 4) * 10)
    assert x[2].numpy().tolist() == [80, 90, 100, 110]


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
    assert first.stdout.split() == ["140.0", "2"]  # the plan's kernels and the driver
    assert second.stdout.split() == ["140.0", "0"]  # loaded from disk, not compiled
    mode = (tmp_path / "c").stat().st_mode & 0o777
    assert mode == 0o700


def test_corrupted_cache_entry_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path))
    dev = CDevice()
    driver = set((tmp_path / "c").glob("*.so"))  # the plan driver's library
    x = Tensor(np.arange(6, dtype=np.float32))
    assert dev.realize([(x * 2).node])[0].data.tolist() == [0, 2, 4, 6, 8, 10]
    (so,) = set((tmp_path / "c").glob("*.so")) - driver
    broken = so.with_suffix(".tmp")
    broken.write_bytes(so.read_bytes()[:100])  # truncated bytes under the entry's name
    os.replace(broken, so)  # a new inode: the library this process mapped stays intact
    fresh = CDevice()
    before = fresh.toolchain.stats["compiles"]
    assert fresh.realize([(Tensor(np.arange(6, dtype=np.float32)) * 2).node])[0].data[5] == 10
    assert fresh.toolchain.stats["compiles"] == before + 1


def test_a_library_pair_of_another_key_under_an_entrys_name_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path))
    x = np.arange(6, dtype=np.float32)
    dev = CDevice()
    dev.keep_plans = False
    driver = set((tmp_path / "c").glob("*.so"))  # the plan driver's library
    dev.realize([(Tensor(x) * 2).node])
    first = set((tmp_path / "c").glob("*.so"))
    dev.realize([(Tensor(x) - 1).node])
    (a,) = first - driver
    (b,) = set((tmp_path / "c").glob("*.so")) - first
    for suffix in (".so", ".sha256"):  # the pair of ``x * 2``, whole, under ``x - 1``'s name
        os.replace(a.with_suffix(suffix), b.with_suffix(suffix))
    fresh = CDevice()
    fresh.keep_plans = False
    before = fresh.toolchain.stats["compiles"]
    assert fresh.realize([(Tensor(x) - 1).node])[0].data.tolist() == (x - 1).tolist()
    assert fresh.toolchain.stats["compiles"] == before + 1


def test_a_library_built_for_another_cpu_is_never_loaded_from_a_shared_cache(tmp_path, monkeypatch):
    """The keys hold the resolved target (its ISA and a digest of the compiler's macros
    under its flags), not the literal ``-march=native``: a cache two CPUs share (a home
    directory on NFS, a warm cache in an image) keeps one library and one plan per CPU."""
    from limn.runtime import plan_cache

    monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path))
    x = np.arange(6, dtype=np.float32)
    here, there = CDevice(), CDevice()
    there.toolchain.target = replace(there.toolchain.target, macros="another cpu's")
    for dev in (here, there):
        dev.keep_plans = False
        before = dev.toolchain.stats["compiles"]
        assert dev.realize([(Tensor(x) * 2).node])[0].data.tolist() == (x * 2).tolist()
        assert dev.toolchain.stats["compiles"] == before + 1
    assert len(list((tmp_path / "c").glob("*.so"))) == 3  # and the driver, built before
    assert plan_cache._settings(here) != plan_cache._settings(there)


def test_the_target_comes_from_the_compiler_with_only_the_flags_it_takes():
    native = detect()
    assert native.isa in ISAS and native.flags[0] == "-march=native"
    assert str(native) in limn.ir(Tensor.ones((4, 4)) @ Tensor.ones((4, 4)), stage="c")
    for isa in ISAS:  # the x86 flag that an ARM gcc rejects, only where it means something
        assert ("-mprefer-vector-width=512" in detect(isa).flags) == (isa == "avx512")
    assert detect("neon").flags == () and detect("neon").lanes(4) == 4
    with pytest.raises(ValueError, match="LIMN_TARGET='sse9' is not a target; accepted: avx512"):
        detect("sse9")
    code = "import limn; print(limn.ir(limn.Tensor.ones((3,)) + 1, stage='c').splitlines()[0])"
    env = {**os.environ, "LIMN_TARGET": "generic"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.stdout.startswith("/* target generic: 16-byte vectors"), r.stderr


@pytest.mark.parametrize("how", ["under a file", "read-only"])
def test_a_cache_directory_that_cannot_be_used_names_limn_cache_dir(tmp_path, monkeypatch, how):
    from limn.runtime import cc

    root = tmp_path / "cache"
    if how == "under a file":
        (tmp_path / "f").write_text("")
        root = tmp_path / "f" / "cache"
    else:
        (root / "c").mkdir(parents=True, mode=0o700)
        (root / "c").chmod(0o500)
        if os.geteuid() == 0:  # root may write anywhere: be told no as a user would be
            monkeypatch.setattr(cc.os, "access", lambda p, mode: Path(p) != root / "c")
    monkeypatch.setenv("LIMN_CACHE_DIR", str(root))
    with pytest.raises(cc.CompilerError, match=r"not usable .* set LIMN_CACHE_DIR"):
        cc.find_toolchain()


def test_set_device_c_without_a_compiler_says_why(tmp_path):
    code = "import limn; limn.set_device('c')"
    env = {**os.environ, "PATH": str(tmp_path), "LIMN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("CC", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "no C compiler" in r.stderr and "'cc' is not on PATH" in r.stderr


def test_ir_stage_c_prints_exactly_the_source_the_device_compiles(monkeypatch):
    # a fresh device: the shared one may hold this graph's size-generic function from an
    # earlier test, and then (rightly) hands the compiler only what it lacks
    c = CDevice()
    c.keep_plans = False  # a plan stored by an earlier run would not go to the compiler
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
    assert text == "\n".join(getattr(u, "source", u) for u in handed)
    assert "void k0(" in text and "#pragma omp" in text


def test_small_kernels_compile_in_a_unit_of_their_own_at_O0(c):
    """A kernel of a few iterations costs its compile, not its run: its unit is marked and
    cc builds it at -O0; the large kernel beside it stays at -O3. Both compute the same."""
    from ir.c.units import SMALL_WORK
    from ir.kernel.schedule import schedule

    rng = np.random.default_rng(3)
    big = rng.standard_normal(SMALL_WORK * 4).astype(np.float32)
    tiny = big[:100].copy()
    f = lambda t: ((t * 3.0).exp() + 1.0).sqrt()  # noqa: E731
    outs = [f(Tensor(big, device="c")), f(Tensor(tiny, device="c"))]
    parts = compile(schedule([o.node for o in outs]).graph, None, detect()).all()
    assert [u.quick for u in parts] == [False, True]
    gcc = replace(c.toolchain, tcc=None)  # (tcc, where installed, takes the quick unit)
    quick, slow = (gcc.compiler_for(u)[2] for u in (parts[1], parts[0]))
    assert "-O0" in quick and "-O3" not in quick and "-O3" in slow
    got_big, got_tiny = (b.data for b in c.realize([o.node for o in outs]))
    assert got_tiny.tobytes() == got_big[:100].tobytes()


def test_kernels_of_integers_from_constants_are_computed_when_the_plan_is_built(c):
    """An arange whose reshape is cut (ten nested loops of 2: split_pad_masks made 28k
    instructions of it in PCA) reads no buffer: the plan computes it once, on the host,
    and compiles only what reads data. A float kernel on constants is still compiled."""
    from ir.graph.compose import arange
    from ir.kernel.kernel import constant_kernels

    x = Tensor(np.arange(1000, dtype=np.int64) * 7, device="c")
    pos = arange(x, 1000, dtypes.int64)
    mask = pos.p_cmplt(pos.p_const(500))
    y = x + pos
    f = Tensor(np.zeros(3, np.float32), device="c").p_const(1.5, shape=(4,)).exp()
    roots = [pos.node, mask.node, y.node, f.node]
    graph = schedule(roots).graph
    host = constant_kernels(graph)
    # the (2, ..., 2) sum, its reshape to 1000 (the first root) and the mask
    assert len(host) == 3 and all(graph.kernels[i].kind == "MAP" for i in host)
    u = compile(graph, None, detect())
    compiled = [i for unit in u.units for i in unit.kernels] + sorted(u.calls)
    assert sorted([*host, *compiled]) == list(range(len(graph.kernels)))
    assert graph.kernels[-1].result.dtype == dtypes.float32 and len(graph.kernels) - 1 in compiled
    got = [b.data for b in c.realize(roots)]
    assert np.array_equal(got[0], np.arange(1000)) and np.array_equal(got[1], np.arange(1000) < 500)
    assert np.array_equal(got[2], np.arange(1000) * 8)
    assert np.array_equal(got[3], np.exp(np.full(4, 1.5, np.float32)))
    again = [b.data for b in c.realize([(x + arange(x, 1000, dtypes.int64)).node])]
    assert np.array_equal(again[0], np.arange(1000) * 8)


def test_a_kernel_repeated_over_other_buffers_is_compiled_once(c):
    """Six layers make six copies of each kernel: the plan renders one, the rest call it."""
    rng = np.random.default_rng(3)
    xs = [Tensor(rng.standard_normal((64, 48), dtype=np.float32)) for _ in range(3)]
    ws = [Tensor(rng.standard_normal((48, 48), dtype=np.float32)) for _ in range(3)]
    ys = [(x @ w).relu() * 2.0 for x, w in zip(xs, ws)]
    total = ys[0].sum() + ys[1].sum() + ys[2].sum()
    text = limn.ir(total, stage="c")
    bodies = [line for line in text.splitlines() if line.startswith("void k") and "{ k" not in line]
    calls = [line for line in text.splitlines() if line.startswith("void k") and "{ k" in line]
    assert len(calls) >= 2 and len(bodies) + len(calls) == text.count("void k")
    want = sum(np.maximum(x.numpy() @ w.numpy(), 0).sum() * 2.0 for x, w in zip(xs, ws))
    got = c.realize([total.node])[0].data
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_gather_out_of_range_raises_on_the_c_device(c):
    src = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    idx = Tensor(np.array([[0, 5], [1, 2], [3, 0]]))
    with pytest.raises(IndexError, match="out of range"):
        c.realize([src.gather(1, idx).node])


def test_complex_is_refused_by_name(c):
    from ir.c.units import compile
    from ir.graph import dtypes
    from ir.kernel.kernel import BufferSpec, KernelGraph

    graph = KernelGraph((BufferSpec(dtypes.complex64, (2,)),), 1, (), ())
    with pytest.raises(TypeError, match="complex64 is not supported"):
        compile(graph, None, detect())


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

    got = run([t.node for t in case.build()], passes=c_passes(detect()))
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
        # within half an ulp: the float32 nearest the exact total (the README says so)
        assert abs(float(v) - exact) <= 0.5 * float(np.spacing(np.float32(exact)))
        bits.add(v.tobytes())
    c.set_threads(limn.runtime.c.default_threads())
    assert len(bits) == 1


def test_a_sum_too_small_to_pay_for_a_team_runs_on_the_calling_thread_with_the_same_bits(c, serial):
    from ir.c.block import MIN_PARALLEL_WORK

    for n, team in ((2400, False), (MIN_PARALLEL_WORK * 2, True)):  # blocked sums, both
        x = np.random.default_rng(n).standard_normal(n)
        y = (Tensor(x) * Tensor(x)).sum()
        assert ("omp parallel" in limn.ir(y, stage="c")) == team
        want = serial.realize([(Tensor(x) * Tensor(x)).sum().node])[0].data
        assert y.numpy().tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [1 << 20, 1 << 22, 1 << 24])
def test_a_long_sum_is_as_accurate_as_numpys_pairwise_with_the_same_bits_everywhere(c, serial, n):
    """Lanes that each folded a block of 1024 values in sequence gave 0.1's mean of 2**20
    a relative error of 9.7e-6 (numpy 1.5e-7): blocks of 16 per lane, added by a fixed
    tree, are as accurate, and the numpy device folds in that same order, so both devices,
    every layout and every thread count give one answer."""
    rng = np.random.default_rng(n)
    big = np.zeros(2 * n, np.float32)
    for name, x in {
        "equal": np.full(n, 0.1, np.float32),
        "random": rng.random(n, np.float32),
    }.items():
        exact = x.astype(np.float64).sum()
        ulp = float(np.spacing(np.float32(exact)))  # random data: numpy can be lucky
        big[::2] = x
        square = x.reshape(1024, -1)  # a square's sum: the same bits held transposed
        held = [Tensor(x), Tensor(big)[::2], Tensor(square), Tensor(square.T.copy()).T]
        for f in ("sum", "mean"):
            scale = n if f == "mean" else 1
            numpy_err = abs(float(getattr(x, f)()) * scale - exact)
            nodes = [getattr(t, f)().node for t in held]
            bits = set()
            for dev in (c, serial, get_device("numpy")):
                got = dev.realize(nodes)
                for one in got[:2]:
                    err = abs(float(one.data) * scale - exact)
                    assert err <= max(2 * numpy_err, ulp), (name, f, err / exact)
                bits.add(tuple(b.data.tobytes() for b in got))
            (one,) = bits
            assert one[0] == one[1] and one[2] == one[3], (name, f)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_a_long_half_width_sum_rounds_the_float32_total_and_is_the_same_on_both_devices(c, dtype):
    x = np.full(1 << 20, 0.01, dtype)
    exact = x.astype(np.float64).sum()
    want = np.float32(exact).astype(dtype)  # the one rounding a half-width sum may add
    got = [d.realize([Tensor(x).sum().node])[0].data for d in (c, get_device("numpy"))]
    assert got[0].tobytes() == got[1].tobytes() == want.tobytes()


def test_lanes_and_blocks_are_printed_in_the_nest():
    from ir.c.passes import c_passes

    text = limn.ir(Tensor.randn((1 << 16,)).sum(), passes=c_passes(detect()))
    assert "DEFACC  acc0[256, 16]" in text and "lanes" in text and "parallel" not in text
    assert "FOLD    acc0 = ADD pairwise over [256, 16]" in text  # (too small for a team)
    text = limn.ir(Tensor.randn((1 << 19,)).sum(), passes=c_passes(detect()))
    assert "DEFACC  acc0[2048, 16]" in text and "b0 < 2048  parallel=1" in text


def test_pad_split_changes_no_bit_and_cuts_the_loop(monkeypatch):
    from ir.c.passes import c_passes, split_pad_masks

    # pad splitting is a specialized nest's pass (a generic one keeps every predicate):
    # these small images are specialized here so that the pass is what runs
    monkeypatch.setattr(c_units, "GENERIC_WORK", 0)

    plain = CDevice(passes=[p for p in c_passes(detect()) if p is not split_pad_masks])
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
    text = limn.ir(Tensor(x).pad(((0, 0), (0, 0), (1, 1), (1, 1))).exp(), passes=c_passes(detect()))
    assert "LOOP    1 <= i3 < 13" in text and " if 1 <= i3" not in text


def test_a_pad_along_an_outer_dim_cuts_that_loop_and_no_load_stays_guarded(c, monkeypatch):
    """A padded image's rows guard every load of the inner loop, which cannot settle them:
    the outer loop is cut instead (elementwise work only), so the inner loop vectorizes."""
    from ir.c.passes import c_passes, split_pad_masks

    monkeypatch.setattr(c_units, "GENERIC_WORK", 0)  # specialized, as above

    plain = CDevice(passes=[p for p in c_passes(detect()) if p is not split_pad_masks])
    x = np.random.default_rng(4).standard_normal((2, 3, 12, 12)).astype(np.float32)
    b = np.random.default_rng(5).standard_normal((3, 1, 1)).astype(np.float32)

    def graph():
        return (Tensor(x) + Tensor(b)).relu().pad(((0, 0), (0, 0), (1, 1), (1, 1))).exp()

    text = limn.ir(graph(), passes=c_passes(detect()))
    assert "LOOP    1 <= i2 < 13" in text and " if " not in text
    got = c.realize([graph().node])[0].data
    assert got.tobytes() == plain.realize([graph().node])[0].data.tobytes()
    want = np.exp(np.pad(np.maximum(x + b, 0), ((0, 0), (0, 0), (1, 1), (1, 1))))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # a reduce below the cut keeps its loop whole: a guard on a row it folds stays
    r = limn.ir(Tensor(x).pad(((0, 0), (0, 0), (1, 1), (1, 1))).sum(2), passes=c_passes(detect()))
    assert " if 1 <= r" in r or " if 1 <= i" in r


def test_each_piece_of_a_split_concatenation_computes_its_own_piece_alone(c, monkeypatch):
    """A concatenation's value is the pieces' selects; cut where each piece starts, a WHERE on
    a settled mask picks its side and the other pieces' work is dropped: each loop loads and
    computes one piece (what the LSTM's gate gradients and a long ``cat`` need), with the
    bits the uncut nest computes."""
    from ir.c.passes import c_passes, split_pad_masks

    monkeypatch.setattr(c_units, "GENERIC_WORK", 0)  # specialized, as above
    plain = CDevice(passes=[p for p in c_passes(detect()) if p is not split_pad_masks])
    rng = np.random.default_rng(3)
    parts = [rng.standard_normal((5, w)).astype(np.float32) for w in (7, 20, 3, 30)]

    def graph():
        return limn.cat([Tensor(p).exp() * (k + 1) for k, p in enumerate(parts)], 1)

    (nest,) = [n for n in limn.ir(graph(), passes=c_passes(detect())).split("\n\n") if "MAP" in n]
    pieces = nest.split("LOOP    ")[2:]  # the rows loop, then one loop per piece
    assert len(pieces) == 4 and all(p.count("LOAD") == 1 and p.count("EXP") == 1 for p in pieces)
    got = c.realize([graph().node])[0].data
    assert got.tobytes() == plain.realize([graph().node])[0].data.tobytes()


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


def test_a_reduction_over_a_concatenation_compiles_and_matches_numpy(c):
    # the pad split cuts the reduced axis into pieces after a lane-wise first piece: the
    # folded total must stay assignable (the split gradient of q, k, v into one projection)
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((2, 20, 16)) for _ in range(3)]
    w = rng.standard_normal((48, 16))
    g = limn.cat([Tensor(p, device="c") for p in parts], -1)
    got = (g.reshape(2, 20, 48, 1) * Tensor(w, device="c").reshape(1, 1, 48, 16)).sum(2)
    want = (np.concatenate(parts, -1)[..., None] * w).sum(2)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


# ---- the disk cache under concurrency and interruption ---------------------------------

_COMPILE_SAME = r"""
import sys, time
from limn.runtime.cc import find_toolchain
tc = find_toolchain()
salt, start = sys.argv[1], float(sys.argv[2])
sources = [f"int f(int x){{return x + {k};}} /* {salt} */\n" for k in range(6)]
while time.time() < start:
    pass
assert [lib.f(1) for lib in tc.libraries(sources)] == [1 + k for k in range(6)]
"""


def test_processes_compiling_the_same_new_kernels_at_once_all_succeed(tmp_path):
    env = {**os.environ, "LIMN_CACHE_DIR": str(tmp_path)}
    for round_ in range(2):
        start = time.time() + 1.0  # every process passes its imports, then all compile
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _COMPILE_SAME, f"{round_}-{os.getpid()}", str(start)],
                env=env,
                cwd=ROOT,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-2000:]
    assert not list((tmp_path / "c").glob(f"{cc.WORK_PREFIX}*"))  # nothing left behind


_FAKE_CC = """#!/bin/sh
# a stand-in compiler: a source saying FAIL fails once the other compile is running;
# any other source starts a grandchild that would outlive a kill of this script alone
for a in "$@"; do case "$a" in *.c) src="$a";; esac; done
if grep -q FAIL "$src"; then
    while [ ! -s "$PIDFILE" ]; do sleep 0.01; done
    exit 1
fi
sleep 300 &
echo $! > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"
wait
"""


def _fake_toolchain(tmp_path, monkeypatch):
    fake = tmp_path / "fake-cc"
    fake.write_text(_FAKE_CC)
    fake.chmod(0o755)
    monkeypatch.setenv("PIDFILE", str(tmp_path / "grandchild.pid"))
    cache = cc.private_dir(tmp_path / "cache")
    return cc.Toolchain(str(fake), "fake 1.0", False, cache), tmp_path / "grandchild.pid"


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # exited; waiting only for its new parent to reap it


def test_an_interrupted_compile_kills_the_compilers_whole_process_group(tmp_path, monkeypatch):
    tc, pidfile = _fake_toolchain(tmp_path, monkeypatch)
    with pytest.raises(cc.CompilerError, match="compiling a kernel failed"):
        tc.libraries(["/* FAIL */", "int f(void){return 1;}"])
    grandchild = int(pidfile.read_text())
    deadline = time.time() + 10
    while not _gone(grandchild) and time.time() < deadline:
        time.sleep(0.05)
    if not _gone(grandchild):
        os.kill(grandchild, 9)
        pytest.fail("the compiler's child outlived the interrupted compile")
    assert not list(tc.cache_dir.iterdir())  # no temporary file left behind


def test_the_work_files_of_a_killed_compiling_process_are_swept(tmp_path, monkeypatch):
    tc, pidfile = _fake_toolchain(tmp_path, monkeypatch)
    code = (
        "import sys; from pathlib import Path; from limn.runtime import cc;"
        "cc.Toolchain(sys.argv[1], 'fake 1.0', False, Path(sys.argv[2]))"
        ".library('int f(void){return 1;}')"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, tc.cc, str(tc.cache_dir)], cwd=ROOT)
    deadline = time.time() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no finally block runs, its work directory stays behind
    proc.wait()
    os.kill(int(pidfile.read_text()), 9)
    assert list(tc.cache_dir.glob(f"{cc.WORK_PREFIX}*"))
    real = cc.find_toolchain()
    real.cache_dir = tc.cache_dir
    assert real.library("int g(void){return 7;}").g() == 7
    assert not list(tc.cache_dir.glob(f"{cc.WORK_PREFIX}*"))


# ---- views past 2**31 elements ---------------------------------------------------------

BIG = 2**31 + 24  # past int32, and not a whole number of lanes or blocks


def test_a_reduce_over_more_than_2_31_elements_of_an_expanded_view_is_right(c):
    ones = Tensor(np.ones(1, np.float32), device="c").expand(BIG)
    assert ones.sum().item() == float(np.float32(BIG))  # a float32 total rounds once here
    assert Tensor(np.ones(1, np.int8), device="c").expand(BIG).sum().item() == BIG  # int64
    ramp = Tensor(np.arange(8, dtype=np.float32), device="c")
    assert ramp.expand(BIG // 8, 8).max().item() == 7.0
    padded = Tensor(np.full(16, 2.0, np.float32), device="c").pad(((BIG - 16, 0),))
    assert padded.sum().item() == 32.0  # the mask checks run on 64-bit indices


# ---- half widths: every node rounds to its dtype, wherever the kernels were cut ----------

HALF_SHAPE = (6, 16)
_HALF_BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.abs() + 0.5),
    "maximum": lambda a, b: a.maximum(b),
    "where": lambda a, b: where(a < b, a, b * 3),
}
_HALF_UNARY = {
    "neg": lambda a: -a,
    "sqrt": lambda a: a.abs().sqrt(),
    "square": lambda a: a * a + 1,
    "via float32": lambda a: (a.float() * 1.1).cast(a.dtype),  # a float32 node, then back
    "via the other half": lambda a: a.cast(_other_half(a.dtype)).cast(a.dtype),
    "scaled": lambda a: a * 0.1 + a,
}


def _other_half(d):
    return dtypes.bfloat16 if d == dtypes.float16 else dtypes.float16


def _half_expr(draw, leaves, depth):
    """A random expression over ``leaves`` using only ops every device rounds correctly."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves))
    if draw(st.booleans()):
        op = draw(st.sampled_from(sorted(_HALF_UNARY)))
        return _HALF_UNARY[op](_half_expr(draw, leaves, depth - 1))
    op = draw(st.sampled_from(sorted(_HALF_BINARY)))
    return _HALF_BINARY[op](
        _half_expr(draw, leaves, depth - 1), _half_expr(draw, leaves, depth - 1)
    )


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(
        np.uint8 if a.dtype.itemsize == 1 else f"u{a.dtype.itemsize}"
    )


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.sampled_from([dtypes.float16, dtypes.bfloat16]), st.data())
def test_fused_half_width_expressions_match_the_numpy_device_bit_for_bit(d, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    leaves = [Tensor(rng.standard_normal(HALF_SHAPE) * 4, dtype=d) for _ in range(3)]
    out = _half_expr(data.draw, leaves, 4)
    outs = [out, out.float()]  # the same value read at float32 must be a value d holds
    want = reference(outs)
    got_c = [b.data for b in get_device("c").realize([t.node for t in outs])]
    got_nest = run([t.node for t in outs])
    for w, g, n in zip(want, got_c, got_nest):
        assert np.array_equal(_bits(g), _bits(w)), f"c: {(_bits(g) != _bits(w)).sum()} cells"
        assert np.array_equal(_bits(n), _bits(w)), "the nest interpreter"


def test_the_issue_examples_round_every_half_width_node():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float16) for _ in range(2))
    ta, tb = Tensor(a, device="c"), Tensor(b, device="c")
    got = (ta * tb + ta).numpy()
    want = ((a * b).astype(np.float16) + a).astype(np.float16)
    assert np.array_equal(_bits(got), _bits(want))
    bf = (ta.float().bfloat16() * tb.float().bfloat16()).float().numpy()
    assert np.array_equal(bf, bf.astype(ml_dtypes.bfloat16).astype(np.float32))  # bf16 holds it


def test_a_host_call_replays_between_the_recorded_kernels():
    from limn.capture import host_call

    limn.set_device("c")
    try:
        held = Tensor(np.zeros(3, np.float32))  # a buffer that outlives the calls
        box = held.node.arg.data

        def step(x):
            limn.realize(x * 2)
            host_call(lambda: np.add(box, 1, out=box))
            return x + held

        f = limn.capture(step)
        outs = [f(Tensor(np.full(3, float(i), np.float32))).numpy() for i in range(3)]
        assert box[0] == 3 and f.records == 1  # the host call ran on every replay
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
        libs.append(
            sorted((so.name, so.read_bytes()) for so in (tmp_path / sub / "c").glob("*.so"))
        )
    assert libs[0] == libs[1]


def test_the_openmp_team_spins_only_briefly_unless_the_user_chose(monkeypatch):
    """Idle threads spinning for ms take the core the main thread needs on a busy machine."""
    from limn.runtime.c import short_spin

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    dev = CDevice()
    if dev.openmp and "clang" not in dev.toolchain.version.lower():
        assert os.environ.get("GOMP_SPINCOUNT") == "10000"
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    short_spin("clang version 17.0.6")
    assert os.environ.get("OMP_WAIT_POLICY") == "passive" and "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    short_spin("cc (Debian 12.2.0-14+deb12u1) 12.2.0")
    assert os.environ["OMP_WAIT_POLICY"] == "active" and "GOMP_SPINCOUNT" not in os.environ


def test_limn_device_picks_the_default_device_else_the_compiled_cpu_device_where_cc_works():
    code = "import limn; print(limn.get_device().name)"
    bare = {k: v for k, v in os.environ.items() if k != "LIMN_DEVICE"}
    cases = [({"LIMN_DEVICE": "c"}, "c"), ({"LIMN_DEVICE": "numpy"}, "numpy"), ({}, "c")]
    cases += [({"LIMN_DEVICE": "cpu"}, "c"), ({"CC": "no-such-cc"}, "numpy")]
    for env, name in cases:
        cmd = [sys.executable, "-c", code]
        out = subprocess.run(cmd, env={**bare, **env}, capture_output=True, text=True, timeout=300)
        assert out.stdout.strip() == name, (env, out.stderr[-2000:])
        # one line says why a program runs on the slow reference when it did not ask to
        notice = "no working C compiler, so the default device is numpy" in out.stderr
        assert notice == (env == {"CC": "no-such-cc"}), (env, out.stderr[-2000:])


def test_the_cache_lives_in_limn_cache_dir_else_xdg_cache_home(monkeypatch, tmp_path):
    import stat

    monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cc.cache_root() == tmp_path / "mine"
    assert CDevice().toolchain.cache_dir == tmp_path / "mine" / "c"
    assert stat.S_IMODE((tmp_path / "mine" / "c").stat().st_mode) == 0o700
    monkeypatch.delenv("LIMN_CACHE_DIR")
    assert cc.cache_root() == tmp_path / "xdg" / "limn"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cc.cache_root() == Path.home() / ".cache" / "limn"


def test_set_device_c_with_cc_naming_no_compiler_says_why(monkeypatch):
    import shutil

    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(RuntimeError, match="no C compiler: 'no-such-cc' is not on PATH"):
        CDevice()
    found = shutil.which("cc")
    monkeypatch.setenv("CC", found)
    assert CDevice().toolchain.cc == found


def test_omp_num_threads_sets_the_c_devices_thread_count(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert CDevice().threads == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert CDevice().threads == limn.runtime.target.physical_cores()


@pytest.mark.parametrize("device", ["numpy", "c"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7, 50), (64, 64), (3, 1000), (2, 70001)])
def test_a_reduce_gives_the_same_bits_for_an_array_built_whole_or_from_slices(device, dtype, shape):
    """SciPy's bootstrap concatenates batches and compares their std to one batch's, bit
    for bit: the c device's order must depend on the values' logical order alone."""
    import limn_array as xp

    a = np.random.default_rng(0).standard_normal(shape).astype(dtype) * 10
    a[0, 3] = -0.0
    x = xp.asarray(a, device=xp.Device(device))
    cuts = sorted({0, 5, 6, 17, 40, shape[1] // 2 + 1, shape[1]})
    y = xp.concat([x[:, i:j] for i, j in zip(cuts, cuts[1:]) if i < j], axis=1)
    rows = xp.concat([x[:1], x[1:]], axis=0)
    for f in (xp.sum, xp.max, xp.mean, xp.std, xp.var):
        for axis in (-1, 0):
            want = np.asarray(f(x, axis=axis))
            for other in (y, rows):
                got = np.asarray(f(other, axis=axis))
                assert got.tobytes() == want.tobytes(), (f.__name__, axis)


def test_a_long_reduce_over_a_concatenation_folds_into_the_whole_arrays_blocks(monkeypatch):
    from ir.c import passes
    from ir.c.passes import c_passes
    from ir.loop.interp import run

    monkeypatch.setattr(passes, "BLOCK", 64)  # blocks of 64: long from 256 elements on
    parts = [np.random.default_rng(i).standard_normal(n).astype(np.float32) for i, n in
             enumerate((100, 3, 90, 131))]  # fmt: skip
    whole = np.concatenate(parts)
    dev = CDevice()
    dev.keep_plans = False
    want = dev.realize([Tensor(whole).sum().node])[0].data
    pieced = [cat([Tensor(p) for p in parts]).sum().node]
    assert dev.realize(pieced)[0].data.tobytes() == want.tobytes()
    assert run(pieced, passes=c_passes(detect()))[0].tobytes() == want.tobytes()


def _layouts(a: np.ndarray) -> dict:
    """The same logical array, laid out six ways: whole, from slices along the first and
    the last axis, as a view of a buffer holding it with its first two axes swapped, or its
    last axis first, and as a strided view."""
    h, w = a.shape[0] // 2 + 1, a.shape[-1] // 3 + 1
    swapped = Tensor(np.ascontiguousarray(np.swapaxes(a, 0, 1)))
    big = np.zeros((2 * a.shape[0], *a.shape[1:]), a.dtype)
    big[::2] = a
    return {
        "whole": Tensor(a),
        "rows": cat([Tensor(a[:h]), Tensor(a[h:])], 0),
        "columns": cat(
            [Tensor(a[..., :w]), Tensor(a[..., w : w + 1]), Tensor(a[..., w + 1 :])], -1
        ),
        "transposed": swapped.permute(1, 0, *range(2, a.ndim)),
        "strided": Tensor(big)[::2],
        "turned": Tensor(np.ascontiguousarray(np.moveaxis(a, -1, 0))).permute(*range(1, a.ndim), 0),
    }


@pytest.mark.parametrize("device", ["numpy", "c"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(40, 45), (3, 5, 37)])
def test_a_reduce_over_several_axes_gives_the_same_bits_whatever_the_layout(device, dtype, shape):
    """The rows are 45 and 37 long, no multiple of a vector's lanes: a c order that follows
    the memory, not the logical index, would fold them into other lanes, and a loop order
    that followed the strides would fold the "turned" layout's rows one after another."""
    a = np.random.default_rng(1).standard_normal(shape).astype(dtype) * 10
    a.flat[3] = -0.0
    axes = [None, (0, 1), (0,)] + ([(1, 2), (0, 2)] if len(shape) == 3 else [])
    outs = {
        (name, f, axis): getattr(x, f)(axis)
        for name, x in _layouts(a).items()
        for f in ("sum", "var")
        for axis in axes
    }
    got = dict(zip(outs, get_device(device).realize([t.node for t in outs.values()])))
    for (name, f, axis), buf in got.items():
        want = got["whole", f, axis].data
        assert buf.data.tobytes() == want.tobytes(), (name, f, axis)


def test_a_long_reduce_over_several_axes_folds_into_the_same_blocks_whatever_the_layout(
    monkeypatch,
):
    from ir.c import passes

    monkeypatch.setattr(passes, "BLOCK", 64)  # blocks of 64: long from 256 elements on
    dev, serial = CDevice(), CDevice(openmp=False)
    dev.keep_plans = serial.keep_plans = False
    for shape in [(19, 37), (5, 7, 9), (3, 130), (2, 3, 64)]:  # rows per block: 1, 1, 1, 1
        a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        nodes = [x.sum().node for x in _layouts(a).values()]
        got = [b.data.tobytes() for b in dev.realize(nodes)]
        assert got == [got[0]] * len(got), shape
        assert [b.data.tobytes() for b in serial.realize(nodes)] == got
        assert [r.tobytes() for r in run(nodes, passes=c_passes(detect()))] == got


def test_a_write_into_one_column_compiles_to_a_bounded_nest_and_the_reference_bits():
    """The write's positions come from an arange built of 17 pads over 17 loops of 2:
    cutting each loop at its pad copies the loops below it, so uncapped cuts made 2**17
    copies of the body (the compile never finished)."""
    w = limn.Tensor(np.arange(120_000, dtype=np.float32).reshape(400, 300), device="c")
    with limn.no_grad():
        w.T[0].assign(-1.5)
    assert len(ir(w, stage="c", target=detect()).splitlines()) < 6_000  # uncapped: millions
    want = np.arange(120_000, dtype=np.float32).reshape(400, 300)
    want[:, 0] = -1.5
    assert w.numpy().tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_long_arange_compiles_to_a_bounded_nest(dtype):
    """arange(10000), torch's OpInfo sample: compose.arange's 14 bits are 14 pads over 14
    loops of 2, and each loop cut at its pad copies the loops below it (516,000 lines of
    C, twelve minutes of gcc); built as rows of 64, the nest stays small."""
    x = limn.arange(10_000, dtype=dtype, device="c")
    assert len(ir(x, stage="c", target=detect()).splitlines()) < 2_000
    assert x.numpy().tobytes() == np.arange(10_000, dtype=dtype).tobytes()


def _live_processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process not yet a zombie."""
    found = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            found[int(d.name)] = (int(fields[1]), int(fields[3]))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_compiler_dies_with_the_python_that_started_it(tmp_path):
    """A Python killed while gcc compiles (no ``finally`` of its runs) takes the compiler's
    whole tree with it: the driver, cc1 and as, which used to run on as orphans."""
    code = (
        "from limn.runtime.cc import find_toolchain\n"
        "body = 'double f%d(double *a) { double s = 0; for (int j = 0; j < 999; j++) "
        "s += a[j] * a[j + %d] / (a[j] + %d); return s; }\\n'\n"
        "find_toolchain(False).library(''.join(body % (i, i, i) for i in range(20000)))\n"
    )
    env = {**os.environ, "LIMN_CACHE_DIR": str(tmp_path)}
    python = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline, session = time.monotonic() + 120, None
        while session is None and time.monotonic() < deadline and python.poll() is None:
            procs = _live_processes()
            ours = {s for ppid, s in procs.values() if ppid == python.pid} - {os.getsid(0)}
            for sid in ours:  # a compile's session, not the probes that run in ours
                if sum(s == sid for _, s in procs.values()) >= 2:  # the compiler has begun
                    session = sid
            time.sleep(0.05)
        assert session is not None, "the compile never started, or finished first"
    finally:
        python.kill()
        python.wait()
    deadline = time.monotonic() + 10
    while any(s == session for _, s in _live_processes().values()):
        if time.monotonic() > deadline:
            os.killpg(session, signal.SIGKILL)  # the test's own orphans, not the next one's
            raise AssertionError("the compiler outlived its Python")
        time.sleep(0.05)


@pytest.mark.parametrize("name", ["numpy", "c"])
def test_a_state_carried_unread_from_step_to_step_is_kept_and_one_plan_serves_the_steps(name):
    """A recurrence's state the program never reads (only a value made from it) is in
    every step's graph unless the device keeps it: the c device keeps a value the third
    plan miss that computes it, so the graph stops growing and one plan serves the later
    steps. Every step reads numpy's value; ``limn.ir`` prints the plan realize then runs."""
    limn.set_device(name)
    dev = get_device(name)
    s, ref, plans = limn.zeros(1000), np.zeros(1000, np.float32), []
    for step in range(24):
        s = s * 0.9 + 1.0
        ref = ref * np.float32(0.9) + np.float32(1.0)
        v = (s * 2).max()
        if name == "c" and step == 12:
            text = limn.ir(v, stage="kernel")
            assert text.count(" loop[") == len(dev.plan_for([v.node], carry=True)[0].graph.kernels)
            built = dev.stats["plans"]
            v.item()
            assert dev.stats["plans"] == built  # the plan it printed
        assert v.item() == (ref * 2).max()
        plans.append(getattr(dev, "stats", {"plans": 0})["plans"])
    assert plans[-1] == plans[8]  # no plan built after the ninth step


def test_a_value_read_in_parts_is_not_carried_whole(c):
    """Elements of a lazy product read one by one compute only what each reads: a value
    read in part by every step is not worth realizing whole (64 dot products for one)."""
    limn.set_device("c")
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))
    big = (a @ b).tanh()
    want = np.tanh(a.numpy().astype(np.float64) @ b.numpy().astype(np.float64))
    for i in range(5):
        assert big[i, 2 * i].item() == pytest.approx(want[i, 2 * i], rel=1e-5)
    assert not limn.held(big.node)


def test_ir_prints_the_plan_the_device_runs_after_values_were_read_in_between(c):
    """The issue's case: after ``h.sum().item()`` the device kept the matmul's value, so
    ``h * 2`` runs one kernel; ``limn.ir`` asks the runtime the same question and prints
    that kernel, the kept value marked as held, not the two a fresh graph would need."""
    limn.set_device("c")
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.standard_normal((8, 8)).astype(np.float32)) for _ in range(2))
    h = (a @ b).relu()
    h.sum().item()
    x = (a + 1).exp()
    x.max().item()
    cases = [(h * 2, 1), ((x * 3).tanh() + h, 1), (a @ b + 1, 0)]  # x fused into its max
    for z, held in cases:
        text = limn.ir(z, stage="kernel")
        plan, _ = c.plan_for([z.node])
        lines = text.split("\n")
        assert sum(" = held " in line for line in lines) == held, text
        assert "\n".join(line for line in lines if " = held " not in line) == str(plan.graph)
        assert len(plan.graph.kernels) == text.count(" loop[")
    assert len(c.plan_for([(h * 2).node])[0].graph.kernels) == 1


def test_ir_prints_a_constant_kernel_as_computed_at_plan_time_not_as_a_nest(c):
    """The c device evaluates integer kernels on constants once, with numpy, when it builds
    the plan: the print says so instead of showing a nest that never runs."""
    x = Tensor.arange(10).reshape(2, 5) * Tensor(np.ones((2, 5), np.float32))
    text = limn.ir(x, passes=c.passes)
    assert "k0  MAP  loop[2, 2, 2, 2]  constant: numpy computes it once, at plan time" in text
    loops = [line for line in text.splitlines() if line.strip().startswith("LOOP")]
    assert len(loops) == 2, text  # the float kernel's nest only


# ---- the vectorized transcendentals on every target ------------------------------------

# ir/c/libm.py's branch-free functions and the prelude's exp and log (ir/c/render.py), by
# the C function that computes them and the xp function that reaches them
VECTOR_MATH = {
    f"limn_{name}_{t}": (name, dt)
    for name in ("sin", "cos", "tanh", "expm1", "log1p")
    for t, dt in (("float", np.float32), ("double", np.float64))
} | {
    "limn_exp_double": ("exp", np.float64),
    "limn_log_double": ("log", np.float64),
    "limn_expf": ("exp", np.float32),
    "limn_logf": ("log", np.float32),
    "limn_pow_float": ("pow", np.float32),  # of x and x reversed
}


def _math_inputs(dtype) -> np.ndarray:
    """Special values, the edges of each function's regimes, and random bit patterns."""
    info = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal, info.tiny, info.max]
    special += [1e30, -1e30, 1e300, np.pi / 4, np.pi / 2, np.pi, 22.0, 88.7, 709.78, -745.2]
    rng = np.random.default_rng(11)
    width = np.dtype(dtype).itemsize * 8
    bits = rng.integers(0, 2**width, 20000, dtype=np.uint64).astype(f"uint{width}")
    with np.errstate(over="ignore"):
        edges = np.array(special, dtype)
    x = np.r_[edges, -edges, bits.view(dtype), rng.standard_normal(20000) * 10].astype(dtype)
    return np.r_[x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)].astype(dtype)


def _math_driver() -> str:
    """A C program that runs each function of VECTOR_MATH over a file of inputs, in a loop
    the compiler vectorizes as the c device's kernels are, and writes the results."""
    from ir.c.libm import definitions
    from ir.c.render import MATH, PRELUDE

    names = [f[5:] for f in VECTOR_MATH if f[5:] in MATH]
    out = [PRELUDE, definitions(names), "#include <stdio.h>"]
    for f in VECTOR_MATH:
        t = "float" if VECTOR_MATH[f][1] == np.float32 else "double"
        args = "x[i], x[n - 1 - i]" if VECTOR_MATH[f][0] == "pow" else "x[i]"
        out.append(
            f"void run_{f}(const {t} *restrict x, {t} *restrict y, long n) {{\n"
            f"  for (long i = 0; i < n; i++) y[i] = {f}({args});\n}}"
        )
    out.append(
        "static void *slurp(const char *path, long *bytes) {\n"
        '  FILE *f = fopen(path, "rb"); fseek(f, 0, SEEK_END); *bytes = ftell(f);\n'
        "  rewind(f); void *p = malloc(*bytes); fread(p, 1, *bytes, f); fclose(f);\n"
        "  return p;\n}\n"
        "int main(int argc, char **argv) {\n"
        "  (void)argc; long nf, nd; float *xf = slurp(argv[1], &nf);\n"
        "  double *xd = slurp(argv[2], &nd); nf /= 4; nd /= 8;\n"
        "  float *yf = malloc(4 * nf); double *yd = malloc(8 * nd);\n"
        '  FILE *out = fopen(argv[3], "wb");'
    )
    for f, (_, dt) in VECTOR_MATH.items():
        y, n, size = ("yf", "nf", 4) if dt == np.float32 else ("yd", "nd", 8)
        out.append(f"  run_{f}(x{y[1]}, {y}, {n}); fwrite({y}, {size}, {n}, out);")
    out.append("  fclose(out); return 0;\n}")
    return "\n".join(out)


def _math_results(path: Path, n32: int, n64: int) -> dict[str, np.ndarray]:
    raw, at, got = path.read_bytes(), 0, {}
    for f, (_, dt) in VECTOR_MATH.items():
        n = (n32 if dt == np.float32 else n64) * np.dtype(dt).itemsize
        got[f] = np.frombuffer(raw[at : at + n], dt)
        at += n
    return got


# target: (compiler, its -march, how to run the program or None to compile it only)
MATH_TARGETS = {
    "x86-64 (portable C)": ("gcc", "-march=x86-64", ()),
    "haswell (AVX2)": ("gcc", "-march=haswell", ()),
    "skylake-avx512": ("gcc", "-march=skylake-avx512", None),
    "aarch64 (NEON)": (
        "aarch64-linux-gnu-gcc",
        "-march=armv8-a",
        ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"),
    ),
}


def _math_flags(compiler: str, march: str) -> list[str]:
    """The c device's flags for another target: its -march, and no x86 option on ARM."""
    keep = [f for f in cc.FLAGS if f not in ("-march=native", "-shared", "-fPIC")]
    if compiler.startswith("aarch64"):
        keep = [f for f in keep if not f.startswith("-m")]
    return [*keep, march]


def test_the_vectorized_transcendentals_give_the_same_bits_on_every_target(tmp_path, c):
    """sin, cos, tanh, expm1, log1p, exp and log (float32 and float64) and float32 pow,
    compiled for portable x86-64, AVX2, AVX-512 and NEON with the c device's flags, run
    where this host can (NEON under qemu-user): every target's bits equal the c device's
    own, on special values, the edges of the regimes, subnormals, huge arguments and
    random bit patterns."""
    xf, xd = _math_inputs(np.float32), _math_inputs(np.float64)
    (tmp_path / "xf").write_bytes(xf.tobytes())
    (tmp_path / "xd").write_bytes(xd.tobytes())
    src = tmp_path / "math.c"
    src.write_text(_math_driver())
    want = {}
    for f, (name, dt) in VECTOR_MATH.items():
        x = xp.asarray(xf if dt == np.float32 else xd, device=xp.Device("c"))
        args = (x, xp.flip(x)) if name == "pow" else (x,)
        want[f] = np.asarray(getattr(xp, name)(*args))
    ran = []
    for target, (compiler, march, runner) in MATH_TARGETS.items():
        if shutil.which(compiler) is None or runner and shutil.which(runner[0]) is None:
            continue
        exe = tmp_path / target.split()[0]
        link = ["-c"] if runner is None else ["-lm"]
        cmd = [compiler, *_math_flags(compiler, march), str(src), "-o", str(exe), *link]
        subprocess.run(cmd, check=True, capture_output=True)
        if runner is None:
            continue
        out = tmp_path / f"{exe.name}.out"
        args = [str(exe), str(tmp_path / "xf"), str(tmp_path / "xd"), str(out)]
        subprocess.run([*runner, *args], check=True)
        for f, got in _math_results(out, len(xf), len(xd)).items():
            w = want[f]
            bad = got.view(f"u{w.itemsize}") != w.view(f"u{w.itemsize}")
            assert not bad.any(), (target, f, xf[bad] if w.dtype == np.float32 else xd[bad])
        ran.append(target)
    assert "x86-64 (portable C)" in ran


def test_every_vectorized_transcendental_loop_vectorizes_with_no_call(tmp_path, c):
    """A loop of any of them compiles, for AVX2 with the c device's flags, to vector code:
    gcc reports each loop vectorized, and no call to the C library is left in it."""
    src = tmp_path / "math.c"
    src.write_text(_math_driver())
    cmd = ["gcc", *_math_flags("gcc", "-march=haswell"), "-fopt-info-vec-optimized", "-S"]
    done = subprocess.run([*cmd, str(src), "-o", str(tmp_path / "math.s")], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    lines = _math_driver().splitlines()
    loops = {i + 1 for i, line in enumerate(lines) if line.startswith("  for (long i = 0;")}
    vectorized = {
        int(m.split(":")[1]) for m in done.stderr.decode().splitlines() if "loop vectorized" in m
    }
    assert loops <= vectorized, [lines[i - 1] for i in sorted(loops - vectorized)]
    asm = (tmp_path / "math.s").read_text()
    bodies = re.findall(r"^(run_\w+):\n(.*?)\.size\s+\1", asm, re.S | re.M)
    assert len(bodies) == len(VECTOR_MATH)
    calls = {f: re.findall(r"\tcall\t(\S+)", body) for f, body in bodies}
    assert not any(calls.values()), calls


def test_the_bits_of_2_over_pi_that_reduce_sin_and_cos_are_mpmaths():
    """ir/c/libm.py's table: two zero words, then the first 1184 bits of 2/pi."""
    import mpmath

    from ir.c.libm import _SNIPPETS

    table = [int(w, 16) for w in re.findall(r"0x([0-9a-f]{8})u", _SNIPPETS["2opi"][1])]
    mpmath.mp.prec = 1300
    bits = int(mpmath.floor(2 / mpmath.pi * mpmath.mpf(2) ** (32 * 37)))
    assert table == [0, 0] + [(bits >> (32 * (36 - i))) & 0xFFFFFFFF for i in range(37)]
