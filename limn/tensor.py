"""limn.Tensor: the torch-like frontend, lazy, with autograd.

A Tensor wraps one op-graph node and the device that will run it. Methods never compute:
they build nodes. The primitive ones (``p_*``) come from ``ir/graph/build.py``; a Tensor
wraps each new node with the record autograd differentiates it by (``limn/autograd.py``).
This file owns the Tensor itself: its node and device, bytes (``numpy()``, ``item()``,
``tolist()``, ``realize()``), the surface rules (limn's dtype lattice,
``ir.graph.dtypes.promote``, and numpy broadcasting), autograd
entry points, assignment and creation. The torch-like methods a user calls live in
``limn/ops/``, one module per concept (``math``, ``reductions``, ``movement``,
``indexing`` ...), spelled in ``ir.graph.compose``; how a tensor prints, in
``limn/printing.py``.

A device is named where a tensor is made (``device=``, checked there: an unknown name
fails at once, naming the accepted ones) and stays with the tensor; ``"cpu"`` is the c
device where a C compiler works, else the numpy reference (``limn.runtime.device.resolve``).
"""

from __future__ import annotations

import math

import numpy as np

from ir.graph import compose, dtypes, write
from ir.graph.build import Primitives, Spelled, apply_moves
from ir.graph.dtypes import DType, as_dtype, promote_scalar
from ir.graph.node import Node, format_graph
from ir.graph.ops import Op
from limn import autograd, versions
from limn.creation import Creation, _as_array, _infer_dtype, _rng, device_name
from limn.ops import inplace
from limn.ops.facts import Facts
from limn.ops.indexing import Indexing
from limn.ops.math import Math
from limn.ops.matrices import Matrices
from limn.ops.movement import Movement
from limn.ops.promotion import result_type
from limn.ops.reductions import Reductions
from limn.ops.scatter import Scatter
from limn.ops.sorting import Sorting
from limn.printing import format_tensor
from limn.runtime.device import Buffer, device_names, get_device

# _rng: limn.capture reads the generator here
__all__ = ["Tensor", "_rng", "realize", "where"]


def _buffer_node(data: np.ndarray, dtype: DType) -> Node:
    buf = Buffer(dtype, data.shape, np.asarray(data, dtypes.to_numpy(dtype), order="C"))
    return Node(Op.BUFFER, dtype, buf.shape, (), versions.private(buf))


# a movement torch copies for (a pad; and ``flip()``, whose negative-step indexing kin
# is a view, as in numpy): its result is no alias of the source
_COPIES = ("pad",)


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


