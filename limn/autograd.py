"""Reverse-mode autograd: one gradient rule per primitive, in one table.

A Tensor built by a primitive remembers (rule, parents, saved) in ``_ctx``. ``backward``
walks those records from the loss back to the leaves and calls each rule with the
gradient flowing into its output; a rule answers with one gradient per parent (None where
a parent takes none). Rules are written with Tensor methods, so the gradients they build
are lazy graphs like any other, and with ``create_graph=True`` they record their own
``_ctx`` and can be differentiated again.

Movement ops are all the VIEW primitive to the compiler, but each undoes differently, so
the table keys them by movement kind.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ir.graph import compose
from ir.graph.ops import Op
from limn.runtime import profile

_enabled = [True]


def grad_enabled() -> bool:
    return _enabled[0]


@contextlib.contextmanager
def no_grad():
    """Build graph without recording how to differentiate it."""
    prev = _enabled[0]
    _enabled[0] = False
    try:
        yield
    finally:
        _enabled[0] = prev


@contextlib.contextmanager
def enable_grad():
    prev = _enabled[0]
    _enabled[0] = True
    try:
        yield
    finally:
        _enabled[0] = prev


@dataclass
class Ctx:
    rule: object  # an Op, or ("VIEW", kind)
    parents: tuple  # the Tensors this one was computed from
    saved: object = None  # whatever the rule needs beyond the parents


def _sum_to(g, shape):
    """Undo a broadcast: sum the dims that were expanded from 1."""
    axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, shape)) if a != b)
    return g.p_sum(axes) if axes else g


def _unstep(g, in_shape, steps):
    """Place g's elements every k-th along each dim, zeros between: pads and reshapes."""
    for axis, k in enumerate(steps):
        if k == 1:
            continue
        n = g.shape[axis]
        pre, post = tuple(g.shape[:axis]), tuple(g.shape[axis + 1 :])
        g = g.p_reshape(pre + (n, 1) + post)
        pads = [(0, 0)] * len(g.shape)
        pads[axis + 1] = (0, k - 1)
        g = g.p_pad(tuple(pads)).p_reshape(pre + (n * k,) + post)
        bounds = [(0, s) for s in g.shape]
        bounds[axis] = (0, in_shape[axis])
        g = g.p_shrink(tuple(bounds))
    return g


def _window_grad(ctx, out, g):
    """Overlap-add: an input element collects the gradient of every window that read it.

    Offset j of the windows is the input read every ``stride`` from j*dilation, so its
    slice of g is spread ``stride`` apart and shifted there; the k pieces add up.
    """
    axis, k, stride, dilation = ctx.saved
    shape = ctx.parents[0].shape
    size, o = shape[axis], g.shape[axis]
    span = (o - 1) * stride + 1
    steps = tuple(stride if d == axis else 1 for d in range(len(shape)))
    total = None
    for j in range(k):
        bounds = tuple((j, j + 1) if d == axis + 1 else (0, s) for d, s in enumerate(g.shape))
        piece = g.p_shrink(bounds).p_reshape(g.shape[: axis + 1] + g.shape[axis + 2 :])
        piece = _unstep(piece, shape[:axis] + (span,) + shape[axis + 1 :], steps)
        start = j * dilation
        pads = tuple(
            (start, size - start - span) if d == axis else (0, 0) for d in range(len(shape))
        )
        piece = piece.p_pad(pads)
        total = piece if total is None else total.p_add(piece)
    return (total,)


def _max_grad(ctx, out, g):
    (x,) = ctx.parents
    hit = compose.eq(x, out.p_expand(x.shape))
    one, zero = x.p_const(1), x.p_const(0)
    mask = hit.p_where(one, zero)
    count = mask.p_sum(ctx.saved).p_expand(x.shape)
    return (mask.p_mul(count.p_recip()).p_mul(g.p_expand(x.shape)),)


