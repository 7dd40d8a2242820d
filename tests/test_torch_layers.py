"""torch's recurrent and Transformer layers, data loading and stand-in modules on limn:
each layer loads torch's state dict and gives torch's outputs and gradients; the
stand-ins answer as they say they do."""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import limn
from limn import Tensor, nn
from limn.utils.data import DataLoader, Generator, Subset, TensorDataset, random_split

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RNN_CASES = [
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "bias": False}),
    ("GRU", {}),
    ("LSTM", {}),
    ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("LSTM", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
]


@pytest.mark.parametrize("kind,kw", RNN_CASES, ids=[f"{k}-{v}" for k, v in RNN_CASES])
def test_recurrent_layers_load_torchs_weights_and_give_its_outputs_and_gradients(kind, kw):
    torch.manual_seed(0)
    theirs, ours = getattr(torch.nn, kind)(5, 6, **kw), getattr(nn, kind)(5, 6, **kw)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5) if kw.get("batch_first") else (4, 3, 5)).astype(np.float32)
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    h0 = rng.standard_normal((layers, 3, 6)).astype(np.float32)
    xt, xl = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    state_t = (torch.tensor(h0), torch.tensor(h0 * 0.5)) if kind == "LSTM" else torch.tensor(h0)
    state_l = (Tensor(h0), Tensor(h0 * 0.5)) if kind == "LSTM" else Tensor(h0)
    (yt, ht), (yl, hl) = theirs(xt, state_t), ours(xl, state_l)
    if kind == "LSTM":
        ht, hl = ht[0] + 2 * ht[1], hl[0] + 2 * hl[1]
    (yt.square().sum() + ht.sum()).backward()
    (yl.square().sum() + hl.sum()).backward()
    for got, want in ((yl, yt), (hl, ht), (xl.grad, xt.grad)):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(
            p.grad.numpy(), grads[name].grad.numpy(), 1e-4, 1e-5, err_msg=name
        )


def test_each_steps_gradient_is_a_row_of_the_outputs_gradient_not_a_select_chain():
    """Through the primitives, step t's gradient selected its row out of every other
    step's (a WHERE per step, fused into every per-step kernel: T**2 in all)."""

    def selects(steps: int) -> int:
        lstm, head = nn.LSTM(3, 4), nn.Linear(4, 2)
        y, _ = lstm(Tensor(np.ones((steps, 2, 3), np.float32)))
        head(y).sum().backward()
        return limn.ir(lstm.weight_hh_l0.grad, "kernel").count("WHERE")

    assert selects(6) == selects(12) == 0


def test_an_unbatched_lstm_and_a_wrong_state_answer_as_torch_does():
    lstm = nn.LSTM(3, 4, num_layers=2)
    out, (h, c) = lstm(Tensor.randn(5, 3))
    assert out.shape == (5, 4) and h.shape == c.shape == (2, 4)
    assert repr(lstm) == "LSTM(3, 4, num_layers=2)"
    with pytest.raises(ValueError, match=r"h0 must be \(2, 1, 4\)"):
        lstm(Tensor.randn(5, 1, 3), (Tensor.zeros(1, 1, 4), Tensor.zeros(2, 1, 4)))
    with pytest.raises(ValueError, match=r"LSTM: input must be \(T, B, 3\)"):
        lstm(Tensor.randn(5, 1, 2))


