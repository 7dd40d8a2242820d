"""What each elementwise primitive computes, written once in numpy.

The numpy reference device applies these to whole arrays, and the loop-nest interpreter
applies them to the values of single instructions, so the two oracles cannot drift apart.
Compiled devices render the same definitions in their own language; the edge cases here
(integer division by zero, shifts past the width, half widths computing in float32) are
the contract those renderings are tested against.
"""

from __future__ import annotations

import numpy as np

from ir.graph.dtypes import DType, compute_dtype, to_numpy
from ir.graph.ops import Op


def widen(x, d: DType):
    """Half-width floats compute in float32."""
    cd = compute_dtype(d)
    return x.astype(to_numpy(cd)) if cd != d else x


def _idiv(a, b):
    safe = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe)
    r = a - q * safe
    q = np.where((r != 0) & ((a < 0) != (safe < 0)), q + 1, q)  # floor -> toward zero
    return np.where(b == 0, 0, q).astype(a.dtype)


def _mod(a, b):
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, a - _idiv(a, safe) * safe).astype(a.dtype)


def _shift(a, b, left: bool):
    bits = a.dtype.itemsize * 8
    big = (b < 0) | (b >= bits)
    cnt = np.where(big, 0, b).astype(a.dtype)
    out = np.left_shift(a, cnt) if left else np.right_shift(a, cnt)
    fill = np.zeros_like(a) if left or a.dtype.kind == "u" else np.where(a < 0, -1, 0)
    return np.where(big, fill, out).astype(a.dtype)


def unary(op: Op, x, out_dtype: DType, src_dtype: DType):
    if op == Op.CAST:
        return x.astype(to_numpy(out_dtype))
    if op == Op.BITCAST:
        return np.asarray(x).view(to_numpy(out_dtype))
    x = widen(x, src_dtype)
    if op == Op.NEG:
        r = np.negative(x) if x.dtype != np.bool_ else x.copy()
    elif op == Op.EXP:
        r = np.exp(x)
    elif op == Op.LOG:
        r = np.log(x)
    elif op == Op.SQRT:
        r = np.sqrt(x)
    elif op == Op.RECIP:
        r = np.reciprocal(x)
    else:
        raise NotImplementedError(f"semantics: {op.value} is not a unary op")
    return np.asarray(r).astype(to_numpy(out_dtype))


def binary(op: Op, a, b, out_dtype: DType, src_dtype: DType):
    a, b = widen(np.asarray(a), src_dtype), widen(np.asarray(b), src_dtype)
    is_bool = a.dtype == np.bool_
    if op == Op.ADD:
        r = np.logical_or(a, b) if is_bool else np.add(a, b)
    elif op == Op.MUL:
        r = np.logical_and(a, b) if is_bool else np.multiply(a, b)
    elif op == Op.CMPLT:
        r = np.less(a, b)
    elif op == Op.IDIV:
        r = _idiv(a, b)
    elif op == Op.MOD:
        r = _mod(a, b)
    elif op == Op.AND:
        r = np.bitwise_and(a, b)
    elif op == Op.OR:
        r = np.bitwise_or(a, b)
    elif op == Op.XOR:
        r = np.bitwise_xor(a, b)
    elif op == Op.SHL:
        r = _shift(a, b, True)
    elif op == Op.SHR:
        r = _shift(a, b, False)
    else:
        raise NotImplementedError(f"semantics: {op.value} is not a binary op")
    return np.asarray(r).astype(to_numpy(out_dtype))


def where(c, a, b, out_dtype: DType):
    return np.where(c, a, b).astype(to_numpy(out_dtype))


def apply(op: Op, vals, out_dtype: DType, src_dtype: DType):
    """Any elementwise op by its family; numpy's floating-point warnings are silenced."""
    with np.errstate(all="ignore"):
        if op == Op.WHERE:
            return where(*vals, out_dtype)
        if len(vals) == 1:
            return unary(op, vals[0], out_dtype, src_dtype)
        return binary(op, vals[0], vals[1], out_dtype, src_dtype)
