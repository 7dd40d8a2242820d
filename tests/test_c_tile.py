"""The contraction schedule (ir/c/tile.py): every pass's nest runs in the interpreter as it
prints and the C rendering of it gives the same bits, for every layout autograd makes,
batched and convolved contractions, edges that are not multiples of the tile, both float
widths, and any thread count."""

import platform
import re
import shutil
import subprocess
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

import limn
from ir.c import block, tile
from ir.c.passes import c_passes
from ir.c.render import fma_isa, vector_helpers
from ir.c.target import ISAS
from ir.graph import dtypes
from ir.loop.interp import fused_multiply_add, run
from limn import Tensor, nn
from limn.runtime.c import CDevice
from limn.runtime.device import get_device
from limn.runtime.target import detect

SCHEDULE = ("tile_contraction", "block_contraction", "pack_operands", "vectorize_tile")


def _passes(upto: str, target=None) -> list:
    """The c device's passes for ``target``, the contraction schedule cut after ``upto``."""
    drop = SCHEDULE[SCHEDULE.index(upto) + 1 :]
    return [p for p in c_passes(target) if p.__name__ not in drop]


def _small_panels(isa: str, kc: int, columns: int):
    """Target ``isa`` with an L1 whose panels are reduce blocks of ``kc``, for float32
    contractions of ``columns`` columns."""
    target = detect(isa)
    return replace(target, l1=2 * kc * tile.tile_shape(4, columns, target)[1] * 4)


LANES = f"float32x{detect().lanes(4)}"  # what a vector of this machine's target prints as


