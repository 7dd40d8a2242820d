"""limn.nn against torch.nn: same weights in, same outputs and gradients out."""

import itertools
import math
import re

import numpy as np
import pytest
import torch

import limn
from limn import Tensor, nn
from limn.serialize import CheckpointError

RNG = np.random.default_rng(0)


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def copy_into_torch(module: nn.Module, tmodule: torch.nn.Module) -> None:
    tmodule.load_state_dict({k: torch.tensor(v.numpy()) for k, v in module.state_dict().items()})


def check_against_torch(module, tmodule, x: np.ndarray, tol: float = 1e-5, int_input=False):
    """Forward on the same weights, then backward of the same upstream gradient."""
    copy_into_torch(module, tmodule)
    if int_input:
        xl, xt = Tensor(x), torch.tensor(x)
    else:
        xl, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = module(xl), tmodule(xt)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    g = randn(*y.shape)
    y.backward(Tensor(g))
    ty.backward(torch.tensor(g))
    if not int_input:
        np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)
    tparams = dict(tmodule.named_parameters())
    for name, p in module.named_parameters():
        np.testing.assert_allclose(
            p.grad.numpy(), tparams[name].grad.numpy(), rtol=tol, atol=tol, err_msg=name
        )


# ---- layers against torch ---------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 3), (3,)])
def test_linear_matches_torch(bias, shape):
    check_against_torch(nn.Linear(3, 4, bias=bias), torch.nn.Linear(3, 4, bias=bias), randn(*shape))


@pytest.mark.parametrize(
    "normalized,affine,bias",
    [(6, True, True), ((4, 6), True, True), (6, False, False), (6, True, False)],
)
def test_layernorm_matches_torch(normalized, affine, bias):
    m = nn.LayerNorm(normalized, eps=1e-3, elementwise_affine=affine, bias=bias)
    tm = torch.nn.LayerNorm(normalized, eps=1e-3, elementwise_affine=affine, bias=bias)
    if affine:  # move off ones/zeros so the affine part is exercised
        limn.realize(m.weight.assign(Tensor(randn(*m.weight.shape))))
    check_against_torch(m, tm, randn(3, 4, 6) * 3 + 1)


def test_embedding_matches_torch_and_accumulates_repeated_ids():
    ids = np.array([[0, 2, 2], [4, 0, 2]], np.int64)
    check_against_torch(nn.Embedding(5, 3), torch.nn.Embedding(5, 3), ids, int_input=True)


CONV_CASES = [
    case
    for case in itertools.product([1, 2], [0, 1, "same", "valid"], [1, 2], [1, 2], [True, False])
    if not (case[1] == "same" and case[0] != 1)  # torch allows 'same' only with stride 1
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("stride,padding,dilation,groups,bias", CONV_CASES)
def test_conv2d_matches_torch(stride, padding, dilation, groups, bias):
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
    m, tm = nn.Conv2d(4, 6, (3, 2), **kw), torch.nn.Conv2d(4, 6, (3, 2), **kw)
    check_against_torch(m, tm, randn(2, 4, 7, 6))


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("stride,padding,dilation,groups,bias", CONV_CASES)
def test_conv1d_matches_torch(stride, padding, dilation, groups, bias):
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
    m, tm = nn.Conv1d(4, 6, 3, **kw), torch.nn.Conv1d(4, 6, 3, **kw)
    check_against_torch(m, tm, randn(2, 4, 9))


@pytest.mark.parametrize("kernel,stride,dilation", [(1, 3, 1), (2, 5, 2), (2, 1, 3), (3, 4, 1)])
def test_conv_with_stride_or_dilation_wider_than_the_kernel_matches_torch(kernel, stride, dilation):
    kw = dict(stride=stride, dilation=dilation, padding=2)
    m, tm = nn.Conv2d(2, 3, kernel, **kw), torch.nn.Conv2d(2, 3, kernel, **kw)
    check_against_torch(m, tm, randn(1, 2, 9, 11))


def test_depthwise_and_unbatched_conv_match_torch():
    kw = dict(groups=4, padding=1)
    check_against_torch(nn.Conv2d(4, 8, 3, **kw), torch.nn.Conv2d(4, 8, 3, **kw), randn(1, 4, 5, 5))
    check_against_torch(nn.Conv1d(2, 3, 2), torch.nn.Conv1d(2, 3, 2), randn(2, 5))


@pytest.mark.parametrize("padding", [1, 0])
def test_conv_reads_its_windows_as_a_view_without_copying_them(padding):
    """The only copy is the padded input; every kernel's buffers stay input- or output-sized."""
    x = Tensor(randn(2, 4, 9, 8))
    conv = nn.Conv2d(4, 6, 3, padding=padding)
    with limn.no_grad():
        y = conv(x)
    nodes = limn.ir(y, stage="graph")
    assert nodes.count("CONTIGUOUS") == (1 if padding else 0)
    kernels = limn.ir(y, stage="kernel")
    kinds = re.findall(r"^k\d+ +(\w+)", kernels, re.M)
    assert kinds == (["MAP", "SUM", "MAP"] if padding else ["SUM", "MAP"])  # pad, conv, bias
    largest = max(
        math.prod(int(d) for d in shape.split(", "))
        for shape in re.findall(r"out = buf\d+  float32\[([\d, ]+)\]", kernels)
    )
    assert largest <= max(2 * 4 * (9 + 2 * padding) * (8 + 2 * padding), math.prod(y.shape))


def test_conv_rejects_channels_that_do_not_fit_the_groups():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="channels"):
        nn.Conv2d(4, 4, 3)(Tensor(randn(1, 3, 5, 5)))
    with pytest.raises(ValueError, match="larger than the padded input"):
        nn.Conv1d(1, 1, 5)(Tensor(randn(1, 1, 3)))


