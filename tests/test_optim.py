"""limn.optim against torch.optim: 20 steps on the same model and data, parameters equal
to 1e-6 after every step."""

import contextlib
import inspect
import math
import runpy
from pathlib import Path

import numpy as np
import pytest
import torch

import limn
from limn import Tensor, nn, optim
from limn.runtime.jit import walk

STEPS = 20


class MLP(nn.Module):
    def __init__(self, bias=True):
        self.fc1 = nn.Linear(5, 8, bias=bias)
        self.fc2 = nn.Linear(8, 3, bias=bias)

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh())


def torch_mlp(model: MLP) -> torch.nn.Module:
    bias = model.fc1.bias is not None
    t = torch.nn.Sequential()
    t.fc1, t.act, t.fc2 = torch.nn.Linear(5, 8, bias), torch.nn.Tanh(), torch.nn.Linear(8, 3, bias)
    t.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    return t


def batches(n=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((16, 5)).astype(np.float32),
         rng.standard_normal((16, 3)).astype(np.float32))
        for _ in range(n)
    ]  # fmt: skip


def limn_step(model, opt, x, y) -> Tensor:
    loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
    loss.backward()
    opt.step(loss)
    opt.zero_grad()
    return loss


def run_side_by_side(model, opt, tmodel, topt, on_step=None):
    for i, (x, y) in enumerate(batches()):
        if on_step is not None:
            on_step(i, opt, topt)
        loss = limn_step(model, opt, x, y)
        tloss = torch.nn.functional.mse_loss(tmodel(torch.tensor(x)), torch.tensor(y))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-6, atol=1e-6)
        tparams = dict(tmodel.named_parameters())
        for name, p in model.named_parameters():
            np.testing.assert_allclose(
                p.numpy(), tparams[name].detach().numpy(), rtol=1e-6, atol=1e-6,
                err_msg=f"{name} after step {i + 1}",
            )  # fmt: skip


SGD_CASES = [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "dampening": 0.5},
    {"momentum": 0.8, "nesterov": True},
    {"momentum": 0.9, "weight_decay": 0.1},
    {"weight_decay": 0.05},
]


@pytest.mark.parametrize("kw", SGD_CASES, ids=[str(k) for k in SGD_CASES])
def test_sgd_matches_torch_every_step(kw):
    limn.set_seed(0)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = optim.SGD(model.named_parameters(), lr=0.05, **kw)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.05, **kw)
    run_side_by_side(model, opt, tmodel, topt)


ADAM_CASES = [
    (name, kw)
    for name in ("AdamW", "Adam")
    for kw in ({}, {"betas": (0.8, 0.99), "weight_decay": 0.1, "eps": 1e-6})
]


@pytest.mark.parametrize("name,kw", ADAM_CASES, ids=[f"{n}-{k}" for n, k in ADAM_CASES])
def test_adam_and_adamw_match_torch_every_step(name, kw):
    limn.set_seed(1)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = getattr(optim, name)(model.named_parameters(), lr=0.01, **kw)
    topt = getattr(torch.optim, name)(tmodel.parameters(), lr=0.01, **kw)
    run_side_by_side(model, opt, tmodel, topt)