def _layouts(m: int, k: int, n: int, dtype, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def r(*shape):
        return rng.standard_normal(shape).astype(dtype)

    a, b, bt, at, w = r(m, k), r(k, n), r(n, k), r(k, m), r(n)
    q, kk, p, v = r(2, 3, m, k), r(2, 3, n, k), r(2, 3, m, n), r(2, 3, n, k)
    img, flt = r(1, 3, 6, 11), r(16, 3, 3, 3)
    return {
        "x@W": lambda: Tensor(a) @ Tensor(b),
        "x@W.T": lambda: Tensor(a) @ Tensor(bt).T,
        "x.T@g": lambda: Tensor(at).T @ Tensor(b),
        "relu(x)@W+b": lambda: (Tensor(a).relu() @ Tensor(b)) + Tensor(w),
        "pad(x)@pad(W)": lambda: Tensor(a).pad(((0, 0), (2, 1))) @ Tensor(b).pad(((2, 1), (0, 0))),
        "q@k.T": lambda: Tensor(q) @ Tensor(kk).transpose(-1, -2),
        "p@v": lambda: Tensor(p) @ Tensor(v),
        "conv": lambda: nn.conv(Tensor(img), Tensor(flt), padding=1),
    }


@pytest.fixture(scope="module")
def devices():
    try:
        return CDevice, CDevice(openmp=False)
    except RuntimeError as e:
        pytest.skip(f"c device unavailable: {e}")


def _check(builds: dict, passes, devices, threads=(2,)) -> str:
    """Interpreter = threaded C = serial C, bit for bit, every build in one plan."""
    make, serial = devices
    roots = [b().node for b in builds.values()]
    want = run(roots, passes=passes)
    threaded = make(passes=passes)
    outs = []
    for t in threads:
        threaded.set_threads(t)
        outs.append(threaded.realize([b().node for b in builds.values()]))
    outs.append(make(passes=passes, openmp=False).realize([b().node for b in builds.values()]))
    for got in outs:
        for name, g, w in zip(builds, got, want):
            assert g.data.tobytes() == w.tobytes(), (
                f"{name}: {(g.data != w).sum()} cells differ from the interpreter"
            )
    return limn.ir([b().node for b in builds.values()], passes=passes)


@pytest.mark.parametrize("upto", SCHEDULE)
def test_every_schedule_pass_runs_in_the_interpreter_as_the_c_runs_it(upto, devices, monkeypatch):
    monkeypatch.setattr(block, "MIN_BLOCK_WORK", 0)  # small shapes, so the interpreter is quick
    monkeypatch.setattr(block, "MIN_PARALLEL_WORK", 1)  # and threaded all the same
    monkeypatch.setattr(block, "MIN_PARALLEL_FMAS", 1)
    target = _small_panels(detect().isa, 4, 40)  # reduce blocks of a few: several
    text = _check(_layouts(10, 21, 40, np.float32), _passes(upto, target), devices)
    assert "FMA" in text
    if upto != "tile_contraction":
        assert "LOCAL" in text and "tile=" in text and "parallel=" in text
    if upto in ("pack_operands", "vectorize_tile"):
        assert text.count("LOCAL") > 8  # the tiles, and packed slivers and panels
    if upto == "vectorize_tile":
        assert LANES in text and "= FMA acc" in text


@pytest.mark.parametrize("isa", ISAS)
def test_every_targets_tiles_give_the_interpreters_bits_here(isa, devices, monkeypatch):
    """The nest each target's passes make (its tile shape, lanes and cache blocks) runs on
    this machine too: its vectors are compiler vectors, its FMAs the fused instructions
    this CPU has. So the bits of every target's tiles are checked here, whatever the host."""
    monkeypatch.setattr(block, "MIN_BLOCK_WORK", 0)
    target = _small_panels(isa, 4, 40)
    builds = {k: v for k, v in _layouts(10, 21, 40, np.float32).items() if k in ("x@W", "x.T@g")}
    text = _check(builds, c_passes(target), devices)
    assert f"float32x{target.lanes(4)}" in text and "= FMA acc" in text


def test_float64_tiles_are_eight_lanes_and_keep_the_interpreters_bits(devices, monkeypatch):
    monkeypatch.setattr(block, "MIN_BLOCK_WORK", 0)
    builds = {k: v for k, v in _layouts(13, 20, 40, np.float64, 1).items() if k != "conv"}
    assert f"float64x{detect().lanes(8)}" in _check(builds, c_passes(detect()), devices)


def test_edges_past_every_tile_size_keep_the_interpreters_bits(devices, monkeypatch):
    monkeypatch.setattr(block, "MIN_BLOCK_WORK", 0)
    for m, k, n in ((1, 5, 9), (7, 4, 17), (25, 3, 33)):
        builds = {k2: v for k2, v in _layouts(m, k, n, np.float32, m).items() if "@" in k2}
        _check(builds, c_passes(detect()), devices)


@pytest.mark.slow
def test_a_tall_tiled_contraction_keeps_the_interpreters_bits(devices):
    _check(_layouts(33, 70, 100, np.float32, 3), c_passes(detect()), devices, threads=(1, 2, 3))


def test_a_one_row_matmul_is_a_row_block_of_one_with_the_longer_matmuls_bits(devices):
    """x @ W for a single row x is tiled as a row block of one: each cell folds the FMAs its
    row gets in a taller x (a kv-cache step's projections give the windowed forward's bits),
    and the interpreter running that nest agrees."""
    make, serial = devices
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    w = rng.standard_normal((64, 80)).astype(np.float32)
    for name, build in {"x@W": lambda a: Tensor(a) @ Tensor(w),
                        "x@W.T": lambda a: Tensor(a) @ Tensor(w.T.copy()).T}.items():  # fmt: skip
        full = make().realize([build(x).node])[0].data
        text = limn.ir(build(x[2:3]), passes=c_passes(detect()))
        assert "tile=1x" in text and "FMA" in text, name
        want = run([build(x[2:3]).node], passes=c_passes(detect()))[0]
        assert want.tobytes() == full[2:3].tobytes(), name
        for dev in (make(), serial):
            assert dev.realize([build(x[2:3]).node])[0].data.tobytes() == want.tobytes(), name


def test_a_scaled_sum_down_the_rows_is_a_sum_not_a_one_row_matmul(devices):
    """``(v * 1.5).sum(0)`` multiplies each element by a constant, not by a row that the
    reduce moves: it is no contraction, so its products are rounded and summed as the
    numpy device sums them (no FMA), whether the scaled values were read first or not."""
    make, _ = devices
    x = Tensor(np.random.default_rng(4).standard_normal((2000, 3)).astype(np.float32))

    def scaled():
        return limn.cat([x[:, :2], x[:, 2:] * 2], 1) * 1.5

    assert "FMA" not in limn.ir(scaled().sum(0), passes=c_passes(detect()))
    want = get_device("numpy").realize([scaled().sum(0).node])[0].data
    read = scaled()
    read.numpy()
    for graph in (scaled().sum(0), read.sum(0)):
        assert make().realize([graph.node])[0].data.tobytes() == want.tobytes()


@pytest.mark.parametrize("m,k,n", [(37, 45, 29), (64, 192, 96), (1, 192, 80)])
def test_a_matmul_gives_the_same_bits_whatever_the_layout_of_its_operands(devices, m, k, n):
    """x @ W with x or W held transposed in memory: the layouts pack and tile differently,
    and every cell must still fold its products in the same order."""
    make, _ = devices
    rng = np.random.default_rng(7)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    dev = make()
    whole = dev.realize([(Tensor(x) @ Tensor(w)).node])[0].data
    for name, y in {
        "x @ W.T.T": Tensor(x) @ Tensor(w.T.copy()).T,
        "x.T.T @ W": Tensor(x.T.copy()).T @ Tensor(w),
        "both": Tensor(x.T.copy()).T @ Tensor(w.T.copy()).T,
    }.items():
        assert dev.realize([y.node])[0].data.tobytes() == whole.tobytes(), name


def _held(a: np.ndarray) -> dict:
    """One logical matrix held four ways: whole, transposed, strided and sliced."""
    big = np.zeros((2 * a.shape[0] + 1, a.shape[1] + 3), a.dtype)
    big[1::2, 2:-1] = a
    return {
        "whole": Tensor(a),
        "transposed": Tensor(a.T.copy()).T,
        "strided": Tensor(big)[1::2, 2:-1],
        "sliced": Tensor(big[1::2])[:, 2:-1],
    }


@pytest.mark.parametrize("n", range(1, 10))
def test_a_narrow_matmuls_rows_have_the_bits_of_each_row_alone_whatever_the_layout(devices, n):
    """N < 8 is too narrow to tile: each cell must still fold k in order with one FMA per
    step, as a tiled one does, so a row's bits depend neither on how many rows come with it
    (a kv-cache step against the windowed forward, for a small vocabulary) nor on where
    either operand lies (7x513 @ 513x3 with x transposed differed by 2.3e-5)."""
    make, _ = devices
    dev, ref = make(), get_device("numpy")
    rng = np.random.default_rng(n)
    for k in (1, 7, 63, 64, 65, 513):
        x = rng.standard_normal((9, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        alone = [(Tensor(x[i : i + 1]) @ Tensor(w)).node for i in range(9)]
        xs, ws = _held(x), _held(w)
        products = [xs["whole"] @ b for b in ws.values()] + [a @ ws[h] for h, a in xs.items()]
        tall = [(Tensor(x[:m]) @ Tensor(w)).node for m in (2, 5, 8)]
        got = [b.data for b in dev.realize(alone + [p.node for p in products] + tall)]
        rows, want = np.concatenate(got[:9]), got[9]
        if n > 1:  # a lone row times a column is a dot product: a sum (lanes, no FMA)
            assert rows.tobytes() == want.tobytes(), (k, "rows alone")
        for i, g in enumerate(got[9:]):
            assert g.tobytes() == want[: len(g)].tobytes(), (k, i)
        close = ref.realize([products[0].node])[0].data
        np.testing.assert_allclose(want, close, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_a_large_matmul_is_the_same_on_every_thread_count_and_close_to_numpy(devices):
    make, serial = devices
    threaded = make()
    rng = np.random.default_rng(5)
    a = rng.standard_normal((200, 533)).astype(np.float32)
    b = rng.standard_normal((533, 700)).astype(np.float32)
    outs = []
    for n in (1, 2, 3):
        threaded.set_threads(n)
        outs.append(threaded.realize([(Tensor(a) @ Tensor(b)).node])[0].data)
    outs.append(serial.realize([(Tensor(a) @ Tensor(b)).node])[0].data)
    assert all(o.tobytes() == outs[0].tobytes() for o in outs)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(outs[0] - want).max() / np.abs(want).max() < 1e-5
    text = limn.ir(Tensor(a) @ Tensor(b), passes=c_passes(detect()))
    assert "LOOP    r2c < 533 step" in text  # the reduce is cut into blocks


def test_convolutions_and_their_gradients_are_scheduled_contractions(devices):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 4, 8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4, 3, 3)).astype(np.float32)
    g = rng.standard_normal((1, 16, 8, 16)).astype(np.float32)

    def grads():
        xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        (nn.conv(xt, wt, padding=1) * Tensor(g)).sum().backward()
        return xt.grad, wt.grad

    builds = {
        "forward": lambda: nn.conv(Tensor(x), Tensor(w), padding=1),
        "input grad": lambda: grads()[0],
        "weight grad": lambda: grads()[1],
    }
    for name, build in builds.items():
        assert LANES in limn.ir(build(), passes=c_passes(detect())), f"{name} is not vectorized"
    _check(builds, c_passes(detect()), devices)


def test_a_small_output_over_a_long_reduce_is_split_into_blocks_for_the_team():
    # a weight's gradient, 192 x 192 over 2048 rows: one 192 x 192 block before
    mc, nc = block._enough_tasks(1, 192, 192, 192, 192, 8, 48)
    assert -(-192 // mc) * -(-192 // nc) >= block.MIN_TASKS
    assert mc % 8 == 0 and nc % 48 == 0 and 192 % mc == 0 and 192 % nc == 0  # equal blocks
    assert block._enough_tasks(8, 256, 768, 192, 768, 8, 48) == (128, 768)  # many: equal


def test_the_register_tile_fits_the_columns_it_has_and_the_targets_registers():
    avx512, avx2, neon = detect("avx512"), detect("avx2"), detect("neon")
    assert tile.tile_shape(4, 576, avx512) == (8, 48)  # 12 panels of three vectors
    assert tile.tile_shape(4, 1024, avx512) == (12, 32)  # 32 panels of two, not 21 of three
    assert tile.tile_shape(4, 12, avx512) == (16, 16)  # one vector, more rows
    assert tile.tile_shape(8, 576, avx512) == (8, 24)  # float64: eight lanes
    assert tile.tile_shape(4, 1024, avx2) == (6, 16)  # 12 of 16 ymm registers: BLIS's Haswell
    assert tile.tile_shape(8, 1024, avx2) == (6, 8)
    assert tile.tile_shape(4, 12, avx2) == (6, 16)  # two vectors waste fewer columns than three
    assert tile.tile_shape(4, 8, avx2) == (12, 8)  # one vector, more rows
    assert tile.tile_shape(4, 576, neon) == (8, 12)  # BLIS's ARMv8 kernel


def test_a_fill_before_a_contraction_is_its_start_and_its_partial_totals_live_in_out(
    devices, monkeypatch
):
    """The lowered sum fills ``out`` with 0 and folds into it: the schedule starts each
    tile from the constant instead, and between reduce blocks keeps the partial totals in
    ``out`` (the first block's guarded load gives that 0)."""
    passes = c_passes(_small_panels(detect().isa, 16, 60))
    rng = np.random.default_rng(2)
    a = rng.standard_normal((20, 90)).astype(np.float32)
    b = rng.standard_normal((90, 60)).astype(np.float32)
    nest = limn.ir(Tensor(a) @ Tensor(b), passes=passes)
    assert "CONST   v0 = 0.0" not in nest  # no fill nest
    assert "= out[i0*60 + i1] if 1 <= r2c < 90" in nest
    _check({"x@W": lambda: Tensor(a) @ Tensor(b)}, passes, devices)


def _exact(a, b, c, t):
    """The correctly rounded a*b + c, by exact rationals and a search of the neighbours."""
    x = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    info = np.finfo(t)  # from halfway past the largest finite value on, the result is inf
    if abs(x) >= Fraction(2) ** info.maxexp - Fraction(2) ** (info.maxexp - info.nmant - 2):
        return t(np.inf) if x > 0 else t(-np.inf)
    f = t(float(x))
    with np.errstate(over="ignore"):
        near = [
            v
            for v in (f, np.nextafter(f, t(-np.inf)), np.nextafter(f, t(np.inf)))
            if np.isfinite(v)
        ]
    return min(
        near,
        key=lambda v: (
            abs(Fraction(float(v)) - x),
            int(np.asarray(v).view(np.uint32 if t is np.float32 else np.uint64)) & 1,
        ),
    )


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_the_interpreters_fma_rounds_once(t):
    d = dtypes.float32 if t is np.float32 else dtypes.float64
    eps = np.finfo(t).eps
    one = t(1)
    # (1 + eps)(1 - eps) - 1 is -eps**2: rounded twice it is 0
    got = fused_multiply_add(one + eps, one - eps, -one, d)
    assert got == -t(eps) * t(eps) and (one + eps) * (one - eps) - one == 0
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b, c = (t(v) for v in rng.standard_normal(3) * 10.0 ** rng.integers(-15, 15, 3))
        assert fused_multiply_add(a, b, c, d) == _exact(a, b, c, t)
    big = np.finfo(t).max
    assert fused_multiply_add(big, t(2), -big, d) == big  # the exact product never overflows
    assert fused_multiply_add(big, t(2), t(-np.inf), d) == -np.inf
    assert np.isnan(fused_multiply_add(t(np.inf), t(0), t(1), d))
    z = fused_multiply_add(t(-0.0), t(1), t(-0.0), d)
    assert z == 0 and np.signbit(z)
    # ties and near-ties of the result's last place, the smallest subnormals, the largest
    # finite values: one lane at a time and as arrays of lanes, the exact rounding
    tiny, ulp = np.finfo(t).smallest_subnormal, np.finfo(t).eps
    cases = [(one + ulp, one + ulp, one), (one + ulp, one - ulp, ulp / 2), (tiny, t(0.5), tiny),
             (tiny, t(1.5), -tiny), (big, one + ulp, -big), (big, t(0.5), big / 2),
             (big, one, big * (ulp / 4)), (one + 3 * ulp, one + ulp, -one)]  # fmt: skip
    half = 2 ** (np.finfo(t).nmant // 2 + 1)  # (1 + i/half)(1 + j/half): a tie for odd i*j
    for _ in range(300):  # a product on a tie of the last place, nudged far below it
        i, j = (int(v) | 1 for v in rng.integers(1, 1 << 8, 2))
        nudge = t(2.0 ** -int(rng.integers(np.finfo(t).nmant + 8, np.finfo(t).nmant * 2 + 20)))
        cases.append((t(1 + i / half), t(1 + j / half), nudge * t(rng.choice([-1, 1]))))
    want = [_exact(a, b, c, t) for a, b, c in cases]
    assert [fused_multiply_add(a, b, c, d) for a, b, c in cases] == want
    lanes = fused_multiply_add(*(np.array(v, t) for v in zip(*cases)), d)
    assert lanes.tolist() == [float(w) for w in want]


def test_special_values_fold_through_a_vector_tile_as_through_the_interpreter(devices):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((24, 40)).astype(np.float32)
    b = rng.standard_normal((40, 48)).astype(np.float32)
    a[3, 5], a[7, :], b[2, 9], b[:, 30] = np.nan, np.inf, -np.inf, -0.0
    a[10, :] = -0.0
    _check({"x@W": lambda: Tensor(a) @ Tensor(b)}, c_passes(detect()), devices)


# each ISA's gcc, and the fused instruction its vector FMA must be
GCC_FMA = {
    "avx2": ("gcc", "x86_64", "vfmadd"),
    "avx512": ("gcc", "x86_64", "vfmadd"),
    "neon": ("aarch64-linux-gnu-gcc", None, "fmla"),
}


@pytest.mark.parametrize("isa", sorted(GCC_FMA))
def test_gcc_builds_the_vector_fma_from_its_builtins_without_the_intrinsics_header(isa):
    """immintrin.h alone is ~0.5 s of cc per unit; the builtins give the same instruction."""
    name, host, instruction = GCC_FMA[isa]
    cc = shutil.which(name)
    if cc is None or host not in (None, platform.machine()):
        pytest.skip(f"needs {name} on {host or 'any host'}")
    src = "#include <string.h>\n#include <math.h>\n" + fma_isa(detect(isa)) + "\n"
    src += vector_helpers("limn_f32x16") + "\n" + vector_helpers("limn_f64x8") + "\n"
    src += "void f(float *x) { limn_f32x16_store(x, limn_f32x16_fma(limn_f32x16_load(x),"
    src += " limn_f32x16_load(x + 16), limn_f32x16_load(x + 32))); }\n"
    src += "void g(double *x) { limn_f64x8_store(x, limn_f64x8_fma(limn_f64x8_load(x),"
    src += " limn_f64x8_load(x + 8), limn_f64x8_load(x + 16))); }\n"
    flags = [*ISAS[isa][3], "-O2", "-x", "c", "-"]
    run = subprocess.run
    pre = run([cc, "-E", *flags], input=src, capture_output=True, text=True, check=True).stdout
    assert "immintrin.h" not in pre and "arm_neon.h" not in pre
    asm = run([cc, "-S", "-o", "-", *flags], input=src, capture_output=True, text=True, check=True)
    assert instruction in asm.stdout and "fmaf" not in asm.stdout and "\tfma\n" not in asm.stdout


def test_each_targets_units_spell_only_that_targets_fma():
    from ir.c.render import FMAS
    from ir.c.units import compile
    from ir.kernel.schedule import schedule

    x = Tensor(np.ones((64, 64), np.float32))
    graph = schedule([(x @ x).node]).graph
    for isa in ("avx512", "avx2", "neon", "generic"):
        for gcc in (True, False):
            target = replace(detect(isa), gcc=gcc)
            text = "\n".join(u.source for u in compile(graph, c_passes(target), target).units)
            words = lambda row: (*row[1:3], *row[4:])  # noqa: E731 (the header is shared)
            spelled = {i for i, row in FMAS.items() for word in words(row) if word in text}
            assert spelled == ({isa} if isa in FMAS else set()), (isa, gcc, spelled)
            assert "#if defined(__AVX512F__)" not in text and "#elif" not in text
            assert f"/* {isa}: " in text  # the unit says which FMA it runs, or none


# ---- the schedule as a pass writer meets it ------------------------------------------


def _unroll():
    """docs/passes.md's unroll pass (examples/custom_pass.py), which copies inner loops."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "examples" / "custom_pass.py"
    spec = importlib.util.spec_from_file_location("custom_pass", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.unroll_by_2


def _schedule(nest) -> tuple[int, int]:
    """(cache blocks, vector registers) of a nest: what the contraction schedule made."""
    from ir.loop.nest import DefAcc, Loop, Role, walk

    items = list(walk(nest.body))
    blocks = sum(isinstance(x, Loop) and x.role == Role.BLOCK for x in items)
    return blocks, sum(isinstance(x, DefAcc) and x.lanes > 1 for x in items)


def test_the_docs_unroll_anywhere_keeps_a_sums_lanes_or_says_why():
    """A float sum's grouping is the numpy device's (lane_reduce); an unroll of its loop
    placed before lane_reduce leaves it unlaned, and so other bits: the nest then says so
    (strict raises), and wherever it says nothing the bits are the numpy device's."""
    from ir.kernel.schedule import schedule
    from ir.loop.interp import interpret
    from ir.loop.lower import lower
    from ir.loop.passes import apply_passes

    x = np.random.default_rng(0).standard_normal((1, 4096)).astype(np.float32)
    graph = schedule([Tensor(x).sum(-1).node]).graph
    want = get_device("numpy").realize([Tensor(x).sum(-1).node])[0].data.ravel()
    passes, unroll, said = c_passes(detect("avx2")), _unroll(), 0
    for at in range(len(passes) + 1):
        nest = apply_passes(lower(graph, 0), [*passes[:at], unroll, *passes[at:]])
        got = np.zeros(1, np.float32)
        interpret(nest, [x], got)
        if nest.notes:
            said += 1
            assert nest.notes[0].startswith("lane_reduce: the total "), nest.notes
            with pytest.raises(ValueError, match="a pass did not apply: lane_reduce: "):
                apply_passes(lower(graph, 0), [*passes[:at], unroll, *passes[at:]], strict=True)
        else:
            assert got.tobytes() == want.tobytes(), at
    assert said


@pytest.mark.parametrize("shape", [((96, 6), (6, 96)), ((2, 24, 6), (2, 6, 32))])
def test_the_docs_unroll_anywhere_keeps_the_schedule_or_says_why(shape):
    """The issue's 96x6 @ 6x96 lost its whole schedule, without a word, to an unroll placed
    before the C passes. Placed anywhere in the c pass list now, the unroll either keeps
    the schedule (it leaves loops with a role alone) or a later pass says in the nest why
    it could not apply, and ``strict`` makes that an error. Kept, the bits are the same;
    not, the products are folded unfused (rounded twice), as by any untiled sum."""
    from ir.kernel.schedule import schedule
    from ir.loop.interp import interpret
    from ir.loop.lower import lower
    from ir.loop.passes import apply_passes

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shape)
    graph = schedule([(Tensor(a) @ Tensor(b)).node]).graph
    i = next(j for j, k in enumerate(graph.kernels) if k.kind == "SUM")
    inputs = [a, b] if graph.kernels[i].inputs == (0, 1) else [b, a]
    target, unroll = detect("avx2"), _unroll()
    passes = c_passes(target)
    plain = apply_passes(lower(graph, i), passes)
    want = np.zeros(graph.buffers[graph.kernels[i].output].shape, np.float32)
    interpret(plain, inputs, want)
    assert _schedule(plain)[0] >= 1 and _schedule(plain)[1] >= 8 and not plain.notes
    kept = said = 0
    ran: dict[str, np.ndarray] = {}  # many places give one nest: each is interpreted once
    for at in range(len(passes) + 1):
        nest = apply_passes(lower(graph, i), [*passes[:at], unroll, *passes[at:]])
        if nest.format() not in ran:
            ran[nest.format()] = np.zeros_like(want)
            interpret(nest, inputs, ran[nest.format()])
        got = ran[nest.format()]
        if not nest.notes:  # kept: tiled and held in vector registers, the same bits
            kept += 1
            assert _schedule(nest)[0] >= 1 and _schedule(nest)[1] >= _schedule(plain)[1], at
            np.testing.assert_array_equal(got, want)
            continue
        said += 1  # said why, in the printed nest; strict raises it
        assert " not " in nest.notes[0] and "note  " + nest.notes[0] in nest.format(), at
        with pytest.raises(ValueError, match=r"a pass did not apply: \w+: "):
            apply_passes(lower(graph, i), [*passes[:at], unroll, *passes[at:]], strict=True)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # unfused where untiled
    assert kept and said  # both: the later positions keep it, the early ones say why


def test_a_cold_matmul_on_c_converts_no_flat_nest_to_a_tree():
    """The nest is a tree at every stage: scheduling a 256x256 ``a @ b`` the way the c device
    does (every pass, then the C) calls nothing that converts between a flat form and a
    tree, and ``ir/loop/rewrite.py`` is a small part of its Python calls (it was 2,914 of
    6,818 when every pass rebuilt a tree and flattened it again)."""
    import cProfile
    import pstats

    from ir.c.units import compile
    from ir.kernel.schedule import schedule

    a, b = (Tensor(np.ones((256, 256), np.float32)) for _ in range(2))
    graph = schedule([(a @ b).node]).graph
    prof = cProfile.Profile()
    prof.runcall(compile, graph, None, detect("avx2"))
    stats = pstats.Stats(prof).stats
    names = {fn for (_, _, fn) in stats}
    assert not names & {"to_tree", "flatten", "_each_block", "_pass", "_descend", "_swap"}
    rewrite = sum(s[1] for (path, _, _), s in stats.items() if path.endswith("loop/rewrite.py"))
    assert rewrite < 2500, rewrite  # 2,000 now


def _fma_chain(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` as the c device folds a contraction: each cell from +0.0, one FMA per
    reduce index, in order (the bits every schedule of it must keep)."""
    d = dtypes.float32 if x.dtype == np.float32 else dtypes.float64
    acc = np.zeros((*x.shape[:-1], w.shape[-1]), x.dtype)
    for r in range(x.shape[-1]):
        acc = fused_multiply_add(x[..., r : r + 1], w[..., r : r + 1, :], acc, d).astype(x.dtype)
    return acc


SKINNY = [(1, 192, 576), (1, 768, 192), (2, 200, 800), (3, 64, 40), (20, 200, 800),
          (7, 33, 17), (576, 192, 1), (1, 3, 50), (20, 5, 64), (13, 2, 100)]  # fmt: skip


@pytest.mark.parametrize(
    "m,k,n,dtype", [(*s, np.float32) for s in SKINNY] + [(1, 130, 48, np.float64)]
)
def test_skinny_contractions_fold_each_cell_as_one_fma_chain_in_order(devices, m, k, n, dtype):
    """A contraction with a small side (a decoded query times a weight, a batch of 20, one
    column) or a small reduce has a schedule of its own; every cell of it still folds its
    products one FMA at a time in reduce order from +0.0, as a large tile's cells do,
    whichever operand is held transposed, threaded or not. (A batch of single rows or
    columns is a batch of dot products: sums, folded in lanes as the numpy device folds.)"""
    make, serial = devices
    rng = np.random.default_rng(m * 1000 + n)
    x = rng.standard_normal((2, m, k)).astype(dtype)
    w = rng.standard_normal((2, k, n)).astype(dtype)
    want = _fma_chain(x, w)
    builds = {
        "x@W": lambda i: Tensor(x[i]) @ Tensor(w[i]),
        "x@W.T": lambda i: Tensor(x[i]) @ Tensor(w[i].T.copy()).T,
        "x.T@W": lambda i: Tensor(x[i].T.copy()).T @ Tensor(w[i]),
    }
    for dev in (make(), serial):
        for name, build in builds.items():
            for i in (0, 1):
                got = dev.realize([build(i).node])[0].data
                assert got.tobytes() == want[i].tobytes(), (name, i)
        y = Tensor(x) @ Tensor(w.transpose(0, 2, 1).copy()).mT
        dots = get_device("numpy").realize([y.node])[0].data if min(m, n) == 1 else want
        assert dev.realize([y.node])[0].data.tobytes() == dots.tobytes(), "batched"


def _packed(text: str) -> set[str]:
    """The input buffers a printed nest copies into a LOCAL (packs)."""
    loaded = dict(re.findall(r"LOAD +(v\d+) = (in\d+)\[", text))
    return {loaded[v] for v in re.findall(r"STORE +t\d+\[.*\] = (v\d+)", text) if v in loaded}


def test_a_skinny_contraction_packs_only_its_small_factor_and_reads_the_weight_in_place():
    """A decoded query times a weight (M=1) reads W where it lies, each element once, in
    scalar FMA chains; a batch of 20 rows times W.T packs the 20 rows (small), not W; a
    tall matmul still packs both. The printed nest shows which."""
    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((576, 192)).astype(np.float32))  # in1: a Linear's weight

    def nest(m: int) -> str:
        x = Tensor(rng.standard_normal((m, 192)).astype(np.float32))
        return limn.ir(x @ w.T, passes=c_passes(detect("avx2")))

    gemv = nest(1)
    assert "in1" not in _packed(gemv) and "= FMA acc" in gemv
    assert re.search(r"DEFACC +acc\d+ = 0\.0 : float32\n", gemv)  # one lane per column
    assert _packed(nest(20)) == {"in0"} and "tile=4x24" in nest(20)  # the 20 rows: columns
    assert _packed(nest(200)) == {"in0", "in1"}


@pytest.mark.parametrize("rows", [0, 1, 20])
def test_a_contraction_of_no_rows_or_a_few_runs(rows):
    """An empty batch has no cell to tile (slivers of equal height divide by the rows)."""
    limn.set_device("c")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, 40)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    got = (Tensor(a) @ Tensor(w)).numpy()
    assert got.shape == (rows, 24)
    np.testing.assert_allclose(got, a @ w, rtol=1e-5, atol=1e-5)


def test_parallelize_and_vectorize_tile_say_why_they_did_not_apply():
    """A loop with work enough for the team that stays on one thread, and a scheduled tile
    that stays scalar, each leave a note in the nest (``strict`` raises); a nest they did
    apply to says nothing, and the c device computes the numpy device's bits either way."""
    from ir.kernel.schedule import schedule
    from ir.loop.lower import lower
    from ir.loop.passes import apply_passes

    rng = np.random.default_rng(0)
    passes = c_passes(detect("avx2"))
    a = Tensor(rng.integers(-5, 5, (96, 96)))
    x = Tensor(rng.standard_normal(1 << 18).astype(np.float32))
    idx = Tensor(rng.integers(0, 10, 1 << 18))
    f = Tensor(rng.standard_normal((96, 96)).astype(np.float32))
    cases = {
        "vectorize_tile: the tile of i0t stays scalar: no product of floats": a @ a,
        "parallelize: r0 stays on one thread: no output loop": x.cumsum(0),
        "parallelize: i0 stays on one thread: a data-dependent address": Tensor(
            np.zeros(10, np.float32)
        ).index_add(0, idx, x),
        "": f @ f,
    }
    for said, t in cases.items():
        graph = schedule([t.node]).graph
        i = len(graph.kernels) - 1
        nest = apply_passes(lower(graph, i), passes)
        assert (nest.notes[0] if nest.notes else "").startswith(said), nest.notes
        if said:
            with pytest.raises(ValueError, match="a pass did not apply: " + said.split(":")[0]):
                apply_passes(lower(graph, i), passes, strict=True)
        got, want = (get_device(d).realize([t.node])[0].data for d in ("c", "numpy"))
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), said
