"""torch's names on limn, checked by running the same code on both.

Each case below is one function of a namespace ``m`` and a tensor: it runs once with
``m = torch`` on a torch tensor and once with ``m = limn`` on a limn Tensor, and the two
must agree in value and in the gradient of a random upstream gradient. Then the devices a
user names, the namespace after ``import limn``, and a torch GPT training script run on
limn with its imports changed and nothing else (``examples/torch_gpt.py``).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import limn
from limn import Tensor, nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
X[0, 0, 0] = 0.0

SAME_CODE = {
    "sum dim": lambda m, x: x.sum(dim=1),
    "sum dims keepdim": lambda m, x: x.sum(dim=(0, 2), keepdim=True),
    "mean dim": lambda m, x: x.mean(dim=-1, keepdim=True),
    "var unbiased": lambda m, x: x.var(dim=-1, unbiased=False),
    "std dim": lambda m, x: x.std(dim=1),
    "max dim values": lambda m, x: x.max(dim=1).values,
    "min dim values": lambda m, x: x.min(dim=-1, keepdim=True)[0],
    "amax": lambda m, x: x.amax(dim=(1, 2)),
    "logsumexp": lambda m, x: x.logsumexp(dim=-1),
    "softmax dim": lambda m, x: m.softmax(x, dim=-1),
    "log_softmax": lambda m, x: x.log_softmax(dim=1),
    "cumsum dim": lambda m, x: x.cumsum(dim=2),
    "norm": lambda m, x: x.norm(dim=-1),
    "norm all": lambda m, x: x.norm(),
    "clone": lambda m, x: x.clone() * 2,
    "masked_fill": lambda m, x: x.masked_fill(x > 0.5, float("-inf")).softmax(-1),
    "masked_fill tensor mask": lambda m, x: x.masked_fill(m.tril(m.ones(3, 4)) == 0, 0.0),
    "tril": lambda m, x: x.tril(),
    "triu 1": lambda m, x: m.triu(x, 1),
    "tril -1": lambda m, x: m.tril(x, diagonal=-1),
    "einsum batched matmul": lambda m, x: m.einsum("bij,bkj->bik", x, x),
    "einsum outer": lambda m, x: m.einsum("i,j->ij", x[0, 0], x[1, 1]),
    "einsum implicit": lambda m, x: m.einsum("ij,jk", x[0], x[1].T),
    "einsum trace of product": lambda m, x: m.einsum("ij,ji->", x[0], x[1].T),
    "bool mask": lambda m, x: x[x > 0],
    "bool mask rows": lambda m, x: x[(x > 0).any(-1)],
    "int tensor": lambda m, x: x[m.tensor([1, 0, 1])],
    "int tensor dim 1": lambda m, x: x[:, m.tensor([2, 0])],
    "int tensors apart": lambda m, x: x[m.tensor([0, 1]), :, m.tensor([3, -2])],
    "int tensors adjacent": lambda m, x: x[:, m.tensor([0, 1]), m.tensor([3, 2])],
    "list": lambda m, x: x[[1, 0]],
    "index_select": lambda m, x: x.index_select(2, m.tensor([3, 3, 0])),
    "view": lambda m, x: x.view(-1, 4),
    "view tuple": lambda m, x: x.view((6, 4)),
    "view_as": lambda m, x: x.view_as(x[0].reshape(12, 1).expand(12, 2)),
    "permute": lambda m, x: x.permute(2, 0, 1),
    "permute tuple": lambda m, x: x.permute((1, 2, 0)),
    "transpose": lambda m, x: x.transpose(0, 2),
    "t": lambda m, x: x[0].t(),
    "flatten": lambda m, x: x.flatten(1),
    "flatten range": lambda m, x: m.flatten(x, 0, 1),
    "unflatten": lambda m, x: x.unflatten(2, (2, 2)),
    "unsqueeze": lambda m, x: x.unsqueeze(dim=1),
    "squeeze": lambda m, x: x[:, :1].squeeze(1),
    "chunk": lambda m, x: x.chunk(2, dim=-1)[1],
    "chunk uneven": lambda m, x: x.chunk(2, dim=1)[1],
    "split": lambda m, x: x.split([1, 3], dim=-1)[1],
    "split size": lambda m, x: x.split(2, dim=2)[0],
    "unbind": lambda m, x: x.unbind(1)[2],
    "expand_as": lambda m, x: x[:, :1].expand_as(x),
    "cat dim": lambda m, x: m.cat([x, x * 2], dim=1),
    "stack dim": lambda m, x: m.stack([x, x], dim=-1),
    "topk": lambda m, x: x.topk(2, dim=-1).values,
    "sort descending": lambda m, x: x.sort(dim=1, descending=True).values,
    "argsort": lambda m, x: x + x.argsort(dim=-1),
    "where": lambda m, x: m.where(x > 0, x, x * 0.1),
    "functions": lambda m, x: m.exp(x) + m.sqrt(m.abs(x)) + m.tanh(x) + m.sigmoid(x),
    "matmul": lambda m, x: m.matmul(x, x.transpose(-2, -1)),
    "pow 2": lambda m, x: x**2,
    "pow 3": lambda m, x: x**3,
    "pow 0": lambda m, x: x**0,
    "pow 1": lambda m, x: x**1,
    "pow -1": lambda m, x: x**-1,
    "pow half of abs": lambda m, x: x.abs() ** 0.5,
    "sub and div aliases": lambda m, x: x.sub(1).div(2).mul(3).add(4).neg(),
}


@pytest.mark.parametrize("case", SAME_CODE)
def test_the_same_code_gives_torchs_values_and_gradients(case):
    xt = torch.tensor(X, requires_grad=True)
    xl = Tensor(X, requires_grad=True)
    want, got = SAME_CODE[case](torch, xt), SAME_CODE[case](limn, xl)
    assert got.shape == tuple(want.shape) and str(got.dtype) == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    if not want.requires_grad:
        return
    g = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    want.backward(torch.tensor(g))
    got.backward(Tensor(g))
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x", [0.0, -0.0, 2.0, -3.0, np.inf, -np.inf, np.nan], ids=str)
@pytest.mark.parametrize("y", [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, 2.5])
def test_the_gradient_of_x_to_a_constant_power_matches_torch_at_special_values(x, y):
    xt = torch.tensor([x], requires_grad=True)
    xl = Tensor([x], requires_grad=True)
    (xt**y).sum().backward()
    (xl**y).sum().backward()
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=1e-6, equal_nan=True)


def test_the_gradient_of_a_square_is_a_small_graph():
    for f in (lambda x: x**2, lambda x: x * x):
        x = Tensor([1.0, 2.0], requires_grad=True)
        f(x).sum().backward()
        assert len(x.grad.graph().splitlines()) <= 8  # 61 before the constant-power rule
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x**2.5).sum().backward()
    assert len(x.grad.graph().splitlines()) <= 10


def test_max_and_min_by_dim_give_torchs_values_and_indices():
    got, want = Tensor(X).max(dim=1), torch.tensor(X).max(dim=1)
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    values, indices = Tensor(X).min(dim=-1)
    np.testing.assert_array_equal(indices.numpy(), torch.tensor(X).min(dim=-1).indices.numpy())
    assert Tensor(X).max(1).values.shape == (2, 4)  # positional too, as torch's
    assert Tensor(X).max(axis=1).shape == (2, 4)  # limn's axis=: the values, as amax


def test_assignment_through_an_index_or_a_mask_matches_torch():
    got, want = Tensor(X).contiguous().realize(), torch.tensor(X)
    for key, value in [((0, 1), 5.0), ((slice(None), 2), -1.0), ((1, ..., 3), 7.0)]:
        got[key], want[key] = value, value
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    got[got > 0], want[want > 0] = 0.0, 0.0
    got[Tensor([True, False])] = Tensor([9.0])
    want[torch.tensor([True, False])] = torch.tensor([9.0])
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    got[Tensor([0])], want[torch.tensor([0])] = 1.0, 1.0  # an integer tensor writes its rows
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_in_place_methods_write_the_tensor_as_torch_does():
    got, want = Tensor(X).contiguous().realize(), torch.tensor(X)
    for call in [
        lambda t: t.mul_(2),
        lambda t: t.add_(1),
        lambda t: t.clamp_(-1, 1),
        lambda t: t.masked_fill_(t < 0, 0.5),
        lambda t: t.tril_(),
        lambda t: t.sub_(t * 0.5),
        lambda t: t.pow_(2),
        lambda t: t.fill_(3),
        lambda t: t.zero_(),
    ]:
        call(got), call(want)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    p = Tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.mul_(2)


def test_size_dim_and_numel_answer_as_in_torch():
    t = Tensor(X)
    assert t.size() == (2, 3, 4) and t.size(-1) == 4 and t.size == 24 and t.dim() == 3
    assert t.numel() == 24 and t.nelement() == 24
    b, c, d = t.size()
    assert (b, c, d) == (2, 3, 4)


def test_multinomial_draws_by_the_weights():
    limn.manual_seed(0)
    probs = Tensor([[0.0, 0.25, 0.75], [1.0, 0.0, 0.0]])
    draws = limn.multinomial(probs, 4000, replacement=True).numpy()
    assert draws.shape == (2, 4000) and (draws[1] == 0).all() and (draws[0] != 0).all()
    assert abs((draws[0] == 2).mean() - 0.75) < 0.03
    assert limn.multinomial(probs, num_samples=1).shape == (2, 1)


# ---- devices ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda d: Tensor([1.0], device=d),
        lambda d: limn.zeros(2, device=d),
        lambda d: limn.arange(3, device=d),
        lambda d: limn.randn(2, device=d),
        lambda d: limn.randint(0, 5, (2,), device=d),
        lambda d: limn.full((2,), 1.0, device=d),
    ],
)
def test_an_unknown_device_fails_where_the_tensor_is_made_naming_the_accepted_ones(make):
    with pytest.raises(
        ValueError, match=r"unknown device 'gpu'; accepted: (.*, )?c, cuda, numpy(, .*)? and 'cpu'"
    ):
        make("gpu")
    assert make("cpu").device == limn.runtime.device.resolve("cpu")


def test_to_moves_between_devices_and_dtypes_in_torchs_forms():
    x = Tensor([1.5, 2.5], requires_grad=True)
    assert x.to("c").device == "c" and x.to("numpy").device == "numpy"
    assert x.to("cpu").device == limn.runtime.device.resolve("cpu") == x.cpu().device
    assert x.to("float64").dtype == limn.float64 and x.double().dtype == limn.float64
    assert x.to(limn.long).tolist() == [1, 2]
    y = x.to("c", limn.float16)
    assert (y.device, y.dtype) == ("c", limn.float16)
    z = x.to(Tensor([1], dtype="int32", device="c"))
    assert (z.device, z.dtype) == ("c", limn.int32)
    assert x.to(dtype=limn.float64, device="c").device == "c"
    (x.to("c") * 3).sum().backward()  # a move between host devices keeps the gradient
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    with pytest.raises(TypeError, match="neither a device .* nor a dtype"):
        x.to("gpu")


def test_module_to_moves_every_tensor_in_place_and_keeps_the_optimizers_hold():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    opt = limn.optim.SGD(model.parameters(), lr=0.1)
    weight = model[0].weight
    model.to("c")
    assert {t.device for t in model.state_dict().values()} == {"c"}
    assert model[0].weight is weight and opt.params[0] is weight
    model.to(limn.float64)
    assert model[0].weight.dtype == limn.float64 and model[1].running_mean.dtype == limn.float64


def test_import_limn_makes_nn_and_optim_reachable():
    code = (
        "import limn; print(limn.nn.Linear(2, 3)(limn.ones(2)).shape, limn.optim.Adam, "
        "limn.nn.functional.relu, limn.optim.lr_scheduler.StepLR, limn.nn.init.normal_)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("(3,)"), out.stderr


def test_the_namespace_answers_torchs_names():
    assert limn.long is limn.int64 and limn.float is limn.float32 and limn.bool is limn.bool_
    assert limn.tensor is Tensor and limn.cuda.is_available() in (True, False)
    assert limn.zeros_like(Tensor([1.0, 2.0])).tolist() == [0.0, 0.0]
    assert limn.device("cpu") == limn.runtime.device.resolve("cpu")
    with pytest.raises(AttributeError, match="no attribute 'not_a_torch_name'"):
        limn.not_a_torch_name  # noqa: B018


# ---- a torch training script, ported by its imports ---------------------------------

PORT = [  # the diff that makes examples/torch_gpt.py a limn program
    ("import torch\n", "import limn as torch\n"),
    ("import torch.nn as nn\n", "import limn.nn as nn\n"),
    ("from torch.nn import functional as F\n", "from limn.nn import functional as F\n"),
]


def ported(text: str) -> str:
    for torch_line, limn_line in PORT:
        assert text.count(torch_line) == 1, torch_line
        text = text.replace(torch_line, limn_line)
    return text


def _run_script(text: str, tmp_path, name: str, device: str, steps: int = 12) -> list[float]:
    path = tmp_path / name
    path.write_text(text)
    data = os.path.join(ROOT, "examples", "data", "tinystories-sample.txt")
    env = {**os.environ, "PYTHONPATH": ROOT, "GPT_DATA": data, "GPT_DEVICE": device}
    env.update(GPT_STEPS=str(steps), GPT_EVAL="2", GPT_GEN="3")
    out = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    losses = [float(ln.split()[-1]) for ln in out.stdout.splitlines() if ln.startswith("step")]
    assert "generated:" in out.stdout
    return losses


def test_the_torch_gpt_script_runs_on_limn_with_only_its_imports_changed(tmp_path):
    text = open(os.path.join(ROOT, "examples", "torch_gpt.py")).read()
    limn_losses = _run_script(ported(text), tmp_path, "limn_gpt.py", "numpy")
    torch_losses = _run_script(text, tmp_path, "torch_gpt.py", "cpu")
    assert len(limn_losses) == len(torch_losses) == 2
    assert limn_losses[-1] < limn_losses[0] - 0.5  # it trains
    assert abs(limn_losses[0] - torch_losses[0]) < 0.1  # both start near ln(256)


@pytest.mark.slow
def test_the_ported_gpt_script_trains_on_the_cpu_device(tmp_path):
    text = ported(open(os.path.join(ROOT, "examples", "torch_gpt.py")).read())
    losses = _run_script(text, tmp_path, "limn_gpt.py", "cpu", steps=60)
    assert losses[-1] < losses[0] - 1.0


# ---- torch programs of three kinds, ported by their imports -------------------------
#
# Each program below is written for torch and runs twice, unchanged: with ``torch,
# torch.nn, torch.nn.functional`` and with ``limn, limn.nn, limn.nn.functional`` (the
# import swap), from the same initial weights (torch's, loaded by load_state_dict) and the
# same data. The losses, gradient norms, rates and weights must agree after every step.


def _both(program, *args):
    torch.manual_seed(0)
    init = {k: v.detach().numpy().copy() for k, v in program(torch, None, *args)[0].items()}
    theirs = program(torch, init, *args)
    ours = program(limn, init, *args)
    return ours, theirs


def _close(ours, theirs, tol=2e-4):
    assert set(ours[0]) == set(theirs[0])
    for k, v in theirs[0].items():
        np.testing.assert_allclose(ours[0][k], v, rtol=tol, atol=tol, err_msg=k)
    for a, b in zip(ours[1:], theirs[1:], strict=True):
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=tol, atol=tol)


def cnn_program(torch, init, data):
    """A small CNN: BatchNorm, Dropout, Adam and a StepLR. (Dropout is there at p=0: its
    masks come from each library's own generator. The conv has no bias, as usual before
    BatchNorm: that bias's gradient is rounding noise, which Adam scales to full steps.)"""
    nn, F = torch.nn, torch.nn.functional
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(p=0.0), nn.Linear(4 * 4 * 4, 3),
    )  # fmt: skip
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        losses.append(loss.item())
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        evals = model(torch.tensor(data[0][0])).numpy()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses, evals