MORE_CASES = [
    ("Adadelta", {}),
    ("Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 0.1}),
    ("RMSprop", {}),
    ("RMSprop", {"alpha": 0.9, "weight_decay": 0.05, "momentum": 0.8}),
    ("RMSprop", {"centered": True, "momentum": 0.5}),
    ("Adagrad", {}),
    ("Adagrad", {"lr_decay": 0.1, "weight_decay": 0.05, "initial_accumulator_value": 0.3}),
]


@pytest.mark.parametrize("name,kw", MORE_CASES, ids=[f"{n}-{k}" for n, k in MORE_CASES])
def test_adadelta_rmsprop_and_adagrad_match_torch_every_step(name, kw):
    limn.set_seed(2)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = getattr(optim, name)(model.parameters(), **{"lr": 0.01, **kw})
    topt = getattr(torch.optim, name)(tmodel.parameters(), **{"lr": 0.01, **kw})
    run_side_by_side(model, opt, tmodel, topt)


def test_a_group_added_later_is_stepped_with_its_own_settings_as_in_torch():
    limn.set_seed(3)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = optim.RMSprop([model.fc1.weight, model.fc1.bias], lr=0.01)
    topt = torch.optim.RMSprop([tmodel.fc1.weight, tmodel.fc1.bias], lr=0.01)
    for o, m in ((opt, model), (topt, tmodel)):
        o.add_param_group({"params": list(m.fc2.parameters()), "lr": 0.002, "momentum": 0.5})
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.002]
    run_side_by_side(model, opt, tmodel, topt)
    with pytest.raises(ValueError, match="listed twice"):
        opt.add_param_group({"params": [model.fc1.weight]})
    with pytest.raises(ValueError, match="needs 'params' and settings among"):
        opt.add_param_group({"params": [Tensor([1.0], requires_grad=True)], "betas": (0.9, 0.9)})


def test_zero_grad_keeps_zeroed_gradients_when_not_set_to_none():
    model = MLP()
    opt = optim.SGD(model.parameters(), lr=0.1)
    limn_step(model, opt, *batches(1)[0])  # leaves grads None
    nn.mse_loss(model(Tensor(batches(1)[0][0])), Tensor(batches(1)[0][1])).backward()
    opt.zero_grad(set_to_none=False)
    for p in model.parameters():
        assert p.grad is not None and p.grad.shape == p.shape and not p.grad.numpy().any()
    model.zero_grad(set_to_none=False)
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


SCHEDULERS = [
    ("StepLR", {"step_size": 4, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [3, 7, 12], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("ConstantLR", {"factor": 0.25, "total_iters": 6}),
    ("LinearLR", {"start_factor": 0.1, "total_iters": 8}),
    ("PolynomialLR", {"total_iters": 15, "power": 2.0}),
    ("CosineAnnealingLR", {"T_max": STEPS, "eta_min": 1e-4}),
    ("LambdaLR", {"lr_lambda": lambda e: 1 / (1 + e)}),
]


@pytest.mark.parametrize("name,kw", SCHEDULERS, ids=[n for n, _ in SCHEDULERS])
def test_learning_rate_schedulers_match_torch_every_step(name, kw):
    limn.set_seed(5)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = optim.AdamW(model.named_parameters(), lr=0.02)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=0.02)
    sched = getattr(optim.lr_scheduler, name)(opt, **kw)
    tsched = getattr(torch.optim.lr_scheduler, name)(topt, **kw)

    def step(i, opt, topt):
        if i:
            sched.step(), tsched.step()
        np.testing.assert_allclose(sched.get_last_lr(), tsched.get_last_lr(), rtol=1e-12)
        np.testing.assert_allclose(opt.lr, topt.param_groups[0]["lr"], rtol=1e-12)

    run_side_by_side(model, opt, tmodel, topt, on_step=step)


def _lrs(lib, opt, make, metrics=None):
    sched = make(lib, opt)
    out = []
    for i in range(STEPS):
        sched.step(*([metrics[i]] if metrics else []))
        out.append(sched.get_last_lr()[0])
    return out


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")
@pytest.mark.parametrize(
    "make,metrics",
    [
        (
            lambda L, o: L.SequentialLR(
                o, [L.LinearLR(o, 0.1, total_iters=5), L.CosineAnnealingLR(o, 15)], [5]
            ),
            None,
        ),  # noqa: E501
        (
            lambda L, o: L.ReduceLROnPlateau(o, factor=0.5, patience=2),
            [1.0, 0.9, 0.9, 0.95, 0.91, 0.9, 0.89] * 3,
        ),  # noqa: E501
        (
            lambda L, o: L.ReduceLROnPlateau(o, "max", 0.1, 1, cooldown=2, min_lr=1e-3),
            [1, 2, 2, 2, 1, 1, 1] * 3,
        ),  # noqa: E501
    ],
    ids=["SequentialLR", "ReduceLROnPlateau", "ReduceLROnPlateau max"],
)
def test_chained_and_metric_driven_schedulers_match_torch(make, metrics):
    opt = optim.SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    ours = _lrs(optim.lr_scheduler, opt, make, metrics)
    theirs = _lrs(torch.optim.lr_scheduler, topt, make, metrics)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_param_groups_lr_writes_the_optimizers_rate_as_in_torch():
    opt = optim.AdamW([Tensor([1.0], requires_grad=True)], lr=0.1)
    for group in opt.param_groups:
        group["lr"] = 0.03
    assert opt.lr == 0.03 and opt.param_groups[0]["lr"] == 0.03


def _groups(model, lib_params):
    """torch's decay / no-decay split, each with its own settings."""
    lib_params = list(lib_params)
    decay = [p for _, p in lib_params if p.ndim >= 2]
    nodecay = [p for _, p in lib_params if p.ndim < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}]


