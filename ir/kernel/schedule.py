"""The schedule pass: op graph (stage 1) -> kernel graph (stage 2). A pure function.

Elementwise work fuses into whatever consumes it; a value gets a buffer of its own (a
"cut") only where it has to exist in memory:

* a reduce (SUM, MAX), a SCAN, a SCATTER, a CONTIGUOUS copy, an ASSIGN, a CUSTOM kernel's output
  and each of its inputs (a device kernel reads whole buffers), an ARGSORT (one the device
  renders: the others were decomposed) and each of its keys (a sort reads whole rows);
* a graph root, unless it is a buffer already, or a reshape of one (then its sink
  aliases that buffer: dropping a reduce's kept dim moves no data);
* the source of a VIEW that index arithmetic cannot follow: a view over a fused
  computation is re-indexed onto the computation's own dims when ``kernel.reindex`` finds
  a linear map, and otherwise the computation is stored and the view reads the buffer.

A value with several consumers is recomputed inside each consumer's kernel, never stored
for them: what fuses is elementwise work, loads and index arithmetic, which costs less to
redo than a round trip through memory. Anything that contains a reduce was already cut at
the reduce, so recomputation never repeats a reduction. The exceptions follow. A value with
several consumers whose fused computation reads READ_BUDGET full-size buffers or more is
stored once: the residual stream of a deep network is a sum over every layer's outputs,
and recomputed it would have each of its consumers (and each later layer's) read all of
them again, a cost that grows with the square of the depth. The stored value has the
bits the fused one had (every node is rounded to its dtype either way; the c device never
contracts ``a*b+c``), but a reduce over it has a simpler body, which the c device may
fold in lanes where it folded the fused body serially: another fixed grouping of the
same sum, shown in the printed nest. And a costly value read through a broadcast:
``gelu(h) @ w`` would recompute gelu once per output column, so a value worth
RECOMPUTE_BUDGET weighted ops or more (a transcendental or a gather weighs more than an
add) that a VIEW reuses for MIN_FANOUT cells or more is stored once, and the broadcast
reads the buffer. So is a value read through a pad or a gather under such a
broadcast (the gradient of ``split``, three padded pieces summed, feeding a matmul; an
embedding feeding an LSTM's input projection): its masks or index checks would be
re-evaluated per cell and keep the contraction off the tiled path, where its products are
folded unfused: stored, it is folded as any contraction is, whether or not the program
read it before. A
small value (SMALL elements) whose fused body reads MAX_READS buffers or more is stored
(a thousand statistics stacked and averaged): a concatenation of a thousand scalars is
kernels of MAX_READS pieces each, planned in time linear in the pieces, and a reduce over
it has a short body to copy per lane. And a costly value (SHARED weighted ops) that
several elementwise kernels fuse is stored once: an LSTM's cell state, read by its step's
output and by the next step, would otherwise be recomputed by every later step's kernel
back to the last stored one, each with its gates' exps. Only where every kernel fusing it
is a map: a value a reduce fuses stays fused, so no sum's body, and no number, changes. A
GATHER fuses like an elementwise op; its index becomes a data-dependent term of the
source's address.

Inputs: a BUFFER node is always an input. ``is_realized(node)`` may name other nodes the
runtime already holds bytes for; they become inputs too and the graph behind them is not
looked at. Inputs are numbered in the order they are first met, and the returned
``Schedule.inputs`` says which node fills each slot; the kernel graph itself never refers
to a concrete buffer, so equal structures give equal (hashable) kernel graphs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ir.graph.node import Node, toposort
from ir.graph.ops import ELEMENTWISE, REDUCE, TABLE, Op
from ir.kernel.kernel import BufferSpec, Kernel, KernelGraph, Row, Sink, reindex

CUT_OPS = REDUCE | {Op.SCAN, Op.SCATTER, Op.CONTIGUOUS, Op.ASSIGN, Op.CUSTOM, Op.ARGSORT}


@dataclass(frozen=True)
class Schedule:
    """A kernel graph plus the nodes bound to its input slots (kept outside the hashable part).

    ``outputs[k]`` is the node kernel ``k`` writes, and ``row_nodes[k][r]`` the node behind
    its row ``r`` (for a BUFFER row, the node whose buffer it reads): what lets a reader go
    from a kernel back to the graph it was cut from (the stage viewer, ``limn/viewer.py``).
    """

    graph: KernelGraph
    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...] = ()
    row_nodes: tuple[tuple[Node, ...], ...] = ()


RECOMPUTE_BUDGET = 4  # weighted ops a broadcast may recompute per cell before we store
SHARED = 12  # weighted ops a value several kernels fuse may cost before it is stored once
READ_BUDGET = 4  # full-size buffers a value shared by consumers may read before we store
MIN_FANOUT = 4  # a broadcast that reuses each element fewer times is left fused
MAX_READS = 16  # buffers a small value's fused body may read before it is stored
SMALL = 1 << 16  # elements of a value that is stored when it reads MAX_READS buffers


def _broadcasts(v) -> bool:
    """A view that reads each element for at least MIN_FANOUT output cells."""
    fanout = math.prod(s for s, st in zip(v.shape, v.strides) if st == 0 and s > 1)
    return fanout >= MIN_FANOUT


def _region(node: Node, cut: set[int], ins: set[int]):
    """``(n, leaf)`` for each node ``node``'s fused computation meets: leaves are the inputs
    and stored values it reads, the others it evaluates."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        leaf = id(n) in ins or (n is not node and id(n) in cut)
        yield n, leaf
        if not leaf:
            stack.extend(n.srcs)


