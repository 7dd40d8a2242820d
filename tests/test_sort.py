"""ARGSORT, the one sort node: numpy's stable order on every device, one kernel on c.

The oracle is Python's ``sorted`` over (has a nan, the key or its negation, position), so
it shares no code with the numpy evaluation it checks. Each case runs on the numpy
reference, the c device (a merge sort per row: one SORT kernel), the c device rendering
primitives only (``composites=False``: the bitonic network, what a new device gets), and
the loop-nest interpreter over the SORT nest.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import limn
import limn_array as xp
from ir.graph import dtypes
from ir.graph.ops import Op
from ir.loop import interp
from limn import Tensor
from limn.runtime.device import get_device, install
from limn.runtime.target import detect

REAL = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)
SHAPES = [(0,), (1,), (2,), (3,), (5,), (16,), (17,), (33,), (100,), (2, 0), (3, 1), (3, 7)]
SHAPES += [(2, 3, 5), (4, 40)]
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _c_or_skip():
    try:
        get_device("c")
    except (ValueError, RuntimeError, OSError) as e:
        pytest.skip(f"no c device here: {e}")


@pytest.fixture(scope="module")
def primitives_c():
    """The c device rendering no composite: ARGSORT becomes the bitonic network."""
    from limn.runtime.c import CDevice

    _c_or_skip()
    install("c_primitives", CDevice(composites=False))
    return "c_primitives"


def _run(node_of, arrays, device: str) -> np.ndarray:
    """``node_of(*tensors)`` over ``arrays`` on ``device`` ("interp": the loop nests)."""
    if device == "interp":
        ts = [Tensor(a, dtype=_dtype(a), device="numpy") for a in arrays]
        (out,) = interp.run([node_of(*ts).node])
        return out
    if device == "c":
        _c_or_skip()
    ts = [Tensor(a, dtype=_dtype(a), device=device) for a in arrays]
    out = node_of(*ts)
    prev = limn.current_device()
    limn.set_device(device)
    try:
        return out.numpy()
    finally:
        limn.set_device(prev)


def _dtype(a: np.ndarray):
    return dtypes.bfloat16 if a.dtype == ml_dtypes.bfloat16 else dtypes.as_dtype(a.dtype)


def _values(name: str, shape, seed: int) -> np.ndarray:
    """Few distinct values (so ties are common), the dtype's extremes, and for floats nan,
    -0.0 and 0.0, infinities and a subnormal."""
    rng = np.random.default_rng(seed)
    if name == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if name == "bfloat16":
        npd = ml_dtypes.bfloat16
    else:
        npd = np.dtype(name)
    if name.startswith(("int", "uint")):
        info = np.iinfo(npd)
        pool = np.array([info.min, info.max, 0, 1, 2, info.max - 1, info.min + 1], dtype=npd)
        if info.min < 0:
            pool = np.concatenate([pool, np.array([-1, -2], npd)])
    else:
        tiny = float(ml_dtypes.finfo(npd).smallest_subnormal)
        pool = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.0, 1.5, tiny, -np.nan]
        pool = np.array(pool, np.float64).astype(npd)
    return pool[rng.integers(0, len(pool), shape)]


def _oracle(keys: list[np.ndarray], descending: bool) -> np.ndarray:
    """Python's sorted per row: nans last, keys in order (negated when descending), ties
    by position."""
    shape = keys[0].shape
    n = shape[-1]
    out = np.zeros((math.prod(shape[:-1]), n), np.int64)
    rows = [k.reshape(out.shape) for k in keys]
    for r in range(out.shape[0]):
        vals = [[float(v) if k.dtype.kind == "f" or k.dtype == ml_dtypes.bfloat16 else int(v)
                 for v in k[r]] for k in rows]  # fmt: skip

        def key(i, vals=vals):
            nan = any(isinstance(v[i], float) and math.isnan(v[i]) for v in vals)
            ks = tuple(0 if nan else (-v[i] if descending else v[i]) for v in vals)
            return (nan, ks, i)

        out[r] = sorted(range(n), key=key)
    return out.reshape(shape)


DEVICES = ["numpy", "c", "interp"]


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(st.sampled_from(REAL), st.sampled_from(SHAPES), st.booleans(), st.integers(0, 2**16))
def test_argsort_is_numpys_stable_order_on_every_device(device, name, shape, descending, seed):
    a = _values(name, shape, seed)
    got = _run(lambda t: t.p_argsort(descending=descending), [a], device)
    assert got.dtype == np.int64
    assert np.array_equal(got, _oracle([a], descending)), (name, shape, descending, a, got)


SLOW = pytest.mark.slow


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_long_rows_merge_many_runs(device):
    """Rows of thousands: the merges of runs of 16, nans set aside, ties by position."""
    a = _values("float32", (2, 3001), 11)
    b = _values("int16", (2, 3001), 12)
    for descending in (False, True):
        got = _run(lambda t, d=descending: t.p_argsort(descending=d), [a], device)
        assert np.array_equal(got, _oracle([a], descending)), descending
        got = _run(lambda t, u, d=descending: t.p_argsort(u, descending=d), [a, b], device)
        assert np.array_equal(got, _oracle([a, b], descending)), descending


@pytest.mark.parametrize(
    "name, shape",
    [("float64", (2, 33)), ("bfloat16", (7,)), ("uint64", (1,))]
    + [pytest.param(n, s, marks=SLOW) for n in ("int8", "float16", "bool") for s in ((7,), (33,))],
)
def test_the_bitonic_network_gives_the_same_order(primitives_c, name, shape):
    """What a device that does not render ARGSORT computes: the decomposition."""
    a = _values(name, shape, 3)
    for descending in (False, True):
        got = _run(lambda t, d=descending: t.p_argsort(descending=d), [a], primitives_c)
        assert np.array_equal(got, _oracle([a], descending)), (name, shape, descending)


@pytest.mark.parametrize("device", [*DEVICES, "c_primitives"])
def test_argsort_by_several_keys_is_lexicographic(device, request):
    if device == "c_primitives":
        device = request.getfixturevalue("primitives_c")
    shape = (2, 20) if device == "c_primitives" else (3, 45)
    a = _values("float64", shape, 7)
    b = _values("int32", shape, 8)
    c = _values("bool", shape, 9)
    for descending in (False, True):
        got = _run(lambda x, y, z, d=descending: x.p_argsort(y, z, descending=d), [a, b, c], device)
        assert np.array_equal(got, _oracle([a, b, c], descending)), descending


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_sort_moves_signed_zeros_and_nans_bit_for_bit(device):
    if device == "c":
        _c_or_skip()
    a = np.array([0.0, -0.0, np.nan, 1.0, -0.0, 0.0, -np.nan, -1.0])
    for descending in (False, True):
        got = np.asarray(xp.sort(xp.asarray(a, device=xp.Device(device)), descending=descending))
        want = a[_oracle([a], descending)]
        assert np.array_equal(np.signbit(got), np.signbit(want))
        assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_unique_of_complex_sorts_by_real_then_imaginary_part(device):
    if device == "c":
        _c_or_skip()
    a = np.array([1 + 2j, 1 + 1j, 0 + 5j, 1 + 1j, np.nan + 0j, -0.0 + 1j, 0 + 1j])
    got = xp.unique_counts(xp.asarray(a, device=xp.Device(device)))
    vals = np.asarray(got.values)
    assert np.array_equal(vals[:4], [0 + 1j, 0 + 5j, 1 + 1j, 1 + 2j])
    assert np.isnan(vals[4].real) and np.array_equal(np.asarray(got.counts), [2, 1, 2, 1, 1])


def test_a_c_device_sort_is_one_kernel_at_any_length():
    """O(1) kernels on c, where the network's rounds grow as log^2(n)."""
    from ir.graph.decompose import decompose
    from ir.kernel.schedule import schedule

    _c_or_skip()
    c = get_device("c")
    rounds = []
    for n in (200, 2000):
        t = Tensor(np.arange(n, 0, -1), device="c").p_argsort()
        plan, _ = c.plan_for([t.node])
        assert [k.kind for k in plan.graph.kernels] == ["ARGSORT"]
        assert len({s.lib for s in plan.steps}) == 1
        # what a device that renders no composite compiles instead
        net = schedule(decompose([t.node], keep=lambda node: False)).graph
        assert all(k.kind != "ARGSORT" for k in net.kernels)
        rounds.append(len(net.kernels))
        assert np.array_equal(t.numpy(), np.arange(n)[::-1])
    assert rounds[0] > 30 and rounds[1] > rounds[0] + 15, rounds  # 36 rounds at 200, 66
    # unique(): the sort, its gathers and the run marks, not a network of rounds
    x = xp.asarray(np.random.default_rng(0).integers(0, 3, 200), device=xp.Device("c"))
    before = c.stats["kernels"]
    xp.unique_values(x)
    kernels = c.stats["kernels"] - before
    assert kernels <= 12, kernels