@pytest.mark.parametrize(
    "name,kw",
    [("AdamW", {"betas": (0.9, 0.95)}), ("Adam", {}), ("SGD", {"momentum": 0.9})],
)
def test_parameter_groups_with_their_own_settings_and_a_per_group_schedule_match_torch(name, kw):
    limn.set_seed(6)
    model = MLP()
    tmodel = torch_mlp(model)
    groups = _groups(model, model.named_parameters())
    tgroups = _groups(tmodel, tmodel.named_parameters())
    groups[1]["lr"] = tgroups[1]["lr"] = 0.005  # a group's own rate, scheduled from there
    opt = getattr(optim, name)(groups, lr=0.02, **kw)
    topt = getattr(torch.optim, name)(tgroups, lr=0.02, **kw)
    warmup_cosine = [lambda s: min(1.0, (s + 1) / 4) * (1 + math.cos(math.pi * s / STEPS)) / 2]
    sched = optim.lr_scheduler.LambdaLR(opt, warmup_cosine * 2)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, warmup_cosine * 2)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]

    def step(i, opt, topt):
        if i:
            sched.step(), tsched.step()
        np.testing.assert_allclose(sched.get_last_lr(), tsched.get_last_lr(), rtol=1e-12)
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]

    run_side_by_side(model, opt, tmodel, topt, on_step=step)


def test_a_checkpoint_of_grouped_optimizer_resumes_each_groups_rate_and_moments():
    limn.set_seed(6)
    model = MLP()
    opt = optim.AdamW(_groups(model, model.named_parameters()), lr=0.02)
    opt.param_groups[1]["lr"] = 0.007
    limn_step(model, opt, *batches(1)[0])
    state = {k: t.numpy() for k, t in opt.state_dict().items()}
    assert state["param_groups.1.lr"] == 0.007 and "param_groups.1.beta1_power" in state
    other = optim.AdamW(_groups(model, model.named_parameters()), lr=0.5)
    other.load_state_dict(state)
    assert [g["lr"] for g in other.param_groups] == [0.02, 0.007] and other.steps == 1
    for k, t in other.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), state[k], err_msg=k)


def test_one_scheduler_drives_every_optimizer_of_a_combined_step():
    opt = optim.muon_with_adamw(MLP(), muon_lr=0.02, adamw_lr=0.01)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.005]
    assert opt.parts["muon"].lr == 0.01 and opt.parts["adamw"].lr == 0.005


def test_reduce_lr_on_plateau_measures_a_negative_metric_as_torch_does():
    metrics = [-1.0, -1.00005, -1.00009, -1.0001, -1.2, -1.2, -1.2, -1.2] * 2
    for mode, sign in [("min", 1), ("max", -1)]:
        lrs = []
        for lib, w in [(optim, Tensor([1.0], requires_grad=True)), (torch.optim, torch.ones(1))]:
            opt = lib.SGD([w.requires_grad_()], lr=0.1)
            sched = lib.lr_scheduler.ReduceLROnPlateau(opt, mode, patience=1, threshold=1e-4)
            lrs.append([(sched.step(sign * m), opt.param_groups[0]["lr"])[1] for m in metrics])
        np.testing.assert_allclose(lrs[0], lrs[1], rtol=1e-12, err_msg=mode)


