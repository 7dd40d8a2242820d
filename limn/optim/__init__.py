"""limn.optim: optimizers whose step is one batch of writes.

``step()`` builds, for every parameter and every piece of state, a graph computing its
next value and an ASSIGN of that value into the tensor's own buffer, then commits all of
them in one ``limn.realize``. Every graph therefore reads pre-step values and the order of
the writes cannot matter; extra tensors passed to ``step(loss)`` are computed in the same
batch, so a logged loss shares the forward pass the gradients already need.

Everything that changes from step to step lives on the device as a 0-d buffer: the
learning rate, the step count and Adam's beta**t. Setting ``opt.lr`` writes into its
buffer, so the graph a step builds is the same every time and a compiled device's plan
cache (and a captured step) keeps serving it. Hyperparameters that never change are baked
in as constants. Scalars are float64 and cast to a parameter's dtype where they meet it,
as torch computes its Python-float step sizes in double and rounds them once.

``state_dict()`` names per-parameter state ``<param path>.<state>`` (``fc.weight.exp_avg``)
with the paths of ``named_parameters()``, next to the scalars (``step``, ``lr``,
``beta1_power``), so a model and its optimizer go in one checkpoint (``limn.serialize``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from ir.graph import dtypes
from limn.autograd import no_grad
from limn.runtime import profile
from limn.serialize import assign_named
from limn.tensor import Tensor, realize


def _named(params) -> list[tuple[str, Tensor]]:
    """A Module, (name, Tensor) pairs, or bare Tensors (then named "0", "1", ...)."""
    if hasattr(params, "named_parameters"):
        params = params.named_parameters()
    items = list(params)
    named = [it if isinstance(it, tuple) else (str(i), it) for i, it in enumerate(items)]
    seen: set[int] = set()
    for name, p in named:
        if not isinstance(p, Tensor) or not p.requires_grad or not p.dtype.is_float:
            raise TypeError(
                f"optimizer: parameter {name!r} must be a float Tensor with requires_grad=True, "
                f"got {p!r}"
            )
        if id(p) in seen:
            raise ValueError(f"optimizer: parameter {name!r} is listed twice")
        seen.add(id(p))
    if not named:
        raise ValueError("optimizer: got an empty parameter list")
    return named


class Optimizer:
    """Parameters by name, device-resident scalars, and the one-realize ``step``.

    A subclass declares its per-parameter state in ``state_names`` and defines
    ``_update(p, g, state, scalars) -> (new_p, {state name: new value})``.
    """

    state_names: tuple[str, ...] = ()

    def __init__(self, params, lr: float):
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        self.named = _named(params)
        self.params = [p for _, p in self.named]
        device = self.params[0].device
        self._scalars: dict[str, Tensor] = {
            "lr": Tensor(lr, dtype=dtypes.float64, device=device),
            "step": Tensor(0, dtype=dtypes.int64, device=device),
        }
        self.state: dict[str, dict[str, Tensor]] = {
            name: {s: p.zeros_like().contiguous() for s in self.state_names}
            for name, p in self.named
        }
        realize(*(t for st in self.state.values() for t in st.values()))

    # ---- scalars that live on the device ----------------------------------------

    @property
    def lr(self) -> float:
        return self._scalars["lr"].item()

    @lr.setter
    def lr(self, value: float) -> None:
        if value < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {value}")
        realize(self._scalars["lr"].assign(float(value)))

    @property
    def steps(self) -> int:
        """How many steps have been committed."""
        return self._scalars["step"].item()

    def _next_scalars(self) -> dict[str, Tensor]:
        """This step's values of the device scalars (the step count after increment)."""
        s = self._scalars
        return {"lr": s["lr"], "step": s["step"] + 1}

    # ---- stepping ---------------------------------------------------------------

    def updates(self) -> list[Tensor]:
        """The pending ASSIGNs of one step: parameters, their state, the scalars."""
        with no_grad():
            nxt = self._next_scalars()
            out = [self._scalars[k].assign(v) for k, v in nxt.items() if k != "lr"]
            prof = profile.active()  # the stage viewer names each update by its parameter
            for name, p in self.named:
                if p.grad is None:
                    continue
                label = type(self).__name__ + ("" if name.isdigit() else f" {name}")
                with prof.within(self, label) if prof else no_grad():
                    g = p.grad.detach().cast(p.dtype)
                    new_p, new_state = self._update(p, g, self.state[name], nxt)
                    out.append(p.assign(new_p))
                    out += [self.state[name][k].assign(v) for k, v in new_state.items()]
        return out

    def step(self, *extra: Tensor) -> None:
        """Commit one update of every parameter (and compute ``extra``) in one realize."""
        realize(*self.updates(), *extra)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @property
    def param_groups(self) -> list[dict]:
        """torch's view of the settings: one group, whose ``"lr"`` reads and writes
        ``self.lr`` (``for g in opt.param_groups: g["lr"] = x`` works as in torch)."""
        return [_Group(self)]

    def _update(self, p: Tensor, g: Tensor, state: dict, s: dict):
        raise NotImplementedError

    # ---- checkpoints ------------------------------------------------------------

    def state_dict(self) -> dict[str, Tensor]:
        """The live state Tensors by ``<param path>.<state>``, plus the scalars."""
        out = {f"{n}.{k}": t for n, st in self.state.items() for k, t in st.items()}
        out.update(self._scalars)
        return out

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        assign_named(self.state_dict(), state, strict=strict, source="load_state_dict")


