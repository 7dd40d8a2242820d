"""SCAN, the cumulative kernel shape: held to numpy and torch on whichever device is default.

A scan folds left to right in its dtype and stores every step, so results are compared bit
for bit with numpy's ufunc accumulate (floats included: both fold in the same order), on
every dtype, along every axis, with nan, inf, -0.0 and empty axes. The gradient is held to
torch. Large scans must be linear: 2**20 elements finish fast on both devices, and the
numpy device's peak memory stays a few copies of the input.
"""

import time
import tracemalloc

import numpy as np
import pytest
import torch

import limn
from ir.graph import dtypes
from ir.graph.node import toposort
from ir.graph.ops import Op
from ir.kernel.schedule import schedule
from limn import Tensor
from limn.runtime import get_device
from limn.runtime.c import CDevice

xp = limn.array_namespace()

DTYPES = [
    dtypes.bool_,
    dtypes.int8,
    dtypes.int16,
    dtypes.int32,
    dtypes.int64,
    dtypes.uint8,
    dtypes.uint16,
    dtypes.uint32,
    dtypes.uint64,
    dtypes.float16,
    dtypes.bfloat16,
    dtypes.float32,
    dtypes.float64,
]
UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum}
BOOL_UFUNC = {"add": np.logical_or, "mul": np.logical_and, "max": np.logical_or}


def _values(rng, d, shape):
    """Random values of dtype ``d``; floats get nan, inf, -inf, -0.0 and 0.0 mixed in."""
    npd = dtypes.to_numpy(d)
    if d == dtypes.bool_:
        return rng.random(shape) < 0.3
    if d.is_int:
        info = np.iinfo(npd)
        return rng.integers(info.min, info.max, shape, dtype=npd, endpoint=True)
    x = rng.standard_normal(shape) * 1.5
    special = rng.random(shape)
    x[special < 0.04] = np.nan
    x[(0.04 <= special) & (special < 0.07)] = np.inf
    x[(0.07 <= special) & (special < 0.10)] = -np.inf
    x[(0.10 <= special) & (special < 0.15)] = -0.0
    x[(0.15 <= special) & (special < 0.18)] = 0.0
    return x.astype(npd)


def _want(x, axis, op, d):
    table = BOOL_UFUNC if d == dtypes.bool_ else UFUNC
    with np.errstate(all="ignore"):
        return table[op].accumulate(x, axis=axis, dtype=dtypes.to_numpy(d))


def _same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), f"\n{got}\n!=\n{want}"


@pytest.mark.parametrize("d", DTYPES, ids=[d.name for d in DTYPES])
def test_scan_matches_numpy_accumulate_bit_for_bit(d):
    rng = np.random.default_rng(DTYPES.index(d))
    outs, wants = [], []
    for op in ("add", "mul", "max"):
        for shape in [(17,), (3, 9), (2, 3, 5), (4, 0), (0,)]:
            x = _values(rng, d, shape)
            for axis in range(len(shape)):
                outs.append(Tensor(x, dtype=d).p_scan(axis, op))
                wants.append(_want(x, axis, op, d))
    limn.realize(*outs)  # one program for the whole set on a compiled device
    for got, want in zip(outs, wants):
        _same_bits(got.numpy(), want)


def test_long_int64_sums_are_exact_and_wrap_like_numpy():
    rng = np.random.default_rng(5)
    big = rng.integers(2**61, 2**62, 5000, dtype=np.int64)  # past float64's 53 bits
    _same_bits(Tensor(big).p_scan(0, "add").numpy(), np.cumsum(big))
    _same_bits(np.asarray(xp.cumulative_sum(xp.asarray(big))), np.cumsum(big))
    one = np.array([2**62 + 1, 1, -3, 7], np.int64)
    assert int(np.asarray(xp.cumulative_sum(xp.asarray(one)))[-1]) == 2**62 + 6


def test_a_scan_is_one_node_and_one_kernel():
    x = Tensor(np.ones((4, 6), np.float32))
    y = x.cumsum(1)
    nodes = toposort([y.node])
    assert [n.op for n in nodes].count(Op.SCAN) == 1
    assert max(np.prod(n.shape) for n in nodes) == 24  # no (n, n) mask, no shifted copies
    kinds = [k.kind for k in schedule([y.node]).graph.kernels]
    assert kinds == ["SCAN"]
    assert "SCAN" in limn.ir(y, stage="graph") and "ACCUM" in limn.ir(y, stage="loop")


def test_array_api_cumulative_functions_match_numpy():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((5, 7))
    for axis in (0, 1, -1):
        _same_bits(np.asarray(xp.cumulative_sum(xp.asarray(a), axis=axis)), np.cumsum(a, axis))
        _same_bits(np.asarray(xp.cumulative_prod(xp.asarray(a), axis=axis)), np.cumprod(a, axis))
    i = rng.integers(-50, 50, (3, 4), dtype=np.int32)
    got = np.asarray(xp.cumulative_sum(xp.asarray(i), axis=1, include_initial=True))
    want = np.concatenate([np.zeros((3, 1), np.int64), np.cumsum(i, 1, dtype=np.int64)], 1)
    _same_bits(got, want)
    z = rng.standard_normal((2, 6)) + 1j * rng.standard_normal((2, 6))
    got = np.asarray(xp.cumulative_sum(xp.asarray(z), axis=1))
    np.testing.assert_array_equal(got, np.cumsum(z, 1))
    got = np.asarray(xp.cumulative_prod(xp.asarray(z), axis=1))
    np.testing.assert_allclose(got, np.cumprod(z, 1), rtol=1e-12)


