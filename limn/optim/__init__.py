"""limn.optim: optimizers whose step is one batch of writes.

``step()`` builds, for every parameter and every piece of state, a graph computing its
next value and an ASSIGN of that value into the tensor's own buffer, then commits all of
them in one ``limn.realize``. Every graph therefore reads pre-step values and the order of
the writes cannot matter; extra tensors passed to ``step(loss)`` are computed in the same
batch, so a logged loss shares the forward pass the gradients already need.

Parameters come in torch's groups (``param_groups``), each a dict of its parameters and
its settings. Everything that changes from step to step lives on the device as a 0-d
buffer: each group's learning rate and Adam's beta**t, and the step count. Setting a
group's ``"lr"`` (or ``opt.lr``, every group's) writes into its buffer, so the graph a step
builds is the same every time and a compiled device's plan cache (and a captured step)
keeps serving it. The other settings are baked in as constants. Scalars are float64 and
cast to a parameter's dtype where they meet it, as torch computes its Python-float step
sizes in double and rounds them once.

``state_dict()`` names per-parameter state ``<param path>.<state>`` (``fc.weight.exp_avg``)
with the paths of ``named_parameters()``, next to the scalars (``step``, ``lr``,
``beta1_power``; a second group's ``param_groups.1.lr``), so a model and its optimizer go
in one checkpoint (``limn.serialize``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from ir.graph import dtypes
from limn.optim.optimizer import Optimizer, _param_list
from limn.tensor import Tensor


def _lerp(a: Tensor, b: Tensor, w: float) -> Tensor:
    """a + w (b - a) as torch's lerp computes it: from the nearer end, with the weight
    rounded to the tensors' compute width first, so a step matches torch's to the ulp."""
    w = float(dtypes.to_numpy(dtypes.compute_dtype(a.dtype)).type(w))
    return a + (b - a) * w if abs(w) < 0.5 else b - (b - a) * (1 - w)


class SGD(Optimizer):
    """Stochastic gradient descent with torch's momentum, dampening, nesterov and
    (coupled, L2) weight decay. The first step seeds the momentum buffer with the
    gradient itself, undamped, as torch does."""

    def __init__(
        self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False
    ):
        settings = dict(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov)
        super().__init__(params, {**settings, "weight_decay": weight_decay})

    def _check(self, group):
        super()._check(group)
        momentum, dampening = group["momentum"], group["dampening"]
        if group["nesterov"] and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening == 0")
        if momentum < 0 or group["weight_decay"] < 0:
            raise ValueError(
                f"SGD: momentum ({momentum}) and weight_decay ({group['weight_decay']}) must "
                "be >= 0"
            )

    def _state_names(self, group):
        return ("momentum_buffer",) if group["momentum"] else ()

    def _update(self, p, g, state, s, group):
        momentum, dampening = group["momentum"], group["dampening"]
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        new_state = {}
        if momentum:
            buf = state["momentum_buffer"]
            later = buf * momentum + g * (1 - dampening)
            # the buffer starts at zero, so undamped the first step already gives g
            first = s["step"] == 1
            buf = first.where(g, later) if dampening else later
            new_state["momentum_buffer"] = buf
            g = g + buf * momentum if group["nesterov"] else buf
        return p - g * s["lr"].cast(p.dtype), new_state


class AdamW(Optimizer):
    """Adam with decoupled weight decay (p *= 1 - lr*wd before the Adam step), with
    bias correction from beta**t kept on the device, per group. ``Adam`` is the same step
    with torch's Adam decay: coupled, the gradient plus wd * p (none by default)."""

    state_names = ("exp_avg", "exp_avg_sq")
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *,
                 foreach=None, fused=None):  # fmt: skip
        """``foreach`` and ``fused`` are torch's choices of kernel; limn's step is one
        realize of every update whatever they say, so they are accepted and change nothing."""
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _check(self, group):
        super()._check(group)
        betas, eps, weight_decay = group["betas"], group["eps"], group["weight_decay"]
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"{type(self).__name__}: needs 0 <= betas < 1, eps >= 0, weight_decay >= 0; "
                f"got betas={betas}, eps={eps}, weight_decay={weight_decay}"
            )

    def _group_scalars(self, group):
        return {**super()._group_scalars(group), "beta1_power": 1.0, "beta2_power": 1.0}

    def _next_scalars(self, group, step):
        s = super()._next_scalars(group, step)
        s["beta1_power"] = group.scalars["beta1_power"] * group["betas"][0]
        s["beta2_power"] = group.scalars["beta2_power"] * group["betas"][1]
        return s

    def _update(self, p, g, state, s, group):
        b1, b2 = group["betas"]
        lr, weight_decay = s["lr"], group["weight_decay"]
        if self.decoupled:
            p = p * (1 - lr * weight_decay).cast(p.dtype)
        elif weight_decay:
            g = g + p * weight_decay
        m = _lerp(state["exp_avg"], g, 1 - b1)
        v = state["exp_avg_sq"] * b2 + g * (1 - b2) * g  # (torch's order: no g * g to overflow)
        step_size = (lr / (1 - s["beta1_power"])).cast(p.dtype)
        bc2_sqrt = (1 - s["beta2_power"]).sqrt().cast(p.dtype)
        denom = v.sqrt() / bc2_sqrt + group["eps"]
        return p - step_size * m / denom, {"exp_avg": m, "exp_avg_sq": v}


