"""Python's operators on Array: each is the namespace function the standard names for it.

``x + y`` is ``add(x, y)``, ``x[k]`` indexing, ``x @ y`` ``matmul``, ``x.mT`` ``matrix_transpose``.
This module sits above every function module and installs them on ``Array`` when the
package is imported, so the array class imports none of the functions that import it.
"""

from __future__ import annotations

import numpy as np

from limn_array import _elementwise as ew
from limn_array._array import Array
from limn_array._indexing import getitem, setitem
from limn_array._linalg import matmul, matrix_transpose


def _operand(o) -> bool:
    """Can ``o`` meet an array in an operator (else Python tries the other side)?"""
    return isinstance(o, Array | bool | int | float | complex | np.generic)


def _setitem(self: Array, key, value) -> None:
    self._t = setitem(self, key, value)._t  # a view writes through to its root


def _binary_operator(fn, accepts=None):
    """The forward, reflected and in-place operators of a binary function."""

    def fwd(self, o):
        return fn(self, o) if accepts is None or accepts(o) else NotImplemented

    def rev(self, o):
        return fn(o, self) if accepts is None or accepts(o) else NotImplemented

    def inplace(self, o):
        return self._inplace(fn, o)

    return fwd, rev, inplace


_BINARY = {
    "add": ew.add,
    "sub": ew.subtract,
    "mul": ew.multiply,
    "truediv": ew.divide,
    "floordiv": ew.floor_divide,
    "mod": ew.remainder,
    "pow": ew.pow,
    "and": ew.bitwise_and,
    "or": ew.bitwise_or,
    "xor": ew.bitwise_xor,
    "lshift": ew.bitwise_left_shift,
    "rshift": ew.bitwise_right_shift,
}
for _name, _fn in _BINARY.items():
    _f, _r, _i = _binary_operator(_fn)
    setattr(Array, f"__{_name}__", _f)
    setattr(Array, f"__r{_name}__", _r)
    setattr(Array, f"__i{_name}__", _i)

Array.__matmul__, Array.__rmatmul__, Array.__imatmul__ = _binary_operator(
    matmul, lambda o: isinstance(o, Array)
)
Array.__eq__ = _binary_operator(ew.equal, _operand)[0]
Array.__ne__ = _binary_operator(ew.not_equal, _operand)[0]
Array.__lt__ = ew.less
Array.__le__ = ew.less_equal
Array.__gt__ = ew.greater
Array.__ge__ = ew.greater_equal
Array.__neg__ = ew.negative
Array.__pos__ = ew.positive
Array.__abs__ = ew.abs
Array.__invert__ = ew.bitwise_invert
Array.__getitem__ = getitem
Array.__setitem__ = _setitem
Array.mT = property(matrix_transpose)
