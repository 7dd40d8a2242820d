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
from ir.loop.nest import Index, Load
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


def _writer(lines: list[str]):
    """Three ways to append C to ``lines``: a line at an indent depth, loops opened (the
    depth inside them returned) and loops closed (the depth outside them returned)."""

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

    return put, opened, close


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
    if _packable(body, fold, kind) and k * max(mr, nr) <= PANEL_LIMIT:
        render_packed(r, block, depth)
        return
    # the panel holds B-only values that an A or AB instruction (or the fold) reads
    needed = set(uses(fold))
    for ins in body:
        if "A" in kind[id(ins)]:
            needed |= set(uses(ins))
    panel = []
    if k * nr <= PANEL_LIMIT:
        panel = [ins for ins in body if kind[id(ins)] == "B" and defines(ins) in needed]
    paneled = {defines(ins) for ins in panel}
    t_acc, start = _start(r, fold, init)
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

    put, opened, close = _writer(lines)

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
    outside = r.at
    r.mark(fold)  # the source map: the fold's line is the ACCUM's
    if fold.mul is not None:  # the nest's FMA: acc + a*b rounded once
        fma = "fmaf" if t_acc == "float" else "fma"
        put(dd, f"acc[a][b] = {fma}({v}, {fold.mul}, acc[a][b]);")
    elif fold.op == Op.ADD:
        put(dd, f"acc[a][b] += {v};")
    else:
        put(dd, f"acc[a][b] = ({v} > acc[a][b] || {v} != {v}) ? {v} : acc[a][b];")
    r.mark(outside)
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


# ---- both operands packed -------------------------------------------------------------

MC = 192  # rows of A packed together: a block that stays in L2 while its columns stream
NC = 512  # columns one task covers; each A block is packed once per NC columns
IN_PLACE = True  # a single-panel contraction reads its row factor in place
BALANCE = True  # row blocks of equal height
WHOLE_LIMIT = 1 << 22  # elements of a side packed whole, once (16 MiB of float32)


MIN_TASKS = 4  # blocks the team shares at least; a weight gradient's 192 x 192 was one


