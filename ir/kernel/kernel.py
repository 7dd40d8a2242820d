"""Stage 2, the kernel graph: which work fuses into which kernel, and which buffers connect them.

A Kernel is one loop nest's worth of work: a fused fragment of the op graph (``rows``, a
small DAG by value, sources before users, the last row the result), the buffers it reads
(``inputs``) and the one buffer it writes (``output``). A KernelGraph lists every buffer,
the kernels in the order they run, and the sinks: how each root of the original graph is
found afterwards, either as a buffer under its own shape (no copy) or, for an ASSIGN, as a
write of one buffer into another once every kernel has run.

Everything here compares by value and hashes, and nothing in it refers to a concrete
buffer: a kernel reads "input slot 0", and the schedule keeps the slot -> node binding on
the side. Two graphs of the same structure therefore give equal kernel graphs, which is
what lets a runtime cache compiled programs by them.

This module also owns the rules the later stages share: ``reindex``, which decides when a
view over a fused computation can be followed by index arithmetic alone (the schedule cuts
where it cannot, the lowering uses its answer), ``reduce_identity``, ``scan_identity``,
and ``constant_kernels``, the kernels a device may compute once when it builds a plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.node import format_arg
from ir.graph.ops import Op
from ir.graph.view import View

KINDS = ("MAP", "SUM", "MAX", "SCAN", "SCATTER", "ARGSORT", "CUSTOM")


@dataclass(frozen=True)
class BufferSpec:
    """The bytes a buffer holds: a dtype and a row-major shape."""

    dtype: DType
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def arg_key(op: Op, arg) -> object:
    """A by-value key for a row's argument.

    Python floats compare in ways a cache key must not: nan != nan (so a graph holding a
    nan constant would never hit the cache), and 0.0 == -0.0 (so it could hit the wrong
    entry). repr tells all of them apart and round-trips every float exactly.
    """
    if op == Op.CONST:
        return (type(arg).__name__, repr(arg))
    if op == Op.CUSTOM:
        name, out, params = arg
        return (name, out, repr(params))
    return arg


@dataclass(frozen=True)
class Row:
    """One op of a kernel's fused body; ``srcs`` index earlier rows of the same kernel.

    A BUFFER row is a read of the kernel's input ``arg`` (in0, in1, ...), read
    contiguously under the row's shape. Other rows carry their op-graph argument.
    """

    op: Op
    dtype: DType
    shape: tuple[int, ...]
    srcs: tuple[int, ...] = ()
    arg: object = field(default=None, compare=False)
    key: object = field(default=None, init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "key", arg_key(self.op, self.arg))


@dataclass(frozen=True)
class Kernel:
    """One loop nest: ``kind`` says what shape of nest (MAP, SUM, MAX, SCAN, SCATTER, ARGSORT,
    CUSTOM)."""

    kind: str
    rows: tuple[Row, ...]
    inputs: tuple[int, ...]  # kernel-graph buffer ids read, as in0, in1, ...
    output: int  # kernel-graph buffer id written, as out

    @property
    def result(self) -> Row:
        return self.rows[-1]

    @property
    def loop_shape(self) -> tuple[int, ...]:
        """The dims the nest walks: the reduce's source for SUM/MAX, the index for SCATTER."""
        r = self.result
        if self.kind in ("SUM", "MAX"):
            return self.rows[r.srcs[0]].shape
        return self.rows[r.srcs[1]].shape if self.kind == "SCATTER" else r.shape


@dataclass(frozen=True)
class Sink:
    """Where root ``i`` of the graph lives after the run.

    Without ``source``: buffer ``buffer`` read under ``shape`` (same bytes, maybe another
    shape, never a copy). With ``source``: an ASSIGN, which copies buffer ``source`` into
    buffer ``buffer`` after every kernel has run, and is then that buffer.
    """

    buffer: int
    dtype: DType
    shape: tuple[int, ...]
    source: int | None = None


@dataclass(frozen=True)
class KernelGraph:
    """Buffers (graph inputs first, by slot), kernels in run order, and one sink per root."""

    buffers: tuple[BufferSpec, ...]
    n_inputs: int
    kernels: tuple[Kernel, ...]
    sinks: tuple[Sink, ...]

    def __str__(self) -> str:
        return format_kernel_graph(self)


