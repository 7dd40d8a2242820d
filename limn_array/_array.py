"""The array object: a thin, mutable handle on a lazy ``limn.Tensor``.

An ``Array`` holds one Tensor (``_t``) and so one op-graph node and one device name; every
function of the namespace unwraps its arrays, builds graph through the shared composition
layer (``ir/graph/compose.py``, ``ir/graph/elementary.py``) and wraps the result. Nothing computes
until bytes are asked for: ``bool()``, ``int()``, ``float()``, ``complex()``, ``__index__``,
``__dlpack__``, printing, ``np.asarray``, or a data-dependent shape.

Mutation (``x[k] = v``, ``x += y``) is functional underneath: the handle is rebound to a new
graph and no buffer is ever written, so arrays that shared the old value keep it. An array
read element by element remembers the Tensor it was indexed from (``_src``); reading bytes
then computes that whole source once instead of recomputing its graph per element.

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
from dataclasses import dataclass

import numpy as np

from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.node import Node
from ir.graph.ops import Op
from limn.runtime.device import Buffer, current_device, get_device
from limn.tensor import Tensor

API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12")
API_VERSION = "2025.12"


# ---- devices ------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """A device object as the standard sees it: a name limn's runtime knows."""

    name: str

    def __repr__(self) -> str:
        return f"Device({self.name!r})"


def device_dtypes(name: str) -> frozenset[DType]:
    """The dtypes arrays on a device can have: what the device declares it computes
    (``dtypes``; every dtype if it declares nothing), plus each complex dtype whose float
    parts it computes, since complex arrays are pairs of real tensors."""
    declared = getattr(get_device(name), "dtypes", None)
    held = set(dtypes.ALL if declared is None else declared)
    held |= {complex_dtype(d) for d in (dtypes.float32, dtypes.float64) if d in held}
    return frozenset(held)


def device_name(device, default: str | None = None) -> str:
    """Accept a Device, a device name, or None (the default device)."""
    if device is None:
        return default or current_device()
    if isinstance(device, Device):
        return device.name
    if isinstance(device, str):
        get_device(device)  # fails here, naming the known devices, if unknown
        return device
    raise ValueError(f"device: {device!r} is not a device; accepted: a Device or a name")


def check_device_dtype(name: str, d: DType, op: str) -> None:
    if d not in device_dtypes(name):
        raise TypeError(
            f"{op}: the {name} device cannot hold {d} arrays; move the data to a device "
            f"that can (e.g. to_device('numpy')) or use a dtype it holds"
        )


# ---- tensors from host data -----------------------------------------------------------


def real_dtype(d: DType) -> DType:
    """The dtype of a complex dtype's parts (a real dtype is its own)."""
    return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(d, d)


def complex_dtype(d: DType) -> DType:
    return {dtypes.float32: dtypes.complex64, dtypes.float64: dtypes.complex128}[d]


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


def is_realized(t: Tensor) -> bool:
    return t.node.op == Op.BUFFER


def host(t: Tensor, d: DType | None = None) -> np.ndarray:
    """The bytes of ``t`` as a numpy array (computed now if lazy); do not write to it.

    With a complex ``d``, ``t`` is a (..., 2) pair and the result its complex view.
    """
    if not is_realized(t):
        t.realize()
    data = t.node.arg.data
    if d is not None and d.is_complex:
        data = data.view(dtypes.to_numpy(d)).reshape(data.shape[:-1])
    return data


# ---- the array object ---------------------------------------------------------------


