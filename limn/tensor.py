"""limn.Tensor: the torch-like frontend, lazy, with autograd.

A Tensor wraps one op-graph node and the device that will run it. Methods never compute:
they build nodes. The primitive ones (``p_*``) come from ``ir/graph/build.py``; a Tensor
wraps each new node with the record autograd differentiates it by (``limn/autograd.py``).
This file owns the Tensor itself: its node and device, bytes (``numpy()``, ``item()``,
``tolist()``, ``realize()``), the surface rules (limn's dtype lattice,
``ir.graph.dtypes.promote``, and numpy broadcasting), autograd
entry points, assignment and creation. The torch-like methods a user calls live in
``limn/torch_methods.py`` (math, reductions) and ``limn/torch_movement.py`` (views,
indexing), spelled in ``ir.graph.compose``; how a tensor prints, in ``limn/printing.py``.

A device is named where a tensor is made (``device=``, checked there: an unknown name
fails at once, naming the accepted ones) and stays with the tensor; ``"cpu"`` is the c
device where a C compiler works, else the numpy reference (``limn.runtime.device.resolve``).
"""

from __future__ import annotations

import math
import threading
import weakref

import numpy as np

from ir.graph import compose, dtypes, write
from ir.graph.build import Primitives
from ir.graph.dtypes import DType, as_dtype, promote, promote_scalar
from ir.graph.node import Node, format_graph
from ir.graph.ops import Op
from limn import autograd
from limn.creation import Creation, _as_array, _infer_dtype, _rng, device_name
from limn.printing import format_tensor
from limn.runtime.device import Buffer, device_names, get_device, observers, result_of
from limn.torch_methods import TorchMethods, torch_names
from limn.torch_more_math import TorchMoreMath
from limn.torch_more_movement import TorchMoreMovement
from limn.torch_movement import TorchMovement

# _rng: limn.capture reads the generator here
__all__ = ["Tensor", "_rng", "cat", "realize", "stack", "where"]


def _buffer_node(data: np.ndarray, dtype: DType) -> Node:
    buf = Buffer(dtype, data.shape, np.asarray(data, dtypes.to_numpy(dtype), order="C"))
    return Node(Op.BUFFER, dtype, buf.shape, (), buf)


def _cast_to(d: DType):
    """``x.float()`` and its kin: x cast to ``d`` (one memory format: it is accepted)."""
    return lambda self, memory_format=None: self.cast(d)


class _Size(int):
    """``t.size``: the element count (an int, as numpy's ``size``) that, called as torch's
    ``t.size()`` or ``t.size(dim)``, gives the shape or one of its sizes."""

    def __new__(cls, shape: tuple[int, ...]):
        out = super().__new__(cls, math.prod(shape))
        out.shape = shape
        return out

    def __call__(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]


