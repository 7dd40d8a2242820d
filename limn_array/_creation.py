"""Creation functions: arrays from Python data, numpy, DLPack, or nothing at all.

Constant-filled arrays (``zeros``, ``ones``, ``full``, ``empty``) are CONST nodes: no
bytes exist until a kernel reads them, and a kernel that does reads a literal. Ranges
(``arange``, ``linspace``, ``eye``, ``tril``) are composed from ``compose.arange``, which is
itself constants and pads, so they fuse into whatever uses them. Only host data
(``asarray`` of lists or numpy arrays, ``from_dlpack``) makes a BUFFER, and a contiguous
numpy array of the right dtype becomes one without a copy.

Default dtypes follow numpy, which most array code is written against: float64, int64,
complex128 (``__array_namespace_info__().default_dtypes()`` says the same).
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from ir.graph import compose, dtypes
from ir.graph.dtypes import DType
from limn.tensor import Tensor
from limn_array._array import (
    Array,
    const_tensor,
    from_tensor,
    lift,
    stack_parts,
    tensor_from_numpy,
    wrap,
)
from limn_array._data_types import ALL, astype, standard_dtype
from limn_array._policy import check_device_dtype, device_name, real_dtype

DEFAULT_FLOAT = dtypes.float64
DEFAULT_INT = dtypes.int64
DEFAULT_COMPLEX = dtypes.complex128


def _shape(shape, op: str) -> tuple[int, ...]:
    out = compose.int_or_ints(shape, "shape", op)
    if any(s < 0 for s in out):
        raise ValueError(f"{op}: shape {out} has a negative size")
    return out


def _dtype(dtype, op: str) -> DType | None:
    return None if dtype is None else standard_dtype(dtype, op)


def scalar_kind_dtype(value) -> DType:
    """The default dtype for a Python scalar's kind."""
    if isinstance(value, builtins.bool | np.bool_):
        return dtypes.bool_
    if isinstance(value, int | np.integer):
        return DEFAULT_INT
    if isinstance(value, float | np.floating):
        return DEFAULT_FLOAT
    if isinstance(value, complex | np.complexfloating):
        return DEFAULT_COMPLEX
    raise TypeError(f"full: fill value {value!r} is not a bool, int, float or complex")


def full_array(value, shape: tuple[int, ...], d: DType, device: str) -> Array:
    """A CONST-node array (a pair of them for a complex dtype)."""
    check_device_dtype(device, d, "full")
    if d.is_complex:
        v = complex(value)
        r = real_dtype(d)
        re = const_tensor(v.real, r, shape, device)
        return Array._new(stack_parts(re, const_tensor(v.imag, r, shape, device)), d)
    if d.is_int:
        lo, hi = dtypes.min_value(d), dtypes.max_value(d)
        if not isinstance(value, builtins.bool) and not lo <= int(value) <= hi:
            raise OverflowError(f"full: {value} is out of range for {d}")
    if isinstance(value, complex) and not d.is_complex:
        raise TypeError(f"full: a complex fill value does not fit a {d} array")
    return wrap(const_tensor(value, d, shape, device))


# ---- from data --------------------------------------------------------------------------


def _nested_to_numpy(obj):
    """Python data, possibly holding 0-d Arrays, as a numpy array of the standard's defaults."""
    if isinstance(obj, list | tuple):
        obj = [_nested_to_numpy(o) if isinstance(o, list | tuple | Array) else o for o in obj]
    elif isinstance(obj, Array):
        return np.asarray(obj)
    arr = np.asarray(obj)
    if arr.dtype == np.float32 and not isinstance(obj, np.ndarray):
        arr = arr.astype(np.float64)
    return arr


def _infer(obj) -> DType:
    if isinstance(obj, builtins.bool | int | float | complex):
        if isinstance(obj, int) and not isinstance(obj, builtins.bool):
            if not dtypes.min_value(DEFAULT_INT) <= obj <= dtypes.max_value(DEFAULT_INT):
                raise OverflowError(f"asarray: Python int {obj} does not fit {DEFAULT_INT}")
        return scalar_kind_dtype(obj)
    raise TypeError


