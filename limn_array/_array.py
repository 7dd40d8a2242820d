"""The array object: a thin, mutable handle on a lazy ``limn.Tensor``.

An ``Array`` holds one Tensor (``_t``) and so one op-graph node and one device name; every
function of the namespace unwraps its arrays, builds graph through the shared composition
layer (``ir/graph/compose.py``, ``ir/graph/functions.py``) and wraps the result. Nothing computes
until bytes are asked for: ``bool()``, ``int()``, ``float()``, ``complex()``, ``__index__``,
``__dlpack__``, printing, ``np.asarray``, or a data-dependent shape.

Mutation (``x[k] = v``, ``x += y``) is functional underneath: the handle is rebound to a new
graph and no buffer is ever written, so arrays that shared the old value keep it (a lazy
graph that read ``x`` before the write still computes the old value, as numpy would have).

A view (basic indexing, ``permute_dims``, ``reshape``, ``flip``, ``.T``; see ``view_of``)
keeps no Tensor of its own: it holds its root array and the function that moves the
root's Tensor to it, and derives its Tensor from the root's current one whenever asked.
So a view always reads the root's current value, and writing it (``part += a``,
``part[k] = v``) rebinds the root to the root with the view's elements replaced
(``ir/graph/write.place``, the same write-through ``limn.Tensor.assign`` uses on a view). An
element read with every index an int is a copy, as numpy's scalar is; it remembers the
Tensor it was indexed from (``_src``), so reading many elements computes that source once.

Complex arrays are stored as a real Tensor with a trailing axis of two, (re, im): every
complex function is composed from real primitives, so reading either part is exact (a
CAST-based imag would be poisoned by an infinite real part) and any device that computes
float32/float64 computes complex64/complex128. Movement and indexing act on both parts
through ``lift``; the bytes are numpy's own complex layout, so DLPack and ``np.asarray``
see a complex array without a copy.

A real Array also speaks the primitive protocol (``p_*``) by delegating to its Tensor, so
the composition layer accepts Arrays as well as Tensors and there is one implementation
of each primitive.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from ir.graph import compose, dtypes, write
from ir.graph.dtypes import DType
from ir.graph.node import Node
from ir.graph.ops import Op
from limn import versions
from limn.runtime.device import Buffer, get_device
from limn.tensor import Tensor
from limn_array._policy import (
    API_VERSIONS,
    Device,
    check_device_dtype,
    complex_dtype,
    device_name,
    real_dtype,
)

# ---- tensors from host data -----------------------------------------------------------


def tensor_from_numpy(arr: np.ndarray, d: DType, device: str) -> Tensor:
    """A BUFFER node over ``arr``: no copy when ``arr`` is already contiguous of ``d``.

    A complex ``d`` gives the (..., 2) real pair view of the same bytes.
    """
    check_device_dtype(device, d, "asarray")
    arr = np.asarray(arr)
    if arr.dtype != dtypes.to_numpy(d):
        with np.errstate(all="ignore"):
            arr = arr.astype(dtypes.to_numpy(d))
    if d.is_complex:
        if not arr.flags.c_contiguous:
            arr = arr.copy()
        arr = arr.reshape(arr.shape + (1,)).view(dtypes.to_numpy(real_dtype(d)))
        d = real_dtype(d)
    buf = Buffer(d, arr.shape, arr)
    return Tensor._make(Node(Op.BUFFER, d, buf.shape, (), buf), device)


def const_tensor(value, d: DType, shape: tuple[int, ...], device: str) -> Tensor:
    check_device_dtype(device, d, "full")
    return Tensor._make(Node(Op.CONST, d, tuple(shape), (), dtypes.python_type(d)(value)), device)


def stack_parts(re: Tensor, im: Tensor) -> Tensor:
    """(re, im) -> a (..., 2) pair tensor, by padding each part and selecting (no adds,
    so -0.0 survives)."""
    shape = tuple(re.shape) + (1,)
    pads = ((0, 0),) * len(re.shape)
    a = re.p_reshape(shape).p_pad(pads + ((0, 1),))
    b = im.p_reshape(shape).p_pad(pads + ((1, 0),))
    first = re.p_const(True, shape=shape, dtype=dtypes.bool_).p_pad(pads + ((0, 1),))
    return first.p_where(a, b)


def split_parts(t: Tensor) -> tuple[Tensor, Tensor]:
    shape = tuple(t.shape[:-1])
    box = tuple((0, s) for s in shape)
    re = t.p_shrink(box + ((0, 1),)).p_reshape(shape)
    im = t.p_shrink(box + ((1, 2),)).p_reshape(shape)
    return re, im


def on_host(x: Array) -> bool:
    """Whether ``x``'s device keeps numpy bytes (numpy, c): there, a function that is one
    numpy call (fft, searchsorted, unique) is that call instead of its composition."""
    return get_device(x._t.device).host


def is_realized(t: Tensor) -> bool:
    return t.node.op == Op.BUFFER


def host(t: Tensor, d: DType | None = None) -> np.ndarray:
    """The bytes of ``t`` as a numpy array (computed now if lazy); do not write to it.

    With a complex ``d``, ``t`` is a (..., 2) pair and the result its complex view.
    """
    if not is_realized(t):
        t.realize()
    data = t.node.arg.data
    versions.exposed(t.node.arg)  # (bytes with a reader limn cannot see: never reused)
    if d is not None and d.is_complex:
        data = data.view(dtypes.to_numpy(d)).reshape(data.shape[:-1])
    return data


# ---- the array object ---------------------------------------------------------------


class Array:
    __slots__ = ("_tensor", "_dtype", "_src", "_root", "_fn", "_derived", "__weakref__")
    __array_ufunc__ = None  # numpy defers binary operators to ours

    def __init__(self, *args, **kwargs):
        raise TypeError("Array: build arrays with xp.asarray, xp.zeros, ... not Array(...)")

    @classmethod
    def _new(cls, t: Tensor, dtype: DType | None = None, src=None) -> Array:
        """Wrap ``t``; a complex ``dtype`` says ``t`` is its (..., 2) real pair."""
        a = object.__new__(cls)
        a._tensor = t
        a._dtype = t.dtype if dtype is None else dtype
        a._src = src
        a._root = a._fn = a._derived = None
        return a

    # ---- the tensor, and views ----------------------------------------------------

    @property
    def _t(self) -> Tensor:
        """This array's Tensor; a view's is derived from its root's current Tensor."""
        if self._root is None:
            return self._tensor
        base = self._root._tensor
        d = self._derived
        if d is None or d[0] is not base or d[1] is not base.node:
            d = self._derived = (base, base.node, self._fn(base))
        return d[2]

    @_t.setter
    def _t(self, t: Tensor) -> None:
        """Rebind this array's value; a view writes it through to its root."""
        self._src = None
        if self._root is None:
            self._tensor = t
            return
        base = self._root._tensor
        moves = moves_between(self._fn(base), base)
        write.check_writable(base.shape, moves, "in-place write into a view")
        self._root._tensor = write.place(base, moves, t)

    # ---- attributes (never compute) -----------------------------------------------

    @property
    def node(self):
        """The op-graph node this array is a handle on (what ``limn.ir`` prints)."""
        return self._t.node

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def device(self) -> Device:
        return Device(self._t.device)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._t.shape[:-1] if self._dtype.is_complex else self._t.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def T(self) -> Array:
        if self.ndim != 2:
            raise ValueError(f"T: needs a 2-d array, got shape {self.shape}; use .mT for stacks")
        return view_of(self, lambda t: t.p_permute((1, 0) + tuple(range(2, len(t.shape)))))

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len: a 0-d array has no length")
        return self.shape[0]

    def __array_namespace__(self, *, api_version: str | None = None):
        if api_version is not None and api_version not in API_VERSIONS:
            raise ValueError(
                f"__array_namespace__: api_version {api_version!r} is not one of {API_VERSIONS}"
            )
        return sys.modules["limn_array"]  # the package this module is part of

    def to_device(self, device, /, *, stream=None) -> Array:
        """Host devices share numpy buffers, so moving relabels the graph: no copy."""
        if stream is not None:
            raise ValueError("to_device: limn's host devices take no stream; pass None")
        name = device_name(device)
        check_device_dtype(name, self.dtype, "to_device")
        if name == self._t.device:
            return self
        return Array._new(Tensor._make(self._t.node, name), self._dtype)

    # ---- bytes --------------------------------------------------------------------

    def _host(self) -> np.ndarray:
        if self._root is not None:
            host(self._root._tensor)  # compute the whole root once; the view reads its buffer
        if not is_realized(self._t) and self._src is not None:
            src, view = self._src
            host(src)  # compute the whole source once; our view reads its buffer
            self._t = view()
            self._src = None
        return host(self._t, self._dtype)

    def _scalar(self, op: str):
        if self.ndim != 0:
            raise TypeError(f"{op}: needs a 0-d array, got shape {self.shape}")
        return self._host().item()

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __int__(self) -> int:
        if self.dtype.is_complex:
            raise TypeError(f"int: cannot convert a {self.dtype} array to int")
        return int(self._scalar("int"))

    def __float__(self) -> float:
        if self.dtype.is_complex:
            raise TypeError(f"float: cannot convert a {self.dtype} array to float; use real()")
        return float(self._scalar("float"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __index__(self) -> int:
        if not self.dtype.is_int:
            raise TypeError(f"index: only integer arrays are indices, got {self.dtype}")
        return int(self._scalar("index"))

    def __array__(self, dtype=None, copy=None):
        a = self._host()
        if copy is False and dtype is not None and np.dtype(dtype) != a.dtype:
            raise ValueError("__array__: copy=False but a dtype change needs a copy")
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        if copy:
            return a.copy()
        a = a.view()
        a.flags.writeable = False  # the bytes belong to an immutable graph node
        return a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the buffer; read-only where the consumer's DLPack can say so."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"__dlpack__: cannot export to DLPack device {dl_device}")
        a = self._host()
        if copy:
            a = a.copy()
        elif max_version is not None and tuple(max_version) >= (1, 0):
            a = a.view()
            a.flags.writeable = False  # the buffer belongs to an immutable graph node
        kw = {} if max_version is None else {"max_version": max_version}
        return a.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        if not get_device(self._t.device).host:
            raise BufferError(f"__dlpack_device__: the {self._t.device} device is not a host")
        return (1, 0)  # kDLCPU: host devices keep their buffers as numpy arrays

    def __repr__(self) -> str:
        body = np.array2string(self._host(), separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype}, device={self._t.device!r})"

    __str__ = __repr__

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iter: cannot iterate over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # ---- operators (installed by _operators.py) -----------------------------------

    def _inplace(self, fn, other) -> Array:
        r = fn(self, other)
        if r.dtype != self.dtype or r.shape != self.shape:
            raise TypeError(
                f"in-place {fn.__name__}: the result {r.dtype}{list(r.shape)} does not fit "
                f"the left operand {self.dtype}{list(self.shape)}"
            )
        self._t = r._t
        return self

    __hash__ = None  # type: ignore[assignment]

    # ---- the primitive protocol, by delegation --------------------------------------

    def p_const(self, value, shape=None, dtype=None) -> Array:
        return Array._new(real_tensor(self, "p_const").p_const(value, shape, dtype))


def _delegate(name: str, wrap_args: bool):
    def method(self, *args):
        if wrap_args:
            args = tuple(real_tensor(a, name) if isinstance(a, Array) else a for a in args)
        r = getattr(real_tensor(self, name), name)(*args)
        return Array._new(r) if isinstance(r, Tensor) else r

    method.__name__ = name
    return method


_PROTOCOL = (
    "p_neg p_exp p_log p_sqrt p_recip p_cast p_contiguous p_detach p_add p_mul p_cmplt p_idiv "
    "p_mod p_and p_or p_xor p_shl p_shr p_bitcast p_where p_sum p_max p_scan p_reshape "
    "p_permute p_expand p_pad p_shrink p_flip p_step p_gather p_scatter"
).split()
for _name in _PROTOCOL:
    setattr(Array, _name, _delegate(_name, True))


def wrap(t: Tensor) -> Array:
    return Array._new(t)


def wrap_complex(re: Tensor, im: Tensor) -> Array:
    return Array._new(stack_parts(re, im), complex_dtype(re.dtype))


def from_tensor(t: Tensor) -> Array:
    """An array over a ``limn.Tensor``'s node and device: no copy, no autograd record.

    A complex tensor is computed first and its bytes viewed as (re, im) pairs.
    """
    if t.dtype.is_complex:
        data = host(t)
        return Array._new(tensor_from_numpy(data, t.dtype, t.device), t.dtype)
    return Array._new(Tensor._make(t.node, t.device))


def to_tensor(x: Array) -> Tensor:
    """A ``limn.Tensor`` over an array's node and device: no copy (complex: its bytes)."""
    if x._dtype.is_complex:
        data = x._host()
        buf = Buffer(x._dtype, data.shape, data)
        return Tensor._make(Node(Op.BUFFER, x._dtype, buf.shape, (), buf), x._t.device)
    return Tensor._make(x._t.node, x._t.device)


def real_tensor(x: Array, op: str) -> Tensor:
    """The Tensor of a real array; complex arrays must be handled by the caller."""
    if x._dtype.is_complex:
        raise TypeError(f"{op}: not defined for complex arrays ({x._dtype})")
    return x._t


def parts(x: Array) -> tuple[Tensor, Tensor]:
    """(re, im) of any floating or complex array; a real array's imaginary part is 0."""
    if x._dtype.is_complex:
        return split_parts(x._t)
    return x._t, x._t.p_const(0)


def moves_between(t: Tensor, base: Tensor) -> tuple:
    """The movement ops that lead from ``base`` to its view ``t`` (None if ``t`` is no view
    of ``base``, e.g. a reshape that had to copy)."""
    moves = []
    while t is not base:
        if t._base is None:
            return None
        moves.append(t._move)
        t = t._base
    return tuple(reversed(moves))


def view_of(x: Array, fn, dtype: DType | None = None) -> Array:
    """The array ``fn`` moves ``x`` to, as a view of ``x``'s root when it is one.

    ``fn`` takes ``x``'s whole Tensor (a complex array's (re, im) pair included, as a
    trailing axis ``fn`` must keep) and applies movement ops only. Where they stay one
    View of the root the result is a view (it reads, and writes through to, the root);
    where they had to copy it is an array of its own, as numpy's reshape copies then.
    """
    root = x if x._root is None else x._root
    f = fn if x._root is None else (lambda t, g=x._fn: fn(g(t)))
    base = root._tensor
    t = f(base)
    a = Array._new(t, x._dtype if dtype is None else dtype)
    if moves_between(t, base) is not None:
        a._tensor, a._root, a._fn, a._derived = None, root, f, (base, base.node, t)
    return a


def lift(fn, *xs: Array, dtype: DType | None = None) -> Array:
    """Apply a function of real Tensors to arrays, part by part where they are complex.

    ``fn`` takes one Tensor per array and returns one Tensor; movement, indexing and
    selection apply to re and im alike, so this is all complex support they need.
    """
    if not any(x._dtype.is_complex for x in xs):
        out = fn(*(x._t for x in xs))
        return Array._new(out) if dtype is None else Array._new(out, dtype)
    ps = [parts(x) if x._dtype.kind in "fc" else (x._t, x._t) for x in xs]
    re = fn(*(p[0] for p in ps))
    im = fn(*(p[1] for p in ps))
    return wrap_complex(re, im)


def broadcast(x: Array, shape, op: str) -> Array:
    """``x`` broadcast to ``shape`` (a view), or a ValueError naming ``op``."""
    shape = tuple(shape)
    if len(shape) < x.ndim or compose.broadcast_shapes(x.shape, shape) != shape:
        raise ValueError(f"{op}: cannot broadcast shape {x.shape} to {shape}")
    return x if x.shape == shape else lift(lambda t: compose.expand_to(t, shape), x)
