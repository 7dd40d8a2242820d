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
        self.tied = self.embed.weight  # shared: listed once, under its first path
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
    assert list(net.state_dict()) == [n for n, _ in net.named_parameters()] + ["scale"]
    assert net.parameters()[0] is net.embed.weight


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
    with pytest.raises(CheckpointError, match=r"'weight' is float32\[3, 2\].*float64"):
        lin.load_state_dict({**good, "weight": np.zeros((3, 2))})
    np.testing.assert_array_equal(lin.weight.numpy(), w0)
    lin.load_state_dict({"weight": good["weight"]}, strict=False)
    np.testing.assert_array_equal(lin.weight.numpy(), good["weight"])
