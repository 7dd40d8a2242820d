"""Size-generic kernels on the c device: one compile per structure, the same bits as the
kernels specialized to their sizes, on many shapes."""

import re

import numpy as np
import pytest

from ir.c.passes import c_passes
from ir.c.units import compile, generic
from ir.graph import dtypes
from ir.kernel.schedule import schedule
from ir.loop.generic import GENERIC_PASSES, lower_generic
from ir.loop.interp import interpret
from ir.loop.lower import lower
from ir.loop.passes import apply_passes
from ir.printer import ir
from limn import Tensor, where
from limn.ops.joining import cat, stack
from limn.runtime.c import CDevice
from limn.runtime.target import detect


@pytest.fixture(scope="module")
def devices():
    return CDevice(generic=True), CDevice(generic=False)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        flat = x.reshape(-1)
        if flat.size > 3:  # the values a fold's order shows: nan, and a signed zero tie
            flat[1], flat[2], flat[3] = 0.0, -0.0, np.nan if seed % 2 else 0.0
        return x
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(-1000, 1000, shape).astype(dtype)


def _index(shape, n, seed):
    """Indices in 0..n-1, repeats included (so a scatter's adds collide)."""
    return np.random.default_rng(seed).integers(0, n, shape).astype(np.int64)


# each structure builds its outputs from numpy arrays of the shape it is given
STRUCTURES = {
    "broadcast_add": (
        lambda s: [Tensor(_data(s, np.float32, 0)) + Tensor(_data(s[1:], np.float32, 1))],
        [(1, 1), (3, 4), (5, 7), (2, 1), (1, 9), (0, 3), (6, 6)],
    ),
    "strided_views": (
        lambda s: [Tensor(_data(s, np.float32, 2)).T[::2].flip(0) * 3.0 - 1.0],
        [(2, 3), (4, 4), (7, 5), (1, 8), (9, 2)],
    ),
    "pad": (
        lambda s: [Tensor(_data(s, np.float32, 3)).pad(((1, 2), (0, 3))) + 0.5],
        [(1, 1), (3, 4), (5, 2), (2, 7)],
    ),
    "sum_rows": (
        lambda s: [Tensor(_data(s, np.float32, 4)).sum(axis=1)],
        [(3, 4), (5, 7), (1, 15), (8, 1), (4, 0), (2, 31)],  # 31: the most without lanes
    ),
    "sum_axis0_keepdim": (
        lambda s: [Tensor(_data(s, np.float64, 5)).sum(axis=0, keepdim=True)],
        [(3, 4), (5, 7), (15, 2), (1, 3)],
    ),
    "int_sum_long": (  # exact: generic at any length within the work bound
        lambda s: [Tensor(_data(s, np.int32, 6)).sum(axis=-1)],
        [(2, 100), (3, 333), (1, 1000), (4, 7)],
    ),
    "max_with_nan_and_zeros": (
        lambda s: [Tensor(_data(s, np.float32, 7)).max(axis=0)],
        [(4, 3), (9, 2), (2, 5), (1, 1)],
    ),
    "cumsum": (
        lambda s: [
            Tensor(_data(s, np.float32, 8)).cumsum(axis=1),
            Tensor(_data(s, np.int64, 9)).cumsum(axis=0),
        ],
        [(3, 4), (2, 9), (5, 1), (1, 6)],
    ),
    "half_widths": (
        lambda s: [
            (Tensor(_data(s, np.float32, 10)).cast(dtypes.float16) + 3.0).sum(axis=1),
            Tensor(_data(s, np.float32, 11)).cast(dtypes.bfloat16) + 1.0,
        ],
        [(2, 3), (4, 5), (7, 1)],
    ),
    "compare_where": (
        lambda s: [
            where(
                Tensor(_data(s, np.int16, 12)) < Tensor(_data(s, np.int16, 13)),
                Tensor(_data(s, np.float32, 14)),
                2.0,
            )
        ],
        [(3,), (17,), (1,), (40,)],
    ),
    "constants_vary_with_the_shape": (
        lambda s: [
            Tensor(_data(s, np.float32, 17)) * (s[0] / 3.0) + [np.nan, -0.0, 1e30, 2.5][s[0] % 4],
            Tensor(_data(s, np.int64, 18)) * (s[0] - 3) + 2**40,
            Tensor(_data(s, np.uint8, 19)) < s[0] + 3,
        ],
        [(1, 2), (2, 3), (3, 1), (4, 4), (6, 2)],
    ),
    "views_of_fused_computations": (
        lambda s: [
            (Tensor(_data(s, np.float32, 26)) * 2.0 + 1.0).T[::2].flip(1)
            + Tensor(_data(s[::-1], np.float32, 27))[::2],
            (Tensor(_data(s, np.float32, 28)).exp() + 0.5).pad(((1, 0), (0, 2))).sum(axis=0),
        ],
        [(2, 3), (4, 4), (3, 7), (5, 2)],
    ),
    "gather_and_scatter_add": (
        lambda s: [
            Tensor(_data(s, np.float32, 21)).gather(1, Tensor(_index(s, s[1], 22))) * 2.0,
            Tensor(_data(s, np.float32, 23)).scatter_add(
                1, Tensor(_index(s, s[1], 24)), Tensor(_data(s, np.float32, 25))
            ),
        ],
        [(2, 3), (4, 1), (3, 7), (1, 5)],
    ),
    "sin_near_and_far": (
        lambda s: [
            (Tensor(_data(s, np.float32, 15)) * 1e8).sin(),
            Tensor(_data(s, np.float32, 16)).sin(),
        ],
        [(5,), (12,), (9,)],
    ),
}