def test_a_cnn_with_batchnorm_adam_and_steplr_follows_torch_step_for_step():
    rng = np.random.default_rng(11)
    data = [
        (rng.standard_normal((8, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 8))
        for _ in range(4)
    ]
    _close(*_both(cnn_program, data))


def char_lm_program(torch, init, ids, steps):
    """A character transformer: weight tying, decay / no-decay groups, clipping, a
    warmup-cosine LambdaLR, then greedy sampling by a loop over the cropped window."""
    nn, F = torch.nn, torch.nn.functional

    class CharLM(nn.Module):
        def __init__(self, vocab=11, d=16, heads=2, block_size=8):
            super().__init__()
            self.block_size, self.heads = block_size, heads
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
            self.ln1, self.ln2, self.ln_f = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            # no qkv bias: the keys' bias takes a gradient of rounding noise (softmax ignores
            # it), which AdamW scales to full steps on both sides
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, idx):
            B, T = idx.shape
            x = self.tok(idx) + self.pos(torch.arange(T))
            q, k, v = self.qkv(self.ln1(x)).split(x.size(-1), dim=2)
            q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, -1))
            x = x + self.mlp(self.ln2(x))
            return self.head(self.ln_f(x))

    model = CharLM()
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    params = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for _, p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for _, p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=3e-3, betas=(0.9, 0.95),
    )  # fmt: skip

    def warmup_cosine(s):
        return (s + 1) / 2 if s < 2 else 0.5 * (1 + math.cos(math.pi * (s - 2) / (steps - 2)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    log = []
    for s in range(steps):
        x = np.stack([ids[i : i + 8] for i in range(s, s + 4)])
        y = np.stack([ids[i + 1 : i + 9] for i in range(s, s + 4)])
        logits = model(torch.tensor(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), torch.tensor(y).view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        log.append([loss.item(), float(norm)] + [g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    model.eval()
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [7, 0, 7, 0, 9, 9, 9]])
    with torch.no_grad():
        for _ in range(4):  # windows of 7, then 8 cropped from 9 and more
            logits = model(idx[:, -model.block_size :])
            idx = torch.cat((idx, logits[:, -1, :].argmax(dim=-1, keepdim=True)), dim=1)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return state, log, idx.tolist(), model


def test_a_char_transformer_with_tying_groups_clipping_and_lambdalr_follows_torch():
    ids = np.random.default_rng(12).integers(0, 11, 40)
    ours, theirs = _both(char_lm_program, ids, 6)
    assert "head.weight" in ours[0] and ours[3].head.weight is ours[3].tok.weight
    _close(ours[:3], theirs[:3])
    assert ours[2] == theirs[2]  # greedy tokens, both prompts
    # limn.generate samples the same model by the same window (temperature 0: greedy)
    prompts = Tensor(np.array([[1, 2, 3, 4, 5, 6, 7], [7, 0, 7, 0, 9, 9, 9]]))
    assert limn.generate(ours[3], prompts, 4, temperature=0).tolist() == theirs[2]


def penalty_program(torch, init, data):
    """A regression with a gradient penalty: torch.autograd.grad(create_graph=True), then
    backward through a loss that includes the gradient's norm."""
    nn, F = torch.nn, torch.nn.functional
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    log = []
    for x, y in data:
        x = torch.tensor(x).requires_grad_(True)
        out = model(x)
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        assert all(p.grad is None for p in model.parameters())  # autograd.grad left them
        penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
        loss = F.mse_loss(out, torch.tensor(y)) + 0.1 * penalty
        loss.backward()
        log.append([loss.item(), penalty.item()])
        opt.step()
        opt.zero_grad()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, log


def test_a_gradient_penalty_regression_follows_torch_step_for_step():
    rng = np.random.default_rng(13)
    data = [
        (rng.standard_normal((6, 3)).astype(np.float32),
         rng.standard_normal((6, 1)).astype(np.float32))
        for _ in range(5)
    ]  # fmt: skip
    _close(*_both(penalty_program, data))


# ---- pytorch/examples' programs, in their own shapes ----------------------------------
#
# Small re-creations of pytorch/examples' mnist and word_language_model (LSTM and
# Transformer): their modules, data loading, optimizers and loops as written there, on tiny
# sizes and random data. Departures: dropout is 0 (each library draws its own masks); the
# word model steps ``optim.SGD`` where the original writes ``p.data.add_(p.grad,
# alpha=-lr)`` (the same update), and spells ``data.narrow(0, 0, n)`` as ``data[:n]`` and
# ``weight.new_zeros(...)`` as ``torch.zeros(..., dtype=weight.dtype)`` (names another
# change adds).


def mnist_program(torch, init, images, labels):
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, 1)
            self.conv2 = nn.Conv2d(4, 6, 3, 1)
            self.dropout1 = nn.Dropout(0.0)
            self.fc1 = nn.Linear(6 * 3 * 3, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            return F.log_softmax(self.fc2(x), dim=1)

    model = Net()
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    dataset = torch.utils.data.TensorDataset(torch.tensor(images), torch.tensor(labels))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    losses = []
    for _epoch in range(2):
        model.train()
        for data, target in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        test_loss = F.nll_loss(model(torch.tensor(images)), torch.tensor(labels), reduction="sum")
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses, test_loss.item()


def test_the_mnist_example_follows_torch_step_for_step():
    rng = np.random.default_rng(21)
    images = rng.standard_normal((12, 1, 10, 10)).astype(np.float32)
    _close(*_both(mnist_program, images, rng.integers(0, 10, 12)), tol=5e-4)


def word_lm_program(torch, init, ids, kind):
    nn, F = torch.nn, torch.nn.functional

    class RNNModel(nn.Module):
        def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.0):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            self.init_weights()
            self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output).view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if self.rnn_type == "LSTM":
                return (torch.zeros(self.nlayers, bsz, self.nhid, dtype=weight.dtype),
                        torch.zeros(self.nlayers, bsz, self.nhid, dtype=weight.dtype))  # fmt: skip
            return torch.zeros(self.nlayers, bsz, self.nhid, dtype=weight.dtype)

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.0, max_len=64):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            pe = torch.zeros(max_len, d_model)
            position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(1e4) / d_model))
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

        def forward(self, x):
            return self.dropout(x + self.pe[: x.size(0), :])

    class TransformerModel(nn.Transformer):
        def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.0):
            super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                             num_encoder_layers=nlayers, dropout=dropout)  # fmt: skip
            self.src_mask = None
            self.pos_encoder = PositionalEncoding(ninp, dropout)
            self.input_emb = nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = nn.Linear(ninp, ntoken)
            nn.init.uniform_(self.input_emb.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

        def forward(self, src, has_mask=True):
            if has_mask and (self.src_mask is None or self.src_mask.size(0) != len(src)):
                self.src_mask = torch.log(torch.tril(torch.ones(len(src), len(src))))
            src = self.pos_encoder(self.input_emb(src) * math.sqrt(self.ninp))
            output = self.decoder(self.encoder(src, mask=self.src_mask))
            return F.log_softmax(output, dim=-1)

    ntokens, bptt, bsz = 12, 5, 3
    if kind == "Transformer":
        model = TransformerModel(ntokens, 8, 2, 16, 2)
    else:
        model = RNNModel(kind, ntokens, 8, 8, 2)
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    data = torch.tensor(ids)
    nbatch = data.size(0) // bsz
    train_data = data[: nbatch * bsz].view(bsz, -1).t().contiguous()

    def get_batch(source, i):
        seq_len = min(bptt, len(source) - 1 - i)
        return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)

    def repackage_hidden(h):
        return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)

    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=2.0)
    model.train()
    hidden = None if kind == "Transformer" else model.init_hidden(bsz)
    losses = []
    for i in range(0, train_data.size(0) - 1, bptt):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        if kind == "Transformer":
            output = model(data).view(-1, ntokens)
        else:
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        losses.append(loss.item())
    # a Tensor attribute is state in limn (nothing is registered), so limn's state dict
    # also holds the cached mask, which torch keeps out as a plain attribute
    state = {k: v.detach().numpy() for k, v in model.state_dict().items() if k != "src_mask"}
    return state, losses


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "Transformer"])
def test_the_word_language_model_follows_torch_batch_for_batch(kind):
    ids = np.random.default_rng(22).integers(0, 12, 48)
    _close(*_both(word_lm_program, ids, kind), tol=5e-4)


