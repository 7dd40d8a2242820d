"""Issue 37's examples: each gives torch's answer or torch's error, on both host devices.

Each case runs the same program in torch and in limn (``run(lib)``) and compares what it
reads; a case where torch raises checks that limn raises too, with torch's words.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import limn
from limn import nn
from limn.runtime import get_device


def _devices():
    names = ["numpy"]
    try:
        get_device("c")
        names.append("c")
    except RuntimeError:
        pass
    return names


@pytest.fixture(params=_devices())
def device(request):
    prev = limn.current_device()
    limn.set_device(request.param)
    yield request.param
    limn.set_device(prev)


def _np(x):
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x.numpy())


def same(run):
    """``run(lib, tensor)`` in torch and limn: every value it returns is equal."""
    want = run(torch, torch.tensor)
    got = run(limn, limn.tensor)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(_np(g), _np(w), rtol=1e-6, atol=1e-6)


def test_chained_writes_through_a_view_reach_the_base(device):
    def run(lib, tensor):
        a = tensor(np.arange(6, dtype=np.float32))
        v = a[2:5]
        v.mul_(3)
        v.add_(2)
        return a, v

    same(run)


def test_detach_after_a_write_reads_it_once(device):
    def run(lib, tensor):
        a = tensor(np.zeros(3, np.float32))
        a.add_(1)
        d = a.detach()
        d.add_(5)  # detach shares the storage: a sees it
        return d, a

    same(run)


def test_a_write_reading_another_tensor_reads_its_value_then(device):
    def run(lib, tensor):
        a, b = tensor(np.ones(3, np.float32)), tensor(np.full(3, 2.0, np.float32))
        a.add_(b)
        b.add_(1)
        first = a.clone()
        t = a.clone()
        a.copy_(b)
        b.copy_(t)  # the swap
        return first, a, b

    same(run)


def test_augmented_assignment_is_in_place_and_an_sgd_loop_matches_torch(device):
    rng = np.random.default_rng(0)
    w0, xs = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 6, 4))

    def run(lib, tensor):
        w = tensor(w0.copy(), requires_grad=True)
        alias = w.detach()
        for x in xs:  # the loss never read: the writes still happen in order
            loss = ((tensor(x.astype(np.float32)) @ w).tanh() ** 2).sum()
            loss.backward()
            with lib.no_grad():
                w -= 0.05 * w.grad
                w.grad = None
        return w, alias

    same(run)


def test_from_numpy_shares_both_ways_at_once(device):
    arr = np.zeros(4, np.float32)
    t = limn.from_numpy(arr)
    before = t * 2
    t.add_(1)
    np.testing.assert_array_equal(arr, [1, 1, 1, 1])  # no read of t needed
    t[1:3] = 5.0
    np.testing.assert_array_equal(arr, [1, 5, 5, 1])
    arr[0] = 7
    np.testing.assert_array_equal(t.numpy(), [7, 5, 5, 1])
    assert t.numpy() is arr
    np.testing.assert_array_equal(before.numpy(), [0, 0, 0, 0])  # built before the writes


def test_a_from_numpy_tensor_moved_to_the_other_host_device_is_a_copy(device):
    """Found by the fuzz: to() between host devices moved the array's buffer itself, so a
    write into the array reached the moved tensor (torch's to() another device copies)."""
    arr = np.zeros(4, np.float32)
    t = limn.from_numpy(arr)
    moved = t.detach().to("numpy" if device == "c" else "c").to(device).realize()
    arr[1] = 7
    np.testing.assert_array_equal(moved.numpy(), [0, 0, 0, 0])
    np.testing.assert_array_equal(t.numpy(), [0, 7, 0, 0])
    assert t.to(device) is t


def test_numpy_of_a_lazy_tensor_is_a_read_only_value_that_never_changes(device):
    t = limn.tensor(np.arange(3, dtype=np.float32))
    a = t.numpy()
    assert not a.flags.writeable
    t.add_(1)
    t.realize()
    np.testing.assert_array_equal(a, [0, 1, 2])  # documented in docs/torch.md
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3])


@pytest.mark.parametrize("f", ["square", "sin", "log"])
def test_a_value_saved_for_backward_then_written_raises_torchs_error(device, f):
    def run(lib, tensor):
        w = tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
        loss = (w * w).sum() if f == "square" else getattr(w, f)().sum()
        with lib.no_grad():
            w.mul_(10)
        loss.backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(torch, torch.tensor)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(limn, limn.tensor)


