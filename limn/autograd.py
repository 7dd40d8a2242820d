"""Reverse-mode autograd: the engine that walks the gradient rules of the op table.

A Tensor built by an op of the table (a primitive or a composite row) remembers (op,
parents, saved) in ``_ctx``. ``backward`` walks those records from the loss back to the
leaves and calls each row's gradient rule (``ir/graph/grads.py``) with the gradient
flowing into its output; a rule answers with one gradient per parent (None where a parent
takes none). Rules are written in the primitive protocol, so on Tensors the gradients
they build are lazy graphs like any other, and with ``create_graph=True`` they record
their own ``_ctx`` and can be differentiated again.

Movement ops are all the VIEW primitive to the compiler, but each undoes differently: a
movement records ("VIEW", kind) and its rule is the VIEW row's rule for that kind.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

from ir.graph.ops import TABLE, Op
from limn.runtime import profile


class _GradMode(threading.local):
    """Whether new tensors record their gradient rule: per thread, as in torch, so one
    thread's optimizer step under ``no_grad`` never silences another's forward pass."""

    enabled = True


_mode = _GradMode()


def grad_enabled() -> bool:
    return _mode.enabled


@contextlib.contextmanager
def _grad_mode(flag: bool):
    prev = _mode.enabled
    _mode.enabled = flag
    try:
        yield
    finally:
        _mode.enabled = prev


def no_grad():
    """Build graph without recording how to differentiate it."""
    return _grad_mode(False)


def enable_grad():
    return _grad_mode(True)


@dataclass
class Ctx:
    rule: object  # an Op, ("VIEW", kind), or the rule itself for a CUSTOM node's tensor
    parents: tuple  # the Tensors this one was computed from
    saved: object = None  # whatever the rule needs beyond the parents


def rule_of(key):
    """The gradient rule of an op's row (a movement's, by kind), or None.

    A composite that differentiates better as a whole than through its primitives records
    its rule function itself as the key: a convolution (``limn/nn.py``) and fused attention's
    CUSTOM node (``limn/attention.py``), which has no row of its own.
    """
    if callable(key):
        return key
    return TABLE[Op.VIEW].grad.get(key[1]) if isinstance(key, tuple) else TABLE[key].grad


def _order(root) -> list:
    """Tensors reachable from root through recorded parents, root first."""
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t._ctx is not None:
            stack += [(p, False) for p in t._ctx.parents if p.requires_grad and id(p) not in seen]
    return order[::-1]


# What a tensor's record becomes once a backward has walked it without retain_graph: as in
# torch, the graph's saved values are let go (the forward's tensors can die, and a lazy
# value no longer held is never computed), and a second walk is an error, not a silent
# second accumulation.
FREED = Ctx("freed", ())


def backward(root, grad, create_graph: bool = False, retain_graph: bool | None = None) -> None:
    """Accumulate d(root)/d(leaf) * grad into every leaf's ``.grad``, lazily; the graph is
    freed unless ``retain_graph`` (by default ``create_graph``, as in torch)."""
    grads = {id(root): grad}
    order = _order(root)
    with enable_grad() if create_graph else no_grad():
        for t in order:
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if t._ctx is None:
                t.grad = g if t.grad is None else t.grad + g
                continue
            if t._ctx is FREED:
                raise RuntimeError(
                    "backward: Trying to backward through the graph a second time (its saved "
                    "values were freed by the first backward); specify retain_graph=True on "
                    "the first backward to walk it again"
                )
            rule = rule_of(t._ctx.rule)
            if rule is None:
                raise RuntimeError(f"backward: {t._ctx.rule} has no gradient rule")
            prof = profile.active()  # the gradient's kernels name the forward op's line
            with prof.blame(t.node) if prof else contextlib.nullcontext():
                pgs = rule(t._ctx, t, g)
            for p, pg in zip(t._ctx.parents, pgs):
                if pg is None or not p.requires_grad:
                    continue
                grads[id(p)] = pg if id(p) not in grads else grads[id(p)].p_add(pg)
    if not (create_graph if retain_graph is None else retain_graph):
        for t in order:
            if t._ctx is not None:
                t._ctx = FREED
