"""How C spells a dtype, a literal, an Index and each op: the words of the C target.

``ir/c/render.py`` (a whole nest) and ``ir/c/tile.py`` (a register-tiled contraction inside
it) write the same types, constants and addresses; they take them from here, so the tile
renderer depends on these words and not on the renderer that calls it. ``OPS`` is the
C spelling of every elementwise op of ``ir/graph/ops.py`` (the op table says what an op
is, this one how C writes it); ``ir/cuda/render.py`` overlays it with CUDA's words.
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.ops import COMPOSITE, ELEMENTWISE, TABLE, Op
from ir.loop.nest import Index

CTYPE = {
    dtypes.bool_: "uint8_t",
    dtypes.int8: "int8_t",
    dtypes.int16: "int16_t",
    dtypes.int32: "int32_t",
    dtypes.int64: "int64_t",
    dtypes.uint8: "uint8_t",
    dtypes.uint16: "uint16_t",
    dtypes.uint32: "uint32_t",
    dtypes.uint64: "uint64_t",
    dtypes.float16: "_Float16",
    dtypes.bfloat16: "uint16_t",  # bits; converted by limn_bf2f / limn_f2bf
    dtypes.float32: "float",
    dtypes.float64: "double",
}


def ctype(d: DType, device: str = "c") -> str:
    if d not in CTYPE:
        accepted = ", ".join(map(str, CTYPE))
        raise TypeError(f"{device} device: dtype {d} is not supported; accepted: {accepted}")
    return CTYPE[d]


def cast(src: str, s: DType, d: DType, bits: dict[DType, str] | None = None) -> str:
    """A value of dtype ``s`` as dtype ``d``. A half width held as its bits (``bits``: the
    dtype -> its helpers' letter; C holds bfloat16 so, CUDA float16 too) converts through
    float32 (``limn_bf2f``, ``limn_f2bf``, ...)."""
    bits = {dtypes.bfloat16: "bf"} if bits is None else bits
    if s == d:
        return src
    if s in bits:
        src, s = f"limn_{bits[s]}2f({src})", dtypes.float32
        if d == s:
            return src
    if d in bits:
        return f"limn_f2{bits[d]}((float){cast(src, s, dtypes.float32, bits)})"
    if d == dtypes.bool_:
        return f"(({src}) != 0)"
    if s.is_float and d.is_int and d.itemsize < 4:  # C leaves an out-of-range value
        # undefined (ARM saturates, x86 wraps): through int32, as x86 and numpy do
        return f"(({ctype(d)})(int32_t)({src}))"
    return f"(({ctype(d)}){src})"


def literal(value, d: DType) -> str:
    """A C expression of exactly ``value`` in dtype ``d``."""
    t = ctype(d)
    if d == dtypes.bool_:
        return "1" if value else "0"
    if d.is_int:
        v = int(value)
        if d.kind == "u":
            return f"(({t}){v}ull)"
        if v == dtypes.min_value(d):
            return f"(({t})({v + 1}ll - 1))"
        return f"(({t}){v}ll)"
    v = float(value)
    if math.isnan(v):
        body = "NAN"
    elif math.isinf(v):
        body = "INFINITY" if v > 0 else "-INFINITY"
    else:
        body = v.hex()
    if d == dtypes.bfloat16:
        return f"limn_f2bf((float){body})"
    return f"(({t}){body})"


def index(idx: Index, values: dict[str, str] | None = None) -> str:
    """``i0*5 + r2``; a term naming a loaded value (a gather's index) reads ``values[name]``."""
    parts = []
    for name, c in idx.terms:
        term = (values or {}).get(name, name)
        parts.append(term if c == 1 else f"{term}*{c}")
    for name, size in idx.scaled:  # a stride given at run time
        parts.append(f"{(values or {}).get(name, name)}*{size}")
    if idx.const or not parts:
        parts.append(str(idx.const))
    return " + ".join(parts).replace("+ -", "- ")


def _libm_call(op: Op) -> str:
    """A composite's template: ir/c/libm.py's ``limn_sin_float(x)``, ``limn_pow_double(a, b)``."""
    args = ", ".join(f"{{{i}}}" for i in range(TABLE[op].arity))
    return f"limn_{op.value.lower()}_{{t}}({args})"


# Each op's C: a template per result dtype name ("" for any other), filled with the
# operands {0}, {1}, {2}, the result's C type {t} and the last operand's C type {s}. A
# composite calls ir/c/libm.py's function; CAST converts in the renderer (``cast``).
OPS: dict[Op, dict[str, str]] = {
    Op.NEG: {"": "(({t})LIMN_NEG({0}))", "bool": "{0}"},
    Op.EXP: {"": "limn_exp_double({0})", "float32": "limn_expf({0})"},
    Op.LOG: {"": "limn_log_double({0})", "float32": "limn_logf({0})"},
    Op.SQRT: {"": "sqrt({0})", "float32": "sqrtf({0})"},
    Op.RECIP: {"": "(({t})1 / {0})"},
    Op.ADD: {"": "(({t})({0} + {1}))", "bool": "({0} | {1})"},
    Op.MUL: {"": "(({t})({0} * {1}))", "bool": "({0} & {1})"},
    Op.CMPLT: {"": "({0} < {1})"},
    Op.IDIV: {"": "limn_idiv_{s}({0}, {1})"},
    Op.MOD: {"": "limn_mod_{s}({0}, {1})"},
    Op.AND: {"": "(({t})({0} & {1}))"},
    Op.OR: {"": "(({t})({0} | {1}))"},
    Op.XOR: {"": "(({t})({0} ^ {1}))"},
    Op.SHL: {"": "limn_shl_{s}({0}, {1})"},
    Op.SHR: {"": "limn_shr_{s}({0}, {1})"},
    Op.BITCAST: {"": "limn_bitcast_{s}_{t}({0})"},
    Op.WHERE: {"": "({0} ? {1} : {2})"},
} | {op: {"": _libm_call(op)} for op in COMPOSITE & ELEMENTWISE}


def _signed(t: str) -> bool:
    return not t.startswith("u")


# The helper functions the templates above call, by op: the C definition at operand C type
# s and result C type t, where C leaves a case undefined that ir/graph/semantics defines
# (division by zero gives 0, INT_MIN / -1 wraps, a shift past the width gives 0 or the sign
# fill). A program carries each once per (op, s, t) it uses (``helpers``).
HELPERS = {
    Op.IDIV: lambda s, t: (
        f"static inline {s} limn_idiv_{s}({s} a, {s} b) {{ if (b == 0) return 0;"
        + (f" if (b == ({s})-1) return ({s})(0 - a);" if _signed(s) else "")
        + f" return ({s})(a / b); }}"
    ),
    Op.MOD: lambda s, t: (
        f"static inline {s} limn_mod_{s}({s} a, {s} b) {{ if (b == 0) return 0;"
        + (f" if (b == ({s})-1) return 0;" if _signed(s) else "")
        + f" return ({s})(a % b); }}"
    ),
    Op.SHL: lambda s, t: (
        f"static inline {s} limn_shl_{s}({s} a, {s} b) {{ "
        f"if (b < 0 || b >= (int64_t)(8 * sizeof({s}))) return 0; "
        f"return ({s})((u{s.lstrip('u')})a << b); }}"
    ),
    Op.SHR: lambda s, t: (
        f"static inline {s} limn_shr_{s}({s} a, {s} b) {{ "
        f"if (b < 0 || b >= (int64_t)(8 * sizeof({s}))) return ({s})"
        + ("(a < 0 ? -1 : 0)" if _signed(s) else "0")
        + f"; return ({s})(a >> b); }}"
    ),
    Op.BITCAST: lambda s, t: (
        f"static inline {t} limn_bitcast_{s}_{t}({s} x) {{ {t} y; "
        f"memcpy(&y, &x, sizeof y); return y; }}"
    ),
}


def spell(table: dict[Op, dict[str, str]], op: Op, args, t: str, s: str, d: DType) -> str:
    """``op`` on the C expressions ``args`` by ``table`` (``OPS`` or a target's overlay):
    t is the result's C type, s the last operand's, d the result dtype."""
    by_dtype = table.get(op)
    if by_dtype is None:
        raise NotImplementedError(f"render: no spelling of {op.value} for this target")
    return by_dtype.get(d.name, by_dtype[""]).format(*args, t=t, s=s)


def helpers(used) -> str:
    """The definitions of the helpers a program uses: ``used`` holds (op, s, t) for them
    among other things (which their own owners define)."""
    calls = sorted((op.value, s, t) for op, s, t in (u for u in used if len(u) == 3))
    return "\n".join(HELPERS[Op(op)](s, t) for op, s, t in calls)
