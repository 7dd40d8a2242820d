"""The loop-nest interpreter: runs stage 3 one instruction at a time over numpy buffers.

It is the oracle that a printed nest means what it says. It is deliberately literal: every
value is a 0-d numpy array of exactly the dtype its instruction names, every ARITH goes
through ``ir/graph/ops.evaluate`` (the op rows the numpy device uses), loads and stores
touch one element, and an address outside its buffer is an error rather than a silent
read, so a lowering bug cannot hide behind a lucky number. Fresh buffers start filled with
a poison value, so a cell the nest forgets to write shows up in the diff.

``run_graph`` executes a whole kernel graph: it allocates the intermediates, lowers and
runs each kernel in order (dispatching CUSTOM kernels by name), resolves the sinks, and
commits ASSIGNs after everything else. ``run`` does the same starting from op-graph roots,
on copies of their input buffers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from ir.graph import dtypes, ops
from ir.graph.dtypes import DType, to_numpy
from ir.graph.node import Node
from ir.graph.ops import Op
from ir.graph.semantics import pairwise
from ir.kernel.kernel import KernelGraph
from ir.kernel.schedule import schedule
from ir.loop.lower import lower
from ir.loop.nest import (
    Accum,
    Arith,
    Check,
    Const,
    DefAcc,
    Index,
    Load,
    Local,
    Loop,
    LoopNest,
    Mask,
    PairwiseFold,
    Sort,
    Store,
    bits_const,
    walk,
)
from ir.loop.passes import Pass, apply_passes
from ir.loop.rewrite import defines, value_dtype


def fold(op: Op, acc: np.ndarray, x: np.ndarray, d: DType) -> np.ndarray:
    """One step of a reduce or scan: ADD and MUL by the op table's numpy; MAX keeps nan, as
    the reference's max."""
    if op in (Op.ADD, Op.MUL):
        return ops.evaluate(op, [acc, x], d, d)
    return np.asarray(np.maximum(acc, x)).astype(to_numpy(d))


def fused_multiply_add(a, b, c, d: DType) -> np.ndarray:
    """``a*b + c`` computed exactly and rounded once to ``d`` (float32/64): C's fma, fmaf;
    lane by lane where the operands are arrays.

    float32: the product is exact in float64 and so is the float64 sum's rounding error
    (Knuth's two-sum); the sum rounded to odd (moved one step towards the exact value where
    it dropped a nonzero error and its last bit is 0) rounds to float32 as the exact value
    does, as 53 bits hold float32's 24 and two more; overflow and the special values follow
    from IEEE float64. float64: by exact rationals (``_fma_exact``).
    """
    lanes = np.ndim(a) + np.ndim(b) + np.ndim(c)
    if d != dtypes.float32:  # exactly, lane by lane
        return _exact_lanes(a, b, c, d) if lanes else _fma_exact(a, b, c, d)
    if not lanes:  # one lane: plain floats are quicker
        x, y, z = (float(np.float32(v)) for v in (a, b, c))
        total = (p := x * y) + z
        err = (p - (total - (t := total - p))) + (z - t)
        if err and math.isfinite(err) and not int(math.ldexp(math.frexp(total)[0], 53)) & 1:
            total = math.nextafter(total, err * math.inf)
        with np.errstate(over="ignore"):
            return np.asarray(np.float32(total))
    x, y, z = (np.asarray(v, np.float32).astype(np.float64) for v in (a, b, c))
    with np.errstate(all="ignore"):
        p = x * y
        total = p + z
        t = total - p
        err = (p - (total - t)) + (z - t)
        even = (np.asarray(total).view(np.int64) & 1) == 0
        odd = np.where(
            even & (err != 0) & np.isfinite(err), np.nextafter(total, err * np.inf), total
        )
    return np.asarray(odd.astype(np.float32))


def _exact_lanes(a, b, c, d: DType) -> np.ndarray:
    return np.vectorize(lambda x, y, z: float(_fma_exact(x, y, z, d)), otypes=[np.float64])(a, b, c)


