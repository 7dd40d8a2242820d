"""Autograd beyond one backward pass, with torch as the oracle.

Gradients of gradients (``create_graph=True``) against ``torch.autograd.grad``,
``no_grad`` and ``detach`` cutting the graph, gradients accumulating across uses and
across calls, and gradients flowing through casts between float dtypes (and stopping at a
cast to an integer).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import limn
from ir.graph.ops import Op
from limn import Tensor


def _arr(shape, seed, lo=None, hi=None):
    rng = np.random.default_rng(seed)
    if lo is not None:
        return rng.uniform(lo, hi, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def _t(a, grad=True):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def _close(got, want, tol=1e-4):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


# ---- second and third derivatives ---------------------------------------------------

W = _arr((4, 3), 10)
W2 = _arr((3, 2), 11)

FUNCTIONS = {
    "tanh": (lambda x: x.tanh(), torch.tanh),
    "cube": (lambda x: x**3, lambda x: x**3),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "softmax": (lambda x: x.softmax(-1), lambda x: torch.softmax(x, -1)),
    "log_softmax": (lambda x: x.log_softmax(0), lambda x: torch.log_softmax(x, 0)),
    "logsumexp": (lambda x: x.logsumexp(1), lambda x: torch.logsumexp(x, 1)),
    "exp_log": (lambda x: (x.exp() + 1).log(), lambda x: (x.exp() + 1).log()),
    "gelu": (lambda x: x.gelu(), F.gelu),
    "matmul_chain": (
        lambda x: ((x.T @ Tensor(W)).tanh() @ Tensor(W2)).square(),
        lambda x: (
            (x.T @ torch.tensor(W, dtype=torch.float64)).tanh()
            @ torch.tensor(W2, dtype=torch.float64)
        ).square(),
    ),
    "normalize": (
        lambda x: (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1).sqrt(),
        lambda x: (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1).sqrt(),
    ),
    "div_recip": (lambda x: x / (x * x + 1), lambda x: x / (x * x + 1)),
    "broadcast_max": (
        lambda x: (x.max(axis=0, keepdim=True) * x).sum(1),
        lambda x: (torch.amax(x, dim=0, keepdim=True) * x).sum(1),
    ),
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_grad_of_grad_matches_torch(name):
    f, tf = FUNCTIONS[name]
    a = _arr((4, 3), 1)
    out_w = _arr(tf(_t(a)).shape, 2)
    v = _arr((4, 3), 3)

    x = Tensor(a, requires_grad=True)
    (f(x) * Tensor(out_w)).sum().backward(create_graph=True)
    g = x.grad
    assert g.requires_grad, "create_graph=True must record the gradient's own graph"
    x.grad = None
    (g * Tensor(v)).sum().backward()
    hvp = x.grad

    tx = _t(a)
    (tg,) = torch.autograd.grad((tf(tx) * _t(out_w, False)).sum(), tx, create_graph=True)
    (thvp,) = torch.autograd.grad((tg * _t(v, False)).sum(), tx)
    _close(g.numpy(), tg.detach().numpy())
    _close(hvp.numpy(), thvp.numpy())


def test_third_derivative_of_tanh_matches_torch():
    a = _arr((5,), 4)
    x = Tensor(a, requires_grad=True)
    x.tanh().sum().backward(create_graph=True)
    g1, x.grad = x.grad, None
    g1.sum().backward(create_graph=True)
    g2, x.grad = x.grad, None
    g2.sum().backward()
    tx = _t(a)
    (t1,) = torch.autograd.grad(torch.tanh(tx).sum(), tx, create_graph=True)
    (t2,) = torch.autograd.grad(t1.sum(), tx, create_graph=True)
    (t3,) = torch.autograd.grad(t2.sum(), tx)
    for got, want in [(g1, t1), (g2, t2), (x.grad, t3)]:
        _close(got.numpy(), want.detach().numpy())


def test_mixed_second_derivative_of_a_bilinear_form():
    """d/dy of (d/dx sum(x @ y)) flows across two leaves."""
    a, b = _arr((2, 3), 5), _arr((3, 4), 6)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ((x @ y).sigmoid()).sum().backward(create_graph=True)
    gx = x.grad
    x.grad = y.grad = None
    (gx * gx).sum().backward()
    tx, ty = _t(a), _t(b)
    (tgx,) = torch.autograd.grad(torch.sigmoid(tx @ ty).sum(), tx, create_graph=True)
    tgx_x, tgx_y = torch.autograd.grad((tgx * tgx).sum(), (tx, ty))
    _close(x.grad.numpy(), tgx_x.numpy())
    _close(y.grad.numpy(), tgx_y.numpy())


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_with_create_graph_accumulates_like_torch():
    """A second backward adds into the .grad the first one left, as torch's does."""
    a = _arr((3,), 7)
    x = Tensor(a, requires_grad=True)
    (x**3).sum().backward(create_graph=True)
    x.grad.sum().backward()
    tx = _t(a)
    (tx**3).sum().backward(create_graph=True)
    tx.grad.sum().backward()
    _close(x.grad.numpy(), tx.grad.detach().numpy())


