"""Indexing: ``x[key]``, ``x[key] = value``, ``take`` and ``take_along_axis``.

Three kinds of key, three spellings in primitives:

* basic (ints, slices of any step, ``...``, ``None``): one VIEW, through the same movement
  ops ``limn.Tensor`` indexes with;
* integer arrays (the standard's vectorized indexing; 0-d integer arrays count as ints):
  the indexed axes are flattened into one and read with GATHER, lazily;
* a boolean mask: the result's length is the mask's count, so that one number is computed
  (realized) and everything else stays lazy: each True's rank is a prefix sum, and a
  SCATTER of positions into rank order gives the GATHER indices.

Assignment never writes a buffer. ``x[key] = v`` builds ``where(selected, placed, x)``: for
basic keys ``placed`` is ``v`` run backwards through the view (pads undo shrinks, a
pad-and-reshape undoes a step), for masks it is a gather of ``v`` by rank, and for integer
arrays a SCATTER into a -0.0 base (the additive identity that keeps every float bit).
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ir.graph import compose, dtypes
from limn_array import _order as order
from limn_array._array import Array, broadcast, host, lift, view_of, wrap
from limn_array._creation import asarray
from limn_array._data_types import astype, scalar_dtype

INDEX = dtypes.int64


# ---- parsing --------------------------------------------------------------------------


def _normalize(key, x: Array) -> list:
    """The key as a list of items: None, slice, int, or an Array; ``...`` expanded. A numpy
    integer or bool array is an index array too (cubed indexes its chunks with them)."""
    ndim = x.ndim
    if not isinstance(key, tuple):
        key = (key,)
    items = []
    for k in key:
        if isinstance(k, np.ndarray) and (k.ndim and k.dtype.kind in "iu" or k.dtype == bool):
            k = asarray(k, device=x.device)
        if k is None or k is Ellipsis or isinstance(k, slice):
            items.append(k)
        elif isinstance(k, Array):
            if k.dtype != dtypes.bool_ and not k.dtype.is_int:
                raise IndexError(
                    f"index: arrays used as indices must be integer or bool, got {k.dtype}"
                )
            items.append(k)
        elif isinstance(k, bool):
            raise IndexError("index: Python bools are not indices; use a bool array as a mask")
        else:
            try:
                items.append(operator.index(k))
            except TypeError:
                raise IndexError(
                    f"index: {type(k).__name__} is not an index; accepted: int, slice, ..., "
                    "None, integer arrays, or a bool array"
                ) from None
    if sum(k is Ellipsis for k in items) > 1:
        raise IndexError("index: only one ellipsis is allowed")
    used = sum(_width(k) for k in items)
    if used > ndim:
        raise IndexError(f"index: {used} indices for an array of {ndim} dims")
    if any(k is Ellipsis for k in items):
        i = next(j for j, k in enumerate(items) if k is Ellipsis)
        items[i : i + 1] = [slice(None)] * (ndim - used)
    else:
        items += [slice(None)] * (ndim - used)
    return items


def _width(k) -> int:
    """How many of the array's dims an item consumes."""
    if k is None or k is Ellipsis:
        return 0
    if isinstance(k, Array) and k.dtype == dtypes.bool_:
        return k.ndim
    return 1


def _is_mask(k) -> bool:
    return isinstance(k, Array) and k.dtype == dtypes.bool_


def _is_int_array(k) -> bool:
    return isinstance(k, Array) and k.dtype.is_int


# ---- reading --------------------------------------------------------------------------


def _region(k, size: int):
    """(lo, hi, step, flipped, count) of the elements an int or slice picks from a dim."""
    if isinstance(k, int):
        return k % size, k % size + 1, 1, False, None
    start, stop, step = k.indices(size)
    count = len(range(start, stop, step))
    if count == 0:
        return 0, 0, 1, False, 0
    if step > 0:
        return start, start + (count - 1) * step + 1, step, False, count
    return start + (count - 1) * step, start + 1, -step, True, count