# ---- initialization ---------------------------------------------------------------


def test_default_inits_follow_torch_bounds_and_layouts():
    limn.set_seed(1)
    lin = nn.Linear(50, 40)
    conv = nn.Conv2d(6, 8, (3, 5), groups=2)
    for m, t, fan_in in [
        (lin, torch.nn.Linear(50, 40), 50),
        (conv, torch.nn.Conv2d(6, 8, (3, 5), groups=2), 45),
    ]:
        bound = 1 / np.sqrt(fan_in)
        for name, p in m.named_parameters():
            assert p.shape == tuple(dict(t.named_parameters())[name].shape), name
            v = p.numpy()
            assert np.abs(v).max() <= bound and np.abs(v).max() > 0.8 * bound, name
        w = m.weight.numpy()
        assert abs(w.std() - bound / np.sqrt(3)) < 0.1 * bound  # uniform's std
    emb = nn.Embedding(100, 50).weight.numpy()
    assert abs(emb.mean()) < 0.05 and abs(emb.std() - 1) < 0.05
    ln = nn.LayerNorm(7)
    np.testing.assert_array_equal(ln.weight.numpy(), np.ones(7, np.float32))
    np.testing.assert_array_equal(ln.bias.numpy(), np.zeros(7, np.float32))


# ---- dropout ----------------------------------------------------------------------


def test_dropout_keeps_with_probability_one_minus_p_and_scales_like_torch():
    limn.set_seed(3)
    d = nn.Dropout(0.25)
    x = Tensor(np.ones((200, 100), np.float32) * 2, requires_grad=True)
    y = d(x)
    y.sum().backward()
    out = y.numpy()
    kept = out != 0
    assert 0.72 < kept.mean() < 0.78
    np.testing.assert_allclose(out[kept], 2 / 0.75)  # torch's inverted-dropout scale
    np.testing.assert_allclose(x.grad.numpy(), kept / 0.75)
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())
    np.testing.assert_array_equal(nn.Dropout(1.0)(x).numpy(), np.zeros((200, 100)))


# ---- losses -----------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_matches_torch(reduction):
    a, b = randn(4, 3), randn(4, 3)
    x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y = nn.mse_loss(x, Tensor(b), reduction)
    ty = torch.nn.functional.mse_loss(tx, torch.tensor(b), reduction=reduction)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "shape,reduction,ignore",
    [((6, 5), "mean", False), ((6, 5), "sum", False), ((6, 5), "none", False),
     ((3, 5, 4), "mean", False), ((5,), "mean", False), ((6, 5), "mean", True),
     ((3, 5, 4), "mean", True)],
)  # fmt: skip
def test_cross_entropy_matches_torch(shape, reduction, ignore):
    logits = randn(*shape) * 3
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = RNG.integers(0, shape[1 if len(shape) > 1 else 0], tshape)
    if ignore:
        target.reshape(-1)[::3] = -100
    x, tx = Tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
    y = nn.cross_entropy(x, Tensor(target), reduction=reduction)
    ty = torch.nn.functional.cross_entropy(tx, torch.tensor(target), reduction=reduction)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_cross_entropy_is_finite_for_huge_logits():
    logits = np.array([[1e4, -1e4, 0.0], [3e4, 3e4, -3e4]], np.float32)
    target = np.array([1, 0])
    x = Tensor(logits, requires_grad=True)
    y = nn.cross_entropy(x, Tensor(target))
    y.backward()
    ty = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(target))
    np.testing.assert_allclose(y.item(), ty.item(), rtol=1e-6)
    assert np.isfinite(x.grad.numpy()).all()


