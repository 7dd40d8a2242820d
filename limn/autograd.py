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
import dataclasses
import threading
import weakref
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


class set_grad_enabled:
    """torch's switch: ``set_grad_enabled(False)`` turns recording off at once, and as a
    context manager restores the mode it found on exit."""

    def __init__(self, mode: bool):
        self.prev, _mode.enabled = _mode.enabled, bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _mode.enabled = self.prev


def inference_mode(mode: bool = True):
    """torch's faster ``no_grad``; in limn recording is all it saves, so it is ``no_grad``."""
    return _grad_mode(not mode)


@dataclass(repr=False)
class Ctx:
    """A Tensor's record, which is also its ``grad_fn`` (printed as torch names it)."""

    rule: object  # an Op, ("VIEW", kind), or the rule itself for a CUSTOM node's tensor
    parents: tuple  # the Tensors this one was computed from
    saved: object = None  # whatever the rule needs beyond the parents
    versions: tuple | None = None  # the parents' version counters when recorded (None: all 0)
    out_version: int = 0  # the result's version when recorded (an in-place op's: its write)

    def name(self) -> str:
        label = getattr(self, "label", None)  # a composite's own name (``Tensor.sum``'s)
        if label:
            return f"{label}Backward"
        # (a record a backward walked keeps its name: its rule moved to ``saved``)
        rule = self.saved if self.rule == "freed" else self.rule
        kind = rule[1] if isinstance(rule, tuple) else getattr(rule, "name", None)
        return f"{(kind or rule.__name__).title().replace('_', '')}Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def resolved(ctx) -> tuple:
    """The record's parents, each as it was when recorded: a parent written in place under
    autograd since (``limn/ops/inplace.py``) answers with the snapshot of it that the
    first such write after the recorded version replaced."""
    vs, out = ctx.versions, ctx.parents
    for i, p in enumerate(ctx.parents):
        past = p._past
        if past is not None:
            v = 0 if vs is None else vs[i]
            later = [k for k in past if k >= v] if v != p._version and v >= 0 else ()
            if later:
                out = out[:i] + (past[min(later)],) + out[i + 1 :]
    return out


def versions(parents) -> tuple | None:
    """The parents' versions (torch's version counters), None when none was written."""
    for p in parents:
        if p._vc is not None:
            return tuple(0 if q._vc is None else q._vc[0] for q in parents)
    return None


# The rules that read no value (of a parent, or of the op's result): a write to one of
# those since the op was recorded does not change the gradient, and torch saves none.
_READS_NOTHING = {Op.ADD, Op.NEG, Op.SUM, Op.CAST, Op.CONTIGUOUS, Op.SCATTER, Op.GATHER}
# The rules that read the op's result (torch saves it, and refuses it written)
_READS_RESULT = {Op.EXP, Op.SQRT, Op.RECIP, Op.TAN, Op.TANH, Op.EXP2, Op.EXPM1, Op.MAX}


def _needed(ctx) -> list[int]:
    """The parents whose values the rule reads for the gradients wanted (as torch saves
    them: a product saves each factor for the other's gradient)."""
    key, ps = ctx.rule, ctx.parents
    if key in _READS_NOTHING or isinstance(key, tuple):  # movements read shapes only
        return []
    if key in _READS_RESULT and key is not Op.MAX or getattr(key, "reads", "") == "result":
        return []  # torch saves the result alone
    if key is Op.MUL:
        return [i for i in (0, 1) if ps[1 - i].requires_grad]
    if key is Op.WHERE:
        return [0]
    return list(range(len(ps)))


def _cast_from(p) -> list:
    """A promoted operand (``Tensor._align``'s cast) saved for a gradient stands for the
    tensor it was cast from, as torch saves that tensor: it too must be unwritten."""
    src = p.__dict__.get("_cast_of")
    return [src] if src is not None and src[0]._version != src[1] else []