def basic_index(t, items):
    """Ints, slices and None (no ``...``) as one view: shrink, flip, step, reshape.

    Dims of ``t`` past the items (a complex pair's (re, im) axis) are kept whole.
    """
    bounds, flips, steps, shape = [], [], [], []
    dim = 0
    for k in items:
        if k is None:
            shape.append(1)
            continue
        lo, hi, step, flipped, count = _region(k, t.shape[dim])
        bounds.append((lo, hi))
        steps.append(step)
        if flipped:
            flips.append(dim)
        if count is not None:
            shape.append(count)
        dim += 1
    rest = tuple(t.shape[dim:])
    bounds += [(0, s) for s in rest]
    steps += [1] * len(rest)
    y = t.p_shrink(tuple(bounds)).p_flip(tuple(flips)).p_step(tuple(steps))
    return y.p_reshape(tuple(shape) + rest)


def _check_ints(items, shape) -> None:
    dim = 0
    for k in items:
        if k is None:
            continue
        if isinstance(k, int) and not -shape[dim] <= k < shape[dim]:
            raise IndexError(
                f"index: {k} is out of range for axis {dim} of size {shape[dim]}; "
                f"accepted: {-shape[dim]}..{shape[dim] - 1}"
            )
        dim += 1


def getitem(x: Array, key) -> Array:
    items = _normalize(key, x)
    if any(_is_mask(k) for k in items):
        return _getitem_mask(x, items)
    if any(_is_int_array(k) for k in items):
        return _getitem_arrays(x, items)
    _check_ints(items, x.shape)
    basic = tuple(items)
    if not all(isinstance(k, int) for k in items) or _has_ellipsis(key):
        return view_of(x, lambda t: basic_index(t, basic))  # numpy: basic indexing views
    out = lift(lambda t: basic_index(t, basic), x)  # every dim an int: a copy, as numpy's scalar
    if x.size > 1:
        src = x._t  # reading one element computes x once, not per element:
        out._src = (src, lambda: basic_index(src, basic))  # (source, how to view it again)
    return out


def _has_ellipsis(key) -> bool:
    return key is Ellipsis or isinstance(key, tuple) and any(k is Ellipsis for k in key)


def running_count(mask_t):
    """The inclusive running count of the True elements of a bool tensor (flattened),
    computed now, and its last value: the count a mask's result length needs."""
    n = math.prod(mask_t.shape)
    rank = order.scan(mask_t.p_reshape((n,)).p_cast(INDEX), 0, "add")
    return rank, int(host(rank)[-1]) if n else 0


def _flat_positions(mask_t, count: int, rank=None):
    """The row-major positions of the count True elements of a bool tensor (flattened).

    The k-th True element (``rank``, its running count, is k) adds its position + 1 into
    slot k of count + 1 zeros; every False one adds into slot 0, which is cut off. Two
    scans, a WHERE and the SCATTER over the n elements; the -1 is applied to the count
    positions that are left."""
    n = math.prod(mask_t.shape)
    flat = mask_t.p_reshape((n,))
    rank = order.scan(flat.p_cast(INDEX), 0, "add") if rank is None else rank
    slot = flat.p_where(rank, rank.p_const(0))
    after = order.positions(rank, n, INDEX, start=1)
    base = rank.p_const(0, shape=(count + 1,))
    placed = base.p_scatter(slot, after, 0).p_shrink(((1, count + 1),))
    return placed.p_add(placed.p_const(-1))


def _take_flat(t, lead: int, idx):
    """Rows ``idx`` of ``t`` with its first ``lead`` dims flattened into one."""
    rest = tuple(t.shape[lead:])
    flat = t.p_reshape((math.prod(t.shape[:lead]),) + rest)
    k = idx.shape[0]
    full = idx.p_reshape((k,) + (1,) * len(rest)).p_expand((k,) + rest)
    return flat.p_gather(full, 0) if k else flat.p_shrink(((0, 0),) + tuple((0, s) for s in rest))