def test_cross_entropy_rejects_float_or_misshaped_targets():
    with pytest.raises(TypeError, match="integer class ids"):
        nn.cross_entropy(Tensor(randn(2, 3)), Tensor(randn(2)))
    with pytest.raises(ValueError, match=r"target of shape \(2,\)"):
        nn.cross_entropy(Tensor(randn(2, 3)), Tensor(np.array([0, 1, 2])))


# ---- the module tree --------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        self.qkv = nn.Linear(4, 12)
        self.norm = nn.LayerNorm(4)


class Net(nn.Module):
    def __init__(self):
        self.embed = nn.Embedding(10, 4)
        self.blocks = [Block(), Block()]
        self.heads = {"out": nn.Linear(4, 2, bias=False)}
        self.tied = self.embed.weight  # shared: one parameter, and a second state-dict name
        self.scale = Tensor(np.ones(4, np.float32))  # a buffer: saved, not trained
        self._cache = Tensor(np.zeros(3, np.float32))  # private: not walked
        self.drop = nn.Dropout(0.1)


def test_named_parameters_give_dotted_paths_through_lists_dicts_and_modules():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "embed.weight",
        "blocks.0.qkv.weight", "blocks.0.qkv.bias", "blocks.0.norm.weight", "blocks.0.norm.bias",
        "blocks.1.qkv.weight", "blocks.1.qkv.bias", "blocks.1.norm.weight", "blocks.1.norm.bias",
        "heads.out.weight",
    ]  # fmt: skip
    assert [n for n, _ in net.named_buffers()] == ["scale"]
    names = [n for n, _ in net.named_parameters()]
    assert list(net.state_dict()) == names + ["tied", "scale"]  # torch's state dict: both
    assert net.state_dict()["tied"] is net.embed.weight
    assert next(net.parameters()) is net.embed.weight


def test_train_and_eval_reach_every_submodule():
    net = Net()
    net.eval()
    assert not any(m.training for _, m in net.named_modules())
    net.train()
    assert all(m.training for _, m in net.named_modules())


