"""Loop-nest passes that make a nest fast on a CPU. Each is pure and keeps every cell's order.

They only annotate or regroup loops; what each output cell folds, and in which order, is
the order the nest already had, so the interpreter's answer for the annotated nest is the
answer the C code gives, threaded or not.

* ``tile_contraction``: a nest shaped like a matmul (output loops, then reduce loops, then
  one output loop innermost, folding into memory) is marked ``tile``: the renderer keeps an
  MR x NR block of output cells in registers while it walks the reduce loops, and stages
  the operand that does not depend on the rows in a contiguous panel. Each cell still
  folds its reduce axis start to finish in order.
* ``parallelize``: the leading output loops of each top-level loop chain (the dims the
  written cells are indexed by) are marked ``parallel=n``: an OpenMP team splits those n
  fused loops. A chain whose writes have a data-dependent address (a scatter's colliding
  adds) or whose outermost loop is a reduce stays serial. Tiny nests stay serial too:
  waking a team costs more than they do.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.dtypes import HALF
from ir.loop import (
    Accum,
    Block,
    Check,
    DefAcc,
    Load,
    Loop,
    LoopNest,
    Store,
    flatten,
    to_tree,
    walk,
)
from ir.ops import Op

MIN_PARALLEL_WORK = 1 << 14  # iterations below which a team costs more than it saves
MIN_PARALLEL_CELLS = 16  # fuse leading loops until the team has this many pieces


def _attr(loop: Loop, **kw) -> Loop:
    attrs = dict(loop.attrs)
    attrs.update(kw)
    return replace(loop, attrs=tuple(attrs.items()))


def _chain(block: Block) -> tuple[list[Loop], tuple]:
    loops, inner = [block.loop], block.body
    while len(inner) == 1 and isinstance(inner[0], Block):
        loops.append(inner[0].loop)
        inner = inner[0].body
    return loops, inner


def _rebuild(loops: list[Loop], inner) -> Block:
    out = Block(loops[-1], tuple(inner))
    for loop in reversed(loops[:-1]):
        out = Block(loop, (out,))
    return out


def _writes(items):
    return [
        ins for ins in walk(items) if isinstance(ins, Store) or isinstance(ins, Accum) and ins.index
    ]


def _loop_vars(items) -> set[str]:
    out = set()
    for item in items:
        if isinstance(item, Block):
            out.add(item.loop.var)
            out |= _loop_vars(item.body)
    return out


def _extent(loop: Loop) -> int:
    return len(range(loop.start, loop.stop, loop.step))


def _work(items) -> int:
    """Roughly how many innermost iterations a tree runs."""
    total = 0
    for item in items:
        if isinstance(item, Block):
            total += _extent(item.loop) * max(1, _work(item.body))
    return total


# ---- parallel loops -----------------------------------------------------------------


def parallelize(nest: LoopNest) -> LoopNest:
    items = to_tree(nest.body)
    out = []
    for item in items:
        out.append(_parallel_block(item) if isinstance(item, Block) else item)
    return replace(nest, body=flatten(out))


def _parallel_block(block: Block) -> Block:
    loops, inner = _chain(block)
    if any(dict(lp.attrs).get("tile") for lp in loops):
        return block  # the tiled renderer runs its own team
    writes = _writes((block,))
    if not writes or _work((block,)) < MIN_PARALLEL_WORK:
        return block
    inner_vars = _loop_vars(inner) | {lp.var for lp in loops}
    for w in writes:
        if any(n not in inner_vars for n in w.index.names):
            return block  # a data-dependent address: colliding writes stay serial
    n, cells = 0, 1
    for loop in loops:
        if not all(loop.var in w.index.names for w in writes):
            break  # a reduce loop: cells inside it are revisited
        n += 1
        cells *= _extent(loop)
        if cells >= MIN_PARALLEL_CELLS:
            break
    if n == 0 or cells < 2:
        return block
    loops = [_attr(loops[0], parallel=n), *loops[1:]]
    return _rebuild(loops, inner)


# ---- register-tiled contractions ----------------------------------------------------


def tile_contraction(nest: LoopNest) -> LoopNest:
    items = to_tree(nest.body)
    out = []
    for item in items:
        out.append(_tile_block(item, nest) if isinstance(item, Block) else item)
    return replace(nest, body=flatten(out))


def tile_shape(itemsize: int) -> tuple[int, int]:
    """Rows and columns of the register block: two vectors of 64 bytes per row."""
    return 4, max(8, 128 // itemsize)


def contraction(block: Block):
    """Recognize a contraction; returns (outer, iA, reds, iB, body, fold, init, tail) or None.

    Two shapes qualify. Folding into memory: ``out* iA red+ iB`` with ``body`` ending in an
    ACCUM into ``out`` (``init`` is None: each cell starts from what the fill stored). Folding
    into a register: ``out* iA iB`` around DEFACC, a chain of reduce loops ending in an ACCUM
    into that register, then ``tail`` (casts, and the STORE of the total).
    """
    loops, inner = _chain(block)
    if any(lp.start != 0 or lp.step != 1 for lp in loops):
        return None
    if inner and isinstance(inner[0], DefAcc) and len(inner) >= 3 and isinstance(inner[1], Block):
        acc, red_block, tail = inner[0], inner[1], inner[2:]
        reds, body = _chain(red_block)
        if any(isinstance(x, Block) for x in body) or any(isinstance(x, Block) for x in tail):
            return None
        if any(lp.start != 0 or lp.step != 1 for lp in reds) or len(loops) < 2:
            return None
        fold = body[-1] if body else None
        if not isinstance(fold, Accum) or fold.index is not None or fold.dst != acc.out:
            return None
        if not isinstance(tail[-1], Store) or any(isinstance(x, Store | Accum) for x in tail[:-1]):
            return None
        names = set(tail[-1].index.names)
        if not {loops[-1].var, loops[-2].var} <= names:
            return None
        return loops[:-2], loops[-2], reds, loops[-1], body[:-1], fold, acc, tail
    if any(isinstance(x, Block) for x in inner) or not inner:
        return None
    fold = inner[-1]
    if not isinstance(fold, Accum) or fold.index is None:
        return None
    written = set(fold.index.names)
    kinds = ["out" if lp.var in written else "red" for lp in loops]
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


def _tile_block(block: Block, nest: LoopNest) -> Block:
    found = contraction(block)
    if found is None:
        return block
    outer, ia, reds, ib, body, fold, init, tail = found
    if fold.op not in (Op.ADD, Op.MAX) or nest.output.dtype in HALF and init is None:
        return block
    if any(isinstance(x, Store | Accum | Check) for x in body) or any(
        isinstance(x, Load) and x.guard for x in body
    ):
        return block  # gathers and masked operands keep the plain form
    k = math.prod(_extent(lp) for lp in reds)
    if _extent(ib) < 8 or _extent(ia) < 2 or k < 4:
        return block
    mr, nr = tile_shape(
        4 if init is not None and init.dtype.itemsize <= 4 else nest.output.dtype.itemsize
    )
    loops, inner = _chain(block)
    tagged = [
        _attr(lp, tile=mr) if lp is ia else _attr(lp, tile=nr) if lp is ib else lp for lp in loops
    ]
    cells = math.prod(_extent(lp) for lp in (*outer, ia, ib))
    if cells * k >= MIN_PARALLEL_WORK:
        tagged[0] = _attr(tagged[0], parallel=len(outer) + 1)
    return _rebuild(tagged, inner)


C_PASSES = [tile_contraction, parallelize]
