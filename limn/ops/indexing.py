"""Indexing of limn.Tensor: ``x[key]`` and ``x[key] = v``, and the ops that pick elements
by index or mask (``gather``, ``index_select``, ``take``, ``take_along_dim``,
``masked_select``, ``masked_fill``, ``nonzero``).

``Indexing`` is a mixin of ``limn.Tensor`` (see ``math.py``). Basic indexing (ints,
slices, ``...``, ``None``) is a view. Integer tensors and boolean masks (numpy's advanced
indexing) are a gather of the rows they pick; a mask is turned into those integers on the
host, since its count of True decides the result's shape (so ``x[mask]`` realizes the
mask, as torch's does). ``x[key] = v`` writes through the same view (``Tensor.assign``),
or by ``index_put`` for advanced keys. The writes by index (``scatter``, ``index_add``
...) are in ``scatter.py``.
"""

from __future__ import annotations

import math
from typing import Self

import numpy as np

from ir.graph import compose, dtypes
from limn.ops.arguments import accept_torch_names, scalar_dims
from limn.ops.inplace import index_put, write_result
from limn.runtime import profile


class Indexing:
    def masked_fill(self, mask, value):
        """``value`` (a number or a 0-d tensor) where ``mask`` (broadcast to this shape) is
        True, else this tensor."""
        if isinstance(value, Indexing) and value.ndim:
            raise ValueError(
                f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}"
            )
        if mask.dtype != dtypes.bool_:
            raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype}")
        return mask.where(value, self).cast(self.dtype)

    def gather(self, axis: int, index: Self) -> Self:
        """out[.., i, ..] = self[.., index[.., i, ..], ..] along ``axis`` (torch.gather).
        An empty index gives an empty result of its shape, whatever its dims (as torch's);
        a 0-d tensor is gathered from as the one element it holds."""
        if index.dtype.is_int and index.numel() == 0:
            return self.full(index.shape, 0, self.dtype, self.device)
        if self.ndim == 0 and index.dtype.is_int and index.ndim <= 1:
            compose.normalize_axis(axis, 1, "gather")
            return self.reshape(1).gather(0, index.reshape(-1)).reshape(index.shape)
        axis = compose.normalize_axis(axis, self.ndim, "gather")
        if not index.dtype.is_int or index.ndim != self.ndim:
            raise TypeError(
                f"gather: index must be an integer tensor with {self.ndim} dims, got "
                f"{index.dtype}{list(index.shape)}"
            )
        bounds = [(0, s) for s in index.shape]
        bounds[axis] = (0, self.shape[axis])
        if any(index.shape[d] > self.shape[d] for d in range(self.ndim) if d != axis):
            raise ValueError(f"gather: index {index.shape} is larger than {self.shape}")
        return profile.name_gather(self.p_shrink(tuple(bounds)).p_gather(index, axis), "gather")

    def index_select(self, axis: int, index) -> Self:
        axis = compose.normalize_axis(axis, self.ndim, "index_select")
        return _take(self, [axis], [self._lift(index) if isinstance(index, list) else index])

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iter: cannot iterate over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, key) -> Self:
        shape = self.shape
        if type(key) is int and shape and -shape[0] <= key < shape[0]:  # x[i]: the commonest
            key %= shape[0]
            bounds = ((key, key + 1), *((0, n) for n in shape[1:]))
            return self._moved((("shrink", bounds), ("reshape", shape[1:])))
        return _index(self, key)

    def __setitem__(self, key, value) -> None:
        """``x[key] = value``, torch's: basic indexing writes through the view ``x[key]``;
        integer tensors and masks write the elements they pick (``index_put``), ``value``
        broadcast to the picked shape; a mask with a value that broadcasts to the unpicked
        dims alone is a select, with no count of True to compute."""
        if isinstance(value, Indexing):
            value = value.cast(self.dtype)
        elif isinstance(value, list | tuple | np.ndarray):
            value = self._lift(np.asarray(value)).cast(self.dtype)
        if _zero_d_mask(key):  # numpy's: through a new dim of 1
            self.unsqueeze(0)[key.reshape(1)] = value
            return
        keys = key if isinstance(key, tuple) else (key,)
        if not any(_is_advanced(k) for k in keys):
            target = self[key]
            if not isinstance(value, Indexing):
                value = target._const(dtypes.python_type(self.dtype)(value), self.dtype)
            write_result(target, "setitem", lambda _: value, (value,), cast=False)
            return
        m = np.asarray(keys[0]) if isinstance(keys[0], list | np.ndarray) else keys[0]
        if len(keys) == 1 and m.dtype in (dtypes.bool_, np.bool_):
            m = self._lift(m) if isinstance(m, np.ndarray) else m
            if tuple(m.shape) != self.shape[: m.ndim]:
                raise IndexError(
                    f"index: a mask of shape {m.shape} does not match the leading dims of "
                    f"{self.shape}"
                )
            if getattr(value, "ndim", 0) <= self.ndim - m.ndim:
                m = m.reshape(m.shape + (1,) * (self.ndim - m.ndim))
                write_result(self, "setitem", lambda s: m.where(value, s), (value,), cast=False)
                return
        write_result(self, "index_put_", lambda s: index_put(s, keys, value), (value,))

    def take_along_dim(self, indices, axis=None):
        if axis is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        axis = compose.normalize_axis(axis, self.ndim, "take_along_dim")
        if indices.ndim != self.ndim:
            raise ValueError(
                f"take_along_dim: indices {indices.shape} need {self.ndim} dims, as {self.shape}"
            )
        one = [1 if d == axis else s for d, s in enumerate(self.shape)]
        ione = [1 if d == axis else s for d, s in enumerate(indices.shape)]
        shape = list(compose.broadcast_shapes(tuple(one), tuple(ione), op="take_along_dim"))
        shape_x, shape_i = list(shape), list(shape)
        shape_x[axis], shape_i[axis] = self.shape[axis], indices.shape[axis]
        i = indices.expand(*shape_i)
        i = (i < 0).where(i + self.shape[axis], i)
        return self.expand(*shape_x).gather(axis, i)

    def take(self, index):
        flat = self.reshape(-1)
        i = index.reshape(-1)
        i = (i < 0).where(i + flat.shape[0], i)
        return flat.gather(0, i).reshape(index.shape)

    def masked_select(self, mask):
        shape = compose.broadcast_shapes(self.shape, mask.shape, op="masked_select") or (1,)
        return self.reshape(self.shape or (1,)).expand(*shape)[
            mask.reshape(mask.shape or (1,)).expand(*shape)
        ]

    def nonzero(self, as_tuple: bool = False):
        import numpy as np

        where = np.nonzero(self.numpy()) if self.ndim else np.nonzero(self.numpy().reshape(1))
        if as_tuple:
            return tuple(self._lift(w.astype(np.int64)) for w in where)
        stacked = np.stack(where, -1) if self.ndim else np.zeros((len(where[0]), 0), np.int64)
        return self._lift(stacked.astype(np.int64))

    def argwhere(self):
        return self.nonzero()