def test_a_write_torch_saves_nothing_for_does_not_raise(device):
    def run(lib, tensor):
        w = tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
        x = tensor(np.array([4.0, 5.0, 6.0], np.float32))
        loss = (w * x + w).sum()  # a product saves x for w's gradient, not w
        with lib.no_grad():
            w.mul_(10)
        loss.backward()
        return (w.grad,)

    same(run)


def test_data_reads_and_assigns_as_torchs(device):
    m = nn.Linear(3, 2)
    t = limn.tensor(np.ones((2, 3), np.float32))
    m.weight.data = t
    np.testing.assert_array_equal(m.weight.numpy(), np.ones((2, 3)))
    t.add_(1)  # x.data = t shares t's storage, as in torch
    np.testing.assert_array_equal(m.weight.numpy(), np.full((2, 3), 2.0))
    assert m.weight.requires_grad

    def run(lib, tensor):
        w = tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
        loss = (w * w).sum()
        w.data.mul_(3)  # .data has its own version counter: no error at backward
        loss.backward()
        return w, w.grad

    same(run)


@pytest.mark.parametrize(
    "make",
    [
        lambda lib, tensor: tensor(np.arange(3)).div_(2),
        lambda lib, tensor: tensor(np.arange(3)).mul_(1.5),
        lambda lib, tensor: tensor(np.arange(3)).add_(tensor(np.ones(3, np.float32))),
        lambda lib, tensor: tensor(np.array([True, False])).add_(1),
    ],
    ids=["int64.div_", "int.mul_(float)", "int.add_(float tensor)", "bool.add_(int)"],
)
def test_an_in_place_result_that_cannot_be_cast_raises_torchs_error(device, make):
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        make(torch, torch.tensor)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        make(limn, limn.tensor)


def test_writes_on_two_devices_each_read_the_other_as_it_was(device):
    other = "numpy" if device == "c" else ("c" if "c" in _devices() else "numpy")
    a = limn.tensor(np.ones(3, np.float32))
    b = a.to(other)
    a.add_(1)
    b.mul_(10)
    c = a + b.to(device)  # a's new value, b's new value
    a.add_(100)
    np.testing.assert_array_equal(c.numpy(), [12, 12, 12])
    np.testing.assert_array_equal(b.numpy(), [10, 10, 10])
    np.testing.assert_array_equal(a.numpy(), [102, 102, 102])


def test_a_leaf_that_requires_grad_refuses_an_in_place_write_as_torch(device):
    def run(lib, tensor):
        w = tensor(np.ones(3, np.float32), requires_grad=True)
        w.add_(1)

    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        run(torch, torch.tensor)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        run(limn, limn.tensor)


def test_an_optimizer_step_writes_parameters_and_state_into_their_own_buffers(device):
    """Nothing reads the old values after a step, so the planner reuses their bytes."""
    import weakref

    from limn import optim

    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    x = limn.tensor(np.ones((3, 6), np.float32))
    seen = None
    for _ in range(3):
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step(loss)
        opt.zero_grad()
        tensors = [*model.parameters(), *(t for s in opt.state.values() for t in s.values())]
        bufs = [weakref.ref(t.node.arg) for t in tensors]
        if seen is not None:
            assert all(a() is b() for a, b in zip(bufs, seen))
        seen = bufs


# ---- issue 46: every in-place spelling ------------------------------------------------


@pytest.mark.parametrize("op", ["**=", "//=", "%=", "&=", "|=", "^=", "<<=", ">>="])
def test_every_augmented_assignment_writes_through_views_and_aliases(device, op):
    def run(lib, tensor):
        x = tensor(np.array([[5, 7, 9], [2, 3, 4]], np.int64))
        alias, row = x.detach(), x[1]
        scope = {"row": row, "y": x.clone(), "tensor": tensor, "np": np}
        exec(f"row {op} tensor(np.array([2, 1, 3], np.int64))", scope)  # on a view: the base
        y = scope["y"]
        exec(f"y {op} 2", scope)
        return x, alias, row, y

    same(run)


def test_matmul_augmented_assignment_rebinds_as_torchs(device):
    def run(lib, tensor):
        a = tensor(np.ones((2, 2), np.float32))
        b = a
        a @= tensor(np.eye(2, dtype=np.float32) * 2)
        return a, b

    same(run)