def _realize(dev, outs):
    return [b.data.copy() for b in dev.realize([t.node for t in outs])]


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_generic_kernels_match_specialized_bits_and_compile_once(name, devices):
    gen, spec = devices
    build, shapes = STRUCTURES[name]
    functions = None
    for k, shape in enumerate(shapes):
        outs = build(shape)
        graph = schedule([t.node for t in outs]).graph
        calls = compile(graph, None, detect()).calls
        assert len(calls) == len(graph.kernels), f"{name}: a kernel specialized at {shape}"
        used = set(f for f, _ in calls.values())
        if functions is None:
            functions = used
        else:  # every shape of the structure calls the same functions
            assert used == functions, f"{name} at {shape}"
        before = dict(gen.toolchain.stats)
        got = _realize(gen, outs)
        if k:  # compiled for the first shape: later shapes neither compile nor load
            assert gen.toolchain.stats["compiles"] == before["compiles"], f"{name} at {shape}"
            assert gen.toolchain.stats["loads"] == before["loads"], f"{name} at {shape}"
        want = _realize(spec, build(shape))
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            assert np.array_equal(_bits(g), _bits(w)), f"{name} at {shape}: {g} vs {w}"


def test_the_generic_nest_is_what_runs(devices):
    """The interpreter runs the printed generic nest with the sizes the device passes."""
    gen, _ = devices
    for shape in [(3, 4), (6, 2)]:
        a = _data(shape, np.float32, 20)
        x = Tensor(a).T[1:] * 2.0 + 1.0
        graph = schedule([x.node]).graph
        nest, sizes = lower_generic(graph, 0)
        nest = apply_passes(nest, GENERIC_PASSES)
        assert "sizes  n0, n1" in nest.format() and "i0*st" in nest.format()
        out = np.empty(graph.buffers[graph.kernels[0].output].shape, np.float32)
        interpret(nest, [a], out, sizes)
        assert np.array_equal(_bits(out.reshape(-1)), _bits(_realize(gen, [x])[0].reshape(-1)))
        # the printed stages: the nest with this call's sizes, and the C function called
        printed = ir(x, passes=c_passes(detect()))
        assert nest.format(["buf0"], "buf1", sizes) in printed
        ((name, _),) = compile(graph, None, detect()).calls.values()
        assert f"void {name}(void *const *args, int64_t *err, const int64_t *sizes)" in ir(
            x, stage="c", target=detect()
        )
        assert name in gen.tiers


def test_a_generic_nest_prints_each_run_time_value_by_name_with_the_value_it_has():
    """A constant and a loop's stop read ``c0 (=2.5)``, ``n0 (=4)`` (not the bits of 2.5);
    with those written as their values, each CONST and LOOP line is the specialized one."""
    x = Tensor(_data((4, 3), np.float32, 21)) * 2.5 + 1.0
    generic, special = ir(x, passes=c_passes(detect())), ir(x)
    assert "CONST   v1 = c0 (=2.5) : float32" in generic and "LOOP    i0 < n0 (=4)" in generic
    assert "c0=2.5, c1=1.0" in generic and str(np.float32(2.5).view(np.int32)) not in generic
    lines = [ln for ln in generic.splitlines() if ln.strip().startswith(("CONST", "LOOP"))]
    valued = [re.sub(r"\w+ \(=(.*?)\)", r"\1", ln) for ln in lines]
    assert valued == [ln for ln in special.splitlines() if ln.strip().startswith(("CONST", "LOOP"))]


def _scalar_of_nested_pads(n, row, col):
    """One element of a stack of stacks over the differences of a concatenation."""
    pieces = [
        _data((2, n), np.float32, 30),
        _data((2, 3), np.float32, 31),
        _data((2, n + 1), np.float32, 32),
    ]
    y = cat([Tensor(p) for p in pieces], axis=1)
    for _ in range(3):
        y = y[:, 1:] - y[:, :-1]
    for _ in range(4):
        y = stack([y, y * 2.0], axis=-1)[..., 1] - stack([y, y + 1.0], axis=-1)[..., 0]
    return y[row, col]


