"""The lower pass: one kernel (stage 2) -> one loop nest (stage 3). A pure function.

Lowering walks the kernel's fused rows from the result down, asking "what is row r at
index (e0, e1, ...)?" where each e is an Index over the loop variables. A VIEW answers by
index arithmetic: over a buffer it is one address, ``offset + sum(e_d * stride_d)``; over a
fused computation it re-indexes that computation's dims (``kernel.reindex``). A pad adds a
Range predicate: loads under it read 0 where it fails, and a fused value under it is
selected against 0 by MASK and WHERE. Predicates that hold, or fail, for every iteration
are settled here and never printed. A GATHER loads its index, CHECKs it, and uses it as a
term of the source's address.

Dtypes are explicit: half-width floats are loaded, then CAST to float32; arithmetic runs in
``dtypes.compute_dtype``, and every node whose dtype is a half width rounds to it (a CAST
there and back) before its users see it, as the numpy reference rounds after each node;
the value is rounded to the buffer's dtype once more, a no-op then, before it is stored.

A SCAN keeps its running value in a register accumulator of the output's dtype, the scan
axis innermost, and stores it every step. An ARGSORT is one loop over the rows of its
keys (contiguous buffers: the schedule stores them), each row one SORT.

The nest comes out in the kernel's own dim order, which the passes then improve. A reduce
whose running total has the output's dtype is written as "fill the output with the
identity, then ACCUM into it", which stays correct under any loop order; one whose total
is wider (a half-width SUM keeps it in float32) keeps it in a register with the reduce
loops innermost, since rounding into the buffer at every step would change the answer.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ir.graph.dtypes import DType, acc_dtype, compute_dtype, float32, float64, python_type, to_numpy
from ir.graph.ops import ELEMENTWISE, Op
from ir.graph.view import contiguous_strides
from ir.kernel.kernel import Kernel, KernelGraph, reduce_identity, reindex, scan_identity
from ir.loop.nest import (
    Accum,
    Arith,
    Check,
    Const,
    DefAcc,
    Index,
    Load,
    Loop,
    LoopNest,
    Mask,
    Range,
    Sort,
    Store,
)
from ir.loop.rewrite import defines, kind_of, value_dtype

# ops whose result a half width already holds exactly when its operands do: no rounding
EXACT_AT_ANY_WIDTH = frozenset({Op.NEG, Op.WHERE})


def lower(graph: KernelGraph, i: int) -> LoopNest:
    """The loop nest of kernel ``i`` of ``graph``."""
    k = graph.kernels[i]
    if k.kind == "CUSTOM":
        raise ValueError(f"lower: k{i} is a CUSTOM kernel ({k.result.arg[0]}); a device runs it")
    return _Lowering(k).nest(graph, i)


def _flat(idx: tuple[Index, ...], strides: tuple[int, ...], offset: int = 0) -> Index:
    """``offset + sum(e * stride)``, summed in one pass (the lowering's hottest arithmetic).

    The same Index as adding the terms one dim at a time, term order included, unless two
    loop variables share a dim number (``i1`` and ``r1``, which no kernel's nest has):
    their order would then depend on the order of addition, so that case adds in turn."""
    coeff: dict[str, int] = {}
    const = offset
    for e, st in zip(idx, strides):
        if st:
            if e.scaled:
                coeff = {}
                break
            const += e.const * st
            for name, c in e.terms:
                coeff[name] = coeff.get(name, 0) + c * st
    else:
        dims = [n[1:] for n in coeff if n[0] in "ir"]
        if len(set(dims)) == len(dims):
            return Index.of(coeff.items(), const)
    out = Index((), offset)
    for e, st in zip(idx, strides):
        if st:
            out = out + e * st
    return out


class _Lowering:
    """The state of lowering one kernel: instructions so far, names, and what is known."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.rows = kernel.rows
        self.body: list = []  # the body being written: the innermost open loop's
        self.open_loops: list[tuple[Loop, list]] = []  # each open loop, and the body around it
        self.n_values = 0
        self.n_accs = 0
        self.memo: dict = {}
        self.dtype_of: dict[str, DType] = {}
        self.widened_from: dict[str, tuple[DType, str]] = {}  # exact float widenings
        self.ranges: dict[str, tuple[int, int]] = {}  # inclusive bounds of each index name
        self.row: int | None = len(kernel.rows) - 1  # the row being lowered, tagged on each ins
        self.names: list[str] = []  # a size-generic nest's run-time sizes

    # a kernel kind -> the method that lowers it
    KINDS = {"MAP": "map_kernel", "SUM": "reduce_kernel", "MAX": "reduce_kernel",
             "SCAN": "scan_kernel", "SCATTER": "scatter_kernel",
             "ARGSORT": "sort_kernel"}  # fmt: skip

    def nest(self, graph: KernelGraph, i: int) -> LoopNest:
        """Lower kernel ``i`` (this lowering's) by its kind into a nest."""
        k = self.kernel
        if k.kind not in self.KINDS:
            raise ValueError(f"lower: unknown kernel kind {k.kind!r}")
        getattr(self, self.KINDS[k.kind])()
        inputs, out = tuple(graph.buffers[b] for b in k.inputs), graph.buffers[k.output]
        return LoopNest(
            f"k{i}", k.kind, k.loop_shape, inputs, out, tuple(self.body), tuple(self.names)
        )

    # ---- emission ----------------------------------------------------------------

    def emit(self, ins) -> str | None:
        if isinstance(ins, Loop):  # its body is what is emitted until it is closed
            self.open_loops.append((ins, self.body))
            self.body = []
            return None
        if self.row is not None:
            # ``ins`` was made for this call and nothing else holds it yet: its provenance
            # is set in place (``replace`` would build it twice; row takes no part in
            # equality or hashing)
            object.__setattr__(ins, "row", self.row)
        self.body.append(ins)
        out = defines(ins)
        if out is not None:
            self.dtype_of[out] = value_dtype(ins)
        return out

    def fresh(self) -> str:
        self.n_values += 1
        return f"v{self.n_values - 1}"

    def open(self, names: list[str], extents: list[int]) -> tuple[Index, ...]:
        self.memo = {}  # values of an earlier nest are out of scope in this one
        for name, n in zip(names, extents):
            self.emit(Loop(name, n))
            self.ranges[name] = (0, n - 1)
        return tuple(Index.var(n) for n in names)

    def close(self, names: list[str]) -> None:
        for _ in names:
            loop, around = self.open_loops.pop()
            loop = replace(loop, body=tuple(self.body))
            around.append(replace(loop, kind=kind_of(loop)))
            self.body = around

    def cast(self, v: str, d: DType) -> str:
        if self.dtype_of[v] == d:
            return v
        if self.widened_from.get(v, (None,))[0] == d:
            return self.widened_from[v][1]  # narrowing an exact widening gives the original
        out = self.emit(Arith(self.fresh(), Op.CAST, (v,), d))
        src = self.dtype_of[v]
        if src.is_float and d in (float32, float64) and src.itemsize < d.itemsize:
            self.widened_from[out] = (src, v)
        return out

    def widen(self, v: str) -> str:
        return self.cast(v, compute_dtype(self.dtype_of[v]))

    def const(self, value, d: DType) -> str:
        cd = compute_dtype(d)
        if cd != d:  # the literal a half width can hold, written at compute width
            value = float(np.array(value, to_numpy(d)).astype(np.float32))
        return self.emit(Const(self.fresh(), value, cd))

    def constant(self, value, d: DType) -> str:
        """A CONST row of the kernel (the program's own constant, not the lowering's)."""
        return self.const(value, d)

    def zero(self, d: DType) -> str:
        return self.const(python_type(d)(0), d)

    # ---- what is known about index expressions -----------------------------------

    def bounds(self, idx: Index) -> tuple[int, int] | None:
        lo = hi = idx.const
        for name, c in idx.terms:
            a, b = self.ranges[name]
            if a > b:
                return None  # an empty loop: nothing inside it runs
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        return lo, hi

    def known_in(self, name: str, size: int) -> None:
        """After ``CHECK 0 <= name < size`` passes (one value may feed several gathers)."""
        lo, hi = self.ranges.get(name, (0, size - 1))
        self.ranges[name] = (lo, min(hi, size - 1))

    def settle(self, p: Range) -> Range | bool:
        """True or False when ``p`` is decided for every iteration, else ``p`` narrowed to
        the values its index can take (``0 <= i0 < 9`` over ``i0 < 4`` reads ``i0 < 4``)."""
        b = self.bounds(p.index)
        if b is None:
            return p
        if b[0] >= p.lo and b[1] < p.hi:
            return True
        if b[1] < p.lo or b[0] >= p.hi:
            return False
        return Range(p.index, max(p.lo, b[0]), min(p.hi, b[1] + 1))

    # ---- addresses and pads (where the sizes enter) --------------------------------

    def flat(self, idx: tuple[Index, ...], strides: tuple[int, ...], offset: int = 0) -> Index:
        """The address of ``idx`` in memory laid out by ``strides`` from ``offset``."""
        return _flat(idx, strides, offset)

    def bound(self, n: int) -> int:
        """A CHECK's size (the extent a gathered or scattered index must stay below)."""
        return n

    def next_nest(self) -> None:
        """A kernel's second nest starts, over other loops (a scatter's index loops)."""

    def pad(self, v, idx: tuple[Index, ...]) -> list[Range] | None:
        """The predicates of ``v``'s mask that are not settled at ``idx``; None where the
        view reads only pad (its value is 0 everywhere)."""
        if v.is_empty_mask:
            return None
        preds = []
        for d, (lo, hi) in enumerate(v.mask or ()):
            if (lo, hi) == (0, v.shape[d]):
                continue
            p = self.settle(Range(idx[d], lo, hi))
            if p is False:
                return None
            if p is not True:
                preds.append(p)
        return preds

    # ---- values -------------------------------------------------------------------

    def value(self, ri: int, idx: tuple[Index, ...], guard: tuple[Range, ...]) -> str:
        """The name holding row ``ri`` at ``idx``, in its compute dtype.

        Each row's rule is a generator that yields the (row, index, guard) it needs and
        receives the name back; this loop runs them with an explicit stack, so a fused
        chain thousands of ops deep lowers without Python recursion.
        """
        key = (ri, idx, guard)
        if key in self.memo:
            return self.memo[key]
        stack = [(key, self.rule(*key))]
        reply = None
        caller = self.row
        while True:
            k, gen = stack[-1]
            self.row = k[0]
            try:
                need = gen.send(reply)
            except StopIteration as done:
                self.memo[k] = reply = done.value
                stack.pop()
                if not stack:
                    self.row = caller
                    return reply
                continue
            if need in self.memo:
                reply = self.memo[need]
            else:
                stack.append((need, self.rule(*need)))
                reply = None

    def rule(self, ri: int, idx: tuple[Index, ...], guard: tuple[Range, ...]):
        row = self.rows[ri]
        if row.op == Op.BUFFER:
            return self.load(
                row.arg, row.dtype, self.flat(idx, contiguous_strides(row.shape)), guard
            )
        if row.op == Op.CONST:
            return self.constant(row.arg, row.dtype)
        if row.op == Op.VIEW:
            return (yield from self.view(row, idx, guard))
        if row.op == Op.GATHER:
            return (yield from self.gather(row, idx, guard))
        if row.op in ELEMENTWISE:
            srcs = []
            for s in row.srcs:
                srcs.append((yield (s, idx, guard)))
            return self.arith(row, srcs)
        raise NotImplementedError(f"lower: {row.op.value} cannot be fused into a kernel")

    def load(self, slot: int, d: DType, addr: Index, guard: tuple[Range, ...]) -> str:
        v = self.emit(Load(self.fresh(), f"in{slot}", addr, d, guard))
        return self.widen(v)

    def view(self, row, idx, guard):
        v, si = row.arg, row.srcs[0]
        src = self.rows[si]
        preds = self.pad(v, idx)
        if preds is None:
            return self.zero(row.dtype)
        inner = guard + tuple(preds)
        if src.op == Op.BUFFER:  # a masked load is already 0 in the pad
            return self.load(src.arg, src.dtype, self.flat(idx, v.strides, v.offset), inner)
        if src.op == Op.CONST:
            val = yield (si, (), inner)
        else:
            split = reindex(v, src.shape)
            if split is None:
                raise ValueError(f"lower: {v} cannot be followed onto {src.shape} by arithmetic")
            sidx = tuple(_flat(idx, coeffs, const) for const, coeffs in split)
            val = yield (si, sidx, inner)
        if not preds:
            return val
        m = self.emit(Mask(self.fresh(), tuple(preds)))
        z = self.zero(row.dtype)
        return self.emit(Arith(self.fresh(), Op.WHERE, (m, val, z), self.dtype_of[val]))

    def gather(self, row, idx, guard):
        src_i, idx_i = row.srcs
        axis = row.arg
        iv = yield (idx_i, idx, guard)
        n = self.rows[src_i].shape[axis]
        self.emit(Check(iv, self.bound(n), "gather", axis, guard))
        self.known_in(iv, n)
        sidx = list(idx)
        sidx[axis] = Index.var(iv)
        return (yield (src_i, tuple(sidx), guard))

    def arith(self, row, srcs: list[str]) -> str:
        d = row.dtype
        if row.op == Op.CAST:  # round to the target once, then compute at its width
            return self.widen(self.cast(srcs[0], d))
        if row.op == Op.BITCAST:  # reinterprets stored bits, so take the stored width
            stored = self.cast(srcs[0], self.rows[row.srcs[0]].dtype)
            return self.widen(self.emit(Arith(self.fresh(), Op.BITCAST, (stored,), d)))
        out = self.emit(Arith(self.fresh(), row.op, tuple(srcs), compute_dtype(d)))
        if compute_dtype(d) != d and row.op not in EXACT_AT_ANY_WIDTH:
            # every node's value is its own dtype's: a half width rounds here, at each node,
            # so no number depends on where the schedule cut the kernels
            out = self.widen(self.cast(out, d))
        return out

    # ---- the nests of each kernel kind ---------------------------------------------

    def map_kernel(self) -> None:
        r = self.kernel.result
        names = [f"i{d}" for d in range(len(r.shape))]
        idx = self.open(names, list(r.shape))
        v = self.cast(self.value(len(self.rows) - 1, idx, ()), r.dtype)
        self.emit(Store("out", self.flat(idx, contiguous_strides(r.shape)), v))
        self.close(names)

    def reduce_kernel(self) -> None:
        r = self.kernel.result
        op, d, axes = r.op, r.dtype, r.arg
        src_i = r.srcs[0]
        shape = self.rows[src_i].shape
        names = [f"r{j}" if j in axes else f"i{j}" for j in range(len(shape))]
        kept = [j for j in range(len(shape)) if j not in axes]
        folded = list(axes)
        out_strides = contiguous_strides(r.shape)
        # the reduced dims have size 1 in the output: only the kept ones address it
        out_at = self.flat(tuple(Index.var(names[j]) for j in kept), [out_strides[j] for j in kept])
        acc_d = acc_dtype(d) if op == Op.SUM else d  # a max is exact in its own dtype
        step = Op.ADD if op == Op.SUM else Op.MAX
        if acc_d == d:
            self.open([names[j] for j in kept], [shape[j] for j in kept])
            c = self.emit(Const(self.fresh(), reduce_identity(op, d), d))
            self.emit(Store("out", out_at, c))
            self.close([names[j] for j in kept])
            idx = self.open(names, list(shape))
            v = self.cast(self.value(src_i, idx, ()), d)
            self.emit(Accum(step, "out", v, out_at))
            self.close(names)
            return
        self.open([names[j] for j in kept], [shape[j] for j in kept])
        acc = f"acc{self.n_accs}"
        self.n_accs += 1
        self.emit(DefAcc(acc, reduce_identity(op, acc_d), acc_d))
        self.open([names[j] for j in folded], [shape[j] for j in folded])
        idx = tuple(Index.var(n) for n in names)
        v = self.cast(self.value(src_i, idx, ()), acc_d)
        self.emit(Accum(step, acc, v))
        self.close([names[j] for j in folded])
        self.emit(Store("out", out_at, self.cast(acc, d)))
        self.close([names[j] for j in kept])

    def scan_kernel(self) -> None:
        """A carried accumulator walks the scan axis innermost and is stored every step.

        The other dims are the outer loops (each cell's scan is one thread's, start to
        finish); the accumulator has the output's dtype, so every step rounds to it.
        """
        r = self.kernel.result
        (axis, combine), d, shape = r.arg, r.dtype, r.shape
        names = [f"r{j}" if j == axis else f"i{j}" for j in range(len(shape))]
        kept = [j for j in range(len(shape)) if j != axis]
        self.open([names[j] for j in kept], [shape[j] for j in kept])
        acc = f"acc{self.n_accs}"
        self.n_accs += 1
        self.emit(DefAcc(acc, scan_identity(combine, d), d))
        self.open([names[axis]], [shape[axis]])
        idx = tuple(Index.var(n) for n in names)
        v = self.cast(self.value(r.srcs[0], idx, ()), d)
        self.emit(Accum(combine, acc, v))
        self.emit(Store("out", self.flat(idx, contiguous_strides(shape)), acc))
        self.close([names[axis]])
        self.close([names[j] for j in kept])

    def scatter_kernel(self) -> None:
        r = self.kernel.result
        base_i, idx_i, src_i = r.srcs
        axis, d, shape = r.arg, r.dtype, r.shape
        strides = contiguous_strides(shape)
        names = [f"i{j}" for j in range(len(shape))]
        idx = self.open(names, list(shape))
        self.emit(Store("out", self.flat(idx, strides), self.cast(self.value(base_i, idx, ()), d)))
        self.close(names)
        self.next_nest()
        ishape = self.rows[idx_i].shape
        names = [f"i{j}" for j in range(len(ishape))]
        idx = self.open(names, list(ishape))
        iv = self.value(idx_i, idx, ())
        self.emit(Check(iv, self.bound(shape[axis]), "scatter", axis))
        self.known_in(iv, shape[axis])
        sv = self.cast(self.value(src_i, idx, ()), d)
        at = list(idx)
        at[axis] = Index.var(iv)
        self.emit(Accum(Op.ADD, "out", sv, self.flat(tuple(at), strides)))
        self.close(names)

    def sort_kernel(self) -> None:
        """One loop over the rows (every dim but the last, as one), each row one SORT."""
        r = self.kernel.result
        n = r.shape[-1]
        keys = []
        for s in r.srcs:
            src = self.rows[s]
            if src.op != Op.BUFFER:
                raise ValueError(f"lower: an ARGSORT key must be a stored buffer, got {src.op}")
            keys.append(f"in{src.arg}")
        (row,) = self.open(["i0"], [math.prod(r.shape[:-1])])
        self.emit(Sort("out", tuple(keys), row * n, n, bool(r.arg)))
        self.close(["i0"])