def test_changing_lr_between_steps_matches_torch():
    limn.set_seed(2)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = optim.AdamW(model.named_parameters(), lr=0.01)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=0.01)

    def schedule(i, opt, topt):
        lr = 0.01 * (1 + math.cos(math.pi * i / STEPS)) / 2
        opt.lr = lr
        topt.param_groups[0]["lr"] = lr

    run_side_by_side(model, opt, tmodel, topt, on_step=schedule)


def test_changing_lr_keeps_the_step_graph_structure():
    limn.set_device("c")  # a compiled device caches plans; the fixture restores the default
    dev = limn.get_device("c")
    model = MLP()
    opt = optim.AdamW(model.named_parameters(), lr=0.01)
    x, y = (Tensor(a) for a in batches(1)[0])

    def step():
        """The key the plan cache looks this step up by, and how many plans it built."""
        nn.mse_loss(model(x), y).backward()
        ups = opt.updates()
        key = walk([u.node for u in ups])[0]
        before = dev.stats["plans"]
        limn.realize(*ups)
        opt.zero_grad()
        return key, dev.stats["plans"] - before

    first, planned = step()
    opt.lr = 0.003
    again, replanned = step()
    assert again == first and (planned, replanned) == (1, 0)  # the new lr reuses the plan
    assert opt.lr == pytest.approx(0.003) and opt.steps == 2


# ---- Muon -------------------------------------------------------------------------


def reference_newton_schulz(g, steps=5, eps=1e-7):
    """The quintic iteration of torch.optim.Muon, in float32 rather than bfloat16."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if g.shape[0] > g.shape[1] else x


class ReferenceMuon(torch.optim.Optimizer):
    """torch.optim.Muon's update with the float32 Newton-Schulz above."""

    def __init__(self, params, lr, weight_decay=0.1, momentum=0.95, nesterov=True):
        super().__init__(params, dict(lr=lr, wd=weight_decay, mu=momentum, nesterov=nesterov))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                buf = self.state[p].setdefault("buf", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - group["mu"])
                u = p.grad.lerp(buf, group["mu"]) if group["nesterov"] else buf
                u = reference_newton_schulz(u)
                p.mul_(1 - group["lr"] * group["wd"])
                p.add_(u, alpha=-group["lr"] * math.sqrt(max(1, p.shape[0] / p.shape[1])))


@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_matches_a_torch_reference_newton_schulz_every_step(nesterov):
    limn.set_seed(3)
    model = MLP(bias=False)  # (8, 5) is tall, (3, 8) is wide: both orientations
    tmodel = torch_mlp(model)
    opt = optim.Muon(model.named_parameters(), lr=0.02, nesterov=nesterov)
    topt = ReferenceMuon(tmodel.parameters(), lr=0.02, nesterov=nesterov)
    run_side_by_side(model, opt, tmodel, topt)


def test_newton_schulz_pushes_singular_values_near_one():
    g = np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)
    s = np.linalg.svd(optim.newton_schulz(Tensor(g)).numpy(), compute_uv=False)
    assert s.min() > 0.5 and s.max() < 1.5


def test_muon_with_adamw_routes_matrices_to_muon_and_steps_both_as_torch():
    limn.set_seed(4)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = optim.muon_with_adamw(model, muon_lr=0.02, adamw_lr=0.01)
    assert [n for n, _ in opt.parts["muon"].named] == ["fc1.weight", "fc2.weight"]
    assert [n for n, _ in opt.parts["adamw"].named] == ["fc1.bias", "fc2.bias"]
    matrices = [p for p in tmodel.parameters() if p.ndim == 2]
    vectors = [p for p in tmodel.parameters() if p.ndim != 2]
    tmuon = ReferenceMuon(matrices, lr=0.02)
    tadamw = torch.optim.AdamW(vectors, lr=0.01)

    class Both:
        def zero_grad(self):
            tmuon.zero_grad()
            tadamw.zero_grad()

        def step(self):
            tmuon.step()
            tadamw.step()

    run_side_by_side(model, opt, tmodel, Both())
    assert "muon.fc1.weight.momentum_buffer" in opt.state_dict()
    assert "adamw.beta2_power" in opt.state_dict()


