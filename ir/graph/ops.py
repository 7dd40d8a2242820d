"""The op table: every op limn computes, one row each, carrying everything about it as code.

A row says how many sources the op takes; its family (the scheduler and the lowering
dispatch on it); which operand dtypes it accepts and how its result dtype follows; how
numpy computes it (``ir/graph/semantics.py``: the numpy reference device and the loop-nest
interpreter both call ``evaluate``); its gradient rule (``ir/graph/grads.py``); and, for a
composite, its decomposition into primitives (``ir/graph/elementary.py``). How a target
spells an op is the target's: C's table is ``ir/c/spell.OPS``, which CUDA overlays. Adding
a primitive is one row here plus one line in each target's spelling table
(``docs/passes.md`` works an example).

Primitives (``PRIMITIVE``, 29 rows) are the closed set a new device implements: the
seed's nineteen, CUSTOM, SCAN (a prefix fold, linear where shifted adds are log2(n) passes
of recomputation), and the eight the Array API added (IDIV, MOD, AND, OR, XOR, SHL,
SHR, BITCAST; their reason is given at their rows). Everything a user calls is spelled
in them (``ir/graph/compose.py``) or is one of the 29 composite rows.

Composites. Elementwise math (abs, division, rounding, fmod, trigonometry, hyperbolics, the
exp/log family, pow, hypot, atan2, logaddexp) is one graph node each, so the numpy
reference evaluates it with one numpy call and the c device with one inline C function.
A device that renders only primitives gets each composite from its ``decompose`` rule,
applied by the pass ``ir/graph/decompose.py`` just before scheduling. ARGSORT is the one
composite that is not elementwise: a stable sort along the last axis, one node whose
numpy evaluation is numpy's stable argsort, which the c device lowers as a kernel shape
of its own (a merge sort per row) and every other device as a bitonic network.

Op arguments (``Node.arg``):

* BUFFER   the runtime Buffer that holds the bytes
* CONST    the Python scalar value
* VIEW     the View mapping the result's index space onto the source's (contiguous) one
* CAST     nothing: the node's dtype is the target
* SUM, MAX the reduced axes, a sorted tuple; reduced dims are kept as size 1
* GATHER   the axis: out[.., i, ..] = src[.., idx[.., i, ..], ..]
* SCATTER  the axis: out = base; out[.., idx[.., i, ..], ..] += src[.., i, ..] (collisions add)
* SCAN     (axis, combine): out[.., i, ..] = src[.., 0, ..] combine ... combine src[.., i, ..],
           combine one of ADD, MUL, MAX, folded left to right
* CUSTOM   (kernel name, output index, params)
* ARGSORT  descending, a bool: out[.., i] = the position along the last axis of the i-th
           element of the stable lexicographic order of the sources (the keys, first key
           first); elements with a nan key last, in their order; -0.0 equals 0.0
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ir.graph import elementary, grads, semantics, sorting, trig
from ir.graph.dtypes import HALF, DType, compute_dtype, to_numpy
from ir.graph.opcodes import Op

__all__ = ["Op", "OpRow", "TABLE", "evaluate"]


@dataclass(frozen=True)
class OpRow:
    op: Op
    arity: int  # number of sources; -1 means any
    category: str  # source, movement, unary, binary, ternary, reduce, scan, indexed, ...
    accepts: str = "any"  # operand dtypes: any, numeric, float, int, bits (int or bool), real
    result: str = "same"  # result dtype: same (as the last source), bool, target (the node's)
    numpy: Callable | None = None  # elementwise: f(*arrays at compute dtype) -> array
    grad: object = None  # (ctx, out, g) -> a gradient per source; VIEW: a rule per movement
    decompose: Callable | None = None  # composites: the spelling in primitives
    cost: int = 1  # weighted ops per element, for the schedule's recompute budget

    @property
    def composite(self) -> bool:
        return self.decompose is not None


def _composite(op: Op, arity: int, numpy, grad, decompose, cost: int = 8) -> OpRow:
    kind = "unary" if arity == 1 else "binary"
    return OpRow(op, arity, kind, "float", numpy=numpy, grad=grad, decompose=decompose, cost=cost)


_ROWS = [
    OpRow(Op.BUFFER, 0, "source", result="target"),
    OpRow(Op.CONST, 0, "source", result="target"),
    OpRow(Op.VIEW, 1, "movement", grad=grads.MOVEMENT),
    OpRow(Op.NEG, 1, "unary", "numeric", numpy=semantics.neg, grad=grads.neg),
    OpRow(Op.EXP, 1, "unary", "float", numpy=np.exp, grad=grads.exp, cost=2),
    OpRow(Op.LOG, 1, "unary", "float", numpy=np.log, grad=grads.log, cost=2),
    OpRow(Op.SQRT, 1, "unary", "float", numpy=np.sqrt, grad=grads.sqrt, cost=2),
    OpRow(Op.RECIP, 1, "unary", "float", numpy=np.reciprocal, grad=grads.recip, cost=2),
    # a target converts itself (C's bfloat16 goes through float bits)
    OpRow(Op.CAST, 1, "unary", result="target", grad=grads.cast),
    OpRow(Op.ADD, 2, "binary", numpy=semantics.add, grad=grads.add),
    OpRow(Op.MUL, 2, "binary", numpy=semantics.mul, grad=grads.mul),
    OpRow(Op.CMPLT, 2, "binary", result="bool", numpy=np.less, grad=grads.none),
    # Added for the Array API: integer division and bit operations cannot be composed
    # exactly from float arithmetic, and a float's sign bit (signbit of -0.0 or of a
    # negative nan, copysign, nextafter) is invisible to every comparison.
    # IDIV truncates toward zero, x/0 = 0; MOD has the dividend's sign, x%0 = 0
    OpRow(Op.IDIV, 2, "binary", "int", numpy=semantics.idiv, grad=grads.none, cost=2),
    OpRow(Op.MOD, 2, "binary", "int", numpy=semantics.mod, grad=grads.none, cost=2),
    OpRow(Op.AND, 2, "binary", "bits", numpy=np.bitwise_and, grad=grads.none),
    OpRow(Op.OR, 2, "binary", "bits", numpy=np.bitwise_or, grad=grads.none),
    OpRow(Op.XOR, 2, "binary", "bits", numpy=np.bitwise_xor, grad=grads.none),
    # a count past the width gives 0 (SHL) or the sign fill (SHR, arithmetic for signed)
    OpRow(Op.SHL, 2, "binary", "int", numpy=semantics.shl, grad=grads.none),
    OpRow(Op.SHR, 2, "binary", "int", numpy=semantics.shr, grad=grads.none),
    # the target dtype has the source's width
    OpRow(Op.BITCAST, 1, "unary", result="target", grad=grads.none),
    OpRow(Op.WHERE, 3, "ternary", numpy=np.where, grad=grads.where),
    # accumulated in acc_dtype (ir/graph/dtypes.py), rounded once
    OpRow(Op.SUM, 1, "reduce", grad=grads.sum_),
    OpRow(Op.MAX, 1, "reduce", grad=grads.max_),
    OpRow(Op.GATHER, 2, "indexed", grad=grads.gather, cost=3),
    OpRow(Op.SCATTER, 3, "indexed", grad=grads.scatter),
    # Added for cumulative ops: a prefix combine is a linear loop with a carried
    # accumulator, O(n) work and memory; spelled in views and adds it is a log(n)-deep
    # shift graph or an (n, n) mask. Folded in index order in the source's dtype, every
    # step rounded to it (exact for integers, like np.cumsum); lowered as its own kernel.
    OpRow(Op.SCAN, 1, "scan", grad=grads.scan),
    OpRow(Op.CONTIGUOUS, 1, "barrier", grad=grads.contiguous),
    OpRow(Op.ASSIGN, 2, "barrier"),
    OpRow(Op.CUSTOM, -1, "custom", result="target"),
    # ---- composites: numpy, gradient, decomposition (elementary.py) ----
    _composite(Op.ABS, 1, np.abs, grads.unary(Op.ABS), elementary.fabs, cost=1),
    _composite(Op.DIV, 2, np.divide, grads.div, elementary.divide, cost=2),
    _composite(Op.FLOOR, 1, np.floor, grads.zero, elementary.floor, cost=2),
    _composite(Op.CEIL, 1, np.ceil, grads.zero, elementary.ceil, cost=2),
    _composite(Op.TRUNC, 1, np.trunc, grads.zero, elementary.trunc, cost=2),
    _composite(Op.ROUND, 1, np.rint, grads.zero, elementary.rint, cost=2),
    _composite(Op.FMOD, 2, np.fmod, grads.fmod, elementary.fmod),
    _composite(Op.SIN, 1, np.sin, grads.unary(Op.SIN), trig.sin),
    _composite(Op.COS, 1, np.cos, grads.unary(Op.COS), trig.cos),
    _composite(Op.TAN, 1, np.tan, grads.unary(Op.TAN), trig.tan),
    _composite(Op.ASIN, 1, np.arcsin, grads.unary(Op.ASIN), trig.asin),
    _composite(Op.ACOS, 1, np.arccos, grads.unary(Op.ACOS), trig.acos),
    _composite(Op.ATAN, 1, np.arctan, grads.unary(Op.ATAN), trig.atan),
    _composite(Op.SINH, 1, np.sinh, grads.unary(Op.SINH), elementary.sinh),
    _composite(Op.COSH, 1, np.cosh, grads.unary(Op.COSH), elementary.cosh),
    _composite(Op.TANH, 1, np.tanh, grads.unary(Op.TANH), elementary.tanh),
    _composite(Op.ASINH, 1, np.arcsinh, grads.unary(Op.ASINH), elementary.asinh),
    _composite(Op.ACOSH, 1, np.arccosh, grads.unary(Op.ACOSH), elementary.acosh),
    _composite(Op.ATANH, 1, np.arctanh, grads.unary(Op.ATANH), elementary.atanh),
    _composite(Op.EXP2, 1, np.exp2, grads.unary(Op.EXP2), elementary.exp2),
    _composite(Op.EXPM1, 1, np.expm1, grads.unary(Op.EXPM1), elementary.expm1),
    _composite(Op.LOG1P, 1, np.log1p, grads.unary(Op.LOG1P), elementary.log1p),
    _composite(Op.LOG2, 1, np.log2, grads.unary(Op.LOG2), elementary.log2),
    _composite(Op.LOG10, 1, np.log10, grads.unary(Op.LOG10), elementary.log10),
    _composite(Op.POW, 2, np.power, grads.pow_, elementary.pow),
    _composite(Op.HYPOT, 2, np.hypot, grads.hypot, elementary.hypot),
    _composite(Op.ATAN2, 2, np.arctan2, grads.atan2, trig.atan2),
    _composite(Op.LOGADDEXP, 2, semantics.logaddexp, grads.logaddexp, elementary.logaddexp),
    # a whole-row composite: the permutation that sorts its keys along the last axis.
    # Lowered as its own kernel where a device renders it (a merge sort per row in C),
    # decomposed into the bitonic network of ir/graph/sorting.py everywhere else.
    OpRow(Op.ARGSORT, -1, "sort", accepts="real", result="target", numpy=semantics.argsort,
          grad=grads.none, decompose=sorting.argsort),
]  # fmt: skip

TABLE: dict[Op, OpRow] = {row.op: row for row in _ROWS}
assert set(TABLE) == set(Op), "every op has a row"

UNARY = frozenset(o for o, r in TABLE.items() if r.category == "unary")
BINARY = frozenset(o for o, r in TABLE.items() if r.category == "binary")
ELEMENTWISE = frozenset(o for o, r in TABLE.items() if r.category in ("unary", "binary", "ternary"))
REDUCE = frozenset(o for o, r in TABLE.items() if r.category == "reduce")
SCAN_COMBINES = (Op.ADD, Op.MUL, Op.MAX)  # a SCAN's fold step; a min scans the order flip
COMPOSITE = frozenset(o for o, r in TABLE.items() if r.composite)
PRIMITIVE = frozenset(Op) - COMPOSITE


FLOAT_ONLY = frozenset(o for o, r in TABLE.items() if r.accepts == "float")
INT_ONLY = frozenset(o for o, r in TABLE.items() if r.accepts == "int")
BITWISE = frozenset(o for o, r in TABLE.items() if r.accepts == "bits")


def widen(x, d: DType):
    """Half-width floats compute in float32."""
    cd = compute_dtype(d)
    return x.astype(to_numpy(cd)) if cd != d else x


def evaluate(op: Op, vals, out_dtype: DType, src_dtype: DType):
    """Any elementwise row on numpy arrays, rounded to ``out_dtype``; warnings silenced.

    Operands are widened to their compute dtype first (half widths compute in float32),
    except a WHERE's condition and the bits a CAST or BITCAST reads.
    """
    with np.errstate(all="ignore"):
        return compute(op, vals, out_dtype, src_dtype)


def compute(op: Op, vals, out_dtype: DType, src_dtype: DType):
    """``evaluate`` inside a caller's ``np.errstate`` (the numpy device holds one per graph)."""
    fn = _NUMPY.get(op)
    if fn is None:  # the rows that do not widen (or are not elementwise)
        if op is Op.CAST:
            return np.asarray(vals[0]).astype(out_dtype.np)
        if op is Op.BITCAST:
            return np.asarray(vals[0]).view(out_dtype.np)
        if op is Op.WHERE:
            return np.where(vals[0], vals[1], vals[2]).astype(out_dtype.np, copy=False)
        raise NotImplementedError(f"semantics: {op.value} is not an elementwise op")
    args = [np.asarray(v) for v in vals]
    if src_dtype in HALF:
        args = [a.astype(np.float32) for a in args]
    if op in _VIA_FLOAT64 and args[0].dtype == np.float32:
        args = [a.astype(np.float64) for a in args]
    out = np.asarray(fn(*args))
    # a new array is the result as it is; one that shares an operand's bytes (an operand
    # itself, or a view: it does not own its bytes) is copied
    shared = not out.flags.owndata
    for a in args:
        shared = shared or a is out
    return out if out.dtype == out_dtype.np and not shared else out.astype(out_dtype.np)


# numpy picks its float32 loops of these by the CPU (AVX2 and AVX-512 builds round
# differently), so the reference evaluates them in float64 and rounds once: one answer on
# every CPU, within half an ulp of the exact value but for a near-tie
_VIA_FLOAT64 = {op for op, row in TABLE.items() if row.composite} | {Op.EXP, Op.LOG}

_NUMPY = {
    op: row.numpy
    for op, row in TABLE.items()
    if row.numpy is not None and op in ELEMENTWISE and op is not Op.WHERE
}


def argsort(vals, src_dtypes, descending: bool) -> np.ndarray:
    """The ARGSORT row on numpy arrays (the keys, half widths compared in float32)."""
    keys = [widen(np.asarray(v), d) for v, d in zip(vals, src_dtypes)]
    return TABLE[Op.ARGSORT].numpy(keys, descending)