_METHODS = {
    "index_add_": lambda lib, t, x: x.index_add_(0, t([0, 2]), t(np.ones((2, 3), np.float32))),
    "index_fill_": lambda lib, t, x: x.index_fill_(1, t([0, 2]), -1.0),
    "index_copy_": lambda lib, t, x: x.index_copy_(0, t([2]), t(np.full((1, 3), 9, np.float32))),
    "index_put_": lambda lib, t, x: x.index_put_((t([0, 0, 2]), t([1, 1, 0])), t(2.0), True),
    "scatter_": lambda lib, t, x: x.scatter_(1, t([[2], [0], [1]]), t([[7.0], [8.0], [9.0]])),
    "scatter_add_": lambda lib, t, x: x.scatter_add_(0, t([[1, 2, 0]]), t([[1.0, 2.0, 3.0]])),
    "masked_scatter_": lambda lib, t, x: x.masked_scatter_(x > 3, t(np.arange(9.0)).float()),
    "addcmul_": lambda lib, t, x: x.addcmul_(x, x, value=0.5),
    "addcdiv_": lambda lib, t, x: x.addcdiv_(x, x + 1, value=2),
    "clip_": lambda lib, t, x: x.clip_(1, 5),
    "floor_": lambda lib, t, x: x.mul_(0.7).floor_(),
    "square_": lambda lib, t, x: x.square_(),
    "sign_": lambda lib, t, x: x.sub_(4).sign_(),
    "fill_diagonal_": lambda lib, t, x: x.fill_diagonal_(-5.0),
    "clamp_min_": lambda lib, t, x: x.clamp_min_(3),
    "exp2_": lambda lib, t, x: x.exp2_(),
    "lt_": lambda lib, t, x: x.lt_(4),
    "t_": lambda lib, t, x: x.t_(),
    "unsqueeze_": lambda lib, t, x: x.unsqueeze_(0),
}  # fmt: skip


@pytest.mark.parametrize("name", list(_METHODS))
def test_torchs_in_place_methods_write_in_place_and_through_aliases(device, name):
    def run(lib, tensor):
        x = tensor(np.arange(9, dtype=np.float32).reshape(3, 3))
        alias = x.detach()
        out = _METHODS[name](lib, tensor, x)
        assert out is x
        return x, alias

    same(run)


def test_in_place_methods_through_a_view_reach_the_base(device):
    def run(lib, tensor):
        x = tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
        x[1].clip_(5, 6)
        x[:, 2].square_()
        x[2, 1:].index_fill_(0, tensor([0, 2]), 0.5)
        return (x,)

    same(run)


def test_detach_in_place_leaves_the_graph(device):
    w = limn.tensor(np.ones(2, np.float32), requires_grad=True)
    y = w * 2
    assert y.detach_() is y and not y.requires_grad and y.grad_fn is None


def _functional(name):
    return lambda nn, F: lambda x: getattr(F, name)(x, inplace=True)


@pytest.mark.parametrize(
    "make",
    [
        lambda nn, F: nn.ReLU(inplace=True),
        lambda nn, F: nn.LeakyReLU(0.1, True),
        lambda nn, F: nn.SiLU(inplace=True),
        lambda nn, F: nn.Dropout(0.0, inplace=True),
        *map(
            _functional, "hardtanh elu relu6 selu celu mish hardswish hardsigmoid relu silu".split()
        ),
        lambda nn, F: lambda x: F.threshold(x, 0.5, 9.0, inplace=True),
        lambda nn, F: lambda x: F.dropout(x, 0.0, True, inplace=True),
    ],
)
def test_every_inplace_flag_writes_into_its_input(device, make):
    def run(lib, tensor):
        x = tensor(np.array([-3.0, -0.5, 0.25, 2.0, 7.0], np.float32))
        alias = x[1:]
        out = make(lib.nn, lib.nn.functional)(x)
        assert out is x
        return x, alias

    same(run)


def test_inplace_flags_off_leave_the_input(device):
    x = limn.tensor(np.array([-1.0, 2.0], np.float32))
    nn.ReLU()(x)
    limn.nn.functional.elu(x)
    np.testing.assert_array_equal(x.numpy(), [-1, 2])


# ---- issue 46: in-place ops on tracked non-leaf tensors --------------------------------