def _costly(node: Node, cut: set[int], ins: set[int], budget: int = RECOMPUTE_BUDGET) -> bool:
    """Whether recomputing ``node`` per broadcast cell costs more than storing it once."""
    cost = 0
    for n, leaf in _region(node, cut, ins):
        cost += 0 if leaf or n.op in (Op.VIEW, Op.CONST, Op.CAST) else TABLE[n.op].cost
        if cost >= budget:
            return True
    return False


def _untiled(node: Node, cut: set[int], ins: set[int]) -> bool:
    """Whether ``node``'s fused computation reads through a pad (a masked VIEW) or a
    GATHER: read per cell of a contraction, either keeps it off the tiled path."""
    return any(
        not leaf and (n.op == Op.GATHER or n.op == Op.VIEW and n.arg.mask is not None)
        for n, leaf in _region(node, cut, ins)
    )


def _is_reshape_of(node: Node) -> bool:
    """A VIEW that reads its source's bytes in order under a new shape: aliasing is free."""
    if node.op != Op.VIEW:
        return False
    src = node.srcs[0]
    return node.arg.is_contiguous and node.arg.size == math.prod(src.shape)


def schedule(roots: Sequence[Node], is_realized: Callable[[Node], bool] | None = None) -> Schedule:
    """Cut the graph under ``roots`` into kernels; see the module docstring for the rules."""
    roots = list(roots)

    answers: dict[int, bool] = {}  # every rule below asks; each node is asked once

    def is_input(n: Node) -> bool:
        known = answers.get(id(n))
        if known is None:
            known = n.op == Op.BUFFER or (
                is_realized is not None and n.op != Op.ASSIGN and bool(is_realized(n))
            )
            answers[id(n)] = known
        return known

    order = toposort(roots, is_input)
    ins = {id(n) for n in order if is_input(n)}  # (asked once: each rule below reads the set)
    cut: set[int] = set()

    def keep(n: Node) -> None:
        if id(n) not in ins:
            cut.add(id(n))

    for n in order:
        if id(n) in ins:
            continue
        if n.op in CUT_OPS:
            keep(n)
        if n.op in (Op.CUSTOM, Op.ARGSORT):
            for s in n.srcs:
                keep(s)
        if n.op == Op.ASSIGN and id(n.srcs[0]) not in ins:
            raise ValueError(
                f"assign: the target must be a realized buffer, got a lazy {n.srcs[0].op.value} "
                f"{n.dtype}{list(n.shape)}; realize the target first"
            )
        if n.op == Op.VIEW:
            src = n.srcs[0]
            if src.op != Op.CONST and reindex(n.arg, src.shape) is None:
                keep(src)
            elif _broadcasts(n.arg) and (_costly(src, cut, ins) or _untiled(src, cut, ins)):
                keep(src)
    users: dict[int, int] = {}
    for n in order:
        if id(n) not in ins:
            for s in set(map(id, n.srcs)):
                users[s] = users.get(s, 0) + 1
    reads: dict[int, dict[int, int]] = {}  # the leaves a value reads: id -> size, the largest
    for n in order:  # in order, so a stored value shortens the reads of those after it
        if id(n) in ins:
            continue
        leaves: dict[int, int] = {}
        for s in n.srcs:
            leaf = id(s) in ins or id(s) in cut
            leaves.update({id(s): math.prod(s.shape)} if leaf else reads.get(id(s), {}))
        size = math.prod(n.shape)
        wide = users.get(id(n), 0) > 1 and sum(e >= size for e in leaves.values()) >= READ_BUDGET
        if n.op in ELEMENTWISE and (wide or len(leaves) >= MAX_READS and size <= SMALL):
            keep(n)
        top = sorted(leaves.items(), key=lambda kv: -kv[1])[:MAX_READS]
        reads[id(n)] = leaves if len(leaves) <= MAX_READS else dict(top)
    for r in roots:  # reshapes last, so they see every buffer the other roots made
        if not _is_reshape_of(r):
            keep(r)
    for r in roots:
        if _is_reshape_of(r) and not (id(r.srcs[0]) in ins or id(r.srcs[0]) in cut):
            keep(r)
    # the map a fused value is computed in: -1 several (stored once if costly), -2 a
    # reduce's too (never stored: its fold's body, so its bits, stays as it is)
    reader: dict[int, int] = {}
    for n in reversed(order):  # readers first, so each value knows every kernel it is in
        if id(n) in ins:
            continue
        if n.op in ELEMENTWISE and reader.get(id(n)) == -1 and _costly(n, cut, ins, SHARED):
            keep(n)
        mine = reader.get(id(n)) if id(n) not in cut else id(n) if _kind(n) == "MAP" else -2
        for s in n.srcs:
            was = reader.get(id(s), mine)
            reader[id(s)] = -2 if -2 in (was, mine) else mine if was == mine else -1

    # buffers: inputs first (by slot), then one per kernel in run order
    inputs = [n for n in order if id(n) in ins]
    buf_of = {id(n): i for i, n in enumerate(inputs)}
    specs = [BufferSpec(n.dtype, n.shape) for n in inputs]
    kernels, outputs, row_nodes = [], [], []
    for n in order:
        if id(n) not in cut:
            continue
        buf_of[id(n)] = len(specs)
        specs.append(BufferSpec(n.dtype, n.shape))
        kernel, nodes = _kernel(n, buf_of)
        kernels.append(kernel)
        outputs.append(n)
        row_nodes.append(nodes)

    sinks = []
    for r in roots:
        if r.op == Op.ASSIGN:
            target = buf_of[id(r.srcs[0])]
            sinks.append(Sink(target, r.dtype, r.shape, buf_of[id(r)]))
        elif id(r) in buf_of:
            sinks.append(Sink(buf_of[id(r)], r.dtype, r.shape))
        else:  # a reshape of a buffer
            sinks.append(Sink(buf_of[id(r.srcs[0])], r.dtype, r.shape))
    graph = KernelGraph(tuple(specs), len(inputs), tuple(kernels), tuple(sinks))
    return Schedule(graph, tuple(inputs), tuple(outputs), tuple(row_nodes))


