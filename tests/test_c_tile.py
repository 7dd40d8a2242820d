"""Tiled contractions on the c device: the FMA is in the printed nest, and the interpreter
running that nest gives the C's bits exactly, for every layout, dtype, tail and thread count."""

from fractions import Fraction

import numpy as np
import pytest

import limn
from ir.graph import dtypes
from ir.loop.interp import fused_multiply_add, run
from limn import Tensor, nn
from limn.runtime.c import CDevice, c_passes

# tails of the MR x NR register block; the interpreter is slow, so the big one is marked slow
SHAPES = [(16, 24, 16), (7, 5, 9), pytest.param((33, 70, 41), marks=pytest.mark.slow)]


def _layouts(a, b):
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    return {
        "x@W": lambda: Tensor(a) @ Tensor(b),
        "x@W.T": lambda: Tensor(a) @ Tensor(bt).T,
        "x.T@g": lambda: Tensor(at).T @ Tensor(b),
        "relu(x)@W+1": lambda: (Tensor(a).relu() @ Tensor(b)) + 1,
        "pad(x)@W": lambda: Tensor(a).pad(((0, 0), (2, 1))) @ Tensor(b).pad(((2, 1), (0, 0))),
    }


@pytest.fixture(scope="module")
def devices():
    try:
        return CDevice(), CDevice(openmp=False)
    except RuntimeError as e:
        pytest.skip(f"c device unavailable: {e}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=["16x24x16", "7x5x9", "33x70x41"])
def test_tiled_contraction_is_the_printed_nest_bit_for_bit(dtype, shape, devices):
    _check_layouts(dtype, shape, devices)


def test_packed_blocks_and_their_tails_are_the_printed_nest_bit_for_bit(devices, monkeypatch):
    from ir.c import tile

    monkeypatch.setattr(tile, "MC", 12)  # 14 rows: a whole row block and a tail
    monkeypatch.setattr(tile, "NC", 64)  # 70 columns: a whole column block and a tail
    _check_layouts(np.float32, (14, 4, 70), (CDevice(), CDevice(openmp=False)))
    # x @ W.T's column panels are transposes: packed whole once, not once per row block
    a, bt = np.ones((14, 4), np.float32), np.ones((70, 4), np.float32)
    assert "*wb = malloc" in limn.ir(Tensor(a) @ Tensor(bt).T, stage="c")
    assert "*wb = malloc" not in limn.ir(Tensor(a) @ Tensor(bt.T.copy()), stage="c")


def test_a_small_output_over_a_long_reduce_is_split_into_blocks_for_the_team(devices):
    from ir.c import tile

    # a weight's gradient, 192 x 192 over 2048 rows: one 192 x 192 block before
    mc, nc = tile._enough_tasks(1, 192, 192, 192, 192, 6, 32)
    assert -(-192 // mc) * -(-192 // nc) >= tile.MIN_TASKS
    assert mc % 6 == 0 and nc % 32 == 0 and 192 % mc == 0 and 192 % nc == 0  # equal blocks
    assert tile._enough_tasks(8, 256, 768, 192, 512, 6, 32) == (132, 384)  # many: kept
    _check_layouts(np.float32, (30, 8, 64), devices)  # x.T @ g here: 5 slivers, 2 panels


def _check_layouts(dtype, shape, devices):
    threaded, serial = devices
    m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    for name, build in _layouts(a, b).items():
        text = limn.ir(build(), passes=c_passes())
        assert "tile=" in text and "FMA" in text, f"{name} {shape} is not tiled with an FMA"
        want = run([build().node], passes=c_passes())[0]
        for dev in (threaded, serial):
            got = dev.realize([build().node])[0].data
            assert got.tobytes() == want.tobytes(), (
                f"{name} {shape} {dtype.__name__}: {(got != want).sum()} cells differ from "
                "the interpreter"
            )


def test_a_one_row_matmul_is_a_row_block_of_one_with_the_longer_matmuls_bits(devices):
    """x @ W for a single row x is tiled as a row block of one: each cell folds the FMAs its
    row gets in a taller x (a kv-cache step's projections give the windowed forward's bits),
    and the interpreter running that nest agrees."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 16)).astype(np.float32)
    w = rng.standard_normal((16, 40)).astype(np.float32)
    for name, build in {"x@W": lambda a: Tensor(a) @ Tensor(w),
                        "x@W.T": lambda a: Tensor(a) @ Tensor(w.T.copy()).T}.items():  # fmt: skip
        full = devices[0].realize([build(x).node])[0].data
        text = limn.ir(build(x[2:3]), passes=c_passes())
        assert "tile=1" in text and "FMA" in text, name
        want = run([build(x[2:3]).node], passes=c_passes())[0]
        assert want.tobytes() == full[2:3].tobytes(), name
        for dev in devices:
            assert dev.realize([build(x[2:3]).node])[0].data.tobytes() == want.tobytes(), name


def test_a_large_tiled_matmul_is_the_same_on_every_thread_count_and_close_to_numpy(devices):
    threaded, serial = devices
    rng = np.random.default_rng(5)
    a = rng.standard_normal((200, 333)).astype(np.float32)
    b = rng.standard_normal((333, 700)).astype(np.float32)
    outs = []
    for n in (1, 2, 3):
        threaded.set_threads(n)
        outs.append(threaded.realize([(Tensor(a) @ Tensor(b)).node])[0].data)
    outs.append(serial.realize([(Tensor(a) @ Tensor(b)).node])[0].data)
    assert all(o.tobytes() == outs[0].tobytes() for o in outs)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(outs[0] - want).max() / np.abs(want).max() < 1e-5


def _exact(a, b, c, t):
    """The correctly rounded a*b + c, by exact rationals and a search of the neighbours."""
    x = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    f = t(float(x))
    near = [f, np.nextafter(f, t(-np.inf)), np.nextafter(f, t(np.inf))]
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


def test_a_side_no_outer_loop_moves_is_packed_once_and_stays_the_printed_nest(devices):
    """A conv's weights (forward) and its output gradient (weight gradient) do not depend on
    the outer loops: they are packed whole, once, by the team, and the bits do not move."""
    threaded, serial = devices
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 3, 9)).astype(np.float32)
    w = rng.standard_normal((8, 2, 3, 3)).astype(np.float32)
    g = rng.standard_normal((1, 8, 3, 9)).astype(np.float32)

    def forward():
        return nn.conv(Tensor(x), Tensor(w), padding=1)

    def weight_grad():
        wt = Tensor(w, requires_grad=True)
        (nn.conv(Tensor(x), wt, padding=1) * Tensor(g)).sum().backward()
        return wt.grad

    for build in (forward, weight_grad):
        c_text = limn.ir(build(), stage="c")
        assert "= malloc(sizeof(float) *" in c_text and ("*wa =" in c_text or "*wb =" in c_text)
        want = run([build().node], passes=c_passes())[0]
        for n in (1, 2):
            threaded.set_threads(n)
            assert threaded.realize([build().node])[0].data.tobytes() == want.tobytes()
        assert serial.realize([build().node])[0].data.tobytes() == want.tobytes()


def test_the_fill_before_a_tiled_contraction_is_its_start_value(devices):
    """The nest fills the output with the identity and then folds into it; the C starts
    each register block from that constant instead of storing it and reading it back."""
    threaded, serial = devices
    rng = np.random.default_rng(2)
    a = rng.standard_normal((20, 9)).astype(np.float32)
    b = rng.standard_normal((9, 40)).astype(np.float32)

    def build():
        return Tensor(a) @ Tensor(b)

    nest = limn.ir(build(), passes=c_passes())
    assert "STORE   out[" in nest and "ACCUM   out[" in nest  # the nest: fill, then fold
    c_text = limn.ir(build(), stage="c")
    assert "acc[a][b] = out[" not in c_text  # no cell is read back: the fill is the start
    assert c_text.count("= ((float)0x0.0p+0);\n") <= 4  # no fill nest (the pack tails' zeros)
    want = run([build().node], passes=c_passes())[0]
    for dev in (threaded, serial):
        assert dev.realize([build().node])[0].data.tobytes() == want.tobytes()


def test_a_single_panel_contraction_reads_its_rows_in_place_and_stays_the_printed_nest(devices):
    """attention's p @ v has one 32-wide column panel a head: each row would be packed to be
    read once, so whole slivers are read where they are (an edge sliver is still packed)."""
    threaded, serial = devices
    rng = np.random.default_rng(6)
    p = rng.standard_normal((2, 3, 13, 40)).astype(np.float32)  # 13 rows: 2 slivers + 1 row
    v = rng.standard_normal((2, 3, 40, 32)).astype(np.float32)
    layouts = {
        "p@v": lambda: Tensor(p) @ Tensor(v),
        "p.T@g": lambda: (
            Tensor(np.ascontiguousarray(p.swapaxes(-1, -2))).transpose(-2, -1) @ Tensor(v)
        ),
    }
    for name, build in layouts.items():
        c_text = limn.ir(build(), stage="c")
        assert "limn_mk_float_6x32(40, &in0[" in c_text, name  # in place, the load's strides
        want = run([build().node], passes=c_passes())[0]
        for dev in (threaded, serial):
            assert dev.realize([build().node])[0].data.tobytes() == want.tobytes(), name
    relu = limn.ir((Tensor(p).relu() @ Tensor(v)), stage="c")
    assert "&in0[" not in relu  # a computed row factor is packed


def test_x_at_w_t_packs_its_transposed_panels_8_by_8_and_stays_the_printed_nest(devices):
    """x @ W.T's column panels are transposes of W's rows: whole panels are copied by
    8 x 8 register transposes (an edge panel, a reduce not a multiple of 8, a computed
    factor or float64 take the scalar copy), and every layout keeps the nest's bits."""
    threaded, serial = devices
    rng = np.random.default_rng(7)
    x = rng.standard_normal((20, 40)).astype(np.float32)  # the interpreter runs it four times
    w = rng.standard_normal((70, 40)).astype(np.float32)  # panels of 32, 32 and an edge 6
    cases = {
        "x@W.T": (lambda: Tensor(x) @ Tensor(w).T, True),
        "k=36": (lambda: Tensor(x[:, :36]) @ Tensor(np.ascontiguousarray(w[:, :36])).T, False),
        "relu": (lambda: Tensor(x) @ Tensor(w).relu().T, False),
        "f64": (lambda: Tensor(x.astype(np.float64)) @ Tensor(w.astype(np.float64)).T, False),
    }
    for name, (build, transposed) in cases.items():
        c_text = limn.ir(build(), stage="c")
        assert ("limn_t8_float(&in1[" in c_text) == transposed, name
        assert "limn_mk_" in c_text, name  # still the packed contraction
        want = run([build().node], passes=c_passes())[0]
        for dev in (threaded, serial):
            assert dev.realize([build().node])[0].data.tobytes() == want.tobytes(), name
