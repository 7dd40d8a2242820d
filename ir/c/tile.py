"""The contraction schedule: passes that turn a matmul-shaped nest into the loops a BLAS runs.

A contraction (a matmul, a batched matmul, a convolution, any of their gradients) is a nest
``out[.., a, b] = fold over r of A(.., a, r) * B(.., r, b)``. As lowered, every product
loads both factors from wherever they live; a core does two FMAs of sixteen lanes a cycle
but only two or three loads, and an operand read with a large stride misses every cache.
GotoBLAS and BLIS ("Anatomy of high-performance matrix multiplication", Goto and van de
Geijn; "BLIS: a framework for rapidly instantiating BLAS functionality", Van Zee and van de
Geijn) keep an MR x NR tile of the output in vector registers, read its operands from
small packed copies that stay in L1 (a KC x NR panel) and L2 (an MC x KC block), and let
the tile's FMAs outnumber its loads. Four passes, in this order, do that to a nest:

* ``tile_contraction`` recognizes the shape, puts the output loops outside the reduce
  loops, makes the fold an FMA (``acc + a*b`` rounded once, as every BLAS does) and marks
  the rows (``tile=MR``) and columns (``tile=NR``) of the register tile.
* ``block_contraction`` cuts the output into cache blocks of MC x NC cells (the tasks the
  threads share), the first reduce loop into blocks of KC, and each block into tiles of
  MR rows (a sliver) by NR columns (a panel). A tile folds into a LOCAL ``t[MR*NR]``,
  copied in from ``out`` (or started at the identity) before each reduce block and out
  again (through the nest's tail) after it.
* ``pack_operands`` computes the row factor of the fold into a LOCAL in sliver order
  (``[sliver][r][MR]``), once per cache block, and the column factor into a panel
  (``[r][NR]``), once per panel: both are then read at unit stride from the cache that
  holds them, and a prologue (a mask, a pad, a ReLU) is computed once, not once per use.
* ``vectorize_tile`` holds the tile in MR x NR/L vector registers of L lanes (the target's)
  while a reduce block runs: per reduce index NR/L vector loads of the panel, MR scalars
  of the sliver, and MR x NR/L vector FMAs.

Every cell still folds its reduce indices in the order the nest gave them, one FMA each,
and is computed start to finish by one thread: the passes choose which cells are in flight
together and where their operands are read from, nothing else. So threaded equals serial
bit for bit, and the output of each pass runs in the interpreter as it prints.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.c.target import Target, detect
from ir.graph import dtypes
from ir.graph.dtypes import HALF
from ir.graph.ops import Op
from ir.loop.nest import (
    Accum,
    Arith,
    Check,
    Const,
    DefAcc,
    Index,
    Load,
    Local,
    Loop,
    LoopNest,
    Range,
    Store,
)
from ir.loop.rewrite import (
    Block,
    Fresh,
    chain,
    defines,
    extent,
    flatten,
    rebuild,
    rename,
    substitute,
    to_tree,
    uses,
    value_dtype,
    with_attrs,
)

MIN_PARALLEL_WORK = 1 << 18  # iterations below which waking a team costs more than it saves
MIN_BLOCK_WORK = 1 << 12  # FMAs below which a contraction keeps its plain loops
MOST_BLOCK = 256 << 10  # an MC x KC block (a quarter of L2) lives on a thread's stack
WHOLE_BYTES = 16 << 20  # a factor packed whole, before the blocks, up to this size
MIN_TASKS = 4  # blocks the team shares at least; a weight gradient's 192 x 576 was one


def _deps(items, loop_vars: set[str]) -> dict[str, set[str]]:
    """For each value, the loop variables it depends on (through values and addresses)."""
    deps: dict[str, set[str]] = {}
    for ins in items:
        d: set[str] = set()
        for name in uses(ins):
            d |= {name} if name in loop_vars else deps.get(name, set())
        if defines(ins) is not None:
            deps[defines(ins)] = d
    return deps


def _needed(body, val: str) -> list:
    """The instructions of ``body`` that ``val`` is computed from, itself included, in order."""
    want, out = {val}, []
    for ins in reversed(body):
        if defines(ins) in want:
            out.append(ins)
            want |= set(uses(ins))
    return out[::-1]


def _each_block(items, fn) -> tuple:
    """``items`` with every Block for which ``fn`` gives a new one replaced (else searched)."""
    out: list = []
    for it in items:
        new = fn(it) if isinstance(it, Block) else it
        if new is None:
            new = Block(it.loop, _each_block(it.body, fn))
        out += new if isinstance(new, tuple) else [new]  # a tuple: items in its place
    return tuple(out)


def _pass(nest: LoopNest, fn) -> LoopNest:
    fresh = Fresh(nest.body)
    body = flatten(_each_block(to_tree(nest.body), lambda b: fn(b, nest, fresh)))
    return replace(nest, body=body)


# ---- recognizing a contraction --------------------------------------------------------


def tile_contraction(nest: LoopNest, target: Target | None = None) -> LoopNest:
    t, items = target or detect(), to_tree(nest.body)
    items = [_tile_block(x, nest, t) if isinstance(x, Block) else x for x in items]
    return replace(nest, body=flatten(items))


def tile_shape(itemsize: int, columns: int, target: Target) -> tuple[int, int]:
    """Rows and columns of the register tile: three of the target's vectors of columns, or
    two where fewer columns run past the edge, by the rows that fill three quarters of its
    registers (at least its FMA chains); the rest hold operands. float32: 8 x 48 or 12 x 32
    on AVX-512, 6 x 16 on AVX2 (BLIS's Haswell kernel), 8 x 12 on NEON; a narrow output
    (one vector) up to 16 rows."""
    lanes, tile = target.lanes(itemsize), max(target.fma_chains, target.registers * 3 // 4)
    if columns <= lanes:
        return min(16, tile), lanes
    vectors = min((3, 2), key=lambda v: -(-columns // (v * lanes)) * v * lanes - columns)
    return tile // vectors, vectors * lanes


def contraction(block: Block):
    """Recognize a contraction; returns (outer, iA, reds, iB, body, fold, init, tail) or None.

    Two shapes qualify. Folding into memory: ``out* iA red+ iB`` with ``body`` ending in an
    ACCUM into ``out`` (``init`` is None: each cell starts from what the fill stored). Folding
    into a register: ``out* iA iB`` around DEFACC, a chain of reduce loops ending in an ACCUM
    into that register, then ``tail`` (casts, and the STORE of the total).
    """
    loops, inner = chain(block)
    if any(lp.start != 0 or lp.step != 1 for lp in loops):
        return None
    if inner and isinstance(inner[0], DefAcc) and len(inner) >= 3 and isinstance(inner[1], Block):
        acc, red_block, tail = inner[0], inner[1], inner[2:]
        reds, body = chain(red_block)
        if any(isinstance(x, Block) for x in body) or any(isinstance(x, Block) for x in tail):
            return None
        if any(lp.start != 0 or lp.step != 1 for lp in reds) or len(loops) < 2:
            return None
        fold = body[-1] if body else None
        if not isinstance(fold, Accum) or fold.index is not None or fold.dst != acc.out:
            return None
        if not isinstance(tail[-1], Store) or any(isinstance(x, Store | Accum) for x in tail[:-1]):
            return None
        names = set(tail[-1].index.names) | {lp.var for lp in loops[-2:-1] if lp.stop == 1}
        if not {loops[-1].var, loops[-2].var} <= names:
            return None
        return loops[:-2], loops[-2], reds, loops[-1], body[:-1], fold, acc, tail
    if any(isinstance(x, Block) for x in inner) or not inner:
        return None
    fold = inner[-1]
    if not isinstance(fold, Accum) or fold.index is None:
        return None
    written = set(fold.index.names)
    kinds = ["out" if lp.var in written or lp.stop == 1 else "red" for lp in loops]
    if len(loops) < 3 or kinds[-1] != "out" or kinds[-2] != "red":
        return None
    first_red = kinds.index("red")
    if first_red == 0 or any(k != "red" for k in kinds[first_red:-1]):
        return None
    return (
        loops[: first_red - 1],
        loops[first_red - 1],
        loops[first_red:-1],
        loops[-1],
        inner[:-1],
        fold,
        None,
        (),
    )


def _outputs_first(block: Block) -> Block:
    """Move output loops out past reduce loops (keeping the innermost loop innermost, unless
    it is too narrow to tile and a wider output loop exists: a weight gradient's kernel
    offset gives way to its channels).

    Each cell still meets the reduce loops in their own relative order, so what it folds,
    and in which order, is unchanged; only which cells are in flight together moves.
    """
    loops, inner = chain(block)
    if _folds_in_register(inner):
        return _register_outputs(loops, inner)
    if not inner or not isinstance(inner[-1], Accum) or inner[-1].index is None:
        return block
    if any(isinstance(x, Block) for x in inner) or any(lp.lo or lp.hi for lp in loops):
        return block
    written = set(inner[-1].index.names)
    last, loads = loops[-1], [x for x in inner if isinstance(x, Load)]
    if last.var not in written or extent(last) < 8:
        # a reduce innermost, or an output too narrow for a column block (a weight
        # gradient's kernel offset): a wide output loop goes innermost instead
        wide = [lp for lp in loops[:-1] if lp.var in written and extent(lp) >= 8]
        if wide:
            best = _columns(wide, loads)
            loops = [lp for lp in loops if lp is not best] + [best]
        elif last.var not in written:
            return block
    outs = [lp for lp in loops[:-1] if lp.var in written]
    reds = [lp for lp in loops[:-1] if lp.var not in written]
    return rebuild([*_row_last(outs, loops[-1], loads), *reds, loops[-1]], inner)


def _columns(wide: list[Loop], loads) -> Loop:
    """The column loop: the wide one most operands are unit-stride along."""
    return max(
        wide, key=lambda lp: (sum(abs(x.index.coeff(lp.var)) == 1 for x in loads), extent(lp))
    )


def _row_last(outs: list[Loop], col: Loop, loads) -> list[Loop]:
    """``outs`` with the row loop last: the one most operands along the columns do not
    depend on (the ties: a long one, then the innermost)."""
    if not outs:
        return outs
    along = [x for x in loads if x.index.coeff(col.var)]
    row = max(
        range(len(outs)),
        key=lambda j: (sum(not x.index.coeff(outs[j].var) for x in along), extent(outs[j]) >= 6, j),
    )
    return [*outs[:row], *outs[row + 1 :], outs[row]]


def _folds_in_register(inner) -> bool:
    """``DEFACC, a chain of reduce loops, ..., STORE``: a total kept in a register."""
    return (
        len(inner) >= 3
        and isinstance(inner[0], DefAcc)
        and isinstance(inner[1], Block)
        and isinstance(inner[-1], Store)
    )


def _register_outputs(loops: list[Loop], inner) -> Block:
    """The output loops around a register total, arranged for a register block: a wide
    loop along which the operands are unit-stride innermost (the columns), the loop most
    of the column operands do not depend on next (the rows). Every loop here is an output
    loop, each cell folds inside them on its own, so their order changes no number."""
    block = rebuild(loops, inner)
    if len(loops) < 2 or any(lp.lo or lp.hi for lp in loops):
        return block
    _, body = chain(inner[1])
    if any(isinstance(x, Block) for x in body):
        return block
    written = set(inner[-1].index.names)
    loads = [x for x in body if isinstance(x, Load)]
    wide = [lp for lp in loops if lp.var in written and extent(lp) >= 8]
    if extent(loops[-1]) < 8 and not wide:
        return block
    col = loops[-1] if extent(loops[-1]) >= 8 else _columns(wide, loads)
    return rebuild([*_row_last([lp for lp in loops if lp is not col], col, loads), col], inner)


def _one_row(block: Block) -> bool:
    """One output loop folding products of a value it moves by one it does not: a matmul
    of a single row (``x[r] * W[col, r]``), as a register total or into memory."""
    loops, inner = chain(block)
    if _folds_in_register(inner):
        cols, body = loops, chain(inner[1])[1]
    elif inner and isinstance(inner[-1], Accum) and inner[-1].index is not None:
        cols, body = [lp for lp in loops if lp.var in inner[-1].index.names], inner
    else:
        return False
    if len(cols) != 1 or any(isinstance(x, Block) for x in body):
        return False
    moves, made = {}, {}
    for x in body:
        if defines(x):
            made[defines(x)] = x
            moves[defines(x)] = any(n == cols[0].var or moves.get(n, False) for n in uses(x))
    mul = made.get(body[-1].src) if isinstance(body[-1], Accum) else None
    if not isinstance(mul, Arith) or mul.op != Op.MUL:
        return False
    return moves.get(mul.srcs[0], False) != moves.get(mul.srcs[1], False)


def _reuses(body, a: str, b: str, reds: set[str], one_row: bool = False) -> bool:
    """Whether a register block saves loads: the operands read along the reduce split into
    ones the columns share (no ``b``) and ones the rows share (no ``a``), none needing both.

    A row reduce whose every element is its own (a softmax's row sum over a strided view)
    shares nothing: tiling it would only turn its unit-stride rows into strided columns.
    """
    rows = cols = False
    for ins in body:
        if not isinstance(ins, Load) or not reds & set(ins.index.names):
            continue
        names = set(ins.index.names)
        if a in names and b in names:
            return False
        rows |= a in names or one_row and b not in names
        cols |= b in names
    return rows and cols


def _tile_block(block: Block, nest: LoopNest, target: Target) -> Block:
    if _one_row(block):  # a matmul of one row: tiled as a row block of one, so each cell
        # folds as a matmul's rows do (FMAs in order), however many rows there are
        tiled = _tile(Block(Loop(f"{block.loop.var}_row", 1), (block,)), nest, target)
        if tiled is not None:
            return tiled
    moved = _outputs_first(block)
    tiled = _tile(moved, nest, target)
    if tiled is not None:
        return tiled
    loops, inner = chain(block)
    folds_into_memory = inner and isinstance(inner[-1], Accum) and inner[-1].index is not None
    if folds_into_memory and loops[-1].var in inner[-1].index.names:
        return moved  # output loops outside the reduce loops: the same cells, better reuse
    return block


def _tile(block: Block, nest: LoopNest, target: Target) -> Block | None:
    """The chain marked as a tiled contraction, or None where tiling would not pay."""
    found = contraction(block)
    if found is None:
        return None
    outer, ia, reds, ib, body, fold, init, tail = found
    if fold.op not in (Op.ADD, Op.MAX) or nest.output.dtype in HALF and init is None:
        return None
    if any(isinstance(x, Store | Accum | Check) for x in body):
        return None  # gathers keep the plain form
    guarded = [x for x in body if isinstance(x, Load) and x.guard]
    if guarded and (init is not None and init.dtype in HALF or nest.output.dtype in HALF):
        return None
    if any({ia.var, ib.var} <= set(x.index.names) for x in guarded):
        return None  # a pad along both a row and a column cannot be packed once per side
    k = math.prod(extent(lp) for lp in reds)
    if not _reuses(body, ia.var, ib.var, {lp.var for lp in reds}, extent(ia) == 1):
        return None
    if extent(ib) < 8 or k < 4:  # too narrow to tile, but folded as a tile's cells are
        return _fuse_multiply_add(block, init, nest)
    acc = init.dtype if init is not None else nest.output.dtype
    mr, nr = tile_shape(acc.itemsize, extent(ib), target)
    mr = 1 if extent(ia) == 1 else mr
    loops, inner = chain(block)
    marks = {ia.var: mr, ib.var: nr}
    tagged = [with_attrs(lp, tile=marks[lp.var]) if lp.var in marks else lp for lp in loops]
    return _fuse_multiply_add(rebuild(tagged, inner), init, nest)


def _fuse_multiply_add(block: Block, init, nest: LoopNest) -> Block:
    """Fold ``acc + a*b`` of a tiled contraction as one FMA (rounded once), as BLAS does.

    It is written into the nest, so the printed nest, the interpreter and the C agree:
    the MUL that only feeds the fold goes, and the ACCUM names both factors.
    """
    acc_dtype = init.dtype if init is not None else nest.output.dtype
    if not acc_dtype.is_float or acc_dtype.itemsize < 4:
        return block

    def rewrite(b: Block) -> Block:
        if any(isinstance(x, Block) for x in b.body):
            return Block(b.loop, tuple(rewrite(x) if isinstance(x, Block) else x for x in b.body))
        body = list(b.body)
        fold = body[-1]
        if not isinstance(fold, Accum) or fold.op != Op.ADD or fold.mul is not None:
            return b
        mul = next((x for x in body if defines(x) == fold.src), None)
        if not isinstance(mul, Arith) or mul.op != Op.MUL or mul.dtype != acc_dtype:
            return b
        if sum(fold.src in uses(x) for x in body) != 1:
            return b  # the product is read elsewhere too: it must exist
        x, y = mul.srcs
        gone = (*mul.folded, *(() if mul.row is None else (mul.row,)))  # for the viewer
        fma = replace(fold, src=x, mul=y, folded=fold.folded + gone)
        body = [i for i in body[:-1] if i is not mul] + [fma]
        return Block(b.loop, tuple(body))

    return rewrite(block)


# ---- cache blocks and register tiles ------------------------------------------------


def block_contraction(nest: LoopNest, target: Target | None = None) -> LoopNest:
    """Each marked contraction as cache blocks of register tiles (the module docstring).

    A fill of the identity just before it (the lowered form of a sum into memory) is
    absorbed: each tile starts from that constant instead of reading it back.
    """
    fresh, t = Fresh(nest.body), target or detect()
    items, out, i = to_tree(nest.body), [], 0
    while i < len(items):
        it, nxt = items[i], items[i + 1] if i + 1 < len(items) else None
        fill = _fill(it, nxt) if isinstance(nxt, Block) and _marked(nxt) else None
        new = _block(nxt, nest, fill, fresh, t) if fill is not None else None
        if new is not None:
            out.append(new)
            i += 2
            continue
        if isinstance(it, Block) and _marked(it):
            it = _block(it, nest, None, fresh, t) or _unmarked(it)
        out.append(it)
        i += 1
    return replace(nest, body=flatten(out))


def _marked(b: Block) -> bool:
    return any(dict(lp.attrs).get("tile") for lp in chain(b)[0])


def _unmarked(b: Block) -> Block:
    """A contraction too small to block keeps its plain loops, without the marks."""
    loops, inner = chain(b)
    return rebuild(
        [replace(lp, attrs=tuple(a for a in lp.attrs if a[0] != "tile")) for lp in loops], inner
    )


def _fill(fill, nxt: Block) -> Const | None:
    """The constant a fill nest stores into every cell the contraction ``nxt`` folds into."""
    if not isinstance(fill, Block):
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


def _block(block: Block, nest: LoopNest, fill: Const | None, fresh, target) -> Block | None:
    found = contraction(block)
    if found is None:
        return None
    outer, ia, reds, ib, body, fold, init, tail = found
    if any(lp.lo or lp.hi for lp in (*outer, ia, ib, *reds)):
        return None
    mr, nr = dict(ia.attrs)["tile"], dict(ib.attrs)["tile"]
    d = init.dtype if init is not None else nest.output.dtype
    m, n, r1, inner_reds = extent(ia), extent(ib), reds[0], reds[1:]
    k1, k_in = extent(r1), math.prod(extent(lp) for lp in inner_reds)
    cells = math.prod(extent(lp) for lp in outer) * m * n
    if cells * k1 * k_in < MIN_BLOCK_WORK:
        return None
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
    sliver = Loop(it, m, step=mr, lo=(V(ic),), hi=(V(ic) + mc,), attrs=(("sliver", mr),))
    panel = Loop(jt, n, step=nr, lo=(V(jc),), hi=(V(jc) + nc,), attrs=(("panel", nr),))
    inner = rebuild([panel, sliver], tile)
    if many:
        inner = Block(Loop(rc, k1, step=kc), (inner,))
    task = [*outer, Loop(ic, m, step=mc, attrs=(("block", True),)), Loop(jc, n, step=nc)]
    task[0] = with_attrs(task[0], tile=f"{mr}x{nr}")
    if cells * k1 * k_in >= MIN_PARALLEL_WORK:
        task[0] = with_attrs(task[0], parallel=len(task))
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


def _tile_parts(sliver: Block):
    """The pieces of a tile as ``block_contraction`` made it: (LOCAL, copy-in, reduce loops,
    rows, columns, the reduce body, the fold, what follows the fold)."""
    local, copy_in, compute, *back = sliver.body
    loops, inner = chain(compute)
    return local, copy_in, loops[:-2], loops[-2], loops[-1], inner[:-1], inner[-1], back


def pack_operands(nest: LoopNest) -> LoopNest:
    """Each tile's factors computed into packed LOCALs and read from there (module docstring).

    The row factor goes in ``[sliver][r][MR]`` order, once per cache block, where more than
    one panel reads it; the column factor in ``[panel][r][NR]``, once per panel, unless it
    is a plain load that already walks a contiguous panel. A factor that none of the
    contraction's outer loops moves (a convolution's weights, ``x @ W.T``'s ``W`` read by
    every row block) is packed whole, once, before the blocks. Rows and columns past the
    edge are packed as 0, so a tile always reads whole slivers and panels.
    """
    return _pass(nest, _pack_contraction)


def _pack_contraction(top: Block, nest: LoopNest, fresh):
    if "tile" not in dict(top.loop.attrs):
        return None
    loops, _ = chain(top)
    at = next(j for j, lp in enumerate(loops) if "panel" in dict(lp.attrs))
    level, panel = _descend(top, at - 1), _descend(top, at)
    sliver = panel.body[0]
    local, copy_in, reds, rows, cols, body, fold, back = _tile_parts(sliver)
    deps = _deps(body, {rows.var, cols.var, *(lp.var for lp in reds)})
    a_val, b_val = fold.src, fold.mul
    if cols.var in deps.get(a_val, {cols.var}):
        a_val, b_val = b_val, a_val
    if fold.mul is None or cols.var in deps[a_val] or rows.var in deps.get(b_val, {rows.var}):
        return Block(top.loop, top.body)  # a factor that needs both a row and a column
    mr, nr = dict(sliver.loop.attrs)["sliver"], dict(panel.loop.attrs)["panel"]
    it, jt, ic = Index.var(sliver.loop.var), Index.var(panel.loop.var), sliver.loop.lo[0]
    mc, nc, m, n = sliver.loop.hi[0].const, panel.loop.hi[0].const, rows.stop, cols.stop
    outer = {
        lp.var for lp in loops[: next(j for j, lp in enumerate(loops) if "block" in dict(lp.attrs))]
    }
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
        need = _needed(body, val)
        return not outer & {x for ins in need for x in uses(ins)}

    b_load = _needed(body, b_val)
    in_place = (
        len(b_load) == 1
        and isinstance(b_load[0], Load)
        and not b_load[0].guard
        and b_load[0].index.coeff(cols.var) == 1
        and n % nr == 0
        and (b_load[0].index.coeff(reds[-1].var) == nr or mc <= mr)
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
        all_rows = Block(Loop(sliver.loop.var, m, step=mr), pack)
        top_head += [Local(ta, mpad * k_all, d), _team(all_rows, m * k_all)]
    elif nc > nr or m % mr:  # more than one panel reads each sliver, or one runs past the rows
        ta, pack = packed(a_val, rows, it, mr, (it - ic) * k + q * mr, reds)
        level_head += [Local(ta, mc * k, d), Block(replace(sliver.loop, attrs=()), pack)]
    if alone(b_val) and (outer or mc < mpad) and npad * k_all * size <= WHOLE_BYTES:
        tb, pack = packed(b_val, cols, jt, nr, jt * k_all + q_all * nr, whole_reds, True)
        all_cols = Block(Loop(panel.loop.var, n, step=nr), pack)
        top_head += [Local(tb, npad * k_all, d), _team(all_cols, n * k_all)]
    elif not in_place:
        tb, panel_head = packed(b_val, cols, jt, nr, q * nr, reds, True)
        level_head.append(Local(tb, k * nr, d))
    kept = {defines(y) for v in (a_val, b_val) for y in _needed(new_body, v)}
    compute = rebuild([*reds, rows, cols], (*[x for x in new_body if defines(x) in kept], fold))
    tile = Block(sliver.loop, (local, copy_in, compute, *back))
    level = Block(level.loop, (*level_head, Block(panel.loop, (*panel_head, tile))))
    return (*top_head, _swap(top, at - 1, level))


def _team(pack: Block, work: int) -> Block:
    """A whole pack, before the blocks: the team shares its slivers (panels) where it pays."""
    if work < MIN_PARALLEL_WORK:
        return pack
    return Block(with_attrs(pack.loop, parallel=1), pack.body)


def _descend(block: Block, k: int) -> Block:
    """The block ``k`` loops down a chain."""
    for _ in range(k):
        block = block.body[0]
    return block


def _swap(block: Block, k: int, new: Block) -> Block:
    """``block`` with the block ``k`` loops down its chain replaced by ``new``."""
    return new if k == 0 else Block(block.loop, (_swap(block.body[0], k - 1, new),))


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
    names = {defines(x): fresh("v") for x in _needed(body, val)}
    at = {along.var: first + Index.var(e)}
    moved = [rename(substitute(x, at), names) for x in _needed(body, val)]
    loads = [x for x in moved if isinstance(x, Load) and x.index.coeff(reds[-1].var)]
    along_red = loads and all(abs(x.index.coeff(reds[-1].var)) == 1 for x in loads)
    outside = panel and along_red and not any(x.index.coeff(e) == 1 for x in loads)
    left = Index((), along.stop) - first  # rows (columns) that exist from ``first`` on
    edge = along.stop % width != 0
    lanes = Loop(e, width, hi=(left,) if edge else ())
    data = (*moved, Store(buf, spot + Index.var(e), names[val]))
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


def vectorize_tile(nest: LoopNest, target: Target | None = None) -> LoopNest:
    """Each tile held in vector registers while a reduce block runs (module docstring).

    It needs what ``pack_operands`` provides: a column factor loaded at unit stride along
    the columns, whole panels of it, and a row factor that does not move with the columns.
    A row past the edge reads a packed 0, or a guarded one where the rows are read in place.
    """
    lanes = (target or detect()).lanes
    return _pass(nest, lambda b, nest, fresh: _vectorize(b, nest, fresh, lanes))


def _vectorize(sliver: Block, nest: LoopNest, fresh, lanes_of) -> Block | None:
    if "sliver" not in dict(sliver.loop.attrs):
        return None
    local, copy_in, reds, rows, cols, body, fold, back = _tile_parts(sliver)
    d, mr = local.dtype, dict(sliver.loop.attrs)["sliver"]
    lanes, nr = lanes_of(d.itemsize), local.size // mr
    if fold.mul is None or d not in (dtypes.float32, dtypes.float64) or nr % lanes:
        return Block(sliver.loop, sliver.body)
    b_val = next(
        (v for v in (fold.mul, fold.src) if any(cols.var in uses(x) for x in _needed(body, v))),
        None,
    )
    a_val = fold.src if b_val == fold.mul else fold.mul
    b_load = next((x for x in body if defines(x) == b_val), None)
    others = [x for x in body if x is not b_load]
    if not isinstance(b_load, Load) or b_load.guard or b_load.index.coeff(cols.var) != 1:
        return Block(sliver.loop, sliver.body)
    if any(cols.var in uses(x) for x in others) or _past_edge(b_load, cols, nr):
        return Block(sliver.loop, sliver.body)
    if any(_past_edge(x, rows, mr) for x in others if isinstance(x, Load)):
        return Block(sliver.loop, sliver.body)
    it, jt = Index.var(sliver.loop.var), cols.lo[0]
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
    deps = _deps(others, {rows.var})
    shared = [x for x in others if rows.var not in deps.get(defines(x), set())]
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
    return Block(sliver.loop, (local, *begin, *start, kernel, *end, *back))


def _past_edge(load: Load, along: Loop, width: int) -> bool:
    """Whether a load from the nest's own buffers that moves with ``along`` would run past
    its edge in the last tile: only a packed LOCAL (``t0``, ...) has whole slivers and panels."""
    ours = load.buf == "out" or load.buf.startswith("in")
    return ours and along.var in load.index.names and along.stop % width != 0