def _check_versions(t) -> None:
    """torch's check: a value the rule reads was written in place after the op read it."""
    ctx = t._ctx
    vs = ctx.versions
    found = [
        (ctx.parents[i], 0 if vs is None else vs[i])
        for i in _needed(ctx)
        if ctx.parents[i]._version != (0 if vs is None else vs[i]) and (vs is None or vs[i] >= 0)
    ]
    found += [(src, v) for i in _needed(ctx) for src, v in _cast_from(ctx.parents[i])]
    if t._version != ctx.out_version and (ctx.rule in _READS_RESULT or callable(ctx.rule)):
        found.append((t, ctx.out_version))
    if found:
        x, v = found[0]
        raise RuntimeError(
            "backward: one of the variables needed for gradient computation has been "
            f"modified by an inplace operation: [{x.dtype}{list(x.shape)}] is at version "
            f"{x._version}; expected version {v} instead (a value an op saved for its "
            "gradient was written after; write a clone, or write before the op)"
        )


def rule_of(key):
    """The gradient rule of an op's row (a movement's, by kind), or None.

    A composite that differentiates better as a whole than through its primitives records
    its rule function itself as the key: a convolution (``limn/nn.py``) and fused attention's
    CUSTOM node (``limn/attention.py``), which has no row of its own.
    """
    if callable(key):
        return key
    return TABLE[Op.VIEW].grad.get(key[1]) if isinstance(key, tuple) else TABLE[key].grad


def _order(roots) -> list:
    """Tensors reachable from the roots through recorded parents, each after every tensor
    computed from it."""
    order, seen = [], set()
    stack = [(root, False) for root in roots]
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
            ps = resolved(t._ctx)
            stack += [(p, False) for p in ps if p.requires_grad and id(p) not in seen]
    return order[::-1]


# What a tensor's record becomes once a backward has walked it without retain_graph: as in
# torch, the graph's saved values are let go (the forward's tensors can die, and a lazy
# value no longer held is never computed), and a second walk is an error, not a silent
# second accumulation. It keeps its name (its rule moves to ``saved``): it still prints.


def backward(root, grad, create_graph: bool = False, retain_graph: bool | None = None) -> None:
    """Accumulate d(root)/d(leaf) * grad into every leaf's ``.grad``, lazily; the graph is
    freed unless ``retain_graph`` (by default ``create_graph``, as in torch). The root is
    noted (``pending_roots``) so the next realize computes it with the gradients, and so are
    the gradients: reading one computes them all in one plan, as torch's backward does."""
    leaves = _propagate([root], [grad], create_graph, retain_graph)
    _mode.roots = [*getattr(_mode, "roots", ())[-3:], weakref.ref(root)]
    _mode.grads = [weakref.ref(t.grad) for t in leaves if not create_graph]


def pending_roots() -> list:
    """The roots of this thread's backward calls since the last realize that are alive
    and not computed yet, and the gradients of the last: the realize that computes their
    gradients (``opt.step()``) computes them too, so a loss read after the step costs no
    second forward and the forward's reads of the parameters are in the step's batch (their
    bytes can be reused); a program that reads the gradients one by one plans them once."""
    refs = [*getattr(_mode, "roots", ()), *getattr(_mode, "grads", ())]
    if not refs:
        return []
    _mode.roots = _mode.grads = []
    return [t for r in refs if (t := r()) is not None and t.node.op is not Op.BUFFER]