def test_gradients_without_create_graph_are_lazy_constants():
    x = Tensor(_arr((3,), 8), requires_grad=True)
    (x.exp() * x).sum().backward()
    assert not x.grad.requires_grad and x.grad._ctx is None
    assert x.grad.node.op != Op.BUFFER, "backward must not compute anything"
    assert "EXP" in x.grad.graph()


# ---- accumulation -------------------------------------------------------------------


def test_a_leaf_used_twice_sums_both_contributions():
    a = _arr((2, 3), 9)
    x = Tensor(a, requires_grad=True)
    y = x * x.sum(0, keepdim=True) + x.T.reshape(2, 3).exp()
    y.sum().backward()
    tx = _t(a)
    (tx * tx.sum(0, keepdim=True) + tx.T.reshape(2, 3).exp()).sum().backward()
    _close(x.grad.numpy(), tx.grad.numpy())


def test_gradients_accumulate_across_backward_calls():
    a = _arr((4,), 12)
    x = Tensor(a, requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 + 2 * a, rtol=1e-6)


def test_a_second_backward_through_the_same_graph_raises_as_in_torch():
    a = _arr((3,), 15)
    x, tx = Tensor(a, requires_grad=True), _t(a)
    y, ty = (x * x).sum(), (tx * tx).sum()
    y.backward(), ty.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        ty.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time.*retain"):
        y.backward()
    _close(x.grad.numpy(), tx.grad.numpy())  # the first gradient, not added twice


def test_retain_graph_lets_a_second_backward_accumulate_as_in_torch():
    a = _arr((3,), 16)
    x, tx = Tensor(a, requires_grad=True), _t(a)
    y, ty = (x * x.exp()).sum(), (tx * tx.exp()).sum()
    y.backward(retain_graph=True), ty.backward(retain_graph=True)
    y.backward(), ty.backward()
    _close(x.grad.numpy(), tx.grad.numpy())
    with pytest.raises(RuntimeError, match="a second time"):
        y.backward()


def test_backward_takes_a_gradient_for_a_non_scalar_output():
    a, g = _arr((2, 3), 13), _arr((2, 3), 14)
    x = Tensor(a, requires_grad=True)
    x.sigmoid().backward(Tensor(g))
    tx = _t(a)
    torch.sigmoid(tx).backward(_t(g, False))
    _close(x.grad.numpy(), tx.grad.numpy())