def test_a_residual_add_in_place_is_recorded_as_torch_records_it(device):
    rng = np.random.default_rng(1)
    w0, x0 = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((3, 4))

    def run(lib, tensor):
        w = tensor(w0, requires_grad=True)
        x = tensor(x0.astype(np.float32), requires_grad=True)
        out = x @ w
        out = lib.nn.functional.relu(out, inplace=True)
        out = out @ w
        out += x  # the ResNet block's identity
        out.mul_(x)
        lib.nn.ReLU(inplace=True)(out)
        out.sum().backward()
        return out, w.grad, x.grad

    same(run)


def test_a_write_through_a_view_of_a_tracked_value_is_recorded(device):
    def run(lib, tensor):
        w = tensor(np.array([1.0, 2.0, 3.0, 4.0], np.float32), requires_grad=True)
        x = w * 2
        v = x[1:3]
        v.mul_(w[:2])
        x[3] = w[0] * 5
        (x * x).sum().backward()
        return x, w.grad

    same(run)


def test_a_buffer_that_takes_a_tracked_value_in_place_requires_grad(device):
    def run(lib, tensor):
        w = tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
        buf = tensor(np.zeros(2, np.float32))
        buf.add_(w * 3)
        assert buf.requires_grad
        (buf * buf).sum().backward()
        return buf, w.grad

    same(run)


@pytest.mark.parametrize(
    "prog",
    [
        "x = w * 1; x.exp_(); x.add_(1)",  # exp_ saved its result, then written
        "x = w.exp(); x.add_(1)",
        "x = w * 1; z = x * w; x.add_(1); x = z",  # mul saved x, then written
    ],
)
def test_an_in_place_op_that_overwrites_a_saved_value_raises_torchs_error(device, prog):
    def run(lib, tensor):
        w = tensor(np.ones(3, np.float32), requires_grad=True)
        scope = {"w": w}
        exec(prog, scope)
        scope["x"].sum().backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(torch, torch.tensor)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(limn, limn.tensor)


def test_a_view_of_a_leaf_refuses_an_in_place_write_as_torch(device):
    def run(lib, tensor):
        w = tensor(np.ones(3, np.float32), requires_grad=True)
        w[1:].mul_(2)

    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        run(torch, torch.tensor)
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        run(limn, limn.tensor)


# ---- issue 46: writes by mask and by index tensor --------------------------------------


_INDEX_WRITES = {
    "mask_values": "x[x > 0] = tensor([10.0, 20.0])",
    "mask_op": "y = x.clone(); y[y > 0] += 1; x = y",
    "mask_scalar": "x[x < 0] = 0.5",
    "mask_from_mask": "z = x * 3; x[x > 0] = z[x > 0]",
    "mask_rows": "x[tensor([True, False])] = tensor([7.0, 8.0])",
    "mask_rows_count": "x[tensor([True, True])] = tensor([[7.0], [8.0]])",
    "int_index": "x[tensor([1, 0])] = tensor([[5.0, 6.0], [7.0, 8.0]])",
    "int_pairs": "x[tensor([0, 1]), tensor([1, 1])] = tensor([3.0, 4.0])",
    "int_list": "x[[1], 0] = 9.0",
    "int_then_slice": "x[tensor([1]), 1:] *= 10",
    "negative": "x[tensor([-1]), tensor([-2])] = 11.0",
    "accumulate": "x.index_put_((tensor([0, 0]), tensor([1, 1])), tensor(1.5), accumulate=True)",
    "view_mask": "v = x[1]; v[v > 0] = tensor([50.0])",
}


@pytest.mark.parametrize("prog", list(_INDEX_WRITES.values()), ids=list(_INDEX_WRITES))
def test_writes_by_mask_and_index_tensor_have_torchs_semantics(device, prog):
    def run(lib, tensor):
        x = tensor(np.array([[-1.0, 2.0], [-3.0, 4.0]], np.float32))
        alias = x.detach()
        scope = {"x": x, "tensor": tensor}
        exec(prog, scope)
        return scope["x"], alias if "y =" not in prog else scope["x"]

    same(run)


def test_an_index_write_of_the_wrong_count_raises_naming_the_shapes(device):
    x = limn.tensor(np.array([[-1.0, 2.0], [-3.0, 4.0]], np.float32))
    with pytest.raises(ValueError, match=r"index_put: values of shape \(3,\)"):
        x[x > 0] = limn.tensor([1.0, 2.0, 3.0])


