"""C for a register-tiled contraction: the shape a matmul or a conv's reduce takes.

``ir/c/passes.tile_contraction`` marks a loop chain ``out* iA red+ iB`` whose body folds into
``out``. This renders it as:

    for each outer cell, for each block of NR columns (iB):          <- the OpenMP team
        pack: every value that depends on the reduce loops and iB but not on iA is
              computed once into a contiguous panel[r][NR]
        for each block of MR rows (iA):
            acc[MR][NR] = the cells' current values (the identity the fill wrote)
            for each reduce index r, in the nest's order:
                for each row a: the values that depend on iA but not iB
                    for each column b: the rest, from the panel; acc[a][b] op= v
            write back the cells that exist

The reduce loops are walked in their original order for every cell, so each cell folds
exactly the sequence the plain nest folds; only which cells are in flight together
changes. The one liberty: where the folded value is a product, ``acc + a*b`` is a fused
multiply-add, rounded once instead of twice, as every BLAS does; it is what lets the
block run at the FMA units' rate. Threads and tiles still never change a bit. Rows and
columns past the edge are computed on a clamped index (a valid address) and never
written back. The panel turns the operand read
along the reduce axis (``x @ W.T``) into unit-stride loads, which is what lets the column
loop vectorize for either layout.
"""

from __future__ import annotations

import math

from ir.c.passes import contraction
from ir.c.spell import ctype, index, literal
from ir.graph.ops import Op
from ir.loop.rewrite import Block, defines, uses

PANEL_LIMIT = 1 << 20  # elements per panel; a longer reduce keeps the plain rows


def _deps(inner, loop_vars: set[str]) -> dict[str, set[str]]:
    """For each value, the loop variables it depends on (through values and addresses)."""
    deps: dict[str, set[str]] = {}
    for ins in inner:
        d: set[str] = set()
        for name in uses(ins):
            if name in loop_vars:
                d.add(name)
            else:
                d |= deps.get(name, set())
        out = defines(ins)
        if out is not None:
            deps[out] = d
    return deps


def tiled(b: Block) -> bool:
    """Whether the perfect loop chain starting at ``b`` is a tiled contraction."""
    while True:
        if dict(b.loop.attrs).get("tile"):
            return True
        if len(b.body) != 1 or not isinstance(b.body[0], Block):
            return False
        b = b.body[0]


