"""The kernel profiler: where a compiled device's time goes, kernel by kernel.

Turn it on with ``LIMN_PROFILE=1`` in the environment (a table is printed when the
process exits) or in code::

    with limn.profile() as prof:     # the table is printed when the block ends
        train_step()
    rows = prof.stats()              # the same figures as data

For every kernel a compiled device launches it records the wall time of each call, and
it names the kernel by what it does (``SUM [8192, 4096] -> [8192, 1]``) and by the line of
the user's program that made its result: while profiling, every op-graph node notes the
first frame outside limn's own packages, and a gradient's nodes note the line of the
forward op they differentiate. Work is estimated from the kernel graph: each arithmetic
row counts one flop per cell it computes, and the bytes are the kernel's input and output
buffers read or written once, so GFLOP/s and GB/s are lower bounds a reader can compare
against the machine's peaks.

Timing a kernel adds two clock reads per launch, which the c device's driver makes
(``limn/runtime/driver.py``); everything else (naming, the source lines) is computed once
per plan, or when the table is printed.
"""

from __future__ import annotations

import atexit
import contextlib
import linecache
import math
import os
import sys
import time
import weakref
from dataclasses import dataclass, field

from ir.graph import node as _graph
from ir.graph.ops import ELEMENTWISE, REDUCE, Op
from limn.runtime import device

_PACKAGES = ("ir", "limn", "limn_array")  # frames in these modules are not the user's