def asarray(obj, /, *, dtype=None, device=None, copy: bool | None = None) -> Array:
    d = _dtype(dtype, "asarray")
    if isinstance(obj, Array):
        name = device_name(device, obj._t.device)
        if d is not None and d != obj.dtype:
            if copy is False:
                raise ValueError(f"asarray: copy=False but {obj.dtype} -> {d} needs a copy")
            return astype(obj, d, device=name)
        if name != obj._t.device:
            if copy is False:
                raise ValueError("asarray: copy=False but moving devices needs a copy")
            return obj.to_device(name)
        # nodes are immutable and assignment rebinds, so a fresh handle is a true copy
        return Array._new(obj._t, obj._dtype) if copy else obj
    if isinstance(obj, Tensor):
        return asarray(from_tensor(obj), dtype=dtype, device=device, copy=copy)
    name = device_name(device)
    if isinstance(obj, builtins.bool | int | float | complex) and d is None:
        d = _infer(obj)
    if isinstance(obj, np.ndarray | np.generic):
        arr = obj
    elif hasattr(obj, "__dlpack__") and not isinstance(obj, list | tuple):
        arr = np.from_dlpack(obj)
    elif isinstance(obj, list | tuple | builtins.bool | int | float | complex):
        if copy is False:
            raise ValueError("asarray: copy=False but Python data must be copied")
        if d is not None and d.is_int and not isinstance(obj, builtins.bool):
            _check_ints(obj, d)
        arr = _nested_to_numpy(obj) if d is None else np.asarray(obj, dtypes.to_numpy(d))
    else:
        try:
            arr = np.asarray(memoryview(obj))
        except TypeError:
            raise TypeError(
                f"asarray: cannot make an array from {type(obj).__name__}; accepted: arrays, "
                "DLPack or buffer objects, Python scalars and nested sequences"
            ) from None
    if d is None:
        d = dtypes.as_dtype(arr.dtype)
        if d not in ALL:
            raise TypeError(f"asarray: numpy dtype {arr.dtype} has no standard dtype")
    if copy is False and arr.dtype != dtypes.to_numpy(d):
        raise ValueError(f"asarray: copy=False but {arr.dtype} -> {d} needs a copy")
    if copy is None:  # memory the caller owns and may change later is read now
        copy = not isinstance(obj, list | tuple | builtins.bool | int | float | complex)
    if copy:
        arr = np.array(arr, dtype=dtypes.to_numpy(d), copy=True)
    return Array._new(tensor_from_numpy(arr, d, name), d)


def _check_ints(obj, d: DType) -> None:
    if isinstance(obj, list | tuple):
        for o in obj:
            _check_ints(o, d)
    elif isinstance(obj, int) and not isinstance(obj, builtins.bool):
        if not dtypes.min_value(d) <= obj <= dtypes.max_value(d):
            raise OverflowError(f"asarray: Python int {obj} does not fit {d}")


def from_dlpack(x, /, *, device=None, copy: bool | None = None) -> Array:
    """Import through numpy's DLPack consumer: host memory is shared, not copied."""
    if isinstance(x, Array):
        return asarray(x, device=device, copy=copy)
    if device is not None and device_name(device) not in ("numpy", "c"):
        raise ValueError(f"from_dlpack: cannot import onto device {device!r}")
    kw = {} if copy is None else {"copy": copy}
    arr = np.from_dlpack(x, **kw)
    d = dtypes.as_dtype(arr.dtype)
    return Array._new(tensor_from_numpy(arr, d, device_name(device)), d)


# ---- filled -----------------------------------------------------------------------------


def full(shape, fill_value, *, dtype=None, device=None) -> Array:
    d = _dtype(dtype, "full") or scalar_kind_dtype(fill_value)
    if isinstance(fill_value, Array):
        fill_value = fill_value._host().item()
    return full_array(fill_value, _shape(shape, "full"), d, device_name(device))


def zeros(shape, *, dtype=None, device=None) -> Array:
    return full(shape, 0, dtype=dtype or DEFAULT_FLOAT, device=device)


def ones(shape, *, dtype=None, device=None) -> Array:
    return full(shape, 1, dtype=dtype or DEFAULT_FLOAT, device=device)


def empty(shape, *, dtype=None, device=None) -> Array:
    """Zeros: a CONST costs nothing, so there is no cheaper uninitialized array."""
    return zeros(shape, dtype=dtype, device=device)


def _like(x: Array, fill, dtype, device, op: str) -> Array:
    d = _dtype(dtype, op) or x.dtype
    return full_array(fill, x.shape, d, device_name(device, x._t.device))


def full_like(x: Array, /, fill_value, *, dtype=None, device=None) -> Array:
    return _like(x, fill_value, dtype, device, "full_like")


def zeros_like(x: Array, /, *, dtype=None, device=None) -> Array:
    return _like(x, 0, dtype, device, "zeros_like")


def ones_like(x: Array, /, *, dtype=None, device=None) -> Array:
    return _like(x, 1, dtype, device, "ones_like")


def empty_like(x: Array, /, *, dtype=None, device=None) -> Array:
    return _like(x, 0, dtype, device, "empty_like")


# ---- ranges -------------------------------------------------------------------------------


def _index(n: int, d: DType, device: str):
    """0, 1, ..., n-1 as a tensor of dtype d."""
    anchor = const_tensor(0, d, (), device)
    return compose.arange(anchor, n, d)


def _bound(v, what: str):
    """An arange bound: an integer (anything with ``__index__``) or a real float."""
    if isinstance(v, float | np.floating):
        return float(v)
    return compose.as_int(v, what, "arange")


def arange(start, /, stop=None, step=1, *, dtype=None, device=None) -> Array:
    if stop is None:
        start, stop = 0, start
    start, stop, step = _bound(start, "start"), _bound(stop, "stop"), _bound(step, "step")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    all_int = all(isinstance(v, int) for v in (start, stop, step))
    d = _dtype(dtype, "arange") or (DEFAULT_INT if all_int else DEFAULT_FLOAT)
    name = device_name(device)
    if all_int:
        n = len(range(start, stop, step))
    else:
        n = max(0, math.ceil((stop - start) / step))
    if d.is_int and not all_int or d.kind not in "iuf":
        raise TypeError(f"arange: {start}, {stop}, {step} do not make a {d} range")
    work = dtypes.int64 if d.is_int else dtypes.float64
    i = _index(n, work, name)
    if step != 1:
        i = i.p_mul(i.p_const(step))
    if start != 0:
        i = i.p_add(i.p_const(start))
    return Array._new(i.p_cast(d))


