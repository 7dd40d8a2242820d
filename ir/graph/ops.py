"""The closed op table: every primitive limn computes, one row each.

Nineteen primitives plus CUSTOM. Everything else a user calls (sub, matmul, softmax,
comparisons, ...) is spelled in these in ``ir/graph/compose.py``, so a device that implements
this table gets the whole framework. A row says how many sources the op takes, which
family it belongs to (the scheduler and the lowering dispatch on it), and how its result
dtype follows from its sources.

Op arguments (``Node.arg``):

* BUFFER   the runtime Buffer that holds the bytes
* CONST    the Python scalar value
* VIEW     the View mapping the result's index space onto the source's (contiguous) one
* CAST     nothing: the node's dtype is the target
* SUM, MAX the reduced axes, a sorted tuple; reduced dims are kept as size 1
* GATHER   the axis: out[.., i, ..] = src[.., idx[.., i, ..], ..]
* SCATTER  the axis: out = base; out[.., idx[.., i, ..], ..] += src[.., i, ..] (collisions add)
* CUSTOM   (kernel name, output index, params)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Op(Enum):
    BUFFER = "BUFFER"
    CONST = "CONST"
    VIEW = "VIEW"
    NEG = "NEG"
    EXP = "EXP"
    LOG = "LOG"
    SQRT = "SQRT"
    RECIP = "RECIP"
    CAST = "CAST"
    ADD = "ADD"
    MUL = "MUL"
    CMPLT = "CMPLT"
    IDIV = "IDIV"
    MOD = "MOD"
    AND = "AND"
    OR = "OR"
    XOR = "XOR"
    SHL = "SHL"
    SHR = "SHR"
    BITCAST = "BITCAST"
    WHERE = "WHERE"
    SUM = "SUM"
    MAX = "MAX"
    GATHER = "GATHER"
    SCATTER = "SCATTER"
    CONTIGUOUS = "CONTIGUOUS"
    ASSIGN = "ASSIGN"
    CUSTOM = "CUSTOM"

    def __repr__(self) -> str:
        return self.value


@dataclass(frozen=True)
class OpInfo:
    op: Op
    arity: int  # number of sources; -1 means any
    category: str  # source, movement, unary, binary, ternary, reduce, indexed, barrier, custom
    dtype_rule: str  # how the result dtype follows from the sources


TABLE: dict[Op, OpInfo] = {
    row.op: row
    for row in [
        OpInfo(Op.BUFFER, 0, "source", "the buffer's dtype"),
        OpInfo(Op.CONST, 0, "source", "the constant's dtype"),
        OpInfo(Op.VIEW, 1, "movement", "same as source"),
        OpInfo(Op.NEG, 1, "unary", "same as source (numeric)"),
        OpInfo(Op.EXP, 1, "unary", "same as source (float)"),
        OpInfo(Op.LOG, 1, "unary", "same as source (float)"),
        OpInfo(Op.SQRT, 1, "unary", "same as source (float)"),
        OpInfo(Op.RECIP, 1, "unary", "same as source (float)"),
        OpInfo(Op.CAST, 1, "unary", "the target dtype"),
        OpInfo(Op.ADD, 2, "binary", "sources share a dtype; same"),
        OpInfo(Op.MUL, 2, "binary", "sources share a dtype; same"),
        OpInfo(Op.CMPLT, 2, "binary", "sources share a dtype; bool"),
        # Added for the Array API: integer division and bit operations cannot be composed
        # exactly from float arithmetic, and a float's sign bit (signbit of -0.0 or of a
        # negative nan, copysign, nextafter) is invisible to every comparison.
        OpInfo(Op.IDIV, 2, "binary", "integers; same (truncates toward zero, x/0 = 0)"),
        OpInfo(Op.MOD, 2, "binary", "integers; same (sign of the dividend, x%0 = 0)"),
        OpInfo(Op.AND, 2, "binary", "bool or integers; same"),
        OpInfo(Op.OR, 2, "binary", "bool or integers; same"),
        OpInfo(Op.XOR, 2, "binary", "bool or integers; same"),
        OpInfo(Op.SHL, 2, "binary", "integers; same (a count >= width gives 0)"),
        OpInfo(
            Op.SHR,
            2,
            "binary",
            "integers; same (arithmetic for signed; count >= width gives the sign fill)",
        ),
        OpInfo(Op.BITCAST, 1, "unary", "the target dtype, of the source's width"),
        OpInfo(Op.WHERE, 3, "ternary", "bool condition, branches share a dtype; same"),
        OpInfo(Op.SUM, 1, "reduce", "same as source, accumulated in acc_dtype"),
        OpInfo(Op.MAX, 1, "reduce", "same as source"),
        OpInfo(Op.GATHER, 2, "indexed", "source's dtype; index is an integer"),
        OpInfo(Op.SCATTER, 3, "indexed", "base's dtype; index is an integer"),
        OpInfo(Op.CONTIGUOUS, 1, "barrier", "same as source"),
        OpInfo(Op.ASSIGN, 2, "barrier", "target's dtype; value has the same"),
        OpInfo(Op.CUSTOM, -1, "custom", "declared by the kernel"),
    ]
}

UNARY = frozenset(o for o, r in TABLE.items() if r.category == "unary")
BINARY = frozenset(o for o, r in TABLE.items() if r.category == "binary")
ELEMENTWISE = frozenset(o for o, r in TABLE.items() if r.category in ("unary", "binary", "ternary"))
REDUCE = frozenset((Op.SUM, Op.MAX))
FLOAT_ONLY = frozenset((Op.EXP, Op.LOG, Op.SQRT, Op.RECIP))
INT_ONLY = frozenset((Op.IDIV, Op.MOD, Op.SHL, Op.SHR))
BITWISE = frozenset((Op.AND, Op.OR, Op.XOR))
