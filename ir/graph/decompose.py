"""The decomposition pass: composite nodes become their primitive spellings. Pure.

A device names the composites it renders itself (``keep(node)``); every other composite
node is replaced by its row's ``decompose`` rule (``ir/graph/ops.py``), applied to the
already rewritten sources, so the result holds primitives and kept composites only. A
device that renders no composite at all runs this with ``keep`` always false and gets
every math function from the closed primitive set. Half-width composites decompose at
float32 and round once, as they compute everywhere else.

The rules are written in the primitive protocol of ``ir/graph/compose.py``; ``Spelled``
speaks that protocol over bare nodes, so the pass needs no frontend. Nodes the runtime
already holds bytes for (``stop``) are kept as they are, with their identity, and the
graph behind them is not looked at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.node import Node, toposort
from ir.graph.ops import COMPOSITE, TABLE, Op
from ir.graph.view import View


class Spelled:
    """A node seen through the primitive protocol: each ``p_*`` method builds one node."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    def _new(self, op: Op, dtype: DType, shape, srcs=(), arg=None) -> Spelled:
        return Spelled(Node(op, dtype, tuple(shape), tuple(s.node for s in srcs), arg))

    def _unary(self, op: Op) -> Spelled:
        return self._new(op, self.dtype, self.shape, (self,))

    def p_neg(self):
        return self._unary(Op.NEG)

    def p_exp(self):
        return self._unary(Op.EXP)

    def p_log(self):
        return self._unary(Op.LOG)

    def p_sqrt(self):
        return self._unary(Op.SQRT)

    def p_recip(self):
        return self._unary(Op.RECIP)

    def p_cast(self, dtype: DType):
        return self if dtype == self.dtype else self._new(Op.CAST, dtype, self.shape, (self,))

    def p_bitcast(self, dtype: DType):
        return self._new(Op.BITCAST, dtype, self.shape, (self,))

    def _binary(self, op: Op, other: Spelled) -> Spelled:
        d = dtypes.bool_ if TABLE[op].result == "bool" else self.dtype
        return self._new(op, d, self.shape, (self, other))

    def p_add(self, o):
        return self._binary(Op.ADD, o)

    def p_mul(self, o):
        return self._binary(Op.MUL, o)

    def p_cmplt(self, o):
        return self._binary(Op.CMPLT, o)

    def p_idiv(self, o):
        return self._binary(Op.IDIV, o)

    def p_mod(self, o):
        return self._binary(Op.MOD, o)

    def p_and(self, o):
        return self._binary(Op.AND, o)

    def p_or(self, o):
        return self._binary(Op.OR, o)

    def p_xor(self, o):
        return self._binary(Op.XOR, o)

    def p_shl(self, o):
        return self._binary(Op.SHL, o)

    def p_shr(self, o):
        return self._binary(Op.SHR, o)

    def p_where(self, a, b):
        return self._new(Op.WHERE, a.dtype, a.shape, (self, a, b))

    def p_sum(self, axes):
        shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        return self._new(Op.SUM, self.dtype, shape, (self,), tuple(axes))

    def p_max(self, axes):
        shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        return self._new(Op.MAX, self.dtype, shape, (self,), tuple(axes))

    def p_gather(self, idx, axis: int):
        return self._new(Op.GATHER, self.dtype, idx.shape, (self, idx), axis)

    def p_const(self, value, shape=None, dtype=None):
        d = dtype or self.dtype
        shape = self.shape if shape is None else tuple(shape)
        bad_int = d.is_int and isinstance(value, float) and not math.isfinite(value)
        return self._new(Op.CONST, d, shape, (), 0 if bad_int else dtypes.python_type(d)(value))

    def _move(self, kind: str, arg) -> Spelled:
        node = self.node
        base, v = (
            (node.srcs[0], node.arg) if node.op == Op.VIEW else (node, View.contiguous(node.shape))
        )
        v = getattr(v, kind)(arg)
        if v is None:  # no single View expresses it: copy first
            base = Node(Op.CONTIGUOUS, node.dtype, node.shape, (node,))
            v = getattr(View.contiguous(node.shape), kind)(arg)
        if v.is_contiguous and v.shape == base.shape:
            return Spelled(base)
        return Spelled(Node(Op.VIEW, node.dtype, v.shape, (base,), v))

    def p_reshape(self, shape):
        return self if tuple(shape) == self.shape else self._move("reshape", tuple(shape))

    def p_expand(self, shape):
        return self if tuple(shape) == self.shape else self._move("expand", tuple(shape))

    def p_permute(self, order):
        return self._move("permute", tuple(order))

    def p_pad(self, pads):
        pads = tuple(tuple(p) for p in pads)
        return self if all(p == (0, 0) for p in pads) else self._move("pad", pads)

    def p_shrink(self, bounds):
        return self._move("shrink", tuple(tuple(b) for b in bounds))


def expand_composite(node: Node, srcs: Sequence[Node]) -> Node:
    """One composite node, on (rewritten) sources, spelled by its row's rule."""
    d = node.dtype
    args = [Spelled(s) for s in srcs]
    if d in dtypes.HALF:
        args = [a.p_cast(dtypes.float32) for a in args]
    out = TABLE[node.op].decompose(*args)
    return out.p_cast(d).node


def decompose(
    roots: Sequence[Node], keep: Callable[[Node], bool], stop: Callable[[Node], bool] | None = None
) -> list[Node]:
    """The graph under ``roots`` with every composite that ``keep`` refuses decomposed.

    Nodes that need no change are returned as they are (a graph without composites comes
    back identical), so the pass costs one walk where there is nothing to do.
    """
    done: dict[int, Node] = {}
    for n in toposort(roots, stop):
        if stop is not None and stop(n) or not n.srcs:
            done[id(n)] = n
            continue
        srcs = tuple(done[id(s)] for s in n.srcs)
        if n.op in COMPOSITE and not keep(n):
            done[id(n)] = expand_composite(n, srcs)
        elif all(a is b for a, b in zip(srcs, n.srcs)):
            done[id(n)] = n
        else:
            done[id(n)] = Node(n.op, n.dtype, n.shape, srcs, n.arg)
    return [done[id(r)] for r in roots]