def test_load_state_dict_writes_into_the_same_tensors_and_matches_torch():
    seq = nn.Sequential(nn.Linear(3, 5), Tensor.relu, nn.Linear(5, 2))
    tseq = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    before = {k: (t, t.node.arg) for k, t in seq.state_dict().items()}
    seq.load_state_dict({k: v.detach().numpy() for k, v in tseq.state_dict().items()})
    for k, t in seq.state_dict().items():
        assert t is before[k][0] and t.node.arg is before[k][1], k  # never rebound
    x = randn(4, 3)
    np.testing.assert_allclose(
        seq(Tensor(x)).numpy(), tseq(torch.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6
    )


def test_load_state_dict_rejects_bad_names_shapes_and_dtypes_without_writing():
    lin = nn.Linear(2, 3)
    w0 = lin.weight.numpy()
    good = {k: np.zeros(t.shape, np.float32) for k, t in lin.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"missing from the source: \['bias'\]"):
        lin.load_state_dict({"weight": good["weight"]})
    with pytest.raises(CheckpointError, match="not in the destination: \\['extra'\\]"):
        lin.load_state_dict({**good, "extra": good["bias"]})
    with pytest.raises(CheckpointError, match=r"'bias' is float32\[3\].*float32\[4\]"):
        lin.load_state_dict({**good, "bias": np.zeros(4, np.float32)})
    with pytest.raises(CheckpointError, match=r"'weight' is float32\[3, 2\].*\[2, 3\]"):
        lin.load_state_dict({**good, "weight": np.zeros((2, 3))})
    np.testing.assert_array_equal(lin.weight.numpy(), w0)
    lin.load_state_dict({"weight": good["weight"]}, strict=False)
    np.testing.assert_array_equal(lin.weight.numpy(), good["weight"])


def test_a_model_loads_another_models_live_state_dict_and_returns_torchs_keys():
    """The EMA / target-network copy: from live Tensors that require grad, strict and not,
    returning the missing and unexpected names as torch's named tuple does."""

    def pair(lib):
        return [lib.Sequential(lib.Linear(3, 4), lib.ReLU(), lib.Linear(4, 2)) for _ in "ab"]

    a, b = pair(nn)
    ta, tb = pair(torch.nn)
    assert tuple(b.load_state_dict(a.state_dict())) == tuple(tb.load_state_dict(ta.state_dict()))
    for k, t in a.state_dict().items():
        np.testing.assert_array_equal(b.state_dict()[k].numpy(), t.numpy())
    with limn.no_grad():
        a[0].weight.add_(1.0)  # a later change of the source does not reach the copy
    assert not np.array_equal(b[0].weight.numpy(), a[0].weight.numpy())
    partial = {"0.weight": a.state_dict()["0.weight"], "extra": a.state_dict()["2.bias"]}
    tpartial = {"0.weight": ta.state_dict()["0.weight"], "extra": ta.state_dict()["2.bias"]}
    keys, tkeys = b.load_state_dict(partial, strict=False), tb.load_state_dict(tpartial, False)
    assert (keys.missing_keys, keys.unexpected_keys) == (tkeys.missing_keys, tkeys.unexpected_keys)
    np.testing.assert_array_equal(b[0].weight.numpy(), a[0].weight.numpy())


def test_load_state_dict_casts_to_each_tensors_dtype_as_torch_does():
    lin, tlin = nn.Linear(2, 3), torch.nn.Linear(2, 3)
    state = {"weight": np.arange(6.0).reshape(3, 2) / 7, "bias": np.array([1, 2, 3])}
    lin.load_state_dict(state)  # float64 and int64 into float32
    tlin.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    assert lin.weight.dtype == limn.float32
    for k, t in tlin.state_dict().items():
        np.testing.assert_array_equal(lin.state_dict()[k].numpy(), t.numpy(), err_msg=k)


def test_print_model_shows_every_layer_with_its_arguments_as_torch_does():
    def model(lib):
        return lib.Sequential(
            lib.Linear(3, 4), lib.ReLU(), lib.Dropout(p=0.1), lib.Softmax(dim=-1),
            lib.Sequential(lib.Linear(4, 2, bias=False), lib.Tanh()),
        )  # fmt: skip

    assert repr(model(nn)) == repr(model(torch.nn))


# ---- torch's containers, stateless layers and functional forms ---------------------


def torch_style(lib, tensor):
    """A module written as torch code writes one: super().__init__(), containers, buffers."""

    class TorchStyle(lib.Module):
        def __init__(self):
            super().__init__()
            self.layers = lib.ModuleList([lib.Linear(4, 4) for _ in range(2)])
            self.heads = lib.ModuleDict({"a": lib.Linear(4, 3), "b": lib.Linear(4, 1)})
            self.body = lib.Sequential(lib.Linear(4, 4), lib.GELU(), lib.Dropout(0.0))
            self.norm = lib.RMSNorm(4)
            self.register_buffer("offset", tensor(np.ones(4, np.float32)))

    return TorchStyle()


def test_containers_name_their_parameters_as_torch_does():
    ours, theirs = torch_style(nn, Tensor), torch_style(torch.nn, torch.tensor)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert set(ours.state_dict()) == set(theirs.state_dict())  # torch lists own buffers first
    assert len(ours.layers) == 2 and ours.heads["a"] is ours.heads.a and len(ours.body) == 3
    assert [type(m).__name__ for m in ours.body] == ["Linear", "GELU", "Dropout"]
    assert isinstance(ours.layers[:1], nn.ModuleList) and len(ours.layers[1:]) == 1
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    seen = []
    ours.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "TorchStyle" and seen.count("Linear") == 5


STATELESS = [
    (nn.ReLU(), torch.nn.ReLU()),
    (nn.GELU(), torch.nn.GELU()),
    (nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
    (nn.SiLU(), torch.nn.SiLU()),
    (nn.Tanh(), torch.nn.Tanh()),
    (nn.Sigmoid(), torch.nn.Sigmoid()),
    (nn.Softplus(), torch.nn.Softplus()),
    (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)),
    (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
    (nn.LogSoftmax(dim=-1), torch.nn.LogSoftmax(dim=-1)),
    (nn.Flatten(), torch.nn.Flatten()),
    (nn.Identity(), torch.nn.Identity()),
    (nn.MaxPool2d(2), torch.nn.MaxPool2d(2)),
    (nn.MaxPool2d(3, stride=2, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1)),
    (nn.AvgPool2d(2, stride=1), torch.nn.AvgPool2d(2, stride=1)),
    (nn.AvgPool2d(3, padding=1), torch.nn.AvgPool2d(3, padding=1)),
    (nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1)),
    (nn.AdaptiveAvgPool2d((2, 3)), torch.nn.AdaptiveAvgPool2d((2, 3))),
    (nn.RMSNorm(6), torch.nn.RMSNorm(6)),
    (nn.RMSNorm((4, 6), eps=1e-3), torch.nn.RMSNorm((4, 6), eps=1e-3)),
    (nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)),
]