def test_muon_refuses_vectors():
    with pytest.raises(ValueError, match="'fc1.bias' has shape \\(8,\\).*AdamW"):
        optim.Muon(MLP().named_parameters())


# ---- the step as one batch --------------------------------------------------------


def test_step_computes_extra_tensors_in_the_same_batch_from_pre_step_values():
    model = MLP()
    opt = optim.SGD(model.named_parameters(), lr=0.1)
    x, y = batches(1)[0]
    expected = nn.mse_loss(model(Tensor(x)), Tensor(y)).item()
    loss = limn_step(model, opt, x, y)
    assert loss.node.op.value == "BUFFER"  # realized by step, not later
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    after = nn.mse_loss(model(Tensor(x)), Tensor(y)).item()
    assert after < expected


def _torch_step(tmodel, topt, x, y, clip=None):
    tloss = torch.nn.functional.mse_loss(tmodel(torch.tensor(x)), torch.tensor(y))
    topt.zero_grad()
    tloss.backward()
    norm = clip and torch.nn.utils.clip_grad_norm_(tmodel.parameters(), clip)
    topt.step()
    return tloss, norm


@pytest.mark.parametrize("name,kw", [("SGD", {"momentum": 0.9}), ("AdamW", {})])
def test_a_loss_read_after_the_step_is_the_pre_step_loss_as_in_torch(name, kw):
    limn.set_seed(3)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = getattr(optim, name)(model.named_parameters(), lr=0.1, **kw)
    topt = getattr(torch.optim, name)(tmodel.parameters(), lr=0.1, **kw)
    for x, y in batches(3):
        prev, tprev = model.fc1.weight.clone(), tmodel.fc1.weight.detach().clone()
        loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
        opt.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()  # the torch loop: no loss handed to step
        tloss, tnorm = _torch_step(tmodel, topt, x, y, clip=0.5)
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-6)
        np.testing.assert_allclose(norm.item(), tnorm.item(), rtol=1e-5)
        moved, tmoved = (model.fc1.weight - prev).abs().max(), (tmodel.fc1.weight - tprev).abs()
        np.testing.assert_allclose(moved.item(), tmoved.max().item(), rtol=1e-4)
        tgrad = tmodel.fc2.weight.grad.numpy()
        np.testing.assert_allclose(model.fc2.weight.grad.numpy(), tgrad, rtol=1e-5, atol=1e-7)


@contextlib.contextmanager
def _batches():
    """The roots of each realize run inside, in order."""
    from limn.runtime.device import observers

    run: list = []
    observers.append(lambda name, roots: run.append(roots))
    try:
        yield run
    finally:
        observers.pop()


def test_a_loss_read_after_the_step_is_computed_in_the_steps_batch():
    model = MLP()
    opt = optim.SGD(model.named_parameters(), lr=0.1)
    x, y = batches(1)[0]
    loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
    loss.backward()
    with _batches() as run:
        opt.step()
        loss.item()
    assert len(run) == 1  # no second forward when the loss is read
    assert loss.node in run[0] or loss.node.op.value == "BUFFER"


def test_gradients_read_one_by_one_after_backward_are_computed_in_one_batch():
    """torch's backward computes every gradient; limn's are lazy, and the first read computes
    them all (with the loss) in one realize, so reading them one by one plans the shared
    backward graph once, not once per gradient. The values are each read alone's."""
    from limn import autograd

    model = MLP()
    x, y = batches(1)[0]
    loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
    loss.backward()
    with _batches() as run:
        got = [p.grad.numpy() for p in model.parameters()]
        value = loss.item()
    assert len(run) == 1 and len({id(n) for n in run[0]}) == len(got) + 1
    model2 = MLP()
    model2.load_state_dict(model.state_dict())
    loss2 = nn.mse_loss(model2(Tensor(x)), Tensor(y))
    loss2.backward()
    autograd.pending_roots()  # (taken: each gradient below is read in a batch of its own)
    with _batches() as run:
        want = [p.grad.numpy() for p in model2.parameters()]
    assert len(run) == len(want)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()
    assert value == loss2.item()


