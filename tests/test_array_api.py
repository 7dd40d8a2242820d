"""limn_array against its oracles: numpy for values, array-api-strict for result dtypes.

Hypothesis draws dtypes, shapes and elements (nan, infinities and signed zeros included);
each test says what must hold. The official conformance suite runs separately through
tests/run_array_api_tests.sh. Every test runs on each device limn can start here: the
c device's run is slow-marked, except under ``LIMN_DEVICE=c`` (CI's compiled pass, .ci/run),
where it runs with fewer hypothesis examples, since each new graph compiles.
"""

from __future__ import annotations

import math
import os

import array_api_extra as xpx
import array_api_strict as strict
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import limn
import limn_array as xp
from ir.graph.ops import Op
from limn.runtime import register_device
from limn.runtime.numpy_ref import NumpyDevice

ON_C = os.environ.get("LIMN_DEVICE") == "c"  # CI's compiled pass runs the c device here
SETTINGS = settings(
    max_examples=6 if ON_C else 15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FLOATS = ("float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _devices():
    """numpy always; the c device too where it starts here: a slow test (each new graph
    compiles once, and hypothesis draws many), but part of the run under LIMN_DEVICE=c."""
    params = ["numpy"]
    for name in ("c",):
        try:
            limn.get_device(name)
        except (ValueError, RuntimeError, OSError):
            continue
        params.append(name if ON_C else pytest.param(name, marks=pytest.mark.slow))
    return params


@pytest.fixture(params=_devices(), autouse=True)
def device(request):
    prev = limn.current_device()
    limn.set_device(request.param)
    yield request.param
    limn.set_device(prev)


SHAPES = hnp.array_shapes(max_dims=3, max_side=4)


def floats(dtype: str, shape=SHAPES):
    return hnp.arrays(
        np.dtype(dtype),
        shape,
        elements=st.floats(width=np.dtype(dtype).itemsize * 8, allow_subnormal=False),
    )


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in units of the last place of ``want``; 0 where both are the same nan/inf."""
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(all="ignore"):
        gap = np.spacing(np.abs(want).astype(want.dtype)).astype(np.float64)
        d = np.abs(got.astype(np.float64) - want.astype(np.float64)) / gap
    d[same] = 0.0
    d[np.isnan(d)] = np.inf
    return d


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal values and equal signs of zero; any nan matches any nan."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    nan = np.isnan(got) & np.isnan(want)
    same_sign = np.signbit(got) == np.signbit(want)
    return bool(np.all(nan | ((got == want) & same_sign)))


# ---- the namespace --------------------------------------------------------------------------


def test_the_issue_example_runs_on_every_device_that_starts_here():
    for name in [p if isinstance(p, str) else p.values[0] for p in _devices()]:
        x = xp.linspace(0, 1, 5, device=name)
        s = xp.sum(xp.sin(x))
        assert s.device == xp.Device(name)
        assert float(s) == pytest.approx(np.sin(np.linspace(0, 1, 5)).sum(), rel=1e-15)


def test_a_value_read_once_is_kept_for_the_next_read_until_a_buffer_is_written(device):
    from ir.graph.ops import Op
    from limn.runtime.device import recall

    rng = np.random.default_rng(4)
    x = xp.asarray(rng.standard_normal((40, 7)), device=device)
    m = x @ x.T  # a contraction: a value of its own on either device
    assert float(xp.sum(m)) == pytest.approx(float(np.sum(np.asarray(x) @ np.asarray(x).T)))
    product = m.node.srcs[0] if m.node.op is Op.VIEW else m.node  # under matmul's reshape
    assert recall(product) is not None  # read through m's sum: kept, not computed again
    a = limn.Tensor(np.ones((8, 8)), device=device)
    square = a @ a
    assert (square + 0.0).sum().item() == 512.0
    assert recall(square.node.srcs[0]) is not None
    double = a * 2.0
    asked = double.node
    double.realize()
    a.assign(limn.Tensor(np.zeros((8, 8)), device=device)).realize()
    # the write is a new version of a: the lazy value built before it, still held, reads
    # the old one (whose bytes it kept), and the kept values read nothing it changed
    assert (square + 0.0).sum().item() == 512.0
    assert ((a @ a) + 0.0).sum().item() == 0.0  # built after: reads the bytes as written
    assert recall(asked) is not None  # a value asked for is a result, not a kept value


def test_an_array_changed_after_asarray_changes_no_value(device):
    src = np.arange(6.0)
    a = xp.asarray(src, device=device)
    b = a * 2
    shared = xp.asarray(src, device=device, copy=False)  # asked to share: it does
    src[0] = 100
    assert float(b[0]) == 0.0 and float(a[0]) == 0.0
    assert float(shared[0]) == 100.0


def test_namespace_is_found_through_array_api_compat_and_limn():
    import array_api_compat

    x = xp.linspace(0, 1, 5)
    assert array_api_compat.array_namespace(x) is xp
    assert array_api_compat.is_array_api_obj(x)
    assert limn.array_namespace() is xp
    assert xp.__array_api_version__ == "2025.12"
    np.testing.assert_allclose(float(xp.sum(xp.sin(x))), np.sin(np.linspace(0, 1, 5)).sum())


# ---- elementwise, against numpy ---------------------------------------------------------------

# (name, numpy function, max ulps for float64; float32 computes in float64 and rounds once)
UNARY = [
    ("sin", np.sin, 2),
    ("cos", np.cos, 2),
    ("tan", np.tan, 4),
    ("asin", np.arcsin, 4),
    ("acos", np.arccos, 4),
    ("atan", np.arctan, 3),
    ("sinh", np.sinh, 4),
    ("cosh", np.cosh, 3),
    ("tanh", np.tanh, 4),
    ("asinh", np.arcsinh, 3),
    ("acosh", np.arccosh, 4),
    ("atanh", np.arctanh, 4),
    ("expm1", np.expm1, 3),
    ("log1p", np.log1p, 3),
    ("log2", np.log2, 2),
    ("log10", np.log10, 4),
    ("exp", np.exp, 1),
    ("log", np.log, 1),
    ("sqrt", np.sqrt, 0),
    ("floor", np.floor, 0),
    ("ceil", np.ceil, 0),
    ("trunc", np.trunc, 0),
    ("round", np.round, 0),
    ("abs", np.abs, 0),
    ("negative", np.negative, 0),
    ("square", np.square, 0),
]


@pytest.mark.parametrize("name,ref,bound", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_functions_match_numpy_within_their_ulp_bound(name, ref, bound, dtype):
    @SETTINGS
    @given(floats(dtype))
    def check(a):
        out = getattr(xp, name)(xp.asarray(a))
        assert out.dtype == getattr(xp, dtype) and out.shape == a.shape
        got = np.asarray(out)
        with np.errstate(all="ignore"):
            want = ref(a.astype(np.float64)).astype(dtype) if dtype == "float32" else ref(a)
        limit = bound if dtype == "float64" else 1  # both sides round a float64 result once
        assert ulps(got, want).max() <= limit, (a, got, want)
        assert np.array_equal(np.isnan(got), np.isnan(want))

    check()


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5])


@pytest.mark.parametrize(
    "name,ref",
    [
        ("sin", np.sin),
        ("tan", np.tan),
        ("asin", np.arcsin),
        ("atan", np.arctan),
        ("sinh", np.sinh),
        ("tanh", np.tanh),
        ("asinh", np.arcsinh),
        ("atanh", np.arctanh),
        ("expm1", np.expm1),
        ("log1p", np.log1p),
        ("floor", np.floor),
        ("ceil", np.ceil),
        ("trunc", np.trunc),
        ("round", np.round),
        ("sqrt", np.sqrt),
        ("abs", np.abs),
        ("signbit", np.signbit),
    ],
)
def test_special_values_keep_signed_zeros_infinities_and_nans(name, ref):
    with np.errstate(all="ignore"):
        want = ref(SPECIAL)
    got = np.asarray(getattr(xp, name)(xp.asarray(SPECIAL)))
    exact = np.isinf(want) | (want == 0) | np.isnan(want) | (want == np.round(want))
    assert same_bits(got[exact], want[exact]), (got, want)


def test_trig_is_accurate_for_huge_arguments_through_payne_hanek_reduction():
    a = np.array([1e22, 1e300, -3.5e250, 2.0**1000, 1.7e308, 6.5e4, 1e6 + 0.5])
    for fn, ref in ((xp.sin, np.sin), (xp.cos, np.cos)):
        assert ulps(np.asarray(fn(xp.asarray(a))), ref(a)).max() <= 1


BINARY = [
    ("add", np.add),
    ("subtract", np.subtract),
    ("multiply", np.multiply),
    ("divide", np.divide),
    ("maximum", np.maximum),
    ("minimum", np.minimum),
    ("atan2", np.arctan2),
    ("hypot", np.hypot),
    ("copysign", np.copysign),
    ("nextafter", np.nextafter),
    ("logaddexp", np.logaddexp),
    ("equal", np.equal),
    ("less", np.less),
    ("greater_equal", np.greater_equal),
]


@pytest.mark.parametrize("name,ref", BINARY, ids=[b[0] for b in BINARY])
def test_binary_functions_broadcast_promote_and_match_numpy(name, ref, device):
    @SETTINGS
    @given(
        st.sampled_from(FLOATS),
        st.sampled_from(FLOATS),
        hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
        st.data(),
    )
    def check(d1, d2, shapes, data):
        a = data.draw(floats(d1, shapes.input_shapes[0]))
        b = data.draw(floats(d2, shapes.input_shapes[1]))
        out = getattr(xp, name)(xp.asarray(a), xp.asarray(b))
        expected = getattr(strict, name)(strict.asarray(a), strict.asarray(b))
        assert str(out.dtype) == str(expected.dtype).rsplit(".", 1)[-1]
        assert out.shape == shapes.result_shape
        with np.errstate(all="ignore"):
            want = np.asarray(expected)
        got = np.asarray(out)
        if got.dtype == np.bool_:
            assert np.array_equal(got, want)
        else:
            bound = 0 if name in ("add", "subtract", "multiply", "divide", "nextafter") else 2
            if name == "logaddexp":
                bound = 2**20  # cancellation near zero results; both round the same formula
            assert ulps(got, want).max() <= bound, (a, b, got, want)

    check()


def test_division_is_correctly_rounded(device):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(4000) * 10.0 ** rng.integers(-200, 200, 4000)
    b = rng.standard_normal(4000) * 10.0 ** rng.integers(-200, 200, 4000)
    assert np.array_equal(np.asarray(xp.asarray(a) / xp.asarray(b)), a / b)
    with np.errstate(all="ignore"):
        a32, b32 = a.astype(np.float32), (b * 1e-180).astype(np.float32)
        want = a32 / b32
    assert np.array_equal(np.asarray(xp.asarray(a32) / xp.asarray(b32)), want, equal_nan=True)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_division_remainder_bits_and_shifts_match_numpy(dtype):
    info = np.iinfo(dtype)

    @SETTINGS
    @given(
        hnp.arrays(dtype, 6, elements=st.integers(info.min, info.max)),
        hnp.arrays(dtype, 6, elements=st.integers(max(info.min, -100), min(info.max, 100))),
    )
    def check(a, b):
        x, y = xp.asarray(a), xp.asarray(b)
        nz = b != 0
        ok = nz & ~((a == info.min) & (b == -1)) if info.min < 0 else nz
        for fn, ref in ((xp.floor_divide, np.floor_divide), (xp.remainder, np.remainder)):
            got = np.asarray(fn(x, y))
            assert np.array_equal(got[ok], ref(a, b)[ok])
        for fn, ref in (
            (xp.bitwise_and, np.bitwise_and),
            (xp.bitwise_or, np.bitwise_or),
            (xp.bitwise_xor, np.bitwise_xor),
        ):
            assert np.array_equal(np.asarray(fn(x, y)), ref(a, b))
        assert np.array_equal(np.asarray(xp.bitwise_invert(x)), np.invert(a))
        s = np.abs(b.astype(np.int64)) % (info.bits)
        shift = xp.asarray(s.astype(dtype))
        assert np.array_equal(np.asarray(x << shift), np.left_shift(a, s.astype(dtype)))
        assert np.array_equal(np.asarray(x >> shift), np.right_shift(a, s.astype(dtype)))
        e = np.abs(b.astype(np.int64)) % 5
        with np.errstate(all="ignore"):
            want = np.power(a, e.astype(dtype))
        assert np.array_equal(np.asarray(x ** xp.asarray(e.astype(dtype))), want)

    check()


def test_float_remainder_and_floor_divide_are_exact_for_any_ratio(device):
    a = np.array([1e308, -1e308, 5.5, -5.5, 1e-300, 7.0, 3.0, 1e22, -0.0])
    b = np.array([3.0, 3.0, -2.0, 2.0, 3e-310, 1e-300, 1e300, 0.1, 2.0])
    assert same_bits(np.asarray(xp.remainder(xp.asarray(a), xp.asarray(b))), np.remainder(a, b))
    assert same_bits(
        np.asarray(xp.floor_divide(xp.asarray(a), xp.asarray(b))), np.floor_divide(a, b)
    )


def test_python_scalars_join_arrays_by_the_standards_rules():
    x8 = xp.asarray([1, 2], dtype=xp.int8)
    assert (x8 + 3).dtype == xp.int8 and (3 * x8).dtype == xp.int8
    f32 = xp.asarray([1.0], dtype=xp.float32)
    assert (f32 + 1).dtype == xp.float32 and (f32 * 2.5).dtype == xp.float32
    assert (f32 * 1j).dtype == xp.complex64
    assert xp.result_type(xp.int8, xp.int16, 1) == xp.int16
    # an integer array meeting a Python float, which the standard leaves to the
    # implementation: the default float, as in numpy (cubed computes ``n - correction``)
    assert (x8 + 1.5).dtype == xp.float64 and float((x8 - 0.5)[1]) == 1.5
    with pytest.raises(TypeError):
        xp.asarray([True]) + 1
    with pytest.raises(OverflowError):
        x8 + 1000
    # arrays of mixed kinds, which the standard leaves to the implementation: the float wins
    i64, f64 = xp.asarray([7], dtype=xp.int64), xp.asarray([2.0], dtype=xp.float64)
    assert xp.result_type(xp.int64, xp.float32) == xp.float32
    assert xp.result_type(xp.uint8, xp.complex128) == xp.complex128
    assert (i64 / f64).dtype == xp.float64 and float(xp.divide(f64, i64)[0]) == 2 / 7
    with pytest.raises(TypeError):
        xp.asarray([True]) & xp.asarray([1.0])


def test_numpy_dtypes_name_the_standards_dtypes_both_ways():
    # code that keeps numpy dtypes (cubed's arrays do) hands them to the namespace, and
    # numpy reads limn's dtypes back
    assert xp.asarray([1, 2], dtype=np.dtype("float64")).dtype == xp.float64
    assert xp.zeros(3, dtype=np.int16).dtype == xp.int16
    assert xp.isdtype(np.dtype("uint8"), "unsigned integer")
    assert all(np.dtype(d) == np.dtype(d.name) for d in (xp.bool, xp.int32, xp.complex64))
    with pytest.raises(TypeError, match="not a dtype of the standard"):
        xp.asarray([1.0], dtype=np.float16)


def test_in_place_operators_keep_the_left_dtype_and_rebind_only_that_array():
    x = xp.asarray([1.0, 2.0], dtype=xp.float32)
    y = x
    z = xp.asarray(x, copy=True)
    x += 1
    assert x is y and np.array_equal(np.asarray(x), [2.0, 3.0])
    assert np.array_equal(np.asarray(z), [1.0, 2.0])
    with pytest.raises(TypeError):
        i = xp.asarray([1], dtype=xp.int8)
        i += xp.asarray([1], dtype=xp.int16)


# ---- complex ----------------------------------------------------------------------------------

COMPLEX_UNARY = [
    ("exp", np.exp),
    ("log", np.log),
    ("sqrt", np.sqrt),
    ("sin", np.sin),
    ("cos", np.cos),
    ("tan", np.tan),
    ("sinh", np.sinh),
    ("cosh", np.cosh),
    ("tanh", np.tanh),
    ("asin", np.arcsin),
    ("acos", np.arccos),
    ("atan", np.arctan),
    ("asinh", np.arcsinh),
    ("acosh", np.arccosh),
    ("atanh", np.arctanh),
    ("expm1", np.expm1),
    ("log1p", np.log1p),
    ("log10", np.log10),
    ("sign", np.sign),
    ("abs", np.abs),
    ("square", np.square),
    ("reciprocal", np.reciprocal),
]


@pytest.mark.parametrize("name,ref", COMPLEX_UNARY, ids=[c[0] for c in COMPLEX_UNARY])
def test_complex_functions_match_numpy(name, ref):
    rng = np.random.default_rng(2)
    z = (rng.standard_normal(64) + 1j * rng.standard_normal(64)) * 3.0
    z = np.concatenate([z, [0j, 1 + 0j, -1 + 0j, 1j, -1j, 0.5 - 0.25j, 1e-9 + 1e-9j]])
    for dtype in (np.complex128, np.complex64):
        a = z.astype(dtype)
        got = np.asarray(getattr(xp, name)(xp.asarray(a)))
        with np.errstate(all="ignore"):
            want = ref(a.astype(np.complex128))
        tol = 1e-12 if dtype == np.complex128 else 2e-6
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_complex_parts_are_exact_even_next_to_infinities_and_nans():
    z = np.array([complex(np.inf, 2.0), complex(-np.inf, np.nan), complex(np.nan, -0.0), 3 - 4j])
    x = xp.asarray(z)
    assert same_bits(np.asarray(xp.real(x)), z.real)
    assert same_bits(np.asarray(xp.imag(x)), z.imag)
    assert same_bits(np.asarray(xp.conj(x)).imag, np.conj(z).imag)
    r = np.array([2.0, 1.0, 1.0, 1.0])
    w = np.asarray(x * xp.asarray(r))  # a real operand scales each part (the standard's table)
    assert same_bits(w.real, z.real * r) and same_bits(w.imag, z.imag * r)


# ---- reductions and statistics ----------------------------------------------------------------


@SETTINGS
@given(st.sampled_from(FLOATS), hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), st.data())
def test_reductions_match_numpy(dtype, shape, data):
    a = data.draw(hnp.arrays(np.dtype(dtype), shape, elements=st.floats(-100, 100, width=32)))
    axis = data.draw(st.sampled_from([None, 0, -1]))
    x = xp.asarray(a)
    for fn, ref in ((xp.sum, np.sum), (xp.prod, np.prod), (xp.max, np.max), (xp.min, np.min)):
        np.testing.assert_allclose(np.asarray(fn(x, axis=axis)), ref(a, axis=axis), rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(xp.mean(x, axis=axis)), np.mean(a, axis=axis), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        np.asarray(xp.var(x, axis=axis, correction=0)), np.var(a, axis=axis), rtol=1e-4, atol=1e-4
    )
    ax = -1 if axis is None else axis
    if a.ndim == 1 or axis is not None:
        np.testing.assert_allclose(
            np.asarray(xp.cumulative_sum(x, axis=ax)), np.cumsum(a, axis=ax), rtol=1e-5, atol=1e-4
        )
    if axis is not None:
        assert np.array_equal(np.asarray(xp.argmax(x, axis=axis)), np.argmax(a, axis=axis))
        assert np.array_equal(np.asarray(xp.argmin(x, axis=axis)), np.argmin(a, axis=axis))
    assert bool(xp.all(x == x)) and int(xp.count_nonzero(x)) == np.count_nonzero(a)


def test_a_reduction_of_a_0d_array_is_0d():
    a = xp.asarray(np.array(-3.0))
    assert xp.sum(a * 2.0).shape == () and float(xp.sum(a * 2.0)) == -6.0
    assert float(xp.mean(a + 1.0)) == -2.0


def test_sum_and_cumulative_sum_keep_negative_zero_and_default_dtypes():
    z = xp.asarray([-0.0, -0.0])
    assert same_bits(np.asarray(xp.cumulative_sum(z)), np.array([-0.0, -0.0]))
    assert xp.sum(xp.asarray([1, 2], dtype=xp.int8)).dtype == xp.int64
    assert xp.sum(xp.asarray([1, 2], dtype=xp.uint8)).dtype == xp.uint64
    got = xp.cumulative_prod(xp.asarray([1.0, 2.0, 3.0]), include_initial=True)
    assert np.array_equal(np.asarray(got), [1.0, 1.0, 2.0, 6.0])


# ---- sorting, searching, sets -----------------------------------------------------------------


@SETTINGS
@given(floats("float64", hnp.array_shapes(min_dims=1, max_dims=2, max_side=9)), st.booleans())
def test_sort_and_argsort_are_stable_and_put_nans_last(a, descending):
    x = xp.asarray(a)
    perm = np.asarray(xp.argsort(x, descending=descending))
    key = -a if descending else a
    want = np.argsort(np.where(np.isnan(a), np.inf, key), axis=-1, kind="stable")
    # numpy's stable argsort puts nans last too once they are keyed past every number
    nan_last = np.argsort(np.isnan(a), axis=-1, kind="stable")
    if not np.isnan(a).any():
        assert np.array_equal(perm, want)
    else:
        s = np.take_along_axis(a, perm, axis=-1)
        assert np.array_equal(np.isnan(s), np.take_along_axis(np.isnan(a), nan_last, axis=-1))
    got = np.asarray(xp.sort(x, descending=descending))
    assert same_bits(got, np.take_along_axis(a, perm, axis=-1))


COMPOSED = pytest.mark.parametrize("composed", [False, True], ids=["numpy-call", "composed"])


def _compose(monkeypatch, composed: bool, *modules: str) -> None:
    """A host device calls numpy for these functions; ``composed`` runs the composition a
    device without a host runs, so both are held to numpy (the composition on the numpy
    device alone: on c it would compile dozens of kernels for a path c never takes)."""
    if composed and limn.current_device() != "numpy":
        pytest.skip("the composition is checked on the numpy device")
    for m in modules if composed else ():
        monkeypatch.setattr(f"limn_array.{m}.on_host", lambda x: False)


@COMPOSED
def test_unique_functions_match_numpy_with_nans_distinct(composed, monkeypatch):
    _compose(monkeypatch, composed, "_set")
    a = np.array([3.0, 1.0, np.nan, 3.0, -0.0, 0.0, np.nan, 2.0, 1.0])
    r = xp.unique_all(xp.asarray(a))
    vals, idx, inv, counts = np.unique(
        a, return_index=True, return_inverse=True, return_counts=True, equal_nan=False
    )
    assert same_bits(np.asarray(r.values)[:5], vals[:5])
    assert np.array_equal(np.asarray(r.counts), counts)
    assert np.array_equal(np.asarray(r.indices)[:5], idx[:5])
    rebuilt = np.asarray(r.values)[np.asarray(r.inverse_indices)]
    assert np.array_equal(rebuilt, a, equal_nan=True)
    assert xp.unique_values(xp.asarray([2, 2, 1])).shape == (2,)


@SETTINGS
@given(
    hnp.arrays(np.float64, st.integers(0, 12), elements=st.integers(-5, 5).map(float)),
    hnp.arrays(np.float64, st.integers(1, 6), elements=st.integers(-6, 6).map(float)),
    st.sampled_from(["left", "right"]),
    st.booleans(),
)
def test_searchsorted_matches_numpy(a, v, side, composed):
    s = np.sort(a)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _compose(monkeypatch, composed and limn.current_device() == "numpy", "_searching")
        got = xp.searchsorted(xp.asarray(s), xp.asarray(v), side=side)
        assert np.array_equal(np.asarray(got), np.searchsorted(s, v, side=side))
        one = xp.searchsorted(xp.asarray(s), xp.asarray(v)[0], side=side)  # a 0-d query
        assert one.shape == () and int(one) == np.searchsorted(s, v[0], side=side)


@COMPOSED
def test_nonzero_where_and_isin_match_numpy(composed, monkeypatch):
    _compose(monkeypatch, composed, "_searching")
    a = np.array([[0, 3, 0], [-1, 0, 2]])
    got = xp.nonzero(xp.asarray(a))
    assert len(got) == a.ndim
    assert all(np.array_equal(np.asarray(g), w) for g, w in zip(got, np.nonzero(a)))
    w = xp.where(xp.asarray(a) > 0, xp.asarray(a), -7)
    assert np.array_equal(np.asarray(w), np.where(a > 0, a, -7))
    assert np.array_equal(
        np.asarray(xp.isin(xp.asarray(a), xp.asarray([3, -1]))), np.isin(a, [3, -1])
    )


# ---- indexing -----------------------------------------------------------------------------


@SETTINGS
@given(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), st.data())
def test_getitem_and_setitem_with_basic_keys_match_numpy(shape, data):
    a = np.arange(math.prod(shape), dtype=np.float64).reshape(shape) - 3.0
    key = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    x = xp.asarray(a)
    assert np.array_equal(np.asarray(x[key]), a[key])
    b = a.copy()
    b[key] = -0.0
    x[key] = -0.0
    assert same_bits(np.asarray(x), b)


def test_masks_and_integer_arrays_index_and_assign_like_numpy():
    a = np.arange(24.0).reshape(2, 3, 4)
    x = xp.asarray(a)
    m = a % 3 == 0
    assert np.array_equal(np.asarray(x[xp.asarray(m)]), a[m])
    assert np.array_equal(np.asarray(x[0][xp.asarray(m[0])]), a[0][m[0]])
    i, j = np.array([1, 0, -1]), np.array([[2], [0]])
    assert np.array_equal(np.asarray(x[xp.asarray(i), 1]), a[i, 1])
    assert np.array_equal(np.asarray(x[0, xp.asarray(j), xp.asarray(i)]), a[0, j, i])
    b = a.copy()
    b[m] = 7
    y = xp.asarray(a)
    y[xp.asarray(m)] = 7.0
    assert np.array_equal(np.asarray(y), b)
    c = a.copy()
    c[0, [1, 1, 2], [0, 0, 3]] = [5.0, 6.0, 8.0]
    z = xp.asarray(a)
    z[0, xp.asarray([1, 1, 2]), xp.asarray([0, 0, 3])] = xp.asarray([5.0, 6.0, 8.0])
    assert np.array_equal(np.asarray(z), c)
    k = np.array([2, 0, 1])
    assert np.array_equal(np.asarray(xp.take(x, xp.asarray(k), axis=1)), np.take(a, k, axis=1))
    t = np.argsort(a, axis=-1)[..., ::-1].copy()
    got = xp.take_along_axis(x, xp.asarray(t), axis=-1)
    assert np.array_equal(np.asarray(got), np.take_along_axis(a, t, axis=-1))


# ---- manipulation and creation -------------------------------------------------------------


def test_manipulation_functions_match_numpy_and_keep_negative_zero():
    a = np.arange(12.0).reshape(3, 4) - 5.0
    a[0, 0] = -0.0
    x = xp.asarray(a)
    assert same_bits(np.asarray(xp.concat([x, x], axis=1)), np.concatenate([a, a], axis=1))
    assert same_bits(np.asarray(xp.stack([x, x], axis=-1)), np.stack([a, a], axis=-1))
    assert np.array_equal(np.asarray(xp.roll(x, (1, -2), axis=(0, 1))), np.roll(a, (1, -2), (0, 1)))
    assert np.array_equal(np.asarray(xp.tile(x, (2, 1, 2))), np.tile(a, (2, 1, 2)))
    r = np.array([0, 2, 1])
    assert np.array_equal(np.asarray(xp.repeat(x, xp.asarray(r), axis=0)), np.repeat(a, r, axis=0))
    assert np.array_equal(np.asarray(xp.moveaxis(x, 0, -1)), np.moveaxis(a, 0, -1))
    assert np.array_equal(np.asarray(xp.flip(x)), np.flip(a))
    assert xp.expand_dims(x, axis=(0, -1)).shape == (1, 3, 4, 1)
    parts = xp.unstack(x, axis=1)
    assert len(parts) == 4 and np.array_equal(np.asarray(parts[2]), a[:, 2])
    assert np.array_equal(np.asarray(xp.diff(x, n=2)), np.diff(a, n=2))


def test_creation_functions_match_numpy():
    assert np.array_equal(np.asarray(xp.arange(2, 11, 3)), np.arange(2, 11, 3))
    np.testing.assert_allclose(np.asarray(xp.arange(0.5, 3.0, 0.7)), np.arange(0.5, 3.0, 0.7))
    np.testing.assert_array_equal(np.asarray(xp.linspace(-1, 2, 7)), np.linspace(-1, 2, 7))
    assert np.array_equal(np.asarray(xp.eye(3, 4, k=1)), np.eye(3, 4, k=1))
    a = np.arange(12.0).reshape(3, 4)
    assert np.array_equal(np.asarray(xp.triu(xp.asarray(a), k=-1)), np.triu(a, k=-1))
    gx, gy = xp.meshgrid(xp.arange(3), xp.arange(2))
    wx, wy = np.meshgrid(np.arange(3), np.arange(2))
    assert np.array_equal(np.asarray(gx), wx) and np.array_equal(np.asarray(gy), wy)
    c = xp.full((2,), 1 - 2j)
    assert c.dtype == xp.complex128 and np.array_equal(np.asarray(c), [1 - 2j, 1 - 2j])


# ---- laziness and interop ---------------------------------------------------------------------


def test_functions_build_graph_and_compute_only_when_bytes_are_needed():
    x = xp.asarray(np.linspace(-3, 3, 7))
    y = xp.tanh(xp.sin(x) * 2 + xp.sort(x)[::-1])
    assert y._t.node.op != Op.BUFFER  # nothing computed yet
    assert float(y[0]) == pytest.approx(np.tanh(np.sin(-3.0) * 2 + 3.0))
    assert y._t.node.op == Op.BUFFER  # reading an element computed the whole array once
    m = x > 0
    z = x[m]  # a data-dependent shape: only the count is computed here
    assert z.shape == (3,) and z._t.node.op != Op.BUFFER


def test_dlpack_and_numpy_round_trip_without_copies():
    a = np.arange(6.0).reshape(2, 3)
    x = xp.from_dlpack(a)
    assert np.shares_memory(np.asarray(x), a)
    back = np.from_dlpack(x)
    assert np.shares_memory(back, a) and not back.flags.writeable
    c = xp.asarray(np.array([1 + 2j, 3 - 4j], dtype=np.complex64))
    assert np.array_equal(np.from_dlpack(c), [1 + 2j, 3 - 4j])
    assert x.__dlpack_device__() == (1, 0)


def test_tensors_and_arrays_convert_by_sharing_nodes():
    t = limn.Tensor(np.arange(4.0))
    x = xp.asarray(t)
    assert x._t.node is t.node and x.device == xp.Device(t.device)
    back = xp.to_tensor(xp.exp(x))
    assert isinstance(back, limn.Tensor)
    np.testing.assert_allclose(back.numpy(), np.exp(np.arange(4.0)))


def test_to_device_moves_without_copy_and_dtypes_a_device_lacks_are_named():
    from ir.graph import dtypes as d

    class Single(NumpyDevice):  # a device that computes no float64
        name = "single"
        dtypes = tuple(t for t in d.ALL if t not in (d.float64, d.complex128, d.complex64))

    register_device("single", Single)
    x = xp.asarray([1.0, 2.0], dtype=xp.float32)
    y = x.to_device("single")
    assert y.device == xp.Device("single") and y._t.node is x._t.node
    np.testing.assert_array_equal(np.asarray(xp.sqrt(y)), np.sqrt([1.0, 2.0], dtype=np.float32))
    with pytest.raises(TypeError, match="single device cannot hold float64"):
        xp.asarray([1.0, 2.0]).to_device("single")
    with pytest.raises(TypeError, match="single device cannot hold complex128"):
        xp.asarray([1j], device="single")
    with pytest.raises(ValueError, match="devices"):
        x + y
    held = xp.__array_namespace_info__().dtypes(device="single")
    assert "complex64" in held and "complex128" not in held  # complex64 is float32 pairs


def test_array_api_extra_runs_unchanged_and_matches_numpy():
    import array_api_compat.numpy as cnp

    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5))
    ia = rng.integers(0, 10, 12)
    ib = rng.integers(0, 10, 7)
    cases = [
        lambda m: xpx.cov(m.asarray(a)),
        lambda m: xpx.kron(m.asarray(a[:2, :2]), m.asarray(a[:3, :3])),
        lambda m: xpx.sinc(m.asarray(a)),
        lambda m: xpx.setdiff1d(m.asarray(ia), m.asarray(ib)),
        lambda m: xpx.union1d(m.asarray(ia), m.asarray(ib)),
        lambda m: xpx.pad(m.asarray(a), 2),
        lambda m: xpx.isclose(m.asarray(a), m.asarray(a + 1e-9)),
        lambda m: xpx.nan_to_num(m.asarray(np.array([np.nan, np.inf, -np.inf, 1.0]))),
        lambda m: xpx.one_hot(m.asarray(ia), 10),
        lambda m: xpx.partition(m.asarray(a), 2),
        lambda m: xpx.create_diagonal(m.asarray(a[0])),
        lambda m: xpx.at(m.asarray(a.copy()))[m.asarray(a) > 0].add(1.0),
    ]
    for f in cases:
        want, got = np.asarray(f(cnp)), np.asarray(f(xp))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---- extensions ---------------------------------------------------------------------------


def test_a_host_call_is_one_custom_node_and_the_c_stage_prints_it_as_a_host_function():
    x = xp.asarray(np.linspace(0.0, 1.0, 8))
    for y, name in ((xp.fft.rfft(x), "fft.rfft"), (xp.searchsorted(x, x), "searchsorted")):
        assert y._t.node.op is Op.CUSTOM and y._t.node.arg[0] == name
        assert f"CUSTOM {name}: a host function of the device" in limn.ir(y._t, stage="c")


@COMPOSED
@pytest.mark.parametrize("n", [1, 6, 8, 13])
def test_fft_matches_numpy(n, composed, monkeypatch):
    _compose(monkeypatch, composed, "_fft")
    rng = np.random.default_rng(n)
    z = rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))
    for f, g in ((xp.fft.fft, np.fft.fft), (xp.fft.ifft, np.fft.ifft)):
        np.testing.assert_allclose(
            np.asarray(f(xp.asarray(z), norm="ortho")), g(z, norm="ortho"), atol=1e-12
        )
    r = z.real
    np.testing.assert_allclose(np.asarray(xp.fft.rfft(xp.asarray(r))), np.fft.rfft(r), atol=1e-12)
    spec = np.fft.rfft(r)
    np.testing.assert_allclose(
        np.asarray(xp.fft.irfft(xp.asarray(spec), n=n)), np.fft.irfft(spec, n=n), atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(xp.fft.fftn(xp.asarray(z))), np.fft.fftn(z), atol=1e-11)
    r2 = rng.standard_normal((4, n))
    got = xp.fft.irfftn(xp.fft.rfftn(xp.asarray(r2)), s=r2.shape)
    np.testing.assert_allclose(np.asarray(got), r2, atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(xp.fft.hfft(xp.asarray(z[0]), n=2 * n)), np.fft.hfft(z[0], n=2 * n), atol=1e-11
    )
    z32 = xp.asarray(z.astype(np.complex64))
    assert xp.fft.fft(z32).dtype == xp.complex64 and xp.fft.rfft(xp.real(z32)).dtype == xp.complex64
    np.testing.assert_array_equal(np.asarray(xp.fft.fftfreq(n, d=0.1)), np.fft.fftfreq(n, d=0.1))


def test_linalg_matches_numpy():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 4, 4))
    spd = a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4)
    x, s = xp.asarray(a), xp.asarray(spd)
    la = xp.linalg
    close = np.testing.assert_allclose
    close(np.asarray(x @ x), a @ a, rtol=1e-12)
    close(np.asarray(la.inv(x)), np.linalg.inv(a), rtol=1e-9)
    close(np.asarray(la.det(x)), np.linalg.det(a), rtol=1e-9)
    close(np.asarray(la.cholesky(s)), np.linalg.cholesky(spd), rtol=1e-9)
    close(np.asarray(la.eigvalsh(s)), np.linalg.eigvalsh(spd), rtol=1e-9)
    close(np.asarray(la.svdvals(x)), np.linalg.svd(a, compute_uv=False), rtol=1e-9)
    close(np.asarray(la.solve(x, xp.asarray(spd))), np.linalg.solve(a, spd), rtol=1e-8, atol=1e-8)
    close(np.asarray(la.vector_norm(x, axis=-1)), np.linalg.norm(a, axis=-1), rtol=1e-12)
    close(np.asarray(la.matrix_norm(x, ord=1)), np.linalg.norm(a, ord=1, axis=(-2, -1)), rtol=1e-12)
    close(np.asarray(la.diagonal(x, offset=1)), np.diagonal(a, 1, -2, -1), rtol=0)
    close(np.asarray(la.matrix_power(x, 3)), np.linalg.matrix_power(a, 3), rtol=1e-10)
    close(
        np.asarray(xp.tensordot(x, x, axes=([1, 2], [2, 1]))),
        np.tensordot(a, a, axes=([1, 2], [2, 1])),
        rtol=1e-12,
    )
    z = xp.asarray(a + 1j * a[::-1])
    close(np.asarray(z @ z), (a + 1j * a[::-1]) @ (a + 1j * a[::-1]), rtol=1e-12)
    close(np.asarray(la.eigvals(z)).sum(-1), np.linalg.eigvals(a + 1j * a[::-1]).sum(-1), rtol=1e-9)


# The inspection API as the standard (2023.12, src/array_api_stubs/_2023_12/info.py) writes
# it: each function's keyword-only parameters (all defaulting to None) and what it returns.
INFO_SIGNATURES = {
    "capabilities": ((), dict),
    "default_device": ((), xp.Device),
    "default_dtypes": (("device",), dict),
    "dtypes": (("device", "kind"), dict),
    "devices": ((), list),
}


def test_the_namespace_info_has_the_standards_signatures_and_answers():
    import inspect

    info = xp.__array_namespace_info__()
    for name, (keywords, returns) in INFO_SIGNATURES.items():
        params = inspect.signature(getattr(info, name)).parameters
        assert sorted(params) == sorted(keywords), name
        for p in params.values():
            assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None, (name, p)
        assert isinstance(getattr(info, name)(), returns), name
    devices = info.devices()
    assert devices and all(isinstance(d, xp.Device) for d in devices)
    devices.append("a caller's own entry")  # scipy's conftest extends it: a list of its own
    assert "a caller's own entry" not in info.devices()
    for d in info.devices():  # each is a valid device= of the creation functions
        assert xp.zeros(2, dtype=xp.float32, device=d).device == d
    caps = info.capabilities()
    assert {"boolean indexing", "data-dependent shapes"} <= set(caps)
    assert all(isinstance(caps[k], bool) for k in ("boolean indexing", "data-dependent shapes"))
    assert set(info.default_dtypes()) == {"real floating", "complex floating", "integral",
                                          "indexing"}  # fmt: skip
    assert set(info.dtypes(kind=("bool", "unsigned integer"))) == {"bool", "uint8", "uint16",
                                                                 "uint32", "uint64"}  # fmt: skip
    assert info.default_device() in info.devices()