def _fma_exact(a, b, c, d: DType) -> np.ndarray:
    """``a*b + c`` by exact rationals, rounded once to float64 (``d``).

    Finite operands go through exact rationals (``float`` of a Fraction rounds to nearest
    even). A non-finite operand decides the answer by IEEE rules the plain ops already
    follow, except that an infinite ``c`` wins over a finite product that would overflow.
    """
    t = np.dtype(to_numpy(d)).type
    x, y, z = float(a), float(b), float(c)
    if not (math.isfinite(x) and math.isfinite(y)):
        with np.errstate(invalid="ignore"):  # inf * 0 is nan, as in C
            return np.asarray(t(x) * t(y) + t(z))
    if not math.isfinite(z):
        return np.asarray(t(z))
    if x == 0 or y == 0:  # the product is an exact (signed) zero: one rounding of the add
        return np.asarray(t(x) * t(y) + t(z))
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        return np.asarray(t(0.0))  # an exact cancellation is +0 when rounding to nearest
    try:
        return np.asarray(t(float(exact)))  # correctly rounded to float64
    except OverflowError:
        return np.asarray(t(math.copysign(math.inf, exact)))


def _at(idx: Index, env: dict) -> int:
    at = idx.const + sum(c * int(env[n]) for n, c in idx.terms)
    return at + sum(int(env[n]) * int(env[s]) for n, s in idx.scaled)


def _size(x, env: dict) -> int:
    """A size written in the nest, or the value of a run-time size name."""
    return x if isinstance(x, int) else int(env[x])


def _bounds(loop: Loop, env: dict) -> tuple[int, int]:
    start = max([loop.start, *(_at(b, env) for b in loop.lo)])
    stop = min([_size(loop.stop, env), *(_at(b, env) for b in loop.hi)])
    return start, stop


def _scalar(v: np.ndarray) -> np.ndarray:
    """An array accumulator read as a value is its element 0 (where FOLD left the total)."""
    return v.reshape(-1)[0] if v.ndim else v


def tree_fold(op: Op, acc: np.ndarray, d: DType) -> np.ndarray:
    """FOLD's fixed order: each row halves onto itself (16 -> 8 -> ... -> 1), then the rows."""
    combine = functools.partial(fold, op, d=d)
    out = acc.copy().reshape(-1)
    out[0] = pairwise(pairwise(acc.reshape(-1, acc.shape[-1]), combine), combine)
    return out.reshape(acc.shape)


def _holds(preds, env) -> bool:
    return all(_size(p.lo, env) <= _at(p.index, env) < _size(p.hi, env) for p in preds)