@pytest.mark.parametrize("batch_first,norm_first", [(False, False), (True, True)])
def test_a_transformer_loads_torchs_weights_and_gives_its_outputs(batch_first, norm_first):
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
              dim_feedforward=16, dropout=0.0, batch_first=batch_first,
              norm_first=norm_first)  # fmt: skip
    torch.manual_seed(0)
    theirs, ours = torch.nn.Transformer(**kw), nn.Transformer(**kw)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(1)
    src, tgt = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3, 8), (4, 3, 8)))
    if batch_first:
        src, tgt = src.transpose(1, 0, 2).copy(), tgt.transpose(1, 0, 2).copy()
    pad = np.zeros((3, 5), bool)
    pad[1, 3:] = True
    st, sl = torch.tensor(src, requires_grad=True), Tensor(src, requires_grad=True)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(4)
    yt = theirs(st, torch.tensor(tgt), tgt_mask=causal, src_key_padding_mask=torch.tensor(pad))
    yl = ours(sl, Tensor(tgt), tgt_mask=nn.Transformer.generate_square_subsequent_mask(4),
              src_key_padding_mask=Tensor(pad))  # fmt: skip
    np.testing.assert_allclose(yl.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    yt.square().sum().backward()
    yl.square().sum().backward()
    np.testing.assert_allclose(sl.grad.numpy(), st.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_an_encoder_starts_every_layer_as_a_copy_and_trains_them_apart():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 3)
    w = [layer.linear1.weight for layer in enc.layers]
    assert len({id(t) for t in w}) == 3
    assert all(np.array_equal(t.numpy(), w[0].numpy()) for t in w)


def test_print_model_shows_layers_as_torch_prints_them():
    for make in (
        lambda m: m.LayerNorm(16),
        lambda m: m.LayerNorm((4, 5), eps=1e-6, bias=False),
        lambda m: m.Embedding(11, 16),
        lambda m: m.Embedding(5, 3, padding_idx=0),
        lambda m: m.Conv2d(1, 4, 3, padding=1, bias=False),
        lambda m: m.Conv2d(3, 8, (3, 5), stride=2),
        lambda m: m.Conv1d(2, 3, 3, dilation=2, groups=1),
        lambda m: m.Linear(3, 4),
        lambda m: m.GRU(3, 4, bidirectional=True),
    ):
        assert repr(make(nn)) == repr(make(torch.nn))


def test_embedding_padding_row_starts_at_zero_and_takes_no_gradient():
    emb = nn.Embedding(4, 3, padding_idx=1)
    assert not emb.weight.numpy()[1].any()
    emb(Tensor([[1, 2, 1]])).sum().backward()
    g = emb.weight.grad.numpy()
    assert not g[1].any() and (g[2] == 1).all()


def test_parameters_is_a_generator_as_in_torch():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    params = model.parameters()
    assert next(params) is model[0].weight and len(list(params)) == 3


# ---- limn.utils.data ----------------------------------------------------------------


def test_a_dataloader_batches_shuffles_by_a_seed_and_drops_the_last():
    x = Tensor(np.arange(20, dtype=np.float32).reshape(10, 2))
    y = Tensor(np.arange(10))
    ds = TensorDataset(x, y)
    batches = list(DataLoader(ds, batch_size=4))
    assert [b[0].shape for b in batches] == [(4, 2), (4, 2), (2, 2)]
    assert batches[1][1].tolist() == [4, 5, 6, 7]
    loader = DataLoader(ds, batch_size=3, shuffle=True, drop_last=True,
                        generator=Generator().manual_seed(7))  # fmt: skip
    first = [b[1].tolist() for b in loader]
    assert len(loader) == 3 == len(first) and all(len(b) == 3 for b in first)
    again = DataLoader(ds, batch_size=3, shuffle=True, drop_last=True,
                       generator=Generator().manual_seed(7))  # fmt: skip
    assert [b[1].tolist() for b in again] == first
    assert sorted(i for b in first for i in b) != list(range(9)) or first != [[0, 1, 2]]
    dicts = DataLoader([{"a": np.ones(2, np.float32) * i, "b": i} for i in range(5)], batch_size=2)
    batch = next(iter(dicts))
    assert batch["a"].shape == (2, 2) and batch["b"].tolist() == [0, 1]
    with pytest.raises(TypeError, match="cannot batch a object"):
        next(iter(DataLoader([object(), object()], batch_size=2)))


def test_random_split_gives_disjoint_subsets_by_counts_or_fractions():
    parts = random_split(range(10), [0.5, 0.3, 0.2], generator=Generator().manual_seed(1))
    assert [len(p) for p in parts] == [5, 3, 2] and all(isinstance(p, Subset) for p in parts)
    seen = sorted(p[i] for p in parts for i in range(len(p)))
    assert seen == list(range(10))
    with pytest.raises(ValueError, match="summing to the dataset's length 10"):
        random_split(range(10), [3, 3])


# ---- stand-ins ----------------------------------------------------------------------


def test_the_stand_ins_answer_for_a_cpu_and_say_what_they_are():
    assert (
        limn.accelerator.is_available() is False and limn.accelerator.current_accelerator() is None
    )
    limn.cuda.manual_seed_all(3)
    a = limn.randn(2).tolist()
    limn.manual_seed(3)
    assert limn.randn(2).tolist() == a
    with pytest.raises(AttributeError, match="module 'limn.cuda' has no attribute 'Stream'"):
        limn.cuda.Stream  # noqa: B018
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        limn.amp._warned.clear()
        scaler = limn.cuda.amp.GradScaler(enabled=True)
        with limn.amp.autocast(device_type="cpu", dtype=limn.bfloat16):
            loss = Tensor([2.0], requires_grad=True).sum()
    assert any("no-op" in str(w.message) for w in caught)
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0
    limn.backends.cuda.matmul.allow_tf32 = True
    assert limn.backends.cuda.matmul.allow_tf32 and not limn.backends.mps.is_available()
    with pytest.raises(NotImplementedError, match="limn does not write ONNX"):
        limn.onnx.export(None, None, "m.onnx")
    assert limn.compile(model := nn.Linear(2, 2)) is model


def test_distributed_data_parallel_wraps_a_one_process_model_under_module():
    model = nn.Linear(2, 3)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[0])
    assert ddp.module is model and ddp(Tensor([[1.0, 2.0]])).shape == (1, 3)
    assert list(ddp.state_dict()) == ["module.weight", "module.bias"]