@pytest.mark.parametrize("m,tm", STATELESS, ids=[type(m).__name__ for m, _ in STATELESS])
def test_layer_modules_match_torch(m, tm):
    check_against_torch(m, tm, randn(2, 3, 4, 6) * 2)  # (relu'(0) differs: docs/torch.md)


def test_batch_norm_keeps_running_statistics_as_torch_and_uses_them_in_eval():
    m, tm = nn.BatchNorm1d(3, momentum=0.2), torch.nn.BatchNorm1d(3, momentum=0.2)
    for i in range(3):
        x = randn(8, 3, 5) * (i + 1) + i
        np.testing.assert_allclose(
            m(Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5
        )
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(
            getattr(m, name).numpy(), getattr(tm, name).numpy(), rtol=1e-5, err_msg=name
        )
    m.eval(), tm.eval()
    x = randn(4, 3, 5)
    np.testing.assert_allclose(
        m(Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5
    )


LOSSES = [
    ("CrossEntropyLoss", {}, "class"),
    ("CrossEntropyLoss", {"ignore_index": 1, "reduction": "sum"}, "class"),
    ("NLLLoss", {}, "class"),
    ("MSELoss", {}, "float"),
    ("L1Loss", {"reduction": "none"}, "float"),
    ("BCEWithLogitsLoss", {}, "prob"),
]


@pytest.mark.parametrize("name,kw,kind", LOSSES)
def test_loss_modules_match_torch(name, kw, kind):
    x = randn(6, 4) * 3
    target = {
        "class": RNG.integers(0, 4, 6),
        "float": randn(6, 4),
        "prob": RNG.random((6, 4)).astype(np.float32),
    }[kind]
    if name == "NLLLoss":
        x = np.log(np.exp(x) / np.exp(x).sum(1, keepdims=True)).astype(np.float32)
    xl, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y = getattr(nn, name)(**kw)(xl, Tensor(target))
    ty = getattr(torch.nn, name)(**kw)(xt, torch.tensor(target))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    y.sum().backward(), ty.sum().backward()
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


FUNCTIONAL = {
    "layer_norm": lambda F, x, w: F.layer_norm(x, (4,), w[0, :4], w[1, :4], 1e-3),
    "rms_norm": lambda F, x, w: F.rms_norm(x, (4,), w[0, :4]),
    "linear": lambda F, x, w: F.linear(x, w[:, :4], w[0, :2]),
    "embedding": lambda F, x, w: F.embedding((x[0, 0, :3] > 0).long(), w) * 2,
    "pad": lambda F, x, w: F.pad(x, (1, 2, 0, 1), value=0.5),
    "softmax": lambda F, x, w: F.softmax(x, dim=1),
    "dropout eval": lambda F, x, w: F.dropout(x, 0.5, training=False),
    "leaky_relu": lambda F, x, w: F.leaky_relu(x, 0.1),
    "max_pool1d": lambda F, x, w: F.max_pool1d(x[0], 2),
    "conv2d": lambda F, x, w: F.conv2d(x, w.reshape(2, 1, 2, 3).expand(2, 3, 2, 3), padding=1),
    "sdpa causal": lambda F, x, w: F.scaled_dot_product_attention(x, x, x, is_causal=True),
    "sdpa bool mask": lambda F, x, w: F.scaled_dot_product_attention(x, x, x, attn_mask=x > -1),
    "sdpa float mask": lambda F, x, w: F.scaled_dot_product_attention(
        x, x * 0.5, x, attn_mask=x[0, 0, :, :1] * x[0, 0, :1, :]
    ),
}


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_functional_forms_match_torch(name):
    x, w = randn(2, 3, 4, 4), randn(2, 6)
    xl, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    wl, wt = Tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = FUNCTIONAL[name](nn.functional, xl, wl)
    ty = FUNCTIONAL[name](torch.nn.functional, xt, wt)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = randn(*y.shape)
    y.backward(Tensor(g)), ty.backward(torch.tensor(g))
    for ours, theirs in ((xl, xt), (wl, wt)):
        if theirs.grad is not None:
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_init_functions_draw_torchs_distributions_in_place():
    limn.set_seed(0)
    w = nn.Linear(400, 300).weight
    for fn, std in [
        (lambda t: nn.init.normal_(t, std=0.02), 0.02),
        (lambda t: nn.init.xavier_uniform_(t), math.sqrt(2 / 700)),
        (lambda t: nn.init.xavier_normal_(t), math.sqrt(2 / 700)),
        (lambda t: nn.init.kaiming_normal_(t, nonlinearity="relu"), math.sqrt(2 / 400)),
        (lambda t: nn.init.kaiming_uniform_(t, a=math.sqrt(5)), math.sqrt(1 / 3 / 400) * 1.0),
        (lambda t: nn.init.trunc_normal_(t, std=0.02, a=-0.04, b=0.04), 0.0176),
    ]:
        assert fn(w) is w and w.requires_grad
        assert abs(w.numpy().std() - std) < 0.05 * std
    nn.init.uniform_(w, -2, -1)
    assert -2 <= w.numpy().min() and w.numpy().max() <= -1
    nn.init.zeros_(w), nn.init.ones_(w.T[0])
    assert w.numpy().sum() == 300 and nn.init.constant_(w, 3.0).numpy().min() == 3


def test_clip_grad_norm_scales_the_gradients_as_torch_does():
    for max_norm, norm_type in [(1.0, 2.0), (0.5, 1.0), (0.1, math.inf), (1e6, 2.0)]:
        ours, theirs = nn.Linear(5, 3), torch.nn.Linear(5, 3)
        copy_into_torch(ours, theirs)
        x = randn(4, 5) * 10
        ours(Tensor(x)).sum().backward()
        theirs(torch.tensor(x)).sum().backward()
        total = nn.utils.clip_grad_norm_(ours.parameters(), max_norm, norm_type)
        want = torch.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm, norm_type)
        np.testing.assert_allclose(total.item(), want.item(), rtol=1e-5)
        for (name, p), tp in zip(ours.named_parameters(), theirs.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, err_msg=name)
    p = Tensor([1.0], requires_grad=True)
    p.grad = Tensor([-5.0])
    nn.utils.clip_grad_value_([p], 2.0)
    assert p.grad.tolist() == [-2.0]


def test_parameter_and_buffer_are_the_attributes_torch_code_makes():
    m = nn.Module()
    m.w = nn.Parameter(Tensor([1.0, 2.0]))
    m.register_buffer("b", Tensor([3.0]))
    m.register_parameter("v", nn.Parameter(Tensor([0.0]), requires_grad=False))
    assert [n for n, _ in m.named_parameters()] == ["w"] and m.w.requires_grad
    assert [n for n, _ in m.named_buffers()] == ["b", "v"]
    m.requires_grad_(False)
    assert list(m.parameters()) == []


def test_embedding_max_norm_and_scale_grad_by_freq_are_torchs():
    import torch

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((6, 4)) * 2).astype(np.float32)
    ids = np.array([[0, 2, 2], [5, 2, 0]])
    cases = [
        {"max_norm": 1.0},
        {"max_norm": 1.5, "norm_type": 1.0},
        {"scale_grad_by_freq": True},
        {"padding_idx": 2, "scale_grad_by_freq": True},
    ]
    for kw in cases:
        wt, wl = torch.tensor(w, requires_grad=True), Tensor(w.copy(), requires_grad=True)
        yt = torch.nn.functional.embedding(torch.tensor(ids), wt, **kw)
        yl = nn.functional.embedding(Tensor(ids), wl, **kw)
        g = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
        (yt * torch.tensor(g)).sum().backward()
        (yl * Tensor(g)).sum().backward()
        np.testing.assert_allclose(yl.numpy(), yt.detach().numpy(), 1e-6, 1e-6, str(kw))
        np.testing.assert_allclose(wl.grad.numpy(), wt.grad.numpy(), 1e-6, 1e-6, str(kw))
        np.testing.assert_allclose(wl.detach().numpy(), wt.detach().numpy(), 1e-6, 1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_values_and_gradients_are_torchs(mode):
    """Bags by offsets (an empty one among them), by rows of a 2-d input, with a padding
    row left out and per-sample weights: the values and the gradients of the table and
    of the weights match torch's."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((7, 3)).astype(np.float32)
    cases = [
        (np.array([1, 2, 4, 5, 4, 3, 2, 6]), np.array([0, 3, 3, 6]), {}),
        (np.array([1, 2, 4, 5, 4, 3]), np.array([0, 2, 6]), {"include_last_offset": True}),
        (np.array([[0, 2, 2], [5, 3, 1]]), None, {"padding_idx": 2}),
        (np.array([[0, 2, 2], [5, 3, 1]]), None, {"max_norm": 1.0}),
    ]
    for ids, offsets, kw in cases:
        weighted = mode == "sum" and "max_norm" not in kw
        psw = rng.standard_normal(ids.shape).astype(np.float32) if weighted else None
        wt, wl = torch.tensor(w, requires_grad=True), Tensor(w.copy(), requires_grad=True)
        pt = torch.tensor(psw, requires_grad=True) if weighted else None
        pl = Tensor(psw, requires_grad=True) if weighted else None
        ot = None if offsets is None else torch.tensor(offsets)
        ol = None if offsets is None else Tensor(offsets)
        yt = torch.nn.functional.embedding_bag(
            torch.tensor(ids), wt, ot, mode=mode, per_sample_weights=pt, **kw
        )
        yl = nn.functional.embedding_bag(
            Tensor(ids), wl, ol, mode=mode, per_sample_weights=pl, **kw
        )
        g = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
        (yt * torch.tensor(g)).sum().backward()
        (yl * Tensor(g)).sum().backward()
        np.testing.assert_allclose(yl.numpy(), yt.detach().numpy(), 1e-5, 1e-6, str(kw))
        np.testing.assert_allclose(wl.grad.numpy(), wt.grad.numpy(), 1e-5, 1e-6, str(kw))
        if weighted:
            np.testing.assert_allclose(pl.grad.numpy(), pt.grad.numpy(), 1e-5, 1e-6, str(kw))


def test_embedding_bag_refuses_what_torch_refuses_and_says_what_it_takes():
    w, ids = Tensor.randn(5, 2), Tensor([0, 1, 2])
    with pytest.raises(ValueError, match="mode must be 'sum', 'mean' or 'max'"):
        nn.functional.embedding_bag(ids, w, Tensor([0]), mode="median")
    with pytest.raises(ValueError, match="per_sample_weights needs mode='sum'"):
        nn.functional.embedding_bag(ids, w, Tensor([0]), per_sample_weights=Tensor.ones(3))
    with pytest.raises(ValueError, match="offsets must be None for a 2-d input"):
        nn.functional.embedding_bag(ids.reshape(1, 3), w, Tensor([0]))
    with pytest.raises(TypeError, match="integer ids"):
        nn.functional.embedding_bag(Tensor([0.5]), w, Tensor([0]))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_values_and_gradients_are_torchs(mode, padding_mode):
    """An image read at points inside and outside it (each padding mode, both corner
    conventions): the values and the gradients of the image and of the grid match torch's."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4, 5))
    g = rng.uniform(-1.3, 1.3, (2, 3, 6, 2))
    for align in (False, True):
        xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
        xl, gl = Tensor(x, requires_grad=True), Tensor(g, requires_grad=True)
        kw = {"mode": mode, "padding_mode": padding_mode, "align_corners": align}
        yt = torch.nn.functional.grid_sample(xt, gt, **kw)
        yl = nn.functional.grid_sample(xl, gl, **kw)
        up = rng.standard_normal(tuple(yt.shape))
        (yt * torch.tensor(up)).sum().backward()
        (yl * Tensor(up)).sum().backward()
        np.testing.assert_allclose(yl.numpy(), yt.detach().numpy(), 1e-9, 1e-9, str(kw))
        np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), 1e-9, 1e-9, str(kw))
        if mode == "nearest":  # a step: torch's gradient is zeros, limn's none at all
            assert gl.grad is None and not gt.grad.any()
        else:
            np.testing.assert_allclose(gl.grad.numpy(), gt.grad.numpy(), 1e-7, 1e-7, str(kw))


