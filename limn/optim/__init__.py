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
from limn.autograd import no_grad
from limn.runtime import profile
from limn.serialize import IncompatibleKeys, assign_named
from limn.tensor import Tensor, realize


def _param_list(params, start: int) -> list[tuple[str, Tensor]]:
    """A Module, (name, Tensor) pairs, or bare Tensors (then named by their place among
    all of the optimizer's, from ``start``, as torch numbers them across groups)."""
    if hasattr(params, "named_parameters"):
        params = params.named_parameters()
    if isinstance(params, Tensor):
        params = [params]
    named = [it if isinstance(it, tuple) else (str(start + i), it) for i, it in enumerate(params)]
    for name, p in named:
        if not isinstance(p, Tensor) or not p.requires_grad or not p.dtype.is_float:
            got = f"a {p.dtype}{list(p.shape)} Tensor" if isinstance(p, Tensor) else type(p)
            raise TypeError(
                f"optimizer: parameter {name!r} must be a float Tensor with requires_grad=True, "
                f"got {got}"
            )
    return named


def _groups(params) -> list[dict]:
    """torch's two forms: parameters, or a list of dicts each holding ``"params"`` and the
    settings in which that group differs from the optimizer's defaults."""
    if hasattr(params, "named_parameters") or isinstance(params, Tensor):
        return [{"params": params}]
    if not hasattr(params, "__iter__") or isinstance(params, dict):
        raise TypeError(
            f"optimizer: params must be parameters or a list of dicts (torch's parameter "
            f"groups), got a {type(params).__name__}"
        )
    params = list(params)
    if not params:
        raise ValueError("optimizer: got an empty parameter list")
    dicts = [isinstance(g, dict) for g in params]
    if any(dicts) and not all(dicts):
        raise TypeError(
            "optimizer: params mixes dicts and Tensors; pass parameters, or a list of dicts "
            "each with 'params' (torch's parameter groups)"
        )
    return [dict(g) for g in params] if all(dicts) else [{"params": params}]