def test_torch_style_imports_of_the_stand_ins_work():
    code = (
        "from limn.utils.data import DataLoader, Dataset, TensorDataset, random_split\n"
        "from limn.nn.parallel import DistributedDataParallel as DDP\n"
        "from limn.cuda.amp import GradScaler\n"
        "import limn.backends, limn.onnx, limn.accelerator\n"
        "import limn as torch\n"
        "print(torch.utils.data.DataLoader is DataLoader, torch.amp.autocast)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("True"), out.stderr


# ---- generate -------------------------------------------------------------------------


class TupleLM(nn.Module):
    """nanoGPT's shape: forward(idx, targets=None) -> (logits, loss); without targets the
    logits of the last position alone, (B, 1, V)."""

    def __init__(self, vocab=7, d=8):
        self.tok, self.head, self.block_size = nn.Embedding(vocab, d), nn.Linear(d, vocab), 4

    def forward(self, idx, targets=None):
        logits = self.head(self.tok(idx).cumsum(1))
        return (logits[:, -1:, :], None) if targets is None else (logits, None)


def test_generate_samples_a_model_that_returns_logits_and_loss():
    limn.manual_seed(0)
    model = TupleLM()
    out = limn.generate(model, Tensor([[1, 2], [3, 4]]), 5, temperature=0)
    assert out.shape == (2, 7)
    idx = Tensor([[1, 2], [3, 4]])
    for _ in range(5):  # the same greedy loop by hand
        logits, _ = model(idx[:, -4:])
        idx = limn.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert out.tolist() == idx.tolist()
    with pytest.raises(ValueError, match="prompts of a batch must have one length"):
        limn.generate(model, [[1, 2], [3]], 2)


FORK = """
import multiprocessing as mp
import math

import numpy as np
from limn import Tensor

def work(q):
    a = Tensor(np.ones((256, 256), np.float32), device="c")
    q.put((a @ a).sum().item())

if __name__ == "__main__":
    a = Tensor(np.ones((256, 256), np.float32), device="c")
    first = (a @ a).sum().item()  # the parent's OpenMP team starts here
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=work, args=(q,))
    p.start()
    p.join(60)
    print(p.exitcode, q.get(timeout=5) == first)
"""


def test_a_process_forked_after_a_threaded_kernel_runs_kernels_in_the_child(tmp_path):
    path = tmp_path / "fork.py"
    path.write_text(FORK)
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert out.stdout.split() == ["0", "True"], out.stderr[-2000:]


# ---- the layers of round 3 (issue 50): each loads torch's weights, gives its numbers ------


def _same_as_torch(theirs, ours, x: np.ndarray, *extra, rtol=1e-4, atol=1e-5):
    """``ours`` loads ``theirs``' state dict by torch's names; the forward, the input's
    gradient and every parameter's gradient agree (the loss weights each output)."""
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    xt, xl = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    yt, yl = theirs(xt, *extra), ours(xl, *extra)
    w = np.random.default_rng(1).standard_normal(tuple(yt.shape)).astype(np.float32)
    (yt * torch.tensor(w)).sum().backward()
    (yl * Tensor(w)).sum().backward()
    np.testing.assert_allclose(yl.numpy(), yt.detach().numpy(), rtol, atol)
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol, atol)
    grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[name].grad.numpy(), rtol, atol, name)
    return yl


