"""Dtypes and promotion: every pair under both tables, scalars, wraparound, half widths.

Oracles: torch.promote_types for the limn (torch-like) lattice where torch defines it, and
numpy's integer table where it does not (torch refuses uint16 and wider); array-api-strict
for the Array API table; exact Python integers reduced modulo 2**width for wraparound;
float32 arithmetic rounded back once for the half widths.
"""

from __future__ import annotations

import itertools

import array_api_strict as xp
import ml_dtypes
import numpy as np
import pytest
import torch

from ir.graph import dtypes
from ir.graph.dtypes import ALL, HALF, acc_dtype, compute_dtype, promote, promote_array_api
from limn import Tensor

REAL = tuple(d for d in ALL if not d.is_complex)
INTS = dtypes.SIGNED + dtypes.UNSIGNED

TORCH = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}


def lattice_oracle(a, b):
    """What limn's lattice should give, or TypeError if nothing holds both."""
    if a == dtypes.bool_ or b == dtypes.bool_:
        return b if a == dtypes.bool_ else a
    if a.is_int and b.is_int:
        r = np.result_type(a.np, b.np)
        return TypeError if r.kind == "f" else dtypes.as_dtype(r)
    # torch refuses uint16..uint64; against floats they behave as any other int does
    ta = TORCH.get(a.name, torch.int64)
    tb = TORCH.get(b.name, torch.int64)
    r = dtypes.as_dtype(str(torch.promote_types(ta, tb)).removeprefix("torch."))
    if r in HALF and (a.is_int or b.is_int):
        return dtypes.float32  # an int meeting a half float joins at float32, unlike torch
    return r


def tensor_oracle(a, b):
    """What the Tensor frontend should give: torch's promotion (an int meeting a float
    gives that float, whatever its width), the lattice where torch has no rule."""
    if a.is_float != b.is_float and dtypes.bool_ not in (a, b):
        return a if a.is_float else b
    return lattice_oracle(a, b)


@pytest.mark.parametrize("a", ALL, ids=str)
def test_limn_promotion_of_every_pair_matches_the_lattice(a):
    for b in ALL:
        want = lattice_oracle(a, b)
        if want is TypeError:
            with pytest.raises(TypeError, match=f"{a}.*{b}"):
                promote(a, b)
        else:
            assert promote(a, b) == want == promote(b, a), f"promote({a}, {b})"


def test_limn_promotion_is_associative_where_defined():
    for a, b, c in itertools.product(REAL, repeat=3):
        try:
            left = promote(promote(a, b), c)
            right = promote(a, promote(b, c))
        except TypeError:
            continue
        assert left == right, f"({a}, {b}, {c}): {left} != {right}"


def test_half_widths_meet_at_float32_and_widen_with_wider_floats():
    assert promote(dtypes.float16, dtypes.bfloat16) == dtypes.float32
    assert promote(dtypes.bfloat16, dtypes.float64) == dtypes.float64
    assert promote(dtypes.int8, dtypes.bfloat16) == dtypes.float32
    assert promote(dtypes.int64, dtypes.float32) == dtypes.float32
    assert promote(dtypes.int64, dtypes.float64) == dtypes.float64


def _strict(d):
    return getattr(xp, d.name)


@pytest.mark.parametrize("a", ALL, ids=str)
def test_array_api_promotion_of_every_pair_matches_array_api_strict(a):
    for b in ALL:
        if a in HALF or b in HALF:  # the standard has no half widths: limn refuses them
            if a != b:
                with pytest.raises(TypeError):
                    promote_array_api(a, b)
            continue
        try:
            want = dtypes.as_dtype(str(xp.result_type(_strict(a), _strict(b))).split(".")[-1])
        except TypeError:
            if (a.is_int and b.is_int) or dtypes.bool_ in (a, b):
                with pytest.raises(TypeError, match=f"{a}.*{b}"):
                    promote_array_api(a, b)
                continue
            # an int meeting a float, which the standard leaves to the implementation (strict
            # refuses it): limn's rule, the float dtype, as numpy-minded code (cubed) expects
            want = b if a.is_int else a
        assert promote_array_api(a, b) == want, f"promote_array_api({a}, {b})"


# ---- tensors follow the table -------------------------------------------------------


def _sample(d, n=6, seed=0):
    rng = np.random.default_rng(seed)
    if d == dtypes.bool_:
        return rng.random(n) < 0.5
    if d.is_int:
        lo, hi = dtypes.min_value(d), dtypes.max_value(d)
        return rng.integers(max(lo, -100), min(hi, 100), n, endpoint=True).astype(d.np)
    return (rng.standard_normal(n) * 4).astype(d.np)


