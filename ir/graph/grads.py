"""The gradient rules of the op table, one small function per row.

A rule takes (ctx, out, g): ``ctx.parents`` are the operands (``ctx.saved`` whatever the
op recorded: axes, an axis, a movement's argument), ``out`` the op's result and ``g`` the
gradient flowing into it, and returns one gradient per operand (None where one takes
none). Rules are spelled in the primitive protocol plus ``p_op`` for composite rows, so
the gradient of ``sin`` is a ``cos`` node, not the derivative of sin's decomposition, and
a gradient graph can be differentiated again (``create_graph=True``).

Movement ops are all VIEW to the compiler, but each undoes differently: ``MOVEMENT`` keys
their rules by movement kind.
"""

from __future__ import annotations

import math

from ir.graph import compose
from ir.graph.opcodes import Op


def _div(a, b):
    return a.p_op(Op.DIV, b)


# ---- primitives ----------------------------------------------------------------------------


def neg(ctx, out, g):
    return (g.p_neg(),)


def exp(ctx, out, g):
    return (g.p_mul(out),)


def log(ctx, out, g):
    return (g.p_mul(ctx.parents[0].p_recip()),)


def sqrt(ctx, out, g):
    return (g.p_mul(out.p_mul(out.p_const(2)).p_recip()),)


def recip(ctx, out, g):
    return (g.p_mul(out.p_mul(out)).p_neg(),)


def cast(ctx, out, g):
    (x,) = ctx.parents
    return (g.p_cast(x.dtype) if x.dtype.is_float and out.dtype.is_float else None,)


def add(ctx, out, g):
    return (g, g)


def mul(ctx, out, g):
    return (g.p_mul(ctx.parents[1]), g.p_mul(ctx.parents[0]))


def none(ctx, out, g):
    """Comparisons, integer and bit operations, rounding: piecewise constant, no gradient."""
    return tuple(None for _ in ctx.parents)


def zero(ctx, out, g):
    """Rounding: a float result whose gradient is 0 almost everywhere (torch's convention)."""
    return (g.p_const(0),)


def where(ctx, out, g):
    c = ctx.parents[0]
    return (None, c.p_where(g, g.p_const(0)), c.p_where(g.p_const(0), g))


def sum_(ctx, out, g):
    return (g.p_expand(ctx.parents[0].shape),)


def scan(ctx, out, g):
    """A prefix sum's gradient is the suffix sum of g: the same scan over g reversed."""
    axis, combine = ctx.saved
    if combine != Op.ADD:
        raise NotImplementedError(
            f"backward: no gradient for a {combine.value} scan; accepted: an ADD scan (cumsum)"
        )
    return (g.p_flip((axis,)).p_scan(axis, "add").p_flip((axis,)),)


def max_(ctx, out, g):
    """Split evenly between the tied maxima."""
    (x,) = ctx.parents
    hit = compose.eq(x, out.p_expand(x.shape))
    mask = hit.p_where(x.p_const(1), x.p_const(0))
    count = mask.p_sum(ctx.saved).p_expand(x.shape)
    return (mask.p_mul(count.p_recip()).p_mul(g.p_expand(x.shape)),)


def gather(ctx, out, g):
    return (ctx.parents[0].p_const(0).p_scatter(ctx.parents[1], g, ctx.saved), None)


def scatter(ctx, out, g):
    return (g, None, g.p_gather(ctx.parents[1], ctx.saved))


def contiguous(ctx, out, g):
    return (g,)


# ---- movement (the VIEW row, by kind) ----------------------------------------------------------


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


def _window(ctx, out, g):
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


MOVEMENT = {
    "reshape": lambda ctx, out, g: (g.p_reshape(ctx.parents[0].shape),),
    "permute": lambda ctx, out, g: (
        g.p_permute(tuple(sorted(range(len(ctx.saved)), key=lambda i: ctx.saved[i]))),
    ),
    "expand": lambda ctx, out, g: (_sum_to(g, ctx.parents[0].shape),),
    "pad": lambda ctx, out, g: (
        g.p_shrink(tuple((b, b + s) for (b, _), s in zip(ctx.saved, ctx.parents[0].shape))),
    ),
    "shrink": lambda ctx, out, g: (
        g.p_pad(tuple((b, s - e) for (b, e), s in zip(ctx.saved, ctx.parents[0].shape))),
    ),
    "flip": lambda ctx, out, g: (g.p_flip(ctx.saved),),
    "step": lambda ctx, out, g: (_unstep(g, ctx.parents[0].shape, ctx.saved),),
    "window": _window,
}

# ---- composites: their own derivatives, in composite nodes -------------------------------------


def _one_minus_sq(x):
    return x.p_const(1).p_add(x.p_mul(x).p_neg())


def _sq_plus(x, c: float):
    return x.p_mul(x).p_add(x.p_const(c))


