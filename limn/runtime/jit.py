"""The executor shared by compiled devices: plans, their cache, and running them.

``realize`` on a compiled device goes:

1. walk the graph under the roots, stopping at nodes that already have bytes (BUFFER
   nodes, and nodes the runtime remembers realizing), and fingerprint its structure;
2. look the fingerprint up in the plan cache; on a miss, decompose the composites the
   device does not render (``renders``), schedule (stage 2), lower and run the passes
   (stage 3), render and compile (stage 4) -- once per structure, so a training loop at
   fixed shapes compiles on its first step only;
3. run the plan on this call's buffers: allocate each intermediate just before the
   kernel that writes it and drop it after the last kernel that reads it; then make the
   sinks (a sink aliases its buffer, never copies, unless that buffer is one of the
   inputs); then commit the ASSIGNs, after every value of the batch exists.

A Plan is also what ``limn.capture`` records and replays: ``Plan.run`` needs nothing but
the input buffers in slot order.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ir.graph import dtypes
from ir.graph.decompose import decompose
from ir.graph.node import Node, toposort
from ir.graph.ops import Op
from ir.kernel.kernel import KernelGraph, arg_key
from ir.kernel.schedule import schedule
from limn.runtime import profile
from limn.runtime.device import Buffer, Device, get_device, recall, remember


def plan_key(roots: Sequence[Node]) -> tuple[tuple, list[Node]]:
    """The structure key of the graph under ``roots`` and its inputs in slot order.

    Inputs are the nodes that already hold bytes; they are numbered in the order the
    schedule numbers them (depth first, sources in order), and two inputs that are the
    same Buffer share a number in the key, since aliasing changes what a plan may do.
    """
    inputs: list[Node] = []
    rows: list[tuple] = []
    index: dict[int, int] = {}
    buffer_ids: dict[int, int] = {}

    def is_input(n: Node) -> bool:
        return n.op == Op.BUFFER or (n.op != Op.ASSIGN and recall(n) is not None)

    order = toposort(roots, is_input)
    for n in order:
        index[id(n)] = len(rows)
        if is_input(n):
            buf = buffer_of(n)
            alias = buffer_ids.setdefault(id(buf), len(buffer_ids))
            inputs.append(n)
            rows.append(("in", n.dtype.name, n.shape, alias))
        else:
            srcs = tuple(index[id(s)] for s in n.srcs)
            rows.append((n.op, n.dtype.name, n.shape, srcs, arg_key(n.op, n.arg)))
    return (tuple(rows), tuple(index[id(r)] for r in roots)), inputs


def _work(roots: Sequence[Node]) -> int:
    """How many elements the graph computes, not looking behind nodes that hold bytes."""
    total, seen, stack = 0, set(), list(roots)
    while stack:
        n = stack.pop()
        if id(n) in seen or n.op == Op.BUFFER or recall(n) is not None:
            continue
        seen.add(id(n))
        total += math.prod(n.shape)
        stack.extend(n.srcs)
    return total


def buffer_of(n: Node) -> Buffer:
    return n.arg if n.op == Op.BUFFER else recall(n)


@dataclass
class Plan:
    """A compiled kernel graph: one callable per kernel, and when each buffer dies."""

    graph: KernelGraph
    # calls[i](arrays, memo) runs kernel i (memo: one run's shared state); it writes its
    # result into arrays[-1], or returns an array of the output's shape and dtype that it
    # made itself (a CUSTOM kernel's own result), which then is that buffer
    calls: list[Callable]
    last_use: dict[int, int] = field(default_factory=dict)  # buffer -> last kernel reading it
    libs: list = field(default_factory=list)  # what the calls live in (compiled libraries)
    sites: tuple = ()  # the user's line behind each kernel, if profiled when built
    passes: list | None = None  # the loop-nest passes it was built with (for the profiler)
    _stats: tuple = field(default=(), repr=False)  # (profiler, its KernelStat per kernel)
    slots: tuple = ()  # slot i is filled by the i-th input ``walk`` finds

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray | None]:
        """Run every kernel on ``inputs`` (slot order); return the arrays the sinks read."""
        g = self.graph
        bufs: list[np.ndarray | None] = list(inputs) + [None] * (len(g.buffers) - g.n_inputs)
        keep = {s.buffer for s in g.sinks} | {s.source for s in g.sinks if s.source is not None}
        memo: dict = {}
        prof = profile.active()
        if prof is not None and (not self._stats or self._stats[0] is not prof):
            self._stats = (prof, prof.plan_keys(self, self.sites, self.passes))
        for i, k in enumerate(g.kernels):
            spec = g.buffers[k.output]
            bufs[k.output] = np.empty(spec.shape, dtypes.to_numpy(spec.dtype))
            args = [bufs[b] for b in k.inputs] + [bufs[k.output]]
            if prof is None:
                made = self.calls[i](args, memo)
            else:
                t = time.perf_counter()
                made = self.calls[i](args, memo)
                stat = self._stats[1][i]
                stat.seconds += time.perf_counter() - t
                stat.calls += 1
            if made is not None:  # the call made its result itself: it becomes the buffer
                bufs[k.output] = made
            for b in k.inputs:
                if b >= g.n_inputs and self.last_use.get(b) == i and b not in keep:
                    bufs[b] = None  # an intermediate dies with its last reader
        return bufs


def lifetimes(graph: KernelGraph) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, k in enumerate(graph.kernels):
        for b in k.inputs:
            last[b] = i
    return last


class CompiledDevice(Device):
    """A device that compiles plans; subclasses say how to build one kernel graph."""

    def __init__(self):
        super().__init__()
        self.plans: dict[tuple, Plan] = {}
        # builds one plan at a time: threads that miss the cache together compile a new
        # structure once, and hits never wait (a dict read is atomic)
        self._build_lock = threading.Lock()
        self.stats = {"plans": 0, "plan_hits": 0, "build_s": 0.0}
        self.recorder: list | None = None  # set by limn.capture while it records
        # graphs that compute at most this many elements run on the numpy reference instead
        # of compiling (LIMN_TINY): for code that makes many shapes once each, such as a
        # property-based test suite; 0, the default, compiles everything
        self.tiny = int(os.environ.get("LIMN_TINY", "0"))

    def build(self, graph: KernelGraph) -> Plan:
        raise NotImplementedError

    def renders(self, node: Node) -> bool:
        """Whether this device computes the composite ``node`` itself; the others are
        decomposed into primitives before scheduling. A device that renders only the
        primitives keeps this default."""
        return False

    def plan_for(self, roots: Sequence[Node]) -> tuple[Plan, list[Node]]:
        key, inputs = plan_key(roots)
        plan = self.plans.get(key)
        if plan is not None:
            self.stats["plan_hits"] += 1
            return plan, [inputs[i] for i in plan.slots]
        with self._build_lock:
            plan = self.plans.get(key)
            if plan is not None:  # another thread built it while this one waited
                self.stats["plan_hits"] += 1
                return plan, [inputs[i] for i in plan.slots]
            t0 = time.perf_counter()
            realized = lambda n: recall(n) is not None  # noqa: E731
            spelled = decompose(roots, self.renders, lambda n: n.op != Op.ASSIGN and realized(n))
            sched = schedule(spelled, realized)
            # a decomposition may meet its inputs in another order: the plan's slot order
            where = {id(n): i for i, n in enumerate(inputs)}
            slots = tuple(where[id(n)] for n in sched.inputs)
            plan = self.build(sched.graph)
            plan.slots = slots
            plan.last_use = lifetimes(sched.graph)
            prof = profile.active()
            plan.sites = tuple(prof.site(n) for n in sched.outputs) if prof is not None else ()
            plan.passes = getattr(self, "passes", None)
            self.plans[key] = plan
            self.stats["plans"] += 1
            self.stats["build_s"] += time.perf_counter() - t0
        return plan, [inputs[i] for i in plan.slots]

    def realize(self, roots: list[Node]) -> list[Buffer]:
        if self.tiny and self.recorder is None and _work(roots) <= self.tiny:
            return get_device("numpy").realize(roots)
        plan, inputs = self.plan_for(roots)
        in_bufs = [buffer_of(n) for n in inputs]
        out = execute(plan, in_bufs, roots)
        if self.recorder is not None:
            self.recorder.append((plan, in_bufs, out))
        return out


def execute(plan: Plan, in_bufs: Sequence[Buffer], roots: Sequence[Node] | None) -> list[Buffer]:
    """Run ``plan`` on ``in_bufs``; make each sink a Buffer, then commit the ASSIGNs."""
    g = plan.graph
    arrays = plan.run([b.data for b in in_bufs])
    out: list[Buffer] = []
    for i, s in enumerate(g.sinks):
        if s.source is not None:
            out.append(in_bufs[s.buffer])
            continue
        a = arrays[s.buffer]
        if s.buffer < g.n_inputs:  # a root that is (a reshape of) an input: give it its own bytes
            a = a.copy()
        buf = Buffer(s.dtype, s.shape, a.reshape(s.shape))
        if roots is not None:
            remember(roots[i], buf)
        out.append(buf)
    for s in g.sinks:  # the transaction: every value exists before any target changes
        if s.source is not None:
            np.copyto(in_bufs[s.buffer].data, arrays[s.source].reshape(in_bufs[s.buffer].shape))
    return out