def test_load_state_dict_leaves_a_value_built_before_it_reading_the_old_weights():
    limn.set_seed(4)
    model, other = MLP(), MLP()
    tmodel = torch_mlp(model)
    x = batches(1)[0][0]
    out = model(Tensor(x))
    state = {k: v.numpy() for k, v in other.state_dict().items()}
    model.load_state_dict(state)
    tout = tmodel(torch.tensor(x))
    tmodel.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        model(Tensor(x)).numpy(), tmodel(torch.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6
    )


def test_zero_grad_clears_and_params_without_grad_are_left_alone():
    model = MLP()
    opt = optim.AdamW(model.named_parameters(), lr=0.1)
    w2 = model.fc2.weight.numpy()
    model.fc1(Tensor(batches(1)[0][0])).sum().backward()  # fc2 gets no gradient
    opt.step()
    np.testing.assert_array_equal(model.fc2.weight.numpy(), w2)
    assert model.fc1.weight.grad is not None
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_optimizers_reject_bad_parameter_lists():
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([])
    with pytest.raises(TypeError, match="requires_grad"):
        optim.SGD([Tensor(np.ones(3, np.float32))])
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="listed twice"):
        optim.AdamW([w, w])
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([w], nesterov=True)
    with pytest.raises(ValueError, match=r"group 1 needs 'params' and settings among.*'momentum'"):
        optim.AdamW([{"params": [w]}, {"params": [], "momentum": 0.9}])
    with pytest.raises(TypeError, match="params must be parameters or a list of dicts.*method"):
        optim.SGD(MLP().parameters)  # not called
    with pytest.raises(TypeError, match="mixes dicts and Tensors"):
        optim.AdamW([w, {"params": [w]}])
    big = Tensor(np.ones((100, 100), np.float32), requires_grad=True)
    with pytest.raises(TypeError) as e:  # a nested list: named by its type, not printed
        optim.AdamW([[big, big]])
    assert len(str(e.value)) < 200 and "list" in str(e.value)


def test_train_mlp_example_drops_the_loss_20x_and_says_which_device_it_ran_on(capsys):
    example = Path(__file__).parent.parent / "examples" / "train_mlp.py"
    main = runpy.run_path(str(example))["main"]
    assert main(["--steps", "100"]) >= 20
    assert capsys.readouterr().out.splitlines()[0] == f"device {limn.current_device()}"


LBFGS_CASES = [
    {},
    {"line_search_fn": "strong_wolfe"},
    {"line_search_fn": "strong_wolfe", "history_size": 3, "max_iter": 7, "lr": 0.5},
    {"history_size": 2, "max_iter": 4, "lr": 0.3, "max_eval": 6},
]


@pytest.mark.parametrize("kw", LBFGS_CASES, ids=[str(kw) for kw in LBFGS_CASES])
def test_lbfgs_takes_torchs_iterates_in_float64_with_and_without_a_line_search(kw):
    """An MLP in float64 (time_sequence_prediction's ``.double()``), the closure called
    as often as L-BFGS asks: every step's loss and parameters are torch's."""
    limn.manual_seed(0)
    model = MLP().double()
    tmodel = torch_mlp(model).double()
    opt, topt = optim.LBFGS(model.parameters(), **kw), torch.optim.LBFGS(tmodel.parameters(), **kw)
    x, y = batches(1)[0]
    calls = [0, 0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = nn.mse_loss(model(Tensor(x).double()), Tensor(y).double())
        loss.backward()
        return loss

    def tclosure():
        calls[1] += 1
        topt.zero_grad()
        loss = torch.nn.functional.mse_loss(tmodel(torch.tensor(x).double()), torch.tensor(y))
        loss.backward()
        return loss

    for i in range(3):
        loss, tloss = opt.step(closure), topt.step(tclosure)
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-10)
        tparams = dict(tmodel.named_parameters())
        for name, p in model.named_parameters():
            np.testing.assert_allclose(
                p.numpy(), tparams[name].detach().numpy(), rtol=1e-8, atol=1e-10,
                err_msg=f"{name} after step {i + 1}",
            )  # fmt: skip
        assert calls[0] == calls[1]  # the same evaluations: the same decisions