class _Group(dict):
    def __init__(self, opt: Optimizer):
        super().__init__(params=opt.params, lr=opt.lr)
        self.opt = opt

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "lr":
            self.opt.lr = value


def _scalar(t: Tensor, p: Tensor) -> Tensor:
    return t.cast(p.dtype)


def _lerp(a: Tensor, b: Tensor, w: float) -> Tensor:
    """a + w (b - a) as torch's lerp computes it: from the nearer end, with the weight
    rounded to the tensors' compute width first, so a step matches torch's to the ulp."""
    w = float(dtypes.to_numpy(dtypes.compute_dtype(a.dtype)).type(w))
    if abs(w) < 0.5:
        return a + (b - a) * w
    return b - (b - a) * (1 - w)


class SGD(Optimizer):
    """Stochastic gradient descent with torch's momentum, dampening, nesterov and
    (coupled, L2) weight decay. The first step seeds the momentum buffer with the
    gradient itself, undamped, as torch does."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening == 0")
        if momentum < 0 or weight_decay < 0:
            raise ValueError(
                f"SGD: momentum ({momentum}) and weight_decay ({weight_decay}) must be >= 0"
            )
        self.state_names = ("momentum_buffer",) if momentum else ()
        self.momentum, self.dampening = momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov
        super().__init__(params, lr)

    def _update(self, p, g, state, s):
        if self.weight_decay:
            g = g + p * self.weight_decay
        new_state = {}
        if self.momentum:
            buf = state["momentum_buffer"]
            later = buf * self.momentum + g * (1 - self.dampening)
            # the buffer starts at zero, so undamped the first step already gives g
            first = s["step"] == 1
            buf = first.where(g, later) if self.dampening else later
            new_state["momentum_buffer"] = buf
            g = g + buf * self.momentum if self.nesterov else buf
        return p - g * _scalar(s["lr"], p), new_state


class AdamW(Optimizer):
    """Adam with decoupled weight decay (p *= 1 - lr*wd before the Adam step), with
    bias correction from beta**t kept on the device. ``Adam`` is the same step with
    torch's Adam decay: coupled, the gradient plus wd * p (none by default)."""

    state_names = ("exp_avg", "exp_avg_sq")
    decoupled = True

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"{type(self).__name__}: needs 0 <= betas < 1, eps >= 0, weight_decay >= 0; "
                f"got betas={betas}, eps={eps}, weight_decay={weight_decay}"
            )
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        super().__init__(params, lr)
        device = self.params[0].device
        for k in ("beta1_power", "beta2_power"):
            self._scalars[k] = Tensor(1.0, dtype=dtypes.float64, device=device)

    def _next_scalars(self):
        s = super()._next_scalars()
        s["beta1_power"] = self._scalars["beta1_power"] * self.betas[0]
        s["beta2_power"] = self._scalars["beta2_power"] * self.betas[1]
        return s

    def _update(self, p, g, state, s):
        b1, b2 = self.betas
        lr = s["lr"]
        if self.decoupled:
            p = p * _scalar(1 - lr * self.weight_decay, p)
        elif self.weight_decay:
            g = g + p * self.weight_decay
        m = _lerp(state["exp_avg"], g, 1 - b1)
        v = state["exp_avg_sq"] * b2 + g * g * (1 - b2)
        step_size = _scalar(lr / (1 - s["beta1_power"]), p)
        bc2_sqrt = _scalar((1 - s["beta2_power"]).sqrt(), p)
        denom = v.sqrt() / bc2_sqrt + self.eps
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
        for name, p in _named(params):
            if p.ndim < 2:
                raise ValueError(
                    f"Muon: parameter {name!r} has shape {p.shape}; Muon takes matrices, "
                    "route 0-d and 1-d parameters to AdamW (see muon_with_adamw)"
                )
        self.weight_decay, self.momentum, self.nesterov = weight_decay, momentum, nesterov
        self.ns_coefficients, self.eps, self.ns_steps = ns_coefficients, eps, ns_steps
        self.ns_dtype = ns_dtype
        super().__init__(params, lr)

    def _update(self, p, g, state, s):
        buf = _lerp(state["momentum_buffer"], g, 1 - self.momentum)
        u = _lerp(g, buf, self.momentum) if self.nesterov else buf
        rows, cols = p.shape[0], math.prod(p.shape[1:])
        u = u.reshape(rows, cols)
        if self.ns_dtype is not None:
            u = u.cast(self.ns_dtype)
        u = newton_schulz(u, self.ns_steps, self.ns_coefficients, self.eps)
        u = u.cast(p.dtype).reshape(p.shape)
        lr = s["lr"]
        scale = math.sqrt(max(1.0, rows / cols))
        p = p * _scalar(1 - lr * self.weight_decay, p)
        return p - u * _scalar(lr * scale, p), {"momentum_buffer": buf}