def test_an_index_write_into_a_tracked_value_is_differentiable(device):
    def run(lib, tensor):
        w = tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
        x = w * 2
        x[x < 0] = w[:1] * 10
        x[tensor([2])] += w[2:] ** 2
        x.sum().backward()
        return x, w.grad

    same(run)


# ---- issue 46: gradients are tensors written in place ---------------------------------


def test_a_second_backward_accumulates_into_the_gradient_tensor_held(device):
    def run(lib, tensor):
        w = tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
        v = tensor(np.array([4.0, 5.0, 6.0], np.float32), requires_grad=True)
        v.grad = tensor(np.full(3, 100.0, np.float32))  # preallocated: receives the gradient
        buf = v.grad
        (w * w + w).sum().backward()
        g = w.grad
        (w * 3 + v * w).sum().backward()
        return g, w.grad, buf, v.grad

    same(run)


def test_zero_grad_keeping_tensors_zeroes_the_ones_held(device):
    def run(lib, tensor):
        model = lib.nn.Linear(3, 2)
        with lib.no_grad():
            model.weight.copy_(tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
            model.bias.fill_(1.0)
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        x = tensor(np.ones((4, 3), np.float32))
        model(x).sum().backward()
        gw, gb = model.weight.grad, model.bias.grad
        opt.zero_grad(set_to_none=False)
        zeroed = gw.clone()
        model(x).pow(2).sum().backward()
        model.zero_grad(set_to_none=False)
        return zeroed, gw, gb, model.weight.grad

    same(run)


def test_clip_grad_scales_the_gradient_tensors_held(device):
    def run(lib, tensor):
        a = tensor(np.array([3.0, 4.0], np.float32), requires_grad=True)
        b = tensor(np.array([-5.0, 0.5], np.float32), requires_grad=True)
        (a * a * 2 + b * 3).sum().backward()
        ga, gb = a.grad, b.grad
        norm = lib.nn.utils.clip_grad_norm_([a, b], 1.0)
        after_norm = ga.clone()
        lib.nn.utils.clip_grad_value_([a, b], 0.1)
        return norm, after_norm, ga, gb

    same(run)


def test_gradients_given_by_one_rule_to_two_leaves_are_two_tensors(device):
    a = limn.tensor(np.ones(2, np.float32), requires_grad=True)
    b = limn.tensor(np.ones(2, np.float32), requires_grad=True)
    (a + b).sum().backward()
    assert a.grad is not b.grad
    a.grad.mul_(5)
    np.testing.assert_array_equal(b.grad.numpy(), [1, 1])


# ---- issue 46: finite gradients -------------------------------------------------------


def _float32_sweep() -> np.ndarray:
    """Float32 values over the whole range: random bit patterns (every exponent), the
    extremes, the infinities and the values around sigmoid's overflow."""
    bits = np.random.default_rng(46).integers(0, 2**32, 20000, dtype=np.uint64)
    x = bits.astype(np.uint32).view(np.float32)
    edges = [0.0, -0.0, 1e-45, -1e-45, 88.7, -88.7, -90, -100, 100, -1e4, 1e4, np.inf, -np.inf]
    edges += [np.finfo(np.float32).max, np.finfo(np.float32).min]
    return np.concatenate([x[~np.isnan(x)], np.array(edges, np.float32)]).astype(np.float32)


@pytest.mark.parametrize("f", ["sigmoid", "silu"])
def test_sigmoid_and_silu_gradients_are_torchs_for_every_float32_input(device, f):
    x = _float32_sweep()

    def run(lib, tensor):
        w = tensor(x, requires_grad=True)
        y = w.sigmoid() if f == "sigmoid" else lib.nn.functional.silu(w)
        y.sum().backward()
        return (w.grad,)

    got = run(limn, limn.tensor)[0].numpy()
    want = run(torch, torch.tensor)[0].numpy()
    assert np.isfinite(got[np.isfinite(x)]).all()  # (silu's at +-inf is torch's NaN)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-30)


def test_a_sigmoid_read_by_backward_then_written_raises_and_its_input_may_be(device):
    def run(lib, tensor, target):
        w = tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
        x = w * 1
        s = x.sigmoid()
        with lib.no_grad():
            (x if target == "input" else s).mul_(2)
        s.sum().backward()
        return (w.grad,)

    same(lambda lib, tensor: run(lib, tensor, "input"))  # torch saves sigmoid's result
    for lib in (torch, limn):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            run(lib, lib.tensor, "result")


# ---- issue 46: views are views, copies are copies --------------------------------------


@pytest.mark.parametrize(
    "take",
    [
        lambda x: x.diagonal(),
        lambda x: x.diagonal(1),
        lambda x: x.diagonal(-1),
        lambda x: x.T.diagonal(1),
        lambda x: x[1:].diagonal(),
        lambda x: x.reshape(2, 2, 3).diagonal(0, 0, 2),
        lambda x: x.unfold(0, 2, 2),
        lambda x: x.unfold(1, 2, 1),  # overlapping windows (written: torch adds twice)
        lambda x: x.contiguous(),
        lambda x: x[1:].contiguous(),
    ],
)
def test_views_torch_documents_are_written_through_both_ways(device, take):
    def run(lib, tensor):
        x = tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
        v = take(x)
        first = v.clone()
        x.mul_(10)  # the base written: the view reads it
        after_base = v.clone()
        if v.shape != (4, 2, 2):
            v.add_(100)  # the view written: the base reads it
        return first, after_base, v, x

    same(run)


def test_contiguous_of_a_contiguous_tensor_is_itself(device):
    x = limn.tensor(np.ones((2, 3), np.float32))
    assert x.contiguous() is x
    assert x.T.contiguous() is not x.T


@pytest.mark.parametrize(
    "take",
    [
        lambda lib, x: x.roll(1, 0),
        lambda lib, x: lib.cat([x]),
        lambda lib, x: x.repeat(1, 1),
        lambda lib, x: x.repeat(1, 1, 1),
        lambda lib, x: x.tile((1, 1)),
        lambda lib, x: lib.nn.functional.pad(x, (0, 0)),
        lambda lib, x: x.rot90(0),
        lambda lib, x: x.diff(n=0),
        lambda lib, x: x.flip(0),
        lambda lib, x: x.diagonal_copy() if hasattr(x, "diagonal_copy") else x.diagonal().clone(),
    ],
)
def test_copies_torch_documents_are_copies_whatever_their_arguments(device, take):
    def run(lib, tensor):
        x = tensor(np.arange(4, dtype=np.float32).reshape(1, 4))
        c = take(lib, x)
        x.add_(100)
        return c, x

    same(run)


def test_a_view_written_then_assigned_to_its_own_data_reads_the_write(device):
    def run(lib, tensor):
        x = tensor(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32))
        v = x[0, 1:]
        v *= 10
        v.data = v
        return v, x

    same(run)