@pytest.mark.parametrize("a", REAL, ids=str)
def test_tensor_add_promotes_every_pair_and_computes_in_the_result_dtype(a):
    for b in REAL:
        x, y = _sample(a, seed=1), _sample(b, seed=2)
        want = tensor_oracle(a, b)
        if want is TypeError:
            with pytest.raises(TypeError, match=f"add.*{a}.*{b}"):
                Tensor(x) + Tensor(y)
            continue
        out = Tensor(x) + Tensor(y)
        assert out.dtype == want, f"{a} + {b}"
        cd = compute_dtype(want).np
        ref = x.astype(want.np).astype(cd) + y.astype(want.np).astype(cd)
        if want == dtypes.bool_:
            ref = x | y
        np.testing.assert_array_equal(out.numpy(), ref.astype(want.np), err_msg=f"{a} + {b}")


# ---- Python scalars -----------------------------------------------------------------


@pytest.mark.parametrize("d", REAL, ids=str)
def test_a_python_int_takes_the_tensor_dtype(d):
    x = _sample(d)
    if d == dtypes.bool_:
        assert (Tensor(x) + 1).dtype == dtypes.int64
        return
    out = Tensor(x) * 3
    assert out.dtype == d
    cd = compute_dtype(d).np
    np.testing.assert_array_equal(out.numpy(), (x.astype(cd) * 3).astype(d.np))
    assert (3 * Tensor(x)).dtype == d and (3 - Tensor(x)).dtype == d


@pytest.mark.parametrize("d", REAL, ids=str)
def test_a_python_float_keeps_float_dtypes_and_lifts_ints_to_float32(d):
    out = Tensor(_sample(d)) + 0.5
    assert out.dtype == (d if d.is_float else dtypes.float32)
    assert (0.5 * Tensor(_sample(d))).dtype == out.dtype


def test_a_python_bool_keeps_bool_and_float64_stays_float64():
    assert (Tensor(np.array([True, False])) + True).dtype == dtypes.bool_
    assert (Tensor(np.array([1.0, 2.0])) * 2.5).dtype == dtypes.float64
    assert (Tensor(np.array([1.0, 2.0])) / Tensor([3, 4])).dtype == dtypes.float64
    assert Tensor([1.5]).dtype == dtypes.float32  # a Python float list is float32, as in torch
    assert Tensor([1, 2]).dtype == dtypes.int64


@pytest.mark.parametrize("d", INTS, ids=str)
def test_an_out_of_range_python_int_wraps_into_the_tensor_dtype(d):
    x = _sample(d)
    for c in (300, -1, 2**40 + 7, -(2**70) + 3):
        out = Tensor(x) + c
        assert out.dtype == d
        want = _wrap([int(v) + c for v in x], d)
        np.testing.assert_array_equal(out.numpy(), want, err_msg=f"{d} + {c}")


# ---- wraparound: narrow ints are modular arithmetic ---------------------------------