def render_tile(r, block: Block, depth: int) -> None:
    """Emit the tiled form of ``block`` through renderer ``r`` (see the module docstring)."""
    outer, ia, reds, ib, body, fold, init, tail = contraction(block)
    mr, nr = dict(ia.attrs)["tile"], dict(ib.attrs)["tile"]
    loop_vars = {lp.var for lp in (*outer, ia, *reds, ib)}
    deps = _deps(body, loop_vars)
    kind = {}
    for ins in body:
        d = deps[defines(ins)] if defines(ins) else set()
        kind[id(ins)] = ("A" if ia.var in d else "") + ("B" if ib.var in d else "")
    k = math.prod(lp.stop for lp in reds)
    # the panel holds B-only values that an A or AB instruction (or the fold) reads
    needed = set(uses(fold))
    for ins in body:
        if "A" in kind[id(ins)]:
            needed |= set(uses(ins))
    panel = []
    if k * nr <= PANEL_LIMIT:
        panel = [ins for ins in body if kind[id(ins)] == "B" and defines(ins) in needed]
    paneled = {defines(ins) for ins in panel}
    if init is None:
        t_acc = ctype(r.bufs["out"])
        start = f"out[{index(fold.index, r.values)}]"
    else:
        t_acc = ctype(init.dtype)
        start = literal(init.value, init.dtype)
    na, nb = ia.stop, ib.stop
    p = "  " * depth
    lines = r.lines
    team = bool(dict((outer or [ia])[0].attrs).get("parallel")) and r.openmp
    if team:
        lines.append(f"{p}#pragma omp parallel")
        lines.append(p + "{")
    for ins in panel:
        t = ctype(ins.dtype)
        lines.append(f"{p}  {t} *panel_{defines(ins)} = malloc(sizeof({t}) * {k * nr});")
    if team:
        lines.append(f"{p}  #pragma omp for collapse({len(outer) + 1}) schedule(static)")
    d = depth + 1

    def put(dd: int, text: str) -> None:
        lines.append("  " * dd + text)

    def opened(dd: int, lps) -> int:
        for lp in lps:
            put(dd, f"for (int64_t {lp.var} = 0; {lp.var} < {lp.stop}; {lp.var}++) {{")
            dd += 1
        return dd

    def close(dd: int, n: int) -> int:
        for _ in range(n):
            dd -= 1
            put(dd, "}")
        return dd

    lin = "0"
    for lp in reds:
        lin = f"({lin})*{lp.stop} + {lp.var}"
    clamp_a = f"const int64_t {ia.var} = {ia.var}_0 + a < {na} ? {ia.var}_0 + a : {na - 1};"
    clamp_b = f"const int64_t {ib.var} = {ib.var}_0 + b < {nb} ? {ib.var}_0 + b : {nb - 1};"
    d = opened(d, outer)
    put(d, f"for (int64_t {ib.var}_0 = 0; {ib.var}_0 < {nb}; {ib.var}_0 += {nr}) {{")
    d += 1
    if panel:  # pack: what the panel needs, at every reduce index and column
        dd = opened(d, reds)
        for ins in body:
            if kind[id(ins)] == "":
                r.instr(ins, dd)
        put(dd, f"for (int b = 0; b < {nr}; b++) {{")
        put(dd + 1, clamp_b)
        for ins in body:
            if kind[id(ins)] == "B":
                r.instr(ins, dd + 1)
        for ins in panel:
            put(dd + 1, f"panel_{defines(ins)}[({lin})*{nr} + b] = {defines(ins)};")
        close(dd + 1, 1 + len(reds))
    put(d, f"for (int64_t {ia.var}_0 = 0; {ia.var}_0 < {na}; {ia.var}_0 += {mr}) {{")
    dd = d + 1
    put(dd, f"{t_acc} acc[{mr}][{nr}];")
    put(dd, f"for (int a = 0; a < {mr}; a++) {{ {clamp_a}")
    put(dd, f"  for (int b = 0; b < {nr}; b++) {{ {clamp_b} acc[a][b] = {start}; }} }}")
    dd = opened(dd, reds)
    for ins in body:
        if kind[id(ins)] == "":
            r.instr(ins, dd)
    put(dd, f"for (int a = 0; a < {mr}; a++) {{")
    dd += 1
    put(dd, clamp_a)
    for ins in body:
        if kind[id(ins)] == "A":
            r.instr(ins, dd)
    put(dd, f"for (int b = 0; b < {nr}; b++) {{")
    dd += 1
    put(dd, clamp_b)
    for ins in body:
        name = defines(ins)
        if name in paneled:
            put(dd, f"const {ctype(ins.dtype)} {name} = panel_{name}[({lin})*{nr} + b];")
        elif kind[id(ins)] in ("B", "AB"):
            r.instr(ins, dd)
    v = fold.src
    product = next((x for x in body if defines(x) == v and getattr(x, "op", None) == Op.MUL), None)
    if fold.op == Op.ADD and product is not None and t_acc in ("float", "double"):
        # the one fused multiply-add on the c device: acc + a*b rounded once, as BLAS does
        fma = "fmaf" if t_acc == "float" else "fma"
        x, y = product.srcs
        put(dd, f"acc[a][b] = {fma}({x}, {y}, acc[a][b]);")
    elif fold.op == Op.ADD:
        put(dd, f"acc[a][b] += {v};")
    else:
        put(dd, f"acc[a][b] = ({v} > acc[a][b] || {v} != {v}) ? {v} : acc[a][b];")
    dd = close(dd, 2 + len(reds))
    put(dd, f"for (int a = 0; a < {mr} && {ia.var}_0 + a < {na}; a++) {{")
    put(dd + 1, f"const int64_t {ia.var} = {ia.var}_0 + a;")
    put(dd + 1, f"for (int b = 0; b < {nr} && {ib.var}_0 + b < {nb}; b++) {{")
    put(dd + 2, f"const int64_t {ib.var} = {ib.var}_0 + b;")
    if init is None:
        put(dd + 2, f"out[{index(fold.index, r.values)}] = acc[a][b];")
    else:
        put(dd + 2, f"const {t_acc} {init.out} = acc[a][b];")
        r.dtype_of[init.out] = init.dtype
        for ins in tail:
            r.instr(ins, dd + 2)
    close(dd + 2, 2)
    d = close(d + 1, 1)  # row blocks
    close(d, 1 + len(outer))  # column blocks and outer loops
    for ins in panel:
        put(depth + 1, f"free(panel_{defines(ins)});")
    if team:
        lines.append(p + "}")
