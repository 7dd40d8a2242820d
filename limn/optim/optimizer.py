"""The optimizer base class: parameter groups, state, ``zero_grad``, ``step`` and the
state dict, shared by every optimizer of ``limn.optim`` (and ``lbfgs.py``, in its own file)."""

from __future__ import annotations

from ir.graph import dtypes
from limn.autograd import no_grad
from limn.nn.module import zero_grads
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
        self.defaults, self.param_groups, self.named, self.params = defaults, [], [], []
        self.state: dict[str, dict[str, Tensor]] = {}
        self._scalars: dict[str, Tensor] = {}
        for given in _groups(params):
            self.add_param_group(given)

    def add_param_group(self, param_group: dict) -> None:
        """One more group (torch's ``add_param_group``): its parameters, and the settings
        where it differs from the defaults. Its state starts fresh; a parameter already
        in another group is refused."""
        i = len(self.param_groups)
        unknown = sorted(set(param_group) - set(self.defaults) - {"params"})
        if not isinstance(param_group, dict) or "params" not in param_group or unknown:
            got = sorted(param_group) if isinstance(param_group, dict) else type(param_group)
            raise ValueError(
                f"{type(self).__name__}: parameter group {i} needs 'params' and settings "
                f"among {sorted(self.defaults)}; got {got}"
            )
        named = _param_list(param_group["params"], len(self.named))
        if not named:
            raise ValueError("optimizer: got an empty parameter list")
        group = _Group({**self.defaults, **param_group, "params": [p for _, p in named]})
        group.names = [n for n, _ in named]
        self._check(group)
        seen = {id(p) for p in self.params}
        for name, p in named:
            if id(p) in seen:
                raise ValueError(f"optimizer: parameter {name!r} is listed twice")
            seen.add(id(p))
        device = (self.params or group["params"])[0].device
        self.named += named
        self.params += group["params"]
        self.param_groups.append(group)
        if not self._scalars:
            self._scalars["step"] = Tensor(0, dtype=dtypes.int64, device=device)
        group.scalars = {
            k: Tensor(v, dtype=dtypes.float64, device=device)
            for k, v in self._group_scalars(group).items()
        }
        prefix = f"param_groups.{i}." if i else ""  # one group keeps the plain names
        self._scalars.update({prefix + k: t for k, t in group.scalars.items()})
        fresh = {
            name: {
                s: (p.zeros_like() + self._state_start(group, s)).cast(p.dtype).clone()
                for s in self._state_names(group)
            }
            for name, p in named
        }
        self.state.update(fresh)
        realize(*(t for st in fresh.values() for t in st.values()))

    def _check(self, group: dict) -> None:
        if group["lr"] < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {group['lr']}")

    def _group_scalars(self, group: dict) -> dict[str, float]:
        """A group's settings that live on the device, with their first values."""
        return {"lr": group["lr"]}

    def _state_names(self, group: dict) -> tuple[str, ...]:
        return self.state_names

    def _state_start(self, group: dict, name: str) -> float:
        """The value a piece of state starts at (zero but for Adagrad's sum)."""
        return 0.0

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
        """Drop every gradient, or with ``set_to_none=False`` make each a zero Tensor."""
        zero_grads(self.params, set_to_none)

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