def test_max_splits_its_gradient_evenly_among_ties_like_amax():
    a = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, -1.0]], np.float32)
    x = Tensor(a, requires_grad=True)
    x.max(axis=1).sum().backward()
    tx = _t(a)
    torch.amax(tx, dim=1).sum().backward()
    _close(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("fn", ["softmax", "log_softmax", "logsumexp"])
def test_the_max_shift_of_a_softmax_takes_no_gradient(fn):
    """The shift cancels, so its gradient (a tie mask per row: kernels of work that add
    only rounding) is not built; the gradient is torch's."""
    a = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, -1.0], [0.5, -2.0, 7.0, 1.0]], np.float32)
    g = _arr((3, 4), 3)
    x = Tensor(a, requires_grad=True)
    call = {"logsumexp": lambda t: t.logsumexp(1, keepdim=True)}.get(
        fn, lambda t: getattr(t, fn)(1)
    )
    y = call(x)
    (y * Tensor(g[:, : y.shape[1]])).sum().backward()
    seen, stack, tie_masks = set(), [x.grad.node], 0
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.srcs)
            # the MAX row's rule: where(x == max, 1, 0), the ties' share of the gradient
            consts = [s.arg for s in n.srcs[1:] if s.op == Op.CONST]
            tie_masks += n.op == Op.WHERE and n.dtype.is_float and consts == [1, 0]
    assert tie_masks == 0
    tx = _t(a)
    ty = {"logsumexp": lambda t: t.logsumexp(1, keepdim=True)}.get(fn, lambda t: getattr(t, fn)(1))(
        tx
    )
    (ty * torch.tensor(g[:, : ty.shape[1]], dtype=torch.float64)).sum().backward()
    _close(x.grad.numpy(), tx.grad.numpy())


def test_intermediates_keep_no_grad_and_unreached_leaves_stay_none():
    x = Tensor(_arr((3,), 15), requires_grad=True)
    unused = Tensor(_arr((3,), 16), requires_grad=True)
    y = x * 2
    _ = unused * 3
    y.sum().backward()
    assert y.grad is None and unused.grad is None and x.grad is not None


# ---- cutting the graph --------------------------------------------------------------


def test_no_grad_records_nothing_and_restores_recording():
    x = Tensor(_arr((3,), 17), requires_grad=True)
    with limn.no_grad():
        y = x * 2
        with limn.enable_grad():
            z = x * 3
        w = x.exp()
    assert not y.requires_grad and y._ctx is None and not w.requires_grad
    assert z.requires_grad
    assert (x * 2).requires_grad
    with pytest.raises(RuntimeError, match="backward.*does not require grad"):
        y.sum().backward()


def test_no_grad_is_restored_after_an_exception():
    x = Tensor(_arr((3,), 18), requires_grad=True)
    with pytest.raises(ValueError), limn.no_grad():
        raise ValueError("boom")
    assert (x * 1).requires_grad


def test_detach_shares_values_and_stops_the_gradient():
    a = _arr((3,), 19)
    x = Tensor(a, requires_grad=True)
    d = x.detach()
    assert not d.requires_grad
    np.testing.assert_array_equal(d.numpy(), a)
    (d * x).sum().backward()
    tx = _t(a)
    (tx.detach() * tx).sum().backward()
    _close(x.grad.numpy(), tx.grad.numpy())


def test_a_detached_leaf_can_start_a_new_graph():
    x = Tensor(_arr((3,), 20), requires_grad=True)
    y = (x * 2).detach().requires_grad_()
    (y * y).sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(y.grad.numpy(), 2 * y.numpy(), rtol=1e-6)


# ---- casts --------------------------------------------------------------------------


@pytest.mark.parametrize("mid", ["float16", "bfloat16", "float64"])
def test_gradients_flow_through_casts_between_float_dtypes(mid):
    a, w = _arr((3, 4), 21), _arr((3, 4), 22)
    x = Tensor(a, requires_grad=True)
    y = (x.cast(mid) * Tensor(w).cast(mid)).tanh().cast("float32")
    (y * 2).sum().backward()
    assert x.grad.dtype == limn.float32
    tx = torch.tensor(a, requires_grad=True)
    ty = torch.tanh(tx.to(getattr(torch, mid)) * torch.tensor(w).to(getattr(torch, mid)))
    (ty.float() * 2).sum().backward()
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float64": 1e-6}[mid]
    _close(x.grad.numpy(), tx.grad.numpy(), tol)


