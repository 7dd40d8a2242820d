"""The decomposition pass: composite nodes become their primitive spellings. Pure.

A device names the composites it renders itself (``keep(node)``); every other composite
node is replaced by its row's ``decompose`` rule (``ir/graph/ops.py``), applied to the
already rewritten sources, so the result holds primitives and kept composites only. A
device that renders no composite at all runs this with ``keep`` always false and gets
every math function from the closed primitive set. Half-width composites decompose at
float32 and round once, as they compute everywhere else.

The rules are written in the primitive protocol of ``ir/graph/compose.py``; ``Spelled``
(``ir/graph/build.py``) speaks that protocol over bare nodes, so the pass needs no
frontend. Nodes the runtime
already holds bytes for (``stop``) are kept as they are, with their identity, and the
graph behind them is not looked at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ir.graph import dtypes
from ir.graph.build import Spelled
from ir.graph.node import Node, toposort
from ir.graph.ops import COMPOSITE, TABLE


def expand_composite(node: Node, srcs: Sequence[Node]) -> Node:
    """One composite node, on (rewritten) sources, spelled by its row's rule."""
    d = node.dtype
    args = [Spelled(s) for s in srcs]
    if d in dtypes.HALF:
        args = [a.p_cast(dtypes.float32) for a in args]
    rule = TABLE[node.op].decompose
    out = rule(*args) if node.arg is None else rule(node.arg, *args)  # ARGSORT's direction
    return out.p_cast(d).node


def decompose(
    roots: Sequence[Node],
    keep: Callable[[Node], bool],
    stop: Callable[[Node], bool] | None = None,
    done: dict[int, Node] | None = None,
) -> list[Node]:
    """The graph under ``roots`` with every composite that ``keep`` refuses decomposed.

    Nodes that need no change are returned as they are (a graph without composites comes
    back identical), so the pass costs one walk where there is nothing to do. ``done``, if
    given, is filled with id(node) -> the node it became, for every node of the graph; the
    nodes it names already become what it says.
    """
    done = {} if done is None else done
    for n in toposort(roots, stop):
        if id(n) in done:  # given: the caller's stand-in for it
            continue
        if stop is not None and stop(n) or not n.srcs:
            done[id(n)] = n
            continue
        srcs = tuple(done[id(s)] for s in n.srcs)
        if n.op in COMPOSITE and not keep(n):
            done[id(n)] = expand_composite(n, srcs)
        elif all(a is b for a, b in zip(srcs, n.srcs)):
            done[id(n)] = n
        else:
            done[id(n)] = Node(n.op, n.dtype, n.shape, srcs, n.arg)
    return [done[id(r)] for r in roots]
