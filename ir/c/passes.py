"""Loop-nest passes that make a nest fast on a CPU. Each is pure and keeps every cell's order.

They only annotate or regroup loops; what each output cell folds, and in which order, is
the order the nest already had, so the interpreter's answer for the annotated nest is the
answer the C code gives, threaded or not.

* ``tile_contraction``, ``block_contraction``, ``pack_operands``, ``vectorize_tile``: a
  nest shaped like a matmul is scheduled as a BLAS runs it (``ir/c/tile.py``, ``block.py``).
* ``parallelize``: the leading output loops (``Kind.OUTPUT``) of each top-level loop chain
  are marked ``parallel=n``: an OpenMP team splits those n fused loops. A chain whose
  writes have a data-dependent address (a scatter's colliding adds), or whose outermost
  loop is a reduce or a scan, stays serial, and the nest says why (a note). Tiny nests stay
  serial too, without a note: waking a team costs more than they do.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache, partial, update_wrapper

from ir.c import block
from ir.c.block import block_contraction, pack_operands, vectorize_tile
from ir.c.target import Target
from ir.c.tile import tile_contraction
from ir.graph.dtypes import bool_
from ir.graph.ops import Op
from ir.graph.semantics import LANE_BYTES, SUM_BLOCK
from ir.loop.nest import (
    Accum,
    Arith,
    Check,
    Const,
    DefAcc,
    Index,
    Kind,
    Load,
    Loop,
    LoopNest,
    Mask,
    PairwiseFold,
    Range,
    Role,
    Sort,
    Store,
    walk,
)
from ir.loop.passes import DEFAULT_PASSES, Pass, drop_dead_values, noted, renumber
from ir.loop.rewrite import (
    Fresh,
    chain,
    defines,
    extent,
    indices,
    instructions,
    rebuild,
    rename,
    substitute,
    tree_map,
)

MIN_PARALLEL_CELLS = 16  # fuse leading loops until the team has this many pieces


def _work(items) -> int:
    """Roughly how many innermost iterations a tree runs (a SORT of n: n log2(n))."""
    total = 0
    for item in items:
        if isinstance(item, Loop):
            total += extent(item) * max(1, _work(item.body))
        elif isinstance(item, Sort):
            total += item.n * max(1, item.n.bit_length())
    return total


# ---- parallel loops -----------------------------------------------------------------


def parallelize(nest: LoopNest) -> LoopNest:
    tops = [(x, _parallel_top(x) if isinstance(x, Loop) else x) for x in nest.body]
    why = [f"parallelize: {x.var} stays on one thread: {y}" for x, y in tops if isinstance(y, str)]
    return noted(nest, [x if isinstance(y, str) else y for x, y in tops], why)


def _parallel_top(top: Loop) -> Loop | str:
    loops, inner = chain(top)
    if any(lp.role or lp.parallel for lp in loops):
        return top  # a scheduled contraction and lane tops have their own team
    writes = [
        x
        for x in instructions((top,))
        if isinstance(x, Store | Sort) or isinstance(x, Accum) and x.index
    ]
    if not writes or _work((top,)) < block.MIN_PARALLEL_WORK:
        return top
    inner_vars = {x.var for x in walk((top,)) if isinstance(x, Loop)}
    for w in writes:
        if any(n not in inner_vars for n in w.index.names):
            return "a data-dependent address (colliding writes stay serial)"
    n, cells = 0, 1
    for loop in loops:
        if loop.kind is not Kind.OUTPUT:
            break  # a reduce or scan loop: its cells are revisited, or carried
        n += 1
        cells *= extent(loop)
        if cells >= MIN_PARALLEL_CELLS:
            break
    if n == 0 or cells < 2:
        return "no output loop of two cells or more outermost"
    loops = [replace(loops[0], parallel=n), *loops[1:]]
    return rebuild(loops, inner)


# ---- lane-wise reductions ------------------------------------------------------------

BLOCK = SUM_BLOCK  # elements per block of a long full reduce: the unit the team splits


def lane_reduce(nest: LoopNest) -> LoopNest:
    """Fold a float reduce into lanes of partial totals, then combine them by a FOLD.

    The grouping is ``ir/graph/semantics.ordered_sum``'s (the one owner of a sum's order,
    which the numpy device evaluates): element ``r`` of the last axis to lane ``r % L``,
    each lane folding in order, a long full reduce cut into blocks of whole rows of its
    outermost axis (the units a team shares), the lanes and blocks added by FOLD's tree.
    It depends only on the logical shape, never on the thread count, the strides, or the
    pieces a pad or a concatenation cut a loop into: a contiguous reduce runs as one loop
    only where that gives the same lanes (a last axis of whole vectors). A reduce whose
    last axis is kept folds in order, unlaned, as its fill-then-add form in memory does;
    so does a contraction's FMA (``ir/c/tile.py``).
    """
    fresh = Fresh(nest.body)
    fresh.last = f"r{max((d for d, e in enumerate(nest.loop_shape) if e > 1), default=0)}"
    fresh.why = []  # totals an earlier pass left unlaned (an unroll of their loop)
    return noted(nest, _lanes(nest.body, True, fresh), fresh.why)


def _lanes(items, top: bool, fresh) -> list:
    out, i = [], 0
    while i < len(items):
        it = items[i]
        if isinstance(it, DefAcc) and not it.shape:
            j = i + 1  # the loop folding into it, or the pieces of one that a pad cut
            while j < len(items) and isinstance(items[j], Loop) and _folds_into(items[j], it.out):
                j += 1
            later = any(_folds_into(x, it.out) for x in items[j:])
            new = None if later or j == i + 1 else _lane_group(it, items[i + 1 : j], top, fresh)
            if new is not None:
                out += new
                i = j
                continue
        if isinstance(it, Loop) and it.role != Role.BLOCK:  # a tiled contraction: as it is
            it = replace(it, body=tuple(_lanes(it.body, False, fresh)))
        out.append(it)
        i += 1
    return out


def _folds_into(item, name: str) -> bool:
    return any(isinstance(x, Accum) and x.dst == name for x in instructions((item,)))


def _merge_inner(reds: list[Loop], body: tuple) -> tuple[list[Loop], tuple]:
    """Fuse the two innermost reduce loops (each from 0, by 1) while every index walks them
    as one."""
    while len(reds) >= 2:
        a, b = reds[-2], reds[-1]
        idxs = [idx for ins in body for idx in indices(ins)]
        if any(idx.coeff(a.var) != b.stop * idx.coeff(b.var) for idx in idxs):
            break
        body = tuple(substitute(ins, {a.var: Index((), 0)}) for ins in body)
        reds = [*reds[:-2], replace(b, stop=a.stop * b.stop)]
    return reds, body


def _lane_group(acc: DefAcc, blocks: list[Loop], top: bool, fresh):
    """Lanes for the reduce loops after ``acc``, given whole or as the consecutive pieces
    pads cut them into (a reduce over a concatenation): element ``r`` of the innermost
    reduce axis goes to lane ``r % L``, and block ``k`` holds rows ``k*K .. k*K+K-1`` of the
    outermost, however the loops lie in memory, so every layout of one array folds alike."""
    levels, lanes = _levels(blocks, acc.out), LANE_BYTES // acc.dtype.itemsize
    if not acc.dtype.is_float or acc.dtype.itemsize < 4 or not levels:
        odd = [lp for lp in walk(blocks) if isinstance(lp, Loop) and lp.step > 1 and not lp.role]
        if acc.dtype.is_float and odd and levels is None:
            fresh.why.append(
                f"lane_reduce: the total {acc.out} is not laned, so its sum is not grouped as"
                f" the numpy device's: loop {odd[0].var} steps by {odd[0].step}"
            )
        return None
    n, w0 = math.prod(e for _, e in levels), math.prod(e for _, e in levels[1:])
    if levels[-1][0] != fresh.last or n < 2 * lanes:  # a kept axis last: in order, unlaned
        return None
    size = w0 * max(1, BLOCK // w0)  # elements per block: whole rows of the outermost axis
    reds, body = chain(blocks[0])  # one piece per level, lanes crossing rows as in one loop:
    if len(blocks) == 1 and len(reds) == len(levels) and levels[-1][1] % lanes == 0:
        blocks = [rebuild(*_merge_inner(reds, body))]
        levels = _levels(blocks, acc.out)
    blocked = top and n >= 4 * BLOCK
    team = int(n >= block.MIN_PARALLEL_WORK)  # a sum too small for a team: the calling thread
    shape = (-(-n // size), lanes) if blocked else (lanes,)
    lv, var, k = fresh("l"), levels[-1][0], size // w0 if len(levels) > 1 else size

    def rows(items, depth: int, lane0, cut=None) -> list:
        """The loops of ``items`` at ``depth`` (cut to ``cut``), laned from ``lane0`` on."""
        out = []
        for b in items:
            lo, hi = cut or (b.start, b.stop)
            if lo < hi and depth == len(levels) - 1:
                out += _tail(var, lo, hi, lanes, lv, _copier(b.body, fresh), lane0)
            elif lo < hi:
                inner = tuple(rows(b.body, depth + 1, lane0))
                out.append(replace(b, start=lo, stop=hi, body=inner))
        return out

    loops = [] if blocked else rows(blocks, 0, 0)
    for b in blocks if blocked else ():  # block k: rows k*K .. of the outermost axis
        r = b
        first, last = -(-r.start // k), r.stop // k  # the blocks it holds whole
        if first > last:  # inside one block
            loops += rows([b], 0, last * lanes)
            continue
        loops += rows([b], 0, (first - 1) * lanes, (r.start, first * k))
        if last > first:  # whole blocks, shared by a team
            bv = Index.var(bn := fresh("b"))
            at = {r.var: bv * k + Index.var(r.var)}
            body = substitute(tuple(rows([b], 0, bv * lanes, (0, k))), at)
            loops.append(Loop(bn, last, first, parallel=team, body=body))
        loops += rows([b], 0, last * lanes, (last * k, r.stop))
    op = next(x.op for x in instructions(blocks) if isinstance(x, Accum))
    return [replace(acc, shape=shape), *loops, PairwiseFold(acc.out, op, shape)]


def _levels(items, name: str, depth: int = 0, into: list | None = None):
    """``[(var, extent)]`` of the reduce loops folding into ``name``, outermost first, where
    each level is one variable's loop cut into consecutive pieces from 0 and only the
    innermost holds work, then the fold; None for anything else."""
    into = [] if into is None else into
    if not items or not all(isinstance(b, Loop) for b in items):
        return None
    var, starts = items[0].var, [0] + [b.stop for b in items]
    for b, at in zip(items, starts):
        if (b.var, b.start, b.step, b.lo, b.hi) != (var, at, 1, (), ()):
            return None
    into += [(var, starts[-1])] if len(into) == depth else []
    if into[depth] != (var, starts[-1]):
        return None
    for b in items:
        *work, fold = b.body or (None,)
        if any(isinstance(x, Loop) for x in b.body):
            if _levels(b.body, name, depth + 1, into) is None:
                return None
            continue
        if any(isinstance(x, Store | Accum) for x in work) or not isinstance(fold, Accum):
            return None
        into[depth + 1 :] = into[depth + 1 :] or [None]  # a leaf: no level below it
        # a contraction's FMA (``mul``) keeps each cell's plain order
        if fold.dst != name or fold.index or fold.lane or fold.mul or into[depth + 1] is not None:
            return None
    return into if depth else into[:-1]


def _copier(body: tuple, fresh):
    """A copy of the innermost ``body`` (work, then its fold) at an index and a lane."""
    work, fold = body[:-1], body[-1]

    def copy(at: dict[str, Index], lane: Index) -> tuple:
        names = {defines(x): fresh("v") for x in work if defines(x)}
        moved = tuple(rename(substitute(x, at), names) for x in work)
        src = names.get(fold.src, fold.src)
        mul = None if fold.mul is None else names.get(fold.mul, fold.mul)
        return (*moved, replace(fold, src=src, lane=lane, mul=mul))

    return copy


def _tail(var: str, start: int, stop: int, lanes: int, lv: str, copy, lane0):
    """Lanes over [start, stop), element ``r`` to lane ``lane0 + r % lanes``: the elements
    before the first multiple of ``lanes``, whole groups of ``lanes``, then the rest."""
    head = min(stop, -(-start // lanes) * lanes)
    whole = head + (stop - head) // lanes * lanes
    out = []
    if head > start:
        body = copy({}, Index.var(var) - start // lanes * lanes + lane0)
        out.append(Loop(var, head, start=start, body=body))
    if whole > head:
        body = copy({var: Index.var(var) + Index.var(lv)}, Index.var(lv) + lane0)
        inner = Loop(lv, lanes, role=Role.LANES, body=body)
        out.append(Loop(var, whole, start=head, step=lanes, kind=Kind.REDUCE, body=(inner,)))
    if stop > whole:
        body = copy({}, Index.var(var) - whole + lane0)
        out.append(Loop(var, stop, start=whole, body=body))
    return out


# ---- pad-mask splitting -------------------------------------------------------------

MAX_SYMBOLIC_SPLITS = 2  # each splits a piece in three; more would multiply the code


def split_pad_masks(nest: LoopNest) -> LoopNest:
    """Cut an innermost loop where a pad predicate on its variable changes value.

    A predicate ``lo <= c*x + rest < hi`` (c = +-1) holds on one interval of ``x``. Cutting
    the loop at the interval's ends leaves pieces where it is decided: a guarded load
    becomes a plain load or a literal 0, a MASK becomes a constant (and a WHERE on it picks
    its side: a piece of a concatenation computes that piece alone), and nothing per
    element stops the compiler from vectorizing. Pieces run in increasing ``x``, so every
    iteration happens in its original order and the result is bit-identical. Bounds that
    depend on outer loop variables become the loops' Index bounds. An outer loop of
    elementwise work is cut the same way at constant bounds (``_split_outer``).
    """
    return drop_dead_values(replace(nest, body=tree_map(nest.body, _split)))


def _split(it):
    if not isinstance(it, Loop):
        return it
    if not any(isinstance(x, Loop) for x in it.body):
        return tuple(_split_loop(it))
    pieces = _split_outer(it)
    # each cut copies the body below it: nested cuts multiply (17 nested loops of 2, one
    # pad each, would make 2**17 copies), so the copies stay within a bound
    grown = sum(len(list(instructions(b.body))) for b in pieces)
    return tuple(pieces) if grown <= MAX_GROWTH * len(list(instructions(it.body))) else it


MAX_OUTER_PIECES = 5  # an outer loop is cut at most this often (each piece copies its body)
MAX_GROWTH = 32  # a loop's cut pieces hold at most this many times its instructions


def _split_outer(block: Loop) -> list:
    """Cut a loop around other loops where a pad predicate on its variable changes value.

    A pad along an outer dim (``1 <= i2 < 33`` of a padded image's rows) guards every load
    of the inner loop; the inner loop cannot settle it, and gcc will not vectorize a loop
    whose loads are masked by a condition it does not vary. Only elementwise work is cut
    (nothing below folds: every cell is computed on its own, so no order can change), and
    only at constant cuts.
    """
    loop, x = block, block.var
    if loop.step != 1 or loop.lo or loop.hi or loop.role or loop.parallel:
        return [block]
    body = list(instructions(block.body))
    if any(isinstance(i, Accum | DefAcc | PairwiseFold | Check) for i in body):
        return [block]
    preds = _preds_on(body, x)
    if not preds:
        return [block]
    bounds = [_interval(p, x) for p in preds]
    if any(b is None or b[0].names or b[1].names for b in bounds):
        return [block]  # a bound that moves with another loop: the inner cut's business
    cuts = sorted({b.const for pair in bounds for b in pair} | {loop.start, loop.stop})
    cuts = [c for c in cuts if loop.start <= c <= loop.stop]
    if len(cuts) - 1 > MAX_OUTER_PIECES:
        return [block]
    out = []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        known = {p: lo.const <= a and b <= hi.const for p, (lo, hi) in zip(preds, bounds)}
        names = {defines(i): f"{defines(i)}_o{k}" for i in body if defines(i)}
        settled = tree_map(block.body, partial(_settle, known=known, truth={}))
        out.append(replace(loop, start=a, stop=b, body=rename(settled, names)))
    return out


def _preds_on(items, x: str) -> list[Range]:
    """The distinct pad predicates of ``items`` that move with loop variable ``x``."""
    ps = (p for ins in items for p in getattr(ins, "guard", ()) + getattr(ins, "preds", ()))
    return list(dict.fromkeys(p for p in ps if p.index.coeff(x)))


def _interval(p: Range, x: str):
    """(L, H) as Index bounds such that p holds exactly for L <= x < H, or None."""
    c = p.index.coeff(x)
    rest = p.index + Index.var(x) * -c
    if c == 1:
        return Index((), p.lo) - rest, Index((), p.hi) - rest
    if c == -1:
        return rest - (p.hi - 1), rest - (p.lo - 1)
    return None


def _split_loop(block: Loop) -> list:
    loop, x = block, block.var
    if loop.step != 1 or loop.lo or loop.hi or extent(loop) < 8 or loop.role or loop.parallel:
        return [block]
    preds = _preds_on(block.body, x)
    if not preds or any(_interval(p, x) is None for p in preds):
        return [block]
    const = [p for p in preds if set(_interval(p, x)[0].names) == set()]
    symbolic = [p for p in preds if p not in const]
    if len(symbolic) > MAX_SYMBOLIC_SPLITS:
        return [block]
    cuts = sorted({b.const for p in const for b in _interval(p, x)} | {loop.start, loop.stop})
    cuts = [c for c in cuts if loop.start <= c <= loop.stop]
    pieces = []
    for a, b in zip(cuts, cuts[1:]):
        known = {p: _interval(p, x)[0].const <= a and b <= _interval(p, x)[1].const for p in const}
        body = tuple(map(partial(_settle, known=known, truth={}), block.body))
        pieces += _split_symbolic(replace(loop, start=a, stop=b), body, symbolic, x)
    # each piece defines its own values (renumber tidies the names afterwards)
    return [
        replace(p, body=rename(p.body, {d: f"{d}_s{k}" for d in map(defines, p.body) if d}))
        for k, p in enumerate(pieces)
    ]


def _split_symbolic(loop: Loop, body: tuple, preds: list, x: str) -> list:
    if not preds:
        return [replace(loop, body=body)]
    p, rest = preds[0], preds[1:]
    lo, hi = _interval(p, x)
    out = []
    for piece, holds in (
        (replace(loop, hi=(*loop.hi, lo)), False),
        (replace(loop, lo=(*loop.lo, lo), hi=(*loop.hi, hi)), True),
        (replace(loop, lo=(*loop.lo, hi)), False),
    ):
        settled = tuple(map(partial(_settle, known={p: holds}, truth={}), body))
        out += _split_symbolic(piece, settled, rest, x)
    return out


def _settle(ins, known: dict, truth: dict):
    """Drop predicates known to hold; a load or mask with one known to fail is a constant;
    a WHERE on a constant (``truth``: the bool constants met so far) picks that side for
    both, so what only the other side reads is dead (``drop_dead_values``): each piece of a
    concatenation computes its own piece alone."""
    if isinstance(ins, Load) and any(p in known for p in ins.guard):
        if any(known.get(p) is False for p in ins.guard):
            return Const(ins.out, 0 if not ins.dtype.is_float else 0.0, ins.dtype)
        return replace(ins, guard=tuple(p for p in ins.guard if p not in known))
    if isinstance(ins, Mask) and any(p in known for p in ins.preds):
        left = tuple(p for p in ins.preds if p not in known)
        fails = any(known.get(p) is False for p in ins.preds)
        ins = replace(ins, preds=left) if left and not fails else Const(ins.out, not fails, bool_)
    if isinstance(ins, Const) and ins.dtype == bool_ and ins.given is None:
        truth[ins.out] = ins.value
    if isinstance(ins, Arith) and ins.op == Op.WHERE and ins.srcs[0] in truth:
        side = ins.srcs[1] if truth[ins.srcs[0]] else ins.srcs[2]
        truth.update({ins.out: truth[side]} if side in truth else {})  # (a mask of masks)
        return replace(ins, srcs=(ins.srcs[0], side, side))
    return ins


C_PASSES = [
    split_pad_masks,
    tile_contraction,
    block_contraction,
    pack_operands,
    vectorize_tile,
    lane_reduce,
    parallelize,
    renumber,
]


def c_passes(target: Target) -> list[Pass]:
    """The c device's passes: the default list, then the C ones, the contraction's tuned
    for ``target``. The same objects for the same target, so two lists of one target
    compare equal."""
    return list(_tuned(target))


TUNED = (tile_contraction, block_contraction, vectorize_tile)  # they take ``target=``


@cache
def _tuned(target: Target) -> tuple:
    bound = {p: update_wrapper(partial(p, target=target), p) for p in TUNED}
    return (*DEFAULT_PASSES, *(bound.get(p, p) for p in C_PASSES))


def default_passes(passes) -> bool:
    """Whether ``passes`` are the c device's, for whichever target."""
    return [getattr(p, "func", p) for p in passes] == [*DEFAULT_PASSES, *C_PASSES]
