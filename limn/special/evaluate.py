"""How limn.special's functions evaluate: in float64, rounded once to the input's float
dtype (integers and bools give float32, as torch's do), series by Horner's rule."""

from __future__ import annotations

from ir.graph import dtypes
from limn.tensor import Tensor

F64 = dtypes.float64


def _in64(x) -> tuple[Tensor, object]:
    """x as float64, and the float dtype the result rounds to."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    out = x.dtype if x.dtype.is_float else dtypes.float32
    return x.cast(F64), out


def _poly(z: Tensor, coeffs) -> Tensor:
    """coeffs[0] + coeffs[1] z + coeffs[2] z**2 + ..."""
    r = z * 0 + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        r = r * z + c
    return r