def _getitem_mask(x: Array, items) -> Array:
    masks = [k for k in items if _is_mask(k)]
    others = [k for k in items if not _is_mask(k)]
    full = all(isinstance(k, slice) and k == slice(None) for k in others)
    if len(masks) > 1 or not _is_mask(items[0]) or not full:
        raise IndexError("index: a bool mask must be the only index (the standard's rule)")
    mask = masks[0]
    if mask.ndim > x.ndim or any(a not in (b, 0) for a, b in zip(mask.shape, x.shape)):
        raise IndexError(f"index: a mask of shape {mask.shape} does not fit shape {x.shape}")
    m = mask._t
    if mask.ndim == 0:
        m = m.p_reshape((1,))
        out = lift(lambda t: t.p_reshape((1,) + tuple(t.shape)), x)
        lead_x = out
        lead = 1
    else:
        lead_x, lead = x, mask.ndim
    rank, count = running_count(m)
    idx = _flat_positions(m, count, rank)
    return lift(lambda t: _take_flat(t, lead, idx), lead_x)


def _getitem_arrays(x: Array, items) -> Array:
    """Vectorized indexing: integer arrays and ints broadcast together; slices elsewhere."""
    if any(k is None for k in items):
        raise IndexError("index: None cannot be combined with integer array indices")
    adv = [i for i, k in enumerate(items) if isinstance(k, int) or _is_int_array(k)]
    shape = x.shape
    idx_ts = []
    for i in adv:
        k = items[i]
        if isinstance(k, int):
            if not -shape[i] <= k < shape[i]:
                raise IndexError(f"index: {k} is out of range for axis {i} of size {shape[i]}")
            k = wrap(x._t.p_const(k, shape=(), dtype=INDEX))
        t = k._t.p_cast(INDEX)
        size = t.p_const(shape[i])
        idx_ts.append(t.p_cmplt(t.p_const(0)).p_where(t.p_add(size), t))  # -1 is the last
    bshape = compose.broadcast_shapes(*(t.shape for t in idx_ts), op="index")
    linear = None
    for i, t in zip(adv, idx_ts):
        t = compose.expand_to(t, bshape)
        linear = t if linear is None else linear.p_mul(t.p_const(shape[i])).p_add(t)
    rest = [i for i in range(x.ndim) if i not in adv]
    contiguous = adv == list(range(adv[0], adv[0] + len(adv)))
    slices = tuple(items[i] for i in rest)
    n = math.prod(bshape)
    flat_idx = linear.p_reshape((n,))

    def run(t):
        moved = t.p_permute(tuple(adv) + tuple(rest) + tuple(range(x.ndim, len(t.shape))))
        got = _take_flat(moved, len(adv), flat_idx)
        got = got.p_reshape(tuple(bshape) + tuple(got.shape[1:]))
        got = basic_index(got, (slice(None),) * len(bshape) + slices)
        if contiguous and adv[0] > 0:  # numpy's rule: adjacent array indices stay in place
            nb, lead = len(bshape), adv[0]
            order = (
                tuple(range(nb, nb + lead))
                + tuple(range(nb))
                + tuple(range(nb + lead, len(got.shape)))
            )
            got = got.p_permute(order)
        return got

    return lift(run, x)


# ---- writing --------------------------------------------------------------------------


def _value_like(x: Array, value, op: str) -> Array:
    """The value as an array of x's dtype and device (the standard's __setitem__ rules)."""
    if isinstance(value, Array):
        if value.dtype != x.dtype:
            d = dtypes.promote_array_api(x.dtype, value.dtype)
            if d != x.dtype:
                raise TypeError(f"{op}: a {value.dtype} value does not fit a {x.dtype} array")
            value = astype(value, x.dtype)
        return value
    scalar_dtype(value, x.dtype, op)
    return asarray(value, dtype=x.dtype, device=x.device)