def test_a_view_of_a_from_numpy_tensor_reads_the_array_after_being_read(device):
    a = np.zeros((2, 2), np.float32)
    t = limn.from_numpy(a)
    v = t[0]
    assert v.tolist() == [0.0, 0.0]
    a[0, 0] = 5
    assert v.tolist() == [5.0, 0.0]
    assert (v + 1).tolist() == [6.0, 1.0]
    a[0, 1] = 7
    assert v.sum().item() == 12.0


def test_as_strided_is_a_view_of_the_storage_as_torchs(device):
    def run(lib, tensor):
        x = tensor(np.arange(12, dtype=np.float32))
        v = x[2:].as_strided((2, 3), (4, 1))  # from x's storage at x[2:]'s offset
        w = x.as_strided((3, 2), (1, 3), 1)
        v.mul_(-1)
        return v, w, x

    same(run)


# ---- issue 46: torch's promotion on the Tensor frontend --------------------------------

_DTYPES = "bool uint8 int8 int16 int32 int64 float16 bfloat16 float32 float64".split()


@pytest.mark.parametrize("a", _DTYPES)
def test_tensor_promotion_is_torchs_result_type_over_dtypes_and_ranks(a):
    import itertools

    for b, (ra, rb) in itertools.product(_DTYPES, [(1, 0), (0, 1), (0, 0), (2, 2), (2, 0)]):
        ta = torch.zeros((2,) * ra, dtype=getattr(torch, a))
        tb = torch.zeros((2,) * rb, dtype=getattr(torch, b))
        la, lb = limn.zeros((2,) * ra, dtype=a), limn.zeros((2,) * rb, dtype=b)
        want = str(torch.result_type(ta, tb)).removeprefix("torch.")
        got = (la | lb) if a == b == "bool" else (la + lb)
        assert str(got.dtype) == want, (a, ra, b, rb)
    for r, s in itertools.product((0, 1), (True, 3, 2.5)):
        if a == "bool" and s is True:
            continue
        want = str(torch.result_type(torch.zeros((2,) * r, dtype=getattr(torch, a)), s))
        assert str((limn.zeros((2,) * r, dtype=a) * s).dtype) == want.removeprefix("torch."), (
            a,
            r,
            s,
        )