def test_affine_grid_feeds_grid_sample_as_torchs_does():
    """A batch of rotations and shifts, for an image and a volume: the grid and a
    trilinear warp of the volume through it, with gradients to theta."""
    rng = np.random.default_rng(3)
    for size, k in (((2, 3, 4, 5), 2), ((2, 1, 3, 4, 5), 3)):
        theta = rng.standard_normal((2, k, k + 1)) * 0.5
        x = rng.standard_normal(size)
        for align in (False, True):
            tt, tl = torch.tensor(theta, requires_grad=True), Tensor(theta, requires_grad=True)
            gt = torch.nn.functional.affine_grid(tt, size, align_corners=align)
            gl = nn.functional.affine_grid(tl, size, align_corners=align)
            np.testing.assert_allclose(gl.numpy(), gt.detach().numpy(), 1e-12, 1e-12)
            yt = torch.nn.functional.grid_sample(torch.tensor(x), gt, align_corners=align)
            yl = nn.functional.grid_sample(Tensor(x), gl, align_corners=align)
            np.testing.assert_allclose(yl.numpy(), yt.detach().numpy(), 1e-9, 1e-9)
            yt.sum().backward()
            yl.sum().backward()
            np.testing.assert_allclose(tl.grad.numpy(), tt.grad.numpy(), 1e-7, 1e-7)