def _ours(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name.split(".")[0] in _PACKAGES


def user_line(depth: int = 2) -> str | None:
    """``file:line`` of the first frame above ``depth`` outside limn's own packages."""
    f = sys._getframe(depth)
    while f is not None and _ours(f):
        f = f.f_back
    return None if f is None else f"{f.f_code.co_filename}:{f.f_lineno}"


# a GATHER node -> "what at file:line": the function that built it (Embedding,
# cross_entropy, index) and the user's line. Its kernel runs at a later realize, often in
# a fused step far from that line, and an index out of range there is a bug in the data
# the user passed at that line.
built_by: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def name_gather(t, what: str):
    """``t`` (a gather's result) as built by ``what`` at the user's line; returns ``t``."""
    built_by[t.node] = f"{what} at {user_line(2) or '?'}"
    return t


def out_of_range(what: str, v: int, axis: int, size: int) -> IndexError:
    """A gather's or scatter's index ``v`` outside 0..size-1, in the same words on every
    device (``index_error`` finds the gather by them)."""
    where = f"{what}: index {v} is out of range for axis {axis} of size {size}"
    return IndexError(f"{where}; accepted: 0..{size - 1}")


def index_error(e: IndexError, nodes) -> IndexError:
    """``e`` ("gather: index 12 is out of range for axis 0 of size 10 ...") under the name
    of the gather among ``nodes`` whose axis and size it reports, if one was named."""
    for n in nodes:
        if n in built_by and f"axis {n.arg} of size {n.srcs[0].shape[n.arg]};" in str(e):
            return IndexError(f"{built_by[n]}: {e}")
    return e


_NOT_WORK = {Op.BUFFER, Op.VIEW, Op.CONST, Op.CAST, Op.CONTIGUOUS, Op.ASSIGN}


@dataclass
class KernelStat:
    """One kernel (by its fused body and the line that made it): its calls and their time."""

    name: str
    kind: str
    site: str
    flop: int
    bytes: int
    calls: int = 0
    seconds: float = 0.0
    plan: object = field(default=None, repr=False)  # a plan and index that hold it, for nests
    index: int = 0

    def as_dict(self, nest: bool = False) -> dict:
        per = self.seconds / self.calls if self.calls else 0.0
        d = {"kernel": self.name, "kind": self.kind, "site": self.site}
        d.update(source=_source_text(self.site), calls=self.calls, total_s=self.seconds, mean_s=per)
        d.update(flop=self.flop, bytes=self.bytes, gflops=self.flop / per / 1e9 if per else 0.0)
        d["gbps"] = self.bytes / per / 1e9 if per else 0.0
        if nest:
            d["nest"] = _nest_text(self.plan, self.index, self.plan.passes)
        return d


class Profiler:
    """Collects per-kernel time while active; see the module docstring."""

    def __init__(self):
        self.kernels: dict[tuple, KernelStat] = {}
        self.sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # node -> path
        self.blamed: list[tuple] = []  # the forward op's (line, module) while its gradient is built
        self.scope: list[tuple] = []  # (module, its path) of each nn.Module call running
        self._names: dict[tuple, str] = {}  # (id(parent), id(child)) -> the child's name
        self.resized: list[str] = []  # each plan built again for a new shape (jit.resized)
        self.started = time.perf_counter()
        self.stopped: float | None = None

    # ---- recording ---------------------------------------------------------------------

    def note(self, node) -> None:
        """Record where ``node`` was made (the op-graph creation hook): the user's line,
        and the path of the nn.Module whose call made it (``blocks.3.attn``)."""
        if self.blamed:
            self.sites[node], module = self.blamed[-1]
            if module is not None:
                self.modules[node] = module
            return
        if self.scope:
            module, path = self.scope[-1]
            self.modules[node] = path or type(module).__name__
        site = user_line(3)
        if site is not None:
            self.sites[node] = site

    @contextlib.contextmanager
    def blame(self, node):
        """Nodes made inside are charged to the line (and module) that made ``node`` (a
        gradient's op)."""
        site = self.sites.get(node)
        if site is not None and not site.endswith(" (grad)"):
            site += " (grad)"
        self.blamed.append((site or "?", self.modules.get(node)))
        try:
            yield
        finally:
            self.blamed.pop()

    @contextlib.contextmanager
    def within(self, module, path: str | None = None):
        """Nodes made inside belong to ``module``, named by its path from the outermost
        module called (nn.Module.__call__ enters here while profiling), or by ``path``
        (an optimizer's update of one parameter: ``AdamW blocks.0.fc1.weight``)."""
        if path is None and self.scope:
            parent, above = self.scope[-1]
            key = (id(parent), id(module))
            if key not in self._names:
                found = (p for p, m in parent.named_modules() if m is module)
                self._names[key] = next(found, type(module).__name__)
            path = f"{above}.{self._names[key]}" if above else self._names[key]
        self.scope.append((module, path or ""))  # the outermost module's path is ""
        try:
            yield
        finally:
            self.scope.pop()

    def site(self, node) -> str:
        return self.sites.get(node, "?")

    def plan_keys(self, plan) -> list[KernelStat]:
        """One KernelStat per kernel of ``plan`` (made once per plan, shared by equal ones)."""
        g = plan.graph
        out = []
        for i, k in enumerate(g.kernels):
            site = plan.sites[i] if plan.sites else "?"
            # one row per distinct body and line: the same layer in six blocks is one kernel
            key = (k.kind, k.rows, tuple(g.buffers[b] for b in (*k.inputs, k.output)), site)
            stat = self.kernels.get(key)
            if stat is None:
                stat = KernelStat(
                    _name(g, k, plan.runner.source(i)), k.kind, site, _flop(k), _bytes(g, k)
                )
                stat.plan, stat.index = plan, i
                self.kernels[key] = stat
            out.append(stat)
        return out

    # ---- reading -----------------------------------------------------------------------

    def measured(self, graph, i: int) -> dict | None:
        """What was measured of kernel ``i`` of ``graph`` (a kernel graph scheduled anywhere,
        as the stage viewer schedules one), summed over every plan and source line that ran
        the same body on the same buffers: ``calls``, ``seconds``, and ``flops`` and
        ``bytes`` per call; None if no such kernel ran."""
        k = graph.kernels[i]
        key = (k.kind, k.rows, tuple(graph.buffers[b] for b in (*k.inputs, k.output)))
        same = [s for kk, s in self.kernels.items() if kk[:3] == key and s.calls]
        if not same:
            return None
        calls, seconds = sum(s.calls for s in same), sum(s.seconds for s in same)
        return {"calls": calls, "seconds": seconds, "flops": same[0].flop, "bytes": same[0].bytes}

    def stats(self, nest: bool = False) -> list[dict]:
        """Every kernel seen, most time first, as plain dicts.

        Keys: ``kernel`` (its name: kind and shapes), ``kind``, ``site`` (file:line that
        made it, `` (grad)`` for a gradient), ``source`` (that line's text), ``calls``,
        ``total_s``, ``mean_s``, ``flop`` and ``bytes`` per call, ``gflops``, ``gbps``;
        with ``nest=True`` also ``nest``, the loop nest as printed after the device's passes
        (a CUSTOM kernel's: the source the device runs it from).
        """
        rows = sorted(self.kernels.values(), key=lambda s: -s.seconds)
        return [s.as_dict(nest) for s in rows if s.calls]

    def report(self, top: int = 30) -> str:
        rows = self.stats()
        wall = (self.stopped or time.perf_counter()) - self.started
        busy = sum(r["total_s"] for r in rows)
        calls = sum(r["calls"] for r in rows)
        lines = [
            f"limn profile: {len(rows)} kernels, {calls} launches, {busy * 1e3:.1f} ms in "
            f"kernels of {wall * 1e3:.1f} ms profiled ({100 * busy / wall if wall else 0:.0f}%)",
            f"{'ms':>9} {'%':>5} {'calls':>6} {'ms/call':>8} {'GFLOP/s':>8} {'GB/s':>7}  "
            f"{'kernel':<44} source",
        ]
        for r in rows[:top]:
            lines.append(
                f"{r['total_s'] * 1e3:>9.2f} {100 * r['total_s'] / busy:>5.1f} {r['calls']:>6} "
                f"{r['mean_s'] * 1e3:>8.3f} {r['gflops']:>8.1f} {r['gbps']:>7.1f}  "
                f"{r['kernel']:<44} {_short(r['site'])}  {r['source']}"
            )
        if len(rows) > top:
            rest = sum(r["total_s"] for r in rows[top:])
            lines.append(
                f"{rest * 1e3:>9.2f} {100 * rest / busy:>5.1f}  ... {len(rows) - top} more"
            )
        if self.resized:
            lines.append(f"{len(self.resized)} plans built again, {self.resized[-1]} (the last)")
        lines += [f"{k}: {len(d.plans)} plans, arenas {d.held >> 20} of {d.memory >> 20} MiB"
                  for k, d in device._devices.items() if hasattr(d, "held")]  # fmt: skip
        return "\n".join(lines)

    # ---- the context manager -----------------------------------------------------------

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc) -> None:
        stop()
        print(self.report(), file=sys.stderr)