# ---- makemore's recurrent models and nanoGPT's train.py, in their own shapes ---------
#
# makemore's RNN and GRU (cells of its own, over nn.Linear and torch.cat), its Dataset of
# words padded with -1 targets and its endless loader; nanoGPT's model (its names, tied
# head, special init, (logits, loss) forward) trained by train.py's loop: a GradScaler
# (disabled, as for float32), torch.compile, the backends flags, configure_optimizers'
# decay groups and its check for a fused AdamW, get_lr written into each group, clipping.
# Departures: the loaders walk the data in order (each library's random order is its own)
# and dropout is 0.


def makemore_program(torch, init, words, cell_type):
    nn, F = torch.nn, torch.nn.functional

    class CharDataset(torch.utils.data.Dataset):
        def __init__(self, words, chars, max_word_length):
            self.words, self.max_word_length = words, max_word_length
            self.stoi = {ch: i + 1 for i, ch in enumerate(chars)}

        def __len__(self):
            return len(self.words)

        def encode(self, word):
            return torch.tensor([self.stoi[w] for w in word], dtype=torch.long)

        def __getitem__(self, idx):
            word = self.words[idx]
            ix = self.encode(word)
            x = torch.zeros(self.max_word_length + 1, dtype=torch.long)
            y = torch.zeros(self.max_word_length + 1, dtype=torch.long)
            x[1 : 1 + len(ix)] = ix
            y[: len(ix)] = ix
            y[len(ix) + 1 :] = -1  # index -1 will mask the loss at the inactive locations
            return x, y

    class InfiniteDataLoader:
        def __init__(self, dataset, **kwargs):
            sampler = torch.utils.data.SequentialSampler(dataset)  # makemore: RandomSampler
            self.train_loader = torch.utils.data.DataLoader(dataset, sampler=sampler, **kwargs)
            self.data_iter = iter(self.train_loader)

        def next(self):
            try:
                batch = next(self.data_iter)
            except StopIteration:  # this will technically only happen after 1e10 samples...
                self.data_iter = iter(self.train_loader)
                batch = next(self.data_iter)
            return batch

    class RNNCell(nn.Module):
        def __init__(self, n_embd, n_embd2):
            super().__init__()
            self.xh_to_h = nn.Linear(n_embd + n_embd2, n_embd2)

        def forward(self, xt, hprev):
            return F.tanh(self.xh_to_h(torch.cat([xt, hprev], dim=1)))

    class GRUCell(nn.Module):
        def __init__(self, n_embd, n_embd2):
            super().__init__()
            self.xh_to_z = nn.Linear(n_embd + n_embd2, n_embd2)
            self.xh_to_r = nn.Linear(n_embd + n_embd2, n_embd2)
            self.xh_to_hbar = nn.Linear(n_embd + n_embd2, n_embd2)

        def forward(self, xt, hprev):
            xh = torch.cat([xt, hprev], dim=1)
            r = F.sigmoid(self.xh_to_r(xh))
            xhr = torch.cat([xt, r * hprev], dim=1)
            hbar = F.tanh(self.xh_to_hbar(xhr))
            z = F.sigmoid(self.xh_to_z(xh))
            return (1 - z) * hprev + z * hbar

    class RNN(nn.Module):
        def __init__(self, vocab_size, block_size, n_embd=8, n_embd2=12):
            super().__init__()
            self.block_size, self.vocab_size = block_size, vocab_size
            self.start = nn.Parameter(torch.zeros(1, n_embd2))
            self.wte = nn.Embedding(vocab_size, n_embd)
            cell = {"rnn": RNNCell, "gru": GRUCell}[cell_type]
            self.cell = cell(n_embd, n_embd2)
            self.lm_head = nn.Linear(n_embd2, self.vocab_size)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            emb = self.wte(idx)
            hprev = self.start.expand((b, -1))
            hiddens = []
            for i in range(t):
                hprev = self.cell(emb[:, i, :], hprev)
                hiddens.append(hprev)
            logits = self.lm_head(torch.stack(hiddens, 1))
            loss = None
            if targets is not None:
                loss = F.cross_entropy(
                    logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
                )
            return logits, loss

    chars = sorted(set("".join(words)))
    max_len = max(len(w) for w in words)
    model = RNN(len(chars) + 1, max_len + 1)
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    print(f"number of parameters: {sum(p.numel() for p in model.parameters())}")
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=5e-3, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8
    )
    batch_loader = InfiniteDataLoader(CharDataset(words, chars, max_len), batch_size=4)
    losses = []
    for _step in range(4):
        X, Y = batch_loader.next()
        logits, loss = model(X, Y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


@pytest.mark.parametrize("cell_type", ["rnn", "gru"])
def test_makemores_recurrent_models_follow_torch_step_for_step(cell_type):
    words = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "amelia", "ella", "ivy"]
    _close(*_both(makemore_program, words, cell_type), tol=5e-4)


