"""A plan's steps, and the C driver that runs them in order in one call.

A c device plan is a list of steps, one per kernel: a kernel compiled for the plan's sizes
(``Kernel``), a size-generic kernel called with its sizes (``Generic``), a constant the
plan computed once when it was built (``Constant``), or a CUSTOM kernel (``Custom``: the
fused attention of ``ir/c/sdpa.c``, or a host function a device registered). ``layout``
turns them into the rows of the driver's table (``SOURCE``'s ``limn_step``: which function,
on which buffers, with which integers) and places every intermediate at an offset of one
arena: two buffers share bytes only where no kernel needs both. The c device runs a plan as
one ``limn_drive`` call over that table (``Driver``); ``limn.export_c`` writes the same
table and the same driver into its file. Host functions (a numpy linalg CUSTOM) cut the
table in segments: C runs each, Python the host step between.

``limn_drive(rows, from, to, b, err, ns)`` runs rows [from, to) on the buffers ``b`` (the
buffer table: inputs and outputs bound for the run, intermediates at their arena
offsets), stops at the first row that reports an error in ``err`` and returns ``err[0]``;
``ns`` (or NULL) sums each row's time at 1 + its index, and in ``ns[0]`` the time of the
rows marked ``timed``.
"""

from __future__ import annotations

import bisect
import ctypes
import math
from dataclasses import dataclass

import numpy as np

from ir.c import sdpa
from ir.graph.dtypes import acc_dtype, to_numpy
from limn.runtime.profile import out_of_range

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <time.h>
typedef struct {
  void *fn;            /* the function a row calls (none for a copy) */
  int64_t kind, n;     /* LIMN_KERNEL ... below; how many buffers it is given, */
  const int64_t *args; /* by their index in the plan's buffer table (-1: none, NULL) */
  const int64_t *ints; /* a generic kernel's sizes, attention's dimensions, a copy's bytes */
  double scale;        /* attention's */
  int64_t timed;       /* 1: its time is summed in ns[0] (a quick build waiting to be hot) */
} limn_step;
enum { LIMN_KERNEL, LIMN_GENERIC, LIMN_COPY, LIMN_ATTENTION, LIMN_ATTENTION_GRAD };
typedef void *P;
typedef void (*limn_fwd)(P, P, P, P, P, P, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         double, int, int);
typedef void (*limn_bwd)(P, P, P, P, P, P, P, P, P, P, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, double, int, int, int);
#ifdef _OPENMP
#include <omp.h>
#endif
static int limn_threads = 1; /* attention's tasks and every kernel's team: this many threads */
void limn_driver_threads(int n) {
  limn_threads = n;
#ifdef _OPENMP
  omp_set_num_threads(n); /* one OpenMP runtime: the kernels of every library */
#endif
}
static int64_t limn_ns(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
int64_t limn_drive(const limn_step *rows, int64_t from, int64_t to, P const *b, int64_t *err,
                   int64_t *ns) {
  for (int64_t i = from; i < to && !err[0]; i++) {
    const limn_step *s = &rows[i];
    const int64_t *d = s->ints;
    P a[16 > s->n ? 16 : s->n];
    for (int64_t j = 0; j < s->n; j++) a[j] = s->args[j] < 0 ? NULL : b[s->args[j]];
    int64_t t = ns ? limn_ns() : 0;
    if (s->kind == LIMN_KERNEL) ((void (*)(P const *, int64_t *))s->fn)(a, err);
    else if (s->kind == LIMN_GENERIC)
      ((void (*)(P const *, int64_t *, const int64_t *))s->fn)(a, err, d);
    else if (s->kind == LIMN_COPY) memcpy(a[1], a[0], (size_t)d[0]);
    else if (s->kind == LIMN_ATTENTION)
      ((limn_fwd)s->fn)(a[0], a[1], a[2], a[3], a[4], a[5], d[0], d[1], d[2], d[3], d[4], d[5],
                        s->scale, (int)d[6], limn_threads);
    else { /* mode 0: dq, dk and dv; by one task per head where there are enough heads */
      int mode = d[7] ? (int)d[7] : d[0] >= 2 * limn_threads ? 3 : 1;
      for (; mode; mode = !d[7] && mode == 1 ? 2 : 0)
        ((limn_bwd)s->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], d[0], d[1],
                          d[2], d[3], d[4], d[5], s->scale, (int)d[6], mode, limn_threads);
    }
    int64_t dt = ns ? limn_ns() - t : 0;
    if (ns) ns[1 + i] += dt, ns[0] += s->timed ? dt : 0;
  }
  return err[0];
}
"""
KERNEL, GENERIC, COPY, ATTENTION, ATTENTION_GRAD, HOST = range(6)
ALIGN = 64
# the results of one attention call, in the order the driver passes them: (kernel, output)
OUTPUTS = {
    "fwd": (("sdpa", 0), ("sdpa", 1)),
    "bwd": (("sdpa_bwd_q", 0), ("sdpa_bwd_kv", 0), ("sdpa_bwd_kv", 1)),
}


@dataclass(frozen=True)
class Kernel:
    """A compiled kernel: ``name`` in the library of cache key ``lib`` (whose unit says how
    it was built). With ``sizes``, a size-generic kernel (``ir/c/units.generic``; quick),
    shared by every plan of its structure and called with these sizes; without, one
    compiled for this plan's."""

    lib: str
    name: str
    sizes: tuple[int, ...] | None = None


