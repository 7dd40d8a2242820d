"""The contraction schedule: passes that turn a matmul-shaped nest into the loops a BLAS runs.

A contraction (a matmul, a batched matmul, a convolution, any of their gradients) is a nest
``out[.., a, b] = fold over r of A(.., a, r) * B(.., r, b)``. As lowered, every product
loads both factors from wherever they live; a core does two FMAs of sixteen lanes a cycle
but only two or three loads, and an operand read with a large stride misses every cache.
GotoBLAS and BLIS ("Anatomy of high-performance matrix multiplication", Goto and van de
Geijn; "BLIS: a framework for rapidly instantiating BLAS functionality", Van Zee and van de
Geijn) keep an MR x NR tile of the output in vector registers, read its operands from
small packed copies that stay in L1 (a KC x NR panel) and L2 (an MC x KC block), and let
the tile's FMAs outnumber its loads. Four passes, in this order, do that to a nest (this
file recognizes and tiles; ``ir/c/block.py`` blocks, packs and vectorizes):

* ``tile_contraction`` recognizes the shape, puts the output loops outside the reduce
  loops, makes the fold an FMA (``acc + a*b`` rounded once, as every BLAS does) and marks
  the rows (``Role.ROWS``, tile MR) and columns (``Role.COLS``, tile NR) of the register
  tile: the loops the later passes look for, by role.
* ``block_contraction`` cuts the output into cache blocks of MC x NC cells (the tasks the
  threads share: ``Role.BLOCK``), the first reduce loop into blocks of KC, and each block
  into tiles of MR rows (a ``SLIVER``) by NR columns (a ``PANEL``). A tile folds into a
  LOCAL ``t[MR*NR]``, copied in from ``out`` (or started at the identity) before each
  reduce block and out again (through the nest's tail) after it.
* ``pack_operands`` computes the row factor of the fold into a LOCAL in sliver order
  (``[sliver][r][MR]``), once per cache block, and the column factor into a panel
  (``[r][NR]``), once per panel: both are then read at unit stride from the cache that
  holds them, and a prologue (a mask, a pad, a ReLU) is computed once, not once per use.
* ``vectorize_tile`` holds the tile in MR x NR/L vector registers of L lanes (the target's)
  while a reduce block runs: per reduce index NR/L vector loads of the panel, MR scalars
  of the sliver, and MR x NR/L vector FMAs.

A contraction with a small side gets tiles that fit it. The rows are cut into slivers of
equal height (20 rows are four slivers of 5, not four of 6 with 4 padded). A single row
(a decoded query times a weight: a GEMV) reads its column factor where it lies, each
element once, instead of packing all of it for one use: along a stride (``x @ W.T``'s
``W``) its tile is a vector's worth of scalar FMA chains, one register per column, the
chains interleaved (column ``c * n/8 + p`` of panel ``p``) so that each streams its own
stretch of ``W``'s rows, which the hardware prefetcher follows. Where
neither factor is unit-stride along an output (``h @ W.T`` for a batch of 20), the
narrower output is the columns: its small factor is packed, the weight read in place.

Every cell still folds its reduce indices in the order the nest gave them, one FMA each,
and is computed start to finish by one thread: the passes choose which cells are in flight
together and where their operands are read from, nothing else. So threaded equals serial
bit for bit, and the output of each pass runs in the interpreter as it prints. A pass
that finds the loops it needs changed by an earlier one (an unroll of the reduce loop)
leaves the nest as it is and says why in its notes (``apply_passes(strict=True)`` raises).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.c.target import Target
from ir.graph.dtypes import HALF
from ir.graph.ops import Op
from ir.loop.nest import Accum, Arith, Check, DefAcc, Kind, Load, Loop, LoopNest, Role, Store, walk
from ir.loop.passes import noted
from ir.loop.rewrite import chain, defines, extent, interleave, rebuild, tree_map, uses

OUTPUT, REDUCE = Kind.OUTPUT, Kind.REDUCE


def deps(items, loop_vars: set[str]) -> dict[str, set[str]]:
    """For each value, the loop variables it depends on (through values and addresses)."""
    out: dict[str, set[str]] = {}
    for ins in items:
        d: set[str] = set()
        for name in uses(ins):
            d |= {name} if name in loop_vars else out.get(name, set())
        if defines(ins) is not None:
            out[defines(ins)] = d
    return out


# ---- recognizing a contraction --------------------------------------------------------


def tile_contraction(nest: LoopNest, target: Target) -> LoopNest:
    items = [_tile_block(x, nest, target) if isinstance(x, Loop) else x for x in nest.body]
    why = [_unrecognized(x) for x, y in zip(nest.body, items) if isinstance(x, Loop) and x is y]
    return noted(nest, items, [w for w in why if w])


def _unrecognized(top: Loop) -> str:
    """Why the products a nest folds were not recognized as a contraction, where an earlier
    pass changed the loops a contraction has (one stepping by more than 1: an unroll);
    "" for a nest that simply is no contraction."""
    folds = [x for x in walk((top,)) if isinstance(x, Accum) and x.op == Op.ADD]
    made = {defines(x): x for x in walk((top,)) if isinstance(x, Arith)}
    if not any(x.mul or getattr(made.get(x.src), "op", None) == Op.MUL for x in folds):
        return ""
    odd = [lp for lp in walk((top,)) if isinstance(lp, Loop) and lp.step != 1]
    if not odd:
        return ""
    return (
        f"tile_contraction: the products folded under loop {top.var} are not tiled: loop "
        f"{odd[0].var} steps by {odd[0].step} (a contraction's loops step by 1)"
    )


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


def contraction(block: Loop):
    """Recognize a contraction; returns (outer, iA, reds, iB, body, fold, init, tail) or None.

    Two shapes qualify. Folding into memory: ``out* iA red+ iB`` with ``body`` ending in an
    ACCUM into ``out`` (``init`` is None: each cell starts from what the fill stored). Folding
    into a register: ``out* iA iB`` around DEFACC, a chain of reduce loops ending in an ACCUM
    into that register, then ``tail`` (casts, and the STORE of the total).
    """
    loops, inner = chain(block)
    if any(lp.start != 0 or lp.step != 1 for lp in loops):
        return None
    if inner and isinstance(inner[0], DefAcc) and len(inner) >= 3 and isinstance(inner[1], Loop):
        acc, red_block, tail = inner[0], inner[1], inner[2:]
        reds, body = chain(red_block)
        if any(isinstance(x, Loop) for x in body) or any(isinstance(x, Loop) for x in tail):
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
    if any(isinstance(x, Loop) for x in inner) or not inner:
        return None
    fold = inner[-1]
    if not isinstance(fold, Accum) or fold.index is None:
        return None
    kinds = [lp.kind for lp in loops]
    if len(loops) < 3 or kinds[-1] is not OUTPUT or kinds[-2] is not REDUCE:
        return None
    first_red = kinds.index(REDUCE)
    if first_red == 0 or any(k is not REDUCE for k in kinds[first_red:-1]):
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


def _folded(block: Loop):
    """(output loops, reduce loops, the fold's body) of a chain that folds products: into a
    register total (``DEFACC``, a chain of reduce loops, ..., ``STORE``) or into memory; or
    None."""
    loops, inner = chain(block)
    if len(inner) >= 3 and isinstance(inner[0], DefAcc) and isinstance(inner[1], Loop):
        return (loops, *chain(inner[1])) if isinstance(inner[-1], Store) else None
    if not inner or not isinstance(inner[-1], Accum) or inner[-1].index is None:
        return None
    return (
        [lp for lp in loops if lp.kind is OUTPUT],
        [lp for lp in loops if lp.kind is REDUCE],
        inner,
    )


def _outputs_first(block: Loop) -> Loop:
    """The output loops outside the reduce loops, arranged for a register block: the
    columns innermost (``_columns``; folding into memory, the innermost loop stays where
    it is a wide output), the rows next (``_row_last``).

    Each cell still meets the reduce loops in their own relative order, so what it folds,
    and in which order, is unchanged; only which cells are in flight together moves.
    """
    loops, inner, found = *chain(block), _folded(block)
    if found is None or any(isinstance(x, Loop) for x in found[2]):
        return block
    (outs, reds, body), last = found, loops[-1]
    loads, wide = [x for x in body if isinstance(x, Load)], [lp for lp in outs if extent(lp) >= 8]
    memory = not isinstance(inner[0], DefAcc)  # (a register's reduce loops are inside it)
    col = last if (last in wide and memory) or not wide else _columns(wide, loads)
    if col.kind is REDUCE or not (wide or memory) or any(lp.lo or lp.hi for lp in loops):
        return block
    others = [lp for lp in outs if lp is not col]
    return rebuild([*_row_last(others, col, loads), *(reds if memory else []), col], inner)


def _columns(wide: list[Loop], loads) -> Loop:
    """The column loop: the wide one most operands are unit-stride along; where none is
    (``x @ W.T``), the narrowest: its factor is the one packed across the reduce, and the
    other is read in place as scalars (a batch of 20 rows: a copy of x, not of W)."""

    def along(lp: Loop) -> int:
        return sum(abs(x.index.coeff(lp.var)) == 1 for x in loads)

    return max(wide, key=lambda lp: (along(lp), extent(lp) * (1 if along(lp) else -1)))


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


def _one_row(block: Loop) -> bool:
    """One output loop folding products of a value it moves by one only the reduce moves:
    a matmul of a single row (``x[r] * W[col, r]``, not the scaled sum ``x[r, col] * 2``),
    as a register total or into memory."""
    found = _folded(block)
    if found is None:
        return False
    cols, reds, body = found
    if len(cols) != 1 or any(isinstance(x, Loop) for x in body) or not isinstance(body[-1], Accum):
        return False
    mul = next((x for x in body if defines(x) == body[-1].src), None)
    if not isinstance(mul, Arith) or mul.op != Op.MUL:
        return False
    col = cols[0].var
    a, b = (deps(body, {col, *(lp.var for lp in reds)}).get(s, set()) for s in mul.srcs)
    return (col in a) != (col in b) and all(d - {col} for d in (a, b))


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


def _tile_block(block: Loop, nest: LoopNest, target: Target) -> Loop:
    if _one_row(block):  # a matmul of one row: tiled as a row block of one, so each cell
        # folds as a matmul's rows do (FMAs in order), however many rows there are
        tiled = _tile(Loop(f"{block.var}_row", 1, body=(block,)), nest, target)
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


def _tile(block: Loop, nest: LoopNest, target: Target) -> Loop | None:
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
    (mr, nr), m = tile_shape(acc.itemsize, extent(ib), target), extent(ia)
    if m == 0:
        return None  # no cell to tile (an empty batch)
    mr = -(-m // -(-m // mr))  # slivers of equal height: a few rows are not padded to a tile
    loads = [x for x in body if isinstance(x, Load) and ib.var in x.index.names]
    if read_once(m, outer, ()) and not any(abs(x.index.coeff(ib.var)) == 1 for x in loads):
        lanes = target.lanes(acc.itemsize)  # read in place along a stride: scalar chains,
        nr = lanes * max(1, target.fma_chains // lanes)  # enough to hide the FMA's latency
        # each chain a stream of rows of its own (a prefetcher follows one, not a few
        # lines of each row in turn)
        block = interleave(block, ib, nr) if extent(ib) % nr == 0 and not ib.lo + ib.hi else block
    loops, inner = chain(block)
    marks = {ia.var: (Role.ROWS, mr), ib.var: (Role.COLS, nr)}
    tagged = [
        replace(lp, role=marks[lp.var][0], tile=marks[lp.var][1:]) if lp.var in marks else lp
        for lp in loops
    ]
    return _fuse_multiply_add(rebuild(tagged, inner), init, nest)


def read_once(rows: int, outer, moved: tuple[str, ...]) -> bool:
    """Whether one tile reads each element of the contraction's column factor once: a
    single row (a decoded query times a weight), no loop around the tile but those that
    move the factor (``moved``: the names in its index)."""
    return rows == 1 and all(extent(lp) == 1 or lp.var in moved for lp in outer)


def _fuse_multiply_add(block: Loop, init, nest: LoopNest) -> Loop:
    """Fold ``acc + a*b`` of a tiled contraction as one FMA (rounded once), as BLAS does.

    It is written into the nest, so the printed nest, the interpreter and the C agree:
    the MUL that only feeds the fold goes, and the ACCUM names both factors.
    """
    acc_dtype = init.dtype if init is not None else nest.output.dtype
    if not acc_dtype.is_float or acc_dtype.itemsize < 4:
        return block

    def rule(b):  # an innermost loop's fold
        if not isinstance(b, Loop) or any(isinstance(x, Loop) for x in b.body):
            return b
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
        return replace(b, body=tuple(body))

    return tree_map((block,), rule)[0]
