"""Manipulation functions: shapes, axes, joining and splitting.

All of them are movement (one VIEW: reshape, permute, expand, flip, shrink, pad) or a
selection between padded pieces (``concat``, ``stack``, ``roll``), so they cost nothing
until a kernel reads them and then fuse into it. ``repeat`` with per-element counts is the
one data-dependent shape here: the total count is computed, the rest stays lazy.
"""

from __future__ import annotations

from ir.graph import compose, dtypes
from ir.graph.compose import normalize_axis
from limn_array import _order as order
from limn_array._array import Array, broadcast, host, lift, view_of
from limn_array._data_types import cast, result_type
from limn_array._indexing import take

INDEX = dtypes.int64


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    shapes = tuple(compose.as_ints(s, "shape", "broadcast_shapes") for s in shapes)
    return compose.broadcast_shapes(*shapes, op="broadcast_shapes")


def broadcast_to(x: Array, /, shape: tuple[int, ...]) -> Array:
    return broadcast(x, compose.as_ints(shape, "shape", "broadcast_to"), "broadcast_to")


def broadcast_arrays(*arrays: Array) -> tuple[Array, ...]:
    shape = compose.broadcast_shapes(*(a.shape for a in arrays), op="broadcast_arrays")
    return tuple(broadcast_to(a, shape) for a in arrays)


def _same_dtype(arrays, op: str) -> list[Array]:
    if not arrays:
        raise ValueError(f"{op}: needs at least one array")
    d = result_type(*arrays)
    return [cast(a, d) for a in arrays]


def concat(arrays, /, *, axis: int | None = 0) -> Array:
    xs = _same_dtype(list(arrays), "concat")
    if axis is None:
        xs = [reshape(x, (-1,)) for x in xs]
        axis = 0
    nd = xs[0].ndim
    if nd == 0:
        raise ValueError("concat: 0-d arrays cannot be joined; use axis=None or stack")
    axis = normalize_axis(axis, nd, "concat")
    for x in xs:
        if x.ndim != nd or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if i != axis
        ):
            raise ValueError(f"concat: shapes {[x.shape for x in xs]} differ outside axis {axis}")
    return lift(lambda *ts: compose.cat(list(ts), axis), *xs)


def stack(arrays, /, *, axis: int = 0) -> Array:
    xs = _same_dtype(list(arrays), "stack")
    if any(x.shape != xs[0].shape for x in xs):
        raise ValueError(f"stack: shapes differ: {[x.shape for x in xs]}")
    axis = normalize_axis(axis, xs[0].ndim + 1, "stack")
    return concat([expand_dims(x, axis=axis) for x in xs], axis=axis)


def unstack(x: Array, /, *, axis: int = 0) -> tuple[Array, ...]:
    if x.ndim == 0:
        raise ValueError("unstack: needs at least a 1-d array")
    axis = normalize_axis(axis, x.ndim, "unstack")
    out = []
    for i in range(x.shape[axis]):
        key = [slice(None)] * x.ndim
        key[axis] = i
        out.append(x[tuple(key)])
    return tuple(out)


def expand_dims(x: Array, /, axis=0) -> Array:
    axes = compose.int_or_ints(axis, "axis", "expand_dims")
    nd = x.ndim + len(axes)
    if any(not -nd <= a < nd for a in axes):
        raise IndexError(f"expand_dims: axis {axis} is out of range for a {nd}-d result")
    norm = sorted(normalize_axis(a, nd, "expand_dims") for a in axes)
    if len(set(norm)) != len(norm):
        raise ValueError(f"expand_dims: repeated axis in {axis}")
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def squeeze(x: Array, /, axis) -> Array:
    axes = compose.normalize_axes(axis, x.ndim, "squeeze")
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} of shape {x.shape} has size {x.shape[a]}, not 1")
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in axes))


def reshape(x: Array, /, shape, *, copy: bool | None = None) -> Array:
    shape = compose.resolve_shape(compose.as_ints(shape, "shape", "reshape"), x.shape)
    return view_of(x, lambda t: t.p_reshape(shape + tuple(t.shape[x.ndim :])))