def _propagate(roots, grads_in, create_graph: bool, retain_graph, wanted: dict | None = None):
    """Walk the rules back from ``roots`` (seeded with ``grads_in``). Without ``wanted``,
    each leaf's gradient accumulates into its ``.grad`` and the leaves are returned; with it
    (id -> Tensor), the gradients of those tensors are returned by id and no ``.grad`` is
    touched."""
    grads, leaves = {}, []
    for r, g in zip(roots, grads_in):
        grads[id(r)] = g if id(r) not in grads else grads[id(r)].p_add(g)
    found = {}
    order = _order(roots)
    with enable_grad() if create_graph else no_grad():
        for t in order:
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if wanted is not None and id(t) in wanted:
                found[id(t)] = g
            if t._ctx is None:
                if wanted is None:
                    if not create_graph:
                        # the leaf gets the value in a tensor of its own (a rule may give
                        # one tensor to two parents, and ``.grad`` is written in place),
                        # not an alias holding an internal value's graph
                        g = type(g)._make(g.node, g.device)
                    if t.grad is None:
                        t.grad = g
                    elif create_graph:  # torch's: a new tensor, itself differentiable
                        t.grad = t.grad + g
                    else:  # into the tensor held, as torch accumulates
                        t.grad.assign((t.grad + g).cast(t.grad.dtype))
                    leaves.append(t)
                continue
            if t._ctx.rule == "freed":
                raise RuntimeError(
                    "backward: Trying to backward through the graph a second time (its saved "
                    "values were freed by the first backward); specify retain_graph=True on "
                    "the first backward to walk it again"
                )
            _check_versions(t)
            rule = rule_of(t._ctx.rule)
            if rule is None:
                raise RuntimeError(f"backward: {t._ctx.rule} has no gradient rule")
            prof = profile.active()  # the gradient's kernels name the forward op's line
            with prof.blame(t.node) if prof else contextlib.nullcontext():
                ctx = t._ctx
                ps = resolved(ctx)
                if ps is not ctx.parents:  # the rule reads the parents as they were
                    ctx = dataclasses.replace(ctx, parents=ps)
                pgs = rule(ctx, t, g)
            for p, pg in zip(ps, pgs):
                if pg is None or not p.requires_grad:
                    continue
                grads[id(p)] = pg if id(p) not in grads else grads[id(p)].p_add(pg)
    if not (create_graph if retain_graph is None else retain_graph):
        for t in order:
            if t._ctx is not None:
                ctx = t._ctx
                if ctx.rule != "freed":
                    ctx.rule, ctx.parents, ctx.saved = "freed", (), ctx.rule
    return found if wanted is not None else leaves


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    create_graph: bool = False,
    retain_graph: bool | None = None,
    allow_unused: bool = False,
) -> tuple:
    """torch's ``autograd.grad``: the gradients of ``outputs`` (weighted by
    ``grad_outputs``) with respect to each of ``inputs``, as a tuple, leaving every
    ``.grad`` as it was. With ``create_graph`` they are differentiable (a gradient
    penalty). The graph is freed unless ``retain_graph`` (by default ``create_graph``)."""
    outputs = [outputs] if not isinstance(outputs, list | tuple) else list(outputs)
    inputs = [inputs] if not isinstance(inputs, list | tuple) else list(inputs)
    if grad_outputs is None or not isinstance(grad_outputs, list | tuple):
        grad_outputs = [grad_outputs] * len(outputs)
    seeds = []
    for i, (o, go) in enumerate(zip(outputs, grad_outputs, strict=True)):
        if not o.requires_grad:
            raise RuntimeError(f"autograd.grad: output {i} does not require grad")
        if go is None and o.numel() != 1:
            raise RuntimeError(
                f"autograd.grad: output {i} has shape {o.shape}; pass grad_outputs of that "
                "shape, or reduce it to a scalar first"
            )
        seeds.append(o.p_const(1) if go is None else go.cast(o.dtype).expand(*o.shape))
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"autograd.grad: input {i} does not require grad")
    found = _propagate(outputs, seeds, create_graph, retain_graph, {id(t): t for t in inputs})
    unused = [i for i, t in enumerate(inputs) if id(t) not in found]
    if unused and not allow_unused:
        raise RuntimeError(
            f"autograd.grad: inputs {unused} were not used to compute the outputs; pass "
            "allow_unused=True to get None for them"
        )
    return tuple(found.get(id(t)) for t in inputs)