@dataclass(frozen=True, eq=False)
class Constant:
    """A kernel that computes the same values on every run, computed once at build."""

    value: np.ndarray


@dataclass(frozen=True)
class Custom:
    """A CUSTOM kernel: output ``index`` of the registered ``name`` with ``params``;
    ``part`` is the unit of ``ir/c/sdpa.c`` ("fwd", "bwd") the driver calls, for storage
    ``dtype``, or None for a host function."""

    name: str
    index: int
    params: tuple
    part: str | None = None
    dtype: object = None


@dataclass(frozen=True)
class Row:
    """One call of the driver's table (``SOURCE``'s ``limn_step``)."""

    kind: int
    fn: str  # the C function; "" for a copy or a host step
    args: tuple[int, ...]
    ints: tuple[int, ...] = ()
    scale: float = 0.0
    kernel: int = -1  # the kernel it runs (the first, for a call that serves siblings)


def _nbytes(spec) -> int:
    return math.prod(spec.shape) * spec.dtype.itemsize


def layout(graph, steps, skip=frozenset(), kept=()) -> tuple[list[Row], dict[int, int], int]:
    """The driver's rows for a plan's ``steps``, each buffer's offset in the arena, and the
    arena's size. Inputs and the buffers in ``skip`` are bound per run, not placed. Sinks,
    ASSIGN sources, ``kept`` buffers and constants live through the whole run; any other
    intermediate from the kernel that writes it to the last that reads it."""
    n, sizes = len(graph.kernels), [_nbytes(s) for s in graph.buffers]
    pinned = {s.buffer for s in graph.sinks} | {s.source for s in graph.sinks} | set(kept)
    lives: dict[int, list[int]] = {}
    rows, calls = [], {}
    for i, (k, step) in enumerate(zip(graph.kernels, steps)):
        lives[k.output] = [0, n] if k.output in pinned or isinstance(step, Constant) else [i, i]
        for b in k.inputs:
            life = lives.setdefault(b, [0, n])
            life[1] = max(life[1], i)
        args = (*k.inputs, k.output)
        if isinstance(step, Kernel):
            generic = step.sizes is not None
            rows.append(
                Row(GENERIC if generic else KERNEL, step.name, args, step.sizes or (), kernel=i)
            )
        elif isinstance(step, Custom) and step.part is None:
            rows.append(Row(HOST, "", args, kernel=i))
        elif isinstance(step, Custom):  # one call for every output of it the plan takes
            outs = calls.setdefault((step.part, k.inputs, repr(step.params)), {})
            if not outs:
                rows.append((i, k, step, outs))
            outs[step.name, step.index] = k.output
    rows = [row if isinstance(row, Row) else _attention(*row, sizes, lives) for row in rows]
    for s in (s for s in graph.sinks if s.source is not None):  # the ASSIGNs, at the end
        rows.append(Row(COPY, "", (s.source, s.buffer), (sizes[s.buffer],)))
    placed = {b: life for b, life in lives.items() if b >= graph.n_inputs and b not in skip}
    return (rows, *pack(placed, sizes))