def permute_dims(x: Array, /, axes) -> Array:
    axes = tuple(
        normalize_axis(a, x.ndim, "permute_dims")
        for a in compose.as_ints(axes, "axes", "permute_dims")
    )
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute_dims: {axes} is not a permutation of {x.ndim} axes")
    return view_of(x, lambda t: t.p_permute(axes + tuple(range(x.ndim, len(t.shape)))))


def moveaxis(x: Array, source, destination, /) -> Array:
    src = compose.int_or_ints(source, "source", "moveaxis")
    dst = compose.int_or_ints(destination, "destination", "moveaxis")
    if len(src) != len(dst):
        raise ValueError("moveaxis: source and destination need the same number of axes")
    src = [normalize_axis(a, x.ndim, "moveaxis") for a in src]
    dst = [normalize_axis(a, x.ndim, "moveaxis") for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("moveaxis: repeated axes")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, tuple(order))


def flip(x: Array, /, *, axis=None) -> Array:
    axes = compose.normalize_axes(axis, x.ndim, "flip")
    return view_of(x, lambda t: t.p_flip(axes))


def roll(x: Array, /, shift, *, axis=None) -> Array:
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), x.shape)
    shifts = compose.int_or_ints(shift, "shift", "roll")
    axes = compose.int_or_ints(axis, "axis", "roll")
    if len(shifts) != len(axes):
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        else:
            raise ValueError("roll: shift and axis need the same length")
    out = x
    for s, a in zip(shifts, axes):
        a = normalize_axis(a, x.ndim, "roll")
        n = x.shape[a]
        if n == 0 or s % n == 0:
            continue
        s %= n
        head = [slice(None)] * x.ndim
        tail = [slice(None)] * x.ndim
        head[a], tail[a] = slice(n - s, None), slice(0, n - s)
        out = concat([out[tuple(head)], out[tuple(tail)]], axis=a)
    return out


def tile(x: Array, repetitions, /) -> Array:
    reps = compose.as_ints(repetitions, "repetitions", "tile")
    nd = max(len(reps), x.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    inter = tuple(v for s in x.shape for v in (1, s))
    full = tuple(v for r, s in zip(reps, x.shape) for v in (r, s))
    out = tuple(r * s for r, s in zip(reps, x.shape))
    return lift(lambda t: t.p_reshape(inter).p_expand(full).p_reshape(out), x)


def repeat(x: Array, repeats, /, *, axis: int | None = None) -> Array:
    """Each element ``repeats`` times along ``axis``; per-element counts need their total."""
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    axis = normalize_axis(axis, x.ndim, "repeat")
    n = x.shape[axis]
    if not isinstance(repeats, Array):
        repeats = compose.as_int(repeats, "repeats", "repeat")
        if repeats < 0:
            raise ValueError(f"repeat: repeats must be non-negative, got {repeats}")
        pre, post = x.shape[:axis], x.shape[axis + 1 :]
        return lift(
            lambda t: (
                t.p_reshape(pre + (n, 1) + post)
                .p_expand(pre + (n, repeats) + post)
                .p_reshape(pre + (n * repeats,) + post)
            ),
            x,
        )
    if not repeats.dtype.is_int or repeats.ndim > 1:
        raise TypeError("repeat: repeats must be an int or a 1-d integer array")
    r = broadcast_to(repeats, (n,))._t.p_cast(INDEX)
    total = int(host(r.p_sum((0,))).reshape(()))
    # element i starts at its exclusive prefix sum; counting the starts at or before each
    # output place (zero-count elements included, they share the next start) numbers it
    starts = order.scan(r, 0, "add").p_add(r.p_neg())
    marks = r.p_const(0, shape=(total + 1,)).p_scatter(starts, r.p_const(1), 0)
    src = order.scan(marks, 0, "add").p_add(marks.p_const(-1)).p_shrink(((0, total),))
    return take(x, Array._new(src), axis=axis)