def interpret(
    nest: LoopNest, inputs: Sequence[np.ndarray], out: np.ndarray, sizes: Sequence[int] = ()
) -> None:
    """Execute ``nest`` reading ``inputs`` (in0, in1, ...) and writing ``out`` in place;
    ``sizes`` are the values of a size-generic nest's run-time sizes, in order."""
    if len(inputs) != len(nest.inputs):
        raise ValueError(
            f"interpret: {nest.name} reads {len(nest.inputs)} inputs, got {len(inputs)}"
        )
    if len(sizes) != len(nest.sizes):
        raise ValueError(f"interpret: {nest.name} takes {len(nest.sizes)} sizes, got {len(sizes)}")
    mem = {f"in{i}": np.asarray(a).reshape(-1) for i, a in enumerate(inputs)}
    mem["out"] = out.reshape(-1)
    if not np.shares_memory(mem["out"], out) and out.size:
        raise ValueError("interpret: the output must be a C-contiguous array")
    kinds = {defines(x): value_dtype(x) for x in walk(nest.body) if defines(x) is not None}

    def address(buf: str, idx: Index, env) -> int:
        a = _at(idx, env)
        if not 0 <= a < mem[buf].size:
            raise IndexError(
                f"interpret: {nest.name} addresses {buf}[{idx}] = {buf}[{a}], outside "
                f"0..{mem[buf].size - 1}"
            )
        return a

    env: dict[str, object] = dict(zip(nest.sizes, (int(v) for v in sizes)))

    def run(items) -> None:
        for ins in items:
            step(ins)

    def step(ins) -> None:
        t = type(ins)
        if t is Loop:
            start, stop = _bounds(ins, env)  # fixed on entry
            for x in range(start, stop, ins.step):
                env[ins.var] = x
                run(ins.body)
            return
        if t is Const and ins.given is not None:  # a size-generic nest's constant
            env[ins.out] = bits_const(int(env[ins.given]), ins.dtype)
        elif t is Const:
            env[ins.out] = np.asarray(ins.value, to_numpy(ins.dtype))
        elif t is DefAcc and ins.start is not None:
            env[ins.out] = np.array(env[ins.start])
        elif t is DefAcc:
            shape = ins.shape + ((ins.lanes,) if ins.lanes > 1 else ())
            env[ins.out] = np.full(shape, ins.value, to_numpy(ins.dtype))
        elif t is Local:
            mem[ins.out] = poison(ins.dtype, (ins.size,))
        elif t is Load and ins.lanes > 1:  # unguarded (``verify``)
            a = address(ins.buf, ins.index, env)
            address(ins.buf, ins.index + (ins.lanes - 1), env)
            env[ins.out] = mem[ins.buf][a : a + ins.lanes].copy()
        elif t is Load:
            if _holds(ins.guard, env):
                env[ins.out] = np.asarray(mem[ins.buf][address(ins.buf, ins.index, env)])
            else:
                env[ins.out] = np.zeros((), to_numpy(ins.dtype))
        elif t is Arith:
            vals = [_scalar(env[s]) for s in ins.srcs]
            env[ins.out] = ops.evaluate(ins.op, vals, ins.dtype, kinds[ins.srcs[-1]])
        elif t is Mask:
            env[ins.out] = np.asarray(_holds(ins.preds, env))
        elif t is Check:
            v = int(env[ins.value])
            size = _size(ins.size, env)
            if _holds(ins.guard, env) and not 0 <= v < size:
                raise IndexError(
                    f"{ins.what}: index {v} is out of range for axis {ins.axis} of size "
                    f"{size}; accepted: 0..{size - 1}"
                )
        elif t is Accum and ins.mul is not None:
            at = mem[ins.dst] if ins.index is not None else None
            if at is not None:
                a = address(ins.dst, ins.index, env)
                d = dtypes.as_dtype(at.dtype)
                at[a] = fused_multiply_add(env[ins.src], env[ins.mul], at[a], d)
            elif ins.lane is not None:
                lanes = env[ins.dst].reshape(-1)
                i = _at(ins.lane, env)
                lanes[i] = fused_multiply_add(env[ins.src], env[ins.mul], lanes[i], kinds[ins.dst])
            else:  # a register; a vector one lane by lane, a scalar operand in every lane
                acc = env[ins.dst]
                env[ins.dst] = fused_multiply_add(env[ins.src], env[ins.mul], acc, kinds[ins.dst])
        elif t is Accum:
            if ins.lane is not None:
                lanes = env[ins.dst].reshape(-1)
                at = _at(ins.lane, env)
                if not 0 <= at < lanes.size:
                    raise IndexError(f"interpret: {nest.name} folds into lane {at} of {ins.dst}")
                lanes[at] = fold(ins.op, lanes[at], env[ins.src], kinds[ins.dst])
            elif ins.index is None:
                env[ins.dst] = fold(ins.op, env[ins.dst], env[ins.src], kinds[ins.dst])
            else:
                buf = mem[ins.dst]
                a = address(ins.dst, ins.index, env)
                d = dtypes.as_dtype(buf.dtype)
                buf[a] = fold(ins.op, np.asarray(buf[a]), env[ins.src], d)
        elif t is PairwiseFold:
            env[ins.acc] = tree_fold(ins.op, env[ins.acc], kinds[ins.acc])
        elif t is Store and ins.lanes > 1:
            a = address(ins.buf, ins.index, env)
            address(ins.buf, ins.index + (ins.lanes - 1), env)
            mem[ins.buf][a : a + ins.lanes] = env[ins.src]
        elif t is Store:
            mem[ins.buf][address(ins.buf, ins.index, env)] = _scalar(env[ins.src])
        elif t is Sort:
            if ins.n:
                a = address(ins.dst, ins.index, env)
                for b in (ins.dst, *ins.keys):
                    address(b, ins.index + (ins.n - 1), env)
                keys = [mem[k][a : a + ins.n] for k in ins.keys]
                src_dtypes = [dtypes.as_dtype(k.dtype) for k in keys]
                mem[ins.dst][a : a + ins.n] = ops.argsort(keys, src_dtypes, ins.descending)
        else:
            raise TypeError(f"interpret: {t.__name__} is not a loop-nest instruction")

    run(nest.body)