def nanogpt_program(torch, init, ids):
    import inspect
    from contextlib import nullcontext

    nn, F = torch.nn, torch.nn.functional
    n_layer, n_head, n_embd, block_size, vocab_size, bias, dropout = 2, 2, 16, 8, 13, True, 0.0

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
            self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
            self.attn_dropout, self.resid_dropout = nn.Dropout(dropout), nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0,
                                               is_causal=True)  # fmt: skip
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = LayerNorm(n_embd, bias=bias), CausalSelfAttention()
            self.ln_2, self.mlp = LayerNorm(n_embd, bias=bias), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
                drop=nn.Dropout(dropout), h=nn.ModuleList([Block() for _ in range(n_layer)]),
                ln_f=LayerNorm(n_embd, bias=bias),
            ))  # fmt: skip
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            if targets is not None:
                logits = self.lm_head(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                       ignore_index=-1)  # fmt: skip
            else:
                logits, loss = self.lm_head(x[:, [-1], :]), None
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [{"params": decay_params, "weight_decay": weight_decay},
                            {"params": nodecay_params, "weight_decay": 0.0}]  # fmt: skip
            fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and device_type == "cuda"
            extra_args = dict(fused=True) if use_fused else dict()
            return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device_type, dtype = "cpu", "float32"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type, ptdtype[dtype])
    model = GPT()
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
    optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), device_type)
    if torch.__name__ == "limn":  # torch's inductor takes minutes on a CPU: limn's alone
        model = torch.compile(model)
    data = np.asarray(ids, dtype=np.uint16)

    def get_batch(start):
        ix = [start, start + 3, start + 7]  # nanoGPT: torch.randint(len(data) - block_size, ...)
        x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix]
        )
        return x, y

    def get_lr(it, warmup_iters=2, lr_decay_iters=6, learning_rate=1e-2, min_lr=1e-3):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (learning_rate - min_lr)

    losses = []
    X, Y = get_batch(0)
    for iter_num in range(5):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        with ctx:
            logits, loss = model(X, Y)
        X, Y = get_batch(iter_num + 1)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return state, losses, model


