"""torch's argument forms, one rule each, for every mixin of ``limn.Tensor`` in this folder.

torch's argument names are accepted beside limn's by one rule, ``torch_names``: every
method with an ``axis`` parameter also takes ``dim=`` (and ``keepdims=`` for
``keepdim=``, ``unbiased=`` for ``correction=``); ``accept_torch_names`` applies it to a
whole mixin. ``scalar_dims`` lets a reduction take torch's dim 0 or -1 on a 0-d tensor.
``_labelled`` names the autograd record of a composite as torch prints it.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from ir.graph import compose
from ir.graph.build import Spelled
from ir.graph.dtypes import DType


def _labelled(out, label: str):
    """``out`` whose autograd record prints torch's name for the composite that made it
    (``<SumBackward>``, not the reshape that ended it)."""
    if out._ctx is not None:
        out._ctx.label = label
    return out


def on_nodes(composite, x, *args):
    """``composite(x, *args)`` (a function of ``ir/graph/compose.py``, a new value of primitives)
    for tensor ``x`` (and the tensors among ``args``). Where no gradient records it, it is
    built on their bare nodes: its dozens of intermediates are no program's tensors, so none
    is wrapped, recorded or aliased, and the value is one new tensor (a third of a small
    transformer's graph building, sampling)."""
    from limn import autograd

    tensors = [a for a in (x, *args) if isinstance(a, type(x))]
    if autograd.grad_enabled() and any(t.requires_grad for t in tensors):
        return composite(x, *args)
    bare = [Spelled(a.node) if isinstance(a, type(x)) else a for a in (x, *args)]
    return type(x)._make(composite(*bare).node, x.device)


def scalar_dims(fn):
    """``fn`` taking torch's dim 0 or -1 on a 0-d tensor (``x.sum(0)``, ``x.argmax(-1)``):
    computed on it as shape (1,), each tensor it answers made 0-d again."""
    sig = inspect.signature(fn)
    key = "axis" if "axis" in sig.parameters else "dim"

    @functools.wraps(fn)
    def method(self, *args, **kw):
        if self.ndim == 0:
            bound = sig.bind(self, *args, **kw)
            bound.apply_defaults()
            axis = bound.arguments.get(key)
            axes = axis if isinstance(axis, tuple | list) else (axis,)
            if axis is not None and axes and all(type(a) is int and a in (0, -1) for a in axes):
                out = fn(self.reshape(1), *args, **kw)
                if isinstance(out, tuple):
                    return type(out)(*(t.reshape(()) for t in out))
                return out.reshape(())
        return fn(self, *args, **kw)

    return method


TORCH_NAMES = {"dim": "axis", "keepdims": "keepdim", "unbiased": "correction"}


def torch_names(fn):
    """``fn`` (with an ``axis`` parameter) taking torch's names too: ``dim`` for ``axis``,
    ``keepdims`` for ``keepdim``, ``unbiased`` for ``correction``."""

    @functools.wraps(fn)
    def method(*args, **kw):
        if kw:
            for torch_name, ours in TORCH_NAMES.items():
                if torch_name in kw:
                    kw[ours] = kw.pop(torch_name)
            if "correction" in kw and isinstance(kw["correction"], bool | None):
                c = kw["correction"]  # torch's None: the default, 1
                kw["correction"] = 1 if c is None else int(c)
        return fn(*args, **kw)

    return method


def accept_torch_names(cls):
    """Every method of ``cls`` with an ``axis`` parameter, wrapped by ``torch_names``."""
    for name, fn in list(vars(cls).items()):
        params = inspect.signature(fn).parameters if inspect.isfunction(fn) else {}
        if "axis" in params and "dim" not in params:
            setattr(cls, name, torch_names(fn))
    return cls


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    try:
        return compose.as_ints(shape, "shape", "shape")
    except TypeError:
        hint = ""
        if any(isinstance(s, str | DType | np.dtype | type) for s in shape):
            hint = "; pass a dtype by keyword (dtype=...)"
        raise TypeError(f"shape: needs ints, got {shape}{hint}") from None


def _ints(v) -> list[int]:
    return [int(i) for i in v] if isinstance(v, list | tuple) else [int(v)]


def _tensors(tensors, op: str) -> list:
    ts = (
        list(tensors[0])
        if len(tensors) == 1 and isinstance(tensors[0], list | tuple)
        else list(tensors)
    )
    if not ts:
        raise ValueError(f"{op}: needs at least one tensor")
    return ts
