"""The numpy reference device: interprets the op graph one numpy call per node.

No fusion and no cleverness: this is the oracle every compiled device is diffed against,
so each primitive is written the most obvious way numpy allows. Two rules it makes
visible: half-width floats compute in float32 and round back after each node, and a sum
accumulates in ``acc_dtype`` and rounds once. What each elementwise op computes is written
once, in the rows of ``ir/graph/ops.py``, and shared with the loop-nest interpreter.
"""

from __future__ import annotations

import numpy as np

from ir.graph import dtypes, ops, semantics
from ir.graph.dtypes import DType, acc_dtype, to_numpy
from ir.graph.node import Node
from ir.graph.ops import ELEMENTWISE, Op
from ir.graph.view import View
from limn.runtime.device import KEEP_BYTES, Buffer, Device, recall, remember
from limn.runtime.jit import walk
from limn.runtime.profile import index_error, out_of_range


def apply_view(src: np.ndarray, v: View) -> np.ndarray:
    """Read ``v`` out of the row-major bytes of ``src``; masked cells are zero. Without a
    mask, a view of ``src``'s bytes (no node writes its operands)."""
    flat = np.ascontiguousarray(src).reshape(-1)
    box = v.mask if v.mask is not None else tuple((0, s) for s in v.shape)
    if any(hi <= lo for lo, hi in box):  # (or no elements at all)
        return np.zeros(v.shape, flat.dtype)
    start = v.offset + sum(lo * st for (lo, _), st in zip(box, v.strides))
    item, inner = flat.itemsize, tuple(hi - lo for lo, hi in box)
    region = np.ndarray(inner, flat.dtype, flat, start * item, [st * item for st in v.strides])
    if v.mask is None:
        return region
    out = np.zeros(v.shape, flat.dtype)
    out[tuple(slice(lo, hi) for lo, hi in box)] = region
    return out


def scatter_add(base: np.ndarray, idx: np.ndarray, src: np.ndarray, axis: int) -> np.ndarray:
    out = base.astype(to_numpy(acc_dtype(dtypes.as_dtype(base.dtype))), copy=True)
    grids = list(np.indices(idx.shape, sparse=True))
    grids[axis] = idx
    np.add.at(out, tuple(grids), src.astype(out.dtype, copy=False))
    return out.astype(base.dtype, copy=False)


# the ops as module names (an enum member read through its class costs ~4x a global's)
BUFFER, CONST, VIEW, SUM, MAX, SCAN = Op.BUFFER, Op.CONST, Op.VIEW, Op.SUM, Op.MAX, Op.SCAN
ARGSORT, GATHER, SCATTER, CUSTOM, ASSIGN = Op.ARGSORT, Op.GATHER, Op.SCATTER, Op.CUSTOM, Op.ASSIGN
_ACCUMULATE = {Op.ADD: np.add, Op.MUL: np.multiply, Op.MAX: np.maximum}
_BOOL_ACCUMULATE = {Op.ADD: np.logical_or, Op.MUL: np.logical_and, Op.MAX: np.logical_or}


def scan(x: np.ndarray, axis: int, combine: Op, d: DType) -> np.ndarray:
    """A SCAN: numpy's ufunc accumulate, a left-to-right loop in the dtype itself (a half
    width adds in float32 and rounds at every step, as the compiled scan does)."""
    table = _BOOL_ACCUMULATE if d == dtypes.bool_ else _ACCUMULATE
    with np.errstate(all="ignore"):
        return table[combine].accumulate(x, axis=axis, dtype=to_numpy(d))


def _check_index(node: Node, idx: np.ndarray, size: int) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = idx[(idx < 0) | (idx >= size)].flat[0]
        raise index_error(out_of_range(node.op.value.lower(), bad, node.arg, size), [node])