def test_lbfgs_in_float32_follows_torch_and_refuses_what_torch_refuses():
    limn.manual_seed(1)
    model = MLP()
    tmodel = torch_mlp(model)
    opt = optim.LBFGS(model.parameters(), line_search_fn="strong_wolfe")
    topt = torch.optim.LBFGS(tmodel.parameters(), line_search_fn="strong_wolfe")
    x, y = batches(1)[0]

    def closure():
        opt.zero_grad()
        loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
        loss.backward()
        return loss

    def tclosure():
        topt.zero_grad()
        loss = torch.nn.functional.mse_loss(tmodel(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        return loss

    first = opt.step(closure).item()
    assert first == pytest.approx(topt.step(tclosure).item(), rel=1e-6)
    # float32 tanh is not bit-equal across libraries, and the line search amplifies a last
    # bit: on an AVX2 machine (torch's AVX2 kernels) the c device lands 1.04e-4 away
    np.testing.assert_allclose(closure().item(), tclosure().item(), rtol=2e-4)
    assert closure().item() < first / 2
    with pytest.raises(ValueError, match="LBFGS: line_search_fn must be None or 'strong_wolfe'"):
        optim.LBFGS(model.parameters(), line_search_fn="armijo")
    with pytest.raises(ValueError, match="LBFGS: step needs a closure"):
        opt.step(None)
    torch_sig = inspect.signature(torch.optim.LBFGS.__init__).parameters
    ours = inspect.signature(optim.LBFGS.__init__).parameters
    assert [(n, p.default) for n, p in ours.items()] == [
        (n, p.default) for n, p in torch_sig.items()
    ]


def test_cubic_minimum_finds_a_cubics_minimum_and_stays_in_its_bounds():
    from limn.optim.lbfgs import cubic_minimum

    def f(x):  # minimum at x = 2 (f' = 3(x - 2)(x + 1))
        return x**3 - 1.5 * x**2 - 6 * x

    def df(x):
        return 3 * x**2 - 3 * x - 6

    assert cubic_minimum(0.0, f(0.0), df(0.0), 3.0, f(3.0), df(3.0)) == pytest.approx(2.0)
    assert cubic_minimum(3.0, f(3.0), df(3.0), 0.0, f(0.0), df(0.0)) == pytest.approx(2.0)
    assert cubic_minimum(0.0, f(0.0), df(0.0), 3.0, f(3.0), df(3.0), bounds=(0, 1.5)) == 1.5


def test_adamw_takes_torchs_kernel_choices_and_they_change_nothing():
    limn.manual_seed(0)
    a, b = MLP(), MLP()
    b.load_state_dict(a.state_dict())
    x, y = batches(1)[0]
    for model, opt in ((a, optim.AdamW(a.parameters(), fused=False)),
                       (b, optim.AdamW(b.parameters(), foreach=True))):  # fmt: skip
        limn_step(model, opt, x, y)
    np.testing.assert_array_equal(a.fc1.weight.numpy(), b.fc1.weight.numpy())
    assert "fused" in inspect.signature(torch.optim.AdamW).parameters


@pytest.mark.parametrize("name", ["AdamW", "Adam"])
def test_adam_steps_by_lr_for_a_gradient_whose_square_overflows_float32(device, name):
    """Found by the write fuzzer: a gradient of 1.5e20 (its square past float32's range)
    steps by lr in torch, whose second moment is (1 - beta2) * g * g, never g * g."""
    w0 = np.array([0.3, -0.2], np.float32)
    outs = []
    for lib in (torch, limn):
        w = lib.tensor(w0.copy(), requires_grad=True)
        opt = getattr(lib.optim, name)([w], lr=0.05, weight_decay=0.1)
        (w * lib.tensor(np.float32([1.5e20, -3e19]))).sum().backward()
        opt.step()
        outs.append(np.array(w.detach().numpy()))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
    assert abs(outs[1][0] - w0[0]) > 0.04
