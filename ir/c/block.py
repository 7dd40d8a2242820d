"""The contraction schedule's second half: cache blocks, packed operands, register tiles.

``ir/c/tile.py`` recognizes a contraction and marks its register tile's rows and columns
(``Role.ROWS``, ``Role.COLS``); the passes here find those loops by role and build the rest
(the module docstring of ``ir/c/tile.py`` tells the whole schedule): ``block_contraction``
cuts cache blocks of tiles, ``pack_operands`` copies each tile's factors into packed
LOCALs, ``vectorize_tile`` holds a tile in vector registers. Where the loops a pass needs
were changed by an earlier pass it leaves them and says why in the nest's notes.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.c.target import Target
from ir.c.tile import OUTPUT, REDUCE, contraction, deps, read_once
from ir.graph import dtypes
from ir.graph.ops import Op
from ir.loop.nest import Const, DefAcc, Index, Load, Local, Loop, LoopNest, Range, Role, Store, walk
from ir.loop.passes import noted
from ir.loop.rewrite import (
    Fresh,
    chain,
    defines,
    extent,
    rebuild,
    rename,
    substitute,
    tree_map,
    uses,
    value_dtype,
)

MIN_PARALLEL_WORK = 1 << 18  # iterations below which waking a team costs more than it saves
# FMAs below which a blocked contraction runs on the calling thread: ~50 us on one AVX2 core.
# A team of two on a busy machine waits for a core: [30, 64] @ [64, 256] (491,520 FMAs) took
# 0.78 ms a call threaded under load against 26 us alone (torch threads neither)
MIN_PARALLEL_FMAS = 1 << 20
MIN_BLOCK_WORK = 1 << 12  # FMAs below which a contraction keeps its plain loops
MOST_BLOCK = 256 << 10  # an MC x KC block (a quarter of L2) lives on a thread's stack
WHOLE_BYTES = 16 << 20  # a factor packed whole, before the blocks, up to this size
MIN_TASKS = 4  # blocks the team shares at least; a weight gradient's 192 x 576 was one


def needed(body, val: str) -> list:
    """The instructions of ``body`` that ``val`` is computed from, itself included, in order."""
    want, out = {val}, []
    for ins in reversed(body):
        if defines(ins) in want:
            out.append(ins)
            want |= set(uses(ins))
    return out[::-1]


# ---- cache blocks and register tiles ------------------------------------------------


def block_contraction(nest: LoopNest, target: Target) -> LoopNest:
    """Each marked contraction as cache blocks of register tiles (the module docstring).

    A fill of the identity just before it (the lowered form of a sum into memory) is
    absorbed: each tile starts from that constant instead of reading it back.
    """
    fresh, items, out, i, why = Fresh(nest.body), nest.body, [], 0, []
    while i < len(items):
        it, nxt = items[i], items[i + 1] if i + 1 < len(items) else None
        fill = _fill(it, nxt) if isinstance(nxt, Loop) and _marked(nxt) else None
        new = _block(nxt, nest, fill, fresh, target) if fill is not None else None
        if isinstance(new, Loop):
            out.append(new)
            i += 2
            continue
        if isinstance(it, Loop) and _marked(it):
            new = _block(it, nest, None, fresh, target)
            if isinstance(new, str) and new:
                why.append(f"block_contraction: rows {_marked(it)} are not blocked: {new}")
            it = new if isinstance(new, Loop) else _unmarked(it)
        out.append(it)
        i += 1
    return noted(nest, out, why + _stray(out, Role.ROWS, "block_contraction: rows"))


def _stray(items, role: Role, what: str) -> list[str]:
    """Why each loop of ``role`` below the first loop of a nest was left: a loop an earlier
    pass made (an unroll's copy) holds the contraction, whose loops no longer start it."""
    tops = [lp for x in items if isinstance(x, Loop) for lp in chain(x)[0]]
    return [
        f"{what} {lp.var} is not scheduled: a loop an earlier pass made (an unroll's copy) now"
        " holds its contraction, whose loops no longer start the nest"
        for lp in walk(items)
        if isinstance(lp, Loop) and lp.role == role and all(lp is not t for t in tops)
    ]


def _marked(b: Loop) -> str:
    """The row loop ``tile_contraction`` marked in ``b``'s chain, or ""."""
    return next((lp.var for lp in chain(b)[0] if lp.role == Role.ROWS), "")


def _unmarked(b: Loop) -> Loop:
    """A contraction too small to block keeps its plain loops, without the marks."""
    loops, inner = chain(b)
    plain = (Role.ROWS, Role.COLS)
    loops = [replace(lp, role=None, tile=()) if lp.role in plain else lp for lp in loops]
    return rebuild(loops, inner)


def _fill(fill, nxt: Loop) -> Const | None:
    """The constant a fill nest stores into every cell the contraction ``nxt`` folds into."""
    if not isinstance(fill, Loop):
        return None
    loops, inner = chain(fill)
    found = contraction(nxt)
    if found is None or found[6] is not None or len(inner) != 2:
        return None
    const, store = inner
    if not isinstance(const, Const) or const.given is not None or not isinstance(store, Store):
        return None
    outer, ia, _, ib, _, fold, _, _ = found
    if store.src != const.out or (fold.dst, fold.index) != (store.buf, store.index):
        return None
    cells = [(lp.var, lp.stop) for lp in (*outer, ia, ib)]
    return const if sorted((lp.var, lp.stop) for lp in loops) == sorted(cells) else None


def _plus_zero(value) -> bool:
    return isinstance(value, int | float) and value == 0 and math.copysign(1, value) > 0


def _block(block: Loop, nest: LoopNest, fill: Const | None, fresh, target) -> Loop | str:
    """The contraction as cache blocks of tiles; "" where it is too small to pay, or why an
    earlier pass left it unfit (its loops no longer a contraction's)."""
    found = contraction(block)
    if found is None:
        return "its loops are no longer a contraction's (a loop steps, starts or nests anew)"
    outer, ia, reds, ib, body, fold, init, tail = found
    if any(lp.lo or lp.hi for lp in (*outer, ia, ib, *reds)):
        return "a loop of it has bounds (lo, hi) that blocks cannot cut"
    if (ia.role, ib.role) != (Role.ROWS, Role.COLS):
        return f"its rows and columns are {ia.var} and {ib.var}, not the loops marked"
    mr, nr = ia.tile[0], ib.tile[0]
    d = init.dtype if init is not None else nest.output.dtype
    m, n, r1, inner_reds = extent(ia), extent(ib), reds[0], reds[1:]
    k1, k_in = extent(r1), math.prod(extent(lp) for lp in inner_reds)
    cells = math.prod(extent(lp) for lp in outer) * m * n
    if cells * k1 * k_in < MIN_BLOCK_WORK:
        return ""
    store = fold.index if init is None else tail[-1].index
    start = init.value if init is not None else None if fill is None else fill.value
    # partial totals between reduce blocks live in ``out``: where the tail is the store of
    # the total, and (started from a constant) the constant is +0.0, what a guarded load
    # of the first block gives
    partial = start is None or (
        _plus_zero(start) and fold.op == Op.ADD and (init is None or len(tail) == 1)
    )
    kc = max(1, target.l1 // 2 // (nr * d.itemsize) // k_in)  # a KC x NR panel: half of L1
    if k1 <= 2 * kc or not partial:
        kc = k1
    kc = -(-k1 // -(-k1 // kc))  # blocks of equal length
    many = kc < k1
    most = min(target.l2 // 4, MOST_BLOCK) // (kc * k_in * d.itemsize)
    mc = max(mr, min(-(-m // mr) * mr, most // mr * mr))
    mc, nc = _enough_tasks(cells // (m * n), m, n, mc, -(-n // nr) * nr, mr, nr)
    V = Index.var
    ic, jc, rc = (fresh(lp.var + "c", bare=True) for lp in (ia, ib, r1))
    it, jt, t = fresh(ia.var + "t", bare=True), fresh(ib.var + "t", bare=True), fresh("t")
    cell = (V(ia.var) - V(it)) * nr + V(ib.var) - V(jt)
    rows = Loop(ia.var, m, lo=(V(it),), hi=(V(it) + mr,))
    cols = Loop(ib.var, n, lo=(V(jt),), hi=(V(jt) + nr,))
    first = fresh("v")
    if start is None:
        begin = Load(first, "out", store, d)
    elif many:
        begin = Load(first, "out", store, d, guard=(Range(V(rc), 1, k1),))
    else:
        begin = Const(first, start, d)
    total = fresh("v")
    back = [Load(total, t, cell, d)]
    back += (
        [Store("out", store, total)]
        if init is None
        else [rename(x, {init.out: total}) for x in tail]
    )
    red = replace(r1, lo=(V(rc),), hi=(V(rc) + kc,)) if many else r1
    tile = (
        Local(t, mr * nr, d),
        rebuild([rows, cols], (begin, Store(t, cell, first))),
        rebuild([red, *inner_reds, rows, cols], (*body, replace(fold, dst=t, index=cell))),
        rebuild([rows, cols], back),
    )
    sliver = Loop(it, m, step=mr, lo=(V(ic),), hi=(V(ic) + mc,), role=Role.SLIVER, tile=(mr,))
    panel = Loop(jt, n, step=nr, lo=(V(jc),), hi=(V(jc) + nc,), role=Role.PANEL, tile=(nr,))
    inner = rebuild([panel, sliver], tile)
    if many:
        inner = Loop(rc, k1, step=kc, kind=REDUCE, body=(inner,))
    task = [*outer, Loop(ic, m, step=mc, role=Role.BLOCK, tile=(mr, nr)), Loop(jc, n, step=nc)]
    if cells * k1 * k_in >= MIN_PARALLEL_FMAS:
        task[0] = replace(task[0], parallel=len(task))
    return rebuild(task, (inner,))


def _enough_tasks(cells: int, na: int, nb: int, mc: int, nc: int, mr: int, nr: int):
    """Row and column block sizes that give the team at least MIN_TASKS blocks of equal
    size where the output allows: a small output over a long reduce (``x.T @ g``, a
    weight's gradient) is otherwise one block on one thread. Halves the larger block, in
    whole slivers and panels; blocks only group output cells, so no cell's fold changes."""

    def up(n: int, d: int) -> int:  # n / d rounded up
        return -(-n // d)

    while cells * up(na, mc) * up(nb, nc) < MIN_TASKS and (mc > mr or nc > nr):
        if mc > mr and (mc >= nc or nc <= nr):
            mc = max(mr, up(mc // 2, mr) * mr)
        else:
            nc = max(nr, up(nc // 2, nr) * nr)
    # as many blocks, of equal height (width) in whole slivers (panels)
    mc = max(mr, up(up(na, up(na, mc)), mr) * mr)
    nc = max(nr, up(up(nb, up(nb, nc)), nr) * nr)
    return mc, nc


# ---- packed operands ----------------------------------------------------------------


def _tile_parts(sliver: Loop):
    """The pieces of a tile as ``block_contraction`` made it: (LOCAL, copy-in, reduce loops,
    rows, columns, the reduce body, the fold, what follows the fold)."""
    local, copy_in, compute, *back = sliver.body
    loops, inner = chain(compute)
    return local, copy_in, loops[:-2], loops[-2], loops[-1], inner[:-1], inner[-1], back


def pack_operands(nest: LoopNest) -> LoopNest:
    """Each tile's factors computed into packed LOCALs and read from there (module docstring).

    The row factor goes in ``[sliver][r][MR]`` order, once per cache block, where more than
    one panel reads it; the column factor in ``[panel][r][NR]``, once per panel, unless it
    is a plain load that already walks a contiguous panel or that one tile reads once (a
    single row: ``tile.read_once``, along any stride). A factor that none of the
    contraction's outer loops moves (a convolution's weights, ``x @ W.T``'s ``W`` read by
    every row block) is packed whole, once, before the blocks. Rows and columns past the
    edge are packed as 0, so a tile always reads whole slivers and panels.
    """
    fresh, body, why = Fresh(nest.body), [], []
    for top in nest.body:
        roles = [lp.role for lp in chain(top)[0]] if isinstance(top, Loop) else []
        new = _pack_contraction(top, nest, fresh) if Role.BLOCK in roles else (top,)
        if isinstance(new, str):
            why.append(f"pack_operands: the block under {top.var} is not packed: {new}")
        body += new if isinstance(new, tuple) else [top]
    return noted(nest, body, why + _stray(body, Role.BLOCK, "pack_operands: the block"))


def _pack_contraction(top: Loop, nest: LoopNest, fresh) -> tuple | str:
    loops, _ = chain(top)
    at = next((j for j, lp in enumerate(loops) if lp.role == Role.PANEL), 0)
    level, panel = loops[at - 1], loops[at]
    sliver = panel.body[0] if len(panel.body) == 1 else None
    if at < 1 or getattr(sliver, "role", None) != Role.SLIVER:
        return "its panel loop no longer holds one sliver loop alone"
    if len(sliver.body) < 3 or not isinstance(sliver.body[2], Loop):
        return "its tile is no longer a LOCAL, its copy in, its reduce loops and its copy out"
    local, copy_in, reds, rows, cols, body, fold, back = _tile_parts(sliver)
    dep = deps(body, {rows.var, cols.var, *(lp.var for lp in reds)})
    a_val, b_val = fold.src, fold.mul
    if cols.var in dep.get(a_val, {cols.var}):
        a_val, b_val = b_val, a_val
    if fold.mul is None or cols.var in dep[a_val] or rows.var in dep.get(b_val, {rows.var}):
        return (top,)  # a factor that needs both a row and a column
    mr, nr = sliver.tile[0], panel.tile[0]
    it, jt, ic = Index.var(sliver.var), Index.var(panel.var), sliver.lo[0]
    mc, nc, m, n = sliver.hi[0].const, panel.hi[0].const, rows.stop, cols.stop
    tops = loops[: next(j for j, lp in enumerate(loops) if lp.role)]  # outside the blocks
    outer = {lp.var for lp in tops}
    whole_reds = [replace(reds[0], lo=(), hi=()), *reds[1:]]
    k_in = math.prod(extent(lp) for lp in reds[1:])
    q, q_all = Index.var(reds[0].var) - (reds[0].lo[0] if reds[0].lo else 0), Index.var(reds[0].var)
    for lp in reds[1:]:
        q, q_all = q * extent(lp) + Index.var(lp.var), q_all * extent(lp) + Index.var(lp.var)
    k, k_all = (
        (reds[0].hi[0].const if reds[0].hi else extent(reds[0])) * k_in,
        extent(reds[0]) * k_in,
    )
    size = local.dtype.itemsize

    def alone(val: str) -> bool:  # moved by no outer loop, and small enough to pack whole
        need = needed(body, val)
        return not outer & {x for ins in need for x in uses(ins)}

    b_load = needed(body, b_val)
    in_place = (
        len(b_load) == 1
        and isinstance(b_load[0], Load)
        and not b_load[0].guard
        and n % nr == 0
        and (
            read_once(m, tops, b_load[0].index.names)  # a packed copy would be read once too
            or b_load[0].index.coeff(cols.var) == 1
            and (b_load[0].index.coeff(reds[-1].var) == nr or mc <= mr)
        )
    )
    top_head, level_head, panel_head, new_body = [], [], [], list(body)
    mpad, npad, d = -(-m // mr) * mr, -(-n // nr) * nr, local.dtype

    def packed(val, along: Loop, first: Index, width: int, spot: Index, over, panel=False):
        nonlocal new_body  # ``over``: the reduce loops the pack runs
        t = fresh("t")
        pack = _pack(body, val, along, first, width, over, t, spot, fresh, panel)
        new_body = _replace(new_body, val, Load(val, t, spot + Index.var(along.var) - first, d))
        return t, pack

    if alone(a_val) and (outer or nc < npad) and mpad * k_all * size <= WHOLE_BYTES:
        ta, pack = packed(a_val, rows, it, mr, it * k_all + q_all * mr, whole_reds)
        all_rows = Loop(sliver.var, m, step=mr, body=pack)
        top_head += [Local(ta, mpad * k_all, d), _team(all_rows, m * k_all)]
    elif nc > nr or m % mr:  # more than one panel reads each sliver, or one runs past the rows
        ta, pack = packed(a_val, rows, it, mr, (it - ic) * k + q * mr, reds)
        level_head += [Local(ta, mc * k, d), replace(sliver, role=None, tile=(), body=pack)]
    whole = alone(b_val) and (outer or mc < mpad) and npad * k_all * size <= WHOLE_BYTES
    if whole and not in_place:
        tb, pack = packed(b_val, cols, jt, nr, jt * k_all + q_all * nr, whole_reds, True)
        all_cols = Loop(panel.var, n, step=nr, body=pack)
        top_head += [Local(tb, npad * k_all, d), _team(all_cols, n * k_all)]
    elif not in_place:
        tb, panel_head = packed(b_val, cols, jt, nr, q * nr, reds, True)
        level_head.append(Local(tb, k * nr, d))
    kept = {defines(y) for v in (a_val, b_val) for y in needed(new_body, v)}
    compute = rebuild([*reds, rows, cols], (*[x for x in new_body if defines(x) in kept], fold))
    tile = replace(sliver, body=(local, copy_in, compute, *back))
    level = replace(level, body=(*level_head, replace(panel, body=(*panel_head, tile))))
    return (*top_head, rebuild([*loops[: at - 1], level], level.body))


def _team(pack: Loop, work: int) -> Loop:
    """A whole pack, before the blocks: the team shares its slivers (panels) where it pays."""
    return pack if work < MIN_PARALLEL_WORK else replace(pack, parallel=1)


def _pack(body, val, along: Loop, first: Index, width: int, reds, buf, spot, fresh, panel=False):
    """The loops that pack ``val`` for ``width`` rows (columns) from ``first`` on: at
    ``buf[spot + e]`` for the e-th, every reduce index, what the tile reads there.

    Only the instructions ``val`` needs are computed, with fresh names. A sliver's copy
    walks its rows innermost, so its stores stream (measured faster than streaming its
    loads); a panel's walks innermost whichever loop its loads are unit-stride along (the
    reduce, for ``x @ W.T``'s columns). Where the last sliver (panel) runs past the edge,
    its rows (columns) there are a second loop that stores 0, so neither loop tests a
    bound per element.
    """
    e = fresh(along.var + "l", bare=True)
    names = {defines(x): fresh("v") for x in needed(body, val)}
    at = {along.var: first + Index.var(e)}
    moved = [rename(substitute(x, at), names) for x in needed(body, val)]
    loads = [x for x in moved if isinstance(x, Load) and x.index.coeff(reds[-1].var)]
    along_red = loads and all(abs(x.index.coeff(reds[-1].var)) == 1 for x in loads)
    outside = panel and along_red and not any(x.index.coeff(e) == 1 for x in loads)
    left = Index((), along.stop) - first  # rows (columns) that exist from ``first`` on
    edge = along.stop % width != 0
    lanes = Loop(e, width, hi=(left,) if edge else ())
    data = (*moved, Store(buf, spot + Index.var(e), names[val]))
    reds = [replace(lp, kind=OUTPUT) for lp in reds]  # each reduce index a cell of its own
    out = [rebuild([lanes, *reds] if outside else [*reds, lanes], data)]
    if edge:
        z, d = fresh("v"), value_dtype(moved[-1])
        zero = (Const(z, 0.0, d), Store(buf, data[-1].index, z))
        out.append(rebuild([Loop(e, width, lo=(left,)), *reds], zero))
    return tuple(out)


def _replace(body: list, val: str, load: Load) -> list:
    """``body`` with the instruction defining ``val`` replaced by ``load``."""
    return [replace(load, row=x.row) if defines(x) == val else x for x in body]


# ---- the register tile --------------------------------------------------------------


def vectorize_tile(nest: LoopNest, target: Target) -> LoopNest:
    """Each tile held in vector registers while a reduce block runs (module docstring).

    It needs what ``pack_operands`` provides: a column factor loaded at unit stride along
    the columns (or along a stride: then each column is a register of one lane, a scalar
    FMA chain), whole panels of it, and a row factor that does not move with the columns.
    A row past the edge reads a packed 0, or a guarded one where the rows are read in place.
    """
    fresh, why = Fresh(nest.body), []

    def rule(x):
        if not isinstance(x, Loop) or x.role != Role.SLIVER:
            return x
        out = _vectorize(x, fresh, target.lanes)
        if isinstance(out, Loop):
            return out
        why.append(f"vectorize_tile: the tile of {x.var} stays scalar: {out}")
        return x

    return noted(nest, tree_map(nest.body, rule), why)


def _vectorize(sliver, fresh, lanes_of):
    local, copy_in, reds, rows, cols, body, fold, back = _tile_parts(sliver)
    d, mr = local.dtype, sliver.tile[0]
    b_val = next(
        (v for v in (fold.mul, fold.src) if any(cols.var in uses(x) for x in needed(body, v))),
        None,
    )
    a_val = fold.src if b_val == fold.mul else fold.mul
    b_load = next((x for x in body if defines(x) == b_val), None)
    others = [x for x in body if x is not b_load]
    if fold.mul is None or d not in (dtypes.float32, dtypes.float64):
        return f"no product of floats to fuse ({d})"
    if not isinstance(b_load, Load) or b_load.guard or not b_load.index.coeff(cols.var):
        return "no column factor loaded along the columns"
    # a column factor read in place along a stride: a register of one lane per column
    lanes, nr = lanes_of(d.itemsize) if b_load.index.coeff(cols.var) == 1 else 1, local.size // mr
    if nr % lanes or any(cols.var in uses(x) for x in others) or _past_edge(b_load, cols, nr):
        return f"the columns are not whole panels of {lanes} lanes read once"
    if any(_past_edge(x, rows, mr) for x in others if isinstance(x, Load)):
        return f"a row factor runs past the edge of {mr}-row slivers"
    it, jt = Index.var(sliver.var), cols.lo[0]
    regs = {(a, j): fresh("acc") for a in range(mr) for j in range(nr // lanes)}
    start, end, step = [], [], []
    _, first = chain(copy_in)
    known = first[0].value if isinstance(first[0], Const) else None  # the tile's start
    for (a, j), acc in regs.items():
        v = fresh("v")
        if known is not None:
            start.append(DefAcc(acc, known, d, lanes=lanes))
        else:
            start += [
                Load(v, local.out, Index((), a * nr + j * lanes), d, lanes=lanes),
                DefAcc(acc, 0.0, d, lanes=lanes, start=v),
            ]
        end.append(Store(local.out, Index((), a * nr + j * lanes), acc, lanes=lanes))
    panel = {j: fresh("v") for j in range(nr // lanes)}  # the panel's vectors of this index
    for j, v in panel.items():
        at = b_load.index.substitute({cols.var: jt + j * lanes})
        step.append(replace(b_load, out=v, index=at, lanes=lanes))
    dep = deps(others, {rows.var})
    shared = [x for x in others if rows.var not in dep.get(defines(x), set())]
    moving = [x for x in others if x not in shared]
    step += shared
    for a in range(mr):
        row = it + a
        names = {defines(x): fresh("v") for x in moving}
        step += [rename(substitute(x, {rows.var: row}), names) for x in moving]
        u = names.get(a_val, a_val)
        step += [
            replace(fold, dst=regs[a, j], index=None, src=u, mul=panel[j])
            for j in range(nr // lanes)
        ]
    kernel = rebuild(reds, step)
    begin = () if known is not None else (copy_in,)
    return replace(sliver, body=(local, *begin, *start, kernel, *end, *back))


def _past_edge(load: Load, along: Loop, width: int) -> bool:
    """Whether a load from the nest's own buffers that moves with ``along`` would run past
    its edge in the last tile: only a packed LOCAL (``t0``, ...) has whole slivers and panels."""
    ours = load.buf == "out" or load.buf.startswith("in")
    return ours and along.var in load.index.names and along.stop % width != 0