def _wrap(values, d):
    """Exact integers reduced modulo 2**bits into d's range: the definition of wrapping."""
    m = 1 << d.bits
    out = np.asarray(np.asarray(values, dtype=object) % m, dtype=object)
    if d.kind == "i":
        out = np.where(out >= m // 2, out - m, out)
    return out.astype(d.np)


def _full_range(d, shape, seed):
    rng = np.random.default_rng(seed)
    info = np.iinfo(d.np)
    vals = rng.integers(int(info.min), int(info.max), shape, endpoint=True, dtype=d.np)
    vals.flat[:2] = [info.min, info.max]
    return vals


@pytest.mark.parametrize("d", INTS, ids=str)
def test_integer_arithmetic_wraps_like_modular_arithmetic(d):
    a, b = _full_range(d, (4, 5), 1), _full_range(d, (4, 5), 2)
    ia, ib = a.astype(object), b.astype(object)
    ta, tb = Tensor(a), Tensor(b)
    cases = {
        "add": (ta + tb, ia + ib),
        "sub": (ta - tb, ia - ib),
        "mul": (ta * tb, ia * ib),
        "neg": (-ta, -ia),
        "matmul": (ta @ tb.T, ia.dot(ib.T)),
        "square": (ta**2, ia * ia),
    }
    for name, (got, exact) in cases.items():
        assert got.dtype == d, name
        want = _wrap(np.asarray(exact, dtype=object).tolist(), d)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{d} {name}")
    # a sum totals in int64 (as torch's does), so it is exact where its operands wrap
    for got, exact in ((ta.sum(axis=1), ia.sum(axis=1)), (ta.sum(), ia.sum())):
        assert got.dtype == dtypes.int64
        want = _wrap(np.asarray(exact, dtype=object).tolist(), dtypes.int64)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{d} sum")


@pytest.mark.parametrize("d", INTS, ids=str)
def test_an_integer_power_of_integer_tensors_is_exact_and_wraps(d):
    rng = np.random.default_rng(4)
    lo = -5 if d.kind == "i" else 0
    a = rng.integers(lo, 6, 40).astype(d.np)
    b = rng.integers(0, 12, 40).astype(d.np)
    top = int(np.iinfo(d.np).max)  # every bit of the exponent set
    a[:7], b[:7] = [3, 0, 0, 2, 3, 1, 2], [3, 0, 5, d.bits, top, top, top // 2 + 1]
    got = Tensor(a) ** Tensor(b)
    assert got.dtype == d
    want = _wrap([pow(int(x), int(y), 1 << d.bits) for x, y in zip(a, b)], d)
    np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{d} ** {d}")
    assert (3 ** Tensor(b)).dtype == d  # an int scalar base keeps the tensor's dtype
    want = _wrap([pow(3, int(y), 1 << d.bits) for y in b], d)
    np.testing.assert_array_equal((3 ** Tensor(b)).numpy(), want)


def test_an_integer_power_matches_torch_for_negative_tensor_exponents():
    a = np.array([0, 1, -1, -1, 2, -3, 0, 5, 7], np.int64)
    b = np.array([-1, -5, -5, -4, -2, -3, 0, 1, 2], np.int64)
    got = Tensor(a) ** Tensor(b)
    assert got.dtype == dtypes.int64
    np.testing.assert_array_equal(got.numpy(), (torch.tensor(a) ** torch.tensor(b)).numpy())
    a8 = np.array([127, -127, -128, 1, -1], np.int8)  # 127 * 127 wraps to 1 in int8
    b8 = np.array([-1, -1, -1, -3, -3], np.int8)
    got8 = (Tensor(a8) ** Tensor(b8)).numpy()
    np.testing.assert_array_equal(got8, (torch.tensor(a8) ** torch.tensor(b8)).numpy())
    mixed = Tensor(a.astype(np.int8)) ** Tensor(np.abs(b).astype(np.int16))
    assert mixed.dtype == dtypes.int16  # the operands promote first, as in torch


def test_an_integer_tensor_to_a_negative_int_power_is_refused():
    with pytest.raises(ValueError, match=r"pow: .*int32.*-2.*negative.*float"):
        Tensor(np.array([2], np.int32)) ** -2
    np.testing.assert_allclose((Tensor([2.0]) ** -2).numpy(), [0.25])


@pytest.mark.parametrize("src", INTS, ids=str)
def test_casting_between_integer_dtypes_wraps(src):
    x = _full_range(src, (16,), 3)
    for dst in INTS:
        got = Tensor(x).cast(dst).numpy()
        np.testing.assert_array_equal(got, _wrap([int(v) for v in x], dst), f"{src}->{dst}")


# ---- half widths: compute in float32, round back ------------------------------------


def _round(x32, d):
    return np.asarray(x32, np.float32).astype(d.np)


HALF_UNARY = {
    "exp": (lambda t: t.exp(), np.exp),
    "log": (lambda t: t.log(), np.log),
    "sqrt": (lambda t: t.sqrt(), np.sqrt),
    "recip": (lambda t: t.reciprocal(), np.reciprocal),
    "neg": (lambda t: -t, np.negative),
}


@pytest.mark.parametrize("d", HALF, ids=str)
def test_half_width_primitives_compute_in_float32_and_round_once(d):
    rng = np.random.default_rng(4)
    a = rng.uniform(0.1, 8, 64).astype(d.np)
    b = rng.uniform(-8, 8, 64).astype(d.np)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    for name, (fn, ref) in HALF_UNARY.items():
        got = fn(Tensor(a))
        assert got.dtype == d
        np.testing.assert_array_equal(got.numpy(), _round(ref(a32), d), err_msg=name)
    np.testing.assert_array_equal((Tensor(a) + Tensor(b)).numpy(), _round(a32 + b32, d))
    np.testing.assert_array_equal((Tensor(a) * Tensor(b)).numpy(), _round(a32 * b32, d))


@pytest.mark.parametrize("d", HALF, ids=str)
def test_a_chain_of_half_width_ops_rounds_after_every_node(d):
    # the numpy reference rounds after every node; a fused kernel rounds once at its store
    rng = np.random.default_rng(5)
    a, b, c = (rng.uniform(-3, 3, 50).astype(d.np) for _ in range(3))
    t = [Tensor(v, device="numpy") for v in (a, b, c)]
    got = (t[0] * t[1] + t[2]).numpy()
    f = np.float32
    want = _round(_round(a.astype(f) * b.astype(f), d).astype(f) + c.astype(f), d)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d", HALF, ids=str)
def test_a_half_width_sum_accumulates_in_float32_and_rounds_once(d):
    assert acc_dtype(d) == dtypes.float32
    ones = np.ones(4096, d.np)  # a half-width running total would stall (at 2048, or 256)
    assert Tensor(ones).sum().item() == 4096
    rng = np.random.default_rng(6)
    x = rng.uniform(0, 1, (3, 1000)).astype(d.np)
    want = x.astype(np.float32).sum(axis=1).astype(d.np)
    got = Tensor(x).sum(axis=1)
    assert got.dtype == d
    np.testing.assert_array_equal(got.numpy(), want)
    # the same total kept in the half width drifts far away: the test can tell them apart
    naive = np.zeros((), d.np)
    for v in x[0]:
        naive = (naive + v).astype(d.np)
    assert abs(float(naive) - float(want[0])) > 1


@pytest.mark.parametrize("d", HALF, ids=str)
def test_a_half_width_matmul_rounds_products_then_sums_in_float32(d):
    rng = np.random.default_rng(7)
    a = rng.uniform(-2, 2, (3, 40)).astype(d.np)
    b = rng.uniform(-2, 2, (40, 2)).astype(d.np)
    prods = _round(a.astype(np.float32)[:, :, None] * b.astype(np.float32)[None], d)
    want = prods.astype(np.float32).sum(axis=1).astype(d.np)
    got = (Tensor(a, device="numpy") @ Tensor(b, device="numpy")).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d", HALF, ids=str)
def test_a_fused_half_width_chain_on_the_c_device_rounds_at_every_node(d):
    rng = np.random.default_rng(5)
    a, b, c = (rng.uniform(-3, 3, 50).astype(d.np) for _ in range(3))
    t = [Tensor(v, device="c") for v in (a, b, c)]
    f = np.float32
    product = _round(a.astype(f) * b.astype(f), d)  # the MUL node's value is a d value
    want = _round(product.astype(f) + c.astype(f), d)
    np.testing.assert_array_equal((t[0] * t[1] + t[2]).numpy(), want)


def test_float16_and_bfloat16_meet_at_float32_exactly():
    a = np.array([1.5, 2049.0, -0.1], np.float16)
    b = np.array([2.0**-10, 3.0, 1e30], ml_dtypes.bfloat16)
    out = Tensor(a) + Tensor(b)
    assert out.dtype == dtypes.float32
    np.testing.assert_array_equal(out.numpy(), a.astype(np.float32) + b.astype(np.float32))


@pytest.mark.parametrize("d", HALF, ids=str)
def test_casting_float32_to_a_half_width_rounds_to_nearest_even(d):
    x = np.random.default_rng(8).standard_normal(200).astype(np.float32) * 1000
    x[:3] = [1e6, -1e-9, 65520.0]  # overflow in float16, underflow, the rounding edge
    with np.errstate(over="ignore"):
        want = x.astype(d.np)
    np.testing.assert_array_equal(Tensor(x).cast(d).numpy(), want)


@pytest.mark.parametrize("src", REAL, ids=str)
def test_casting_between_all_dtypes_matches_numpy(src):
    for dst in REAL:
        x = _sample(src, 8, seed=9)
        if src.is_float and dst.kind == "u":
            x = np.abs(x)  # a negative float has no defined unsigned value
        got = Tensor(x).cast(dst)
        assert got.dtype == dst
        np.testing.assert_array_equal(got.numpy(), x.astype(dst.np), f"{src}->{dst}")


def test_dtype_names_round_trip_and_unknown_names_are_refused():
    for d in ALL:
        assert dtypes.as_dtype(d.name) is d and dtypes.as_dtype(np.dtype(d.np)) is d
    assert dtypes.as_dtype(float) is dtypes.float32 and dtypes.as_dtype(int) is dtypes.int64
    with pytest.raises(TypeError, match="float8.*accepted"):
        dtypes.as_dtype("float8")
