"""Utility functions: ``all``, ``any`` and ``diff``.

``all`` and ``any`` are a MAX (or its order flip) over the truth of each element, which
for floats counts nan as true and for complex needs either part nonzero. ``diff`` is
subtraction of two shifted views, repeated n times.
"""

from __future__ import annotations

from ir.graph import compose, dtypes
from limn_array._array import Array, wrap
from limn_array._data_types import convert
from limn_array._elementwise import not_equal, subtract
from limn_array._manipulation import concat


def _truth(x: Array):
    return convert(x, dtypes.bool_)._t


def all(x: Array, /, *, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    axes = compose.normalize_axes(axis, x.ndim, "all")
    return wrap(compose.min_(_truth(x), axes, keepdims))


def any(x: Array, /, *, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    axes = compose.normalize_axes(axis, x.ndim, "any")
    return wrap(compose.max_(_truth(x), axes, keepdims))


def diff(x: Array, /, *, axis: int = -1, n: int = 1, prepend=None, append=None) -> Array:
    if x.ndim == 0:
        raise ValueError("diff: needs at least a 1-d array")
    n = compose.as_int(n, "n", "diff")
    if n < 0:
        raise ValueError(f"diff: n must be non-negative, got {n}")
    axis = compose.normalize_axis(axis, x.ndim, "diff")
    if prepend is not None or append is not None:
        pieces = [p for p in (prepend, x, append) if p is not None]
        x = concat(pieces, axis=axis)
    for _ in range(n):
        m = x.shape[axis]
        hi = [slice(None)] * x.ndim
        lo = [slice(None)] * x.ndim
        hi[axis], lo[axis] = slice(1, m), slice(0, max(m - 1, 0))
        a, b = x[tuple(hi)], x[tuple(lo)]
        x = not_equal(a, b) if x.dtype == dtypes.bool_ else subtract(a, b)
    return x