CONV_T_CASES = [
    (1, {}),
    (1, {"stride": 3, "padding": 2, "output_padding": 1, "dilation": 2}),
    (2, {"stride": 2, "padding": 1, "bias": False}),
    (2, {"stride": (2, 1), "padding": (0, 1), "output_padding": (1, 0), "groups": 2}),
    (2, {"stride": 2, "padding": 1, "output_padding": 1, "dilation": (1, 2), "groups": 2}),
    (3, {"stride": 2, "padding": 1, "output_padding": 1}),
]


@pytest.mark.parametrize("n,kw", CONV_T_CASES, ids=[f"{n}d-{kw}" for n, kw in CONV_T_CASES])
def test_transposed_convolutions_load_torchs_weights_and_give_its_outputs_and_gradients(n, kw):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, f"ConvTranspose{n}d")(4, 6, 3, **kw)
    ours = getattr(nn, f"ConvTranspose{n}d")(4, 6, 3, **kw)
    assert ours.weight.shape == tuple(theirs.weight.shape)  # (in, out/groups, *k)
    x = np.random.default_rng(0).standard_normal((2, 4) + (5, 4, 3)[:n]).astype(np.float32)
    _same_as_torch(theirs, ours, x)
    assert repr(ours) == repr(theirs)


def test_a_transposed_convolution_takes_output_size_and_refuses_what_torch_refuses():
    torch.manual_seed(0)
    theirs, ours = torch.nn.ConvTranspose2d(3, 2, 3, stride=2), nn.ConvTranspose2d(3, 2, 3, 2)
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    y = _same_as_torch(theirs, ours, x, (10, 10))
    assert y.shape == (1, 2, 10, 10)
    with pytest.raises(ValueError, match="ConvTranspose2d: output_size .* not reachable"):
        ours(Tensor(x), (12, 12))
    with pytest.raises(ValueError, match="output_padding .* smaller than stride"):
        nn.functional.conv_transpose2d(Tensor(x), ours.weight, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="conv_transpose2d: input .* 5 channels"):
        nn.functional.conv_transpose2d(Tensor(np.zeros((1, 5, 4, 4), np.float32)), ours.weight)
    got = nn.functional.conv_transpose1d(Tensor(x[0, :, 0]), ours.weight[..., 0], stride=2)
    want = torch.nn.functional.conv_transpose1d(
        torch.tensor(x[0, :, 0]), theirs.weight[..., 0].detach(), stride=2
    )
    np.testing.assert_allclose(got.numpy(), want.numpy(), 1e-5, 1e-6)  # unbatched


CELLS = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("GRUCell", {}),
         ("LSTMCell", {}), ("GRUCell", {"bias": False}), ("LSTMCell", {"bias": False})]  # fmt: skip