def test_a_sort_of_many_rows_runs_them_on_the_team():
    from ir.c.passes import c_passes
    from ir.kernel.schedule import schedule
    from ir.loop.lower import lower
    from ir.loop.passes import apply_passes

    t = Tensor(np.zeros((64, 5000), np.float32), device="numpy").p_argsort()
    graph = schedule([t.node]).graph
    nest = apply_passes(lower(graph, 0), c_passes(detect()))
    loops = [i for i in nest.body if type(i).__name__ == "Loop"]
    assert loops[0].parallel == 1
    assert "SORT" in nest.format()


def test_argsort_has_no_gradient_and_the_sorted_values_do():
    x = Tensor(np.array([3.0, 1.0, 2.0]), dtype=dtypes.float64, requires_grad=True)
    perm = x.p_argsort()
    w = Tensor(np.array([10.0, 20.0, 30.0]), dtype=dtypes.float64)
    (x.p_gather(perm, 0) * w).sum().backward()
    assert np.array_equal(x.grad.numpy(), [30.0, 10.0, 20.0])  # w through the inverse order


def test_argsort_prints_as_one_graph_node():
    from ir import ir

    x = xp.asarray(np.arange(6.0))
    text = ir(xp.argsort(x, descending=True)._t, stage="graph")
    assert "ARGSORT" in text and "(descending)" in text
    assert sum(Op.ARGSORT.value in line for line in text.splitlines()) == 1


def test_the_cuda_stage_prints_the_network_and_the_c_stage_one_sort():
    """cuda renders no ARGSORT: its program is the decomposition's rounds, each a kernel."""
    from ir import ir

    x = xp.asarray(np.arange(10.0)[::-1].copy())
    perm = xp.argsort(x)._t
    cuda = ir(perm, stage="cuda")
    assert "argsort" not in cuda and cuda.count("__global__") > 10  # 10 rounds at 16
    c = ir(perm, stage="c", target=detect())
    assert c.count("limn_argsort_float64_a(") == 2  # its definition and the one call