class Adam(AdamW):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 foreach=None, fused=None):  # fmt: skip
        super().__init__(params, lr, betas, eps, weight_decay)


def _decayed(p: Tensor, g: Tensor, weight_decay: float) -> Tensor:
    """torch's coupled (L2) weight decay: the gradient plus wd * p."""
    return g + p * weight_decay if weight_decay else g


def _check_nonnegative(name: str, group: dict, keys: tuple[str, ...]) -> None:
    bad = {k: group[k] for k in keys if group[k] < 0}
    if bad:
        raise ValueError(f"{name}: {', '.join(bad)} must be >= 0, got {bad}")


class Adadelta(Optimizer):
    """torch's Adadelta: running means of g**2 and of the squared steps, the step
    sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g, scaled by ``lr`` (1.0 default)."""

    state_names = ("square_avg", "acc_delta")

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def _check(self, group):
        super()._check(group)
        _check_nonnegative("Adadelta", group, ("eps", "weight_decay"))
        if not 0 <= group["rho"] <= 1:
            raise ValueError(f"Adadelta: rho must be in [0, 1], got {group['rho']}")

    def _update(self, p, g, state, s, group):
        rho, eps = group["rho"], group["eps"]
        g = _decayed(p, g, group["weight_decay"])
        square_avg = state["square_avg"] * rho + g * g * (1 - rho)
        delta = (state["acc_delta"] + eps).sqrt() / (square_avg + eps).sqrt() * g
        acc_delta = state["acc_delta"] * rho + delta * delta * (1 - rho)
        new_p = p - delta * s["lr"].cast(p.dtype)
        return new_p, {"square_avg": square_avg, "acc_delta": acc_delta}


class RMSprop(Optimizer):
    """torch's RMSprop: g / (sqrt(running mean of g**2) + eps), optionally ``centered``
    (the running mean of g subtracted under the root) and with ``momentum``."""

    def __init__(
        self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False
    ):
        settings = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)
        super().__init__(params, {**settings, "momentum": momentum, "centered": centered})

    def _check(self, group):
        super()._check(group)
        _check_nonnegative("RMSprop", group, ("alpha", "eps", "weight_decay", "momentum"))

    def _state_names(self, group):
        names = ("square_avg",) + (("momentum_buffer",) if group["momentum"] else ())
        return names + (("grad_avg",) if group["centered"] else ())

    def _update(self, p, g, state, s, group):
        alpha, lr = group["alpha"], s["lr"].cast(p.dtype)
        g = _decayed(p, g, group["weight_decay"])
        new = {"square_avg": state["square_avg"] * alpha + g * g * (1 - alpha)}
        if group["centered"]:
            new["grad_avg"] = _lerp(state["grad_avg"], g, 1 - alpha)
            avg = (new["square_avg"] - new["grad_avg"] * new["grad_avg"]).sqrt() + group["eps"]
        else:
            avg = new["square_avg"].sqrt() + group["eps"]
        if group["momentum"]:
            new["momentum_buffer"] = state["momentum_buffer"] * group["momentum"] + g / avg
            return p - new["momentum_buffer"] * lr, new
        return p - g / avg * lr, new


class Adagrad(Optimizer):
    """torch's Adagrad: g / (sqrt(sum of every g**2 so far) + eps), at the rate
    lr / (1 + (t - 1) * lr_decay) on step t; the sum starts at
    ``initial_accumulator_value``."""

    state_names = ("sum",)

    def __init__(
        self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
        eps=1e-10,
    ):  # fmt: skip
        settings = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps)
        super().__init__(
            params, {**settings, "initial_accumulator_value": initial_accumulator_value}
        )

    def _check(self, group):
        super()._check(group)
        keys = ("lr_decay", "weight_decay", "initial_accumulator_value", "eps")
        _check_nonnegative("Adagrad", group, keys)

    def _state_start(self, group, name):
        return group["initial_accumulator_value"]

    def _update(self, p, g, state, s, group):
        g = _decayed(p, g, group["weight_decay"])
        clr = s["lr"] / ((s["step"] - 1).cast(dtypes.float64) * group["lr_decay"] + 1)
        total = state["sum"] + g * g
        return p - g / (total.sqrt() + group["eps"]) * clr.cast(p.dtype), {"sum": total}