def test_nanogpts_train_loop_follows_torch_and_limn_generate_samples_its_model():
    # importing torch's own test harness (the OpInfo tests) freezes torch.backends' flags
    # for its suite; train.py sets cudnn.allow_tf32, as it may in a process of its own
    torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    ids = np.random.default_rng(23).integers(0, 13, 40)
    ours, theirs = _both(nanogpt_program, ids)
    _close(ours[:2], theirs[:2], tol=5e-4)
    prompt = np.array([[1, 2, 3]])
    idx = torch.tensor(prompt)
    with torch.no_grad():  # nanoGPT's generate, greedy
        for _ in range(4):
            logits, _ = theirs[2](idx[:, -8:])
            idx = torch.cat((idx, logits[:, -1, :].argmax(-1, keepdim=True)), dim=1)
    assert limn.generate(ours[2], Tensor(prompt), 4, temperature=0).tolist() == idx.tolist()


# ---- issue 50's programs: DCGAN and time_sequence_prediction, in their own shapes -------
#
# pytorch/examples' dcgan (its Generator, Discriminator, weights_init, and one epoch of its
# training loop: BCELoss, Adam with its betas, ``label.fill_``, ``fake.detach()``) and
# time_sequence_prediction (two LSTMCells and a Linear in float64, stepped by LBFGS with
# its closure, then the future predicted), on tiny sizes. Departures: the data and the
# noise are given, not drawn (each library draws its own); the images are 16x16.


def dcgan_program(torch, init, images, noises):
    nn, optim = torch.nn, torch.optim
    nz, ngf, ndf, nc = 8, 4, 4, 1

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
                nn.BatchNorm2d(ngf * 4),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
                nn.Tanh(),
            )

        def forward(self, input):
            return self.main(input)

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
                nn.Sigmoid(),
            )

        def forward(self, input):
            return self.main(input).view(-1, 1).squeeze(1)

    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            torch.nn.init.normal_(m.weight, 1.0, 0.02)
            torch.nn.init.zeros_(m.bias)

    netG, netD = Generator(), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    if init is None:
        return ({**{"G." + k: v for k, v in netG.state_dict().items()},
                 **{"D." + k: v for k, v in netD.state_dict().items()}},)  # fmt: skip
    netG.load_state_dict({k[2:]: torch.tensor(v) for k, v in init.items() if k[0] == "G"})
    netD.load_state_dict({k[2:]: torch.tensor(v) for k, v in init.items() if k[0] == "D"})
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
    dataloader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.tensor(images)), batch_size=4
    )
    losses = []
    for i, (real_cpu,) in enumerate(dataloader):
        netD.zero_grad()
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        noise = torch.tensor(noises[i])
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()
        losses.append([errD.item(), errG.item(), D_x, D_G_z1, D_G_z2])
    state = {**{"G." + k: v for k, v in netG.state_dict().items()},
             **{"D." + k: v for k, v in netD.state_dict().items()}}  # fmt: skip
    return {k: v.detach().numpy() for k, v in state.items()}, losses


