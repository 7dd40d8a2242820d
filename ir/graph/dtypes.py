"""Data types and type promotion: the one owner of both.

A DType names a storage format. Every rule about how dtypes meet lives here, so the
Tensor frontend, the Array API frontend and every device agree on it:

* ``promote``  the limn (torch-like) lattice used by ``limn.Tensor``;
* ``promote_array_api``  the Python Array API standard's table, used by ``limn_array``;
* ``compute_dtype``  the width a device computes a dtype in (half floats widen to float32);
* ``acc_dtype``  the width a reduce keeps its running total in.

float16 and bfloat16 are storage widths: each computes in float32, and since neither holds
the other's numbers they meet at float32. Narrow ints are exact storage that wraps modulo
2**width. An int meeting a float joins the floats at float32 or wider.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True, repr=False, eq=False)
class DType:
    """One of the dtypes below: each exists once, so dtypes compare (and hash) by identity,
    one pointer compare on every op a program builds; a pickled dtype comes back as the
    same object."""

    name: str
    itemsize: int
    kind: str  # "b" bool, "i" signed int, "u" unsigned int, "f" float, "c" complex
    np: type  # the numpy scalar type that stores it

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __reduce__(self):
        return as_dtype, (self.name,)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def bits(self) -> int:
        return 8 * self.itemsize

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype that stores it, so ``np.dtype(d)`` understands a limn dtype."""
        return np.dtype(self.np)


bool_ = DType("bool", 1, "b", np.bool_)
int8 = DType("int8", 1, "i", np.int8)
int16 = DType("int16", 2, "i", np.int16)
int32 = DType("int32", 4, "i", np.int32)
int64 = DType("int64", 8, "i", np.int64)
uint8 = DType("uint8", 1, "u", np.uint8)
uint16 = DType("uint16", 2, "u", np.uint16)
uint32 = DType("uint32", 4, "u", np.uint32)
uint64 = DType("uint64", 8, "u", np.uint64)
float16 = DType("float16", 2, "f", np.float16)
bfloat16 = DType("bfloat16", 2, "f", ml_dtypes.bfloat16)
float32 = DType("float32", 4, "f", np.float32)
float64 = DType("float64", 8, "f", np.float64)
complex64 = DType("complex64", 8, "c", np.complex64)
complex128 = DType("complex128", 16, "c", np.complex128)

ALL = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64)
ALL += (float16, bfloat16, float32, float64, complex64, complex128)
BY_NAME = {d.name: d for d in ALL}
SIGNED = (int8, int16, int32, int64)
UNSIGNED = (uint8, uint16, uint32, uint64)
FLOATS = (float16, bfloat16, float32, float64)
HALF = (float16, bfloat16)

default_float = float32
default_int = int64


def as_dtype(x) -> DType:
    """Accept a DType, a name, a numpy dtype/scalar type, or a Python type."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in BY_NAME:
        return BY_NAME[x]
    if x is bool:
        return bool_
    if x is int:
        return default_int
    if x is float:
        return default_float
    if x is complex:
        return complex64
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    if npd is not None:
        for d in ALL:
            if np.dtype(d.np) == npd:
                return d
    raise TypeError(f"dtype: {x!r} is not a limn dtype; accepted: {', '.join(BY_NAME)}")


def to_numpy(d: DType) -> np.dtype:
    return np.dtype(d.np)


# ---- the limn lattice -------------------------------------------------------------


def _int_join(a: DType, b: DType) -> DType:
    """Smallest integer dtype holding both; int64 with uint64 has none."""
    if a.kind == b.kind:
        return a if a.itemsize >= b.itemsize else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    if s.itemsize > u.itemsize:
        return s
    wider = [d for d in SIGNED if d.itemsize > u.itemsize]
    if not wider:
        raise TypeError(f"promote: {a} and {b} have no common integer dtype")
    return wider[0]


def _float_join(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if {a, b} == set(HALF):
        return float32  # the two half widths meet at float32
    return a if a.itemsize > b.itemsize else b


def promote(a: DType, b: DType) -> DType:
    """The dtype two tensor operands meet at, by limn's lattice."""
    if a == b:
        return a
    if a == bool_:
        return b
    if b == bool_:
        return a
    if a.is_complex or b.is_complex:
        real = [d for d in (a, b) if not d.is_complex]
        wide = max((d.itemsize for d in (a, b)), default=8)
        if real and real[0] == float64 or wide == 16:
            return complex128
        return complex64
    if a.is_int and b.is_int:
        return _int_join(a, b)
    if a.is_float and b.is_float:
        return _float_join(a, b)
    f = a if a.is_float else b
    return f if f.itemsize >= 4 else float32  # an int meeting a float: float32 or wider