@pytest.mark.parametrize("kind,kw", CELLS, ids=[f"{k}-{v}" for k, v in CELLS])
def test_recurrent_cells_step_as_torchs_batched_and_unbatched(kind, kw):
    torch.manual_seed(0)
    theirs, ours = getattr(torch.nn, kind)(5, 4, **kw), getattr(nn, kind)(5, 4, **kw)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    h = rng.standard_normal((3, 4)).astype(np.float32)
    lstm = kind == "LSTMCell"
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    outs = []
    for cell, mod in ((theirs, torch), (ours, limn)):  # two steps, the second from the first
        xs = mod.tensor(x, requires_grad=True)
        s = cell(xs, (mod.tensor(h), mod.tensor(h * 0.5)) if lstm else mod.tensor(h))
        s = cell(xs * 2, s)
        ((s[0] + 3 * s[1] if lstm else s) ** 2).sum().backward()
        grads = [xs.grad] + [p.grad for _, p in cell.named_parameters()]
        outs.append([s[0], s[1]] if lstm else [s])
        outs[-1] += grads
    for want, got in zip(*outs):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), 1e-4, 1e-5)
    # unbatched: (input,) and (hidden,), the state made of zeros when not given
    one = ours(Tensor(x[0]))
    want = theirs(torch.tensor(x[0]))
    for got, w in zip(one if lstm else [one], want if lstm else [want]):
        assert got.shape == (4,)
        np.testing.assert_allclose(got.numpy(), w.detach().numpy(), 1e-5, 1e-6)
    assert repr(ours) == repr(theirs)
    with pytest.raises(ValueError, match=f"{kind}: input must be"):
        ours(Tensor(x[:, :3]))


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.GroupNorm(2, 6),
        lambda m: m.GroupNorm(3, 6, eps=1e-3, affine=False),
        lambda m: m.InstanceNorm1d(6),
        lambda m: m.InstanceNorm2d(6, affine=True),
        lambda m: m.InstanceNorm3d(6, affine=True, track_running_stats=True),
    ],
    ids=["group", "group-plain", "instance1d", "instance2d-affine", "instance3d-tracked"],
)
def test_group_and_instance_norms_give_torchs_outputs_gradients_and_statistics(make):
    torch.manual_seed(0)
    theirs, ours = make(torch.nn), make(nn)
    if theirs.weight is not None:  # away from ones and zeros, so a swapped one shows
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-0.5, 0.5)
    dims = {"InstanceNorm1d": 1, "InstanceNorm2d": 2}.get(type(theirs).__name__, 3)
    x = np.random.default_rng(0).standard_normal((2, 6) + (5, 4, 3)[:dims]) * 2 + 1
    _same_as_torch(theirs, ours, x.astype(np.float32))
    for name, buf in theirs.named_buffers():
        np.testing.assert_allclose(getattr(ours, name).numpy(), buf.numpy(), 1e-5, 1e-6)
    assert repr(ours) == repr(theirs)
    if getattr(theirs, "track_running_stats", False):  # eval: the running statistics
        theirs.eval(), ours.eval()
        want = theirs(torch.tensor(x, dtype=torch.float32)).detach().numpy()
        np.testing.assert_allclose(ours(Tensor(x.astype(np.float32))).numpy(), want, 1e-4, 1e-5)


def test_an_unbatched_instance_norm_and_a_group_norm_of_the_wrong_width_answer_as_torch():
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    want = torch.nn.InstanceNorm1d(6)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(nn.InstanceNorm1d(6)(Tensor(x)).numpy(), want, 1e-5, 1e-6)
    with pytest.raises(ValueError, match="GroupNorm: num_channels=5 must be divisible"):
        nn.GroupNorm(2, 5)
    with pytest.raises(ValueError, match=r"GroupNorm: input must be \(N, 6, \*\)"):
        nn.GroupNorm(2, 6)(Tensor(np.zeros((2, 4, 3), np.float32)))


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"reduction": "none"}, "weight"])
def test_bce_loss_is_torchs(kw):
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 0.99, (4, 3)).astype(np.float32)
    y = (rng.random((4, 3)) > 0.5).astype(np.float32)
    w = rng.uniform(0.5, 2, (3,)).astype(np.float32)
    theirs = torch.nn.BCELoss(torch.tensor(w)) if kw == "weight" else torch.nn.BCELoss(**kw)
    ours = nn.BCELoss(Tensor(w)) if kw == "weight" else nn.BCELoss(**kw)
    pt, pl = torch.tensor(p, requires_grad=True), Tensor(p, requires_grad=True)
    lt, ll = theirs(pt, torch.tensor(y)), ours(pl, Tensor(y))
    lt.sum().backward(), ll.sum().backward()
    np.testing.assert_allclose(ll.numpy(), lt.detach().numpy(), 1e-5, 1e-6)
    np.testing.assert_allclose(pl.grad.numpy(), pt.grad.numpy(), 1e-5, 1e-6)