def _attention(i: int, k, step: Custom, outs: dict, sizes: list, lives: dict) -> Row:
    """The call of fused attention's ``step.part`` at kernel ``i`` (``k``), for it and the
    siblings in ``outs``; a result no kernel takes gets scratch bytes of its own (a buffer
    past the graph's)."""
    srcs = [k.inputs[k.rows[r].arg] for r in k.result.srcs]
    srcs += [-1] * ((7 if step.part == "bwd" else 4) - len(srcs))  # no key mask: NULL
    taken, ends = {name for name, _ in outs}, []
    q, key, v = (k.rows[r] for r in k.result.srcs[:3])
    for j, name in enumerate(OUTPUTS[step.part]):
        if name not in outs:
            outs[name], lives[len(sizes)] = len(sizes), [i, i]
            rows, acc = math.prod(q.shape[:-1]), acc_dtype(q.dtype).itemsize
            fwd = (rows * v.shape[-1] * q.dtype.itemsize, rows * max(step.params[2], 1) * acc)
            sizes.append(_nbytes((q, key, v)[j]) if step.part == "bwd" else fwd[j])
        ends.append(outs[name])
    (_, causal, heads), (tq, d), (tk, dv) = step.params, q.shape[-2:], v.shape[-2:]
    dims = [math.prod(q.shape[:-2]), tq, tk, d, dv, 1, int(causal)]
    if heads:  # (B, t, heads * width) rows
        dims[0], dims[3], dims[4], dims[5] = q.shape[0] * heads, d // heads, dv // heads, heads
    if step.part == "bwd":  # 0: dq, dk and dv from one call
        dims.append(0 if len(taken) == 2 else 1 if "sdpa_bwd_q" in taken else 2)
    kind = ATTENTION if step.part == "fwd" else ATTENTION_GRAD
    return Row(kind, sdpa.entry(step.part, q.dtype), (*srcs, *ends), tuple(dims), step.params[0], i)