class Tensor(Primitives, TorchMethods, TorchMoreMath, TorchMovement, TorchMoreMovement, Creation):
    __array_priority__ = 100  # numpy defers to our operators
    # A view (the result of a movement op that stayed one View) remembers the tensor it was
    # moved from and how, so an assign into it can write through to that base's buffer.
    _base: Tensor | None = None
    _move: tuple = ()

    def __init__(self, data, dtype=None, requires_grad: bool = False, device: str | None = None):
        if isinstance(data, Tensor):
            data = data.numpy()
        d = as_dtype(dtype) if dtype is not None else _infer_dtype(data)
        with np.errstate(all="ignore"):
            arr = _as_array(data).astype(dtypes.to_numpy(d))
        self.node = _buffer_node(arr, d)
        self.device = device_name(device, "Tensor")
        self.grad: Tensor | None = None
        self._ctx: autograd.Ctx | None = None
        self.requires_grad_(requires_grad)  # (refuses a dtype that takes no gradient)

    def where(self, a, b) -> Tensor:
        """self is the condition: a where true, b elsewhere."""
        return where(self, a, b)

    def _lift(self, data) -> Tensor:
        """Host data as a Tensor on this tensor's device."""
        return Tensor(data, device=self.device)

    @staticmethod
    def _make(node: Node, device: str, rule=None, parents=(), saved=None) -> Tensor:
        t = Tensor.__new__(Tensor)
        t.node, t.device, t.grad, t._ctx, t.requires_grad = node, device, None, None, False
        _made.append(weakref.ref(t))  # a write commits with it if it still reads the old bytes
        if len(_made) > _prune_at[0]:
            _lazy()
        if rule is not None and parents and autograd.grad_enabled():
            for p in parents:  # a loop, not any(): this runs for every op a program calls
                if p.requires_grad:
                    t.requires_grad = True
                    t._ctx = autograd.Ctx(rule, tuple(parents), saved)
                    break
        return t

    def _wrap(self, node: Node, rule=None, parents=(), saved=None) -> Tensor:
        return Tensor._make(node, self.device, rule, parents, saved)

    def _view(self, kind: str, arg) -> Tensor:
        t = super()._view(kind, arg)
        n = t.node
        src = n.srcs[0] if n.op == Op.VIEW else n
        if not (src.op == Op.CONTIGUOUS and src.srcs[0] is self.node):  # not a copy
            t._base, t._move = self, (kind, arg)
        return t

    def _moved(self, moves) -> Tensor:
        # composed only when nothing is recorded between the moves: a gradient needs each
        # move's record, so a value that takes gradients makes the calls one by one
        if self.requires_grad and autograd.grad_enabled():
            return self._moved_one_by_one(moves)
        return super()._moved(moves)

    def _wrap_moved(self, node: Node, moves) -> Tensor:
        t = self._wrap(node)
        t._base, t._move = self, ("moves", moves)  # a view of self, as each move's would be
        return t

    def _view_root(self) -> tuple[Tensor, tuple]:
        """The tensor this one is a view of (itself if none) and the moves from it to us."""
        t, moves = self, []
        while t._base is not None:
            if t._move[0] == "moves":  # composed moves (``_moved``): each of them
                moves.extend(reversed(t._move[1]))
            else:
                moves.append(t._move)
            t = t._base
        return t, tuple(reversed(moves))

    # ---- facts (never compute); shape and dtype are Primitives' -------------------

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def size(self) -> int:
        return _Size(self.node.shape)

    def numel(self) -> int:
        return math.prod(self.node.shape)

    nelement = numel

    def dim(self) -> int:
        return len(self.node.shape)

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def grad_fn(self) -> autograd.Ctx | None:
        return self._ctx

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len: a 0-d tensor has no length")
        return self.shape[0]

    __repr__ = format_tensor

    def __format__(self, spec: str) -> str:
        return format(self.item() if self.ndim == 0 else repr(self), spec)

    def graph(self) -> str:
        """The op graph that realizing this tensor would run, one node per line."""
        return format_graph([self.node])

    __hash__ = object.__hash__

    # ---- bytes ----------------------------------------------------------------------

    def realize(self) -> Tensor:
        realize(self)
        return self

    def numpy(self) -> np.ndarray:
        self.realize()
        return self.node.arg.data.copy()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def item(self):
        if self.size != 1:
            raise ValueError(f"item: needs a tensor of one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"bool: the truth value of a tensor of shape {self.shape} is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not self.dtype.is_int:
            raise TypeError(f"index: only integer tensors can be indices, got {self.dtype}")
        return int(self.item())

    # ---- surface rules: scalars, promotion, broadcasting ----------------------------

    def _const(self, value, dtype: DType, shape=()) -> Tensor:
        return Tensor._make(Node(Op.CONST, dtype, tuple(shape), (), value), self.device)

    def _align(self, other, op: str, reverse: bool = False) -> tuple[Tensor, Tensor]:
        """Promote and broadcast two operands to one dtype and shape."""
        if type(other) is Tensor and other.node.dtype is self.node.dtype:
            if other.node.shape == self.node.shape:  # most operands of a program
                return (other, self) if reverse else (self, other)
        if isinstance(other, Tensor):
            try:
                d = promote(self.dtype, other.dtype)
            except TypeError as e:
                raise TypeError(f"{op}: {e}; cast one operand to a dtype that holds both") from None
            a, b = self.p_cast(d), other.p_cast(d)
        elif isinstance(other, bool | int | float):
            d = promote_scalar(self.dtype, other)
            a = self.p_cast(d)
            value = dtypes.python_type(d)(other)
            if d.is_int:  # the scalar takes the tensor's dtype, so it wraps as d does
                value = dtypes.wrap(value, d)
            b = self._const(value, d, ())
        elif isinstance(other, np.ndarray | list | tuple | np.generic):
            return self._align(Tensor(other, device=self.device), op, reverse)
        else:
            raise TypeError(f"{op}: cannot combine a Tensor with {type(other).__name__}")
        shape = compose.broadcast_shapes(a.shape, b.shape, op=op)
        a, b = compose.expand_to(a, shape), compose.expand_to(b, shape)
        return (b, a) if reverse else (a, b)

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.p_cast(dtypes.float32)

    # ---- dtypes ---------------------------------------------------------------------

    def cast(self, dtype) -> Tensor:
        return self.p_cast(as_dtype(dtype))

    astype = type = cast

    def to(self, *args, dtype=None, device=None, **_) -> Tensor:
        """torch's forms: ``to(device)``, ``to(dtype)``, ``to(other)`` (its device and
        dtype), ``to(device, dtype)``, and by keyword. Between host devices the graph moves
        as it is (they share bytes); to another device the value is copied there."""
        for a in args:
            if isinstance(a, bool):  # torch's non_blocking and copy: nothing to do here
                continue
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, str) and (a.split(":")[0] in device_names() or a == "cpu"):
                device = a
            else:
                try:
                    dtype = as_dtype(a)
                except TypeError:
                    raise TypeError(
                        f"to: {a!r} is neither a device (accepted: {', '.join(device_names())}, "
                        "'cpu') nor a dtype"
                    ) from None
        t = self if dtype is None else self.cast(dtype)
        name = device_name(device, "to") if device is not None else t.device
        if name == t.device:
            return t
        if get_device(name).host and get_device(t.device).host:
            return Tensor._make(t.node, name, Op.CONTIGUOUS, (t,))
        return Tensor(t.numpy(), t.dtype, device=name)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self) -> Tensor:
        return self.to("cuda")

    float, double, half = map(_cast_to, (dtypes.float32, dtypes.float64, dtypes.float16))
    bfloat16, int = map(_cast_to, (dtypes.bfloat16, dtypes.int32))
    long, bool = map(_cast_to, (dtypes.int64, dtypes.bool_))
    byte, char, short = map(_cast_to, (dtypes.uint8, dtypes.int8, dtypes.int16))

    # ---- autograd -------------------------------------------------------------------

    def backward(
        self,
        gradient: Tensor | None = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
    ) -> None:
        if not self.requires_grad:
            raise RuntimeError(
                "backward: this tensor does not require grad (no leaf it depends "
                "on has requires_grad=True)"
            )
        if gradient is None:
            if self.size != 1:
                raise RuntimeError(
                    f"backward: needs a gradient for a non-scalar tensor of shape {self.shape}; "
                    "pass gradient= of the same shape, or reduce to a scalar first"
                )
            gradient = self.p_const(1)
        elif not isinstance(gradient, Tensor):
            gradient = Tensor(gradient, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ValueError(f"backward: gradient shape {gradient.shape} != {self.shape}")
        autograd.backward(self, gradient.p_cast(self.dtype), create_graph, retain_graph)

    def detach(self) -> Tensor:
        return Tensor._make(self.node, self.device)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and not self.dtype.is_float:
            raise TypeError(f"requires_grad: only float tensors take gradients, got {self.dtype}")
        self.requires_grad = flag
        return self

    # ---- assignment -----------------------------------------------------------------

    def assign(self, value) -> Tensor:
        """A pending write of ``value`` into this tensor's buffer; returns the target.

        The target's value is the written one from now on: math built on it reads
        ``value``, and the write commits when the target is realized, in a batch with
        others (``limn.realize(*opt.updates())``), or before this thread's next realize of
        anything else, so no read, through the target or any view of its buffer, sees the
        old bytes. Into a view (``z[1].assign(v)``) the write goes through to the base:
        the target is the base, its value the base with the view's elements replaced
        (``ir/graph/write.place``), and the base is what is returned. Not differentiable: a value
        that requires grad, or a view of a tensor that does, is refused while grad mode is on.
        """
        if not isinstance(value, Tensor):
            value = self._const(dtypes.python_type(self.dtype)(value), self.dtype)
        if value.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {value.dtype} != target dtype {self.dtype}")
        if value.shape != self.shape:
            fits = value.ndim <= self.ndim and all(
                v in (1, t) for v, t in zip(value.shape[::-1], self.shape[::-1])
            )
            if not fits:
                raise ValueError(
                    f"assign: value shape {value.shape} does not fit target shape "
                    f"{self.shape}; accepted: the target's shape or one that broadcasts to it"
                )
            value = value.expand(*self.shape)
        if autograd.grad_enabled() and value.requires_grad:
            raise RuntimeError(
                "assign: not differentiable, and the value requires grad; assign under "
                "limn.no_grad() or assign value.detach()"
            )
        root, moves = self._view_root()
        target = self
        if root is not self:
            if autograd.grad_enabled() and root.requires_grad:
                raise RuntimeError(
                    "assign: the target is a view of a tensor that requires grad, and "
                    "assign is not differentiable; write under limn.no_grad()"
                )
            write.check_writable(root.shape, moves, "assign")
            if root.node.op != Op.BUFFER:
                _realize(root)
            value = write.place(root, moves, value)
            # from now on this view reads the base's buffer, so it sees the write once
            # committed (a realized view would otherwise keep its own copy)
            self.node = write.apply_moves(root, moves).node
            target = root
        elif self.node.op != Op.BUFFER:
            _realize(self)  # an earlier write to it, or a lazy value: bytes to write into
        target.node = Node(Op.ASSIGN, target.dtype, target.shape, (target.node, value.node))
        _pending_writes().append(target)
        return target


# ---- free functions -----------------------------------------------------------------


def where(cond, a, b) -> Tensor:
    """a where cond is true, b elsewhere; a and b promote and all three broadcast."""
    if not isinstance(cond, Tensor):
        raise TypeError("where: the condition must be a Tensor")
    cond = cond if cond.dtype == dtypes.bool_ else cond.p_cast(dtypes.bool_)
    if isinstance(a, Tensor):
        a, b = a._align(b, "where")
    elif isinstance(b, Tensor):
        b, a = b._align(a, "where")
    else:
        d = _infer_dtype(a) if not isinstance(a, float) else dtypes.float32
        a, b = cond._const(a, d), cond._const(b, d)
    shape = compose.broadcast_shapes(cond.shape, a.shape, b.shape, op="where")
    cond, a, b = (compose.expand_to(t, shape) for t in (cond, a, b))
    return cond.p_where(a, b)


@torch_names
def cat(tensors, axis: int = 0) -> Tensor:
    ts = list(tensors)
    if not ts:
        raise ValueError("cat: needs at least one tensor")
    axis = compose.normalize_axis(axis, ts[0].ndim, "cat")
    d = ts[0].dtype
    for t in ts[1:]:
        d = promote(d, t.dtype)
        if t.ndim != ts[0].ndim or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != axis
        ):
            raise ValueError(
                f"cat: shapes {[tuple(t.shape) for t in ts]} differ outside axis {axis}"
            )
    return compose.cat([t.p_cast(d) for t in ts], axis)