def test_linear_sizes_double_positional_inplace_and_numpy_integer_indices():
    lin = nn.Linear(3, 5)
    assert (lin.in_features, lin.out_features) == (3, 5)
    assert "in_features" not in lin.state_dict()
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).double()
    assert model[0].weight.dtype == limn.float64 and model[1].running_mean.dtype == limn.float64
    assert model[1].num_batches_tracked.dtype == limn.int64  # integers stay, as in torch
    x = np.array([[-1.0, 2.0], [0.5, -3.0]], np.float32)
    for make in (lambda m: m.ReLU(True), lambda m: m.LeakyReLU(0.2, True),
                 lambda m: m.SiLU(True), lambda m: m.ReLU(inplace=True)):  # fmt: skip
        want = make(torch.nn)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(make(nn)(Tensor(x)).numpy(), want, 1e-6)
    t = limn.arange(12).reshape(3, 4)
    assert t[np.int64(1)].tolist() == [4, 5, 6, 7]
    assert t[np.int32(-1), np.int64(2)].item() == 10
    assert t[np.int64(1)].tolist() == torch.arange(12).reshape(3, 4)[np.int64(1)].tolist()


# ---- torch's module tree, names and generators (issue 50) -------------------------------

TORCH_PATHS = [  # what the six programs of issue 50 (and their kin) import, as torch spells it
    ("import torch.backends.cudnn as cudnn", "cudnn.benchmark = True"),
    ("from torch.utils.data.dataloader import DataLoader", "DataLoader"),
    ("from torch.utils.data.dataset import Dataset, TensorDataset, random_split", "Dataset"),
    ("from torch.utils.data.sampler import RandomSampler, BatchSampler", "RandomSampler"),
    ("from torch.utils.data import DataLoader, Dataset, Subset", "Subset"),
    ("import torch.nn.functional as F", "F.relu"),
    ("from torch.nn.utils import clip_grad_norm_", "clip_grad_norm_"),
    ("import torch.nn.init as init", "init.normal_"),
    ("from torch.nn.parallel import DistributedDataParallel as DDP", "DDP"),
    ("import torch.optim.lr_scheduler as sched", "sched.StepLR"),
    ("import torch.version", "torch.version.__version__ and torch.version.cuda is None"),
    ("from torch import __version__", "__version__"),
    ("import torch._inductor.config as config", "config.coordinate_descent_tuning = True"),
    ("from torch.distributed import init_process_group, destroy_process_group",
     "init_process_group"),
    ("from torch.distributed.optim import ZeroRedundancyOptimizer", "ZeroRedundancyOptimizer"),
    ("import torch.distributed as dist", "dist.is_initialized() is False"),
    ("import torch.cuda.amp", "torch.cuda.amp.GradScaler"),
    ("import torch.backends.cuda, torch.backends.mps", "torch.backends.mps.is_available()"),
]  # fmt: skip


def test_torchs_import_paths_are_limns_modules():
    """Every line runs in torch, then with ``torch`` spelled ``limn`` (one process each)."""
    for lib in ("torch", "limn"):
        lines = [f"import {lib} as torch"]
        for line, use in TORCH_PATHS:
            lines += [f"try:\n    {line.replace('torch', lib)}\n    {use}",
                      f"except Exception as e:\n    print({line!r}, repr(e))"]  # fmt: skip
        code = "\n".join(lines)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 0 and not out.stdout, (lib, out.stdout, out.stderr[-2000:])