def _undo_view(t, items, shape):
    """Place a tensor of the basic-indexed shape back where ``items`` read it from.

    The result has x's shape, zero outside the region (None if the region is empty); the
    caller selects with a mask placed the same way.
    """
    dims, j = [], 0  # one dim per slice and per None: drop the Nones, int dims come back as 1
    for k in items:
        if k is None:
            j += 1
        elif isinstance(k, int):
            dims.append(1)
        else:
            dims.append(t.shape[j])
            j += 1
    t = t.p_reshape(tuple(dims))
    region = []  # (lo, hi, step, flipped) per dim of x
    for k, size in zip([k for k in items if k is not None], shape):
        lo, hi, step, flipped, count = _region(k, size)
        if count == 0:
            return None
        region.append((lo, hi, step, flipped))
    flips = tuple(a for a, r in enumerate(region) if r[3])
    t = t.p_flip(flips) if flips else t
    for axis, (lo, hi, step, _) in enumerate(region):
        if step > 1:  # every step-th place: pad each element with step-1 zeros, cut the tail
            n = t.shape[axis]
            pre, post = tuple(t.shape[:axis]), tuple(t.shape[axis + 1 :])
            t = t.p_reshape(pre + (n, 1) + post)
            pads = [(0, 0)] * len(t.shape)
            pads[axis + 1] = (0, step - 1)
            t = t.p_pad(tuple(pads)).p_reshape(pre + (n * step,) + post)
            bounds = [(0, s) for s in t.shape]
            bounds[axis] = (0, hi - lo)
            t = t.p_shrink(tuple(bounds))
    return t.p_pad(tuple((lo, size - hi) for (lo, hi, _, _), size in zip(region, shape)))


def setitem(x: Array, key, value) -> Array:
    """The array x would be after ``x[key] = value``."""
    items = _normalize(key, x)
    v = _value_like(x, value, "__setitem__")
    if any(_is_mask(k) for k in items):
        return _setitem_mask(x, items, v)
    if any(_is_int_array(k) for k in items):
        return _setitem_arrays(x, items, v)
    _check_ints(items, x.shape)
    target = getitem(x, tuple(items)).shape
    v = broadcast(v, target, "__setitem__")
    sel = _undo_view(x._t.p_const(True, shape=target, dtype=dtypes.bool_), items, x.shape)
    if sel is None:
        return x
    return lift(lambda xt, vt: sel.p_where(_undo_view(vt, items, x.shape), xt), x, v)


def _setitem_mask(x: Array, items, v: Array) -> Array:
    masks = [k for k in items if _is_mask(k)]
    if len(masks) > 1 or not _is_mask(items[0]):
        raise IndexError("index: a bool mask must be the only index (the standard's rule)")
    mask = masks[0]
    m = compose.expand_to(mask._t.p_reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x.shape)
    if v.ndim == 0:
        return lift(lambda xt, vt: m.p_where(compose.expand_to(vt, x.shape), xt), x, v)
    if v.shape[0] == 0:
        return x  # an empty value fits only an all-False mask: nothing changes
    # a 1-d value of one element per True: element i goes to the i-th True position
    n = math.prod(mask.shape)
    mm = mask._t.p_reshape((n,)).p_cast(INDEX)
    rank = order.scan(mm, 0, "add").p_add(mm.p_const(-1))
    rank = compose.clamp(rank, rank.p_const(0), rank.p_const(max(v.shape[0] - 1, 0)))

    def place(xt, vt):
        rest = tuple(xt.shape[mask.ndim :])
        got = _take_flat(vt, 1, rank).p_reshape(tuple(mask.shape) + rest)
        return m.p_where(got, xt)

    return lift(place, x, v)