def test_a_0d_statistic_does_not_widen_a_tensor_and_limn_array_keeps_the_standards_rule(device):
    def run(lib, tensor):
        s = tensor(np.float64(2.0))
        x = tensor(np.ones(3, np.float32))
        assert (s * x).dtype == lib.float32
        return (s * x,)

    same(run)
    import limn_array as xp

    s, x = xp.asarray(np.float64(2.0)), xp.asarray(np.ones(3, np.float32))
    assert (s * x).dtype == xp.float64


# ---- issue 46: torch's errors, and only those -----------------------------------------


def test_a_loss_prints_after_its_backward(device):
    w = limn.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    assert "grad_fn=<SumBackward>" in repr(loss) and "5." in repr(loss)
    assert str(loss.grad_fn) == "<SumBackward>"


@pytest.mark.parametrize("f", ["exp", "tanh", "sigmoid", "sqrt", "rsqrt", "reciprocal"])
def test_an_op_that_saves_its_result_accepts_its_input_written(device, f):
    def run(lib, tensor):
        w = tensor(np.array([0.5, 2.0, 3.0], np.float32), requires_grad=True)
        loss = getattr(w, f)().sum()
        with lib.no_grad():
            w.mul_(10)
        loss.backward()
        return (w.grad,)

    same(run)


def test_a_promoted_operand_saved_for_backward_then_written_raises_as_torch(device):
    def run(lib, tensor):
        w = tensor(np.array([1.0, 2.0], np.float64), requires_grad=True)
        x = tensor(np.array([3.0, 4.0], np.float32))
        loss = (w * x).sum()  # x is cast to float64; torch saves x itself
        x.mul_(2)
        loss.backward()

    for lib in (torch, limn):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            run(lib, lib.tensor)


def test_a_write_into_a_slice_then_a_read_of_the_base_is_one_kernel():
    prev = limn.current_device()
    try:
        limn.set_device("c")
    except RuntimeError:
        pytest.skip("no C compiler")
    try:
        x = limn.tensor(np.arange(6, dtype=np.float32)).realize()
        y = x[1:3]
        y.mul_(2)
        s = x.sum()
        import re

        assert re.findall(r"^k\d+", limn.ir(s, stage="kernel"), re.M) == ["k0"]  # one select
        assert s.item() == 18.0
    finally:
        limn.set_device(prev)


@pytest.mark.parametrize(
    "write",
    [
        lambda x: x[1:].add_(x[:-1]),
        lambda x: x[1:].copy_(x[:-1]),
        lambda x: x.__setitem__(slice(1, None), x[:-1]),
        lambda x: x.__setitem__(x > 2, x[:3]),
        lambda x: x.reshape(2, 3).add_(x.reshape(3, 2).T),
    ],
)
def test_an_input_sharing_the_targets_memory_is_refused_as_torch(device, write):
    for lib in (torch, limn):
        x = lib.arange(6.0)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            write(x)
    x = limn.arange(6.0)
    x.add_(x)  # the same memory in the same layout: torch's full overlap, accepted
    x.reshape(2, 3).mul_(x.reshape(2, 3))
    np.testing.assert_array_equal(x.numpy(), (np.arange(6.0) * 2) ** 2)


def test_a_shape_changing_in_place_op_under_autograd_is_a_write_as_torchs(device):
    t32 = np.arange(6, dtype=np.float32)

    def run(lib, tensor):
        w = tensor(t32.reshape(2, 3), requires_grad=True)
        x = w * 1
        z = (x * 2).sum()  # names x, saves nothing of it
        x.t_()
        x.unsqueeze_(0)
        x.squeeze_(0)
        y = x * tensor(t32.reshape(3, 2))
        (y.sum() + z).backward()
        assert x._version == 3
        return x, w.grad

    same(run)
    for lib in (torch, limn):
        w = lib.tensor(t32.reshape(2, 3), requires_grad=True)
        x = w * 1
        z = (x * x).sum()  # saves x as it was
        x.t_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.backward()