def test_a_missing_torch_name_says_so_in_torchs_terms_never_a_limn_internal():
    cases = [
        ("version2", "torch.version2 is not in limn.*did you mean limn.version\\?"),
        ("Generatr", "did you mean limn.Generator\\?"),
        ("jit", "torch.jit is not in limn; limn compiles every realize already"),
        ("zeross", "did you mean limn.zeros\\?"),
    ]
    for name, said in cases:
        with pytest.raises(AttributeError, match=said) as caught:
            getattr(limn, name)
        assert caught.value.name == name  # so Python adds no "Did you mean" of its own
    code = "import limn\nlimn.versio\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    last = out.stderr.strip().splitlines()[-1]
    assert "versions" not in last and "torch.versio is not in limn" in last, last
    with pytest.raises(AttributeError, match="torch.cuda.Stream is not in limn"):
        limn.cuda.Stream  # noqa: B018
    with pytest.raises(
        AttributeError, match="torch.fft.rfft is not in limn; its result is complex"
    ):
        limn.fft.rfft  # noqa: B018
    with pytest.raises(AttributeError, match="did you mean limn.fft.fftshift\\?"):
        limn.fft.fftshit  # noqa: B018
    assert limn.version is not limn.versions and limn.__version__ == limn.version.__version__


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_fft_sample_frequencies_are_torchs(n):
    for d in (1.0, 0.25):
        for ours, theirs in (
            (limn.fft.fftfreq, torch.fft.fftfreq),
            (limn.fft.rfftfreq, torch.fft.rfftfreq),
        ):
            np.testing.assert_array_equal(ours(n, d).numpy(), theirs(n, d).numpy())
        got = limn.fft.fftfreq(n, d, dtype=limn.float64)
        assert got.dtype == limn.float64
        np.testing.assert_allclose(
            got.numpy(), torch.fft.fftfreq(n, d, dtype=torch.float64).numpy()
        )


def test_a_device_prints_as_torchs_and_is_the_name_its_tensors_carry():
    d = limn.device("cpu")
    assert (str(d), repr(d), f"{d}", d.type, d.index) == (
        str(torch.device("cpu")), repr(torch.device("cpu")), "cpu", "cpu", None,
    )  # fmt: skip
    assert limn.ones(2, device=d).device == d and limn.ones(2).to(d).device == d
    assert limn.device(d) is d
    with pytest.raises(ValueError, match="device: unknown device 'tpu'"):
        limn.device("tpu")


def test_a_generator_gives_the_same_draws_for_the_same_seed_apart_from_the_global_one():
    draws = [
        lambda g: limn.randn(3, 2, generator=g), lambda g: limn.rand(4, generator=g),
        lambda g: limn.randint(0, 10, (5,), generator=g), lambda g: limn.randperm(6, generator=g),
        lambda g: limn.multinomial(limn.ones(5), 3, generator=g),
        lambda g: limn.multinomial(limn.ones(2, 5), 4, replacement=True, generator=g),
        lambda g: limn.normal(0.0, 1.0, (3,), generator=g),
        lambda g: limn.full((6,), 0.5).bernoulli(generator=g),
        lambda g: nn.init.normal_(Tensor(np.zeros((2, 3), np.float32)), generator=g),
        lambda g: nn.init.uniform_(Tensor(np.zeros((2, 3), np.float32)), generator=g),
        lambda g: nn.init.xavier_uniform_(Tensor(np.zeros((2, 3), np.float32)), generator=g),
        lambda g: nn.init.kaiming_normal_(Tensor(np.zeros((2, 3), np.float32)), generator=g),
        lambda g: nn.init.trunc_normal_(Tensor(np.zeros((2, 3), np.float32)), generator=g),
    ]  # fmt: skip
    for draw in draws:
        g = limn.Generator().manual_seed(7)
        limn.manual_seed(0)
        first = draw(g).tolist()
        g.manual_seed(7)
        limn.manual_seed(1)  # the global stream moved elsewhere: no effect on g's draws
        assert draw(g).tolist() == first
    g = limn.Generator().manual_seed(7)
    a, b = limn.randn(8, generator=g).tolist(), limn.randn(8, generator=g).tolist()
    assert a != b and g.initial_seed() == 7
    limn.manual_seed(5)
    plain = limn.randn(3).tolist()
    limn.manual_seed(5)
    limn.randn(4, generator=limn.Generator().manual_seed(1))  # draws from g only
    assert limn.randn(3).tolist() != plain  # making a Generator seeds it from the global one
    for fn in (torch.randn, torch.rand, torch.randint, torch.randperm, torch.multinomial,
               torch.nn.init.normal_, torch.nn.init.kaiming_uniform_):  # fmt: skip
        assert "generator" in str(fn.__doc__) or "generator" in str(inspect.signature(fn))
    with pytest.raises(TypeError, match="randn: generator must be a limn.Generator"):
        limn.randn(2, generator=np.random.default_rng(0))
    assert limn.utils.data.Generator is limn.Generator