def test_the_dcgan_example_follows_torch_step_for_step():
    rng = np.random.default_rng(50)
    images = np.tanh(rng.standard_normal((12, 1, 16, 16))).astype(np.float32)
    noises = rng.standard_normal((3, 4, 8, 1, 1)).astype(np.float32)
    _close(*_both(dcgan_program, images, noises), tol=5e-4)


def time_sequence_program(torch, init, data):
    nn, optim = torch.nn, torch.optim

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, 12)
            self.lstm2 = nn.LSTMCell(12, 12)
            self.linear = nn.Linear(12, 1)

        def forward(self, input, future=0):
            outputs = []
            h_t = torch.zeros(input.size(0), 12, dtype=torch.double)
            c_t = torch.zeros(input.size(0), 12, dtype=torch.double)
            h_t2 = torch.zeros(input.size(0), 12, dtype=torch.double)
            c_t2 = torch.zeros(input.size(0), 12, dtype=torch.double)
            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            for _i in range(future):  # if we should predict the future
                h_t, c_t = self.lstm1(output, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            outputs = torch.cat(outputs, dim=1)
            return outputs

    seq = Sequence()
    seq.double()
    if init is None:
        return (seq.state_dict(),)
    seq.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    input = torch.from_numpy(data[3:, :-1])
    target = torch.from_numpy(data[3:, 1:])
    test_input = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    losses = []
    for _i in range(2):

        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            losses.append(loss.item())
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad():
            future = 5
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            losses.append(loss.item())
    return {k: v.detach().numpy() for k, v in seq.state_dict().items()}, losses, pred.numpy()


@pytest.mark.slow  # about 10 s: LBFGS evaluates the unrolled LSTMs some 40 times
def test_the_time_sequence_prediction_example_follows_torch_step_for_step():
    # generate_sine_wave.py's data, smaller: sines of random phase, float64
    rng = np.random.default_rng(3)
    T, L, N = 20, 12, 6
    x = np.empty((N, L), "int64")
    x[:] = np.array(range(L)) + rng.integers(-4 * T, 4 * T, N).reshape(N, 1)
    data = np.sin(x / 1.0 / T).astype("float64")
    ours, theirs = _both(time_sequence_program, data)
    assert len(ours[1]) == len(theirs[1])  # LBFGS called the closure as often
    _close(ours, theirs, tol=1e-6)


# pytorch/examples' siamese_network: two images through one ResNet trunk (torchvision's
# resnet18 layout, written out here at width 8 with one block a stage: torchvision is not
# a dependency), its ``fc`` read for ``in_features`` and dropped by ``children()[:-1]``,
# the two embeddings concatenated into a Linear head with a sigmoid, BCELoss, Adadelta and
# StepLR. The pairs are indexed by numpy integers, as its dataset does.


def siamese_program(torch, init, images, pairs, targets):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, inplanes, planes, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
                )

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, width=8):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = BasicBlock(width, width)
            self.layer2 = BasicBlock(width, width * 2, 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(width * 2, 10)

    class SiameseNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.resnet = ResNet()
            self.resnet.conv1 = nn.Conv2d(1, 8, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3),
                                          bias=False)  # fmt: skip
            self.fc_in_features = self.resnet.fc.in_features
            self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))
            self.fc = nn.Sequential(
                nn.Linear(self.fc_in_features * 2, 16),
                nn.ReLU(inplace=True),
                nn.Linear(16, 1),
            )
            self.sigmoid = nn.Sigmoid()
            self.resnet.apply(self.init_weights)
            self.fc.apply(self.init_weights)

        def init_weights(self, m):
            if isinstance(m, nn.Linear):
                torch.nn.init.xavier_uniform_(m.weight)
                torch.nn.init.constant_(m.bias, 0.01)

        def forward_once(self, x):
            output = self.resnet(x)
            return output.view(output.size()[0], -1)

        def forward(self, input1, input2):
            output1, output2 = self.forward_once(input1), self.forward_once(input2)
            output = torch.cat((output1, output2), 1)
            return self.sigmoid(self.fc(output))

    model = SiameseNetwork()
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    data = torch.tensor(images)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    criterion = nn.BCELoss()
    losses = []
    for _epoch in range(2):
        model.train()
        for (a, b), target in zip(pairs, targets):
            images_1 = torch.stack([data[i] for i in a])  # numpy integers as indices
            images_2 = torch.stack([data[i] for i in b])
            optimizer.zero_grad()
            outputs = model(images_1, images_2).squeeze()
            loss = criterion(outputs, torch.tensor(target))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


@pytest.mark.slow  # about 15 s: two ResNet trunks a step
def test_the_siamese_network_example_follows_torch_step_for_step():
    rng = np.random.default_rng(7)
    images = rng.standard_normal((10, 1, 16, 16)).astype(np.float32)
    pairs = [(rng.integers(0, 10, 4), rng.integers(0, 10, 4)) for _ in range(2)]
    targets = [rng.integers(0, 2, 4).astype(np.float32) for _ in range(2)]
    _close(*_both(siamese_program, images, pairs, targets), tol=5e-4)


# tanelp/tiny-diffusion's ddpm.py: its sinusoidal embeddings, MLP of residual blocks and
# NoiseScheduler (linspace betas, cumprod, F.pad of the cumulative product), trained with
# AdamW, ``loss.backward(loss)`` and clip_grad_norm_, then sampled backwards in time.
# Departures: the noise, timesteps and order are given (each library draws its own), and
# the sizes are small.