def _kind(n: Node) -> str:
    if n.op in REDUCE or n.op in (Op.SCAN, Op.SCATTER, Op.ARGSORT, Op.CUSTOM):
        return n.op.value
    return "MAP"


def _kernel(top: Node, buf_of: dict[int, int]) -> tuple[Kernel, tuple]:
    """The fused rows that compute ``top``, reading every cut node and input as a buffer
    (``buf_of``: each input's and each value stored before ``top``, and ``top``'s own)."""
    rows: list[Row] = []
    nodes: list[Node] = []  # the node behind each row
    row_of: dict[int, int] = {}
    reads: list[int] = []

    def read(n: Node) -> int:
        b = buf_of[id(n)]
        if b not in reads:
            reads.append(b)
        rows.append(Row(Op.BUFFER, n.dtype, n.shape, (), reads.index(b)))
        nodes.append(n)
        return len(rows) - 1

    # ASSIGN and CONTIGUOUS compute nothing themselves: the kernel stores their source
    start = top.srcs[-1] if top.op in (Op.ASSIGN, Op.CONTIGUOUS) else top
    stack = [(start, False)]
    while stack:
        n, expanded = stack.pop()
        if id(n) in row_of:
            continue
        if id(n) in buf_of and n is not top:  # an input or a stored value: read
            row_of[id(n)] = read(n)
            continue
        if not expanded:
            stack.append((n, True))
            for s in reversed(n.srcs):
                if id(s) not in row_of:
                    stack.append((s, False))
            continue
        if n.op not in ELEMENTWISE and n.op not in CUT_OPS and n.op not in _FUSED:
            raise NotImplementedError(f"schedule: no rule for {n.op.value}")
        srcs = tuple(row_of[id(s)] for s in n.srcs)
        rows.append(Row(n.op, n.dtype, n.shape, srcs, n.arg))
        nodes.append(n)
        row_of[id(n)] = len(rows) - 1
    return Kernel(_kind(top), tuple(rows), tuple(reads), buf_of[id(top)]), tuple(nodes)


_FUSED = frozenset((Op.CONST, Op.VIEW, Op.GATHER))