def _zero_d_mask(k) -> bool:
    return isinstance(k, Indexing) and k.ndim == 0 and k.dtype == dtypes.bool_


def _is_advanced(k) -> bool:
    return isinstance(k, list | np.ndarray) or isinstance(k, Indexing) and k.ndim > 0


def _advanced(x, k):
    """A key item that picks by integers (an integer or bool tensor, list or array): the
    integer tensors it stands for (one per dim a mask covers), else None."""
    if isinstance(k, list | np.ndarray):
        k = np.asarray(k)
        if k.dtype.kind not in "iub":
            raise IndexError(f"index: an index array must hold ints or bools, got {k.dtype}")
    elif not (isinstance(k, Indexing) and k.ndim > 0):
        return None
    if k.dtype in (dtypes.bool_, np.bool_):  # its True positions decide the shape: computed now
        where = np.nonzero(k.numpy() if isinstance(k, Indexing) else k)
        return [x._lift(w.astype(np.int64)) for w in where]
    if isinstance(k, np.ndarray):
        return [x._lift(k.astype(np.int64))]
    if not k.dtype.is_int:
        raise IndexError(f"index: tensors used as indices must be integer or bool, got {k.dtype}")
    return [k]


def _take(x, dims: list[int], idxs: list) -> Indexing:
    """x at the integer tensors ``idxs`` along ``dims`` (broadcast together), numpy's
    advanced indexing: one gather over the dims flattened into one. The index dims take the
    place of ``dims`` if those are adjacent, else they come first."""
    shape = compose.broadcast_shapes(*(tuple(i.shape) for i in idxs), op="index")
    flat = None  # the row-major position within the indexed dims
    past = None  # where an index is past its own dim (it could land inside the flat ones)
    for d, i in zip(dims, idxs):
        n = x.shape[d]
        i = i.cast(dtypes.int64)
        i = (i < 0).where(i + n, i).expand(*shape)
        flat = i if flat is None else flat * n + i
        if len(dims) > 1:
            out = (i < 0) | (i >= n)
            past = out if past is None else past | out
    if past is not None:  # sent past the flattened end, so the gather refuses it
        flat = past.where(flat * 0 + math.prod(x.shape[d] for d in dims), flat)
    rest = [a for a in range(x.ndim) if a not in dims]
    inner = [x.shape[a] for a in rest]
    z = x.permute(*dims, *rest).reshape(math.prod(x.shape[d] for d in dims), math.prod(inner))
    k, m = math.prod(shape), z.shape[1]
    out = profile.name_gather(z.gather(0, flat.reshape(k, 1).expand(k, m)), "index")
    out = out.reshape(*shape, *inner)
    at = dims[0] if dims == list(range(dims[0], dims[0] + len(dims))) else 0
    order = list(range(len(shape), len(shape) + at)) + list(range(len(shape)))
    return out.permute(*order, *range(len(shape) + at, out.ndim))