@torch_names
def stack(tensors, axis: int = 0) -> Tensor:
    ts = list(tensors)
    if not ts:
        raise ValueError("stack: needs at least one tensor")
    if any(t.shape != ts[0].shape for t in ts):
        raise ValueError(f"stack: shapes differ: {[tuple(t.shape) for t in ts]}")
    axis = compose.normalize_axis(axis, ts[0].ndim + 1, "stack")
    return cat([t.unsqueeze(axis) for t in ts], axis)


_writes = threading.local()  # each thread's assigned targets whose write is not committed


def _pending_writes() -> list[Tensor]:
    if not hasattr(_writes, "targets"):
        _writes.targets = []
    return _writes.targets


def realize(*tensors: Tensor) -> None:
    """Compute these tensors in one batch; ASSIGNs among them commit after every value.

    This thread's other pending writes commit first, in a batch of their own, so what is
    computed here reads every buffer as written (``Tensor.assign``)."""
    writes = _pending_writes()
    if writes:
        asked = {id(t) for t in tensors}
        first = {id(w): w for w in writes if id(w) not in asked and w.node.op == Op.ASSIGN}
        writes.clear()
        if first:
            _realize(*first.values())
    _realize(*tensors)


# Every Tensor an op made, weakly: its value may still be a graph over buffers that a later
# write overwrites (``readers``). Pruned of dead and realized ones each time it doubles,
# so an op pays one weak reference.
_made: list[weakref.ref] = []
_made_lock = threading.Lock()  # two threads pruning at once would drop each other's entries
_prune_at = [1024]
_HELD = (Op.BUFFER, Op.ASSIGN)  # a Tensor's value once it holds bytes, or is being written