class Combined:
    """Several optimizers stepped as one: all their writes commit in one realize.

    ``state_dict()`` prefixes each part's keys with its name (``muon.step``).
    """

    def __init__(self, **parts):
        if not parts:
            raise ValueError("Combined: needs at least one optimizer")
        self.parts: dict[str, Optimizer] = parts

    def updates(self) -> list[Tensor]:
        return [u for opt in self.parts.values() for u in opt.updates()]

    def step(self, *extra: Tensor) -> None:
        realize(*self.updates(), *extra)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts.values():
            opt.zero_grad()

    def state_dict(self) -> dict[str, Tensor]:
        return {f"{n}.{k}": t for n, opt in self.parts.items() for k, t in opt.state_dict().items()}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        assign_named(self.state_dict(), state, strict=strict, source="load_state_dict")


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
    named: Iterable = _named(params)
    to_muon = [(n, p) for n, p in named if use_muon(n, p)]
    to_adamw = [(n, p) for n, p in named if not use_muon(n, p)]
    parts = {}
    if to_muon:
        parts["muon"] = Muon(to_muon, lr=muon_lr, **(muon_kwargs or {}))
    if to_adamw:
        parts["adamw"] = AdamW(to_adamw, lr=adamw_lr, **(adamw_kwargs or {}))
    return Combined(**parts)


from limn.optim import lr_scheduler  # noqa: E402, F401  (it reads Optimizer)