_active: Profiler | None = None


def active() -> Profiler | None:
    return _active


def profile() -> Profiler:
    """Start profiling (a fresh Profiler); as a context manager it prints when the block ends."""
    global _active
    _active = Profiler()
    _graph.set_creation_hook(_active.note)
    return _active


def stop() -> Profiler | None:
    """Stop profiling; returns the profiler that was active (its figures stay readable)."""
    global _active, _last
    prof, _active = _active, None
    _graph.set_creation_hook(None)
    if prof is not None:
        prof.stopped = time.perf_counter()
        _last = prof
    return prof


def stats(nest: bool = False) -> list[dict]:
    """The active (or last) profiler's per-kernel figures; see ``Profiler.stats``."""
    prof = _active or _last
    return prof.stats(nest) if prof is not None else []


_last: Profiler | None = None


def measured(graph, i: int) -> dict | None:
    """The active (or last) profiler's figures for kernel ``i`` of ``graph``; see
    ``Profiler.measured``. The stage viewer shows these when it is given no other stats."""
    prof = _active or _last
    return prof.measured(graph, i) if prof is not None else None


def from_env() -> None:
    """``LIMN_PROFILE=1`` (or a number: how many rows): profile the whole run, print at exit."""
    value = os.environ.get("LIMN_PROFILE", "")
    if value in ("", "0"):
        return
    top = int(value) if value.isdigit() and int(value) > 1 else 30
    prof = profile()

    def at_exit():
        stop()
        if prof.kernels:
            print(prof.report(top), file=sys.stderr)

    atexit.register(at_exit)


# ---- naming and counting --------------------------------------------------------------


def _name(g, k, runs=None) -> str:
    if k.kind == "CUSTOM":  # and the function it runs, where the device says
        fn = f" {runs[0].partition('(')[0]}" if runs else ""
        return f"CUSTOM {k.result.arg[0]}{fn} -> {list(g.buffers[k.output].shape)}"
    out = list(g.buffers[k.output].shape)
    if k.kind in ("SUM", "MAX"):
        return f"{k.kind} {list(k.loop_shape)} -> {out}"
    ops = [r.op.value for r in k.rows if r.op not in _NOT_WORK]
    what = ",".join(dict.fromkeys(ops[-3:])) or "copy"
    return f"{k.kind} {what} {out}"


def _flop(k) -> int:
    total = 0
    for r in k.rows:
        if r.op in REDUCE:
            total += math.prod(k.rows[r.srcs[0]].shape)
        elif r.op in ELEMENTWISE and r.op not in _NOT_WORK:
            total += math.prod(r.shape)
    return total


def _bytes(g, k) -> int:
    specs = [g.buffers[b] for b in (*k.inputs, k.output)]
    return sum(math.prod(s.shape) * s.dtype.itemsize for s in specs)


def _short(site: str) -> str:
    path, _, rest = site.partition(":")
    return os.path.basename(path) + (":" + rest if rest else "")


def _source_text(site: str) -> str:
    path, _, rest = site.partition(":")
    line = rest.split(" ")[0]
    return "" if not line.isdigit() else linecache.getline(path, int(line)).strip()


def _nest_text(plan, index: int, passes) -> str:
    from ir.loop.lower import lower
    from ir.loop.passes import apply_passes

    k = plan.graph.kernels[index]
    if k.kind == "CUSTOM":  # the source the device runs it from, under its call
        runs = plan.runner.source(index)
        return f"/* {runs[0]} */\n{runs[1]}" if runs else f"CUSTOM {k.result.arg[0]}"
    return str(apply_passes(lower(plan.graph, index), passes))