def tiny_diffusion_program(torch, init, points, noises, steps, sample_noise):
    nn, F = torch.nn, torch.nn.functional

    class SinusoidalEmbedding(nn.Module):
        def __init__(self, size, scale=1.0):
            super().__init__()
            self.size, self.scale = size, scale

        def forward(self, x):
            x = x * self.scale
            half_size = self.size // 2
            emb = torch.log(torch.Tensor([10000.0])) / (half_size - 1)
            emb = torch.exp(-emb * torch.arange(half_size))
            emb = x.unsqueeze(-1) * emb.unsqueeze(0)
            return torch.cat((torch.sin(emb), torch.cos(emb)), dim=-1)

    class Block(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.ff = nn.Linear(size, size)
            self.act = nn.GELU()

        def forward(self, x):
            return x + self.act(self.ff(x))

    class MLP(nn.Module):
        def __init__(self, hidden_size=16, hidden_layers=2, emb_size=8):
            super().__init__()
            self.time_mlp = SinusoidalEmbedding(emb_size)
            self.input_mlp1 = SinusoidalEmbedding(emb_size, scale=25.0)
            self.input_mlp2 = SinusoidalEmbedding(emb_size, scale=25.0)
            layers = [nn.Linear(3 * emb_size, hidden_size), nn.GELU()]
            for _ in range(hidden_layers):
                layers.append(Block(hidden_size))
            layers.append(nn.Linear(hidden_size, 2))
            self.joint_mlp = nn.Sequential(*layers)

        def forward(self, x, t):
            x1_emb = self.input_mlp1(x[:, 0])
            x2_emb = self.input_mlp2(x[:, 1])
            t_emb = self.time_mlp(t)
            x = torch.cat((x1_emb, x2_emb, t_emb), dim=-1)
            return self.joint_mlp(x)

    class NoiseScheduler:
        def __init__(self, num_timesteps=10, beta_start=0.0001, beta_end=0.02):
            self.num_timesteps = num_timesteps
            self.betas = torch.linspace(beta_start, beta_end, num_timesteps, dtype=torch.float32)
            self.alphas = 1.0 - self.betas
            self.alphas_cumprod = torch.cumprod(self.alphas, axis=0)
            self.alphas_cumprod_prev = F.pad(self.alphas_cumprod[:-1], (1, 0), value=1.0)
            self.sqrt_alphas_cumprod = self.alphas_cumprod**0.5
            self.sqrt_one_minus_alphas_cumprod = (1 - self.alphas_cumprod) ** 0.5
            self.sqrt_inv_alphas_cumprod = torch.sqrt(1 / self.alphas_cumprod)
            self.sqrt_inv_alphas_cumprod_minus_one = torch.sqrt(1 / self.alphas_cumprod - 1)
            self.posterior_mean_coef1 = (
                self.betas * torch.sqrt(self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
            )
            self.posterior_mean_coef2 = (
                (1.0 - self.alphas_cumprod_prev) * torch.sqrt(self.alphas)
                / (1.0 - self.alphas_cumprod)
            )  # fmt: skip

        def reconstruct_x0(self, x_t, t, noise):
            s1 = self.sqrt_inv_alphas_cumprod[t].reshape(-1, 1)
            s2 = self.sqrt_inv_alphas_cumprod_minus_one[t].reshape(-1, 1)
            return s1 * x_t - s2 * noise

        def q_posterior(self, x_0, x_t, t):
            s1 = self.posterior_mean_coef1[t].reshape(-1, 1)
            s2 = self.posterior_mean_coef2[t].reshape(-1, 1)
            return s1 * x_0 + s2 * x_t

        def get_variance(self, t):
            if t == 0:
                return 0
            variance = self.betas[t] * (1.0 - self.alphas_cumprod_prev[t])
            variance /= 1.0 - self.alphas_cumprod[t]
            return variance.clip(1e-20)

        def step(self, model_output, timestep, sample, noise):
            t = timestep
            pred_original_sample = self.reconstruct_x0(sample, t, model_output)
            pred_prev_sample = self.q_posterior(pred_original_sample, sample, t)
            variance = 0
            if t > 0:
                variance = (self.get_variance(t) ** 0.5) * noise
            return pred_prev_sample + variance

        def add_noise(self, x_start, x_noise, timesteps):
            s1 = self.sqrt_alphas_cumprod[timesteps].reshape(-1, 1)
            s2 = self.sqrt_one_minus_alphas_cumprod[timesteps].reshape(-1, 1)
            return s1 * x_start + s2 * x_noise

        def __len__(self):
            return self.num_timesteps

    model = MLP()
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    noise_scheduler = NoiseScheduler()
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(points.astype(np.float32)))
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for epoch in range(2):
        model.train()
        for step, batch in enumerate(dataloader):
            batch = batch[0]
            noise = torch.tensor(noises[epoch][step])
            timesteps = torch.tensor(steps[epoch][step]).long()
            noisy = noise_scheduler.add_noise(batch, noise, timesteps)
            noise_pred = model(noisy, timesteps)
            loss = F.mse_loss(noise_pred, noise)
            loss.backward(loss)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach().item())
    model.eval()
    sample = torch.tensor(sample_noise[0])
    timesteps = list(range(len(noise_scheduler)))[::-1]
    for i, t in enumerate(timesteps):
        t = torch.from_numpy(np.repeat(t, 4)).long()
        with torch.no_grad():
            residual = model(sample, t)
        sample = noise_scheduler.step(residual, t[0], sample, torch.tensor(sample_noise[1 + i]))
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses, sample.numpy()


def test_the_tiny_diffusion_example_follows_torch_step_for_step():
    rng = np.random.default_rng(11)
    points = rng.standard_normal((16, 2))
    noises = rng.standard_normal((2, 2, 8, 2)).astype(np.float32)
    steps = rng.integers(0, 10, (2, 2, 8))
    sample_noise = rng.standard_normal((11, 4, 2)).astype(np.float32)
    _close(*_both(tiny_diffusion_program, points, noises, steps, sample_noise), tol=5e-4)


# llm.c's train_gpt2.py: its GPT (NewGELU, scaled_dot_product_attention, weight tying,
# _init_weights drawing from a torch.Generator with LLMC_SKIP_INIT), configure_optimizers'
# decay groups and AdamW(fused=...), the step under autocast with clip_grad_norm_, the
# memory query and generate sampling by its own Generator. Departures: a tiny config and
# given batches; the init is then torch's (each library's generator draws its own).


def llmc_program(torch, init, batches):
    import importlib
    import inspect as _inspect
    import math as _math

    nn, F = torch.nn, torch.nn.functional
    # train_gpt2.py's ``import torch._inductor.config as config`` and ``from
    # torch.distributed import init_process_group, destroy_process_group``, of this library
    config = importlib.import_module(torch.__name__ + "._inductor.config")
    config.coordinate_descent_tuning = True
    dist = importlib.import_module(torch.__name__ + ".distributed")
    assert callable(dist.init_process_group) and callable(dist.destroy_process_group)

    class NewGELU(nn.Module):
        def forward(self, input):
            inner = _math.sqrt(2.0 / _math.pi) * (input + 0.044715 * torch.pow(input, 3.0))
            return 0.5 * input * (1.0 + torch.tanh(inner))

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            self.c_proj.LLMC_RESIDUAL_SCALE_FLAG = 1
            self.n_head, self.n_embd = config.n_head, config.n_embd

        def forward(self, x):
            B, T, C = x.size()
            qkv = self.c_attn(x)
            q, k, v = qkv.split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
            self.gelu = NewGELU()
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
            self.c_proj.LLMC_RESIDUAL_SCALE_FLAG = 1

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPTConfig:
        block_size, vocab_size, n_layer, n_head, n_embd = 8, 13, 2, 2, 16

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            ))  # fmt: skip
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.lm_head.LLMC_SKIP_INIT = 1
            self.transformer.wte.weight = self.lm_head.weight
            self.init_rng = torch.Generator()
            self.init_rng.manual_seed(42)
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                std = 0.02 if not hasattr(module, "LLMC_RESIDUAL_SCALE_FLAG") else (
                    0.02 / _math.sqrt(2 * self.config.n_layer))  # fmt: skip
                if not hasattr(module, "LLMC_SKIP_INIT"):
                    torch.nn.init.normal_(module.weight, mean=0.0, std=std,
                                          generator=self.init_rng)  # fmt: skip
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02, generator=self.init_rng)

        def forward(self, idx, targets=None, return_logits=True):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)  # fmt: skip
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            param_dict = {pn: p for pn, p in self.named_parameters()}
            param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {"params": decay_params, "weight_decay": weight_decay},
                {"params": nodecay_params, "weight_decay": 0.0},
            ]
            fused_available = "fused" in _inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and device_type == "cuda"
            return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas,
                                     fused=use_fused)  # fmt: skip

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.config.block_size else (
                    idx[:, -self.config.block_size:])  # fmt: skip
                logits, _ = self(idx_cond, targets=torch.zeros_like(idx_cond))
                logits = logits[:, -1, :] / temperature
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    model = GPT(GPTConfig())
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-3,
                                           betas=(0.9, 0.95), device_type="cpu")  # fmt: skip
    ctx = torch.amp.autocast(device_type="cpu", dtype=torch.float32, enabled=False)
    losses = []
    for x, y in batches:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with ctx:
            _, loss = model(torch.tensor(x), torch.tensor(y))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append([loss.item(), float(norm)])
    assert torch.cuda.max_memory_allocated() == 0  # no GPU was used
    model.eval()
    sample_rng = torch.Generator()
    sample_rng.manual_seed(42)
    start = torch.tensor([[1, 2]])
    samples = [model.generate(start, 4, generator=sample_rng) for _ in range(2)]
    sample_rng.manual_seed(42)
    again = model.generate(start, 4, generator=sample_rng)
    assert again.tolist() == samples[0].tolist()  # the same seed, the same sample
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return state, losses