def pack(lives: dict[int, list[int]], sizes: list[int]) -> tuple[dict[int, int], int]:
    """An offset for each buffer (``lives``: its first and last kernel), at the lowest
    place no buffer alive at the same time holds; and the bytes it all takes. The buffers
    alive through the whole run lie one after another at the bottom; the others go in the
    order they are born, each into the first gap among those still alive (kept by offset),
    so the work grows with the buffers times how many live at once, not their square."""
    top = max((end for _, end in lives.values()), default=0)
    size = {b: -(-max(sizes[b], 1) // ALIGN) * ALIGN for b in lives}
    where, floor = {}, 0
    for b in (b for b in sorted(lives) if lives[b] == [0, top]):
        where[b], floor = floor, floor + size[b]
    used, alive = floor, []  # alive: (offset, bytes, last kernel) of the others, by offset
    for b in sorted(set(lives) - set(where), key=lambda b: (lives[b][0], -sizes[b])):
        alive = [a for a in alive if a[2] >= lives[b][0]]  # (the rest died before b is born)
        at = floor
        for offset, n, _ in alive:  # one sweep up the living: the first gap of its size
            if offset >= at + size[b]:
                break
            at = max(at, offset + n)
        bisect.insort(alive, (at, size[b], lives[b][1]))
        where[b], used = at, max(used, at + size[b])
    return where, used


class _Step(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("kind", ctypes.c_int64), ("n", ctypes.c_int64),
                ("args", ctypes.c_void_p), ("ints", ctypes.c_void_p),
                ("scale", ctypes.c_double), ("timed", ctypes.c_int64)]  # fmt: skip


_BYTES = ctypes.c_char * 0  # a view of an array's bytes, to read its address cheaply


def address(a: np.ndarray) -> int:
    try:  # a writable C-contiguous array (every buffer the runtime makes)
        return ctypes.addressof(_BYTES.from_buffer(a))
    except (TypeError, ValueError):  # read-only, or a dtype without a buffer format
        return a.ctypes.data


class Driver:
    """Runs one plan (``Plan.runner``): its ``steps`` laid out as a ``limn_drive`` table, the
    device's ``function(row)`` giving each row's function (a host step's: a callable of the
    run's arrays) and its quick build's tier, on arenas made once and reused (one per
    thread running the plan at the same time)."""

    def __init__(self, drive, graph, steps, kept, function, target):
        self.drive, self.graph, self.kept, self.target = drive, graph, kept, target
        ks = zip(graph.kernels, steps)
        self.constants = {k.output: s.value for k, s in ks if isinstance(s, Constant)}
        values = {s.buffer: s for s in graph.sinks if s.source is None}
        # a value that is an input or a constant is copied out; the others are written
        # by their kernels into arrays of their own, made for each run
        self.copied = [b for b in values if b < graph.n_inputs or b in self.constants]
        self.bound = [(b, s.shape, to_numpy(s.dtype)) for b, s in values.items()
                      if b not in self.copied]  # fmt: skip
        bound = {b for b, *_ in self.bound}
        self.rows, self.offsets, self.size = layout(graph, steps, bound, kept)
        rows = self.rows
        fns = [function(row) for row in rows]
        # (row, its _Tier) of the quick builds timed to become hot
        self.tiers = [(r, tier) for r, (_, tier) in enumerate(fns) if tier is not None]
        self.table = (_Step * max(1, len(rows)))()
        self.segments, start, self._ints = [], 0, []  # (the ctypes arrays the table reads)
        for r, (row, (fn, tier)) in enumerate(zip(rows, fns)):
            if row.kind == HOST:  # C runs the rows before it, then Python this one
                self.segments.append((start, r, fn))
                start = r + 1
                continue
            args, ints = ((ctypes.c_int64 * max(1, len(x)))(*x) for x in (row.args, row.ints))
            self._ints += [args, ints]
            self.table[r] = _Step(fn, row.kind, len(row.args), ctypes.addressof(args),
                                  ctypes.addressof(ints), row.scale, tier is not None)  # fmt: skip
        self.segments.append((start, len(rows), None))
        self.free: list[tuple] = []
        self.stats = None  # (the profiler, its KernelStat per kernel) while one is active

    def source(self, i: int) -> tuple[str, str] | None:
        """(the call, its unit) of kernel ``i`` where it is fused attention's."""
        k = self.graph.kernels[i]
        return sdpa.kernel_source(k, self.target) if k.kind == "CUSTOM" else None

    def _arena(self) -> tuple:
        """A run's memory: its buffer table, each placed buffer's array, the error record,
        the rows' times, and the bytes (the constants written in once)."""
        g, memory = self.graph, np.empty(self.size + ALIGN, np.uint8)
        base = -address(memory) % ALIGN
        table = (ctypes.c_void_p * (len(g.buffers) + len(self.offsets)))()
        views = {}
        for b, o in self.offsets.items():
            table[b] = address(memory) + base + o
            if b < len(g.buffers):
                spec = g.buffers[b]
                raw = memory[base + o : base + o + _nbytes(spec)]
                views[b] = raw.view(to_numpy(spec.dtype)).reshape(spec.shape)
        for b, value in self.constants.items():
            np.copyto(views[b], value)
        ns = (ctypes.c_int64 * (len(self.rows) + 1))()
        return table, views, (ctypes.c_int64 * 5)(), ns, memory

    def run(self, inputs, keep: bool, prof=None) -> dict[int, np.ndarray]:
        """Run the plan on ``inputs`` (slot order); the arrays of the sinks (and of the kept
        values, with ``keep``) by buffer. The ASSIGNs are written when it returns."""
        arena = self.free.pop() if self.free else self._arena()
        table, views, err, ns, _ = arena
        try:
            out: dict = {}
            for b, a in enumerate(inputs):
                table[b] = address(a)
            for b, shape, dtype in self.bound:
                out[b] = a = np.empty(shape, dtype)
                table[b] = address(a)
            for b in self.copied:
                out[b] = (inputs[b] if b < len(inputs) else views[b]).copy()
            timing = ns if prof is not None or self.tiers else None
            memo: dict = {}  # a host call that serves sibling kernels, made once
            for start, stop, host in self.segments:
                if self.drive(self.table, start, stop, table, err, timing):
                    raise_error(err)
                if host is not None:  # every buffer as an array
                    rest = range(len(inputs), len(self.graph.buffers))
                    host([*inputs, *(out.get(b, views.get(b)) for b in rest)], memo)
            out.update((b, views[b].copy()) for b in self.kept if keep)
            if timing is not None:
                self._timed(ns, prof)
            return out
        finally:
            err[0] = 0
            self.free.append(arena)

    def _timed(self, ns, prof) -> None:
        """Give the profiler each row's time, and the quick builds theirs once they have
        run for the device's ``hot_s`` (or at every run while profiling)."""
        if prof is None and ns[0] < self.tiers[0][1].device.hot_s * 1e9:
            return
        seconds = [ns[1 + r] / 1e9 for r in range(len(self.rows))]
        for row, t in zip(self.rows, seconds) if prof is not None else ():
            if row.kernel >= 0 and row.kind != HOST:
                self.stats[1][row.kernel].seconds += t
                self.stats[1][row.kernel].calls += 1
        for r, tier in self.tiers:
            tier.spend(seconds[r])
            self.table[r].fn = tier.address()
        self.tiers = [(r, tier) for r, tier in self.tiers if tier.spent is not None]
        ctypes.memset(ns, 0, ctypes.sizeof(ns))


def raise_error(err) -> None:
    """The error a kernel reported in its error record ``err``."""
    if err[0] == 2:
        raise MemoryError(f"c device: a kernel could not allocate {int(err[3])} bytes")
    v, axis, size, kind = (int(e) for e in err[1:])
    raise out_of_range(("gather", "scatter")[kind], v, axis, size)
