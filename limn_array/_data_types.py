"""Data types and the data type functions of the standard.

The dtype objects are limn's own (``ir/graph/dtypes.py``), and so is the promotion table
(``ir.graph.dtypes.promote_array_api``); this file adds the standard's surface: its dtype
categories, ``isdtype``, ``result_type`` with Python scalars, ``can_cast``, ``finfo``,
``iinfo`` and ``astype``. float16 and bfloat16 are limn storage widths outside the
standard, so they are not exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir.graph import compose, dtypes
from ir.graph.dtypes import DType
from limn_array._array import Array, parts, real_tensor, wrap, wrap_complex
from limn_array._complex import is_zero
from limn_array._policy import check_device_dtype, device_name, real_dtype

bool = dtypes.bool_  # noqa: A001  (the standard's name)
int8, int16, int32, int64 = dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64
uint8, uint16, uint32, uint64 = dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64
float32, float64 = dtypes.float32, dtypes.float64
complex64, complex128 = dtypes.complex64, dtypes.complex128

SIGNED = (int8, int16, int32, int64)
UNSIGNED = (uint8, uint16, uint32, uint64)
INTEGER = SIGNED + UNSIGNED
REAL_FLOAT = (float32, float64)
COMPLEX = (complex64, complex128)
FLOAT = REAL_FLOAT + COMPLEX
REAL_NUMERIC = INTEGER + REAL_FLOAT
NUMERIC = REAL_NUMERIC + COMPLEX
ALL = (bool,) + NUMERIC

KINDS = {
    "bool": (bool,),
    "signed integer": SIGNED,
    "unsigned integer": UNSIGNED,
    "integral": INTEGER,
    "real floating": REAL_FLOAT,
    "complex floating": COMPLEX,
    "numeric": NUMERIC,
}

# What a function accepts, by the names the standard's signatures use.
ACCEPTS = {
    "numeric": NUMERIC,
    "real numeric": REAL_NUMERIC,
    "integer": INTEGER,
    "integer or boolean": INTEGER + (bool,),
    "boolean": (bool,),
    "floating-point": FLOAT,
    "real floating-point": REAL_FLOAT,
    "any": ALL,
}


def check_dtype(x: Array, accepts: str, op: str) -> None:
    if x._dtype not in ACCEPTS[accepts]:
        raise TypeError(f"{op}: needs a {accepts} array, got {x.dtype}")


def standard_dtype(d, op: str = "dtype") -> DType:
    """``d`` as a standard dtype; a numpy dtype of the same name counts as that dtype, so
    code that keeps its dtypes as numpy's (cubed's arrays do) can pass them here."""
    if isinstance(d, DType) and d in ALL:
        return d
    if isinstance(d, np.dtype) or (isinstance(d, type) and issubclass(d, np.generic)):
        for std in ALL:
            if std.name == np.dtype(d).name:
                return std
    raise TypeError(
        f"{op}: {d!r} is not a dtype of the standard; accepted: {', '.join(map(str, ALL))}"
    )


def real_of(d: DType) -> DType:
    """The real dtype with a complex dtype's precision (a real dtype maps to itself)."""
    return {complex64: float32, complex128: float64}.get(d, d)


def complex_of(d: DType) -> DType:
    return {float32: complex64, float64: complex128}.get(d, d)


def isdtype(dtype: DType, kind) -> bool:
    dtype = standard_dtype(dtype, "isdtype")
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, DType):
        return dtype == kind
    if isinstance(kind, str) and kind in KINDS:
        return dtype in KINDS[kind]
    raise ValueError(f"isdtype: kind {kind!r} is not a dtype or one of {list(KINDS)}")


# ---- promotion with Python scalars -------------------------------------------------


def _is_scalar(v) -> bool:
    return isinstance(v, int | float | complex)  # bool is an int


