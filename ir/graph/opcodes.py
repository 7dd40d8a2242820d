"""The names of the ops: one enum member per row of the op table in ``ir/graph/ops.py``.

The names live apart from the table so that the modules holding the rows' rules (numpy
evaluation, gradients, decompositions) can name ops without importing the table they
are part of.
"""

from __future__ import annotations

from enum import Enum


class Op(Enum):
    # Members are singletons that compare by identity, so they hash by identity too: Enum's
    # own __hash__ is a Python function (hash of the name), and the op table, the
    # scheduler and the lowering look ops up in dicts and sets on every node they touch.
    __hash__ = object.__hash__

    # primitives: the closed set a new device implements
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
    SCAN = "SCAN"
    CONTIGUOUS = "CONTIGUOUS"
    ASSIGN = "ASSIGN"
    CUSTOM = "CUSTOM"
    # composites: elementwise math that decomposes into primitives where a device asks
    ABS = "ABS"
    DIV = "DIV"
    FLOOR = "FLOOR"
    CEIL = "CEIL"
    TRUNC = "TRUNC"
    ROUND = "ROUND"
    FMOD = "FMOD"
    SIN = "SIN"
    COS = "COS"
    TAN = "TAN"
    ASIN = "ASIN"
    ACOS = "ACOS"
    ATAN = "ATAN"
    SINH = "SINH"
    COSH = "COSH"
    TANH = "TANH"
    ASINH = "ASINH"
    ACOSH = "ACOSH"
    ATANH = "ATANH"
    EXP2 = "EXP2"
    EXPM1 = "EXPM1"
    LOG1P = "LOG1P"
    LOG2 = "LOG2"
    LOG10 = "LOG10"
    POW = "POW"
    HYPOT = "HYPOT"
    ATAN2 = "ATAN2"
    LOGADDEXP = "LOGADDEXP"
    # a composite that is not elementwise: a stable argsort along the last axis
    ARGSORT = "ARGSORT"

    def __repr__(self) -> str:
        return self.value