def evaluate(node: Node, vals: list[np.ndarray], kernels: dict) -> np.ndarray:
    """One node, one numpy call (or a few where numpy lacks the exact primitive); inside
    the caller's ``np.errstate(all="ignore")``."""
    op, d, npd = node.op, node.dtype, node.dtype.np
    if op in ELEMENTWISE:
        return ops.compute(op, vals, d, node.srcs[-1].dtype)
    if op is CONST:  # one value, broadcast (no node writes its operands)
        one = np.asarray(node.arg, npd)
        return np.ndarray(node.shape, one.dtype, one, 0, (0,) * len(node.shape))
    if op is VIEW:
        return apply_view(vals[0], node.arg)
    if op is SUM:
        x = vals[0].astype(acc_dtype(d).np, copy=False)
        # a new array that owns its bytes (the fold's result is a view): it can be kept
        return np.array(semantics.ordered_sum(x, node.arg), dtype=npd)
    if op is MAX:
        x = vals[0]
        if x.size == 0:
            return np.full(node.shape, dtypes.min_value(d), npd)
        return np.max(x, axis=node.arg, keepdims=True)
    if op is SCAN:
        return scan(vals[0], *node.arg, d)
    if op is ARGSORT:
        return ops.argsort(vals, [s.dtype for s in node.srcs], node.arg)
    if op is GATHER:
        _check_index(node, vals[1], vals[0].shape[node.arg])
        return np.take_along_axis(vals[0], vals[1].astype(np.int64, copy=False), axis=node.arg)
    if op is SCATTER:
        _check_index(node, vals[1], vals[0].shape[node.arg])
        return scatter_add(vals[0], vals[1].astype(np.int64, copy=False), vals[2], node.arg)
    if op in (Op.CONTIGUOUS, Op.ASSIGN):
        return np.array(vals[-1], copy=True)
    if op is CUSTOM:
        name, out_index, params = node.arg
        return kernels[name](vals, params)[out_index]
    raise NotImplementedError(f"numpy device: no rule for {op.value}")


def evaluate_kernel(kernel, inputs: list[np.ndarray]) -> np.ndarray:
    """One kernel of a kernel graph, its rows evaluated as nodes (BUFFER rows read
    ``inputs``, the kernel's in0, in1, ...): what a device computes on the host."""
    vals: list[np.ndarray] = []
    nodes: list[Node] = []
    for r in kernel.rows:
        srcs = tuple(nodes[s] for s in r.srcs)
        node = Node(r.op, r.dtype, r.shape, srcs, r.arg)
        if r.op == Op.BUFFER:
            vals.append(np.asarray(inputs[r.arg]).reshape(r.shape))
        else:
            with np.errstate(all="ignore"):
                vals.append(evaluate(node, [vals[s] for s in r.srcs], {}))
        nodes.append(node)
    return vals[-1]


# the values not kept (``device.KEEP_BYTES``): constants and views cost less to make again
_CHEAP = frozenset((Op.CONST, Op.VIEW, Op.ASSIGN))


class NumpyDevice(Device):
    name = "numpy"

    def __init__(self):
        super().__init__()
        from limn.sdpa import KERNELS  # fused attention's reference kernels

        for name, fn in KERNELS.items():
            self.register_kernel(name, fn)

    def realize(self, roots: list[Node]) -> list[Buffer]:
        # the compiled devices' walk: the nodes to compute in order, sources first, behind
        # the ones that hold bytes (BUFFERs, and nodes the runtime has realized)
        _, inputs, bufs, order, _ = walk(roots)
        values = {id(n): b.data for n, b in zip(inputs, bufs)}
        last = {id(s): i for i, n in enumerate(order) for s in n.srcs}  # each value's last reader
        keep = {id(r) for r in roots}
        custom_memo: dict[tuple, tuple] = {}
        with np.errstate(all="ignore"):
            for i, node in enumerate(order):
                if id(node) in values:
                    continue
                vals = [values[id(s)] for s in node.srcs]
                if node.op is CUSTOM:  # siblings (same kernel, sources, params): one call
                    name, at, params = node.arg
                    key = (name, tuple(id(s) for s in node.srcs), repr(params))
                    if key not in custom_memo:
                        custom_memo[key] = self.kernels[name](vals, params)
                    values[id(node)] = custom_memo[key][at]
                else:
                    v = values[id(node)] = evaluate(node, vals, self.kernels)
                    small = v.nbytes <= KEEP_BYTES and v.flags.owndata and id(node) not in keep
                    if small and node.op not in _CHEAP:
                        remember(node, Buffer(node.dtype, node.shape, v))
                # a value goes after its last reader, so the next node's result can reuse
                # its memory instead of faulting in fresh pages (what bounds a chain of
                # big nodes)
                for src in node.srcs:
                    if last[id(src)] == i and id(src) not in keep:
                        values.pop(id(src), None)
        # the transaction: every value exists before any assign writes its target
        out = []
        for root in roots:
            v = values[id(root)]
            if root.op is ASSIGN:
                out.append(root.srcs[0].arg)
                continue
            if (buf := recall(root)) is None:  # (a kept value is held as a result is)
                # an array computed here that owns its bytes becomes the buffer as it is
                own = root.op is not CUSTOM and v.flags.owndata and v.flags.writeable
                buf = Buffer(root.dtype, root.shape, v if own else np.array(v))
                remember(root, buf)
            out.append(buf)
        for root in roots:
            if root.op is ASSIGN:
                np.copyto(root.srcs[0].arg.data, values[id(root)])
        return out