class Array:
    __slots__ = ("_t", "_dtype", "_src", "__weakref__")
    __array_ufunc__ = None  # numpy defers binary operators to ours

    def __init__(self, *args, **kwargs):
        raise TypeError("Array: build arrays with xp.asarray, xp.zeros, ... not Array(...)")

    @classmethod
    def _new(cls, t: Tensor, dtype: DType | None = None, src=None) -> Array:
        """Wrap ``t``; a complex ``dtype`` says ``t`` is its (..., 2) real pair."""
        a = object.__new__(cls)
        a._t = t
        a._dtype = t.dtype if dtype is None else dtype
        a._src = src
        return a

    @property
    def _is_complex(self) -> bool:
        return self._dtype.is_complex

    # ---- attributes (never compute) -----------------------------------------------

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
        return lift(lambda t: t.p_permute((1, 0)), self)

    @property
    def mT(self) -> Array:
        from limn_array._linalg import matrix_transpose

        return matrix_transpose(self)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len: a 0-d array has no length")
        return self.shape[0]

    def __array_namespace__(self, *, api_version: str | None = None):
        if api_version is not None and api_version not in API_VERSIONS:
            raise ValueError(
                f"__array_namespace__: api_version {api_version!r} is not one of {API_VERSIONS}"
            )
        import limn_array

        return limn_array

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
        if not is_realized(self._t) and self._src is not None:
            from limn_array._indexing import basic_index

            src, key = self._src
            host(src)  # compute the whole source once; our view reads its buffer
            self._t = basic_index(src, key)
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

    # ---- indexing -----------------------------------------------------------------

    def __getitem__(self, key) -> Array:
        from limn_array._indexing import getitem

        return getitem(self, key)

    def __setitem__(self, key, value) -> None:
        from limn_array._indexing import setitem

        self._t = setitem(self, key, value)._t
        self._src = None

    # ---- operators ----------------------------------------------------------------

    def _inplace(self, fn, other) -> Array:
        r = fn(self, other)
        if r.dtype != self.dtype or r.shape != self.shape:
            raise TypeError(
                f"in-place {fn.__name__}: the result {r.dtype}{list(r.shape)} does not fit "
                f"the left operand {self.dtype}{list(self.shape)}"
            )
        self._t, self._src = r._t, None
        return self

    def __neg__(self):
        return _ew.negative(self)

    def __pos__(self):
        return _ew.positive(self)

    def __abs__(self):
        return _ew.abs(self)

    def __invert__(self):
        return _ew.bitwise_invert(self)

    def __matmul__(self, o):
        return _linalg.matmul(self, o) if isinstance(o, Array) else NotImplemented

    def __rmatmul__(self, o):
        return _linalg.matmul(o, self) if isinstance(o, Array) else NotImplemented

    def __imatmul__(self, o):
        return self._inplace(_linalg.matmul, o)

    def __eq__(self, o):  # type: ignore[override]
        return _ew.equal(self, o) if _operand(o) else NotImplemented

    def __ne__(self, o):  # type: ignore[override]
        return _ew.not_equal(self, o) if _operand(o) else NotImplemented

    def __lt__(self, o):
        return _ew.less(self, o)

    def __le__(self, o):
        return _ew.less_equal(self, o)

    def __gt__(self, o):
        return _ew.greater(self, o)

    def __ge__(self, o):
        return _ew.greater_equal(self, o)

    __hash__ = None  # type: ignore[assignment]

    # ---- the primitive protocol, by delegation --------------------------------------

    def p_const(self, value, shape=None, dtype=None) -> Array:
        return Array._new(real_tensor(self, "p_const").p_const(value, shape, dtype))


def _operand(o) -> bool:
    """Can ``o`` meet an array in an operator (else Python tries the other side)?"""
    return isinstance(o, Array | bool | int | float | complex | np.generic)


def _binary_operator(name: str):
    def fwd(self, o):
        return getattr(_ew, name)(self, o)

    def rev(self, o):
        return getattr(_ew, name)(o, self)

    def inplace(self, o):
        return self._inplace(getattr(_ew, name), o)

    return fwd, rev, inplace


for _op, _fn in [
    ("add", "add"),
    ("sub", "subtract"),
    ("mul", "multiply"),
    ("truediv", "divide"),
    ("floordiv", "floor_divide"),
    ("mod", "remainder"),
    ("pow", "pow"),
    ("and", "bitwise_and"),
    ("or", "bitwise_or"),
    ("xor", "bitwise_xor"),
    ("lshift", "bitwise_left_shift"),
    ("rshift", "bitwise_right_shift"),
]:
    _f, _r, _i = _binary_operator(_fn)
    setattr(Array, f"__{_op}__", _f)
    setattr(Array, f"__r{_op}__", _r)
    setattr(Array, f"__i{_op}__", _i)


def _delegate(name: str, wrap_args: bool):
    def method(self, *args):
        if wrap_args:
            args = tuple(real_tensor(a, name) if isinstance(a, Array) else a for a in args)
        r = getattr(real_tensor(self, name), name)(*args)
        return Array._new(r) if isinstance(r, Tensor) else r

    method.__name__ = name
    return method


_PROTOCOL = (
    "p_neg p_exp p_log p_sqrt p_recip p_cast p_contiguous p_add p_mul p_cmplt p_idiv p_mod "
    "p_and p_or p_xor p_shl p_shr p_bitcast p_where p_sum p_max p_reshape p_permute "
    "p_expand p_pad p_shrink p_flip p_step p_gather p_scatter"
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


from limn_array import _elementwise as _ew  # noqa: E402  (operators call into these)
from limn_array import _linalg  # noqa: E402