def scalar_dtype(value, d: DType, op: str) -> DType:
    """The dtype a Python scalar meeting an array of dtype ``d`` takes (the standard's rule)."""
    if isinstance(value, np.generic):
        value = value.item()
    ok = {
        "b": isinstance(value, __builtins__["bool"]),
        "i": isinstance(value, int) and not isinstance(value, __builtins__["bool"]),
        "f": isinstance(value, int | float) and not isinstance(value, __builtins__["bool"]),
        "c": isinstance(value, int | float | complex)
        and not isinstance(value, __builtins__["bool"]),
    }
    kind = "i" if d.kind == "u" else d.kind
    if ok[kind]:
        if d.is_int:
            lo, hi = dtypes.min_value(d), dtypes.max_value(d)
            if not lo <= value <= hi:
                raise OverflowError(f"{op}: Python int {value} is out of range for {d}")
        return d
    if kind == "f" and isinstance(value, complex):
        return complex_of(d)
    raise TypeError(
        f"{op}: a Python {type(value).__name__} does not combine with a {d} array; "
        f"the standard pairs bool with bool arrays, int with numeric, float with floating"
    )


def result_type(*arrays_and_dtypes) -> DType:
    scalars = [a for a in arrays_and_dtypes if _is_scalar(a) and not isinstance(a, Array)]
    typed = [a for a in arrays_and_dtypes if not (_is_scalar(a) and not isinstance(a, Array))]
    if not typed:
        raise TypeError("result_type: needs at least one array or dtype")
    ds = [a.dtype if isinstance(a, Array) else standard_dtype(a, "result_type") for a in typed]
    out = ds[0]
    for d in ds[1:]:
        out = dtypes.promote_array_api(out, d)
    for s in scalars:
        out = scalar_dtype(s, out, "result_type")
    return out


def can_cast(from_, to: DType, /) -> bool:
    src = from_.dtype if isinstance(from_, Array) else standard_dtype(from_, "can_cast")
    to = standard_dtype(to, "can_cast")
    try:
        return dtypes.promote_array_api(src, to) == to
    except TypeError:
        return False


# ---- finfo and iinfo --------------------------------------------------------------


@dataclass(frozen=True)
class finfo_object:
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


@dataclass(frozen=True)
class iinfo_object:
    bits: int
    max: int
    min: int
    dtype: DType


def _dtype_of(x, op: str) -> DType:
    return x.dtype if isinstance(x, Array) else standard_dtype(x, op)


def finfo(type, /) -> finfo_object:  # noqa: A002  (the standard's name)
    d = _dtype_of(type, "finfo")
    if d not in FLOAT:
        raise TypeError(f"finfo: needs a floating-point dtype, got {d}")
    r = real_of(d)
    f = np.finfo(dtypes.to_numpy(r))
    return finfo_object(
        int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), r
    )


def iinfo(type, /) -> iinfo_object:  # noqa: A002
    d = _dtype_of(type, "iinfo")
    if d not in INTEGER:
        raise TypeError(f"iinfo: needs an integer dtype, got {d}")
    return iinfo_object(d.bits, int(dtypes.max_value(d)), int(dtypes.min_value(d)), d)


# ---- casting ----------------------------------------------------------------------


def astype(x: Array, dtype: DType, /, *, copy: bool = True, device=None) -> Array:
    """A CAST node; with ``copy=False`` an array already of ``dtype`` comes back as is."""
    dtype = standard_dtype(dtype, "astype")
    if x.dtype.is_complex and not dtype.is_complex and dtype != bool:
        raise TypeError(
            f"astype: casting {x.dtype} to {dtype} would drop the imaginary part; "
            "take real(x) first"
        )
    name = device_name(device, x._t.device)
    check_device_dtype(name, dtype, "astype")
    if dtype == x.dtype and not copy and name == x._t.device:
        return x
    out = convert(x, dtype)
    return out if name == x._t.device else out.to_device(name)


def cast(x: Array, d: DType) -> Array:
    """x as dtype d (real to complex gets a +0 imaginary part)."""
    if x.dtype == d:
        return x
    if d.is_complex:
        r = real_dtype(d)
        if x.dtype.is_complex:
            re, im = parts(x)
            return wrap_complex(re.p_cast(r), im.p_cast(r))
        re = x._t.p_cast(r)
        return wrap_complex(re, re.p_const(0))
    return wrap(real_tensor(x, "astype").p_cast(d))


def convert(x: Array, dtype: DType) -> Array:
    """x as ``dtype``: a CAST, except that complex to bool means 'is not zero'."""
    if x.dtype.is_complex and dtype == bool:
        return wrap(compose.logical_not(is_zero(parts(x))))
    return cast(x, dtype)
