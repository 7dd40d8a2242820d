"""Composite math rows: one graph node each, the same answer on every device and decomposed.

A composite (sin, pow, division, ...) is evaluated three ways: by numpy on the reference
device, by the c device's inline C, and by its decomposition into primitives (what a
device that renders no composite gets). Special values (nan, +-inf, +-0.0 and the edges
of each domain) must agree exactly, finite values within the precision table's bounds
(``tests/test_precision.py`` asserts those bounds on drawn points); gradients are the
rows' own rules, checked against torch, also through ``create_graph=True``.
"""

from __future__ import annotations

import numpy as np
import pytest

import limn
import limn_array as xp
from ir.graph.decompose import decompose
from ir.graph.node import toposort
from ir.graph.ops import COMPOSITE, PRIMITIVE, TABLE, Op
from limn import Tensor
from limn.runtime.device import get_device, install
from limn.runtime.target import detect

torch = pytest.importorskip("torch")

UNARY = sorted((o for o in COMPOSITE if TABLE[o].arity == 1), key=lambda o: o.value)
BINARY = sorted((o for o in COMPOSITE if TABLE[o].arity == 2), key=lambda o: o.value)
# the Array API spelling of each row
XP = {Op.ABS: "abs", Op.DIV: "divide", Op.ROUND: "round", Op.FMOD: None, Op.EXP2: None}
XP.update({o: o.value.lower() for o in COMPOSITE if o not in XP})

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.5, 1e-30, -1e-30]
SPECIAL += [1e30, -1e30, 3e38, 1e-310, 100.0, -100.0, 0.75, 710.0, -745.0, 1e300]


def _apply(op: Op, args: list[np.ndarray], device: str) -> np.ndarray:
    ts = [Tensor(a, device=device) for a in args]
    return ts[0].p_op(op, *ts[1:]).numpy()


def _numpy_reference(op: Op, args: list[np.ndarray]) -> np.ndarray:
    """The row's numpy function at float64, rounded to the operands' dtype."""
    with np.errstate(all="ignore"):
        wide = [a.astype(np.float64) for a in args]
        return np.asarray(TABLE[op].numpy(*wide)).astype(args[0].dtype)


def _close(got: np.ndarray, want: np.ndarray, ulps: float) -> np.ndarray:
    """Equal (signed zeros and nans included), or finite and within ``ulps`` of want."""
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
    with np.errstate(all="ignore"):
        gap = np.spacing(np.abs(want).astype(want.dtype)).astype(np.float64)
        near = np.abs(got.astype(np.float64) - want.astype(np.float64)) <= ulps * gap
    return same | np.isfinite(got) & np.isfinite(want) & near


def _grid(op: Op, dtype) -> list[np.ndarray]:
    vals = np.array(SPECIAL, np.float64).astype(dtype)
    if TABLE[op].arity == 1:
        return [vals]
    return [np.repeat(vals, len(vals)), np.tile(vals, len(vals))]


def _c_or_skip() -> str:
    try:
        get_device("c")
    except (ValueError, RuntimeError, OSError) as e:
        pytest.skip(f"c device: {e}")
    return "c"


def _mismatches(op, args, got, want, ulps):
    bad = ~_close(got, want, ulps)
    return [tuple(float(a[i]) for a in args) + (got[i], want[i]) for i in np.flatnonzero(bad)][:5]


# ---- one node ---------------------------------------------------------------------------------


def test_sin_prints_as_one_graph_node():
    x = xp.asarray(np.linspace(-3, 3, 7, dtype=np.float32))
    lines = limn.ir(xp.sin(x), stage="graph").splitlines()
    ops = [line.split()[2] for line in lines[:-1]]
    assert ops == ["BUFFER", "SIN"], lines