def test_grid_sample_says_what_it_accepts():
    x = Tensor.randn(1, 1, 3, 3)
    with pytest.raises(ValueError, match=r"grid must be \(N, \*out, 2\)"):
        nn.functional.grid_sample(x, Tensor.randn(1, 2, 2, 3))
    with pytest.raises(ValueError, match="mode must be one of"):
        nn.functional.grid_sample(x, Tensor.randn(1, 2, 2, 2), mode="area")
    with pytest.raises(ValueError, match="bicubic needs a 4-d input"):
        nn.functional.grid_sample(Tensor.randn(1, 1, 2, 2, 2), Tensor.randn(1, 1, 1, 1, 3),
                                  mode="bicubic")  # fmt: skip
    with pytest.raises(ValueError, match=r"theta must be \(N, 2, 3\)"):
        nn.functional.affine_grid(Tensor.randn(1, 3, 3), (1, 1, 4, 4))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_values_and_gradients_through_log_softmax_are_torchs(reduction):
    """Padded and concatenated targets, uneven lengths, an impossible target (zeroed by
    zero_infinity) and an empty one: the losses and the logits' gradients match torch's."""
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((12, 4, 6))
    targets = rng.integers(1, 6, (4, 5))
    in_len, tgt_len = [12, 10, 3, 12], [5, 3, 5, 0]  # sample 2: 5 labels in 3 steps
    for concatenated in (False, True):
        tt = torch.tensor(np.concatenate([r[:k] for r, k in zip(targets, tgt_len)])
                          if concatenated else targets)  # fmt: skip
        xt, xl = torch.tensor(logits, requires_grad=True), Tensor(logits, requires_grad=True)
        kw = {"reduction": reduction, "zero_infinity": True}
        yt = torch.nn.functional.ctc_loss(xt.log_softmax(2), tt, in_len, tgt_len, **kw)
        yl = nn.functional.ctc_loss(xl.log_softmax(2), Tensor(tt.numpy()), in_len, tgt_len, **kw)
        np.testing.assert_allclose(yl.numpy(), yt.detach().numpy(), 1e-9, 1e-9)
        yt.sum().backward()
        yl.sum().backward()
        np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), 1e-8, 1e-9)