def newton_schulz(
    g: Tensor, steps: int = 5, coefficients=(3.4445, -4.7750, 2.0315), eps: float = 1e-7
) -> Tensor:
    """An approximate orthogonalization of the 2-D ``g`` (U V^T of its SVD, with singular
    values pushed near 1) by a quintic Newton-Schulz iteration on the wide orientation."""
    a, b, c = coefficients
    tall = g.shape[0] > g.shape[1]
    x = g.T if tall else g
    x = x / x.square().sum().sqrt().maximum(eps)
    for _ in range(steps):
        gram = x @ x.T
        x = x * a + (gram * b + (gram @ gram) * c) @ x
    return x.T if tall else x


class Muon(Optimizer):
    """Momentum orthogonalized by Newton-Schulz, for matrices (torch.optim.Muon's rule).

    Params of more than two dims are treated as (shape[0], rest) matrices; biases, gains
    and embeddings belong with AdamW (see ``muon_with_adamw``). ``ns_dtype`` runs the
    iteration in another width (bfloat16 is the usual speed trade; the default is the
    parameter's own).
    """

    state_names = ("momentum_buffer",)

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients=(3.4445, -4.7750, 2.0315),
        eps: float = 1e-7,
        ns_steps: int = 5,
        ns_dtype=None,
    ):
        settings = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov)
        ns = dict(ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, ns_dtype=ns_dtype)
        super().__init__(params, {**settings, **ns})

    def _check(self, group):
        super()._check(group)
        for name, p in zip(group.names, group["params"]):
            if p.ndim < 2:
                raise ValueError(
                    f"Muon: parameter {name!r} has shape {p.shape}; Muon takes matrices, "
                    "route 0-d and 1-d parameters to AdamW (see muon_with_adamw)"
                )

    def _update(self, p, g, state, s, group):
        momentum = group["momentum"]
        buf = _lerp(state["momentum_buffer"], g, 1 - momentum)
        u = _lerp(g, buf, momentum) if group["nesterov"] else buf
        rows, cols = p.shape[0], math.prod(p.shape[1:])
        u = u.reshape(rows, cols)
        if group["ns_dtype"] is not None:
            u = u.cast(group["ns_dtype"])
        u = newton_schulz(u, group["ns_steps"], group["ns_coefficients"], group["eps"])
        u = u.cast(p.dtype).reshape(p.shape)
        lr = s["lr"]
        scale = math.sqrt(max(1.0, rows / cols))
        p = p * (1 - lr * group["weight_decay"]).cast(p.dtype)
        return p - u * (lr * scale).cast(p.dtype), {"momentum_buffer": buf}


class Combined:
    """Several optimizers of different kinds stepped as one: all their writes commit in
    one realize, and their groups are its ``param_groups``, so one scheduler drives them.

    ``state_dict()`` prefixes each part's keys with its name (``muon.step``).
    """

    def __init__(self, **parts):
        if not parts:
            raise ValueError("Combined: needs at least one optimizer")
        self.parts: dict[str, Optimizer] = parts

    def updates(self) -> list[Tensor]:
        return [u for opt in self.parts.values() for u in opt.updates()]

    step, load_state_dict = Optimizer.step, Optimizer.load_state_dict  # over the parts' updates

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts.values():
            opt.zero_grad(set_to_none)

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.parts.values() for g in opt.param_groups]

    def state_dict(self) -> dict[str, Tensor]:
        return {f"{n}.{k}": t for n, opt in self.parts.items() for k, t in opt.state_dict().items()}


def muon_with_adamw(
    params,
    muon_lr: float = 0.02,
    adamw_lr: float = 3e-4,
    use_muon: Callable[[str, Tensor], bool] = lambda name, p: p.ndim == 2,
    muon_kwargs: dict | None = None,
    adamw_kwargs: dict | None = None,
) -> Combined:
    """Route the matrices to Muon and everything else to AdamW, stepped together.

    ``use_muon(name, param)`` decides; the default sends every 2-d parameter, so pass
    e.g. ``lambda n, p: p.ndim == 2 and "embed" not in n`` to keep embeddings on AdamW.
    """
    named: Iterable = _param_list(params, 0)
    to_muon = [(n, p) for n, p in named if use_muon(n, p)]
    to_adamw = [(n, p) for n, p in named if not use_muon(n, p)]
    parts = {}
    if to_muon:
        parts["muon"] = Muon(to_muon, lr=muon_lr, **(muon_kwargs or {}))
    if to_adamw:
        parts["adamw"] = AdamW(to_adamw, lr=adamw_lr, **(adamw_kwargs or {}))
    return Combined(**parts)


from limn.optim import lr_scheduler  # noqa: E402, F401  (it reads Optimizer)
from limn.optim.lbfgs import LBFGS  # noqa: E402, F401  (a closure's loop: its own file)