def linspace(start, stop, /, num: int, *, dtype=None, device=None, endpoint: bool = True):
    """start + i * (stop - start) / div, computed in float64; the endpoint is exact."""
    num = compose.as_int(num, "num", "linspace")
    if num < 0:
        raise ValueError(f"linspace: num must be non-negative, got {num}")
    is_c = isinstance(start, complex) or isinstance(stop, complex)
    d = _dtype(dtype, "linspace") or (DEFAULT_COMPLEX if is_c else DEFAULT_FLOAT)
    if d.kind not in "fc":
        raise TypeError(f"linspace: needs a floating dtype, got {d}")
    name = device_name(device)
    check_device_dtype(name, d, "linspace")
    div = (num - 1) if endpoint else num
    i = _index(num, dtypes.float64, name)

    def part(a: float, b: float):
        step = (b - a) / div if div > 0 else 0.0
        t = i.p_mul(i.p_const(step)).p_add(i.p_const(a))
        if endpoint and num > 1:
            last = compose.eq(i, i.p_const(num - 1))
            t = last.p_where(i.p_const(b), t)
        return t.p_cast(real_dtype(d))

    if d.is_complex:
        a, b = complex(start), complex(stop)
        return Array._new(stack_parts(part(a.real, b.real), part(a.imag, b.imag)), d)
    if isinstance(start, complex) or isinstance(stop, complex):
        raise TypeError(f"linspace: complex bounds need a complex dtype, got {d}")
    return wrap(part(float(start), float(stop)))


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype=None, device=None):
    n_rows = compose.as_int(n_rows, "n_rows", "eye")
    n_cols = n_rows if n_cols is None else compose.as_int(n_cols, "n_cols", "eye")
    k = compose.as_int(k, "k", "eye")
    if n_rows < 0 or n_cols < 0:
        raise ValueError(f"eye: sizes must be non-negative, got {n_rows} x {n_cols}")
    k = max(-n_rows, min(k, n_cols))  # diagonals past the edges are all empty alike
    d = _dtype(dtype, "eye") or DEFAULT_FLOAT
    name = device_name(device)
    i = _index(n_rows, dtypes.int64, name).p_reshape((n_rows, 1)).p_expand((n_rows, n_cols))
    j = _index(n_cols, dtypes.int64, name).p_reshape((1, n_cols)).p_expand((n_rows, n_cols))
    on = compose.eq(j, i.p_add(i.p_const(k)))
    one = full_array(1, (n_rows, n_cols), d, name)
    zero = full_array(0, (n_rows, n_cols), d, name)
    return lift(lambda a, b: on.p_where(a, b), one, zero)


def _triangle(x: Array, k: int, lower: bool, op: str) -> Array:
    if x.ndim < 2:
        raise ValueError(f"{op}: needs at least 2 dims, got shape {x.shape}")
    n, m = x.shape[-2:]
    k = max(
        -n, min(compose.as_int(k, "k", op), m)
    )  # diagonals past the edges all keep everything or nothing
    name = x._t.device
    i = _index(n, dtypes.int64, name).p_reshape((n, 1)).p_expand((n, m))
    j = _index(m, dtypes.int64, name).p_reshape((1, m)).p_expand((n, m))
    diag = compose.sub(j, i)  # j - i
    if lower:
        keep = compose.logical_not(diag.p_const(k).p_cmplt(diag))  # j - i <= k
    else:
        keep = compose.logical_not(diag.p_cmplt(diag.p_const(k)))  # j - i >= k
    keep = compose.expand_to(keep, x.shape)
    return lift(lambda t: keep.p_where(t, t.p_const(0)), x)


def tril(x: Array, /, *, k: int = 0) -> Array:
    return _triangle(x, k, True, "tril")


def triu(x: Array, /, *, k: int = 0) -> Array:
    return _triangle(x, k, False, "triu")


def meshgrid(*arrays: Array, indexing: str = "xy") -> tuple[Array, ...]:
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    if any(a.ndim != 1 for a in arrays):
        raise ValueError("meshgrid: every input must be 1-d")
    if len({a.dtype for a in arrays}) > 1:
        raise TypeError("meshgrid: every input must have the same dtype")
    sizes = [a.shape[0] for a in arrays]
    if indexing == "xy" and len(arrays) > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, a in enumerate(arrays):
        axis = i
        if indexing == "xy" and len(arrays) > 1 and i < 2:
            axis = 1 - i
        shape = [1] * len(arrays)
        shape[axis] = a.shape[0]
        out.append(lift(lambda t, s=tuple(shape): t.p_reshape(s).p_expand(tuple(sizes)), a))
    return tuple(out)
