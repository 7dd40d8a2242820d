"""limn.Tensor as a torch user meets it, with numpy and torch as oracles.

Creation, movement, Python indexing, iteration, broadcasting, elementwise ops, reductions
with axis/keepdim, matmul in every rank, and Python's data model (elementwise comparisons,
truth values, ``np.asarray``, scalars on the left). Laziness is checked too: ``repr`` and
graph building never compute.
"""

from __future__ import annotations

import math
import weakref

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import limn
from ir.graph import dtypes
from ir.graph.ops import Op
from limn import Tensor


def _arr(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _close(got, want, tol=1e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ---- creation -----------------------------------------------------------------------


@pytest.mark.parametrize("d", [d for d in dtypes.ALL if not d.is_complex], ids=str)
def test_a_numpy_array_keeps_its_dtype_and_values(d):
    a = (np.arange(12).reshape(3, 4) % 5).astype(d.np)
    t = Tensor(a)
    assert t.dtype == d and t.shape == (3, 4) and t.ndim == 2 and t.size == 12
    np.testing.assert_array_equal(t.numpy(), a)


def test_python_data_gets_torch_default_dtypes():
    assert Tensor([[1, 2], [3, 4]]).dtype == dtypes.int64
    assert Tensor([1.0, 2]).dtype == dtypes.float32
    assert Tensor([True, False]).dtype == dtypes.bool_
    assert Tensor(3.5).shape == () and Tensor(3.5).item() == 3.5
    assert Tensor([1, 2], dtype="float16").dtype == dtypes.float16
    assert Tensor(np.float64(2.0)).dtype == dtypes.float64


def test_constant_creators_match_numpy():
    np.testing.assert_array_equal(Tensor.zeros((2, 3)).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(Tensor.ones((4,), dtype="int8").numpy(), np.ones(4, np.int8))
    assert Tensor.full((2, 2), 7).dtype == dtypes.int64
    assert Tensor.full((2, 2), 7.5).dtype == dtypes.float32
    np.testing.assert_array_equal(Tensor.full((2, 2), 7.5).numpy(), np.full((2, 2), 7.5))
    x = Tensor(np.zeros((2, 3), np.float64))
    assert x.ones_like().dtype == dtypes.float64 and x.zeros_like().shape == (2, 3)
    np.testing.assert_array_equal(x.full_like(3).numpy(), np.full((2, 3), 3.0))


def test_creators_take_a_shape_as_separate_ints_or_one_tuple_like_torch():
    for make in (Tensor.zeros, Tensor.ones, Tensor.randn, Tensor.rand):
        assert make(2, 3).shape == (2, 3) and make((2, 3)).shape == (2, 3)
        assert make([4]).shape == (4,) and make(5).shape == (5,) and make().shape == ()
        assert make(2, 3, dtype="float64").dtype == dtypes.float64
    np.testing.assert_array_equal(Tensor.ones(2, 3).numpy(), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(Tensor.zeros(2, 1, dtype="int8").numpy(), np.zeros((2, 1)))
    np.testing.assert_array_equal(Tensor.full((2, 3), 4).numpy(), np.full((2, 3), 4))
    assert Tensor.full(3, 1.5).shape == (3,)
    z = Tensor.zeros(2, 3, requires_grad=True)
    assert z.requires_grad and z.shape == (2, 3)


@pytest.mark.parametrize(
    "args", [(5,), (0,), (1,), (2, 9), (9, 2, -2), (0.5, 2.0, 0.25), (-3, 3, 1), (7, 100, 13)]
)
def test_arange_matches_numpy(args):
    got = Tensor.arange(*args)
    want = np.arange(*args)
    assert got.dtype == (dtypes.int64 if want.dtype.kind == "i" else dtypes.float32)
    np.testing.assert_allclose(got.numpy(), want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_a_long_arange_counts_every_index_on_each_device(device, dtype):
    """Past 64 values arange is built as rows of 64 (compose.arange's bits, cut by the c
    device, multiplied past a dozen): each length around a row's edge, and long ones."""
    for n in (0, 1, 63, 64, 65, 128, 129, 4097, 10_000, 70_001):
        got = Tensor.arange(n, dtype=dtype).numpy()
        assert got.dtype == np.dtype(dtype) and got.tobytes() == np.arange(n, dtype=dtype).tobytes()
    signed = [(-0.0, -100.0, -0.5), (0.0, -100.0, -0.5), (-0.0, 100.0)] if dtype != "int64" else []
    for args in [*signed, (5, 1000, 7)]:
        want = torch.arange(*args, dtype=getattr(torch, dtype)).numpy()  # start + i * step:
        got = Tensor.arange(*args, dtype=dtype).numpy()  # -0.0 first only from a -0.0 start
        assert got.tobytes() == want.tobytes(), args


@pytest.mark.parametrize("n, m", [(3, None), (2, 4), (4, 2), (1, 1)])
def test_eye_matches_numpy(n, m):
    np.testing.assert_array_equal(Tensor.eye(n, m).numpy(), np.eye(n, m, dtype=np.float32))


def test_random_creators_are_reproducible_under_set_seed():
    limn.set_seed(3)
    a, b = Tensor.randn((50,)).numpy(), Tensor.rand((50,)).numpy()
    limn.set_seed(3)
    np.testing.assert_array_equal(Tensor.randn((50,)).numpy(), a)
    np.testing.assert_array_equal(Tensor.rand((50,)).numpy(), b)
    assert not np.array_equal(Tensor.randn((50,)).numpy(), a)
    assert b.min() >= 0 and b.max() < 1 and a.dtype == np.float32
    big = Tensor.randn((20000,)).numpy()
    assert abs(big.mean()) < 0.05 and abs(big.std() - 1) < 0.05


# ---- movement -----------------------------------------------------------------------

A = np.arange(1, 25, dtype=np.float32).reshape(2, 3, 4)

MOVES = [
    (lambda t: t.reshape(4, -1), lambda a: a.reshape(4, -1)),
    (lambda t: t.reshape((6, 4)), lambda a: a.reshape(6, 4)),
    (lambda t: t.view(24), lambda a: a.reshape(24)),
    (lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    (lambda t: t.permute(-1, 0, 1), lambda a: a.transpose(2, 0, 1)),
    (lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    (lambda t: t.T, lambda a: a.T),
    (lambda t: t.mT, lambda a: a.swapaxes(-1, -2)),
    (lambda t: t[:, :1].expand(2, 3, 4), lambda a: np.broadcast_to(a[:, :1], (2, 3, 4))),
    (lambda t: t[:1].expand(5, -1, 3, 4), lambda a: np.broadcast_to(a[:1], (5, 1, 3, 4))),
    (lambda t: t.pad(((0, 0), (1, 2), (3, 0))), lambda a: np.pad(a, ((0, 0), (1, 2), (3, 0)))),
    (
        lambda t: t.pad(((1, 1),), value=-5.0),
        lambda a: np.pad(a, ((0, 0), (0, 0), (1, 1)), constant_values=-5),
    ),
    (lambda t: t.shrink(((1, 2), None, (1, 3))), lambda a: a[1:2, :, 1:3]),
    (lambda t: t.flip(0, 2), lambda a: a[::-1, :, ::-1]),
    (lambda t: t.flatten(), lambda a: a.reshape(-1)),
    (lambda t: t.flatten(1), lambda a: a.reshape(2, 12)),
    (lambda t: t.flatten(0, 1), lambda a: a.reshape(6, 4)),
    (lambda t: t[:, :1].squeeze(), lambda a: a[:, :1].squeeze()),
    (lambda t: t[:, :1].squeeze(1), lambda a: a[:, 0]),
    (lambda t: t.unsqueeze(-1), lambda a: a[..., None]),
    (lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    (lambda t: t.repeat(2, 1, 1), lambda a: np.tile(a, (2, 1, 1))),
    (lambda t: t.contiguous(), lambda a: a),
    (lambda t: limn.cat([t, t * 2], 1), lambda a: np.concatenate([a, a * 2], 1)),
    (lambda t: limn.stack([t, t + 1], -1), lambda a: np.stack([a, a + 1], -1)),
    (lambda t: t.split(1, 1)[2], lambda a: a[:, 2:3]),
    (lambda t: t.split([1, 3], 2)[1], lambda a: a[:, :, 1:]),
    (lambda t: t.chunk(2, 2)[1], lambda a: a[:, :, 2:]),
]


@pytest.mark.parametrize("i", range(len(MOVES)))
def test_movement_matches_numpy(i):
    f, ref = MOVES[i]
    got, want = f(Tensor(A)), ref(A)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


# ---- indexing -----------------------------------------------------------------------


@st.composite
def index_keys(draw, shape):
    key = []
    for s in shape[: draw(st.integers(0, len(shape)))]:
        if draw(st.booleans()):
            key.append(draw(st.integers(-s, s - 1)))
        else:
            bound = st.none() | st.integers(-s - 2, s + 2)
            step = draw(st.none() | st.integers(-4, 4).filter(bool))
            key.append(slice(draw(bound), draw(bound), step))
    for _ in range(draw(st.integers(0, 2))):
        key.insert(draw(st.integers(0, len(key))), None)
    if draw(st.booleans()):
        key.insert(draw(st.integers(0, len(key))), Ellipsis)
    return tuple(key)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_indexing_matches_numpy(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=5))
    key = data.draw(index_keys(shape))
    a = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    try:
        want = a[key]
    except IndexError:
        with pytest.raises(IndexError, match="index"):
            Tensor(a)[key]
        return
    got = Tensor(a)[key]
    assert got.shape == want.shape, key
    np.testing.assert_array_equal(got.numpy(), want)


def test_a_single_index_needs_no_tuple_and_a_0d_int_tensor_indexes():
    t = Tensor(A)
    np.testing.assert_array_equal(t[1].numpy(), A[1])
    np.testing.assert_array_equal(t[-1, 2].numpy(), A[-1, 2])
    np.testing.assert_array_equal(t[Tensor(1)].numpy(), A[1])
    assert t[1, 2, 3].item() == A[1, 2, 3]


def test_iteration_and_unpacking_walk_dim_0():
    q, k, v = Tensor(A.reshape(3, 2, 4))
    np.testing.assert_array_equal(k.numpy(), A.reshape(3, 2, 4)[1])
    rows = [r.numpy() for r in Tensor(A)]
    assert len(rows) == 2 and all(np.array_equal(r, a) for r, a in zip(rows, A))
    assert len(Tensor(A)) == 2
    with pytest.raises(TypeError, match="0-d"):
        iter(Tensor(1.0))


# ---- broadcasting and elementwise ---------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4))
def test_binary_ops_broadcast_like_numpy(shapes):
    sa, sb = shapes.input_shapes
    a, b = _arr(sa, 1), _arr(sb, 2) + 3
    ta, tb = Tensor(a), Tensor(b)
    for got, want in [(ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / tb, a / b)]:
        assert got.shape == shapes.result_shape
        _close(got.numpy(), want)
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    np.testing.assert_array_equal(limn.where(ta > 0, ta, tb).numpy(), np.where(a > 0, a, b))


X = np.array([-2.5, -1.0, -0.5, -0.0, 0.3, 0.5, 1.5, 2.5, 3.7, 10.0], np.float32)
POS = np.abs(X) + 0.1

UNARY = {
    "exp": (lambda t: t.exp(), torch.exp, X),
    "log": (lambda t: t.log(), torch.log, POS),
    "sqrt": (lambda t: t.sqrt(), torch.sqrt, POS),
    "rsqrt": (lambda t: t.rsqrt(), torch.rsqrt, POS),
    "reciprocal": (lambda t: t.reciprocal(), torch.reciprocal, POS),
    "exp2": (lambda t: t.exp2(), torch.exp2, X),
    "log2": (lambda t: t.log2(), torch.log2, POS),
    "abs": (lambda t: t.abs(), torch.abs, X),
    "neg": (lambda t: -t, torch.neg, X),
    "sign": (lambda t: t.sign(), torch.sign, X),
    "square": (lambda t: t.square(), torch.square, X),
    "relu": (lambda t: t.relu(), torch.relu, X),
    "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid, X * 10),
    "tanh": (lambda t: t.tanh(), torch.tanh, X * 10),
    "gelu": (lambda t: t.gelu(), F.gelu, X),
    "gelu_tanh": (lambda t: t.gelu("tanh"), lambda x: F.gelu(x, approximate="tanh"), X),
    "silu": (lambda t: t.silu(), F.silu, X),
    "softplus": (lambda t: t.softplus(), F.softplus, X * 10),
    "erf": (lambda t: t.erf(), torch.erf, X),
    "floor": (lambda t: t.floor(), torch.floor, X),
    "ceil": (lambda t: t.ceil(), torch.ceil, X),
    "trunc": (lambda t: t.trunc(), torch.trunc, X),
    "round": (lambda t: t.round(), torch.round, X),
    "clamp": (lambda t: t.clamp(-1, 2), lambda x: torch.clamp(x, -1, 2), X),
    "pow_float": (lambda t: t**1.5, lambda x: x**1.5, POS),
    "pow_neg_int": (lambda t: t**-2, lambda x: x**-2, POS),
    "pow_cube": (lambda t: t**3, lambda x: x**3, X),
    "pow_tensor": (lambda t: t ** Tensor(X), lambda x: x ** torch.tensor(X), X),
    "rpow": (lambda t: 2.0**t, lambda x: 2.0**x, X),
    "softmax": (lambda t: t.softmax(0), lambda x: torch.softmax(x, 0), X),
    "log_softmax": (lambda t: t.log_softmax(), lambda x: torch.log_softmax(x, -1), X),
}


@pytest.mark.parametrize("name", UNARY)
def test_elementwise_ops_match_torch(name):
    f, tf, x = UNARY[name]
    got = f(Tensor(x))
    want = tf(torch.tensor(x)).numpy()
    assert got.dtype == dtypes.float32
    _close(got.numpy(), want, 2e-6 if name not in ("gelu", "erf") else 1e-6 * 5)


def test_nan_and_inf_are_classified_and_propagate():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], np.float32)
    t = Tensor(x)
    np.testing.assert_array_equal(t.isnan().numpy(), np.isnan(x))
    np.testing.assert_array_equal(t.isinf().numpy(), np.isinf(x))
    np.testing.assert_array_equal(t.isfinite().numpy(), np.isfinite(x))
    y = Tensor(np.array([0.0, np.nan, 1.0, 2.0, 1.0], np.float32))
    np.testing.assert_array_equal(
        t.maximum(y).numpy(), torch.maximum(torch.tensor(x), torch.tensor(y.numpy())).numpy()
    )
    np.testing.assert_array_equal(
        t.minimum(y).numpy(), torch.minimum(torch.tensor(x), torch.tensor(y.numpy())).numpy()
    )


# ---- comparisons and the Python data model ------------------------------------------


def test_comparison_operators_are_elementwise_like_numpy():
    a = np.array([1.0, 2.0, np.nan, 4.0, -0.0], np.float32)
    b = np.array([2.0, 2.0, np.nan, 3.0, 0.0], np.float32)
    ta, tb = Tensor(a), Tensor(b)
    with np.errstate(invalid="ignore"):
        pairs = [
            (ta == tb, a == b),
            (ta != tb, a != b),
            (ta < tb, a < b),
            (ta <= tb, a <= b),
            (ta > tb, a > b),
            (ta >= tb, a >= b),
            (ta == 2, a == 2),
            (3 > ta, 3 > a),
            (2.0 <= ta, 2.0 <= a),
        ]
    for got, want in pairs:
        assert got.dtype == dtypes.bool_
        np.testing.assert_array_equal(got.numpy(), want)
    c = np.array([True, False, True])
    np.testing.assert_array_equal((Tensor(c) & ~Tensor(c[::-1])).numpy(), c & ~c[::-1])
    np.testing.assert_array_equal((Tensor(c) | Tensor(c[::-1])).numpy(), c | c[::-1])
    np.testing.assert_array_equal((Tensor(c) ^ Tensor(c[::-1])).numpy(), c ^ c[::-1])


@pytest.mark.parametrize("d", dtypes.SIGNED + dtypes.UNSIGNED + (dtypes.bool_,), ids=str)
def test_comparing_with_an_int_outside_the_dtype_range_is_exact_not_wrapped(d):
    info = np.iinfo(d.np) if d.is_int else np.iinfo(np.int64)
    x = np.array([info.min, 0, 1, info.max], d.np) if d.is_int else np.array([True, False])
    t = Tensor(x)
    exact = x.astype(object)
    for c in (info.min - 1, info.max + 1, -(2**70), 2**70, -1):
        for name, got, want in [
            ("lt", t < c, exact < c),
            ("le", t <= c, exact <= c),
            ("gt", t > c, exact > c),
            ("ge", t >= c, exact >= c),
            ("eq", t == c, exact == c),
            ("ne", t != c, exact != c),
            ("rlt", c < t, c < exact),
            ("req", c == t, c == exact),
        ]:
            assert got.dtype == dtypes.bool_ and got.shape == x.shape
            np.testing.assert_array_equal(got.numpy(), want.astype(bool), err_msg=f"{d} {name} {c}")
    assert (Tensor(np.array([255], np.uint8)) + 2).numpy()[0] == 1  # arithmetic still wraps


def test_truth_value_of_one_element_is_its_value_and_of_many_is_an_error():
    assert bool(Tensor([3.0])) and not bool(Tensor(0.0)) and bool(Tensor([[True]]))
    with pytest.raises(ValueError, match=r"bool.*\(2,\).*any\(\).*all\(\)"):
        bool(Tensor([1.0, 2.0]))
    with pytest.raises(ValueError):
        if Tensor([1, 2]) == Tensor([1, 2]):
            pass


def test_python_conversions_give_the_numbers():
    t = Tensor(A)
    np.testing.assert_array_equal(np.asarray(t), A)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.asarray(t * 2).dtype == np.float32
    assert int(Tensor(3)) == 3 and float(Tensor([2.5])) == 2.5
    assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert [10, 20, 30][Tensor(2)] == 30


def test_scalars_and_arrays_on_the_left_work():
    x = np.array([1.0, 2.0, 4.0], np.float32)
    t = Tensor(x)
    for got, want in [
        (2 + t, 2 + x),
        (2 - t, 2 - x),
        (2 * t, 2 * x),
        (2 / t, 2 / x),
        (2**t, 2**x),
        (np.float32(3) * t, 3 * x),
        (np.ones(3, np.float32) - t, 1 - x),
    ]:
        assert isinstance(got, Tensor)
        _close(got.numpy(), want)
    np.testing.assert_array_equal((np.eye(3, dtype=np.float32) @ t).numpy(), x)


def test_float64_stays_float64_through_every_kind_of_op():
    a = _arr((3, 4), 3, np.float64)
    t = Tensor(a)
    outs = [
        t + 1.5,
        t * t,
        t.exp(),
        t.sum(0),
        t.mean(),
        t.amax(1),
        t.softmax(-1),
        t @ t.T,
        t.var(1),
        t / 3,
        t.sigmoid(),
    ]
    assert all(o.dtype == dtypes.float64 for o in outs)
    _close((t @ t.T).numpy(), a @ a.T, 1e-12)
    _close(t.softmax(-1).numpy(), torch.softmax(torch.tensor(a), -1).numpy(), 1e-12)


def test_integer_true_division_gives_float32():
    got = Tensor([1, 2, 3]) / 2
    assert got.dtype == dtypes.float32
    np.testing.assert_array_equal(got.numpy(), [0.5, 1.0, 1.5])


# ---- reductions ---------------------------------------------------------------------

R = _arr((3, 4, 5), 4)
AXES = [None, 0, -1, 1, (0, 2), (-1, -3), (0, 1, 2)]


def _taxis(axis, nd):
    return tuple(range(nd)) if axis is None else axis


REDUCES = {
    "sum": (lambda t, ax, k: t.sum(ax, k), lambda x, ax, k: x.sum(dim=_taxis(ax, 3), keepdim=k)),
    "mean": (lambda t, ax, k: t.mean(ax, k), lambda x, ax, k: x.mean(dim=_taxis(ax, 3), keepdim=k)),
    "max": (lambda t, ax, k: t.amax(ax, k), lambda x, ax, k: torch.amax(x, _taxis(ax, 3), k)),
    "min": (lambda t, ax, k: t.amin(ax, k), lambda x, ax, k: torch.amin(x, _taxis(ax, 3), k)),
    "var": (lambda t, ax, k: t.var(ax, k), lambda x, ax, k: x.var(dim=_taxis(ax, 3), keepdim=k)),
    "std": (
        lambda t, ax, k: t.std(ax, k, correction=0),
        lambda x, ax, k: x.std(dim=_taxis(ax, 3), keepdim=k, correction=0),
    ),
    "logsumexp": (
        lambda t, ax, k: t.logsumexp(ax, k),
        lambda x, ax, k: torch.logsumexp(x, _taxis(ax, 3), k),
    ),
}


@pytest.mark.parametrize("name", REDUCES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_any_axes_match_torch(name, keepdim):
    f, tf = REDUCES[name]
    for axis in AXES:
        got = f(Tensor(R), axis, keepdim)
        want = tf(torch.tensor(R), axis, keepdim).numpy()
        assert got.shape == want.shape, (name, axis, keepdim)
        _close(got.numpy(), want)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_arg_reductions_and_logical_reductions_match_torch(axis):
    x = np.round(R * 2) / 2  # ties, so first-index rules show
    tx = torch.tensor(x)
    kw = {} if axis is None else {"dim": axis}
    np.testing.assert_array_equal(Tensor(x).argmax(axis).numpy(), torch.argmax(tx, **kw).numpy())
    np.testing.assert_array_equal(Tensor(x).argmin(axis).numpy(), torch.argmin(tx, **kw).numpy())
    b = x > 0
    np.testing.assert_array_equal(Tensor(b).any(axis).numpy(), b.any(axis))
    np.testing.assert_array_equal(Tensor(b).all(axis).numpy(), b.all(axis))
    if axis is not None:
        _close(Tensor(x).cumsum(axis).numpy(), np.cumsum(x, axis))


def test_an_empty_axis_tuple_reduces_nothing_as_in_numpy():
    """torch reads dim=() as every dim; limn follows numpy and the Array API here."""
    for f in (lambda t: t.sum(()), lambda t: t.max(()), lambda t: t.mean(())):
        got = f(Tensor(R))
        assert got.shape == R.shape
        _close(got.numpy(), R)


def test_sum_of_bools_counts_and_sum_takes_a_dtype():
    b = np.array([[True, False, True], [True, True, True]])
    assert Tensor(b).sum().dtype == dtypes.int64 and Tensor(b).sum().item() == 5
    assert Tensor(np.ones(3, np.int8)).sum(dtype="float32").dtype == dtypes.float32


# ---- matmul -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sa, sb",
    [
        ((3, 4), (4, 2)),
        ((4,), (4, 2)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 3, 4), (4, 5)),
        ((3, 4), (2, 4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((2, 3, 4), (4,)),
        ((4,), (2, 4, 3)),
        ((1, 1), (1, 1)),
    ],
)
def test_matmul_matches_numpy_in_every_rank(sa, sb):
    a, b = _arr(sa, 5), _arr(sb, 6)
    got = Tensor(a) @ Tensor(b)
    want = a @ b
    assert got.shape == want.shape
    _close(got.numpy(), want, 1e-5)
    _close(Tensor(a).matmul(b).numpy(), want, 1e-5)


def test_matmul_promotes_and_linear_adds_the_bias():
    a, w, bias = _arr((3, 4), 7), _arr((2, 4), 8), _arr((2,), 9)
    assert (Tensor(a) @ Tensor(w.T.astype(np.float64))).dtype == dtypes.float64
    got = Tensor(a).linear(Tensor(w), Tensor(bias))
    _close(got.numpy(), F.linear(torch.tensor(a), torch.tensor(w), torch.tensor(bias)).numpy())


# ---- indexed ops --------------------------------------------------------------------


def test_gather_scatter_add_and_one_hot_match_torch():
    x = _arr((3, 5), 10)
    idx = np.array([[0, 4], [2, 2], [1, 0]])
    got = Tensor(x).gather(1, Tensor(idx))
    np.testing.assert_array_equal(
        got.numpy(), torch.gather(torch.tensor(x), 1, torch.tensor(idx)).numpy()
    )
    src = _arr((3, 2), 11)
    got = Tensor(x).scatter_add(1, Tensor(idx), Tensor(src))
    want = torch.tensor(x).scatter_add(1, torch.tensor(idx), torch.tensor(src))
    _close(got.numpy(), want.numpy())
    labels = np.array([3, 0, 2])
    np.testing.assert_array_equal(Tensor(labels).one_hot(4).numpy(), np.eye(4)[labels])


def test_dropout_keeps_the_expectation_and_is_identity_when_off():
    x = Tensor.ones((4000,))
    assert Tensor.dropout(x, 0.5, training=False) is x
    kept = x.dropout(0.25).numpy()
    assert set(np.unique(kept)) <= {0.0, np.float32(1 / 0.75)}
    assert abs(kept.mean() - 1) < 0.1


# ---- laziness and printing ----------------------------------------------------------


def test_graph_building_does_not_compute():
    huge = Tensor.zeros((100_000, 100_000)) + 1  # 40 GB if anything computed it
    s = (huge.sum(0) * 3).graph()
    assert "SUM" in s and "CONST" in s
    assert huge.node.op == Op.ADD


def test_printing_a_large_lazy_tensor_computes_only_its_edges():
    n = 30_000  # (past 2**31 elements the c device's index arithmetic overflows)
    huge = (Tensor.zeros((n, n), device="c") + 1) * Tensor.arange(n, device="c")
    text = repr(huge)  # 3.6 GB if the whole tensor were computed
    first = "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 2.9997e+04, 2.9998e+04,"
    assert text.splitlines()[0] == first
    default = limn.current_device() == "c"  # then repr leaves the device out
    assert "...," in text and text.endswith("]])" if default else "device='c')")
    assert huge.node.op == Op.MUL  # still lazy


# ---- writes under laziness: torch's eager values ------------------------------------

IN_PLACE = {
    "add_": lambda t: t.add_(10),
    "sub_": lambda t: t.sub_(t * 0.5),
    "mul_": lambda t: t.mul_(3),
    "div_": lambda t: t.div_(4),
    "clamp_": lambda t: t.clamp_(-0.5, 0.5),
    "exp_": lambda t: t.exp_(),
    "copy_": lambda t: t.copy_(t.flip(0)),
    "zero_": lambda t: t.zero_(),
    "fill_": lambda t: t.fill_(7.0),
    "masked_fill_": lambda t: t.masked_fill_(t > 0, -1.0),
    "setitem": lambda t: t.__setitem__((slice(1, 3), 0), 5.0),
    "setitem on a view": lambda t: t[1].__setitem__(slice(None), 9.0),
}


@pytest.mark.parametrize("write", IN_PLACE, ids=list(IN_PLACE))
def test_a_value_built_before_an_in_place_write_reads_the_old_value(write):
    a = _arr((4, 3), 31)
    x, tx = Tensor(a), torch.tensor(a)
    before = [x * 2 + 1, x.sum(0), x.clone(), (x @ x.T).relu()]
    tbefore = [tx * 2 + 1, tx.sum(0), tx.clone(), (tx @ tx.T).relu()]
    row, trow = x[2], tx[2]  # a view: it sees the write, as in torch
    IN_PLACE[write](x), IN_PLACE[write](tx)
    after, tafter = x * 2, tx * 2  # built after the write: reads the written value
    for got, want in zip([*before, row, x, after], [*tbefore, trow, tx, tafter]):
        _close(got.numpy(), want.numpy())


def test_a_value_built_after_a_write_and_read_after_it_commits_reads_it_once():
    x = Tensor.ones(3)
    x.add_(10)
    y = x * 3  # reads the write; read after it commits, the write is not applied again
    x.numpy()
    np.testing.assert_array_equal(y.numpy(), [33.0, 33.0, 33.0])


@pytest.mark.parametrize("here,there", [("numpy", "c"), ("c", "numpy")])
def test_a_value_moved_to_another_host_device_before_a_write_reads_the_old_value(here, there):
    x = Tensor([1.0, 2.0], device=here)
    moved = x.to(there) * 2  # host devices share the buffer: the other device reads it
    x.add_(1)
    np.testing.assert_array_equal(moved.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(x.numpy(), [2.0, 3.0])


def test_clone_is_a_snapshot_that_a_later_write_does_not_change():
    w, tw = Tensor(_arr((5,), 32)), torch.tensor(_arr((5,), 32))
    prev, tprev = w.clone(), tw.clone()
    w.mul_(1.4), tw.mul_(1.4)
    _close((w - prev).abs().max().item(), (tw - tprev).abs().max().item())
    _close(prev.numpy(), tprev.numpy())


def test_a_write_computes_only_itself_and_reuses_its_buffer_only_when_no_one_reads_it():
    from limn.runtime.device import observers

    x = Tensor(_arr((3,), 33))
    old = x.node.arg
    kept = x * 2  # a reader of the old value: the write leaves its bytes alone
    batches = []
    observers.append(lambda name, roots: batches.append([r.op for r in roots]))
    try:
        x.add_(1).realize()
    finally:
        observers.pop()
    assert batches == [[Op.ADD]]  # the write alone: no search computed the reader
    assert kept.node.op != Op.BUFFER and x.node.arg is not old
    _close(kept.numpy(), _arr((3,), 33) * 2)
    del kept  # now nothing reads x's bytes: the next write lands in them (an ASSIGN)
    mine = weakref.ref(x.node.arg)
    x.mul_(2).realize()
    assert x.node.arg is mine()
    _close(x.numpy(), (_arr((3,), 33) + 1) * 2)


def test_numpy_data_changed_after_it_is_handed_over_changes_no_tensor():
    src = np.arange(6.0, dtype=np.float32)
    made = [Tensor(src), limn.tensor(src), Tensor(src, dtype="float32")]
    doubled = [t * 2 for t in made]
    src[0] = 100
    for t, d in zip(made, doubled):
        assert t.numpy()[0] == 0 and d.numpy()[0] == 0


PRINTED = [
    [[1.5, 2.0], [3.0, -4.25]],
    [1.0, 2.0, 3.0],
    [1, 2, 3],
    [True, False],
    3.5,
    [1e-5, 1.0],
    [-1.5, 2.0, float("inf")],
    np.arange(2000.0).reshape(40, 50).astype(np.float32),
    np.arange(3000).reshape(3, 1000),
    np.zeros((0, 3), np.float32),
]


@pytest.mark.parametrize("data", PRINTED, ids=range(len(PRINTED)))
def test_print_shows_the_values_as_torch_prints_them(data):
    assert str(Tensor(data)) == str(torch.tensor(data))


def test_print_names_a_dtype_device_or_gradient_that_is_not_the_default():
    assert repr(Tensor([1.0, 2.0], dtype="float64")) == "tensor([1., 2.], dtype=float64)"
    assert repr(Tensor([1, 2], dtype="int32")) == "tensor([1, 2], dtype=int32)"
    x = Tensor([1.0], requires_grad=True)
    assert repr(x) == "tensor([1.], requires_grad=True)"
    assert repr(x * 2) == "tensor([2.], grad_fn=<MulBackward>)"
    other = "c" if limn.current_device() != "c" else "numpy"
    assert repr(Tensor([1.0], device=other)) == f"tensor([1.], device={other!r})"
    assert f"{Tensor(2.5):.2f}" == "2.50"


def test_the_graph_prints_one_node_per_line():
    x = Tensor(A)
    y = (x.permute(2, 0, 1)[1:] * 2).exp().sum(0)
    text = y.graph()
    lines = text.splitlines()
    ops = [ln.split("=")[1].split()[0] for ln in lines[:-1]]
    assert ops[0] == "BUFFER" and {"VIEW", "MUL", "EXP", "SUM", "CONST"} <= set(ops)
    assert lines[-1].startswith("out ")
    assert limn.format_graph([y.node]) == text
    y.realize()
    assert "BUFFER" in y.graph() and len(y.graph().splitlines()) == 2


def test_realize_computes_several_tensors_at_once_and_keeps_them():
    x = Tensor(A)
    a, b = x.exp(), (x * 2).sum()
    limn.realize(a, b)
    assert a.node.op == Op.BUFFER and b.node.op == Op.BUFFER
    _close(a.numpy(), np.exp(A))
    assert b.item() == pytest.approx(2 * A.sum())


def test_cast_helpers_name_their_dtypes_and_match_numpy():
    x = np.array([-1.7, 0.0, 2.5, 100.25], np.float32)  # in range for every target
    t = Tensor(x)
    for got, want in [
        (t.float(), x),
        (t.double(), x.astype(np.float64)),
        (t.half(), x.astype(np.float16)),
        (t.bfloat16(), x.astype(dtypes.bfloat16.np)),
        (t.int(), x.astype(np.int32)),
        (t.long(), x.astype(np.int64)),
        (t.bool(), x.astype(bool)),
        (t.to("int16"), x.astype(np.int16)),
        (t.abs().cast(np.uint8), np.abs(x).astype(np.uint8)),
    ]:
        assert got.dtype == dtypes.as_dtype(want.dtype)
        np.testing.assert_array_equal(got.numpy(), want)


# ---- torch's small names and where limn answered otherwise --------------------------


def test_descending_sort_and_topk_put_nan_first_as_the_largest_as_torch_does():
    data = np.array([[1.0, np.nan, 3.0, -1.0, np.nan, 3.0]], np.float32)
    sort = lambda x: x.sort(dim=-1, descending=True, stable=True)  # noqa: E731
    ours, theirs = sort(Tensor(data)), sort(torch.tensor(data))
    np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
    assert ours.indices.tolist() == theirs.indices.tolist()
    ours, theirs = Tensor(data).topk(4, dim=-1), torch.tensor(data).topk(4, dim=-1)
    np.testing.assert_array_equal(
        ours.values.numpy(), theirs.values.numpy()
    )  # torch's tie order varies


def test_torch_divergences_answer_as_torch_does():
    x = np.array([[0.0, 2.0, -0.0], [1.0, 0.0, 3.0]], np.float32)
    np.testing.assert_array_equal(Tensor(x).norm(p=0).numpy(), torch.tensor(x).norm(p=0).numpy())
    np.testing.assert_array_equal(Tensor(x).norm(0, 1).numpy(), torch.tensor(x).norm(0, 1).numpy())
    assert Tensor(x).squeeze(1).shape == tuple(torch.tensor(x).squeeze(1).shape) == (2, 3)
    for pads in [(-1, 2), (1, -2, -1, 0), (0, -3)]:
        ours = limn.nn.functional.pad(Tensor(x), pads, value=7.0).numpy()
        np.testing.assert_array_equal(ours, F.pad(torch.tensor(x), pads, value=7.0).numpy())
    ids = np.array([0, 3, 1])
    ours, theirs = limn.nn.functional.one_hot(Tensor(ids)), F.one_hot(torch.tensor(ids))
    assert ours.dtype == limn.int64 and ours.tolist() == theirs.tolist()


def test_from_numpy_shares_memory_both_ways_as_torch_does():
    a = np.zeros(3, np.float32)
    t = limn.from_numpy(a)
    a[0] = 5.0
    assert t.tolist() == [5.0, 0.0, 0.0]
    t.add_(1.0)
    t.realize()
    assert a.tolist() == [6.0, 1.0, 1.0]
    with pytest.raises(TypeError, match="from_numpy: needs a numpy array, got list"):
        limn.from_numpy([1.0])


@pytest.mark.parametrize(
    "pick",
    [lambda a: a[1:, :-1], lambda a: a.transpose(2, 0, 1), lambda a: a[:, ::2, 1:4],
     lambda a: a[::-1, :, ::-2], lambda a: np.broadcast_to(a[:, :1], (3, 4, 5)),
     lambda a: a[:, 1], lambda a: a[..., 2:3]],
    ids=["slice", "transpose", "steps", "backwards", "broadcast", "int", "size-1"],
)  # fmt: skip
def test_from_numpy_of_a_strided_array_shares_its_memory_as_torch_does(pick):
    base = np.arange(60.0).reshape(3, 4, 5)
    a = pick(base)
    t, want = limn.from_numpy(a), torch.from_numpy(a.copy())
    assert t.shape == tuple(want.shape) and t.dtype == limn.float64
    np.testing.assert_array_equal((t * 2).numpy(), a * 2)
    base[...] += 1  # seen by a value computed later, as torch's tensor sees it
    np.testing.assert_array_equal((t + 0).numpy(), a)
    if a.flags.writeable:
        t.add_(1.0)
        t.realize()
        np.testing.assert_array_equal(a, pick(np.arange(60.0).reshape(3, 4, 5)) + 2)
        assert base.sum() == 60 * 61 / 2 + a.size  # nothing outside the view was written


def test_torchs_small_names_answer_as_torch():
    limn.manual_seed(3)
    assert (
        sorted(limn.randperm(7).tolist()) == list(range(7)) and limn.randperm(4).dtype == limn.int64
    )
    assert limn.Size([2, 3]) == Tensor(np.zeros((2, 3))).shape and limn.is_tensor(Tensor(1.0))
    assert not limn.is_tensor(np.zeros(2)) and limn.get_default_dtype() == limn.float32
    assert limn.allclose(Tensor([1.0, 2.0]), Tensor([1.0, 2.0 + 1e-7]))
    assert not limn.allclose(Tensor([1.0]), Tensor([1.1]))
    w = Tensor([1.0], requires_grad=True)
    limn.set_grad_enabled(False)
    assert not (w * 2).requires_grad
    limn.set_grad_enabled(True)
    assert (w * 2).requires_grad
    with limn.set_grad_enabled(False):
        assert not (w * 2).requires_grad
    with limn.inference_mode():
        assert not (w * 2).requires_grad
    assert (w * 2).requires_grad


def test_an_index_past_one_dim_of_several_is_refused_even_where_the_flat_position_exists():
    """``x[[0], [7]]`` of a (3, 4) tensor: 7 is past dim 1, though 0 * 4 + 7 is a position of
    the flattened dims; torch and numpy refuse it, and so does limn (it returned x[1, 3])."""
    x = Tensor(np.arange(12.0).reshape(3, 4))
    assert x[[0, 2], [3, -3]].numpy().tolist() == [3.0, 9.0]
    for key in (([0], [7]), ([1], [-5]), ([3], [0])):
        with pytest.raises(IndexError, match="index"):
            x[key].numpy()


@pytest.mark.parametrize("pick", ["rows", "blocks", "scalars"])
def test_stacked_views_of_one_tensor_match_torch_values_and_gradients(pick):
    xn = _arr((10, 3, 2))
    x, t = Tensor(xn, requires_grad=True), torch.tensor(xn, requires_grad=True)
    idx = [3, 1, 3, 7, 0, 9]
    take = {
        "rows": lambda a, i: a[i],
        "blocks": lambda a, i: a[i, 1:],
        "scalars": lambda a, i: a[i, 2, 1],
    }[pick]
    got, want = limn.stack([take(x, i) for i in idx]), torch.stack([take(t, i) for i in idx])
    (got * got).sum().backward()
    (want * want).sum().backward()
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())
    with limn.no_grad():
        x.add_(1)  # a copy: the stack keeps the values it was made of
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())


def test_batches_of_rows_stacked_from_one_tensor_plan_once():
    c = limn.get_device("c")
    x = Tensor(_arr((50, 4))).to("c")
    rng = np.random.default_rng(0)
    plans = None
    for step in range(6):
        idx = rng.integers(0, 50, 16)
        got = limn.stack([x[int(i)] for i in idx]).sum(1).numpy()
        np.testing.assert_array_equal(got, x.numpy()[idx].sum(1))
        plans = c.stats["plans"] if step == 0 else plans
    assert c.stats["plans"] == plans


def test_what_a_tensor_is_answers_as_torch_for_a_dense_real_cpu_tensor():
    for make in (lambda m: m.ones(2, 3), lambda m: m.arange(6).reshape(2, 3),
                 lambda m: m.ones(2, 3).t(), lambda m: m.ones(4, 3)[::2],
                 lambda m: m.tensor([True]), lambda m: m.ones(2, dtype=m.uint8)):  # fmt: skip
        ours, theirs = make(limn), make(torch)
        for q in ("is_floating_point", "is_complex", "is_signed", "element_size",
                  "is_contiguous", "get_device"):  # fmt: skip
            assert getattr(ours, q)() == getattr(theirs, q)(), q
        for q in ("is_sparse", "is_cuda", "is_quantized", "is_meta"):
            assert getattr(ours, q) is getattr(theirs, q) is False, q
        assert limn.is_complex(ours) is torch.is_complex(theirs) is False
        assert limn.is_floating_point(ours) == torch.is_floating_point(theirs)
    x = limn.ones(2, 3)
    y = x.clone(memory_format=limn.contiguous_format)
    assert y.tolist() == x.tolist() and y is not x


@pytest.mark.parametrize(
    "fn",
    [
        lambda m, a: m.linalg.inv(a),
        lambda m, a: m.linalg.det(a),
        lambda m, a: m.linalg.slogdet(a)[1],
        lambda m, a: m.logdet(a @ a.transpose(-1, -2) + m.eye(3)),
        lambda m, a: m.linalg.solve(a, a[..., :1] * 2 + 1),
        lambda m, a: m.linalg.svdvals(a),
        lambda m, a: m.linalg.eigvalsh(a + a.transpose(-1, -2)),
        lambda m, a: m.linalg.matrix_norm(a, "nuc"),
        lambda m, a: m.linalg.matrix_norm(a, 2, keepdim=True),
        lambda m, a: m.linalg.matrix_norm(a, -2),
        lambda m, a: m.linalg.matrix_power(a, -2),
        lambda m, a: a[0].norm("nuc"),
    ],
    ids=["inv", "det", "logabsdet", "logdet", "solve", "svdvals", "eigvalsh", "nuc", "2", "-2",
         "power-2", "norm-nuc"],
)  # fmt: skip
def test_decompositions_give_torchs_values_and_gradients(fn):
    a = np.random.default_rng(0).standard_normal((2, 3, 3)) + 3 * np.eye(3)
    ours, theirs = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, w = fn(limn, ours), fn(torch, theirs)
    np.testing.assert_allclose(y.numpy(), w.detach().numpy(), rtol=1e-9, atol=1e-9)
    weights = np.random.default_rng(1).standard_normal(tuple(w.shape))
    (y * Tensor(weights)).sum().backward()
    (w * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-7, atol=1e-9)


def test_a_singular_matrix_is_refused_by_inverse_and_its_determinant_is_zero():
    a = Tensor([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(ValueError, match="linalg.inv: the matrix \\[2, 2\\] is singular"):
        limn.linalg.inv(a)
    assert limn.linalg.det(a).item() == 0.0 and a.det().item() == 0.0
    with pytest.raises(ValueError, match="linalg.det: needs float square matrices"):
        limn.linalg.det(Tensor(np.zeros((2, 3), np.float32)))
    with pytest.raises(ValueError, match="matrix_norm: dim must be two dims, got \\(0, 1, 2\\)"):
        Tensor(np.ones((2, 2, 2))).norm("nuc")


def test_solve_triangular_and_cholesky_solve_give_torchs_gradients_and_cholesky_refuses_one():
    rng = np.random.default_rng(0)
    a = np.tril(rng.standard_normal((3, 3))) + 3 * np.eye(3)
    b = rng.standard_normal((3, 2))
    outs = []
    for m, make in ((torch, torch.tensor), (limn, Tensor)):
        ta, tb = make(a, requires_grad=True), make(b, requires_grad=True)
        x = m.linalg.solve_triangular(ta, tb, upper=False) + m.cholesky_solve(tb, ta)
        (x * x).sum().backward()
        outs.append([x.detach().numpy(), ta.grad.numpy(), tb.grad.numpy()])
    for ours, theirs in zip(outs[1], outs[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9)
    spd = Tensor(a @ a.T, requires_grad=True)
    with pytest.raises(NotImplementedError, match="linalg.cholesky: limn has no gradient"):
        limn.linalg.cholesky(spd)
    with limn.no_grad():
        low = limn.linalg.cholesky(spd)
    np.testing.assert_allclose(low.numpy(), np.linalg.cholesky(a @ a.T), rtol=1e-12)