def _setitem_arrays(x: Array, items, v: Array) -> Array:
    """Scatter: among duplicate targets the last write wins (numpy's order)."""
    if any(not (isinstance(k, int) or _is_int_array(k)) for k in items):
        raise IndexError("index: assignment through integer arrays takes only ints and arrays")
    idx = _getitem_arrays(_position_array(x), items)  # the flat position of each target
    n = x.size
    p = idx._t.p_reshape((idx.size,))
    m = p.shape[0]
    v = broadcast(v, idx.shape, "__setitem__")
    # writer j loses to a later writer k > j aimed at the same place
    later = compose.eq(p.p_reshape((m, 1)).p_expand((m, m)), p.p_reshape((1, m)).p_expand((m, m)))
    j = compose.arange(p, m, INDEX)
    after = j.p_reshape((m, 1)).p_expand((m, m)).p_cmplt(j.p_reshape((1, m)).p_expand((m, m)))
    beaten = compose.logical_and(later, after).p_cast(INDEX).p_max((1,)).p_reshape((m,))
    wins = compose.eq(beaten, beaten.p_const(0))
    hit = p.p_const(0, shape=(n,)).p_scatter(p, wins.p_cast(INDEX), 0)
    hit = compose.ne(hit, hit.p_const(0)).p_reshape(x.shape)

    def place(xt, vt):
        vals = vt.p_reshape((m,))
        base = xt.p_const(-0.0 if xt.dtype.is_float else 0, shape=(n,))
        zero = vals.p_const(-0.0 if vals.dtype.is_float else 0)
        got = base.p_scatter(p, wins.p_where(vals, zero), 0).p_reshape(x.shape)
        if xt.dtype == dtypes.bool_:
            got = base.p_cast(INDEX).p_scatter(p, wins.p_where(vals, zero).p_cast(INDEX), 0)
            got = compose.ne(got, got.p_const(0)).p_reshape(x.shape)
        return hit.p_where(got, xt)

    return lift(place, x, v)


def _position_array(x: Array) -> Array:
    n = x.size
    return wrap(
        compose.arange(x._t, n, INDEX).p_reshape(x.shape)
        if n
        else x._t.p_const(0, shape=x.shape, dtype=INDEX)
    )


# ---- the indexing functions -------------------------------------------------------------


def take(x: Array, indices: Array, /, *, axis: int | None = None) -> Array:
    """An integer index (numpy's take accepts one, and cubed passes it) drops the axis."""
    if isinstance(indices, np.ndarray):
        indices = asarray(indices, device=x.device)
    scalar = not isinstance(indices, Array | bool) and hasattr(indices, "__index__")
    if not scalar and (
        not isinstance(indices, Array) or not indices.dtype.is_int or indices.ndim != 1
    ):
        raise TypeError(f"take: indices must be a 1-d integer array or an integer, got {indices!r}")
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"take: axis is required for a {x.ndim}-d array")
        axis = 0
    axis = compose.normalize_axis(axis, x.ndim, "take")
    key = [slice(None)] * x.ndim
    key[axis] = indices
    return getitem(x, tuple(key)) if scalar else _getitem_arrays(x, key)


def take_along_axis(x: Array, indices: Array, /, *, axis: int = -1) -> Array:
    if not isinstance(indices, Array) or not indices.dtype.is_int or indices.ndim != x.ndim:
        raise TypeError(f"take_along_axis: indices must be an integer array with {x.ndim} dims")
    axis = compose.normalize_axis(axis, x.ndim, "take_along_axis")
    xs, ks = list(x.shape), list(indices.shape)
    xs[axis] = ks[axis] = 1
    b = compose.broadcast_shapes(tuple(xs), tuple(ks), op="take_along_axis")
    xshape = tuple(x.shape[axis] if i == axis else s for i, s in enumerate(b))
    kshape = tuple(indices.shape[axis] if i == axis else s for i, s in enumerate(b))
    t = indices._t.p_cast(INDEX)
    t = t.p_cmplt(t.p_const(0)).p_where(t.p_add(t.p_const(x.shape[axis])), t)
    t = compose.expand_to(t, kshape)

    return lift(lambda xt: compose.expand_to(xt, xshape).p_gather(t, axis), x)
