"""The Module tree: how a model's Tensors are found, named, moved, saved and loaded.

A Module is a plain Python object; whatever Tensors it holds in its attributes, directly
or inside lists, dicts and other Modules, are its state. Nothing is registered: the tree
is walked when asked, so ``named_parameters()`` gives the dotted path of each trainable
Tensor (``blocks.0.qkv.weight``) in attribute order, and ``state_dict()`` is keyed by the
same paths. A Tensor with ``requires_grad`` is a parameter; one without is a buffer,
saved and loaded but not trained (``register_buffer`` and ``Parameter`` are torch's
spellings of the same attributes). Attributes whose names start with ``_`` are private
and not walked (a cache, a mask recomputed on demand).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator

from ir.graph.dtypes import as_dtype
from limn.autograd import no_grad
from limn.runtime import profile
from limn.serialize import IncompatibleKeys, assign_named
from limn.tensor import Tensor, realize


def _children(obj) -> Iterator[tuple[str, object]]:
    if isinstance(obj, Module):
        return ((k, v) for k, v in vars(obj).items() if not k.startswith("_"))
    if isinstance(obj, dict):
        return ((str(k), v) for k, v in obj.items())
    return ((str(i), v) for i, v in enumerate(obj))


def _named_attributes(
    obj, prefix: str, seen: set[int], aliases: bool = False
) -> Iterator[tuple[str, object]]:
    """Every Tensor and Module under ``obj``, each once (the first path that reaches it);
    with ``aliases``, a Tensor also under every later path (a tied weight's second name)."""
    for name, v in _children(obj):
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(v, Tensor | Module):
            if id(v) in seen:
                if aliases and isinstance(v, Tensor):
                    yield path, v
                continue
            seen.add(id(v))
            yield path, v
            if isinstance(v, Module):
                yield from _named_attributes(v, path, seen, aliases)
        elif isinstance(v, list | tuple | dict):
            yield from _named_attributes(v, path, seen, aliases)


def Parameter(data: Tensor, requires_grad: bool = True) -> Tensor:  # noqa: N802
    """torch's ``nn.Parameter(t)``: a leaf Tensor holding t's value that takes gradients
    (in limn a parameter is any Tensor attribute with ``requires_grad``)."""
    return data.detach().clone().realize().requires_grad_(requires_grad)


# Attribute writes and deletions on any Module, counted: a captured step's replay compares
# this one number instead of walking the model's modules at every call (``limn.capture``).
edits = 0


class Module:
    """Base class: subclasses set attributes in ``__init__`` and define ``forward``."""

    training = True

    def __setattr__(self, name: str, value) -> None:
        global edits
        object.__setattr__(self, name, value)
        edits += 1

    def __delattr__(self, name: str) -> None:
        global edits
        object.__delattr__(self, name)
        edits += 1

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._made_with = (args, kwargs)  # what ``print(model)`` shows, as torch does
        return self

    def __call__(self, *args, **kwargs):
        prof = profile.active()  # while profiling, its nodes are noted with this module's path
        with prof.within(self) if prof else contextlib.nullcontext():
            return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}: define forward()")

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True):
        setattr(self, name, tensor.detach() if tensor is not None else None)

    def register_parameter(self, name: str, param: Tensor | None):
        setattr(self, name, param)

    def add_module(self, name: str, module: Module | None):
        setattr(self, name, module)

    def named_modules(self) -> list[tuple[str, Module]]:
        """This module (path "") and every module below it."""
        return [("", self)] + [
            (p, v) for p, v in _named_attributes(self, "", set()) if isinstance(v, Module)
        ]

    def modules(self) -> list[Module]:
        return [m for _, m in self.named_modules()]

    def named_children(self) -> list[tuple[str, Module]]:
        return [(p, m) for p, m in self.named_modules()[1:] if "." not in p]

    def children(self) -> list[Module]:
        return [m for _, m in self.named_children()]

    def apply(self, fn: Callable[[Module], object]) -> Module:
        """``fn`` on every module below this one, then on this one, as torch orders it."""
        for m in reversed(self.modules()):
            fn(m)
        return self

    def _named_tensors(self) -> list[tuple[str, Tensor]]:
        return [(p, v) for p, v in _named_attributes(self, "", set()) if isinstance(v, Tensor)]

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        return [(p, t) for p, t in self._named_tensors() if t.requires_grad]

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """A generator, as torch's: ``next(model.parameters())`` is the first; take
        ``list(...)`` to index or to walk twice."""
        return (t for _, t in self.named_parameters())

    def named_buffers(self) -> list[tuple[str, Tensor]]:
        return [(p, t) for p, t in self._named_tensors() if not t.requires_grad]

    def buffers(self) -> list[Tensor]:
        return [t for _, t in self.named_buffers()]

    def state_dict(self) -> dict[str, Tensor]:
        """Parameters and buffers by path: the live Tensors, not copies. A Tensor held at
        two paths (tied weights) is under both, as torch's state dict has it."""
        pairs = _named_attributes(self, "", set(), aliases=True)
        return {p: v for p, v in pairs if isinstance(v, Tensor)}

    def load_state_dict(self, state: dict, strict: bool = True) -> IncompatibleKeys:
        """Write ``state`` (Tensors or numpy arrays by path) into this module's own Tensors;
        returns the missing and unexpected names, as torch does.

        Everything is checked first (names, shapes); then every write, cast to its
        destination's dtype as torch casts, commits in one realize, so a Tensor a captured
        step holds keeps its buffer.
        """
        dests = self.state_dict()
        return assign_named(dests, state, strict, source="load_state_dict", cast=True)

    def to(self, *args, **kwargs) -> Module:
        """Move every Tensor of the tree in place (``Tensor.to``'s arguments); a dtype
        applies to the float ones only, as in torch. Each keeps its identity, so an
        optimizer made before still holds the model's parameters."""
        for _, t in self._named_tensors():
            new = t.detach().to(*args, **kwargs)
            new = new if t.dtype.is_float else new.cast(t.dtype)
            if (new.device, new.dtype) != (t.device, t.dtype):
                t.node, t.device = new.realize().node, new.device
        return self

    def float(self) -> Module:
        return self.to(as_dtype("float32"))

    def half(self) -> Module:
        return self.to(as_dtype("float16"))

    def double(self) -> Module:
        return self.to(as_dtype("float64"))

    def bfloat16(self) -> Module:
        return self.to(as_dtype("bfloat16"))

    def train(self, mode: bool = True) -> Module:
        for _, m in self.named_modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, flag: bool = True) -> Module:
        for _, t in self._named_tensors():
            if t.dtype.is_float:
                t.requires_grad_(flag)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every gradient, or with ``set_to_none=False`` make each a zero Tensor."""
        zero_grads(list(self.parameters()), set_to_none)

    def extra_repr(self) -> str:
        """The arguments the module was made with, by name, defaults included (None left
        out): torch's ``Dropout(p=0.1, inplace=False)``, ``Softmax(dim=-1)``."""
        args, kwargs = getattr(self, "_made_with", ((), {}))
        params = inspect.signature(type(self).__init__).parameters
        try:
            bound = inspect.signature(type(self).__init__).bind(self, *args, **kwargs)
        except TypeError:
            return ""
        bound.apply_defaults()
        shown = []
        for name, v in list(bound.arguments.items())[1:]:
            if params[name].kind == inspect.Parameter.VAR_POSITIONAL:
                shown += [repr(a) for a in v]
            elif params[name].kind == inspect.Parameter.VAR_KEYWORD:
                shown += [f"{k}={a!r}" for k, a in v.items()]
            elif v is not None:
                shown.append(f"{name}={v!r}")
        return ", ".join(shown)

    def __repr__(self) -> str:
        """torch's layout: a module with children lists them, one ``(name): repr`` a line;
        one without shows its arguments."""
        children = [f"({n}): {m!r}".replace("\n", "\n  ") for n, m in self.named_children()]
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(children) + "\n)"


