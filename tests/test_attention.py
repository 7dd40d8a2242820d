"""Fused attention: the frontend against torch and the composed form, the kernels against
the numpy reference, and the shape of the backward graph."""

import math
import os
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import limn
from ir.graph.node import toposort
from ir.graph.ops import Op
from ir.kernel.schedule import schedule
from limn import Tensor, nn, sdpa
from limn.attention import composed, fused_on
from limn.runtime.device import get_device
from limn.runtime.target import detect

sdpa_fn = nn.scaled_dot_product_attention
REF = sdpa.KERNELS  # the numpy reference, params (scale, causal, heads)


def _c():
    try:
        return get_device("c")
    except RuntimeError as e:
        pytest.skip(f"no c toolchain: {e}")


def _torch_mask(t_q, t_k, causal, key_mask):
    if not causal and key_mask is None:
        return None
    m = torch.ones(t_q, t_k, dtype=torch.bool)
    if causal:
        m = torch.tril(m)
    if key_mask is not None:
        m = m & torch.tensor(key_mask)[..., None, :]
    return m


def _run(qa, ka, va, ga, causal, mask, dtype=np.float32):
    """Output and q, k, v gradients from limn (this device) and from torch."""
    q, k, v = (Tensor(a, dtype=dtype, requires_grad=True) for a in (qa, ka, va))
    o = sdpa_fn(q, k, v, is_causal=causal, key_mask=None if mask is None else Tensor(mask))
    (o * Tensor(ga, dtype=dtype)).sum().backward()
    mine = [o.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()]
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (qa, ka, va))
    am = _torch_mask(qa.shape[-2], ka.shape[-2], causal, mask)
    to = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=am)
    (to * torch.tensor(ga)).sum().backward()
    theirs = [to.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()]
    return mine, theirs


SHAPES = [  # (t_q, t_k, d): tile multiples, ragged tails, t_q != t_k both ways, d 16..80
    (1, 1, 16),
    (32, 64, 32),
    (37, 53, 16),
    (70, 45, 80),
    (5, 129, 64),
    (130, 7, 32),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_backward_match_torch_sdpa(shape, causal, dtype):
    t_q, t_k, d = shape
    rng = np.random.default_rng(t_q * 1000 + t_k)
    qa = rng.standard_normal((2, 3, t_q, d)).astype(dtype)
    ka = rng.standard_normal((2, 3, t_k, d)).astype(dtype)
    va = rng.standard_normal((2, 3, t_k, d)).astype(dtype)
    ga = rng.standard_normal((2, 3, t_q, d)).astype(dtype)
    mask = rng.random((2, 1, t_k)) > 0.3 if t_k > 2 else None
    for m in (None, mask):
        mine, theirs = _run(qa, ka, va, ga, causal, m, dtype)
        tol = 1e-12 if dtype == np.float64 else 2e-5
        for a, b in zip(mine, theirs):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1, math.sqrt(t_k)))


def test_fused_matches_the_composed_form_forward_and_backward():
    rng = np.random.default_rng(1)
    qa, ka, va = (rng.standard_normal((2, 2, n, 32)) for n in (40, 70, 70))
    mask = Tensor(rng.random((2, 1, 70)) > 0.5)
    outs = []
    for fused in (True, False):
        q, k, v = (Tensor(a, requires_grad=True) for a in (qa, ka, va))
        if fused:
            o = sdpa_fn(q, k, v, is_causal=True, key_mask=mask)
            assert o.node.op == Op.CUSTOM
        else:
            o = composed(q, k, v.expand(v.shape), True, mask.expand(2, 2, 70), 1 / math.sqrt(32))
        (o * o).sum().backward()
        outs.append([o.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()])
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


def test_key_mask_is_the_same_as_slicing_the_hidden_keys_away():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, n, 16)).astype(np.float32) for n in (9, 75, 75))
    keep = rng.random(75) > 0.4
    masked = sdpa_fn(Tensor(q), Tensor(k), Tensor(v), key_mask=Tensor(keep)).numpy()
    sliced = sdpa_fn(Tensor(q), Tensor(k[:, :, keep]), Tensor(v[:, :, keep])).numpy()
    np.testing.assert_allclose(masked, sliced, rtol=1e-6, atol=1e-6)


def test_a_query_that_sees_no_key_gives_zeros_and_zero_gradients():
    rng = np.random.default_rng(3)
    q, k, v = (Tensor(rng.standard_normal((2, 1, 4, 8)), requires_grad=True) for _ in range(3))
    hidden = Tensor(np.array([[[False] * 4], [[True, False, True, True]]]))
    o = sdpa_fn(q, k, v, key_mask=hidden)
    o.sum().backward()
    assert np.all(o.numpy()[0] == 0) and np.all(np.isfinite(o.numpy()))
    assert np.all(q.grad.numpy()[0] == 0) and np.all(k.grad.numpy()[0] == 0)
    assert np.all(k.grad.numpy()[1, :, 1] == 0) and np.all(v.grad.numpy()[1, :, 1] == 0)


def test_nan_in_one_query_row_stays_in_that_row():
    rng = np.random.default_rng(4)
    qa = rng.standard_normal((1, 1, 6, 8)).astype(np.float32)
    qa[0, 0, 2, 3] = np.nan
    kv = Tensor(rng.standard_normal((1, 1, 6, 8)).astype(np.float32))
    o = sdpa_fn(Tensor(qa), kv, kv, is_causal=True).numpy()
    assert np.all(np.isnan(o[0, 0, 2])) and np.all(np.isfinite(np.delete(o[0, 0], 2, 0)))


def test_empty_shapes():
    for tq, tk, b in ((0, 5, 1), (3, 4, 0)):
        q = Tensor(np.ones((b, 2, tq, 8), np.float32))
        kv = Tensor(np.ones((b, 2, tk, 8), np.float32))
        assert sdpa_fn(q, kv, kv, is_causal=True).numpy().shape == (b, 2, tq, 8)
    q = Tensor(np.ones((1, 1, 3, 8), np.float32))
    kv = Tensor(np.ones((1, 1, 0, 8), np.float32))
    assert np.all(sdpa_fn(q, kv, kv).numpy() == 0)