def test_cumsum_gradient_matches_torch():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 6, 4))
    w = rng.standard_normal((3, 6, 4))
    for axis in (0, 1, 2):
        x = Tensor(a, dtype=dtypes.float64, requires_grad=True)
        (x.cumsum(axis) * Tensor(w, dtype=dtypes.float64)).sum().backward()
        tx = torch.tensor(a, requires_grad=True)
        (tx.cumsum(axis) * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            x.cumsum(axis).numpy(), tx.cumsum(axis).detach().numpy(), rtol=1e-12, atol=1e-12
        )


def test_other_scans_say_they_have_no_gradient():
    x = Tensor(np.ones(3, np.float32), requires_grad=True)
    with pytest.raises(NotImplementedError, match="MUL scan"):
        x.p_scan(0, "mul").sum().backward()


def test_bad_scan_arguments_name_what_is_accepted():
    x = Tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="combine one of"):
        x.p_scan(0, "min")
    with pytest.raises(ValueError, match="0 <= axis < 2"):
        x.p_scan(2, "add")


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_a_million_element_scan_is_fast_on_both_devices(device):
    n = 2**20
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    t0 = time.perf_counter()
    got = Tensor(x, device=device).cumsum(0).numpy()
    mask = np.asarray(xp.asarray(x, device=xp.Device(device)) > 0.5)
    picked = xp.asarray(x, device=xp.Device(device))[xp.asarray(mask, device=xp.Device(device))]
    picked = np.asarray(picked)
    took = time.perf_counter() - t0
    _same_bits(got, np.cumsum(x))
    _same_bits(picked, x[mask])
    assert took < 30, f"{device}: a 2**20 scan and mask took {took:.1f} s"


def test_scan_memory_is_linear_on_the_numpy_device():
    n = 2**20
    x = np.arange(n, dtype=np.int64)
    t = Tensor(x, device="numpy")
    tracemalloc.start()
    got = t.cumsum(0).numpy()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    _same_bits(got, np.cumsum(x))
    assert peak < 4 * x.nbytes, f"peak {peak} bytes for an {x.nbytes}-byte scan"


def test_threaded_scans_equal_serial_ones_bit_for_bit():
    c, serial = get_device("c"), CDevice(openmp=False)
    x = np.random.default_rng(9).standard_normal((4096, 300)).astype(np.float32)
    for axis in (0, 1):
        build = lambda a=axis: (Tensor(x) * 3).p_scan(a, "add")  # noqa: E731
        threaded = c.realize([build().node])[0].data
        alone = serial.realize([build().node])[0].data
        assert threaded.tobytes() == alone.tobytes()
        _same_bits(threaded, np.cumsum(x * np.float32(3), axis))


@pytest.mark.parametrize("device", ["numpy", "c"])
@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_width_cumsum_folds_in_float32_as_its_sum_and_torch_do(device, d):
    # folding in the half width itself stalls: 2048 + 1 is 2048 in float16 (256 in bfloat16)
    rng = np.random.default_rng(4)
    x = np.concatenate([np.ones(4096), rng.standard_normal(300)]).astype(np.float32)
    td = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16}[d]
    t = Tensor(x, device=device).cast(d)
    got = t.cumsum(0).float().numpy()
    tt = torch.from_numpy(x).to(td)
    np.testing.assert_array_equal(got, tt.cumsum(0).float().numpy())
    assert got[4095] == t[:4096].sum().float().item() == 4096


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_mask_indexing_and_nonzero_at_the_edges_match_numpy(device):
    """No True, all True, one True at either end, a 2-d mask over a 3-d array, a 0-d mask:
    the running count gives the result length, the dropped slot 0 takes every False."""
    if device == "c":
        try:
            limn.get_device("c")
        except (ValueError, RuntimeError, OSError) as e:
            pytest.skip(f"c device: {e}")
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) - 5
    flat = a.reshape(-1)
    masks = [np.zeros(24, bool), np.ones(24, bool), np.eye(1, 24, 0, dtype=bool)[0],
             np.eye(1, 24, 23, dtype=bool)[0], flat % 5 == 0]  # fmt: skip
    for m in masks:
        x, k = xp.asarray(flat, device=xp.Device(device)), xp.asarray(m, device=xp.Device(device))
        assert np.array_equal(np.asarray(x[k]), flat[m])
        assert np.array_equal(np.asarray(xp.nonzero(k)[0]), np.nonzero(m)[0])
    m2 = a[..., 0] > 0
    x3 = xp.asarray(a, device=xp.Device(device))
    assert np.array_equal(np.asarray(x3[xp.asarray(m2, device=xp.Device(device))]), a[m2])
    got = [np.asarray(i) for i in xp.nonzero(xp.asarray(a > 3, device=xp.Device(device)))]
    assert len(got) == a.ndim and all(np.array_equal(g, w) for g, w in zip(got, np.nonzero(a > 3)))
    t = xp.asarray(np.asarray(True), device=xp.Device(device))
    assert np.array_equal(np.asarray(x3[t]), a[np.asarray(True)])