def test_a_half_width_leaf_gets_a_half_width_gradient():
    a = _arr((4,), 23).astype(np.float16)
    x = Tensor(a, requires_grad=True)
    (x.float() * x.float()).sum().backward()
    assert x.grad.dtype == limn.float16
    np.testing.assert_allclose(x.grad.numpy(), 2 * a.astype(np.float32), rtol=1e-3)


def test_float64_gradients_keep_their_width():
    a = np.random.default_rng(24).standard_normal(5)
    x = Tensor(a, requires_grad=True)
    ((x * 1.5).tanh() * x.exp()).sum().backward()
    assert x.dtype == x.grad.dtype == limn.float64
    tx = torch.tensor(a, requires_grad=True)
    (torch.tanh(tx * 1.5) * tx.exp()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_a_cast_to_an_integer_stops_the_gradient():
    a = np.array([1.7, -2.2, 3.5], np.float32)
    x = Tensor(a, requires_grad=True)
    (x.cast("int32").cast("float32") * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), a.astype(np.int32).astype(np.float32))


def test_only_float_tensors_take_gradients():
    with pytest.raises(TypeError, match="requires_grad.*float.*int64"):
        Tensor([1, 2], requires_grad=True)


# ---- indexed ops --------------------------------------------------------------------


def test_scatter_add_and_gather_gradients_match_torch():
    a, s = _arr((3, 5), 25), _arr((3, 4), 26)
    idx = np.array([[0, 4, 4, 1], [2, 2, 2, 2], [3, 0, 1, 0]])
    w = _arr((3, 5), 27)
    x, src = Tensor(a, requires_grad=True), Tensor(s, requires_grad=True)
    out = x.scatter_add(1, Tensor(idx), src) * Tensor(w)
    (out.gather(1, Tensor(idx)).exp()).sum().backward()
    tx, ts = _t(a), _t(s)
    tout = tx.scatter_add(1, torch.tensor(idx), ts) * _t(w, False)
    torch.gather(tout, 1, torch.tensor(idx)).exp().sum().backward()
    _close(x.grad.numpy(), tx.grad.numpy())
    _close(src.grad.numpy(), ts.grad.numpy())


def test_cross_entropy_from_log_softmax_and_gather_matches_torch():
    logits, labels = _arr((4, 6), 28), np.array([5, 0, 2, 2])
    x = Tensor(logits, requires_grad=True)
    picked = x.log_softmax(-1).gather(1, Tensor(labels.reshape(4, 1)))
    (-picked.mean()).backward()
    tx = _t(logits)
    F.cross_entropy(tx, torch.tensor(labels)).backward()
    _close(x.grad.numpy(), tx.grad.numpy())


# ---- windows: the gradient of overlapping reads is an overlap-add -------------------


def _torch_windows(x, axis, k, stride, dilation):
    """torch's unfold puts the window dim last; move it next to ``axis`` as limn does."""
    w = x.unfold(axis, dilation * (k - 1) + 1, stride)
    idx = [slice(None)] * w.ndim
    idx[-1] = slice(None, None, dilation)
    return w[tuple(idx)].movedim(-1, axis + 1)


@pytest.mark.parametrize(
    "shape, axis, k, stride, dilation",
    [
        ((2, 9, 3), 1, 3, 1, 1),  # overlapping
        ((2, 9, 3), 1, 3, 2, 2),  # dilated and strided
        ((10,), 0, 2, 4, 1),  # gaps between windows: some elements get no gradient
        ((3, 8), 1, 4, 3, 2),  # a window wider than its stride, with a ragged end
        ((5, 4), 0, 5, 1, 1),  # one window covers the whole dim
    ],
)
def test_window_gradient_matches_torch_unfold(shape, axis, k, stride, dilation):
    a = _arr(shape, 20)
    x = Tensor(a, requires_grad=True)
    y = x.p_window(axis, k, stride, dilation)
    tx = _t(a)
    ty = _torch_windows(tx, axis, k, stride, dilation)
    assert y.shape == tuple(ty.shape)
    _close(y.numpy(), ty.detach().numpy())
    g = _arr(y.shape, 21)
    (y * Tensor(g)).sum().tanh().backward()
    (ty * torch.tensor(g, dtype=torch.float64)).sum().tanh().backward()
    _close(x.grad.numpy(), tx.grad.numpy())


