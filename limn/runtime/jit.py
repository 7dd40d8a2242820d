"""The executor shared by compiled devices: plans, their cache, and running them.

``realize`` on a compiled device goes:

1. walk the graph under the roots, stopping at nodes that already have bytes (BUFFER
   nodes, and nodes the runtime remembers realizing), and fingerprint its structure;
2. look the fingerprint up in the plan cache; on a miss, decompose the composites the
   device does not render (``renders``), schedule (stage 2), lower and run the passes
   (stage 3), render and compile (stage 4) -- once per structure, so a training loop at
   fixed shapes compiles on its first step only;
3. run the plan on this call's buffers: allocate each intermediate just before the
   kernel that writes it (from the device's buffer pool, ``limn/runtime/pool.py``, for
   the large ones) and give it back after the last kernel that reads it; then make the
   sinks (a sink aliases its buffer, never copies, unless that buffer is one of the
   inputs); then commit the ASSIGNs, after every value of the batch exists.

A Plan is also what ``limn.capture`` records and replays: ``Plan.run`` needs nothing but
the input buffers in slot order.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace

from ir.graph.decompose import decompose
from ir.graph.node import Node
from ir.graph.ops import Op
from ir.kernel.kernel import KernelGraph, arg_key
from ir.kernel.schedule import schedule
from limn.runtime import profile, progress
from limn.runtime.device import (
    KEEP_BYTES,
    Buffer,
    Device,
    env_number,
    held,
    recall,
    remember,
)


def walk(
    roots: Sequence[Node], windows: bool = False
) -> tuple[tuple, list[Node], list[Buffer], list[Node], dict[int, Node]]:
    """The structure key of the graph under ``roots``, its inputs in slot order, their
    buffers, the node behind each row of the key, and the views it swapped for windows.

    Inputs are the nodes that already hold bytes; they are numbered in the order the
    schedule numbers them (depth first, sources in order: ``toposort``'s order), and two
    inputs over the same Buffer share a number in the key, since aliasing changes what
    a plan may do. One walk, asking each node once whether it holds bytes (and keeping
    the Buffer that says so): a cached plan is found by this key on every realize, so it
    is the per-call cost of a plan hit. With ``windows``, a view of part of an input reads
    a window of it instead (``window``; id(view) -> its stand-in), so its offset is bound
    with the buffer, not written in the key.
    """
    inputs: list[Node] = []
    bufs: list[Buffer] = []
    rows: list[tuple] = []
    nodes: list[Node] = []  # the node behind each row
    index: dict[int, int] = {}  # id(node) -> its row
    buffer_ids: dict[int, int] = {}
    swapped: dict[int, Node] = {}
    for root in roots:
        stack = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if id(n) in index:
                continue
            if expanded is True:
                index[id(n)] = len(rows)
                op, arg = n.op, n.arg
                if op is VIEW:  # its fields, which hash and compare in C, not the View
                    arg = (arg.shape, arg.strides, arg.offset, arg.mask)
                elif op is CONST or op is CUSTOM:
                    arg = arg_key(op, arg)
                rows.append((op, n.dtype, n.shape, tuple([index[id(s)] for s in n.srcs]), arg))
                nodes.append(n)
                continue
            if expanded:  # a view swapped for ``expanded``, whose row is now written
                index[id(n)] = index[id(expanded)]
                continue
            op = n.op
            buf = n.arg if op is BUFFER else None if op is ASSIGN else recall(n)
            if buf is None and op is VIEW and windows and (w := window(n)) is not None:
                base, swapped[id(n)] = w  # the window, aliased as the buffer it is part of
                buffer_ids[id(w[1].srcs[0].arg)] = buffer_ids.setdefault(id(base), len(buffer_ids))
                stack += [(n, w[1]), (w[1], False)]
                continue
            if buf is None:  # computed here: its sources first, then it
                stack.append((n, True))
                for s in reversed(n.srcs):
                    if id(s) not in index:
                        stack.append((s, False))
                continue
            index[id(n)] = len(rows)
            alias = buffer_ids.setdefault(id(buf), len(buffer_ids))
            inputs.append(n)
            bufs.append(buf)
            rows.append(("in", n.dtype, n.shape, alias))
            nodes.append(n)
    return (tuple(rows), tuple([index[id(r)] for r in roots])), inputs, bufs, nodes, swapped


VIEW, CONST, CUSTOM, BUFFER, ASSIGN = Op.VIEW, Op.CONST, Op.CUSTOM, Op.BUFFER, Op.ASSIGN


def window(n: Node) -> tuple[Buffer, Node] | None:
    """(the input, a view of a window of it) where ``n`` views part of an input's bytes
    (a batch sliced from a long tensor, a row taken by an index, a column block, each
    maybe padded or broadcast): the window from the first element ``n`` reads to the last
    is given as a buffer of its own, and ``n`` becomes the same view of that buffer. The
    plan then serves the slice at every offset, reading the bytes a compiled offset would."""
    v, src = n.arg, n.srcs[0]
    base = src.arg if src.op is BUFFER else recall(src)
    box = v.mask or tuple((0, d) for d in v.shape)  # what it reads: unmasked elements only
    if base is None or min(v.strides, default=0) < 0 or any(hi <= lo for lo, hi in box):
        return None
    start = v.offset + sum(lo * s for (lo, _), s in zip(box, v.strides))
    span = 1 + sum((hi - lo - 1) * s for (lo, hi), s in zip(box, v.strides))
    if start < 0 or start + span > base.data.size or (start, span) == (0, base.data.size):
        return None  # (the whole buffer, reordered or broadcast: no offset to bind)
    run = Buffer(n.dtype, (span,), base.data.reshape(-1)[start : start + span])
    buf, moved = Node(BUFFER, n.dtype, (span,), (), run), replace(v, offset=v.offset - start)
    return base, Node(VIEW, n.dtype, v.shape, (buf,), moved)


@dataclass(frozen=True, eq=False)
class Plan:
    """A compiled kernel graph, made by its device's ``build`` in one piece and never
    changed after: what each kernel runs (``steps``, the device's own kind:
    ``limn/runtime/driver.py``'s on the c device), and what runs them (``runner``)."""

    graph: KernelGraph
    steps: tuple
    slots: tuple = ()  # slot i is filled by the i-th input ``walk`` finds
    # (buffer, key row) of the small intermediates each run leaves to the runtime to
    # remember for the node of that row (``kept_values``)
    kept: tuple = ()
    sites: tuple = ()  # the user's line behind each kernel, if profiled when built
    passes: tuple | None = None  # the loop-nest passes it was built with
    # runner.run(inputs, keep, profiler) runs the plan on the inputs in slot order and
    # returns the sinks' arrays (with ``keep``, the kept values' too) by buffer, with every
    # ASSIGN written; runner.stats: (profiler, its KernelStat per kernel), while profiled
    runner: object = field(default=None, repr=False)
    # what the device compiled, as its compile made it (the c device's ``ir.c.units.Units``):
    # what ``limn.ir`` and ``limn.export_c`` print and a hot build recompiles
    product: object = field(default=None, repr=False)


CARRY = 3  # the plan miss that computes a value the third time keeps it (``carried``)
MAX_PLANS = 4096  # plans a compiled device keeps (LIMN_PLANS), the least recently used go


class CompiledDevice(Device):
    """A device that compiles plans; subclasses say how to build one kernel graph."""

    def __init__(self):
        super().__init__()
        # the plans most recently used, at most ``max_plans`` (LIMN_PLANS): a program at
        # fixed shapes needs a handful, one that makes many shapes once each (a property-
        # based test suite builds ~90,000) would otherwise keep every one, and each costs
        # the garbage collector at every full collection (tens of objects a plan: 4.6M
        # objects, 48 s of a 250 s run). A plan dropped and met again is built again; what
        # it compiled stays in the device's and the disk's caches.
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        self.max_plans = env_number("LIMN_PLANS", MAX_PLANS, "how many plans to keep (0: none)")
        self.memory = env_number("LIMN_MEMORY", 2 << 30, "the bytes plans' arenas may hold")
        # builds one plan at a time: threads that miss the cache together compile a new
        # structure once, and hits never wait (a dict read is atomic)
        self._build_lock = threading.Lock()
        self.held = 0  # bytes of the kept plans' arenas
        self.stats = {"plans": 0, "plan_hits": 0, "plans_loaded": 0, "build_s": 0.0, "kernels": 0}
        self.recorder: list | None = None  # set by limn.capture while it records
        self.shapes: dict[tuple, tuple] = {}  # a key without its shapes -> the last shapes
        self.walked = weakref.WeakKeyDictionary()  # node -> the realizes that computed it

    def build(self, graph: KernelGraph, slots=(), kept=(), sites=()) -> Plan:
        raise NotImplementedError

    def stored_plan(self, key: tuple) -> Plan | None:
        """A plan for ``key`` kept from an earlier process, if the device keeps them."""
        return None

    def store_plan(self, key: tuple, plan: Plan, build_s: float) -> None:
        """Keep ``plan`` (built in ``build_s`` seconds) for a later process, if the device
        does."""

    def renders(self, node: Node) -> bool:
        """Whether this device computes the composite ``node`` itself; the others are
        decomposed into primitives before scheduling. A device that renders only the
        primitives keeps this default."""
        return False

    def plan_for(self, roots: Sequence[Node], carry: bool = False) -> tuple[Plan, list[Node]]:
        """The plan for the graph under ``roots`` (built on a miss) and its input nodes in
        the plan's slot order; with ``carry``, the plan ``realize`` would run for them: with
        the values they carry (``carried``, asked without counting this as a computation)."""
        plan, _, (_, inputs, *_) = self._plan(roots, self.host, carry, False)
        return plan, [inputs[i] for i in plan.slots]

    def _plan(self, roots: Sequence[Node], windows: bool, carry=True, count=True):
        """The plan for the graph under ``roots`` (built on a miss), ``roots`` with the values
        they carry (``carried``), and ``walk``'s findings for those: ``spelled``, the walk's
        id(view) -> its window's view, is filled by decomposition with id(node) -> the node
        it made of it."""
        key, inputs, _, nodes, spelled = found = walk(roots, windows)
        plan = self.plans.get(key)
        if plan is None and carry and self.recorder is None:
            if more := self.carried(key, nodes, count):
                roots = [*roots, *more]  # (a miss: a graph that grows misses at every step)
                key, inputs, _, nodes, spelled = found = walk(roots, windows)
                plan = self.plans.get(key)
        if plan is not None:
            self.stats["plan_hits"] += 1
            with suppress(KeyError):  # (another thread dropped it meanwhile: it still runs)
                self.plans.move_to_end(key)  # the most recently used
            return plan, roots, found
        with self._build_lock:
            plan = self.plans.get(key)
            if plan is not None:  # another thread built it while this one waited
                self.stats["plan_hits"] += 1
                return plan, roots, found
            t0 = time.perf_counter()
            prof = profile.active()
            plan = self.stored_plan(key) if prof is None else None
            self.stats["plans_loaded"] += plan is not None
            if plan is None:
                why = self.resized(key)
                if prof is not None and why:
                    prof.resized.append(why)
                # a live line on a terminal if this is slow
                line = progress.start(why=f": {why}" if why else "")
                try:
                    sched = schedule(decompose(roots, self.renders, held, spelled), held)
                    # a decomposition may meet its inputs in another order: the plan's slots
                    where = {id(n): i for i, n in enumerate(inputs)}
                    slots = tuple(where[id(n)] for n in sched.inputs)
                    sites = tuple(prof.site(n) for n in sched.outputs) if prof is not None else ()
                    kept = kept_values(sched, nodes, spelled)
                    plan = self.build(sched.graph, slots, kept, sites)
                finally:
                    progress.end(line)
                if prof is None:
                    self.store_plan(key, plan, time.perf_counter() - t0)
            # the least recently used go past LIMN_PLANS plans, or past LIMN_MEMORY bytes of
            # arenas (each plan's is made at its first run and kept for the next)
            self.plans[key] = plan
            self.held += getattr(plan.runner, "size", 0)
            while (
                len(self.plans) > self.max_plans or self.held > self.memory and len(self.plans) > 1
            ):
                self.held -= getattr(self.plans.popitem(last=False)[1].runner, "size", 0)
            self.stats["plans"] += 1
            self.stats["kernels"] += len(plan.graph.kernels)
            self.stats["build_s"] += time.perf_counter() - t0
        return plan, roots, found

    def resized(self, key: tuple) -> str:
        """Why a plan is built again: a structure met before at other shapes (a sequence
        that grows by a token, the last short batch) names the first shape that changed;
        a new structure says nothing."""
        structure = tuple(row[:2] + row[3:4] for row in key[0])  # op, dtype, sources
        shapes = tuple(row[2] for row in key[0])
        seen = self.shapes.pop(structure, None)
        self.shapes[structure] = shapes
        if len(self.shapes) > self.max_plans:
            self.shapes.pop(next(iter(self.shapes)))
        if seen is None or seen == shapes:
            return ""
        old, new = next((a, b) for a, b in zip(seen, shapes) if a != b)
        return f"a new shape, {list(old)} -> {list(new)}, of a structure built before"

    def carried(self, key: tuple, nodes: list[Node], count: bool = True) -> list[Node]:
        """The values this plan miss computes for the ``CARRY``-th time, read by values
        computed fewer times: a value a program carries from step to step without reading
        it (a token sequence grown by ``cat``, a recurrence's state). Realized with the
        roots and kept, so the next step's graph starts from its bytes: a step's cost does
        not grow with the steps before it. (A forward read, then read again by its backward,
        is computed twice and planned as it was.)"""
        counts = [0] * len(nodes)
        for i, (row, n) in enumerate(zip(key[0], nodes)):
            if row[0] != "in" and n.op is not ASSIGN:
                counts[i] = self.walked.get(n, 0) + 1
                if count:
                    self.walked[n] = counts[i]
        # read whole: a part of a value (an element of a big product) is not worth all of it
        rows = [row for row, c in zip(key[0], counts) if row[0] != "in" and c < CARRY]
        srcs = {s for row in rows for s in row[3] if _reads_whole(row, key[0][s])}
        return [nodes[i] for i in sorted(srcs) if counts[i] >= CARRY]

    def realize(self, roots: list[Node]) -> list[Buffer]:
        # while limn.capture records, a slice of an argument stays a view of it: a replay
        # binds the arguments' buffers, not windows of the recorded call's
        count, windows = len(roots), self.host and self.recorder is None
        plan, roots, (_, inputs, bufs, nodes, _) = self._plan(roots, windows)
        in_bufs = [bufs[i] for i in plan.slots]
        # while limn.capture records, every input of a step must be an argument, a result
        # of an earlier step or fixed: no intermediate is remembered to stand between
        try:
            out = execute(plan, in_bufs, roots, nodes if self.recorder is None else ())
        except IndexError as e:  # a gather's: named after the function and line that built it
            raise profile.index_error(e, nodes) from None
        if self.recorder is not None:
            self.recorder.append((plan, in_bufs, out))
        return out[:count]


def _reads_whole(row: tuple, src: tuple) -> bool:
    """Whether key row ``row`` reads all of its source's value (a VIEW may read a part)."""
    return row[0] is not VIEW or math.prod(row[2]) >= math.prod(src[2])


def kept_values(sched, nodes: Sequence[Node], spelled: dict) -> tuple:
    """(buffer, key row) for each kernel output a plan's runs leave to be remembered: the
    value of a node of the user's graph (a row of its key), at most ``KEEP_BYTES``, that no
    sink already returns. Client code reads a result and goes on with graphs that share
    what it read; a remembered value is an input there, so the next plan neither walks nor
    computes that history again."""
    row = {id(spelled.get(id(n), n)): i for i, n in enumerate(nodes)}
    sinks = {s.buffer for s in sched.graph.sinks} | {s.source for s in sched.graph.sinks}
    kept = []
    for k, n in zip(sched.graph.kernels, sched.outputs):
        spec, r = sched.graph.buffers[k.output], row.get(id(n))
        if r is None or k.output in sinks or n.op is Op.ASSIGN or spec.dtype is not n.dtype:
            continue
        size = math.prod(spec.shape)
        if size == math.prod(nodes[r].shape) and size * spec.dtype.itemsize <= KEEP_BYTES:
            kept.append((k.output, r))
    return tuple(kept)


def execute(plan: Plan, in_bufs: Sequence[Buffer], roots: Sequence[Node] | None, nodes=()):
    """Run ``plan`` on ``in_bufs`` (it writes the ASSIGNs); make each sink a Buffer. With
    the key's ``nodes``, the plan's kept intermediates are remembered for their nodes."""
    g, prof = plan.graph, profile.active()
    if prof is not None and (plan.runner.stats is None or plan.runner.stats[0] is not prof):
        plan.runner.stats = (prof, prof.plan_keys(plan))
    arrays = plan.runner.run([b.data for b in in_bufs], bool(nodes), prof)
    for b, r in plan.kept if nodes else ():
        n = nodes[r]
        remember(n, Buffer(n.dtype, n.shape, arrays[b].reshape(n.shape)))
    out: list[Buffer] = []
    for i, s in enumerate(g.sinks):
        if s.source is not None:
            out.append(in_bufs[s.buffer])
            continue
        a = arrays[s.buffer]
        buf = Buffer(s.dtype, s.shape, a if a.shape == s.shape else a.reshape(s.shape))
        if roots is not None:
            remember(roots[i], buf)
        out.append(buf)
    return out