def poison(dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """A fresh buffer whose every cell is conspicuous: nan for floats, 0x5A.. for integers."""
    if dtype.is_float or dtype.is_complex:
        return np.full(shape, np.nan, to_numpy(dtype))
    if dtype == dtypes.bool_:
        return np.ones(shape, np.bool_)
    return np.full(shape, 0x5A, to_numpy(dtype))


def run_graph(
    graph: KernelGraph,
    inputs: Sequence[np.ndarray],
    kernels: dict[str, Callable] | None = None,
    passes: Sequence[Pass] | None = None,
) -> list[np.ndarray]:
    """Run every kernel of ``graph`` on ``inputs`` (by slot); one array per sink.

    ASSIGN sinks write into the given input arrays, after every kernel has run. A CUSTOM
    kernel calls ``kernels[name](arrays, params)``, which returns all its outputs; siblings
    (same name, inputs and params) share one call.
    """
    if len(inputs) != graph.n_inputs:
        raise ValueError(f"run_graph: the graph has {graph.n_inputs} inputs, got {len(inputs)}")
    bufs: list[np.ndarray] = []
    for spec, a in zip(graph.buffers, inputs):
        a = np.asarray(a)
        if a.shape != spec.shape or a.dtype != to_numpy(spec.dtype):
            raise ValueError(
                f"run_graph: input {len(bufs)} is {a.dtype}{list(a.shape)}, want {spec}"
            )
        bufs.append(a)
    bufs += [poison(s.dtype, s.shape) for s in graph.buffers[graph.n_inputs :]]
    calls: dict[tuple, tuple] = {}
    for i, k in enumerate(graph.kernels):
        args = [bufs[b] for b in k.inputs]
        if k.kind == "CUSTOM":
            name, out_index, params = k.result.arg
            if kernels is None or name not in kernels:
                raise KeyError(f"run_graph: no kernel registered for CUSTOM {name!r}")
            key = (name, k.inputs, repr(params))
            if key not in calls:  # sources in node order, a buffer read twice given twice
                args = [args[k.rows[r].arg] for r in k.result.srcs]
                calls[key] = tuple(kernels[name](args, params))
            np.copyto(bufs[k.output], calls[key][out_index])
            continue
        interpret(apply_passes(lower(graph, i), passes), args, bufs[k.output])
    # the transaction: every root is read before any ASSIGN overwrites its target
    assigned = {s.buffer for s in graph.sinks if s.source is not None}
    out: list = []
    for s in graph.sinks:
        if s.source is None:
            a = bufs[s.buffer].reshape(s.shape)
            out.append(a.copy() if s.buffer in assigned else a)
        else:
            out.append(None)
    for i, s in enumerate(graph.sinks):
        if s.source is not None:
            np.copyto(bufs[s.buffer], bufs[s.source])
            out[i] = bufs[s.buffer]
    return out


def run(
    roots: Sequence[Node],
    passes: Sequence[Pass] | None = None,
    kernels: dict[str, Callable] | None = None,
) -> list[np.ndarray]:
    """Schedule, lower, pass and interpret ``roots``, on copies of their input buffers."""
    sched = schedule(roots)
    inputs = [np.array(n.arg.data, copy=True) for n in sched.inputs]
    return run_graph(sched.graph, inputs, kernels, passes)