class Optimizer:
    """Parameter groups, device-resident scalars, and the one-realize ``step``.

    A subclass passes its defaults (every setting a group may hold), declares its
    per-parameter state in ``state_names``, checks a group's settings in ``_check`` and
    defines ``_update(p, g, state, scalars, group) -> (new_p, {state name: new value})``.
    """

    state_names: tuple[str, ...] = ()

    def __init__(self, params, defaults: dict):
        self.defaults, self.param_groups, self.named = defaults, [], []
        for i, given in enumerate(_groups(params)):
            unknown = sorted(set(given) - set(defaults) - {"params"})
            if "params" not in given or unknown:
                raise ValueError(
                    f"{type(self).__name__}: parameter group {i} needs 'params' and settings "
                    f"among {sorted(defaults)}; got {sorted(given)}"
                )
            named = _param_list(given["params"], len(self.named))
            group = _Group({**defaults, **given, "params": [p for _, p in named]})
            group.names = [n for n, _ in named]
            self._check(group)
            self.named += named
            self.param_groups.append(group)
        seen: set[int] = set()
        for name, p in self.named:
            if id(p) in seen:
                raise ValueError(f"optimizer: parameter {name!r} is listed twice")
            seen.add(id(p))
        if not self.named:
            raise ValueError("optimizer: got an empty parameter list")
        self.params = [p for _, p in self.named]
        device = self.params[0].device
        self._scalars = {"step": Tensor(0, dtype=dtypes.int64, device=device)}
        for i, group in enumerate(self.param_groups):
            group.scalars = {
                k: Tensor(v, dtype=dtypes.float64, device=device)
                for k, v in self._group_scalars(group).items()
            }
            prefix = f"param_groups.{i}." if i else ""  # one group keeps the plain names
            self._scalars.update({prefix + k: t for k, t in group.scalars.items()})
        self.state: dict[str, dict[str, Tensor]] = {
            name: {s: p.zeros_like().contiguous() for s in self._state_names(group)}
            for group in self.param_groups
            for name, p in zip(group.names, group["params"])
        }
        realize(*(t for st in self.state.values() for t in st.values()))

    def _check(self, group: dict) -> None:
        if group["lr"] < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {group['lr']}")

    def _group_scalars(self, group: dict) -> dict[str, float]:
        """A group's settings that live on the device, with their first values."""
        return {"lr": group["lr"]}

    def _state_names(self, group: dict) -> tuple[str, ...]:
        return self.state_names

    # ---- scalars that live on the device ----------------------------------------

    @property
    def lr(self) -> float:
        """The first group's rate; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        for group in self.param_groups:
            group["lr"] = value

    @property
    def steps(self) -> int:
        """How many steps have been committed."""
        return self._scalars["step"].item()

    def _next_scalars(self, group: dict, step: Tensor) -> dict[str, Tensor]:
        """This step's values of a group's device scalars, with the incremented count."""
        return {"lr": group.scalars["lr"], "step": step}

    # ---- stepping ---------------------------------------------------------------

    def updates(self) -> list[Tensor]:
        """The pending ASSIGNs of one step: parameters, their state, the scalars."""
        with no_grad():
            step = self._scalars["step"] + 1
            out = [self._scalars["step"].assign(step)]
            prof = profile.active()  # the stage viewer names each update by its parameter
            for group in self.param_groups:
                nxt = self._next_scalars(group, step)
                out += [t.assign(nxt[k]) for k, t in group.scalars.items() if k != "lr"]
                for name, p in zip(group.names, group["params"]):
                    if p.grad is None:
                        continue
                    label = type(self).__name__ + ("" if name.isdigit() else f" {name}")
                    with prof.within(self, label) if prof else no_grad():
                        g = p.grad.detach().cast(p.dtype)
                        new_p, new_state = self._update(p, g, self.state[name], nxt, group)
                        out.append(p.assign(new_p))
                        out += [self.state[name][k].assign(v) for k, v in new_state.items()]
        return out

    def step(self, *extra: Tensor) -> None:
        """Commit one update of every parameter (and compute ``extra``) in one realize.
        The gradients are computed in it too: held lazy, they would read the parameters'
        old values after the step, and those bytes could not be reused."""
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        realize(*self.updates(), *extra, *grads)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def _update(self, p: Tensor, g: Tensor, state: dict, s: dict, group: dict):
        raise NotImplementedError

    # ---- checkpoints ------------------------------------------------------------

    def state_dict(self) -> dict[str, Tensor]:
        """The live state Tensors by ``<param path>.<state>``, plus the scalars (a second
        group's as ``param_groups.1.lr``)."""
        out = {f"{n}.{k}": t for n, st in self.state.items() for k, t in st.items()}
        out.update(self._scalars)
        return out

    def load_state_dict(self, state: dict, strict: bool = True) -> IncompatibleKeys:
        dests = self.state_dict()
        keys = assign_named(dests, state, strict, source="load_state_dict", cast=True)
        for group in self.param_groups:  # the Python copy of each rate follows its buffer
            dict.__setitem__(group, "lr", group.scalars["lr"].item())
        return keys


class _Group(dict):
    """One parameter group as torch's dict: ``"params"`` and every setting. Its rate is
    also a device scalar (``scalars["lr"]``): setting ``group["lr"]`` writes it, so a
    schedule leaves the step's graph (and a captured step) as it was; ``device_settings``
    tells ``limn.capture`` to key on that buffer, not on the float."""

    device_settings = ("lr",)

    def __setitem__(self, key, value):
        if key == "lr":
            if value < 0:
                raise ValueError(f"optimizer: lr must be >= 0, got {value}")
            realize(self.scalars["lr"].assign(float(value)))
        super().__setitem__(key, value)


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

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
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
        v = state["exp_avg_sq"] * b2 + g * g * (1 - b2)
        step_size = (lr / (1 - s["beta1_power"])).cast(p.dtype)
        bc2_sqrt = (1 - s["beta2_power"]).sqrt().cast(p.dtype)
        denom = v.sqrt() / bc2_sqrt + group["eps"]
        return p - step_size * m / denom, {"exp_avg": m, "exp_avg_sq": v}


class Adam(AdamW):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr, betas, eps, weight_decay)


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
            opt.zero_grad()

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