def test_the_backward_graph_holds_no_t_q_by_t_k_node():
    t_q, t_k = 96, 160
    rng = np.random.default_rng(5)
    q, k, v = (
        Tensor(rng.standard_normal((1, 2, n, 8)), requires_grad=True) for n in (t_q, t_k, t_k)
    )
    o = sdpa_fn(q, k, v, is_causal=True, key_mask=Tensor(rng.random((1, 1, t_k)) > 0.5))
    o.square().sum().backward()
    nodes = toposort([o.node, q.grad.node, k.grad.node, v.grad.node])
    assert {n.arg[0] for n in nodes if n.op == Op.CUSTOM} == {"sdpa", "sdpa_bwd_q", "sdpa_bwd_kv"}
    assert max(math.prod(n.shape) for n in nodes) < t_q * t_k


def test_create_graph_differentiates_the_composed_backward_again():
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal((1, 2, n, 8)) for n in (5, 7, 7)]
    w = rng.standard_normal((1, 2, 5, 8))
    q, k, v = (Tensor(a, requires_grad=True) for a in arrays)
    o = sdpa_fn(q, k, v, is_causal=True)
    o.square().sum().backward(create_graph=True)
    gq = q.grad
    q.grad = k.grad = v.grad = None
    (gq * Tensor(w)).sum().backward()
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in arrays)
    # torch's fused sdpa has no double backward: its math spelled out
    scores = (tq @ tk.mT / math.sqrt(8)).masked_fill(torch.ones(5, 7).triu(1).bool(), -math.inf)
    to = scores.softmax(-1) @ tv
    (tgq,) = torch.autograd.grad(to.square().sum(), tq, create_graph=True)
    (tgq * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(gq.numpy(), tgq.detach().numpy(), rtol=1e-10, atol=1e-10)
    for a, b in ((q, tq), (k, tk), (v, tv)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_a_device_without_the_kernels_never_sees_the_node(monkeypatch):
    dev = get_device(limn.current_device())
    for name in ("sdpa", "sdpa_bwd_q", "sdpa_bwd_kv"):
        monkeypatch.delitem(dev.kernels, name)
    assert not fused_on(limn.current_device())
    rng = np.random.default_rng(7)
    q, k, v = (Tensor(rng.standard_normal((1, 2, 6, 8)), requires_grad=True) for _ in range(3))
    o = sdpa_fn(q, k, v, is_causal=True)
    o.sum().backward()
    nodes = toposort([o.node, q.grad.node, k.grad.node, v.grad.node])
    assert not any(n.op == Op.CUSTOM for n in nodes)
    monkeypatch.undo()
    ref = sdpa_fn(*(Tensor(t.numpy()) for t in (q, k, v)), is_causal=True)
    np.testing.assert_allclose(o.numpy(), ref.numpy(), rtol=1e-12)


def test_errors_name_the_op_and_the_shapes():
    q = Tensor(np.ones((1, 1, 4, 8), np.float32))
    with pytest.raises(ValueError, match=r"sdpa: q .* share d"):
        sdpa_fn(q, Tensor(np.ones((1, 1, 4, 6), np.float32)), q)
    with pytest.raises(TypeError, match="one float dtype"):
        sdpa_fn(q, q.double(), q)
    with pytest.raises(ValueError, match="key_mask"):
        sdpa_fn(q, q, q, key_mask=Tensor(np.ones(5, bool)))


# ---- the c kernels against the numpy reference -------------------------------------


def _kernel_inputs(rng, bh, t_q, t_k, d, dv, dtype, masked):
    q = rng.standard_normal((bh, t_q, d)).astype(dtype)
    k = rng.standard_normal((bh, t_k, d)).astype(dtype)
    v = rng.standard_normal((bh, t_k, dv)).astype(dtype)
    vals = [q, k, v] + ([rng.random((bh, t_k)) > 0.3] if masked else [])
    return vals


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_c_kernels_match_the_numpy_kernels(dtype):
    c = _c()
    import ml_dtypes

    npd = getattr(ml_dtypes, dtype) if dtype == "bfloat16" else np.dtype(dtype)
    tol = {"float32": 1e-5, "float64": 1e-13, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    rng = np.random.default_rng(8)
    for bh, t_q, t_k, d, dv, causal, masked in (
        (3, 70, 45, 16, 16, True, False),
        (2, 33, 130, 80, 24, False, True),
        (2, 100, 100, 32, 32, True, True),
        (2, 200, 160, 32, 32, True, False),  # tiles wholly visible on every pass
    ):
        vals = _kernel_inputs(rng, bh, t_q, t_k, d, dv, npd, masked)
        params = (1 / math.sqrt(d), causal, 0)
        (o, lse), (o2, lse2) = REF["sdpa"](vals, params), c.kernels["sdpa"](vals, params)
        assert o2.dtype == o.dtype and lse2.dtype == lse.dtype
        np.testing.assert_allclose(o2.astype(float), o.astype(float), rtol=tol, atol=tol)
        np.testing.assert_allclose(lse2, lse, rtol=tol, atol=tol)
        do = rng.standard_normal(o.shape).astype(npd)
        delta = (do.astype(lse.dtype) * o.astype(lse.dtype)).sum(-1)
        bwd = [*vals[:3], do, lse, delta, *vals[3:]]
        want = REF["sdpa_bwd_q"](bwd, params) + REF["sdpa_bwd_kv"](bwd, params)
        got = c.kernels["sdpa_bwd_q"](bwd, params) + c.kernels["sdpa_bwd_kv"](bwd, params)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            scale = np.abs(b.astype(float)).max()
            np.testing.assert_allclose(a.astype(float), b.astype(float), atol=tol * scale)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_every_backward_mode_and_thread_count_gives_the_same_bits(dtype):
    """The forward twice and on one thread; the backward by modes 1 and 2 (a task per query
    tile, per key tile) and by mode 3 (a task per head), each on one and two threads: the
    same bits every time. Ragged tails, t_q != t_k both ways, causal with t_q < t_k, a key
    mask, d != dv, the packed layout."""
    import ml_dtypes

    c = _c()
    ks = c.kernels["sdpa"].__self__  # the device's SdpaKernels
    npd = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(21)
    cases = [
        (3, 70, 45, 16, 16, True, False, 0),
        (2, 33, 130, 80, 24, False, True),
        (2, 100, 100, 32, 32, True, True),
        (2, 130, 200, 64, 64, True, False),
        (2, 63, 65, 24, 40, True, True),
        (2, 150, 150, 32, 32, True, False, 3),  # (B, t, 3 * d) packed
    ]
    old = c.threads
    try:
        for bh, t_q, t_k, d, dv, causal, masked, *packed in cases:
            heads = packed[0] if packed else 0
            vals = _kernel_inputs(
                rng, bh, t_q, t_k, d * max(heads, 1), dv * max(heads, 1), npd, masked
            )
            params = (1 / math.sqrt(d), causal, heads)
            runs, bwd = [], None
            for threads in (2, 2, 1):
                c.set_threads(threads)
                o, lse = c.kernels["sdpa"](vals, params)
                if bwd is None:
                    do = rng.standard_normal(o.shape).astype(npd)
                    delta = do.astype(lse.dtype) * o.astype(lse.dtype)
                    bwd = [*vals[:3], do, lse, delta.reshape(*lse.shape, -1).sum(-1), *vals[3:]]
                runs.append([o.tobytes(), lse.tobytes()])
                for modes in ((1, 2), (3,)):
                    got = sum((ks.bwd(bwd, params, m) for m in modes), ())
                    runs.append([a.tobytes() for a in got])
            assert all(r == runs[0] for r in runs[::3]) and all(r == runs[1] for r in runs[1::3])
            assert all(r == runs[1] for r in runs[2::3])
    finally:
        c.set_threads(old)


def _rows(dev, kind) -> list:
    """The driver rows of ``kind`` in every plan ``dev`` holds."""
    return [r for p in dev.plans.values() for r in p.runner.rows if r.kind == kind]


def test_a_step_makes_the_joint_backward_call_once(monkeypatch):
    """A plan holding both gradient kernels makes one sdpa_bwd call for dq, dk and dv: one
    row of the driver, in mode 0 (3 or 1 then 2, as the threads and heads say)."""
    from limn.runtime.driver import ATTENTION_GRAD

    dev = _c()
    limn.set_device("c")
    monkeypatch.setattr(dev, "plans", {})
    rng = np.random.default_rng(22)
    q, k, v = (Tensor(rng.standard_normal((2, 3, 23, 8)), requires_grad=True) for _ in range(3))
    (sdpa_fn(q, k, v, is_causal=True) ** 2).sum().backward()
    limn.realize(q.grad, k.grad, v.grad)
    (row,) = _rows(dev, ATTENTION_GRAD)
    assert row.ints[-1] == 0 and -1 not in row.args[7:]  # dq, dk, dv: every one written


def _grads_on_numpy(q, k, v):
    qs, ks, vs = (Tensor(t.numpy(), requires_grad=True) for t in (q, k, v))
    (sdpa_fn(qs, ks, vs, is_causal=True) ** 2).sum().backward()
    return qs.grad, ks.grad, vs.grad


def test_the_forward_siblings_run_as_one_kernel_call(monkeypatch):
    dev = get_device(limn.current_device())
    calls = []
    real = dev.kernels["sdpa"]
    monkeypatch.setitem(
        dev.kernels, "sdpa", lambda vals, params: calls.append(1) or real(vals, params)
    )
    q = Tensor(np.random.default_rng(10).standard_normal((1, 1, 5, 8)), requires_grad=True)
    o = sdpa_fn(q, q, q)
    lse = o._ctx.saved[0]
    if limn.current_device() == "c":  # the c device's driver calls the kernel: one row
        from limn.runtime.driver import ATTENTION

        monkeypatch.setattr(dev, "plans", {})
        limn.realize(o, lse)
        assert len(_rows(dev, ATTENTION)) == 1
        return
    limn.realize(o, lse)
    assert len(calls) == 1


def test_custom_results_become_the_buffers_without_a_copy(monkeypatch):
    """On the c device a CUSTOM kernel writes its results into its output buffers (o and L
    of one sdpa call): the arrays that become the Tensors, no copy after the call."""
    from limn.runtime.driver import ATTENTION

    dev = _c()
    limn.set_device("c")
    monkeypatch.setattr(dev, "plans", {})
    q = Tensor(np.random.default_rng(10).standard_normal((1, 1, 5, 8)), requires_grad=True)
    o = sdpa_fn(q, q, q)
    lse = o._ctx.saved[0]
    limn.realize(o, lse)
    ((plan, row),) = [
        (p, r) for p in dev.plans.values() for r in p.runner.rows if r.kind == ATTENTION
    ]
    assert [s.buffer for s in plan.graph.sinks] == list(row.args[4:6])
    assert set(row.args[4:6]) <= {b for b, *_ in plan.runner.bound}


def test_a_custom_result_that_is_an_input_or_another_result_is_copied(monkeypatch):
    """A kernel may hand back an input, or one array as two results: those are copied, so
    no two buffers share bytes."""
    from limn.attention import _custom

    dev = _c()
    limn.set_device("c")
    monkeypatch.setattr(dev, "plans", {})
    monkeypatch.setitem(dev.kernels, "echo", lambda vals, params: (vals[0], vals[0]))
    x = Tensor(np.arange(6.0).reshape(2, 3))
    limn.realize(x)
    a, b = (Tensor._make(n, "c") for n in _custom("echo", [x], (), [(x.dtype, x.shape)] * 2))
    limn.realize(a, b)
    np.testing.assert_array_equal(a.numpy(), x.numpy())
    np.testing.assert_array_equal(b.numpy(), x.numpy())
    bufs = [t.node.arg.data for t in (x, a, b)]
    assert not any(np.shares_memory(p, q) for i, p in enumerate(bufs) for q in bufs[i + 1 :])


# ---- layers --------------------------------------------------------------------------


def test_multi_head_attention_matches_torch_with_the_same_weights():
    rng = np.random.default_rng(11)
    e, h = 24, 3
    mha = nn.MultiHeadAttention(e, h)
    ref = torch.nn.MultiheadAttention(e, h, batch_first=True)
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in mha.state_dict().items()})
    x = rng.standard_normal((2, 10, e)).astype(np.float32)
    keep = rng.random((2, 10)) > 0.3
    keep[:, 0] = True
    y = mha(Tensor(x), key_mask=Tensor(keep), is_causal=True)
    causal = torch.triu(torch.ones(10, 10, dtype=torch.bool), 1)
    want, _ = ref(
        *(torch.tensor(x),) * 3,
        key_padding_mask=torch.tensor(~keep),
        attn_mask=causal,
        need_weights=False,
    )
    np.testing.assert_allclose(y.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    mem = rng.standard_normal((2, 7, e)).astype(np.float32)
    y2 = mha(Tensor(x), Tensor(mem))
    want2, _ = ref(torch.tensor(x), torch.tensor(mem), torch.tensor(mem), need_weights=False)
    np.testing.assert_allclose(y2.numpy(), want2.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_gpt_block_trains_the_same_fused_or_composed(monkeypatch):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 20, 16))
    limn.set_seed(0)
    block = nn.GPTBlock(16, 4, dtype="float64")
    grads = []
    for fused in (True, False):
        if not fused:
            dev = get_device(limn.current_device())
            for name in ("sdpa", "sdpa_bwd_q", "sdpa_bwd_kv"):
                monkeypatch.delitem(dev.kernels, name)
        block.zero_grad()
        y = block(Tensor(x))
        y.square().mean().backward()
        grads.append([y.numpy()] + [p.grad.numpy() for p in block.parameters()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# ---- the packed layout: heads side by side in each row ------------------------------


def _packed_inputs(rng, b, h, t_q, t_k, d, dv, dtype, masked):
    q = rng.standard_normal((b, t_q, h * d)).astype(dtype)
    k = rng.standard_normal((b, t_k, h * d)).astype(dtype)
    v = rng.standard_normal((b, t_k, h * dv)).astype(dtype)
    return [q, k, v] + ([rng.random((b, h, t_k)) > 0.3] if masked else [])


def _split(a, h):  # (B, t, H * w) -> (B, H, t, w); (B, t, H) -> (B, H, t)
    return np.swapaxes(a.reshape(*a.shape[:2], h, -1), 1, 2) if a.ndim == 3 else a


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_packed_kernels_match_the_same_kernels_on_split_heads(dtype):
    """(B, t, H * d) sources give what the (B, H, t, d) layout gives on the split heads:
    the numpy reference and the c kernels, every output, ragged tails and t_q != t_k."""
    c = _c()
    npd = np.dtype(dtype)
    tol = {"float32": 1e-5, "float64": 1e-13, "float16": 2e-3}[dtype]
    rng = np.random.default_rng(13)
    for b, h, t_q, t_k, d, dv, causal, masked in (
        (2, 3, 70, 45, 16, 16, True, True),
        (1, 2, 33, 130, 80, 24, False, False),
    ):
        vals = _packed_inputs(rng, b, h, t_q, t_k, d, dv, npd, masked)
        packed, split = (1 / math.sqrt(d), causal, h), (1 / math.sqrt(d), causal, 0)
        flat = [_split(a, h).reshape(b * h, a.shape[1], -1) for a in vals[:3]] + [
            m.reshape(b * h, t_k) for m in vals[3:]
        ]
        o, lse = REF["sdpa"](vals, packed)
        assert o.shape == (b, t_q, h * dv) and lse.shape == (b, t_q, h)
        want_o, want_lse = REF["sdpa"](flat, split)
        np.testing.assert_array_equal(_split(o, h).reshape(want_o.shape), want_o)
        np.testing.assert_array_equal(np.swapaxes(lse, 1, 2).reshape(want_lse.shape), want_lse)
        co, clse = c.kernels["sdpa"](vals, packed)
        np.testing.assert_allclose(co.astype(float), o.astype(float), rtol=tol, atol=tol)
        np.testing.assert_allclose(clse, lse, rtol=tol, atol=tol)
        do = rng.standard_normal(o.shape).astype(npd)
        delta = (do.astype(lse.dtype) * o.astype(lse.dtype)).reshape(b, t_q, h, dv).sum(-1)
        bwd = [*vals[:3], do, lse, delta, *vals[3:]]
        want = REF["sdpa_bwd_q"](bwd, packed) + REF["sdpa_bwd_kv"](bwd, packed)
        got = c.kernels["sdpa_bwd_q"](bwd, packed) + c.kernels["sdpa_bwd_kv"](bwd, packed)
        for a, w, like in zip(got, want, (vals[0], vals[1], vals[2])):
            assert a.shape == w.shape == like.shape and a.dtype == w.dtype
            scale = np.abs(w.astype(float)).max()
            np.testing.assert_allclose(a.astype(float), w.astype(float), atol=tol * scale)


def test_heads_split_off_a_projection_reach_the_kernels_without_a_copy():
    """MultiHeadAttention's q, k, v are views of its projections: the CUSTOM nodes take
    the projections in the packed layout, and neither the step's forward nor its backward
    writes a (B, H, t, d) buffer (a copy into heads, or back)."""
    rng = np.random.default_rng(15)
    b, t, e, h = 2, 10, 24, 3
    mha = nn.MultiHeadAttention(e, h)
    x = Tensor(rng.standard_normal((b, t, e)).astype(np.float32), requires_grad=True)
    keep = Tensor(rng.random((b, t)) > 0.2)
    y = mha(x, key_mask=keep, is_causal=True)
    y.square().sum().backward()
    roots = [y.node, x.grad.node] + [p.grad.node for p in mha.parameters()]
    custom = [n for n in toposort(roots) if n.op == Op.CUSTOM]
    assert {n.arg[0] for n in custom} == {"sdpa", "sdpa_bwd_q", "sdpa_bwd_kv"}
    assert all(n.arg[2][2] == h for n in custom)  # the packed layout, H heads
    graph = schedule(roots).graph
    shapes = {tuple(s.shape) for s in graph.buffers[graph.n_inputs :]}
    assert (b, h, t, e // h) not in shapes, shapes
    # and the answer is the split-heads one
    q, k, v = (Tensor(rng.standard_normal((b, h, t, 8)).astype(np.float32)) for _ in range(3))
    o = sdpa_fn(q, k, v, is_causal=True)
    assert o.node.arg[2][2] == 0  # realized (B, H, t, d) tensors: the plain layout
    packed = [Tensor(np.ascontiguousarray(np.swapaxes(a.numpy(), 1, 2)).reshape(b, t, 24))
              for a in (q, k, v)]  # fmt: skip
    o2 = sdpa_fn(*(p.reshape(b, t, h, 8).transpose(1, 2) for p in packed), is_causal=True)
    assert o2.node.op == Op.VIEW and o2.node.srcs[0].arg[2][2] == h
    np.testing.assert_allclose(o2.numpy(), o.numpy(), rtol=1e-6, atol=1e-6)


# ---- more of the list: siblings on both devices, masks under the gradient, halves


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_every_multi_output_kernel_runs_once_per_step(device, monkeypatch):
    """o and L come from one sdpa call, dk and dv from one sdpa_bwd_kv call, on each host
    device, in a step that realizes the answer and every gradient together."""
    from limn.runtime.driver import ATTENTION, ATTENTION_GRAD

    dev = _c() if device == "c" else get_device("numpy")
    limn.set_device(device)
    monkeypatch.setattr(dev, "plans", {}, raising=False)
    calls = {n: 0 for n in ("sdpa", "sdpa_bwd_q", "sdpa_bwd_kv")}
    for name in calls:
        real = dev.kernels[name]

        def counted(vals, params, name=name, real=real):
            calls[name] += 1
            return real(vals, params)

        monkeypatch.setitem(dev.kernels, name, counted)
    rng = np.random.default_rng(16)
    q, k, v = (Tensor(rng.standard_normal((1, 3, 23, 8)), requires_grad=True) for _ in range(3))
    o = sdpa_fn(q, k, v, is_causal=True)
    lse = o._ctx.saved[0]
    (o * o).sum().backward()
    limn.realize(o, lse, q.grad, k.grad, v.grad)
    if device == "c":  # the driver calls the C: one row for o and L, one for the gradients
        assert len(_rows(dev, ATTENTION)) == len(_rows(dev, ATTENTION_GRAD)) == 1
    else:
        assert calls == {"sdpa": 1, "sdpa_bwd_q": 1, "sdpa_bwd_kv": 1}


def test_a_key_mask_gives_the_gradients_of_slicing_the_hidden_keys_away():
    rng = np.random.default_rng(17)
    qa, ka, va = (rng.standard_normal((1, 2, n, 16)) for n in (9, 75, 75))
    ga = rng.standard_normal((1, 2, 9, 16))
    keep = rng.random(75) > 0.4
    q, k, v = (Tensor(a, requires_grad=True) for a in (qa, ka, va))
    (sdpa_fn(q, k, v, key_mask=Tensor(keep)) * Tensor(ga)).sum().backward()
    q2, k2, v2 = (Tensor(a, requires_grad=True) for a in (qa, ka[:, :, keep], va[:, :, keep]))
    (sdpa_fn(q2, k2, v2) * Tensor(ga)).sum().backward()
    np.testing.assert_allclose(q.grad.numpy(), q2.grad.numpy(), rtol=1e-10, atol=1e-12)
    for full, cut in ((k, k2), (v, v2)):
        np.testing.assert_allclose(full.grad.numpy()[:, :, keep], cut.grad.numpy(), atol=1e-12)
        assert np.all(full.grad.numpy()[:, :, ~keep] == 0)  # a hidden key takes no gradient


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_widths_compute_in_float32_and_round_once(dtype):
    """A half-width attention is the float32 one on the same (half) inputs, rounded once:
    the answer and every gradient, with L kept in float32."""
    import ml_dtypes

    npd = np.dtype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else dtype)
    rng = np.random.default_rng(18)
    arrays = [rng.standard_normal((2, 2, n, 16)).astype(npd) for n in (21, 34, 34)]
    g = rng.standard_normal((2, 2, 21, 16)).astype(npd)
    got, want = [], []
    for d, out in ((dtype, got), ("float32", want)):
        q, k, v = (Tensor(a.astype(np.float32), dtype=d, requires_grad=True) for a in arrays)
        o = sdpa_fn(q, k, v, is_causal=True)
        if d == dtype:
            assert o.dtype == q.dtype and str(o._ctx.saved[0].dtype) == "float32"
        (o * Tensor(g.astype(np.float32), dtype=d)).sum().backward()
        out += [t.numpy().astype(np.float32) for t in (o, q.grad, k.grad, v.grad)]
    eps = {"float16": 2**-10, "bfloat16": 2**-7}[dtype]
    for a, b in zip(got, want):
        # one rounding of the float32 result (the incoming gradient is the same half values)
        np.testing.assert_allclose(a, b, rtol=2 * eps, atol=2 * eps * np.abs(b).max())


# ---- inf, nan and -0.0 in every input: the kernels against the reference ---------------

SPECIAL_CASES = [  # bh, t_q, t_k, d, dv, causal, key mask
    (2, 8, 8, 4, 4, True, None),
    (2, 70, 45, 5, 13, True, "rows"),  # ragged tiles, widths off the vector width
    (2, 33, 130, 24, 7, False, "rows"),
    (2, 1, 20, 8, 8, False, "cache"),  # one query against a partly filled cache
    (3, 130, 70, 16, 16, True, "random"),
]


def _special_mask(rng, bh, t_k, kind):
    if kind is None:
        return []
    m = rng.random((bh, t_k)) > 0.3
    if kind == "rows":  # a head that sees no key; the first rows of the next see none
        m[0], m[1, :5] = False, False
    if kind == "cache":  # the unfilled end of a key/value cache
        m[:, 12:] = False
    return [m]


def assert_same_specials(got, want, what):
    """nan where the reference has nan, the same infs, the same signs of zero where both
    sides are zero, and the finite values close. A half width's zeros keep no sign to
    compare: it rounds a fold's residue (-1e-9 where the reference cancels to +0, or the
    reference's own per-node rounding) to a signed zero, which is closeness, not a sign."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan), f"{what}: nan at {np.argwhere(np.isnan(g) != nan)[:4]}"
    assert np.array_equal(g[~nan & np.isinf(w)], w[~nan & np.isinf(w)]), f"{what}: infs"
    fin = np.isfinite(w)
    if want.dtype.itemsize > 2:
        zero = fin & (w == 0) & (g == 0)
        assert np.array_equal(np.signbit(g[zero]), np.signbit(w[zero])), f"{what}: zero signs"
    np.testing.assert_allclose(g[fin], w[fin], rtol=2e-2, atol=2e-2 * np.abs(w[fin]).max(initial=1))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("where", ["q", "k", "v", "do"])
def test_c_kernels_put_inf_nan_and_negative_zero_where_the_reference_does(where, dtype):
    """An inf, a nan, a -inf or a -0.0 at two places of one input (the queries, keys,
    values or the output gradient), under causal and key masks that hide whole rows,
    ragged tiles, t_q != t_k, one query against a cache: the forward and every backward
    mode give the reference's nans, infs and zero signs. The reference multiplies a hidden
    pair's terms by its exact 0 probability, so a nan value row reaches every row it is
    hidden from (the c kernels, which skip hidden pairs, used to keep it in the rows of
    one register block)."""
    import ml_dtypes

    c = _c()
    ks = c.kernels["sdpa"].__self__
    npd = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(zlib.crc32(f"{where} {dtype}".encode()))  # stable per case
    for bh, t_q, t_k, d, dv, causal, kind in SPECIAL_CASES:
        for value in (np.nan, np.inf, -np.inf, -0.0):
            arrays = {n: rng.standard_normal((bh, t, w)) for n, t, w in
                      (("q", t_q, d), ("k", t_k, d), ("v", t_k, dv), ("do", t_q, dv))}  # fmt: skip
            for _ in range(2):
                arrays[where][tuple(rng.integers(0, n) for n in arrays[where].shape)] = value
            q, k, v, do = (arrays[n].astype(npd) for n in ("q", "k", "v", "do"))
            vals = [q, k, v, *_special_mask(rng, bh, t_k, kind)]
            params = (1 / math.sqrt(d), causal, 0)
            what = f"{dtype} {where}={value} in {(bh, t_q, t_k, d, dv, causal, kind)}"
            want = REF["sdpa"](vals, params)
            for name, a, b in zip(("o", "lse"), c.kernels["sdpa"](vals, params), want):
                assert_same_specials(a, b, f"{what}: {name}")
            o, lse = want
            delta = (do.astype(lse.dtype) * o.astype(lse.dtype)).sum(-1)
            bwd = [q, k, v, do, lse, delta, *vals[3:]]
            want = REF["sdpa_bwd_q"](bwd, params) + REF["sdpa_bwd_kv"](bwd, params)
            for modes in ((1, 2), (3,)):
                got = sum((ks.bwd(bwd, params, m) for m in modes), ())
                for name, a, b in zip(("dq", "dk", "dv"), got, want):
                    assert_same_specials(a, b, f"{what}: {name} by modes {modes}")


def _step(arrays, causal, mask):
    """o and the q, k, v gradients of one fused step on this device."""
    q, k, v = (Tensor(arrays[n], requires_grad=True) for n in "qkv")
    o = sdpa_fn(q, k, v, is_causal=causal, key_mask=None if mask is None else Tensor(mask))
    (o * Tensor(arrays["g"])).sum().backward()
    return [o.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()]


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_a_nan_value_hidden_by_the_causal_mask_is_nan_in_every_row_as_in_torch(device):
    """The issue's case: v[0, 0, 5, 1] = nan, causal, t = 8. Row 4 cannot see key 5, yet
    the reference (and torch) multiply its value row by a zero probability: every row."""
    _c() if device == "c" else None
    limn.set_device(device)
    rng = np.random.default_rng(23)
    arrays = {n: rng.standard_normal((1, 1, 8, 4)).astype(np.float32) for n in "qkvg"}
    arrays["v"][0, 0, 5, 1] = np.nan
    o = _step(arrays, True, None)[0]
    want = F.scaled_dot_product_attention(*(torch.tensor(arrays[n]) for n in "qkv"), is_causal=True)
    assert np.isnan(o[0, 0]).any(-1).all() and np.isnan(want[0, 0].numpy()).any(-1).all()
    np.testing.assert_array_equal(np.isnan(o), np.isnan(want.numpy()))


@pytest.mark.parametrize("where", ["q", "k", "v", "g"])
def test_inf_and_nan_reach_the_answer_and_gradients_where_the_reference_and_torch_put_them(where):
    """inf, nan or -0.0 in the queries, keys, values or the output gradient, with causal
    and key masks that hide whole rows and one query against a cache: the c device's fused
    step gives the nans and infs of the numpy device's (the reference), forward and
    backward, and for the values and the gradient those are torch's. In the queries and
    keys torch differs: it adds -inf to a hidden pair's score, which keeps a nan score nan
    and spreads it through the row, where limn selects the score away."""
    _c()
    rng = np.random.default_rng(24)
    for b, h, t_q, t_k, d, causal, kind in [
        (1, 1, 8, 8, 4, True, None),
        (2, 2, 9, 13, 5, True, "rows"),
        (2, 2, 6, 11, 7, False, "rows"),
        (1, 2, 1, 10, 8, False, "cache"),
    ]:
        for value in (np.nan, np.inf, -0.0):
            arrays = {n: rng.standard_normal((b, h, t_k if n in "kv" else t_q, d)) for n in "qkvg"}
            arrays = {n: a.astype(np.float32) for n, a in arrays.items()}
            arrays[where][tuple(rng.integers(0, n) for n in arrays[where].shape)] = value
            mask = _special_mask(rng, b * h, t_k, kind)
            mask = mask[0].reshape(b, h, t_k) if mask else None
            runs = {}
            for device in ("numpy", "c"):
                limn.set_device(device)
                runs[device] = _step(arrays, causal, mask)
            if where in "vg":
                ts = [torch.tensor(arrays[n], requires_grad=True) for n in "qkv"]
                to = F.scaled_dot_product_attention(
                    *ts, attn_mask=_torch_mask(t_q, t_k, causal, mask)
                )
                (to * torch.tensor(arrays["g"])).sum().backward()
                runs["torch"] = [to.detach().numpy()] + [t.grad.numpy() for t in ts]
            for name, *outs in zip(("o", "dq", "dk", "dv"), *runs.values()):
                what = f"{where}={value} {name} in {(b, h, t_q, t_k, d, causal, kind)}"
                for a in outs[1:]:
                    assert np.array_equal(np.isnan(a), np.isnan(outs[0])), what
                    assert np.array_equal(np.isinf(a), np.isinf(outs[0])), what


def test_float32_kernels_are_as_close_to_the_float64_answer_as_the_reference_and_torch():
    """The c kernels fold every product with one fused multiply-add (written fma(); the
    c device compiles with -ffp-contract=off): their float32 answer and gradients stay
    within 16 float32 ulps of the largest float64 value, and within the error of the
    numpy reference's float32 and torch's, measured on the same inputs."""
    c = _c()
    ks = c.kernels["sdpa"].__self__
    rng = np.random.default_rng(25)
    eps = np.finfo(np.float32).eps
    for bh, t, d, causal in ((4, 200, 64, True), (4, 300, 32, False)):
        arrays = [rng.standard_normal((bh, t, d)).astype(np.float32) for _ in range(4)]
        params = (1 / math.sqrt(d), causal, 0)
        wide = [a.astype(np.float64) for a in arrays]
        o64, lse64 = REF["sdpa"](wide[:3], params)
        bwd64 = [*wide, lse64, (wide[3] * o64).sum(-1)]
        truth = [o64, *REF["sdpa_bwd_q"](bwd64, params), *REF["sdpa_bwd_kv"](bwd64, params)]
        o32, lse32 = REF["sdpa"](arrays[:3], params)
        bwd = [*arrays, lse32, (arrays[3] * o32).sum(-1)]
        mine = [c.kernels["sdpa"](arrays[:3], params)[0], *ks.bwd(bwd, params, 3)]
        ref = [o32, *REF["sdpa_bwd_q"](bwd, params), *REF["sdpa_bwd_kv"](bwd, params)]
        ts = [torch.tensor(a, requires_grad=True) for a in arrays[:3]]
        to = F.scaled_dot_product_attention(*ts, is_causal=causal)
        to.backward(torch.tensor(arrays[3]))
        theirs = [to.detach().numpy()] + [x.grad.numpy() for x in ts]
        for a, r, th, w in zip(mine, ref, theirs, truth):
            err = [
                np.abs(x.astype(np.float64) - w).max() / (np.abs(w).max() * eps) for x in (a, r, th)
            ]
            assert err[0] <= 16 and err[0] <= 1.5 * max(err[1:]) + 2, err


# ---- the kernels' source is a printed stage --------------------------------------------


def test_ir_prints_the_attention_kernels_sources_that_the_devices_compile():
    """``ir(x, stage="c")`` of a fused step holds each kernel's unit, as ir/c/sdpa.py
    makes it for the c device, under a line naming the function, its buffers and params;
    ``stage="cuda"`` the NVRTC program the cuda device launches from."""
    from ir.c import sdpa as c_sdpa
    from ir.cuda import sdpa as cuda_sdpa
    from ir.graph import dtypes

    rng = np.random.default_rng(26)
    q = Tensor(rng.standard_normal((1, 2, 5, 8)).astype(np.float32), requires_grad=True)
    o = sdpa_fn(q, q, q, is_causal=True)
    o.sum().backward()
    text = limn.ir([o, q.grad], stage="c")
    for part in ("fwd", "bwd"):
        assert c_sdpa.unit(part, dtypes.float32, detect()) in text
        assert text.count(c_sdpa.unit(part, dtypes.float32, detect())) == 1  # siblings share it
    assert "CUSTOM sdpa[0]: limn_sdpa_fwd_float32(q=buf0, k=buf0, v=buf0" in text
    assert "CUSTOM sdpa_bwd_kv[1]: limn_sdpa_bwd_float32(" in text and "causal=1" in text
    cuda = limn.ir([o, q.grad], stage="cuda")
    assert cuda_sdpa.source(dtypes.float32, 8, 8) in cuda and "limn_sdpa_bwd_q(buf0" in cuda


def test_the_profiler_and_the_viewer_show_the_source_a_custom_kernel_runs(tmp_path):
    from ir.c import sdpa as c_sdpa
    from ir.graph import dtypes
    from limn import viewer

    _c()
    limn.set_device("c")
    rng = np.random.default_rng(27)
    q = Tensor(rng.standard_normal((1, 2, 5, 8)).astype(np.float32), requires_grad=True)
    with limn.profile():
        o = sdpa_fn(q, q, q, is_causal=True)
        o.sum().backward()
        limn.realize(o, q.grad)
    rows = {r["kernel"]: r for r in limn.runtime.profile.stats(nest=True)}
    fwd = next(r for name, r in rows.items() if name.startswith("CUSTOM sdpa "))
    assert "limn_sdpa_fwd_float32" in fwd["kernel"]
    assert fwd["nest"].endswith(c_sdpa.unit("fwd", dtypes.float32, detect()))
    data, graph = viewer.graph_data([sdpa_fn(q, q, q, is_causal=True).node])
    viewer.fill_kernels(data, graph)
    custom = [k for k in data["kernels"] if k["kind"] == "CUSTOM"]
    assert custom and all(k["pipelines"]["c"]["source"] for k in custom)
    assert (
        custom[0]["pipelines"]["c"]["source"]
        == c_sdpa.unit("fwd", dtypes.float32, detect()).splitlines()
    )
    assert "scale=" in custom[0]["pipelines"]["c"]["steps"][0]["lines"][0]


@pytest.mark.slow
def test_the_rows_of_a_register_block_change_no_bit_of_the_c_kernels(monkeypatch):
    """The register block's rows follow the target (4 where AVX-512 has 32 registers, 2
    elsewhere); every row's sums run in their own order, so each choice gives the same bits."""
    from ir.c import sdpa as source
    from limn.runtime.c import CDevice
    from limn.runtime.c_sdpa import SdpaKernels

    rng = np.random.default_rng(1)
    q, k, v, do = (rng.standard_normal((3, 77, 24), np.float32) for _ in range(4))
    got = {}
    for rows in (None, 1, 4):
        if rows:
            monkeypatch.setattr(source, "COMMON", f"#define R {rows}\n" + source.COMMON)
        ks = SdpaKernels(CDevice())
        o, lse = ks.sdpa([q, k, v], (0.2, True, 0))
        grads = ks.bwd([q, k, v, do, lse, (o * do).sum(-1)], (0.2, True, 0), 3)
        got[rows] = b"".join(a.tobytes() for a in (o, lse, *grads))
    assert got[1] == got[None] == got[4]


# ---- the numpy reference itself: thread-independent, accurate, small ---------------------

_REF_BITS = """
import hashlib, math, sys
import numpy as np
from limn.sdpa import KERNELS as REF
rng = np.random.default_rng(0)
q, k, v, do = (rng.standard_normal((2, 200, 32)).astype(np.float32) for _ in range(4))
params = (1 / math.sqrt(32), True, 0)
o, lse = REF["sdpa"]([q, k, v], params)
bwd = [q, k, v, do, lse, (do * o).sum(-1)]
outs = [o, lse, *REF["sdpa_bwd_q"](bwd, params), *REF["sdpa_bwd_kv"](bwd, params)]
print(hashlib.sha256(b"".join(a.tobytes() for a in outs)).hexdigest())
"""


def test_the_reference_attention_gives_the_same_bits_whatever_the_thread_count():
    """Its forward and both backward kernels: OMP_NUM_THREADS (BLAS's threads) changes no
    bit, as it changes none on any other device."""
    import subprocess
    import sys

    digests = set()
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
        out = subprocess.run([sys.executable, "-c", _REF_BITS], env=env, capture_output=True)
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        digests.add(out.stdout)
    assert len(digests) == 1


def test_the_reference_attention_backward_is_as_accurate_as_torch_float32_at_large_logits():
    """|q|, |k| ~ 30 puts the scores in the thousands: recomputing probabilities as
    exp(s - lse) moved dv by 2e-4 of its scale (lse's rounding); the forward's own
    probabilities give torch float32's error."""
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((2, 64, 16)).astype(np.float32) * 30 for _ in range(2))
    v, do = (rng.standard_normal((2, 64, 16)).astype(np.float32) for _ in range(2))
    params = (0.25, True, 0)
    o, lse = REF["sdpa"]([q, k, v], params)
    bwd = [q, k, v, do, lse, (do * o).sum(-1)]
    got = REF["sdpa_bwd_q"](bwd, params) + REF["sdpa_bwd_kv"](bwd, params)

    def torch_grads(dtype):
        t = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v)]
        F.scaled_dot_product_attention(*t, is_causal=True, scale=0.25).backward(
            torch.tensor(do, dtype=dtype)
        )
        return [a.grad.numpy() for a in t]

    exact, single = torch_grads(torch.float64), torch_grads(torch.float32)
    for name, g, e, s in zip("qkv", got, exact, single):
        scale = np.abs(e).max()
        err, torch_err = np.abs(g - e).max() / scale, np.abs(s - e).max() / scale
        assert err <= max(4 * torch_err, 1e-6), (name, err, torch_err)


def test_the_reference_attention_forward_holds_no_tile_by_keys_by_width_product():
    """One 128-row tile against 2048 keys of width 64 over 4 heads was 256 MB of products
    at once; they are made a few MB at a time."""
    import tracemalloc

    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((4, 256, 64)).astype(np.float32) for _ in range(3))
    k, v = np.repeat(k, 8, axis=1), np.repeat(v, 8, axis=1)  # 2048 keys
    tracemalloc.start()
    try:
        REF["sdpa"]([q, k, v], (0.125, False, 0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 * 2**20, f"{peak / 2**20:.0f} MB"
