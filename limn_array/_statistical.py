"""Statistical functions: reductions and cumulative reductions.

``sum``, ``max`` and ``min`` are the SUM and MAX primitives (min through an order flip);
``mean``, ``var`` and ``std`` are ``ir/graph/compose.py``'s spellings (two-pass variance);
``prod`` is the last element of a SCAN product (left to right, as numpy multiplies; a
complex one halves the axis log2(n) times, ``_order.tree_reduce``); the cumulative functions
are SCAN nodes, linear loops (a complex product, which mixes the
parts, is the log-step ``_order.scan_pairs``). Complex arrays reduce part by part, except
products, which combine (re, im) pairs with the complex product.
"""

from __future__ import annotations

from ir.graph import compose, dtypes, functions
from limn_array import _complex as complex_math
from limn_array import _order as order
from limn_array._array import Array, lift, parts, wrap, wrap_complex
from limn_array._creation import full_array
from limn_array._data_types import cast, check_dtype, standard_dtype
from limn_array._manipulation import concat


def _axes(x: Array, axis, op: str) -> tuple[int, ...]:
    return compose.normalize_axes(axis, x.ndim, op)


def _keep(shape, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _sum_dtype(x: Array, dtype) -> dtypes.DType:
    """The standard's default: integers widen to the default (unsigned) integer."""
    if dtype is not None:
        return standard_dtype(dtype, "sum")
    return dtypes.total_dtype(x.dtype, unsigned_stays_unsigned=True)


def sum(x: Array, /, *, axis=None, dtype=None, keepdims: bool = False) -> Array:  # noqa: A001
    check_dtype(x, "numeric", "sum")
    x = cast(x, _sum_dtype(x, dtype))
    axes = _axes(x, axis, "sum")
    out = _keep(x.shape, axes, keepdims)
    return lift(lambda t: t.p_sum(axes).p_reshape(out), x)


def prod(x: Array, /, *, axis=None, dtype=None, keepdims: bool = False) -> Array:
    check_dtype(x, "numeric", "prod")
    x = cast(x, _sum_dtype(x, dtype))
    axes = _axes(x, axis, "prod")
    out = _keep(x.shape, axes, keepdims)
    keep = [i for i in range(x.ndim) if i not in axes]
    flat = tuple(x.shape[i] for i in keep) + (int(_count(x.shape, axes)),)

    def gather_axes(t):
        return t.p_permute(tuple(keep) + axes).p_reshape(flat)

    last = len(flat) - 1
    if x.dtype.is_complex:
        re, im = parts(x)
        pr, pi = order.tree_reduce(
            (gather_axes(re), gather_axes(im)),
            last,
            lambda a, b: complex_math.mul(a, b),
            (1.0, 0.0),
        )
        return wrap_complex(pr.p_reshape(out), pi.p_reshape(out))
    # left to right, as numpy multiplies: a halving tree meets inf * (tiny * tiny) = inf * 0
    t = gather_axes(x._t)
    n = flat[-1]
    if n == 0:
        return wrap(t.p_const(1, shape=out))
    p = t.p_scan(last, "mul").p_shrink(tuple((0, s) for s in flat[:-1]) + ((n - 1, n),))
    return wrap(p.p_reshape(out))


def _count(shape, axes) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _nonempty(x: Array, axes, op: str) -> None:
    if _count(x.shape, axes) == 0:
        raise ValueError(f"{op}: cannot reduce over a zero-size axis of shape {x.shape}")


def max(x: Array, /, *, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    check_dtype(x, "real numeric", "max")
    axes = _axes(x, axis, "max")
    _nonempty(x, axes, "max")
    return wrap(compose.max_(x._t, axes, keepdims))


def min(x: Array, /, *, axis=None, keepdims: bool = False) -> Array:  # noqa: A001
    check_dtype(x, "real numeric", "min")
    axes = _axes(x, axis, "min")
    _nonempty(x, axes, "min")
    return wrap(compose.min_(x._t, axes, keepdims))


def _float_dtype(x: Array, dtype, op: str) -> Array:
    """``x`` in the floating dtype ``dtype`` a client names (numpy's keyword, which cubed
    passes to its chunks' mean); None keeps x's dtype, which must be floating."""
    if dtype is not None:
        d = standard_dtype(dtype, op)
        if d.kind not in "fc":
            raise TypeError(f"{op}: dtype must be a floating-point dtype, got {d}")
        x = cast(x, d)
    check_dtype(x, "floating-point", op)
    return x


def mean(x: Array, /, *, axis=None, keepdims: bool = False, dtype=None) -> Array:
    x = _float_dtype(x, dtype, "mean")
    axes = _axes(x, axis, "mean")
    n = _count(x.shape, axes)
    total = sum(x, axis=axes, keepdims=keepdims)
    return lift(lambda t: functions.divide(t, t.p_const(n if n else float("nan"))), total)


def var(
    x: Array, /, *, axis=None, correction: float = 0.0, keepdims: bool = False, dtype=None
) -> Array:
    x = _float_dtype(x, dtype, "var")
    check_dtype(x, "real floating-point", "var")
    axes = _axes(x, axis, "var")
    return wrap(compose.var(x._t, axes, keepdims, correction))


def std(
    x: Array, /, *, axis=None, correction: float = 0.0, keepdims: bool = False, dtype=None
) -> Array:
    x = _float_dtype(x, dtype, "std")
    check_dtype(x, "real floating-point", "std")
    axes = _axes(x, axis, "std")
    return wrap(compose.std(x._t, axes, keepdims, correction))


def _cumulative(x: Array, axis, dtype, include_initial: bool, op: str) -> Array:
    check_dtype(x, "numeric", op)
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"{op}: axis is required for a {x.ndim}-d array")
        axis = 0
    if x.ndim == 0:
        raise ValueError(f"{op}: needs at least a 1-d array")
    axis = compose.normalize_axis(axis, x.ndim, op)
    x = cast(x, _sum_dtype(x, dtype))
    is_sum = op == "cumulative_sum"
    if x.dtype.is_complex and is_sum:
        re, im = (order.scan(p, axis) for p in parts(x))
        out = wrap_complex(re, im)
    elif x.dtype.is_complex:
        re, im = order.scan_pairs(parts(x), axis, complex_math.mul)
        out = wrap_complex(re, im)
    else:
        out = wrap(order.scan(x._t, axis, "add" if is_sum else "mul"))
    if include_initial:
        shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape))
        first = full_array(0 if is_sum else 1, shape, x.dtype, x._t.device)
        out = concat([first, out], axis=axis)
    return out


def cumulative_sum(x: Array, /, *, axis=None, dtype=None, include_initial: bool = False):
    return _cumulative(x, axis, dtype, include_initial, "cumulative_sum")


def cumulative_prod(x: Array, /, *, axis=None, dtype=None, include_initial: bool = False):
    return _cumulative(x, axis, dtype, include_initial, "cumulative_prod")