# ---- the rules later stages share ---------------------------------------------------


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array, size-1 dims included (unlike a View's)."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


@lru_cache(maxsize=1 << 14)  # the schedule and the lowering ask it of every view, often alike
def reindex(view: View, src_shape: tuple[int, ...]):
    """Follow ``view`` onto the dims of ``src_shape`` with index arithmetic alone.

    Returns, for each source dim k, ``(const_k, coeffs_k)`` such that for every index
    ``idx`` of the view whose mask holds, the element read is the source element at
    ``const_k + sum(coeffs_k[d] * idx[d])`` along each dim k. Returns None when no such
    linear map exists (a reshape that merges dims needs division and remainder, which the
    loop-nest index expressions do not have); the schedule then stores the source in a
    buffer and the view reads that buffer's flat address instead.
    """
    nd, ns = len(view.shape), len(src_shape)
    if view.size == 0 or view.is_empty_mask:
        return tuple((0, (0,) * nd) for _ in range(ns))
    box = view.mask if view.mask is not None else tuple((0, s) for s in view.shape)
    corner = view.offset + sum(lo * st for (lo, _), st in zip(box, view.strides))
    if not 0 <= corner < math.prod(src_shape):
        return None
    rms = row_major_strides(src_shape)
    start, rest = [], corner
    for st in rms:
        start.append(rest // st)
        rest %= st
    coeffs = [[0] * nd for _ in range(ns)]
    for d, st in enumerate(view.strides):
        lo, hi = box[d]
        if st == 0 or hi - lo <= 1:
            continue
        # the widest source dim whose stride divides this one (mixed-radix digit)
        cands = [k for k in range(ns) if src_shape[k] > 1 and abs(st) % rms[k] == 0]
        if not cands:
            return None
        k = min(cands)
        coeffs[k][d] += st // rms[k]
    out = []
    for k in range(ns):
        lo_e = hi_e = start[k]
        for d, c in enumerate(coeffs[k]):
            span = c * (box[d][1] - 1 - box[d][0])
            lo_e += min(0, span)
            hi_e += max(0, span)
        if lo_e < 0 or hi_e >= src_shape[k]:
            return None
        const = start[k] - sum(c * box[d][0] for d, c in enumerate(coeffs[k]))
        out.append((const, tuple(coeffs[k])))
    return tuple(out)


def reduce_identity(op: Op, dtype: DType):
    """The value a reduce starts from: 0 for SUM, the dtype's lowest value for MAX."""
    if op == Op.SUM:
        return dtypes.python_type(dtype)(0)
    if op == Op.MAX:
        return dtypes.min_value(dtype)
    raise ValueError(f"reduce_identity: {op.value} is not a reduce; accepted: SUM, MAX")


def scan_identity(combine: Op, dtype: DType):
    """The value a SCAN's accumulator starts from, which its first element leaves unchanged
    bit for bit: -0.0 for a float ADD (0.0 + -0.0 would lose the sign), 0, 1, the lowest."""
    if combine == Op.ADD:
        return -0.0 if dtype.is_float else dtypes.python_type(dtype)(0)
    if combine == Op.MUL:
        return dtypes.python_type(dtype)(1)
    if combine == Op.MAX:
        return dtypes.min_value(dtype)
    raise ValueError(f"scan_identity: {combine.value} is not a scan; accepted: ADD, MUL, MAX")


CONSTANT_CELLS = 1 << 16  # the most elements a kernel computed at plan build may loop over


def constant_kernels(graph: KernelGraph) -> frozenset[int]:
    """The kernels whose output is the same on every run: integer work on constants.

    A kernel qualifies when every buffer it reads was written by such a kernel (the first
    ones read none: positions, direction masks, an ``arange`` whose reshape was cut), every
    row is integer or bool (exact, so any evaluation gives the bits a compiled kernel
    would), it indexes nothing by data (no GATHER or SCATTER: their range checks belong to
    the run) and it loops over at most CONSTANT_CELLS elements. A device may compute these
    once, on the host, when it builds the plan, instead of compiling them.
    """
    made: set[int] = set()
    out = []
    for i, k in enumerate(graph.kernels):
        if k.kind == "CUSTOM" or not all(b in made for b in k.inputs):
            continue
        if any(r.dtype.kind in "fc" or r.op in (Op.GATHER, Op.SCATTER) for r in k.rows):
            continue
        if math.prod(k.loop_shape) > CONSTANT_CELLS:
            continue
        made.add(k.output)
        out.append(i)
    return frozenset(out)


# ---- text ---------------------------------------------------------------------------


def buffer_lines(graph: KernelGraph, k: Kernel) -> list[str]:
    """The ``in0 = buf0  float32[4, 5]`` lines of a kernel's header."""
    lines = [f"    in{i} = buf{b}  {graph.buffers[b]}" for i, b in enumerate(k.inputs)]
    lines.append(f"    out = buf{k.output}  {graph.buffers[k.output]}")
    return lines


def sink_lines(graph: KernelGraph) -> list[str]:
    lines = []
    for i, s in enumerate(graph.sinks):
        what = f"buf{s.buffer}" if s.source is None else f"assign buf{s.buffer} <- buf{s.source}"
        lines.append(f"sink {i} = {what}  {s.dtype}{list(s.shape)}")
    return lines


def kernel_title(i: int, k: Kernel) -> str:
    if k.kind == "CUSTOM":
        name, out, params = k.result.arg
        shown = f"  {params}" if params else ""
        return f"k{i}  CUSTOM  {name}[{out}]{shown}"
    return f"k{i}  {k.kind}  loop{list(k.loop_shape)}"


def format_kernel_graph(graph: KernelGraph) -> str:
    """Stage 2 as text: each kernel's buffers and its fused rows, then the sinks."""
    blocks = []
    for i, k in enumerate(graph.kernels):
        lines = [kernel_title(i, k), *buffer_lines(graph, k)]
        for j, r in enumerate(k.rows):
            srcs = " ".join(f"%{s}" for s in r.srcs)
            if r.op == Op.BUFFER:
                arg = f"in{r.arg}"
            elif r.op == Op.CUSTOM:
                arg = ""
            else:
                arg = format_arg(r)  # a Row has the op and arg it reads
            parts = [f"    %{j} = {r.op.value:<10} {r.dtype}{list(r.shape)}"]
            if srcs:
                parts.append(srcs)
            if arg:
                parts.append(f"({arg})")
            lines.append("  ".join(parts))
        blocks.append("\n".join(lines))
    return "\n\n".join([*blocks, "\n".join(sink_lines(graph))])