def test_llmc_train_gpt2_follows_torch_step_for_step():
    rng = np.random.default_rng(5)
    batches = [(rng.integers(0, 13, (2, 8)), rng.integers(0, 13, (2, 8))) for _ in range(4)]
    _close(*_both(llmc_program, batches), tol=5e-4)


# karpathy/minGPT with its chargpt project: the model (a masked_fill causal mask in a
# registered buffer, NewGELU, dropout modules), configure_optimizers' walk of
# named_modules/named_parameters into decay and no-decay sets by module type, the
# Trainer's step (zero_grad(set_to_none=True), clip_grad_norm_) over chargpt's
# CharDataset through a DataLoader. Departures: a tiny config, dropout 0, and the
# DataLoader walks the data in order (its RandomSampler draws differ per library).


def mingpt_program(torch, init, text):
    import math as _math

    nn, F = torch.nn, torch.nn.functional

    class NewGELU(nn.Module):
        def forward(self, x):
            inner = _math.sqrt(2.0 / _math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
            return 0.5 * x * (1.0 + torch.tanh(inner))

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd)
            self.attn_dropout = nn.Dropout(config.attn_pdrop)
            self.resid_dropout = nn.Dropout(config.resid_pdrop)
            bs = config.block_size
            self.register_buffer("bias", torch.tril(torch.ones(bs, bs)).view(1, 1, bs, bs))
            self.n_head, self.n_embd = config.n_head, config.n_embd

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / _math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.mlp = nn.ModuleDict(dict(
                c_fc=nn.Linear(config.n_embd, 4 * config.n_embd),
                c_proj=nn.Linear(4 * config.n_embd, config.n_embd),
                act=NewGELU(),
                dropout=nn.Dropout(config.resid_pdrop),
            ))  # fmt: skip
            m = self.mlp
            self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlpf(self.ln_2(x))

    class Config:
        n_layer, n_head, n_embd, block_size = 2, 2, 16, 8
        embd_pdrop = resid_pdrop = attn_pdrop = 0.0

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.block_size = config.block_size
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.embd_pdrop),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            ))  # fmt: skip
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / _math.sqrt(2 * config.n_layer))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                torch.nn.init.zeros_(module.bias)
                torch.nn.init.ones_(module.weight)

        def configure_optimizers(self, train_config):
            decay, no_decay = set(), set()
            whitelist_weight_modules = (torch.nn.Linear,)
            blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.Embedding)
            for mn, m in self.named_modules():
                for pn, _p in m.named_parameters():
                    fpn = f"{mn}.{pn}" if mn else pn
                    if pn.endswith("bias"):
                        no_decay.add(fpn)
                    elif pn.endswith("weight") and isinstance(m, whitelist_weight_modules):
                        decay.add(fpn)
                    elif pn.endswith("weight") and isinstance(m, blacklist_weight_modules):
                        no_decay.add(fpn)
            param_dict = {pn: p for pn, p in self.named_parameters()}
            inter_params = decay & no_decay
            union_params = decay | no_decay
            assert len(inter_params) == 0, inter_params
            assert len(param_dict.keys() - union_params) == 0, param_dict.keys() - union_params
            optim_groups = [
                {"params": [param_dict[pn] for pn in sorted(decay)],
                 "weight_decay": train_config.weight_decay},
                {"params": [param_dict[pn] for pn in sorted(no_decay)], "weight_decay": 0.0},
            ]  # fmt: skip
            return torch.optim.AdamW(optim_groups, lr=train_config.learning_rate,
                                     betas=train_config.betas)  # fmt: skip

        def forward(self, idx, targets=None):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                       ignore_index=-1)  # fmt: skip
            return logits, loss

    class CharDataset(torch.utils.data.Dataset):
        def __init__(self, config, data):
            chars = sorted(list(set(data)))
            self.stoi = {ch: i for i, ch in enumerate(chars)}
            self.vocab_size, self.config, self.data = len(chars), config, data

        def __len__(self):
            return len(self.data) - self.config.block_size

        def __getitem__(self, idx):
            chunk = self.data[idx : idx + self.config.block_size + 1]
            dix = [self.stoi[s] for s in chunk]
            x = torch.tensor(dix[:-1], dtype=torch.long)
            y = torch.tensor(dix[1:], dtype=torch.long)
            return x, y

    train_dataset = CharDataset(Config, text)
    Config.vocab_size = train_dataset.vocab_size
    model = GPT(Config)
    if init is None:
        return (model.state_dict(),)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})

    class TrainConfig:
        learning_rate, betas, weight_decay, grad_norm_clip = 5e-4, (0.9, 0.95), 0.1, 1.0

    optimizer = model.configure_optimizers(TrainConfig)
    loader = torch.utils.data.DataLoader(train_dataset, shuffle=False, pin_memory=True,
                                         batch_size=4, num_workers=0)  # fmt: skip
    model.train()
    losses = []
    for it, batch in enumerate(loader):
        batch = [t.to("cpu") for t in batch]
        x, y = batch
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), TrainConfig.grad_norm_clip)
        optimizer.step()
        losses.append(loss.item())
        if it == 4:
            break
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def test_mingpts_chargpt_follows_torch_step_for_step():
    text = "to be or not to be, that is the question: whether tis nobler in the mind"
    _close(*_both(mingpt_program, text), tol=5e-4)