class ModuleList(Module):
    """Modules in a list, named "0", "1", ... in the tree as in torch."""

    def __init__(self, modules=()):
        self.extend(modules)

    def append(self, module) -> ModuleList:
        setattr(self, str(len(self)), module)
        return self

    def extend(self, modules) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def __iter__(self):
        return (v for k, v in vars(self).items() if k.isdigit())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __getitem__(self, i):
        items = list(self)
        return type(self)(items[i]) if isinstance(i, slice) else items[i]


class Sequential(ModuleList):
    """Layers applied in order; a layer is a Module or any callable (``Tensor.relu``)."""

    def __init__(self, *layers: Callable):
        super().__init__(layers)

    def __getitem__(self, i):
        items = list(self)
        return Sequential(*items[i]) if isinstance(i, slice) else items[i]

    def forward(self, x: Tensor) -> Tensor:
        for layer in self:
            x = layer(x)
        return x


class ModuleDict(Module):
    """Modules by name, as attributes: ``d["wte"]`` is ``d.wte``."""

    def __init__(self, modules: dict | None = None):
        for k, m in (modules or {}).items():
            setattr(self, k, m)

    def __getitem__(self, key: str):
        return getattr(self, key)

    __setitem__ = Module.add_module

    def items(self):
        return [(k, v) for k, v in vars(self).items() if not k.startswith("_")]

    def keys(self):
        return [k for k, _ in self.items()]

    def values(self):
        return [v for _, v in self.items()]

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.items())


def zero_grads(params: list[Tensor], set_to_none: bool) -> None:
    """torch's two ``zero_grad``s: gradients dropped (None), or each gradient tensor
    zeroed in place, so a tensor held (``g = w.grad``) reads the zeros (those without one
    stay None, as in torch)."""
    for p in params:
        if p.grad is not None and not set_to_none:
            with no_grad():
                p.grad.detach_().zero_()
        else:
            p.grad = None
    realize(*(p.grad for p in params if p.grad is not None))  # one batch for them all


def _uniform_param(shape, bound: float, dtype) -> Tensor:
    return Tensor.uniform(shape, -bound, bound, dtype=as_dtype(dtype), requires_grad=True)


class Apply(Module):
    """A module that applies one function (a Tensor method or a functional form) with the
    arguments it was made with: ``nn.ReLU()``, ``nn.Softmax(dim=-1)``, ``nn.MaxPool2d(2)``,
    the loss modules. ``fn`` and ``defaults`` are set per subclass (``apply_module``)."""

    fn: Callable = staticmethod(lambda *x: x[0])
    defaults: tuple = ()
    inplace_at: int | None = None  # where torch's constructor takes ``inplace`` positionally

    def __init__(self, *args, **kwargs):
        at = self.inplace_at
        if at is not None and len(args) > at:  # nn.ReLU(True), nn.LeakyReLU(0.2, True)
            kwargs["inplace"], args = args[at], args[:at] + args[at + 1 :]
        if not kwargs.get("inplace", True):  # (given only to a function that takes it)
            del kwargs["inplace"]
        self._args, self._kwargs = args or self.defaults, kwargs

    def forward(self, *inputs):
        return type(self).fn(*inputs, *self._args, **self._kwargs)


def apply_module(name: str, fn: Callable, defaults: tuple = (), inplace_at=None) -> type:
    attrs = {"fn": staticmethod(fn), "defaults": defaults, "inplace_at": inplace_at}
    return type(name, (Apply,), attrs)