@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda o: o.value)
def test_both_frontends_build_the_same_single_node(op):
    name = XP[op]
    if name is None:
        pytest.skip(f"the standard has no {op.value.lower()} (Tensor has)")
    args = [np.array([0.5, 1.5], np.float32)] * TABLE[op].arity
    arr = getattr(xp, name)(*[xp.asarray(a) for a in args])
    assert arr.node.op == op and all(s.op == Op.BUFFER for s in arr.node.srcs)


def test_tensor_division_and_rounding_are_the_composite_rows():
    a = Tensor(np.array([1.0, -0.0, -0.4], np.float32))
    assert (a / 3).node.op == Op.DIV
    assert [a.floor().node.op, a.ceil().node.op, a.round().node.op] == [Op.FLOOR, Op.CEIL, Op.ROUND]
    assert np.signbit(a.ceil().numpy()).tolist() == [False, True, True]  # ceil(-0.4) is -0.0
    # torch divides correctly rounded; a * (1/b) would not
    x = np.float32(np.random.default_rng(0).standard_normal(4096))
    y = np.float32(np.random.default_rng(1).standard_normal(4096))
    assert np.array_equal(
        (Tensor(x) / Tensor(y)).numpy(), (torch.tensor(x) / torch.tensor(y)).numpy()
    )


# ---- the same answer on every device ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda o: o.value)
def test_special_values_match_numpy_on_the_numpy_and_c_devices(op, dtype):
    args = _grid(op, dtype)
    want = _numpy_reference(op, args)
    for device in ("numpy", _c_or_skip()):
        got = _apply(op, args, device)
        assert not _mismatches(op, args, got, want, 2.5), (
            device,
            _mismatches(op, args, got, want, 2.5),
        )


@pytest.mark.parametrize("op", [Op.SIN, Op.COS, Op.TAN], ids=lambda o: o.value)
def test_c_trig_is_within_an_ulp_below_2_24_and_past_it_by_one_reduction(op):
    """float32 sin, cos and tan: one Payne-Hanek reduction serves every argument (one C
    function, whatever the kernel's arguments), within an ulp of numpy at float64, and an
    element's result does not depend on the other arguments of its kernel."""
    _c_or_skip()
    rng = np.random.default_rng(11)
    near = np.r_[
        SPECIAL[:2],
        SPECIAL[4:13],
        [1e-40, 2.0**24 - 1, -(2.0**23)],
        np.float32(np.pi / 2) * np.arange(-40, 41),  # next to the multiples of pi/2
        rng.standard_normal(500) * 10.0 ** rng.uniform(-6, 7, 500),
    ].astype(np.float32)
    far = np.r_[near, np.float32(1e30)]
    src = limn.ir(Tensor(near, device="c").p_op(op), stage="c")
    assert src.count(f"limn_{op.value.lower()}_float(") >= 1 and "_near" not in src
    got_near, got_far = _apply(op, [near], "c"), _apply(op, [far], "c")
    assert not _mismatches(op, [near], got_near, _numpy_reference(op, [near]), 1.0)
    assert not _mismatches(op, [far], got_far, _numpy_reference(op, [far]), 1.0)
    assert got_near.tobytes() == got_far[:-1].tobytes()


def test_c_float32_tanh_and_log1p_hold_an_ulp_at_their_edges():
    """c float32 tanh and log1p (double kernels to a float's need, rounded once): points on
    both sides of where their values change regime, out to the saturation and the ends of
    the range, within an ulp of numpy at float64 (ir/c/libm.py)."""
    _c_or_skip()
    rng = np.random.default_rng(5)
    edges = np.float32([1.0, 9.5, 9.0, 0.5493, 2.0**24, 2.0**-24, 1e-45])
    close = np.r_[
        np.nextafter(edges, np.float32(np.inf)), edges, np.nextafter(edges, np.float32(0))
    ]
    spread = np.float32(10.0 ** rng.uniform(-8, 1.2, 2000))
    for op, x in (
        (Op.TANH, np.r_[close, -close, spread, -spread]),
        (
            Op.LOG1P,
            np.r_[
                close,
                spread,
                np.float32(10.0 ** rng.uniform(1, 38, 500)),
                -np.float32(rng.uniform(0, 1, 1000)),
                np.float32(-1 + 2.0**-24),
            ],
        ),
    ):
        x = x.astype(np.float32)
        src = limn.ir(Tensor(x, device="c").p_op(op), stage="c")
        assert {Op.TANH: "limn_expm1f_d(", Op.LOG1P: "limn_logf_d("}[op] in src
        got = _apply(op, [x], "c")
        assert not _mismatches(op, [x], got, _numpy_reference(op, [x]), 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda o: o.value)