def test_a_scalar_read_of_nested_pads_lowers_as_small_as_the_specialized_nest(devices):
    """A pad predicate whose index is the same in every iteration is decided when lowering.
    Kept, each branch of a nest of pads carried predicates of its own, so nothing beneath
    was shared: this element lowered to 18,765 instructions (81 specialized)."""
    gen, spec = devices
    for n, row, col in [(3, 0, 0), (4, 1, 5), (2, 1, 1), (5, 0, 3)]:
        t = _scalar_of_nested_pads(n, row, col)
        graph = schedule([t.node]).graph
        assert len(compile(graph, None, detect()).calls) == len(graph.kernels)
        for i in range(len(graph.kernels)):
            small = len(lower(graph, i).body)
            assert len(lower_generic(graph, i)[0].body) <= 2 * small
        got = _realize(gen, [t])[0]
        want = _realize(spec, [_scalar_of_nested_pads(n, row, col)])[0]
        assert np.array_equal(_bits(got.reshape(-1)), _bits(want.reshape(-1))), (n, row, col)


def test_an_out_of_range_index_fails_in_a_generic_kernel(devices):
    gen, _ = devices
    for bad in (3, -1):
        index = np.array([[0, bad], [1, 2]], np.int64)
        x = Tensor(np.ones((2, 3), np.float32)).gather(1, Tensor(index))
        graph = schedule([x.node]).graph
        assert compile(graph, None, detect()).calls, "the gather went generic"
        with pytest.raises(IndexError, match="out of range for axis 1 of size 3"):
            gen.realize([x.node])


def test_which_kernels_stay_specialized():
    """Above the work bound, lanes of a long float reduce, and a float product folded (an
    FMA when tiled) keep their specialized nests; so do custom passes."""
    rng = np.random.default_rng(0)

    def is_generic(t, passes=None):
        graph = schedule([t.node]).graph
        return generic(graph, graph.kernels[-1], passes or c_passes(detect()))

    small = rng.standard_normal((4, 8)).astype(np.float32)
    assert is_generic(Tensor(small) + 1.0)
    assert not is_generic(Tensor(rng.standard_normal((80, 80)).astype(np.float32)) + 1.0)
    assert is_generic(Tensor(small).sum(axis=1))
    assert not is_generic(Tensor(rng.standard_normal((2, 32)).astype(np.float32)).sum(axis=1))
    assert is_generic(Tensor(rng.integers(0, 9, (2, 500)).astype(np.int32)).sum(axis=1))
    w = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
    assert not is_generic(Tensor(small) @ w)
    assert not is_generic(Tensor(small) + 1.0, passes=c_passes(detect())[:-1])


def test_limn_generic_0_specializes_every_kernel(monkeypatch):
    x = Tensor(_data((4, 3), np.float32, 22)) * 2.5 + 1.0
    steps = {}
    for value in ("0", "1"):
        monkeypatch.setenv("LIMN_GENERIC", value)
        dev = CDevice()
        dev.keep_plans = False
        assert dev.generic_kernels == (value == "1")
        plan, _ = dev.plan_for([x.node])
        steps[value] = {step.sizes is not None for step in plan.steps}  # generic
    assert steps == {"0": {False}, "1": {True}}


def test_a_small_kernel_called_often_is_built_again_at_o3_with_the_same_bits(monkeypatch):
    """A generic kernel and a small specialized one (a float sum over lanes) run from the
    quick build until their calls have spent ``hot_s`` (``LIMN_HOT_S``), then from an -O3
    build of the same text: the same bits before and after."""
    monkeypatch.setenv("LIMN_HOT_S", "3600")
    dev = CDevice()
    dev.keep_plans = False
    assert dev.hot_s == 3600.0
    a = _data((8, 64), np.float32, 30)

    def outs():  # a generic kernel, and lanes of a float reduce (specialized, small)
        return [Tensor(a).exp() * 0.5 - 1.0, (Tensor(a) * 2.0).sum(axis=1)]

    plan, _ = dev.plan_for([t.node for t in outs()])
    assert sorted(step.sizes is not None for step in plan.steps) == [False, True]
    quick = _realize(dev, outs())
    assert dev.stats["hot_kernels"] == 0
    dev.hot_s = 0.0
    hot = _realize(dev, outs())
    assert dev.stats["hot_kernels"] == 2
    for q, h in zip(quick, hot):
        assert np.array_equal(_bits(q), _bits(h))
    again = _realize(dev, outs())
    assert dev.stats["hot_kernels"] == 2  # built once
    assert all(np.array_equal(_bits(q), _bits(g)) for q, g in zip(quick, again))