def _enough_tasks(cells: int, na: int, nb: int, mc: int, nc: int, mr: int, nr: int):
    """Row and column block sizes that give the team at least MIN_TASKS blocks of equal
    size where the output allows: a small output over a long reduce (``x.T @ g``, a
    weight's gradient, 192 x 192 over 2048 rows) is otherwise one block on one thread.
    Halves the larger block, in whole slivers and panels; blocks only group output cells,
    so no cell's fold changes."""

    def up(n: int, d: int) -> int:  # n / d rounded up
        return -(-n // d)

    def tasks(mc: int, nc: int) -> int:
        return cells * up(na, mc) * up(nb, nc)

    while tasks(mc, nc) < MIN_TASKS and (mc > mr or nc > nr):
        if mc > mr and (mc >= nc or nc <= nr):
            mc = max(mr, up(mc // 2, mr) * mr)
        else:
            nc = max(nr, up(nc // 2, nr) * nr)
    # as many blocks, of equal height (width) in whole slivers (panels)
    mc = max(mr, up(up(na, up(na, mc)), mr) * mr)
    nc = max(nr, up(up(nb, up(nb, nc)), nr) * nr)
    return mc, nc


def _side(name: str, body, kind) -> str | None:
    ins = next((x for x in body if defines(x) == name), None)
    return None if ins is None else kind[id(ins)]


def _packable(body, fold, kind) -> bool:
    """An FMA of a value along the rows by a value along the columns, nothing needing both."""
    if fold.mul is None or any(k == "AB" for k in kind.values()):
        return False
    sides = {_side(fold.src, body, kind), _side(fold.mul, body, kind)}
    return sides == {"A", "B"}


def render_packed(r, block: Block, depth: int) -> None:
    """The contraction as BLAS runs it: both operands packed, an MR x NR register block.

        for each outer cell, block of MC rows, block of NC columns:     <- the OpenMP team
            pack A: the row factor of the FMA for MC rows at every reduce index, in
                    MR-row slivers ([sliver][r][MR]); what the factor is computed from (a
                    bias, a mask, a pad) is computed here, once per block
            for each panel of NR columns in the block:
                pack B: the column factor, [r][NR]
                for each MR-row sliver: acc[MR][NR] = the cells' start;
                    for r in order: acc[a][b] = fma(A[r][a], B[r][b], acc[a][b])
                    write back the cells that exist (through the nest's tail)

    A side that no outer loop moves (a conv's weights) is packed whole once, by the team,
    before the blocks; so are x @ W.T's transposed column panels. Where a fill of the
    identity comes just before, each block starts from that constant (``r.tile_start``).

    Every cell still folds its reduce indices in the nest's order, one FMA each, so the
    answer is the printed nest's, bit for bit, for any thread count or block size. Rows
    and columns past the edge are packed as 0 and never written back. Each pack walks its
    source along whichever loop is unit-stride, so the copies stream.
    """
    outer, ia, reds, ib, body, fold, init, tail = contraction(block)
    mr, nr = dict(ia.attrs)["tile"], dict(ib.attrs)["tile"]
    loop_vars = {lp.var for lp in (*outer, ia, *reds, ib)}
    deps = _deps(body, loop_vars)
    kind = {}
    for ins in body:
        d = deps[defines(ins)] if defines(ins) else set()
        kind[id(ins)] = ("A" if ia.var in d else "") + ("B" if ib.var in d else "")
    a_val, b_val = fold.src, fold.mul
    if _side(a_val, body, kind) != "A":
        a_val, b_val = b_val, a_val
    k = math.prod(lp.stop for lp in reds)
    na, nb = ia.stop, ib.stop
    mc = min(-(-na // mr) * mr, max(1, MC // mr) * mr)  # whole slivers only
    mc = max(mr, min(mc, PANEL_LIMIT // max(1, k) // mr * mr))
    if BALANCE:  # the same number of row blocks, of equal height: 256 rows are 132 + 124
        blocks = -(-na // mc)  # for a team of two, not 192 + 64
        height = -(-na // blocks)
        mc = max(mr, -(-height // mr) * mr)
    nc = min(-(-nb // nr) * nr, max(1, NC // nr) * nr)
    mc, nc = _enough_tasks(math.prod(lp.stop for lp in outer), na, nb, mc, nc, mr, nr)
    t_acc, start = _start(r, fold, init)
    zero = literal(0.0, init.dtype if init is not None else r.bufs["out"])
    lines = r.lines

    put, opened, close = _writer(lines)

    def unit_along(var: str, side: str) -> bool:
        """Whether the side's loads are unit-stride along ``var`` (then it goes innermost)."""
        red = {lp.var for lp in reds}
        loads = [x for x in body if isinstance(x, Load) and kind[id(x)] == side]
        loads = [x for x in loads if red & set(x.index.names)]  # a bias does not decide
        return bool(loads) and all(abs(x.index.coeff(var)) == 1 for x in loads)

    lin = "0"
    for lp in reds:
        lin = f"({lin})*{lp.stop} + {lp.var}"

    def pack(dd: int, side: str, var: str, first: str, lim: str, n: int, dst: str, val: str):
        """Pack one sliver or panel: ``var`` = first + e for e < lim, every reduce index.

        The copy walks innermost whichever loop its source is unit-stride along for
        longer: the reduce (``x @ W``'s rows) or the rows (columns) themselves (an image
        patch, unit-stride along the 3 taps of a kernel row but along all its columns).
        Only the instructions the packed value needs are computed.
        """
        e = "a" if side == "A" else "b"
        edge = f"const int64_t {var} = {first} + {e};"
        need = _needed(body, val)
        along_red = unit_along(reds[-1].var, side)
        if along_red and not (unit_along(var, side) and n > reds[-1].stop):  # reduce innermost
            put(dd, f"for (int {e} = 0; {e} < {lim}; {e}++) {{")
            put(dd + 1, edge)
            d2 = opened(dd + 1, reds)
            for ins in body:
                if id(ins) in need:
                    r.instr(ins, d2)
            put(d2, f"{dst}[({lin})*{n} + {e}] = {val};")
            close(d2, 1 + len(reds))
        else:  # walk the rows (columns) innermost
            d2 = opened(dd, reds)
            for ins in body:
                if id(ins) in need and kind[id(ins)] == "":
                    r.instr(ins, d2)
            put(d2, f"for (int {e} = 0; {e} < {lim}; {e}++) {{")
            put(d2 + 1, edge)
            for ins in body:
                if id(ins) in need and kind[id(ins)] == side:
                    r.instr(ins, d2 + 1)
            put(d2 + 1, f"{dst}[({lin})*{n} + {e}] = {val};")
            close(d2 + 1, 1 + len(reds))
        put(dd, f"for (int {e} = {lim}; {e} < {n}; {e}++)")
        put(dd + 1, f"for (int64_t q = 0; q < {k}; q++) {dst}[q*{n} + {e}] = {zero};")

    a0, b0 = f"{ia.var}_0", f"{ib.var}_0"
    team = bool(dict((outer or [ia])[0].attrs).get("parallel")) and r.openmp
    # a side that no outer loop moves (a conv's weights, a weight gradient's output
    # gradient) is packed whole once, by the team together, not once per outer cell; so
    # are the columns of x @ W.T, whose every panel is a transpose that each row block
    # would otherwise repeat (a plain copy is cheaper to repeat than to fetch from L3)
    outer_vars = {lp.var for lp in outer}
    na_pad, nb_pad = -(-na // mr) * mr, -(-nb // nr) * nr
    whole_a = bool(outer) and not deps[a_val] & outer_vars and na_pad * k <= PANEL_LIMIT
    whole_b = (
        not deps[b_val] & outer_vars
        and nb_pad * k <= WHOLE_LIMIT
        and (bool(outer) or na > mc and not unit_along(ib.var, "B"))
    )
    d = depth
    if whole_a:
        put(d, f"{t_acc} *wa = malloc(sizeof({t_acc}) * {na_pad * k});")
    if whole_b:
        put(d, f"{t_acc} *wb = malloc(sizeof({t_acc}) * {nb_pad * k});")
    if team:
        put(d, "#pragma omp parallel")
        put(d, "{")
    d += 1
    if whole_a:
        if team:
            put(d, "#pragma omp for schedule(static)")
        put(d, f"for (int64_t s = 0; s < {na}; s += {mr}) {{")
        put(d + 1, f"const int alim = {na} - s < {mr} ? (int)({na} - s) : {mr};")
        put(d + 1, f"{t_acc} *restrict ps = wa + s*{k};")
        pack(d + 1, "A", ia.var, "s", "alim", mr, "ps", a_val)
        put(d, "}")
    if whole_b:
        if team:
            put(d, "#pragma omp for schedule(static)")
        put(d, f"for (int64_t {b0} = 0; {b0} < {nb}; {b0} += {nr}) {{")
        put(d + 1, f"const int blim = {nb} - {b0} < {nr} ? (int)({nb} - {b0}) : {nr};")
        put(d + 1, f"{t_acc} *restrict pw = wb + {b0}*{k};")
        t8 = _transposed(body, b_val, ib, reds, nr, k, t_acc)
        if t8 is not None:  # whole panels by 8 x 8 register transposes, not a scalar each
            load, ld = t8
            at = {ib.var: Index.var(f"{b0}t"), reds[0].var: Index.var("q0")}
            src = f"&{load.buf}[{index(load.index.substitute(at), r.values)}]"
            put(d + 1, f"if (blim == {nr}) {{")
            put(d + 2, f"for (int64_t q0 = 0; q0 < {k}; q0 += 8)")
            put(d + 3, f"for (int64_t {b0}t = {b0}; {b0}t < {b0} + {nr}; {b0}t += 8)")
            put(d + 4, f"limn_t8_float({src}, {ld}, pw + q0*{nr} + ({b0}t - {b0}), {nr});")
            r.used.add(("t8", "float"))
            put(d + 1, "} else {")
            pack(d + 2, "B", ib.var, b0, "blim", nr, "pw", b_val)
            put(d + 1, "}")
        else:
            pack(d + 1, "B", ib.var, b0, "blim", nr, "pw", b_val)
        put(d, "}")
    direct = (
        None if whole_a or not IN_PLACE else _in_place(body, a_val, ia, reds, outer, nb, nr, t_acc)
    )
    if not whole_a:
        put(d, f"{t_acc} *pa = malloc(sizeof({t_acc}) * {(mr if direct else mc) * k});")
    if not whole_b:
        put(d, f"{t_acc} *pb = malloc(sizeof({t_acc}) * {k * nr});")
    if team:
        put(d, f"#pragma omp for collapse({len(outer) + 2}) schedule(static)")
    d = opened(d, outer)
    put(d, f"for (int64_t {a0}b = 0; {a0}b < {na}; {a0}b += {mc}) {{")
    put(d + 1, f"for (int64_t {b0}b = 0; {b0}b < {nb}; {b0}b += {nc}) {{")
    d += 2
    if whole_a:
        put(d, f"const {t_acc} *restrict pa = wa + {a0}b*{k};")
    elif direct:
        pass  # whole slivers read A in place; an edge sliver is packed where it is used
    else:
        put(d, f"for (int64_t s = 0; s < {mc} && {a0}b + s < {na}; s += {mr}) {{")
        put(
            d + 1, f"const int alim = {na} - ({a0}b + s) < {mr} ? (int)({na} - ({a0}b + s)) : {mr};"
        )
        put(d + 1, f"{t_acc} *restrict ps = pa + s*{k};")
        pack(d + 1, "A", ia.var, f"{a0}b + s", "alim", mr, "ps", a_val)
        put(d, "}")
    put(d, f"for (int64_t {b0} = {b0}b; {b0} < {b0}b + {nc} && {b0} < {nb}; {b0} += {nr}) {{")
    put(d + 1, f"const int blim = {nb} - {b0} < {nr} ? (int)({nb} - {b0}) : {nr};")
    if whole_b:
        put(d + 1, f"const {t_acc} *restrict pb = wb + {b0}*{k};")
    else:
        pack(d + 1, "B", ib.var, b0, "blim", nr, "pb", b_val)
    put(d + 1, f"for (int64_t s = 0; s < {mc} && {a0}b + s < {na}; s += {mr}) {{")
    dd = d + 2
    put(dd, f"const int64_t {a0} = {a0}b + s;")
    put(dd, f"const int alim = {na} - {a0} < {mr} ? (int)({na} - {a0}) : {mr};")
    put(dd, f"{t_acc} acc[{mr}][{nr}];")
    known = init is not None or r.tile_start is not None  # a literal, not the cell's value
    put(dd, f"for (int a = 0; a < {mr}; a++)")
    put(dd + 1, f"for (int b = 0; b < {nr}; b++) acc[a][b] = {start if known else zero};")
    if not known:  # each cell starts from what memory holds
        put(dd, "for (int a = 0; a < alim; a++) {")
        put(dd + 1, f"const int64_t {ia.var} = {a0} + a;")
        put(dd + 1, "for (int b = 0; b < blim; b++) {")
        put(dd + 2, f"const int64_t {ib.var} = {b0} + b;")
        put(dd + 2, f"acc[a][b] = {start};")
        close(dd + 2, 2)
    outside = r.at
    mk = f"limn_mk_{t_acc}_{mr}x{nr}"

    def call(dd: int, text: str) -> None:
        r.mark(fold)  # the source map: a micro-kernel call's line is the ACCUM's
        put(dd, text)
        r.mark(outside)

    if direct:
        load, base, sq, sr = direct
        at = {ia.var: Index.var(a0), reds[0].var: Index((), 0)}
        put(dd, f"if (alim == {mr}) {{")
        src = f"&{load.buf}[{index(base.substitute(at), r.values)}]"
        call(dd + 1, f"{mk}({k}, {src}, {sq}, {sr}, pb, acc);")
        put(dd, "} else {")
        pack(dd + 1, "A", ia.var, a0, "alim", mr, "pa", a_val)
        call(dd + 1, f"{mk}({k}, pa, {mr}, 1, pb, acc);")
        put(dd, "}")
    else:
        call(dd, f"{mk}({k}, pa + s*{k}, {mr}, 1, pb, acc);")
    r.used.add(("gemm", f"{t_acc}:{mr}:{nr}"))
    put(dd, "for (int a = 0; a < alim; a++) {")
    put(dd + 1, f"const int64_t {ia.var} = {a0} + a;")
    put(dd + 1, "for (int b = 0; b < blim; b++) {")
    put(dd + 2, f"const int64_t {ib.var} = {b0} + b;")
    if init is None:
        put(dd + 2, f"out[{index(fold.index, r.values)}] = acc[a][b];")
    else:
        put(dd + 2, f"const {t_acc} {init.out} = acc[a][b];")
        r.dtype_of[init.out] = init.dtype
        for ins in tail:
            r.instr(ins, dd + 2)
    close(dd + 2, 2)
    close(dd, 1)  # slivers
    close(d + 1, 1)  # panels
    close(d, 2 + len(outer))  # column blocks, row blocks, outer loops
    if not whole_a:
        put(depth + 1, "free(pa);")
    if not whole_b:
        put(depth + 1, "free(pb);")
    if team:
        put(depth, "}")
    if whole_a:
        put(depth, "free(wa);")
    if whole_b:
        put(depth, "free(wb);")


def _start(r, fold, init) -> tuple[str, str]:
    """The accumulator's C type and what each cell starts from: the register total's
    identity, the fill constant the renderer folded in (``r.tile_start``), or the cell."""
    if init is not None:
        return ctype(init.dtype), literal(init.value, init.dtype)
    if r.tile_start is not None:
        return ctype(r.bufs["out"]), literal(r.tile_start.value, r.bufs["out"])
    return ctype(r.bufs["out"]), f"out[{index(fold.index, r.values)}]"


def _in_place(body, a_val: str, ia, reds, outer, nb: int, nr: int, t_acc: str):
    """(load, index, reduce stride, row stride) when the row factor is a plain load that a
    single column panel would use once (attention's ``p @ v``, 32 columns a head): packing
    it would copy every element to read it once, so whole slivers read it where it is."""
    if -(-nb // nr) != 1 or len(reds) != 1:
        return None
    load = next((x for x in body if defines(x) == a_val), None)
    if not isinstance(load, Load) or load.guard or ctype(load.dtype) != t_acc:
        return None
    if not set(load.index.names) <= {lp.var for lp in (*outer, ia, *reds)}:
        return None  # a data-dependent address
    return load, load.index, load.index.coeff(reds[0].var), load.index.coeff(ia.var)


def _transposed(body, b_val: str, ib, reds, nr: int, k: int, t_acc: str):
    """(load, column stride) when the column factor is a plain float load that runs along
    the reduce and strides along the columns (``x @ W.T``'s W): its panels are transposes,
    copied 8 x 8 through registers (``limn_t8_float``) instead of one scalar store each."""
    if t_acc != "float" or len(reds) != 1 or nr % 8 or k % 8:
        return None
    load = next((x for x in body if defines(x) == b_val), None)
    if not isinstance(load, Load) or load.guard or ctype(load.dtype) != t_acc:
        return None
    if not set(load.index.names) <= {ib.var, reds[0].var}:
        return None  # an outer index, or a data-dependent address
    ld = load.index.coeff(ib.var)
    if load.index.coeff(reds[0].var) != 1 or ld <= 1:
        return None
    return load, ld


TRANSPOSE_8 = """#if defined(__AVX__)
#include <immintrin.h>
static inline void limn_t8_float(const float *restrict s, int64_t ls, float *restrict d,
                                 int64_t ld) {
  __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls);
  __m256 r2 = _mm256_loadu_ps(s + 2*ls), r3 = _mm256_loadu_ps(s + 3*ls);
  __m256 r4 = _mm256_loadu_ps(s + 4*ls), r5 = _mm256_loadu_ps(s + 5*ls);
  __m256 r6 = _mm256_loadu_ps(s + 6*ls), r7 = _mm256_loadu_ps(s + 7*ls);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2*ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3*ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4*ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5*ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6*ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7*ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#else
static inline void limn_t8_float(const float *restrict s, int64_t ls, float *restrict d,
                                 int64_t ld) {
  for (int q = 0; q < 8; q++)
    for (int b = 0; b < 8; b++) d[q*ld + b] = s[b*ls + q];
}
#endif"""
"""``d[q][b] = s[b][q]`` for an 8 x 8 block of floats: s's rows ``ls`` apart, d's ``ld``."""


def _needed(body, val: str) -> set[int]:
    """The instructions of ``body`` that ``val`` is computed from (ids), itself included."""
    want, out = {val}, set()
    for ins in reversed(body):
        name = defines(ins)
        if name is not None and name in want:
            out.add(id(ins))
            want |= set(uses(ins))
    return out


def micro_kernel(spec: str) -> str:
    """C of ``limn_mk_<t>_<mr>x<nr>``: ``acc[a][b] = fma(sa[q*sq + a*sr], pb[q][b], acc[a][b])``
    for q = 0, 1, ... K-1 in order, the block held in registers. A packed sliver is
    (sq, sr) = (MR, 1); a row factor read in place is its load's strides.

    With AVX-512 the MR x NR block is MR*NR/lanes vector registers, one broadcast of the
    row factor and NR/lanes loads of the column factor per reduce step; elsewhere the same
    loop in plain C (the compiler vectorizes its column loop). Both round each step once.
    """
    t, mr, nr = spec.split(":")
    mr, nr = int(mr), int(nr)
    name = f"limn_mk_{t}_{mr}x{nr}"
    fma = "fmaf" if t == "float" else "fma"
    head = (
        f"static inline void {name}(int64_t K, const {t} *restrict sa, int64_t sq, "
        f"int64_t sr, const {t} *restrict pb, {t} acc[{mr}][{nr}])"
    )
    lanes = 16 if t == "float" else 8
    suffix, vec = ("ps", "__m512") if t == "float" else ("pd", "__m512d")
    out = ["#if defined(__AVX512F__)", "#include <immintrin.h>", head + " {"]
    if nr % lanes == 0:
        nv = nr // lanes
        regs = [[f"c{a}_{j}" for j in range(nv)] for a in range(mr)]
        for a in range(mr):
            for j in range(nv):
                out.append(f"  {vec} {regs[a][j]} = _mm512_loadu_{suffix}(&acc[{a}][{j * lanes}]);")
        out.append("  for (int64_t q = 0; q < K; q++) {")
        for j in range(nv):
            out.append(f"    const {vec} b{j} = _mm512_loadu_{suffix}(pb + q*{nr} + {j * lanes});")
        for a in range(mr):
            out.append(f"    const {vec} a{a} = _mm512_set1_{suffix}(sa[q*sq + {a}*sr]);")
            for j in range(nv):
                c = regs[a][j]
                out.append(f"    {c} = _mm512_fmadd_{suffix}(a{a}, b{j}, {c});")
        out.append("  }")
        for a in range(mr):
            for j in range(nv):
                out.append(f"  _mm512_storeu_{suffix}(&acc[{a}][{j * lanes}], {regs[a][j]});")
        out += ["}", "#else"]
    else:
        out = ["#if 0", "#else"]
    out += [
        head + " {",
        "  for (int64_t q = 0; q < K; q++)",
        f"    for (int a = 0; a < {mr}; a++) {{",
        "      const {t} av = sa[q*sq + a*sr];".replace("{t}", t),
        f"      for (int b = 0; b < {nr}; b++) acc[a][b] = {fma}(av, pb[q*{nr} + b], acc[a][b]);",
        "    }",
        "}",
        "#endif",
    ]
    return "\n".join(out)