def test_the_decomposition_matches_the_direct_form(op, dtype):
    """The rule a primitive-only device runs, on the reference device: special values
    exactly, drawn values within 3.5 ulps (the table's loosest bound)."""
    rng = np.random.default_rng(3)
    drawn = [
        rng.standard_normal(257) * 10.0 ** rng.uniform(-3, 3, 257) for _ in range(TABLE[op].arity)
    ]
    if op in (Op.ACOSH,):
        drawn = [1 + np.abs(d) for d in drawn]
    if op in (Op.ASIN, Op.ACOS, Op.ATANH):
        drawn = [np.tanh(d) for d in drawn]
    if op == Op.POW:
        drawn = [np.abs(drawn[0]), drawn[1] / 100]
    grid = _grid(op, dtype)
    args = [np.r_[g, d.astype(dtype)] for g, d in zip(grid, drawn)]
    node = Tensor(args[0]).p_op(op, *[Tensor(a) for a in args[1:]]).node
    (spelled,) = decompose([node], keep=lambda n: False)
    assert all(n.op in PRIMITIVE for n in toposort([spelled]))
    numpy_dev = get_device("numpy")
    (direct,) = numpy_dev.realize([node])
    (split,) = numpy_dev.realize([spelled])
    got, want = split.data, direct.data
    ulps = 3.5 if op not in (Op.LOGADDEXP, Op.POW) else 4.0
    assert not _mismatches(op, args, got, want, ulps), _mismatches(op, args, got, want, ulps)


@pytest.fixture
def primitive_c():
    """The c device rendering no composite, as a new device that knows only the primitives."""
    from limn.runtime.c import CDevice

    _c_or_skip()
    prev = install("c", CDevice(composites=False))
    yield "c"
    install("c", prev)


def test_a_device_that_renders_no_composite_gets_them_for_free(primitive_c):
    x = np.float32(np.random.default_rng(5).standard_normal(512) * 30)
    for op in (Op.SIN, Op.TANH, Op.DIV, Op.FLOOR):
        args = [x] * TABLE[op].arity
        got = _apply(op, args, primitive_c)
        assert not _mismatches(op, args, got, _numpy_reference(op, args), 1.0), op


@pytest.mark.slow
@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda o: o.value)
def test_every_composite_on_a_device_that_renders_none(op, primitive_c):
    args = _grid(op, np.float32)
    got = _apply(op, args, primitive_c)
    want = _numpy_reference(op, args)
    assert not _mismatches(op, args, got, want, 2.5), _mismatches(op, args, got, want, 2.5)


def test_the_c_kernel_of_a_composite_is_a_few_hundred_lines():
    from ir.c.render import program, render
    from ir.kernel.schedule import schedule
    from ir.loop.lower import lower

    _c_or_skip()
    for fn in (xp.sin, xp.tanh, xp.log1p):
        x = xp.asarray(np.ones(1 << 10, np.float32))
        graph = schedule([fn(x).node]).graph
        assert len(graph.kernels) == 1
        src = program([render(lower(graph, 0), "k0")], detect())
        assert len(src.splitlines()) < 300, (fn.__name__, len(src.splitlines()))


# ---- gradients: each row's own rule, against torch ----------------------------------------------