def _lazy_node(ref: weakref.ref) -> Node | None:
    """The graph the referenced Tensor's value still is: None once it died, holds bytes
    or a pending write, or is a view (which reads its base, one of these or a buffer
    whose writes it sees, as in torch). The Tensor itself is let go at once: a strong
    reference held while another thread searches would keep that thread's temporaries
    alive, and computed, at its own writes."""
    t = ref()
    if t is None or t._base is not None or t.node.op in _HELD:
        return None
    return t.node


def _lazy() -> list[weakref.ref]:
    """``_made`` pruned to the Tensors whose value is still a graph."""
    with _made_lock:
        n = len(_made)
        live = [r for r in _made[:n] if (t := r()) is not None and t.node.op not in _HELD]
        _made[:n] = live  # (entries appended meanwhile stay, past n)
        _prune_at[0] = 2 * len(live) + 1024
    return live


def _reads(node: Node, targets: set[int], clean: set[int]) -> bool:
    """Whether computing ``node`` reads one of the buffers ``targets`` (ids), as a device
    computes it (a realized result is read, not what is behind it). The search stops at
    the first such read, which is near the top for a gradient or a loss; ``clean`` gathers
    the nodes a search found to read none, so other searches skip them."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen or id(n) in clean:
            continue
        seen.add(id(n))
        held = n.arg if n.op is Op.BUFFER else result_of(n)
        if held is None:
            stack += n.srcs
        elif id(held) in targets:
            return True
    clean |= seen
    return False


def readers(targets: set[int]) -> list[Tensor]:
    """The live lazy Tensors that read one of the buffers ``targets`` (ids): computed in
    the batch that writes them, they read the old bytes as they would have eagerly, and
    share the batch's work (a loss read after ``opt.step()`` costs no second forward)."""
    clean: set[int] = set()
    found = []
    for ref in _lazy():
        node = _lazy_node(ref)
        if node is not None and _reads(node, targets, clean):
            found.append(ref())
    return [t for t in found if t is not None]


def _realize(*tensors: Tensor) -> None:
    writes = [t for t in tensors if t.node.op is Op.ASSIGN]
    if writes:
        asked = {id(t) for t in tensors}
        targets = {id(w.node.srcs[0].arg) for w in writes}
        # first: a reader on another device than the write is realized in a batch before it
        tensors = tuple(t for t in readers(targets) if id(t) not in asked) + tensors
    by_device: dict[str, list[Tensor]] = {}
    for t in tensors:
        if t.node.op != Op.BUFFER:
            by_device.setdefault(t.device, []).append(t)
    for name, ts in by_device.items():
        for see in observers:
            see(name, [t.node for t in ts])
        bufs = get_device(name).realize([t.node for t in ts])
        for t, buf in zip(ts, bufs):
            t.node = Node(Op.BUFFER, buf.dtype, buf.shape, (), buf)
