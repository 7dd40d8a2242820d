"""Stage 1, the op graph: a DAG of immutable nodes over the primitives in ``ir/graph/ops.py``.

A Node is (op, dtype, shape, srcs, arg). Nodes compare by identity: two nodes built
separately are two values even when they look alike, which keeps hashing O(1) on deep
graphs. The by-value fingerprint the runtime caches plans under is
``limn.runtime.jit.walk``: what counts as an input is the runtime's to know.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ir.graph.dtypes import DType
from ir.graph.ops import TABLE, Op


@dataclass(frozen=True, eq=False, init=False)
class Node:
    op: Op
    dtype: DType
    shape: tuple[int, ...]
    srcs: tuple[Node, ...] = ()
    arg: object = None
    _uid: int = field(default=0, repr=False, compare=False)

    def __init__(
        self, op: Op, dtype: DType, shape: tuple[int, ...], srcs: tuple = (), arg: object = None
    ):
        # written out (not the dataclass's __init__ + __post_init__): every op a program
        # calls makes nodes, so this is on the path of every graph build
        n = _ARITY[op]
        if n >= 0 and len(srcs) != n:
            raise ValueError(f"{op.value}: takes {n} sources, got {len(srcs)}")
        d = self.__dict__  # frozen to the user; the fields written once, here
        d["op"] = op
        d["dtype"] = dtype
        d["shape"] = shape
        d["srcs"] = srcs
        d["arg"] = arg
        d["_uid"] = next(_counter)
        if _on_create is not None:
            _on_create(self)

    def __repr__(self) -> str:
        return f"<Node {self.op.value} {self.dtype}{list(self.shape)} #{self._uid}>"


_ARITY = {op: row.arity for op, row in TABLE.items()}  # sources each op takes; -1: any

# Node ids come from itertools.count: its next() is one C call under the GIL, so threads
# building graphs at once each get a distinct id (a generator raises if two threads
# resume it together).
_counter = itertools.count()

_on_create = None  # a callable the runtime's profiler installs to note where nodes are made


def set_creation_hook(fn) -> None:
    """Call ``fn(node)`` for every Node made from now on (None: stop).

    The profiler uses it to name the user's source line behind each kernel; the graph
    itself keeps no such state.
    """
    global _on_create
    _on_create = fn


def toposort(roots, stop=None) -> list[Node]:
    """Every node the roots depend on, sources before users, each once.

    ``stop(node)`` marks nodes whose sources are not looked at (inputs that already hold
    bytes); they are listed, their graphs are not. The order is depth first, sources in
    order, which is also how the schedule numbers a graph's input slots.
    """
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in seen:
                continue
            if expanded or (stop is not None and stop(node)):
                seen.add(id(node))
                order.append(node)
                continue
            stack.append((node, True))
            for s in reversed(node.srcs):
                if id(s) not in seen:
                    stack.append((s, False))
    return order


def format_arg(node: Node) -> str:
    a = node.arg
    if node.op == Op.BUFFER:
        return ""
    if node.op == Op.VIEW:
        v = a
        s = f"strides={list(v.strides)} offset={v.offset}"
        return s + ("" if v.mask is None else f" mask={[list(m) for m in v.mask]}")
    if node.op in (Op.SUM, Op.MAX):
        return f"axes={list(a)}"
    if node.op in (Op.GATHER, Op.SCATTER):
        return f"axis={a}"
    if node.op == Op.SCAN:
        return f"axis={a[0]} {a[1].value}"
    if node.op == Op.ARGSORT:
        return "descending" if a else "ascending"
    if node.op == Op.CUSTOM:
        name, out, params = a
        return f"{name}[{out}] {params}" if params else f"{name}[{out}]"
    return "" if a is None else repr(a)


def format_node(n: Node, names: dict[int, str], with_srcs: bool = True) -> str:
    """One node's line, ``%3 = ADD float32[4, 3]  %1 %2``; ``names`` maps id(node) to %i."""
    srcs = " ".join(names[id(s)] for s in n.srcs) if with_srcs else ""
    arg = format_arg(n)
    parts = [f"{names[id(n)]:>4} = {n.op.value:<10} {n.dtype}{list(n.shape)}"]
    if srcs:
        parts.append(srcs)
    if arg:
        parts.append(f"({arg})")
    return "  ".join(parts)


def format_graph(roots, stop=None) -> str:
    """One node per line: ``%3 = ADD float32[4, 3] %1 %2``.

    ``stop(node)`` marks nodes that already hold bytes (as in ``toposort``): they are
    listed without their sources, and the graph behind them is not.
    """
    order = toposort(roots, stop)
    names = {id(n): f"%{i}" for i, n in enumerate(order)}
    lines = [format_node(n, names, stop is None or not stop(n)) for n in order]
    outs = " ".join(names[id(r)] for r in roots)
    lines.append(f"out {outs}")
    return "\n".join(lines)