def _float_cast_grad(ctx, out, g):
    (x,) = ctx.parents
    return (g.p_cast(x.dtype) if x.dtype.is_float and out.dtype.is_float else None,)


RULES = {
    Op.NEG: lambda ctx, out, g: (g.p_neg(),),
    Op.EXP: lambda ctx, out, g: (g.p_mul(out),),
    Op.LOG: lambda ctx, out, g: (g.p_mul(ctx.parents[0].p_recip()),),
    Op.SQRT: lambda ctx, out, g: (g.p_mul(out.p_mul(out.p_const(2)).p_recip()),),
    Op.RECIP: lambda ctx, out, g: (g.p_mul(out.p_mul(out)).p_neg(),),
    Op.CAST: _float_cast_grad,
    Op.ADD: lambda ctx, out, g: (g, g),
    Op.MUL: lambda ctx, out, g: (g.p_mul(ctx.parents[1]), g.p_mul(ctx.parents[0])),
    Op.CMPLT: lambda ctx, out, g: (None, None),
    # IDIV, MOD, AND, OR, XOR, SHL, SHR and BITCAST act on integers and bits: no gradient.
    Op.WHERE: lambda ctx, out, g: (
        None,
        ctx.parents[0].p_where(g, g.p_const(0)),
        ctx.parents[0].p_where(g.p_const(0), g),
    ),
    Op.SUM: lambda ctx, out, g: (g.p_expand(ctx.parents[0].shape),),
    Op.MAX: _max_grad,
    Op.GATHER: lambda ctx, out, g: (
        ctx.parents[0].p_const(0).p_scatter(ctx.parents[1], g, ctx.saved),
        None,
    ),
    Op.SCATTER: lambda ctx, out, g: (g, None, g.p_gather(ctx.parents[1], ctx.saved)),
    Op.CONTIGUOUS: lambda ctx, out, g: (g,),
    ("VIEW", "reshape"): lambda ctx, out, g: (g.p_reshape(ctx.parents[0].shape),),
    ("VIEW", "permute"): lambda ctx, out, g: (
        g.p_permute(tuple(sorted(range(len(ctx.saved)), key=lambda i: ctx.saved[i]))),
    ),
    ("VIEW", "expand"): lambda ctx, out, g: (_sum_to(g, ctx.parents[0].shape),),
    ("VIEW", "pad"): lambda ctx, out, g: (
        g.p_shrink(tuple((b, b + s) for (b, _), s in zip(ctx.saved, ctx.parents[0].shape))),
    ),
    ("VIEW", "shrink"): lambda ctx, out, g: (
        g.p_pad(tuple((b, s - e) for (b, e), s in zip(ctx.saved, ctx.parents[0].shape))),
    ),
    ("VIEW", "flip"): lambda ctx, out, g: (g.p_flip(ctx.saved),),
    ("VIEW", "step"): lambda ctx, out, g: (_unstep(g, ctx.parents[0].shape, ctx.saved),),
    ("VIEW", "window"): _window_grad,
}


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
            for p in t._ctx.parents:
                if p.requires_grad and id(p) not in seen:
                    stack.append((p, False))
    return order[::-1]


def backward(root, grad, create_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) * grad into every leaf's ``.grad``, lazily."""
    grads = {id(root): grad}
    with enable_grad() if create_graph else no_grad():
        for t in _order(root):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if t._ctx is None:
                t.grad = g if t.grad is None else t.grad + g
                continue
            rule = RULES.get(t._ctx.rule)
            if rule is None:
                raise RuntimeError(f"backward: {t._ctx.rule} has no gradient rule")
            prof = profile.active()
            if prof is None:
                pgs = rule(t._ctx, t, g)
            else:
                with prof.blame(t.node):  # the gradient's kernels name the forward op's line
                    pgs = rule(t._ctx, t, g)
            for p, pg in zip(t._ctx.parents, pgs):
                if pg is None or not p.requires_grad:
                    continue
                grads[id(p)] = pg if id(p) not in grads else grads[id(p)].p_add(pg)