# d op(x) = g * ..., from the operand x and the result out, for each unary composite
UNARY = {
    Op.ABS: lambda x, out, g: g.p_mul(compose.sign(x)),
    Op.SIN: lambda x, out, g: g.p_mul(x.p_op(Op.COS)),
    Op.COS: lambda x, out, g: g.p_mul(x.p_op(Op.SIN)).p_neg(),
    Op.TAN: lambda x, out, g: g.p_mul(_sq_plus(out, 1)),
    Op.ASIN: lambda x, out, g: _div(g, _one_minus_sq(x).p_sqrt()),
    Op.ACOS: lambda x, out, g: _div(g, _one_minus_sq(x).p_sqrt()).p_neg(),
    Op.ATAN: lambda x, out, g: _div(g, _sq_plus(x, 1)),
    Op.SINH: lambda x, out, g: g.p_mul(x.p_op(Op.COSH)),
    Op.COSH: lambda x, out, g: g.p_mul(x.p_op(Op.SINH)),
    Op.TANH: lambda x, out, g: g.p_mul(_one_minus_sq(out)),
    Op.ASINH: lambda x, out, g: _div(g, _sq_plus(x, 1).p_sqrt()),
    Op.ACOSH: lambda x, out, g: _div(g, _sq_plus(x, -1).p_sqrt()),
    Op.ATANH: lambda x, out, g: _div(g, _one_minus_sq(x)),
    Op.EXP2: lambda x, out, g: g.p_mul(out).p_mul(out.p_const(math.log(2))),
    Op.EXPM1: lambda x, out, g: g.p_mul(out.p_add(out.p_const(1))),
    Op.LOG1P: lambda x, out, g: _div(g, x.p_add(x.p_const(1))),
    Op.LOG2: lambda x, out, g: _div(g, x.p_mul(x.p_const(math.log(2)))),
    Op.LOG10: lambda x, out, g: _div(g, x.p_mul(x.p_const(math.log(10)))),
}


def unary(op: Op):
    """The row rule of a unary composite, from its entry in ``UNARY``."""
    rule = UNARY[op]
    return lambda ctx, out, g: (rule(ctx.parents[0], out, g),)


def div(ctx, out, g):
    a, b = ctx.parents
    ga = _div(g, b)
    return (ga, ga.p_mul(out).p_neg())


def fmod(ctx, out, g):
    """d/da = 1; d/db = -trunc(a / b), as torch."""
    a, b = ctx.parents
    return (g, g.p_mul(_div(a, b).p_op(Op.TRUNC)).p_neg())


def _constant(t):
    """The value of an operand that is one number (a CONST, or one broadcast), else None."""
    n = t.node
    if n.op == Op.VIEW and n.arg.mask is None:
        n = n.srcs[0]
    return n.arg if n.op == Op.CONST else None


def _power(x, e: float):
    """x**e as torch computes a power by a Python number, its special exponents included
    (sqrt for 0.5, 1/sqrt for -0.5, products for 2 and 3, ...), so each special value
    (x = -0.0, -inf, nan) comes out as torch's."""
    if e in (0, 1):
        return x.p_const(1) if e == 0 else x
    if e in (2, 3, -1, -2):
        sq = x.p_mul(x) if e in (2, 3, -2) else x
        return sq.p_recip() if e < 0 else sq.p_mul(x) if e == 3 else sq
    if e in (0.5, -0.5):
        return x.p_sqrt() if e > 0 else x.p_sqrt().p_recip()
    return x.p_op(Op.POW, x.p_const(e))


def pow_(ctx, out, g):
    """y x**(y-1) and x**y log x; torch's zeros where y == 0 (base) and x == 0 <= y (exponent).

    A power by one number (``x ** 2``) is torch's rule for a scalar exponent:
    g * (c * x**(c-1)) with the power spelled as ``_power``, and nothing for the exponent,
    so ``x ** 2`` differentiates to 2 * x in a few nodes."""
    x, y = ctx.parents
    c = _constant(y)
    if c is not None:
        return (g.p_const(0) if c == 0 else g.p_mul(_power(x, c - 1).p_mul(x.p_const(c))), None)
    zero = g.p_const(0)
    base = g.p_mul(y).p_mul(x.p_op(Op.POW, y.p_add(y.p_const(-1))))
    base = compose.eq(y, zero).p_where(zero, base)
    expo = g.p_mul(out).p_mul(x.p_log())
    at_zero = compose.logical_and(compose.eq(x, zero), compose.ge(y, zero))
    return (base, at_zero.p_where(zero, expo))


def hypot(ctx, out, g):
    a, b = ctx.parents
    return (g.p_mul(_div(a, out)), g.p_mul(_div(b, out)))


def atan2(ctx, out, g):
    """d/dy = x / (x*x + y*y), d/dx = -y / (x*x + y*y)."""
    y, x = ctx.parents
    r2 = x.p_mul(x).p_add(y.p_mul(y))
    return (g.p_mul(_div(x, r2)), g.p_mul(_div(y, r2)).p_neg())


def logaddexp(ctx, out, g):
    a, b = ctx.parents
    return (g.p_mul(compose.sub(a, out).p_exp()), g.p_mul(compose.sub(b, out).p_exp()))