def test_ctc_loss_without_zero_infinity_is_inf_for_an_impossible_target():
    lp = Tensor.randn(3, 1, 4).log_softmax(2)
    loss = nn.functional.ctc_loss(lp, Tensor([[1, 2, 1, 2]]), [3], [4], reduction="none")
    assert loss.numpy().tolist() == [math.inf]
    with pytest.raises(ValueError, match="blank 7 is not one of the 4 classes"):
        nn.functional.ctc_loss(lp, Tensor([[1]]), [3], [1], blank=7)


def test_embedding_bag_layer_matches_torchs_on_its_weights():
    layer, tlayer = (
        nn.EmbeddingBag(9, 4, mode="sum", padding_idx=0),
        torch.nn.EmbeddingBag(9, 4, mode="sum", padding_idx=0),
    )
    assert not layer.weight.numpy()[0].any() and list(layer.state_dict()) == ["weight"]
    copy_into_torch(layer, tlayer)
    ids, offsets = np.array([3, 0, 5, 8, 8, 1]), np.array([0, 2, 2])
    y = layer(Tensor(ids), Tensor(offsets))
    ty = tlayer(torch.tensor(ids), torch.tensor(offsets))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), 1e-6, 1e-6)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), tlayer.weight.grad.numpy(), 1e-6, 1e-6)