def test_a_view_of_a_view_read_before_is_a_view_of_the_storage(device):
    def run(lib, tensor):
        x = tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
        t = x.T
        t.tolist()  # t computed alone: its later views still follow x's layout
        d = t.diagonal()
        d.add_(1)
        c = t.contiguous()  # not contiguous in x's layout: a copy
        x.add_(10)
        return x, d, c

    same(run)


IDENTITY_VIEWS = {
    "view": lambda x: x.view(x.shape),
    "reshape": lambda x: x.reshape(2, 3),
    "view_as": lambda x: x.view_as(x),
    "permute": lambda x: x.permute(0, 1),
    "transpose": lambda x: x.transpose(1, 1),
    "expand": lambda x: x.expand(-1, 3),
    "squeeze": lambda x: x.squeeze(),
    "narrow": lambda x: x.narrow(0, 0, 2),
    "slice": lambda x: x[:],
    "split": lambda x: x.split(2)[0],
    "movedim": lambda x: x.movedim(0, 0),
}


@pytest.mark.parametrize("name", IDENTITY_VIEWS)
def test_a_view_that_moves_nothing_is_a_new_tensor_over_the_same_memory(device, name):
    """torch's view ops give a new tensor where nothing moves too (``x.view(x.shape) is
    not x``): written through both ways, with a record, a flag, ``.data`` and a shape of
    its own."""
    t32 = np.arange(6, dtype=np.float32).reshape(2, 3)
    take = IDENTITY_VIEWS[name]

    def run(lib, tensor):
        x = tensor(t32)
        y = take(x)
        assert y is not x
        y.add_(1)
        x.mul_(2)
        z = take(x)
        z.requires_grad_()  # a leaf of its own: x still takes no gradient
        assert not x.requires_grad
        z.data = tensor(np.zeros(z.shape, np.float32))  # rebinds z alone
        v = take(x)
        v.unsqueeze_(0)  # the view's shape alone
        assert x.shape == (2, 3) and v.shape[0] == 1
        w = tensor(t32, requires_grad=True)
        h = w * 1
        u = take(h)
        assert not u.is_leaf and u.grad_fn is not None
        if name != "split":  # (torch refuses a write to one of several views it made)
            u.mul_(3)  # through the view: h's value and the view's record
        (u * u + h).sum().backward()
        return x, y, z, h, w.grad

    same(run)
    for lib in (torch, limn):
        w = lib.tensor(t32, requires_grad=True)
        with pytest.raises(RuntimeError, match="view of a leaf Variable|Output 0 of Split"):
            take(w).add_(1)


def test_a_shape_changing_in_place_op_on_a_leaf_is_refused_and_one_that_moves_nothing_counts(
    device,
):
    for lib in (torch, limn):
        w = lib.ones(2, 3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            w.t_()
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
            w[0].unsqueeze_(0)
        x = lib.ones(2, 3)
        x.squeeze_()  # nothing to squeeze: still a write, as torch counts it
        assert x._version == 1 and x.shape == (2, 3)


def test_a_flip_of_no_dims_is_a_copy(device):
    def run(lib, tensor):
        x = tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
        y, s = x.flip(()), x[0, 0].flip(0)
        x.add_(100)
        return y, s

    same(run)


SELF_OR_NEW = {  # where torch gives the tensor itself, and where a new view of it
    "flatten of one dim": lambda lib, x: x.flatten(1, 1),
    "contiguous": lambda lib, x: x.contiguous(),
    "to its dtype": lambda lib, x: x.to(x.dtype),
    "broadcast_tensors": lambda lib, x: lib.broadcast_tensors(x, x[0])[0],
    "broadcast_tensors, expanded": lambda lib, x: lib.broadcast_tensors(x, x[0])[1],
    "reshape": lambda lib, x: lib.reshape(x, (2, 3)),
    "squeeze": lambda lib, x: lib.squeeze(x, 0),
    "unflatten": lambda lib, x: x.unflatten(1, (3,)),
    "chunk": lambda lib, x: x.chunk(1)[0],
}


@pytest.mark.parametrize("name", SELF_OR_NEW)
def test_a_view_op_gives_the_tensor_itself_where_torchs_does(device, name):
    def run(lib):
        x = lib.ones(2, 3)
        y = SELF_OR_NEW[name](lib, x)
        return y is x

    assert run(limn) == run(torch)