class Tensor(
    Primitives,
    Math,
    Reductions,
    Sorting,
    Matrices,
    Movement,
    Indexing,
    Scatter,
    Facts,
    Creation,
):
    __array_priority__ = 100  # numpy defers to our operators
    # A movement's result that stayed one View remembers the tensor it was moved from and
    # how: the lineage limn_array's views write through (``limn_array/_array.py``).
    _base: Tensor | None = None
    _move: tuple = ()
    # torch's aliasing (``limn/versions.py``): the storage this tensor shares with its
    # views, ``detach()`` and ``.data``, the movements from the storage's value to this
    # tensor's, the storage gen its cached ``_node`` was derived at, and its version
    # counter (a one-item list, shared as torch shares it).
    _st: versions.Storage | None = None
    _moves: tuple = ()
    _seen: int = 0
    _vc: list | None = None
    # an in-place op recorded under autograd (``limn/ops/inplace.py``): the snapshots of
    # this tensor it replaced, by the version each was at
    _past: dict | None = None

    def __init__(self, data, dtype=None, requires_grad: bool = False, device: str | None = None):
        if isinstance(data, Tensor):
            data = data.numpy()
        d = as_dtype(dtype) if dtype is not None else _infer_dtype(data)
        with np.errstate(all="ignore"):
            arr = _as_array(data).astype(dtypes.to_numpy(d))
        self._node = _buffer_node(arr, d)
        self._st = None
        self.device = device_name(device, "Tensor")
        self.grad: Tensor | None = None
        self._ctx: autograd.Ctx | None = None
        self.requires_grad_(requires_grad)  # (refuses a dtype that takes no gradient)

    @property
    def node(self) -> Node:
        """This tensor's current value: its own node, or its storage's (a view's: the
        storage's current value moved as the view was taken, derived once per write)."""
        st = self._st
        if st is None:
            return self._node
        if not self._moves:
            return st.node
        if self._seen != st.gen:
            self._node, self._seen = versions.view_node(st.node, self._moves), st.gen
        return self._node

    @node.setter
    def node(self, node: Node) -> None:
        """Rebind this tensor (and every alias of its storage) to ``node`` as its value: a
        move to another device (``Module.to``), not a write (no version, no donation)."""
        if self._moves:
            raise ValueError("node: a view's value is its base's; set the base's")
        st = self._st
        if st is None:
            self._node = node
        else:
            st.node, st.gen, st.donor, st.pending = node, st.gen + 1, None, 0

    @property
    def _version(self) -> int:
        """torch's version counter: how many writes this tensor (or an alias sharing its
        counter) has had."""
        return 0 if self._vc is None else self._vc[0]

    def _storage(self) -> versions.Storage:
        st = self._st
        if st is None:
            st = self._st = versions.Storage(self._node)
            self._node = None  # (the storage holds the value: no second reference)
            if self._vc is None:
                self._vc = [0]
        return st

    def _alias(self, t: Tensor, moves: tuple, counter: bool = True) -> Tensor:
        """Make ``t`` an alias of this tensor's storage, taken by ``moves`` from this
        tensor; it shares the version counter unless ``counter`` is False (``.data``)."""
        st = self._storage()
        now = self.node if self._moves else None  # (read before t changes: t may be self)
        t._st, t._moves, t._vc = st, self._moves + moves, self._vc if counter else [0]
        if t._moves:
            t._seen = st.gen
            st.views.add(t)
            if t._node is None or moves == ():
                t._node = now
        else:
            t._node = None
        return t

    def _unalias(self) -> Tensor:
        """This tensor made a value of its own (a movement torch copies for)."""
        node = self.node
        self._st, self._moves, self._vc, self._node = None, (), None, node
        return self

    def where(self, a, b) -> Tensor:
        """self is the condition: a where true, b elsewhere."""
        return where(self, a, b)

    def _lift(self, data) -> Tensor:
        """Host data as a Tensor on this tensor's device."""
        return Tensor(data, device=self.device)

    @staticmethod
    def _make(node: Node, device: str, rule=None, parents=(), saved=None) -> Tensor:
        t = Tensor.__new__(Tensor)
        t._node, t._st, t.device, t.grad, t._ctx, t.requires_grad = (
            node,
            None,
            device,
            None,
            None,
            False,
        )
        if rule is not None and parents and autograd.grad_enabled():
            for p in parents:  # a loop, not any(): this runs for every op a program calls
                if p.requires_grad:
                    t.requires_grad = True
                    t._ctx = autograd.Ctx(rule, tuple(parents), saved, autograd.versions(parents))
                    break
        return t

    def _wrap(self, node: Node, rule=None, parents=(), saved=None) -> Tensor:
        return Tensor._make(node, self.device, rule, parents, saved)

    def _view(self, kind: str, arg) -> Tensor:
        with versions.storage_layout(self):
            t = super()._view(kind, arg)
            n = t._node
            src = n.srcs[0] if n.op == Op.VIEW else n
            copy = src.op == Op.CONTIGUOUS and src.srcs[0] is self.node
        if not copy:
            t._base, t._move = self, (kind, arg)
            if kind not in _COPIES:
                self._alias(t, ((kind, arg),))
        return t

    def _moved(self, moves) -> Tensor:
        # composed only when nothing is recorded between the moves: a gradient needs each
        # move's record, so a value that takes gradients makes the calls one by one
        if self.requires_grad and autograd.grad_enabled():
            return apply_moves(self, moves)
        with versions.storage_layout(self):
            return super()._moved(moves)

    def _wrap_moved(self, node: Node, moves) -> Tensor:
        t = self._wrap(node)
        t._base, t._move = self, ("moves", moves)  # a view of self, as each move's would be
        return self._alias(t, tuple(moves))

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
        """The value as a numpy array. A ``from_numpy`` tensor gives its array itself, as
        torch does; any other gives a read-only array of its value now, which later writes
        to the tensor never change (they are new versions, ``limn/versions.py``): torch's
        array would share the tensor's memory, but a lazy value has none to share."""
        return self._read(expose=True)

    def _read(self, expose: bool) -> np.ndarray:
        st = self._st
        if st is not None and st.shared and self._moves:  # the array's bytes now, moved
            return Tensor._make(versions.view_node(st.node, self._moves), self.device).numpy()
        self.realize()
        data = self.node.arg.data
        if st is not None and st.shared and not self._moves:
            return data
        if expose:  # its bytes now have a reader limn cannot see: never overwritten
            versions.exposed(self.node.arg)
        out = data.view()
        out.flags.writeable = False
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self):
        if self.size != 1:
            raise ValueError(f"item: needs a tensor of one element, got shape {self.shape}")
        return self._read(expose=False).reshape(()).item()  # (a copy: nothing handed out)

    def tolist(self):
        return self._read(expose=False).tolist()

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
                d = result_type(self, other)
            except TypeError as e:
                raise TypeError(f"{op}: {e}; cast one operand to a dtype that holds both") from None
            a, b = self.p_cast(d), other.p_cast(d)
            for src, cast in ((self, a), (other, b)):
                if cast is not src:  # torch saves the operand itself: its writes count
                    cast._cast_of = (src, src._version)
        elif isinstance(other, bool | int | float):
            d = promote_scalar(self.dtype, other)
            a = self.p_cast(d)
            value = dtypes.python_type(d)(other)
            if d.is_int:  # the scalar takes the tensor's dtype, so it wraps as d does
                value = dtypes.wrap(value, d)
            b = self._const(value, d, a.shape)  # one value at every cell: no broadcast
            return (b, a) if reverse else (a, b)
        elif isinstance(other, np.ndarray | list | tuple | np.generic):
            return self._align(Tensor(other, device=self.device), op, reverse)
        else:
            raise TypeError(f"{op}: cannot combine a Tensor with {type(other).__name__}")
        shape = compose.broadcast_shapes(a.shape, b.shape, op=op)
        a, b = a._operand(shape), b._operand(shape)
        return (b, a) if reverse else (a, b)

    def _operand(self, shape: tuple) -> Tensor:
        """This tensor broadcast to ``shape`` as the operand of an op: a view no program
        holds, so (unless a gradient records it) no alias of the storage is kept for it."""
        if self.shape == shape or self.requires_grad and autograd.grad_enabled():
            return compose.expand_to(self, shape)
        node = compose.expand_to(Spelled(self.node), shape).node
        return Tensor._make(node, self.device)

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.p_cast(dtypes.float32)

    # ---- dtypes ---------------------------------------------------------------------

    def cast(self, dtype) -> Tensor:
        return self.p_cast(as_dtype(dtype))

    astype = type = cast

    def to(self, *args, dtype=None, device=None, **_) -> Tensor:
        """torch's forms: ``to(device)``, ``to(dtype)``, ``to(other)`` (its device and
        dtype), ``to(device, dtype)``, and by keyword. Between host devices the graph moves
        as it is (they share bytes), but a numpy array's memory is copied (torch's copy to
        another device, which a later write into the array does not reach); to another
        device the value is copied there."""
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
            node = t.node
            if t._st is not None and t._st.shared:  # (a numpy array's memory: a copy of it)
                node = Node(Op.CONTIGUOUS, node.dtype, node.shape, (node,))
            return Tensor._make(node, name, Op.CONTIGUOUS, (t,))
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
        """torch's: the same value, outside autograd, sharing this tensor's storage and
        version counter (a write through either is seen by both)."""
        return self._alias(Tensor._make(None, self.device), ())

    @property
    def data(self) -> Tensor:
        """torch's ``.data``: an alias outside autograd, as ``detach()``, but with a
        version counter of its own (a write through it never fails a ``backward``)."""
        return self._alias(Tensor._make(None, self.device), (), counter=False)

    @data.setter
    def data(self, other: Tensor) -> None:
        """``x.data = t``: x's value is t's from now on (x shares t's storage), its
        autograd record and version counter its own."""
        if not isinstance(other, Tensor):
            raise TypeError(f"data: assign a Tensor, got {type(other).__name__}")
        if self.requires_grad and not other.dtype.is_float:
            raise RuntimeError(
                f"data: a tensor that requires grad must hold a float dtype, got {other.dtype}"
            )
        vc = self._vc
        other._alias(self, ())
        self._vc, self.device = vc if vc is not None else [0], other.device

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and not self.dtype.is_float:
            raise TypeError(f"requires_grad: only float tensors take gradients, got {self.dtype}")
        self.requires_grad = flag
        return self

    # ---- assignment -----------------------------------------------------------------

    def assign(self, value, op: str = "assign") -> Tensor:
        """Write ``value`` into this tensor (torch's ``copy_``, without the cast); returns
        this tensor.

        A write is a new version (``limn/versions.py``): from now on this tensor, and every
        alias of its storage (views, ``detach()``, ``.data``), reads the written value;
        values built before keep the one they read. Into a view (``z[1].assign(v)``) the
        write is the base's next value with the view's elements replaced
        (``ir/graph/write.place``). Not differentiable: a value that requires grad, or a
        target (or its base) that does, is refused while grad mode is on.
        """
        if not isinstance(value, Tensor):
            value = self._const(dtypes.python_type(self.dtype)(value), self.dtype)
        if value.dtype != self.dtype:
            raise TypeError(f"{op}: value dtype {value.dtype} != target dtype {self.dtype}")
        if value.shape != self.shape:
            fits = value.ndim <= self.ndim and all(
                v in (1, t) for v, t in zip(value.shape[::-1], self.shape[::-1])
            )
            if not fits:
                raise ValueError(
                    f"{op}: value shape {value.shape} does not fit target shape "
                    f"{self.shape}; accepted: the target's shape or one that broadcasts to it"
                )
            value = value.expand(*self.shape)
        if autograd.grad_enabled() and (self.requires_grad or value.requires_grad):
            if op != "assign" and self.requires_grad and self.is_leaf:
                raise RuntimeError(
                    f"{op}: a leaf Variable that requires grad is being used in an in-place "
                    "operation; write under limn.no_grad() (as an optimizer does)"
                )
            if value.requires_grad or op != "assign" or self._moves:
                raise RuntimeError(
                    f"{op}: an in-place write is not differentiable in limn, and the target "
                    "(or the tensor it is a view of) or the value requires grad; write under "
                    "limn.no_grad() or write value.detach()"
                )
        st, base = self._storage(), None
        node = value.node
        if self._moves:
            write.check_writable(st.node.shape, self._moves, op)
            base = Tensor._make(st.node, self.device)
            node = versions.place(base, self._moves, Tensor._make(node, self.device)).node
        st.write(node)
        self._vc[0] += 1
        if versions.watch is not None:
            versions.watch.append(op)
        if st.shared or st.pending > versions.MAX_PENDING:
            node = value = base = None  # (a node held here reads as a reader of the old bytes)
            versions.realize_on(self.device, [(st, None)])
        return self


inplace.install(Tensor)


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


def realize(*tensors: Tensor) -> None:
    """Compute these tensors in one batch (each device's in one plan)."""
    _realize(*tensors)


def _realize(*tensors: Tensor) -> None:
    """Each device's tensors in one batch. A storage whose pending writes started from a
    buffer nothing else reads (``versions.realize_on``) has the new value written into
    that buffer; one shared with a numpy array, or written while a capture records, is
    written in place whatever reads it (those readers get a copy of the old bytes)."""
    by_device: dict[str, list] = {}
    for t in (*tensors, *autograd.pending_roots()):
        st = t._st
        if st is not None and not t._moves:
            if st.node.op is not Op.BUFFER or st.donor is not None:
                by_device.setdefault(t.device, []).append((st, None))
        elif t.node.op is not Op.BUFFER and (st is None or not st.shared):
            # (a view of an array's bytes is never kept: it reads the array when read)
            by_device.setdefault(t.device, []).append((None, t))
    for name, items in by_device.items():
        versions.realize_on(name, items)