def promote_scalar(d: DType, value) -> DType:
    """A Python scalar takes the tensor's dtype, unless its kind needs a float."""
    if isinstance(value, bool) or d.is_float or d.is_complex:
        return d
    if isinstance(value, int):
        return d if d != bool_ else default_int
    if isinstance(value, float):
        return default_float
    if isinstance(value, complex):
        return complex64
    raise TypeError(f"promote: a Python scalar of type {type(value).__name__} is not accepted")


def total_dtype(d: DType, unsigned_stays_unsigned: bool) -> DType:
    """The dtype of a sum, product or cumulative sum over ``d``: integer totals widen.

    A total of many narrow integers outgrows their width at once (100 int8 ones already
    wrap), so bool and every integer width total in 64 bits: signed ones in int64, as torch
    and the Array API both say. The frontends differ only on unsigned input: the Array API
    keeps it unsigned (uint64), torch (and so Tensor) totals it in int64.
    """
    if d == bool_ or d.kind == "i":
        return int64
    if d.kind == "u":
        return uint64 if unsigned_stays_unsigned else int64
    return d


def compute_dtype(d: DType) -> DType:
    """The dtype arithmetic on ``d`` happens in: half widths widen to float32."""
    return float32 if d in HALF else d


def acc_dtype(d: DType) -> DType:
    """The dtype a reduce over ``d`` keeps its running total in."""
    return float32 if d in HALF else d


# ---- the Array API standard's table -----------------------------------------------


def promote_array_api(a: DType, b: DType) -> DType:
    """The standard's promotion table. The standard leaves mixed kinds to the implementation:
    an int meeting a float or complex dtype takes that dtype (limn's own rule, and what
    array code written against numpy, such as cubed's mean, counts on); bool meets only bool."""
    if a == b:
        return a
    if a == bool_ or b == bool_:
        raise TypeError(f"result_type: {a} and {b} do not promote; bool only meets bool")
    if a.is_int and b.is_int:
        return _int_join(a, b)
    if a.kind in "fc" and b.kind in "fc":
        if a in HALF or b in HALF:
            raise TypeError(f"result_type: {a} and {b} are outside the standard's table")
        if a.is_complex or b.is_complex:
            return (
                complex128
                if max(a.itemsize, b.itemsize) == 16 or float64 in (a, b)
                else (complex64)
            )
        return a if a.itemsize >= b.itemsize else b
    f = b if a.is_int else a
    if f in HALF:
        raise TypeError(f"result_type: {a} and {b} are outside the standard's table")
    return f


# ---- facts about dtypes -----------------------------------------------------------


def min_value(d: DType):
    if d == bool_:
        return False
    if d.is_int:
        return int(np.iinfo(d.np).min)
    return float("-inf")


def max_value(d: DType):
    if d == bool_:
        return True
    if d.is_int:
        return int(np.iinfo(d.np).max)
    return float("inf")


def wrap(value: int, d: DType) -> int:
    """A Python int reduced modulo 2**bits into integer dtype d's range, as d's sums wrap."""
    m = value % (1 << d.bits)
    return m - (1 << d.bits) if d.kind == "i" and m > max_value(d) else m


def python_type(d: DType) -> type:
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[d.kind]
