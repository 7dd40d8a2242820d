"""torch's type promotion, the Tensor frontend's surface rule (``torch.result_type``).

Two operands of one kind meet at the wider dtype, as in limn's lattice
(``ir.graph.dtypes.promote``, which limn_array keeps with the Array API's rule). torch
differs in two ways, both here:

* An integer meeting a float gives that float, whatever its width (int64 + float16 is
  float16; the lattice gives float32 at least), and float16 meets bfloat16 at float32.
* A 0-d tensor, and a Python number, take part only when its kind is above the
  dimensioned operand's (bool < integer < float): ``s * x`` of a 0-d float64 statistic
  and a float32 ``x`` is float32, and a 0-d int64 index added to an int8 tensor keeps int8.
  A Python number is placed below a 0-d tensor, a float number counting as float32
  (``ir.graph.dtypes.promote_scalar`` answers that case).
"""

from __future__ import annotations

from ir.graph import dtypes
from ir.graph.dtypes import DType


def promote_types(a: DType, b: DType) -> DType:
    """torch's ``promote_types``: the dtype two operands of equal standing meet at."""
    if a == b or b == dtypes.bool_:
        return a
    if a == dtypes.bool_:
        return b
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if {a, b} == {dtypes.float16, dtypes.bfloat16}:
        return dtypes.float32
    return dtypes.promote(a, b)


def _rank(d: DType) -> int:
    return 2 if d.is_float else 0 if d == dtypes.bool_ else 1


def result_type(a, b) -> DType:
    """torch's ``result_type`` of two tensors: a 0-d one counts only above the other's
    kind (where both are 0-d or both are not, they meet as equals)."""
    da, db = a.dtype, b.dtype
    if da == db:
        return da
    if (a.ndim == 0) == (b.ndim == 0):
        return promote_types(da, db)
    dim, zero = (da, db) if b.ndim == 0 else (db, da)
    return dim if _rank(dim) >= _rank(zero) else promote_types(dim, zero)