TORCH = {Op.ROUND: torch.round, Op.DIV: torch.div, Op.POW: torch.pow, Op.ABS: torch.abs}


def _domain(op: Op, rng, n: int = 64) -> list[np.ndarray]:
    x = rng.uniform(-2, 2, n)
    if op in (Op.LOG2, Op.LOG10, Op.LOG1P, Op.POW):
        x = rng.uniform(0.2, 3, n)
    if op in (Op.ASIN, Op.ACOS, Op.ATANH):
        x = rng.uniform(-0.9, 0.9, n)
    if op == Op.ACOSH:
        x = rng.uniform(1.1, 4, n)
    if TABLE[op].arity == 1:
        return [x]
    y = rng.uniform(0.5, 2, n) * rng.choice([-1, 1], n)
    return [x, y]


@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda o: o.value)
def test_gradient_of_every_composite_matches_torch(op):
    args = _domain(op, np.random.default_rng(11))
    ts = [Tensor(a, dtype="float64", requires_grad=True) for a in args]
    out = ts[0].p_op(op, *ts[1:])
    g = np.random.default_rng(12).standard_normal(out.shape)
    out.backward(Tensor(g, dtype="float64"))
    tt = [torch.tensor(a, requires_grad=True) for a in args]
    fn = TORCH.get(op, getattr(torch, op.value.lower(), None))
    tout = fn(*tt)
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-14)
    for t, r in zip(ts, tt):
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_gradient_graphs_are_built_from_composite_nodes():
    x = Tensor(np.array([0.3, 1.2]), dtype="float64", requires_grad=True)
    x.sin().sum().backward()
    assert Op.COS in {n.op for n in toposort([x.grad.node])}


@pytest.mark.parametrize("op", [Op.SIN, Op.TANH, Op.ATAN, Op.EXPM1, Op.LOG1P, Op.POW, Op.DIV])
def test_second_derivatives_through_composites_match_torch(op):
    args = _domain(op, np.random.default_rng(13), 16)
    ts = [Tensor(a, dtype="float64", requires_grad=True) for a in args]
    (gx,) = _grads(ts[0].p_op(op, *ts[1:]).sum(), ts[:1], create_graph=True)
    gx.sum().backward()
    tt = [torch.tensor(a, requires_grad=True) for a in args]
    fn = TORCH.get(op, getattr(torch, op.value.lower(), None))
    (tg,) = torch.autograd.grad(fn(*tt).sum(), tt[:1], create_graph=True)
    (tg2,) = torch.autograd.grad(tg.sum(), tt[:1], allow_unused=True)  # x/y is linear in x
    np.testing.assert_allclose(gx.numpy(), tg.detach().numpy(), rtol=1e-10)
    want = np.zeros(args[0].shape) if tg2 is None else tg2.numpy()
    got = np.zeros(args[0].shape) if ts[0].grad is None else ts[0].grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def _grads(loss, leaves, create_graph):
    loss.backward(create_graph=create_graph)
    out = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None
    return out


def test_tensor_pow_of_a_float_is_the_pow_row_as_in_the_array_api():
    x = np.float32(np.random.default_rng(8).uniform(0.1, 3, 1000))
    t = Tensor(x) ** 3
    assert t.node.op == Op.POW
    assert np.array_equal(t.numpy(), np.asarray(xp.pow(xp.asarray(x), 3.0)))
    assert (Tensor(np.arange(5)) ** 3).numpy().tolist() == [0, 1, 8, 27, 64]  # integers exact


def test_the_op_table_has_one_row_per_op_and_the_counts_its_docstring_gives():
    import ir.graph.ops as ops

    assert set(TABLE) == set(Op) and len(PRIMITIVE) == 29 and len(COMPOSITE) == 29
    assert "29 rows" in ops.__doc__ and "29 composite rows" in ops.__doc__
    for op in COMPOSITE:
        row = TABLE[op]
        assert row.numpy is not None and row.grad is not None and row.decompose is not None
