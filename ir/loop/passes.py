"""Loop-nest passes: pure functions from a LoopNest to a LoopNest, run in a list.

A pass takes a nest and returns a new one; it keeps no state and changes nothing it was
given (every IR value is frozen, so it could not if it tried). ``apply_passes`` runs a
list of them in order and checks each result with ``loop.verify``, so a broken pass is
reported by name at the instruction it got wrong. To add a pass, write the function and
pass ``[*DEFAULT_PASSES, my_pass]`` wherever passes are taken (docs/passes.md).

The default list:

* ``loop_order``: in each perfect chain of loops, the loop whose variable is stride-1 in
  the accesses that move the most bytes goes innermost, the others keep their order. A
  reduce loop (``Kind.REDUCE``: it folds into cells it revisits, a reduce axis or a
  scatter's colliding rows) never passes another, so every total is
  folded in the order the kernel's dims give. Where a reduce loop ends up innermost, the
  output loops move outside all reduce loops (a bias gradient's channels outside its
  batch), so each total can be kept in a register. A reduce over the kernel's last dim
  stays innermost whatever the strides (but a contraction's), so a layout never changes
  whether its total is laned (``ir/c/passes.lane_reduce``) or folded in memory.
* ``reduce_placement``: a reduce lowered as "fill with the identity, then ACCUM into the
  output" whose reduce loops have ended up innermost keeps its total in a register
  instead (DEFACC, ACCUM into it, one STORE). With output loops inside a reduce loop the
  fill + ACCUM form stays, since the running totals then outlive the inner loop.
* ``drop_unit_loops``: a loop of one iteration goes; its variable becomes that constant.
* ``drop_dead_values``: a value nothing reads is not computed.
* ``renumber``: values and accumulators renamed in order of definition (v0, v1, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ir.loop.nest import (
    Accum,
    Arith,
    Const,
    DefAcc,
    Index,
    Kind,
    Load,
    Local,
    Loop,
    LoopNest,
    Mask,
    Store,
    walk,
)
from ir.loop.rewrite import (
    Fresh,
    accesses,
    chain,
    defines,
    instructions,
    rebuild,
    rename,
    substitute,
    tree_map,
    uses,
    verify,
)
from ir.loop.rewrite import (
    extent as extent_of,
)

Pass = Callable[[LoopNest], LoopNest]


# ---- loop order ---------------------------------------------------------------------


def loop_order(nest: LoopNest) -> LoopNest:
    """Innermost loop = the variable that is stride-1 in the accesses moving the most bytes."""
    size = {f"in{i}": s.dtype.itemsize for i, s in enumerate(nest.inputs)}
    size["out"] = nest.output.dtype.itemsize
    dims = [d for d, e in enumerate(nest.loop_shape) if e > 1]
    last = f"r{dims[-1]}" if dims and nest.kind in ("SUM", "MAX") else None
    return replace(nest, body=_order(nest.body, size, last))


def _order(items, size: dict[str, int], last: str | None = None) -> tuple:
    return tuple(_order_chain(x, size, last) if isinstance(x, Loop) else x for x in items)


def _order_chain(block: Loop, size: dict[str, int], last: str | None) -> Loop:
    loops, inner = chain(block)
    inner = _order(inner, size, last)
    folding = [j for j, loop in enumerate(loops) if loop.kind is not Kind.OUTPUT]
    # a folding loop may go innermost only if no other folding loop is inside it already
    allowed = [j for j in range(len(loops)) if j not in folding or j == max(folding)]
    extent = {x.var: extent_of(x) for x in walk((loops[0],)) if isinstance(x, Loop)}

    def stride_one(var: str) -> int:
        """Bytes the accesses that walk ``var`` at stride 1 touch over the whole chain.

        A per-row value read beside a big row-major input (``(x + m).sum(-1)``) is stride-1
        along the rows, but it is the big input that must stream: weighing each access by
        its footprint, not counting buffers, keeps the reduce axis innermost there.
        """
        seen = {
            (b, idx)
            for ins in instructions(inner)
            for b, idx in accesses(ins)
            if abs(idx.coeff(var)) == 1
        }
        total = 0
        for b, idx in seen:
            cells = 1
            for name in set(idx.names):
                cells *= extent.get(name, 1)
            total += cells * size.get(b, 1)
        return total

    best = max(allowed, key=lambda j: (stride_one(loops[j].var), j))
    kept = {lp.var for lp in loops if lp.kind is Kind.OUTPUT}
    made = {defines(x) for x in instructions(inner)}  # a gathered index moves with every loop
    loads = [set(x.index.names) for x in instructions(inner) if isinstance(x, Load)]
    if loops[-1].var == last and all(kept <= names or names & made for names in loads):
        best = len(loops) - 1  # a reduce over the last axis keeps its lanes, whatever the
        # strides: its bits follow the logical order (a matmul's broadcast loads excepted)
    loops = loops[:best] + loops[best + 1 :] + [loops[best]]
    if loops[-1].kind is not Kind.OUTPUT:
        # a reduce innermost: the output loops go outside every reduce loop, so each
        # cell's total lives in a register (reduce_placement) and not in memory, whose
        # every fold waits on the store before it. Each cell still meets the reduce
        # loops in their own order.
        loops = sorted(loops, key=lambda lp: lp.kind is not Kind.OUTPUT)  # (stable)
    return rebuild(loops, inner)


# ---- reduce placement ---------------------------------------------------------------


def reduce_placement(nest: LoopNest) -> LoopNest:
    """Fill + ACCUM-into-memory becomes a register accumulator where the reduce is innermost."""
    items, fresh, out, i = nest.body, Fresh(nest.body), [], 0
    while i < len(items):
        new, used = _fill_then_fold(items, i, fresh) or ((items[i],), 1)
        out += new
        i += used
    return replace(nest, body=tuple(out))


def _fill_then_fold(items, i: int, fresh):
    """Match a fill nest at ``items[i]`` and the nest folding into it; rewrite both."""
    if isinstance(items[i], Loop):
        fill_loops, fill = chain(items[i])
        used = 1
    else:
        fill_loops, fill, used = [], tuple(items[i : i + 2]), 2
    if len(fill) != 2 or not isinstance(fill[0], Const) or not isinstance(fill[1], Store):
        return None
    const, store = fill
    if const.given is not None:  # a value given at run time is no identity to start from
        return None
    if store.src != const.out or i + used >= len(items) or not isinstance(items[i + used], Loop):
        return None
    loops, inner = chain(items[i + used])
    last = inner[-1]
    if not isinstance(last, Accum) or last.index is None:
        return None
    if (last.dst, last.index) != (store.buf, store.index) or any(
        isinstance(x, Loop) for x in inner
    ):
        return None
    if any(b == store.buf for ins in inner[:-1] for b, _ in accesses(ins)):
        return None
    keep = {loop.var: loop for loop in fill_loops}
    outer = loops[: len(keep)]
    bare = [replace(lp, body=()) for lp in outer]  # the loops, whatever their bodies
    if len(bare) < len(keep) or bare != [
        replace(keep[lp.var], body=()) if lp.var in keep else None for lp in outer
    ]:
        return None  # an output loop sits inside a reduce loop: the totals must live in memory
    if not set(store.index.names) <= set(keep):
        return None
    acc = fresh("acc")
    body = inner[:-1] + (Accum(last.op, acc, last.src, row=last.row),)
    reduce = (rebuild(loops[len(keep) :], body),) if len(loops) > len(keep) else body
    start = DefAcc(acc, const.value, const.dtype, row=const.row)
    new = (start, *reduce, Store(store.buf, store.index, acc, row=store.row))
    return ((rebuild(outer, new),) if outer else new), used + 1


# ---- tidying ------------------------------------------------------------------------


def drop_unit_loops(nest: LoopNest) -> LoopNest:
    """A loop of one iteration is replaced by its body with the variable set to its start."""

    def rule(x):
        if isinstance(x, Loop) and len(range(x.start, x.stop, x.step)) == 1:
            return substitute(x.body, {x.var: Index((), x.start)})
        return x

    return replace(nest, body=tree_map(nest.body, rule))


def drop_dead_values(nest: LoopNest) -> LoopNest:
    """Values nothing reads are not computed (a widening whose narrowing was folded away)."""
    used: set[str] = set()

    def keep(items) -> tuple:
        kept: list = []
        for ins in reversed(items):
            if isinstance(ins, Const | Load | Arith | Mask) and defines(ins) not in used:
                continue
            if isinstance(ins, Loop):
                ins = replace(ins, body=keep(ins.body))
            used.update(uses(ins))
            kept.append(ins)
        return tuple(reversed(kept))

    return replace(nest, body=keep(nest.body))


def renumber(nest: LoopNest) -> LoopNest:
    """Values become v0, v1, ..., accumulators acc0, ... and LOCALs t0, ... in order of
    definition."""
    mapping: dict[str, str] = {}
    counts = {"v": 0, "acc": 0, "t": 0}
    for ins in walk(nest.body):
        out = defines(ins)
        if out is None:
            continue
        kind = "acc" if isinstance(ins, DefAcc) else "t" if isinstance(ins, Local) else "v"
        mapping[out] = f"{kind}{counts[kind]}"
        counts[kind] += 1
    if all(old == new for old, new in mapping.items()):
        return nest  # already in order (a second renumber after passes that added nothing)
    return replace(nest, body=rename(nest.body, mapping))


DEFAULT_PASSES: list[Pass] = [
    loop_order,
    reduce_placement,
    drop_unit_loops,
    drop_dead_values,
    renumber,
]


def apply_passes(
    nest: LoopNest, passes: Sequence[Pass] | None = None, strict: bool = False
) -> LoopNest:
    """Run ``passes`` (default: DEFAULT_PASSES) in order and verify the result.

    A pass that finds what it schedules broken by an earlier one (a contraction whose loops
    an unroll changed) says why in the nest's ``notes``; with ``strict`` that is an error.

    Verifying once, not after every pass, is most of the cost saved on a plan of hundreds
    of kernels. If a pass fails, or the result is malformed, the passes are replayed one
    at a time, each result verified, so the error names the first pass that broke it.
    """
    passes = DEFAULT_PASSES if passes is None else list(passes)
    try:
        out = nest
        for p in passes:
            out = p(out)
        verify(out)
    except Exception:
        for p in passes:
            out = p(nest)
            try:
                verify(out)
            except ValueError as e:
                name = getattr(p, "__name__", repr(p))
                raise ValueError(f"pass {name} produced a malformed nest: {e}") from None
            nest = out
        raise
    if strict and out.notes:
        raise ValueError(f"{nest.name}: a pass did not apply: {'; '.join(out.notes)}")
    return out


def noted(nest: LoopNest, body, why: Sequence[str]) -> LoopNest:
    """``nest`` with ``body``, and the first of a pass's words on why it did not apply where
    it looked (``LoopNest.notes``)."""
    new = why[:1] if why and why[0] not in nest.notes else ()
    return replace(nest, body=tuple(body), notes=(*nest.notes, *new))