def test_torchs_process_group_calls_refuse_before_init_and_zero_is_the_optimizer_itself():
    import limn.distributed as dist

    if dist.is_initialized():
        pytest.skip("a world was started by an earlier test")
    for call in (dist.get_rank, dist.get_world_size, dist.barrier):
        with pytest.raises(ValueError, match="process group has not been initialized"):
            call()
    with pytest.raises(ValueError, match="all_reduce: op must be ReduceOp.SUM or ReduceOp.AVG"):
        dist.all_reduce(limn.ones(2), op="max")
    model = nn.Linear(2, 2)
    zero = dist.optim.ZeroRedundancyOptimizer(model.parameters(), limn.optim.AdamW, lr=0.1)
    assert isinstance(zero, limn.optim.AdamW) and zero.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize(
    "fn, shape, channels",
    [
        (lambda x: limn.nn.functional.dropout1d(x, 0.5), (4, 6, 5), 2),
        (lambda x: limn.nn.functional.dropout2d(x, 0.5), (4, 6, 3, 3), 2),
        (lambda x: limn.nn.functional.dropout2d(x, 0.5), (6, 3, 3), 2),  # taken as (N, C, L)
        (lambda x: limn.nn.functional.dropout3d(x, 0.5), (6, 2, 2, 2), 1),  # unbatched
        (lambda x: limn.nn.functional.feature_alpha_dropout(x, 0.5, True), (4, 6, 3), 2),
        (lambda x: limn.nn.Dropout2d(0.5)(x), (4, 6, 3, 3), 2),
    ],
)
def test_channel_dropouts_drop_whole_channels_and_keep_some(fn, shape, channels):
    limn.manual_seed(3)
    y = fn(limn.ones(*shape)).numpy().reshape(math.prod(shape[:channels]), -1)
    assert (y == y[:, :1]).all(), "a channel mixes kept and dropped elements"
    assert len(np.unique(y[:, 0])) == 2, "every channel was dropped, or none"


def test_native_norms_give_torchs_statistics_and_batch_norm_writes_its_running_ones():
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    lx, tx = limn.tensor(x), torch.from_numpy(x)
    pairs = [
        (limn.native_layer_norm, torch.native_layer_norm, ((5,), None, None, 1e-5)),
        (limn.native_group_norm, torch.native_group_norm, (None, None, 3, 4, 5, 2, 1e-5)),
    ]
    for ours, theirs, args in pairs:
        got, want = ours(lx, *args), theirs(tx, *args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    rm, rv = limn.zeros(4), limn.ones(4)
    trm, trv = torch.zeros(4), torch.ones(4)
    got = limn.native_batch_norm(lx, None, None, rm, rv, True, 0.1, 1e-5)
    want = torch.native_batch_norm(tx, None, None, trm, trv, True, 0.1, 1e-5)
    for g, w in zip([*got, rm, rv], [*want, trm, trv]):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_interpolate_refuses_what_torch_refuses_naming_the_op():
    x = limn.ones(1, 1, 4, 4)
    cases = [
        (dict(size=2, mode="nearest", align_corners=True), "align_corners is for"),
        (dict(size=2, scale_factor=2.0), "give exactly one of size and scale_factor"),
        (dict(size=2, mode="linear"), "mode 'linear' needs a 3-d input"),
        (dict(size=2, mode="cubic"), "mode 'cubic' is not one of"),
    ]
    for kwargs, said in cases:
        with pytest.raises(ValueError, match=f"interpolate: {said}"):
            limn.nn.functional.interpolate(x, **kwargs)
        with pytest.raises(Exception):  # noqa: B017  (torch refuses each too)
            torch.nn.functional.interpolate(torch.ones(1, 1, 4, 4), **kwargs)