def _index(x: Indexing, key) -> Indexing:
    """Basic indexing as views: ints, slices of any step, ``...`` and ``None``; then the
    advanced items (integer tensors, masks) as one ``_take``."""
    if _zero_d_mask(key):  # numpy's: a new dim of 1 or 0 elements
        return x.unsqueeze(0)[key.reshape(1)]
    if not isinstance(key, tuple):
        key = (key,)
    picks, items = [], []  # the advanced items' integer tensors; the key with them as ":"
    for k in key:
        found = _advanced(x, k)
        if found is None:
            items.append(k)
            continue
        picks.append((len(items), found))
        items += [slice(None)] * len(found)
    key = tuple(items)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("index: only one ellipsis allowed")
    if n_real > x.ndim:
        raise IndexError(f"index: too many indices ({n_real}) for a tensor of shape {x.shape}")
    expanded, where = [], {}  # where: key position -> position in expanded
    for i, k in enumerate(key):
        where[i] = len(expanded)
        if k is Ellipsis:
            expanded += [slice(None)] * (x.ndim - n_real)
        else:
            expanded.append(k)
    expanded += [slice(None)] * (x.ndim - sum(1 for k in expanded if k is not None))
    bounds, steps, flips, out_shape, dim, out_dim = [], [], [], [], 0, {}
    for j, k in enumerate(expanded):
        out_dim[j] = len(out_shape)
        if k is None:
            out_shape.append(1)
            continue
        size = x.shape[dim]
        if isinstance(k, Indexing) and k.ndim == 0 and k.dtype.is_int:
            k = int(k.item())
        if isinstance(k, np.integer):  # x[np.int64(1)]: a numpy integer is an int
            k = int(k)
        if isinstance(k, int) and not isinstance(k, bool):
            if not -size <= k < size:
                raise IndexError(
                    f"index: {k} is out of range for dim {dim} of size {size} in shape "
                    f"{x.shape}; accepted: {-size}..{size - 1}"
                )
            k %= size
            bounds.append((k, k + 1))
            steps.append(1)
        elif isinstance(k, slice):
            if k.step == 0:
                raise ValueError(
                    f"index: slice step cannot be zero (dim {dim} of shape {x.shape}); "
                    "accepted: any non-zero step"
                )
            start, stop, step = k.indices(size)
            count = len(range(start, stop, step))
            lo, hi = start, max(start, stop)
            if step < 0:
                lo, hi = (start - (count - 1) * -step, start + 1) if count else (0, 0)
                flips.append(dim)
            bounds.append((lo, hi))
            steps.append(abs(step))
            out_shape.append(count)
        else:
            raise TypeError(
                f"index: {type(k).__name__} is not supported; accepted: int, slice, ..., None, "
                "a numpy integer, an integer or bool tensor (or list, or numpy array)"
            )
        dim += 1
    if flips or any(k != 1 for k in steps):
        y = x.p_shrink(tuple(bounds)).p_flip(tuple(flips)).p_step(tuple(steps))
        y = y.p_reshape(tuple(out_shape))
    else:  # ints and plain slices (a batch, a row): one view, not one per move
        moves = (("shrink", tuple(bounds)), ("reshape", tuple(out_shape)))
        y = x._moved(moves if tuple(out_shape) != tuple(e - b for b, e in bounds) else moves[:1])
    if not picks:  # (x[:] of a tensor that takes gradients moved one move at a time)
        return x._same() if y is x else y
    dims = [out_dim[where[at] + j] for at, found in picks for j in range(len(found))]
    return _take(y, dims, [i for _, found in picks for i in found])


def nonzero_static(input: Indexing, *, size: int, fill_value: int = -1) -> Indexing:
    """``nonzero`` cut or filled (with ``fill_value``) to exactly ``size`` rows."""
    if size < 0:
        raise ValueError(f"nonzero_static: size must be >= 0, got {size}")
    found = input.nonzero().numpy()[:size]
    rows = np.full((size, max(input.ndim, found.shape[1] if found.ndim == 2 else 0)), fill_value,
                   np.int64)  # fmt: skip
    rows[: len(found)] = found
    return type(input)(rows, dtype=dtypes.int64, device=input.device)


Indexing.index_select = scalar_dims(Indexing.index_select)
Indexing.nonzero_static = nonzero_static
accept_torch_names(Indexing)
