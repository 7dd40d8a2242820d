"""How C spells a dtype, a literal and an Index: the words both C renderers share.

``ir/c/render.py`` (a whole nest) and ``ir/c/tile.py`` (a register-tiled contraction inside
it) write the same types, constants and addresses; they take them from here, so the tile
renderer depends on these words and not on the renderer that calls it.
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from ir.graph.dtypes import DType
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


def ctype(d: DType) -> str:
    if d not in CTYPE:
        raise TypeError(
            f"c device: dtype {d} is not supported; accepted: {', '.join(map(str, CTYPE))}"
        )
    return CTYPE[d]


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
