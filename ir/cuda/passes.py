"""The loop-nest passes of the cuda device: output cells outermost, totals in registers.

A GPU runs one thread per output cell, so the loops a thread's cell is named by must be
the outer ones and the loops it folds over the inner ones. ``cells_outer`` moves every
output loop of a perfect chain outside its reduce loops, keeping the reduce loops in
their own relative order: each cell meets the same values in the same order, so the fold
is unchanged, and ``reduce_placement`` then keeps each total in a register. Unlike the c
device there is no ``loop_order``: which loop is innermost in memory is decided by which
cell dim varies fastest across threads (the last one, as the output is laid out).
"""

from __future__ import annotations

from dataclasses import replace

from ir.loop.nest import Kind, Loop, LoopNest
from ir.loop.passes import Pass, drop_dead_values, drop_unit_loops, reduce_placement, renumber
from ir.loop.rewrite import chain, rebuild


def cells_outer(nest: LoopNest) -> LoopNest:
    """In each top-level perfect chain, the output loops go outside the rest."""
    out = []
    for item in nest.body:
        if isinstance(item, Loop):
            loops, inner = chain(item)
            if not any(isinstance(x, Loop) for x in inner):
                outputs_first = sorted(loops, key=lambda lp: lp.kind is not Kind.OUTPUT)
                item = rebuild(outputs_first, inner)  # (a stable sort: each side keeps its order)
        out.append(item)
    return replace(nest, body=tuple(out))


def cuda_passes() -> list[Pass]:
    return [cells_outer, reduce_placement, drop_unit_loops, drop_dead_values, renumber]