def test_windows_over_a_padded_image_differentiate_like_torch_im2col():
    """Two windowed dims over a padded copy, against F.unfold (im2col), grad of grad too."""
    a = _arr((2, 3, 6, 7), 22)
    x = Tensor(a, requires_grad=True)
    pads = ((0, 0), (0, 0), (1, 1), (2, 2))
    cols = x.pad(pads).p_window(2, 3, 2, 1).p_window(4, 2, 1, 3)  # (N, C, o0, k0, o1, k1)
    n, c, o0, k0, o1, k1 = cols.shape
    cols = cols.permute(0, 1, 3, 5, 2, 4).reshape(n, c * k0 * k1, o0 * o1)
    tx = _t(a)
    tcols = F.unfold(tx, (3, 2), dilation=(1, 3), padding=(1, 2), stride=(2, 1))
    _close(cols.numpy(), tcols.detach().numpy())
    g = _arr(cols.shape, 23)
    (cols.square() * Tensor(g)).sum().backward(create_graph=True)
    (tg,) = torch.autograd.grad((tcols.square() * _t(g, False)).sum(), tx, create_graph=True)
    _close(x.grad.numpy(), tg.detach().numpy())
    gx = x.grad
    x.grad = None
    (gx * gx).sum().backward()
    (tg * tg).sum().backward()
    _close(x.grad.numpy(), tx.grad.numpy())


# ---- torch.autograd.grad ------------------------------------------------------------


def test_autograd_grad_returns_torchs_gradients_and_leaves_every_grad_alone():
    rng = np.random.default_rng(7)
    xs, ws = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3)
    upstream = rng.standard_normal(4).astype(np.float32)

    def run(lib, make):
        x, w = make(xs, requires_grad=True), make(ws.astype(np.float32), requires_grad=True)
        h = (x * w).tanh()
        gx, gw = lib.autograd.grad(h.sum(-1), [x, w], grad_outputs=make(upstream))
        assert x.grad is None and w.grad is None
        return gx.detach().numpy(), gw.detach().numpy()

    for ours, theirs in zip(run(limn, Tensor), run(torch, torch.tensor)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_gradient_penalty_through_autograd_grad_with_create_graph_matches_torch():
    rng = np.random.default_rng(8)
    xs, ws = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 2))

    def run(lib, make):
        x, w = make(xs, requires_grad=True), make(ws.astype(np.float32), requires_grad=True)
        out = (x @ w).tanh().sum()
        (g,) = lib.autograd.grad(out, x, create_graph=True)
        assert w.grad is None
        penalty = ((g.norm(dim=1) - 1) ** 2).mean()
        (out + penalty).backward()
        return w.grad.numpy(), x.grad.numpy()

    for ours, theirs in zip(run(limn, Tensor), run(torch, torch.tensor)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_autograd_grad_refuses_an_unused_input_unless_allowed_and_a_bare_vector():
    x, unused = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"inputs \[1\] were not used.*allow_unused=True"):
        limn.autograd.grad((x * x).sum(), [x, unused])
    gx, none = limn.autograd.grad((x * x).sum(), [x, unused], allow_unused=True)
    assert gx.tolist() == [2.0, 4.0] and none is None
    with pytest.raises(RuntimeError, match=r"output 0 has shape \(2,\); pass grad_outputs"):
        limn.autograd.grad(x * x, x)


def test_grad_fn_names_the_op_autograd_recorded_as_torch_does():
    x = Tensor([1.0], requires_grad=True)
    assert x.grad_fn is None and repr((x * 2).grad_fn) == "<MulBackward>"
    assert (x * 2).grad_fn.parents[0] is x
