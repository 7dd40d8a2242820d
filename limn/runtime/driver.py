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
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field

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
  int64_t kind;        /* LIMN_KERNEL ... below */
  int64_t n;           /* the buffers it is given, */
  const int64_t *args; /* by their index in the plan's buffer table (-1: none, NULL) */
  const int64_t *ints; /* a generic kernel's sizes, attention's dimensions, a copy's bytes */
  double scale;        /* attention's */
  int64_t timed;       /* 1: its time is summed in ns[0] (a quick build waiting to be hot) */
} limn_step;
enum { LIMN_KERNEL, LIMN_GENERIC, LIMN_COPY, LIMN_ATTENTION, LIMN_ATTENTION_GRAD };
typedef void (*limn_kernel)(void *const *, int64_t *);
typedef void (*limn_generic)(void *const *, int64_t *, const int64_t *);
typedef void (*limn_fwd)(void *, void *, void *, void *, void *, void *, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, double, int, int);
typedef void (*limn_bwd)(void *, void *, void *, void *, void *, void *, void *, void *, void *,
                         void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, double,
                         int, int, int);
static int limn_threads = 1; /* attention's tasks run on this many threads */
void limn_driver_threads(int n) { limn_threads = n; }
static int64_t limn_ns(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
/* Run rows [from, to) on the buffers b; ns (or NULL) sums each row's time at 1 + its index.
   Stops at the first row that reports an error in err; returns err[0]. */
int64_t limn_drive(const limn_step *rows, int64_t from, int64_t to, void *const *b,
                   int64_t *err, int64_t *ns) {
  for (int64_t i = from; i < to && !err[0]; i++) {
    const limn_step *s = &rows[i];
    const int64_t *d = s->ints;
    void *a[16 > s->n ? 16 : s->n];
    for (int64_t j = 0; j < s->n; j++) a[j] = s->args[j] < 0 ? NULL : b[s->args[j]];
    int64_t t = ns ? limn_ns() : 0;
    if (s->kind == LIMN_KERNEL) ((limn_kernel)s->fn)(a, err);
    else if (s->kind == LIMN_GENERIC) ((limn_generic)s->fn)(a, err, d);
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
    if (ns) {
      int64_t dt = limn_ns() - t;
      ns[1 + i] += dt;
      ns[0] += s->timed ? dt : 0;
    }
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
    """A kernel compiled for this plan's sizes: ``name`` in the library of cache key ``lib``,
    from a unit of small kernels built by the quick compiler (``quick``) or at -O3."""

    lib: str
    name: str
    quick: bool


@dataclass(frozen=True)
class Generic:
    """A size-generic kernel (``ir/c/units.generic``), shared by every plan of its
    structure, called with this kernel's ``sizes``."""

    lib: str
    name: str
    sizes: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Constant:
    """A kernel that computes the same values on every run, computed once at build."""

    value: np.ndarray


@dataclass(frozen=True)
class Custom:
    """A CUSTOM kernel: output ``index`` of the registered ``name`` with ``params``;
    ``part`` is the unit of ``ir/c/sdpa.c`` ("fwd", "bwd") the driver calls, or None for
    a host function."""

    name: str
    index: int
    params: tuple
    part: str | None = None


@dataclass(frozen=True)
class Row:
    """One call of the driver's table (``SOURCE``'s ``limn_step``)."""

    kind: int
    fn: str  # the C function; "" for a copy
    lib: str | None  # the library's cache key (None: attention's unit, or a host step)
    args: tuple[int, ...]
    ints: tuple[int, ...] = ()
    scale: float = 0.0
    kernel: int = -1  # the kernel it runs (the first, for a call that serves siblings)
    quick: bool = False


def attention_part(k) -> str | None:
    """The unit of ``sdpa.c`` that runs CUSTOM kernel ``k``, where its dtypes are the
    ones that unit reads (its accumulators at ``acc_dtype``); else None."""
    name = k.result.arg[0]
    part, q = sdpa.KERNELS.get(name), k.rows[k.result.srcs[0]]
    if part is None or q.dtype not in sdpa.DTYPES:
        return None
    stats = [k.rows[r].dtype for r in k.result.srcs[4:6]] if part == "bwd" else []
    return part if all(d == acc_dtype(q.dtype) for d in stats) else None


def _dims(k) -> list[int]:
    """bh, t_q, t_k, d, dv, heads and causal of attention kernel ``k``'s call."""
    (_, causal, heads), srcs = k.result.arg[2], k.result.srcs
    q, v = k.rows[srcs[0]].shape, k.rows[srcs[2]].shape
    bh, (tq, d), (tk, dv) = math.prod(q[:-2]), q[-2:], v[-2:]
    if heads:  # (B, t, heads * width) rows
        bh, d, dv = q[0] * heads, d // heads, dv // heads
    return [bh, tq, tk, d, dv, max(heads, 1), int(causal)]


def _nbytes(spec) -> int:
    return math.prod(spec.shape) * spec.dtype.itemsize


def layout(graph, steps, skip=frozenset(), kept=()) -> tuple[list[Row], dict[int, int], int]:
    """The driver's rows for a plan's ``steps``, each buffer's offset in the arena, and the
    arena's size. Inputs and the buffers in ``skip`` are bound per run, not placed. Sinks,
    ASSIGN sources, ``kept`` buffers and constants live through the whole run; any other
    intermediate from the kernel that writes it to the last that reads it. An attention
    output no kernel of the plan takes gets scratch bytes of its own (a buffer past the
    graph's)."""
    n, sizes = len(graph.kernels), [_nbytes(s) for s in graph.buffers]
    pinned = {s.buffer for s in graph.sinks} | {s.source for s in graph.sinks} | set(kept)
    lives: dict[int, list[int]] = {}
    rows, groups = [], {}
    for i, (k, step) in enumerate(zip(graph.kernels, steps)):
        lives[k.output] = [0, n] if k.output in pinned or isinstance(step, Constant) else [i, i]
        for b in k.inputs:
            life = lives.setdefault(b, [0, n])
            life[1] = max(life[1], i)
        args = (*k.inputs, k.output)
        if isinstance(step, Kernel):
            rows.append(Row(KERNEL, step.name, step.lib, args, kernel=i, quick=step.quick))
        elif isinstance(step, Generic):
            rows.append(Row(GENERIC, step.name, step.lib, args, step.sizes, kernel=i, quick=True))
        elif isinstance(step, Custom) and step.part is None:
            rows.append(Row(HOST, "", None, args, kernel=i))
        elif isinstance(step, Custom):  # one call for every output of it the plan takes
            group = (step.part, k.inputs, repr(step.params))
            if group not in groups:
                groups[group] = {}
                order = [k.inputs[k.rows[r].arg] for r in k.result.srcs]
                rows.append((i, k, step, order, groups[group]))
            groups[group][(step.name, step.index)] = k.output
    out = []
    for row in rows:
        if isinstance(row, Row):
            out.append(row)
            continue
        i, k, step, order, outs = row
        srcs = order + [-1] * (7 - len(order) if step.part == "bwd" else 4 - len(order))
        names = OUTPUTS[step.part]
        taken = {name for name, _ in outs}
        for j, key in enumerate(names):
            if key not in outs and key[0] in taken | {"sdpa"}:  # a result no kernel takes
                outs[key] = len(sizes)
                sizes.append(_scratch(k, j, step.part))
                lives[outs[key]] = [i, i]
        ends = [outs.get(key, -1) for key in names]
        dims = _dims(k) + ([0 if len(taken) == 2 else 1 if "sdpa_bwd_q" in taken else 2]
                           if step.part == "bwd" else [])  # fmt: skip
        kind = ATTENTION if step.part == "fwd" else ATTENTION_GRAD
        fn = sdpa.entry(step.part, k.rows[k.result.srcs[0]].dtype)
        out.append(Row(kind, fn, None, (*srcs, *ends), tuple(dims), step.params[0], i))
    for s in graph.sinks:  # the ASSIGNs, after every value exists
        if s.source is not None:
            out.append(Row(COPY, "", None, (s.source, s.buffer), (sizes[s.buffer],)))
    placed = {b: life for b, life in lives.items() if b >= graph.n_inputs and b not in skip}
    return (out, *pack(placed, sizes))


def _scratch(k, j: int, part: str) -> int:
    """Bytes of result ``j`` of attention kernel ``k``'s call (fwd: o, lse; bwd: dq, dk, dv)."""
    q, _, v = (k.rows[r] for r in k.result.srcs[:3])
    rows, heads = math.prod(q.shape[:-1]), max(k.result.arg[2][2], 1)
    width = {"fwd": (v.shape[-1], heads), "bwd": (q.shape[-1],) * 3}[part][j]
    item = acc_dtype(q.dtype).itemsize if (part, j) == ("fwd", 1) else q.dtype.itemsize
    if part == "bwd" and j:  # dk, dv: the keys' rows
        rows, width = math.prod(v.shape[:-1]), (k.rows[k.result.srcs[1]], v)[j - 1].shape[-1]
    return rows * width * item


def pack(lives: dict[int, list[int]], sizes: list[int]) -> tuple[dict[int, int], int]:
    """An offset for each buffer (``lives``: its first and last kernel), at the lowest
    place no buffer alive at the same time holds; and the bytes it all takes."""
    placed, where = [], {}
    for b in sorted(lives, key=lambda b: (lives[b][0], -sizes[b])):
        (start, end), size = lives[b], -(-max(sizes[b], 1) // ALIGN) * ALIGN
        near = [(o, s) for st, en, o, s in placed if st <= end and start <= en]
        fits = (o for o in sorted({0, *(o + s for o, s in near)}))
        where[b] = next(o for o in fits if all(o + size <= c or o >= c + s for c, s in near))
        placed.append((start, end, where[b], size))
    return where, max((o + s for *_, o, s in placed), default=0)


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


@dataclass
class _Arena:
    """One run's memory: the plan's intermediates, its buffer table, error record, times."""

    memory: np.ndarray
    table: ctypes.Array
    views: dict  # buffer -> its array in the memory (constants, kept values)
    err: ctypes.Array = field(default_factory=ctypes.c_int64 * 5)
    ns: ctypes.Array | None = None


class Driver:
    """Runs one plan: its rows as a ``limn_drive`` table with the function addresses
    ``fns`` (a host step's: a callable of the run's arrays), arenas made once and reused
    (one per thread running the plan at the same time)."""

    def __init__(self, drive, graph, rows, fns, offsets, size, constants, kept, tiers=()):
        self.drive, self.graph, self.rows, self.offsets, self.size = (
            drive,
            graph,
            rows,
            offsets,
            size,
        )
        self.constants, self.kept = constants, kept
        self.tiers = list(tiers)  # (row, its _Tier) of quick builds timed to become hot
        self.table = (_Step * max(1, len(rows)))()
        self._keep = []  # the ctypes arrays the table points into
        self.hosts, self.segments, start = {}, [], 0
        for r, (row, fn) in enumerate(zip(rows, fns)):
            if row.kind == HOST:
                self.hosts[r] = fn
                self.segments.append((start, r, fn))
                start = r + 1
                continue
            args, ints = ((ctypes.c_int64 * max(1, len(x)))(*x) for x in (row.args, row.ints))
            self._keep += [args, ints]
            self.table[r] = _Step(fn, row.kind, len(row.args), ctypes.addressof(args),
                                  ctypes.addressof(ints), row.scale, int(row.quick))  # fmt: skip
        self.segments.append((start, len(rows), None))
        g = graph
        values = [s for s in g.sinks if s.source is None]
        self.copied = [s.buffer for s in values if s.buffer < g.n_inputs or s.buffer in constants]
        self.bound = [(s.buffer, s.shape, to_numpy(s.dtype)) for s in values
                      if s.buffer not in self.copied]  # fmt: skip
        self.bound = list({b[0]: b for b in self.bound}.values())
        self.free: list[_Arena] = []
        self.stats = None  # the profiler's KernelStat per kernel, while one is active

    def _arena(self) -> _Arena:
        g = self.graph
        memory = np.empty(self.size + ALIGN, np.uint8)
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
        return _Arena(memory, table, views, ns=ns)

    def run(self, inputs, keep: bool, prof=None) -> dict[int, np.ndarray]:
        """Run the plan on ``inputs`` (slot order); the arrays of the sinks (and of the kept
        values, with ``keep``) by buffer. The ASSIGNs are written when it returns."""
        arena = self.free.pop() if self.free else self._arena()
        try:
            table, out = arena.table, {}
            for b, a in enumerate(inputs):
                table[b] = address(a)
            for b, shape, dtype in self.bound:
                out[b] = a = np.empty(shape, dtype)
                table[b] = address(a)
            for b in self.copied:
                out[b] = (inputs[b] if b < len(inputs) else arena.views[b]).copy()
            ns = arena.ns if prof is not None or self.tiers else None
            memo: dict = {}  # a host call that serves sibling kernels, made once
            for start, stop, host in self.segments:
                if self.drive(self.table, start, stop, table, arena.err, ns):
                    _raise(arena.err)
                if host is not None:
                    host(self._arrays(arena, inputs, out), memo)
            if keep:
                for b in self.kept:
                    out[b] = arena.views[b].copy()
            if ns is not None:
                self._timed(arena.ns, prof)
            return out
        finally:
            arena.err[0] = 0
            self.free.append(arena)

    def _arrays(self, arena, inputs, out) -> list:
        """Every buffer as an array, for a host step."""
        n = len(self.graph.buffers)
        return [*inputs] + [out.get(b, arena.views.get(b)) for b in range(len(inputs), n)]

    def _timed(self, ns, prof) -> None:
        """Give the profiler each row's time, and the quick builds theirs once they have
        run for the device's ``hot_s`` (or at every run while profiling)."""
        if prof is None and ns[0] < self.tiers[0][1].device.hot_s * 1e9:
            return
        seconds = [ns[1 + r] / 1e9 for r in range(len(self.rows))]
        if prof is not None:
            for row, t in zip(self.rows, seconds):
                if row.kernel >= 0 and row.kind != HOST:
                    stat = self.stats[1][row.kernel]
                    stat.seconds += t
                    stat.calls += 1
        for r, tier in self.tiers:
            tier.spend(seconds[r])
            self.table[r].fn = tier.address()
        self.tiers = [(r, tier) for r, tier in self.tiers if tier.spent is not None]
        ctypes.memset(ns, 0, ctypes.sizeof(ns))


def _raise(err) -> None:
    if err[0] == 2:
        raise MemoryError(f"c device: a kernel could not allocate {int(err[3])} bytes")
    v, axis, size, kind = (int(e) for e in err[1:])
    raise out_of_range(("gather", "scatter")[kind], v, axis, size)
