"""The primitive protocol over op-graph nodes: every ``p_*`` method builds one node.

``ir/graph/compose.py`` and the op table's rules are spelled in this protocol. A class
that holds a ``node`` and says how to wrap a new one (``_wrap``) gets every primitive,
with the operand checks the op table implies: ``limn.Tensor`` wraps with autograd's
record, the decomposition pass (``Spelled``) wraps bare nodes. Movements compose into
one View (a reshape no View can express copies first, through CONTIGUOUS).
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.node import Node
from ir.graph.ops import (
    BINARY,
    BITWISE,
    COMPOSITE,
    FLOAT_ONLY,
    INT_ONLY,
    PRIMITIVE,
    SCAN_COMBINES,
    TABLE,
    UNARY,
    Op,
)
from ir.graph.view import View

_INT_OR_BITS = INT_ONLY | BITWISE


class Primitives:
    """Mixin: the primitive protocol from ``self.node`` and ``self._wrap``."""

    node: Node

    def _wrap(self, node: Node, rule=None, parents=(), saved=None):
        """A value of this class holding ``node``; ``rule``, ``parents`` and ``saved`` are
        what a gradient needs (the op, or ("VIEW", kind); its operands; its argument)."""
        raise NotImplementedError

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    def _unary(self, op: Op):
        if op in FLOAT_ONLY and not self.dtype.is_float:
            raise TypeError(f"{op.value.lower()}: needs a float tensor, got {self.dtype}")
        return self._wrap(Node(op, self.dtype, self.shape, (self.node,)), op, (self,))

    def p_cast(self, dtype: DType):
        if dtype == self.dtype:
            return self
        node = Node(Op.CAST, dtype, self.shape, (self.node,))
        return self._wrap(node, Op.CAST, (self,))

    def p_detach(self):
        """The same node, with no gradient recorded through it: a value a rule may treat
        as a constant (softmax's max shift, whose gradient is zero in exact arithmetic)."""
        return self._wrap(self.node)

    def p_contiguous(self):
        node = Node(Op.CONTIGUOUS, self.dtype, self.shape, (self.node,))
        return self._wrap(node, Op.CONTIGUOUS, (self,))

    def _binary(self, op: Op, other):
        a, b = self.node, other.node
        d = a.dtype
        if a.shape != b.shape or d is not b.dtype:
            raise ValueError(
                f"{op.value}: operands must share shape and dtype, got "
                f"{d}{list(a.shape)} and {b.dtype}{list(b.shape)}"
            )
        if op in _INT_OR_BITS and (op in INT_ONLY and not d.is_int or op in BITWISE and d.is_float):
            raise TypeError(f"{op.value}: needs integer operands, got {d}")
        node = Node(op, dtypes.bool_ if op is Op.CMPLT else d, a.shape, (a, b))
        return self._wrap(node, op, (self, other))

    def p_bitcast(self, dtype: DType):
        if dtype.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast: {self.dtype} and {dtype} differ in width")
        return self._wrap(Node(Op.BITCAST, dtype, self.shape, (self.node,)))

    def p_where(self, a, b):
        if self.dtype != dtypes.bool_ or a.dtype != b.dtype or not self.shape == a.shape == b.shape:
            raise ValueError(
                f"WHERE: needs a bool condition and two branches of one dtype and shape, got "
                f"{self.dtype}{list(self.shape)}, {a.dtype}{list(a.shape)}, "
                f"{b.dtype}{list(b.shape)}"
            )
        node = Node(Op.WHERE, a.dtype, a.shape, (self.node, a.node, b.node))
        return self._wrap(node, Op.WHERE, (self, a, b))

    def p_op(self, op: Op, *others):
        """A composite row of the op table (sin, pow, division, ...) as one node."""
        if op not in COMPOSITE:
            raise ValueError(f"p_op: {op.value} is not a composite op")
        srcs = (self,) + others
        if len(srcs) != TABLE[op].arity:
            raise ValueError(f"{op.value}: takes {TABLE[op].arity} operands, got {len(srcs)}")
        for t in srcs:
            if not t.dtype.is_float or t.dtype != self.dtype or t.shape != self.shape:
                raise TypeError(
                    f"{op.value.lower()}: needs float operands of one dtype and shape, got "
                    + ", ".join(f"{t.dtype}{list(t.shape)}" for t in srcs)
                )
        node = Node(op, self.dtype, self.shape, tuple(t.node for t in srcs))
        return self._wrap(node, op, srcs)

    def _reduce(self, op: Op, axes: tuple[int, ...]):
        shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        node = Node(op, self.dtype, shape, (self.node,), tuple(axes))
        return self._wrap(node, op, (self,), tuple(axes))

    def p_sum(self, axes):
        return self._reduce(Op.SUM, tuple(axes))

    def p_max(self, axes):
        return self._reduce(Op.MAX, tuple(axes))

    def p_scan(self, axis: int, combine: str = "add"):
        """Inclusive prefix "add", "mul" or "max" along ``axis``: one SCAN node."""
        op = {c.value.lower(): c for c in SCAN_COMBINES}.get(combine)
        if op is None or not 0 <= axis < len(self.shape):
            raise ValueError(
                f"scan: got axis {axis} and {combine!r} for {self.dtype}{list(self.shape)}; "
                f"accepted: 0 <= axis < {len(self.shape)}, combine one of 'add', 'mul', 'max'"
            )
        node = Node(Op.SCAN, self.dtype, self.shape, (self.node,), (axis, op))
        return self._wrap(node, Op.SCAN, (self,), (axis, op))

    def p_argsort(self, *others, descending: bool = False):
        """The int64 permutation sorting ``self`` (then ``others``, lexicographically)
        along the last axis: one ARGSORT node (stable, nans last; ir/graph/ops.py)."""
        keys = (self,) + others
        for t in keys:
            if t.dtype.is_complex or t.shape != self.shape or not self.shape:
                raise TypeError(
                    "argsort: needs real keys of one shape, at least 1-d, got "
                    + ", ".join(f"{t.dtype}{list(t.shape)}" for t in keys)
                )
        desc = bool(descending)
        node = Node(Op.ARGSORT, dtypes.int64, self.shape, tuple(t.node for t in keys), desc)
        return self._wrap(node, Op.ARGSORT, keys, desc)

    def _view(self, kind: str, arg):
        node = self.node
        base, v = (node.srcs[0], node.arg) if node.op == Op.VIEW else (node, None)
        v = _move(v if v is not None else View.contiguous(base.shape), kind, arg)
        if v is None:  # a reshape or window no single View can express: copy first
            base = Node(Op.CONTIGUOUS, node.dtype, node.shape, (node,))
            v = _move(View.contiguous(node.shape), kind, arg)
        if v.is_contiguous and v.shape == base.shape:
            out = base
        else:
            out = Node(Op.VIEW, node.dtype, v.shape, (base,), v)
        return self._wrap(out, ("VIEW", kind), (self,), arg)

    def _moved(self, moves):
        """``p_reshape``, ``p_permute`` and ``p_expand`` applied in turn, ``moves`` a tuple
        of ("reshape" | "permute" | "expand", arg), as one step: the Views compose without
        a node or a value for each move between, and the result is the node the calls one
        after another end at (a VIEW of the same source, or the source itself). A value
        with nothing to record between the moves takes this (``compose.expand_to``'s two,
        ``compose.matmul``'s operands' three); if the moves do not stay one View, the calls
        are made.
        """
        node = self.node
        base, v = (node.srcs[0], node.arg) if node.op == Op.VIEW else (node, None)
        v = v if v is not None else View.contiguous(base.shape)
        moved = False
        for kind, arg in moves:
            if kind == "permute":
                if arg == tuple(range(len(v.shape))):
                    continue
            elif arg == v.shape:  # reshape, expand: to the shape it has is no move
                continue
            elif kind == "reshape" and math.prod(arg) != math.prod(v.shape):
                raise ValueError(f"reshape: cannot view {v.shape} as {arg}: sizes differ")
            v = _move(v, kind, arg)
            if v is None:  # a reshape no View can express: the calls, with their copy
                return apply_moves(self, moves)
            moved = True
        if not moved:
            return self
        if v.is_contiguous and v.shape == base.shape:
            return self._wrap_moved(base, moves)
        return self._wrap_moved(Node(Op.VIEW, node.dtype, v.shape, (base,), v), moves)

    def _wrap_moved(self, node: Node, moves):
        """The value ``_moved`` ends at (a frontend may note the moves, as its views do)."""
        return self._wrap(node)

    def p_reshape(self, shape):
        shape = tuple(shape)
        if math.prod(shape) != math.prod(self.shape):
            raise ValueError(f"reshape: cannot view {self.shape} as {shape}: sizes differ")
        return self if shape == self.shape else self._view("reshape", shape)

    def p_permute(self, order):
        order = tuple(order)
        return self if order == tuple(range(len(self.shape))) else self._view("permute", order)

    def p_expand(self, shape):
        shape = tuple(shape)
        return self if shape == self.shape else self._view("expand", shape)

    def p_pad(self, pads):
        pads = tuple(tuple(p) for p in pads)
        return self if all(p == (0, 0) for p in pads) else self._view("pad", pads)

    def p_shrink(self, bounds):
        bounds = tuple(tuple(b) for b in bounds)
        if all(b == (0, s) for b, s in zip(bounds, self.shape)):
            return self
        return self._view("shrink", bounds)

    def p_flip(self, axes):
        return self._view("flip", tuple(axes)) if axes else self

    def p_step(self, steps):
        steps = tuple(steps)
        return self if all(k == 1 for k in steps) else self._view("step", steps)

    def p_window(self, axis: int, k: int, stride: int = 1, dilation: int = 1):
        """Dim ``axis`` of size L becomes (o, k): out[.., i, j, ..] = self[.., i*stride +
        j*dilation, ..]. A view, with no copy unless that dim is padded (View.window
        checks the arguments)."""
        return self._view("window", (axis, k, stride, dilation))

    def p_gather(self, idx, axis: int):
        node = Node(Op.GATHER, self.dtype, idx.shape, (self.node, idx.node), axis)
        return self._wrap(node, Op.GATHER, (self, idx), axis)

    def p_scatter(self, idx, src, axis: int):
        node = Node(Op.SCATTER, self.dtype, self.shape, (self.node, idx.node, src.node), axis)
        return self._wrap(node, Op.SCATTER, (self, idx, src), axis)

    def p_const(self, value, shape=None, dtype=None):
        d = dtype or self.dtype
        shape = self.shape if shape is None else tuple(shape)
        value = dtypes.python_type(d)(value) if not (d.is_int and _is_inf_or_nan(value)) else 0
        return self._wrap(Node(Op.CONST, d, shape, (), value))


def _elementwise(op: Op):
    """``p_<op>`` of an elementwise primitive that takes only its operands."""
    if op in BINARY:
        return lambda self, other: self._binary(op, other)
    return lambda self: self._unary(op)


# each elementwise primitive of the op table is the method named for it (p_add, p_neg, ...);
# CAST and BITCAST, which take a dtype as well, are written out above
for _op in (UNARY | BINARY) & PRIMITIVE - {Op.CAST, Op.BITCAST}:
    setattr(Primitives, f"p_{_op.value.lower()}", _elementwise(_op))


def apply_moves(x, moves):
    """Replay movement ops recorded as ``(kind, arg)`` pairs (``p_<kind>(arg)``) on ``x``, one
    call each (so each is recorded where a gradient needs it)."""
    for kind, arg in moves:
        x = x.p_window(*arg) if kind == "window" else getattr(x, f"p_{kind}")(arg)
    return x


def _move(v: View, kind: str, arg) -> View | None:
    return v.window(*arg) if kind == "window" else getattr(v, kind)(arg)


def _is_inf_or_nan(v) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


class Spelled(Primitives):
    """A bare node seen through the protocol (what the decomposition pass builds with)."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    def _wrap(self, node: Node, rule=None, parents=(), saved=None) -> Spelled:
        return Spelled(node)
