"""The torch-like movement and indexing of limn.Tensor: views, splits, and ``x[key]``.

A mixin like ``limn/torch_methods.py``: each method checks its arguments in torch's
forms (``view(2, -1)`` or ``view((2, -1))``, negative dims) and hands the work to a
movement primitive or ``ir/graph/compose.py``. Basic indexing (ints, slices, ``...``,
``None``) is a view. Integer tensors and boolean masks (numpy's advanced indexing) are a
gather of the rows they pick; a mask is turned into those integers on the host, since
its count of True decides the result's shape (so ``x[mask]`` realizes the mask, as torch's
does). ``x[key] = v`` writes through the same view (``Tensor.assign``).
"""

from __future__ import annotations

import math
from typing import Self

import numpy as np

from ir.graph import compose, dtypes
from ir.graph.dtypes import DType, promote
from ir.graph.ops import Op
from ir.graph.view import contiguous_strides
from limn import versions
from limn.runtime import profile
from limn.torch_inplace import index_put, write_result
from limn.torch_methods import accept_torch_names, scalar_dims, torch_names


class TorchMovement:
    def reshape(self, *shape) -> Self:
        shape = compose.resolve_shape(_shape_arg(shape), self.shape)
        return self.p_reshape(shape)

    view = reshape

    def view_as(self, other) -> Self:
        return self.reshape(other.shape)

    reshape_as = view_as

    def permute(self, *order) -> Self:
        if not order:  # (as torch's; a 0-d tensor's is permute(()))
            raise TypeError(f"permute: needs the dims, a permutation of those of {self.shape}")
        order = _shape_arg(order)
        norm = tuple(compose.normalize_axis(a, self.ndim, "permute") for a in order)
        if sorted(norm) != list(range(self.ndim)):
            raise ValueError(
                f"permute: {order} is not a permutation of the {self.ndim} dims of {self.shape}"
            )
        return self.p_permute(norm)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> Self:
        if self.ndim < 2 and (dim0, dim1) == (-2, -1) or self.ndim == 0 and {dim0, dim1} <= {0, -1}:
            return self
        a = compose.normalize_axis(dim0, self.ndim, "transpose")
        b = compose.normalize_axis(dim1, self.ndim, "transpose")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.p_permute(tuple(order))

    def t(self) -> Self:
        """torch's t(): a matrix transposed; 1-d and 0-d as they are."""
        if self.ndim > 2:
            raise ValueError(f"t: needs at most 2 dims, got shape {self.shape}; use transpose")
        return self.transpose()

    @property
    def T(self) -> Self:
        return self.p_permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Self:
        """The last two dims swapped; a 0-d tensor as it is. limn's values are real, so
        the conjugates (``mH``, ``H``) are the same."""
        if self.ndim == 1:
            raise ValueError(f"mT: needs a matrix or a batch of them, got shape {self.shape}")
        return self.transpose(-2, -1) if self.ndim else self

    mH = mT

    @property
    def H(self) -> Self:
        if self.ndim not in (0, 2):
            raise ValueError(f"H: needs a matrix (2 dims), got shape {self.shape}; use mH")
        return self.mT

    def expand(self, *shape) -> Self:
        shape = _shape_arg(shape)
        if len(shape) < self.ndim:
            raise ValueError(f"expand: cannot expand {self.shape} to fewer dims {shape}")
        lead = len(shape) - self.ndim
        full = tuple(
            self.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape)
        )
        for i, s in enumerate(self.shape):
            if s != 1 and s != full[i + lead]:
                raise ValueError(
                    f"expand: dim {i} of {self.shape} has size {s}, cannot expand to "
                    f"{full[i + lead]} in {shape}; only size-1 dims expand"
                )
        return compose.expand_to(self, full)

    def broadcast_to(self, shape) -> Self:
        return self.expand(*shape)

    def expand_as(self, other) -> Self:
        return self.expand(*other.shape)

    def pad(self, pads, value: float = 0.0) -> Self:
        """``pads`` is one (before, after) per dim, or per trailing dims if fewer; a
        negative count crops, as torch's ``F.pad`` does."""
        pads = tuple(tuple(p) for p in pads)
        if len(pads) > self.ndim or any(len(p) != 2 for p in pads):
            raise ValueError(
                f"pad: needs up to {self.ndim} (before, after) pairs for shape {self.shape}, "
                f"got {pads}"
            )
        pads = ((0, 0),) * (self.ndim - len(pads)) + pads
        if any(s + b + a < 0 for (b, a), s in zip(pads, self.shape)):
            raise ValueError(f"pad: {pads} crops more than shape {self.shape} holds")
        x = self.shrink([(max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pads, self.shape)])
        pads = tuple((max(b, 0), max(a, 0)) for b, a in pads)
        out = x.p_pad(pads)
        if value != 0:
            inside = x.p_const(True, dtype=dtypes.bool_).p_pad(pads)
            out = inside.p_where(out, out.p_const(value))
        return out

    def shrink(self, bounds) -> Self:
        bounds = tuple((0, s) if b is None else tuple(b) for b, s in zip(bounds, self.shape))
        if len(bounds) != self.ndim or any(
            not 0 <= b <= e <= s for (b, e), s in zip(bounds, self.shape)
        ):
            raise ValueError(
                f"shrink: bounds {bounds} do not fit shape {self.shape}; each needs "
                f"0 <= start <= end <= size"
            )
        return self.p_shrink(bounds)

    def flip(self, *axes, dims=None) -> Self:
        axes = _shape_arg(axes if dims is None else (dims,))
        if self.ndim == 0 and all(a in (0, -1) for a in axes):
            return self
        out = self.p_flip(compose.normalize_axes(axes, self.ndim, "flip"))
        return out._unalias() if out is not self else out  # torch's flip is a copy

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        if self.ndim == 0:
            return self.reshape(1)
        s = compose.normalize_axis(start_dim, self.ndim, "flatten")
        e = compose.normalize_axis(end_dim, self.ndim, "flatten")
        shape = self.shape[:s] + (math.prod(self.shape[s : e + 1]),) + self.shape[e + 1 :]
        return self.reshape(shape)

    def unflatten(self, axis: int, sizes) -> Self:
        a = compose.normalize_axis(axis, self.ndim, "unflatten")
        sizes = compose.resolve_shape(_shape_arg((sizes,)), (self.shape[a],))
        return self.reshape(self.shape[:a] + sizes + self.shape[a + 1 :])

    def squeeze(self, axis=None) -> Self:
        if axis is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        axes = compose.normalize_axes(axis, self.ndim, "squeeze")
        # torch leaves a named dim of another size as it is
        return compose.squeeze_axes(self, tuple(a for a in axes if self.shape[a] == 1))

    def unsqueeze(self, axis: int) -> Self:
        a = compose.normalize_axis(axis, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:a] + (1,) + self.shape[a:])

    def contiguous(self) -> Self:
        """torch's: the tensor itself where its elements are in row-major order already
        (a write to either is a write to both), else a copy in that order."""
        v = versions.layout_view(self)
        if v is None or v.mask is not None:
            return self.p_contiguous()
        rows = contiguous_strides(v.shape)
        if all(st == c or s == 1 for s, st, c in zip(v.shape, v.strides, rows)):
            return self
        return self.p_contiguous()

    def repeat(self, *repeats) -> Self:
        reps = _shape_arg(repeats)
        if len(reps) < self.ndim:
            raise ValueError(
                f"repeat: needs at least {self.ndim} repeats for shape {self.shape}, got {reps}"
            )
        x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        shape = [v for r, s in zip(reps, x.shape) for v in (r, s)]
        y = x.reshape(tuple(v for s in x.shape for v in (1, s))).expand(*shape)
        y = y.reshape(tuple(r * s for r, s in zip(reps, x.shape)))
        return y.clone() if y is self or y._st is not None and y._st is self._st else y

    def split(self, size, axis: int = 0) -> list[Self]:
        axis = compose.normalize_axis(axis, self.ndim, "split")
        n = self.shape[axis]
        if isinstance(size, int):  # pieces of that size, the last one shorter
            size = [size] * (n // size) + ([n % size] if n % size else [])
        sizes = list(size)
        if sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to dim {axis} of {self.shape}")
        return compose.split(self, sizes, axis)

    def chunk(self, n: int, axis: int = 0) -> list[Self]:
        return self.split(max(1, -(-self.shape[axis] // n)), axis)

    def unbind(self, axis: int = 0) -> list[Self]:
        axis = compose.normalize_axis(axis, self.ndim, "unbind")
        return [p.squeeze(axis) for p in self.split(1, axis)]

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

    def scatter_add(self, axis: int, index: Self, src: Self) -> Self:
        if self.ndim == 0 and index.ndim == src.ndim == 0:  # one element: as a 1-d one
            one = self.reshape(1).scatter_add(axis, index.reshape(1), src.reshape(1))
            return one.reshape(())
        axis = compose.normalize_axis(axis, self.ndim, "scatter_add")
        if index.shape != src.shape or not index.dtype.is_int:
            raise ValueError(
                f"scatter_add: index and src must share a shape and index be an integer, got "
                f"{index.dtype}{list(index.shape)} and {src.dtype}{list(src.shape)}"
            )
        return self.p_scatter(index, src.p_cast(self.dtype), axis)

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
        if isinstance(value, TorchMovement):
            value = value.cast(self.dtype)
        elif isinstance(value, list | tuple | np.ndarray):
            value = self._lift(np.asarray(value)).cast(self.dtype)
        if _zero_d_mask(key):  # numpy's: through a new dim of 1
            self.unsqueeze(0)[key.reshape(1)] = value
            return
        keys = key if isinstance(key, tuple) else (key,)
        if not any(_is_advanced(k) for k in keys):
            target = self[key]
            if not isinstance(value, TorchMovement):
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


def _zero_d_mask(k) -> bool:
    return isinstance(k, TorchMovement) and k.ndim == 0 and k.dtype == dtypes.bool_


def _is_advanced(k) -> bool:
    return isinstance(k, list | np.ndarray) or isinstance(k, TorchMovement) and k.ndim > 0


for _name in ("squeeze", "index_select"):
    setattr(TorchMovement, _name, scalar_dims(getattr(TorchMovement, _name)))
accept_torch_names(TorchMovement)


def _advanced(x, k):
    """A key item that picks by integers (an integer or bool tensor, list or array): the
    integer tensors it stands for (one per dim a mask covers), else None."""
    if isinstance(k, list | np.ndarray):
        k = np.asarray(k)
        if k.dtype.kind not in "iub":
            raise IndexError(f"index: an index array must hold ints or bools, got {k.dtype}")
    elif not (isinstance(k, TorchMovement) and k.ndim > 0):
        return None
    if k.dtype in (dtypes.bool_, np.bool_):  # its True positions decide the shape: computed now
        where = np.nonzero(k.numpy() if isinstance(k, TorchMovement) else k)
        return [x._lift(w.astype(np.int64)) for w in where]
    if isinstance(k, np.ndarray):
        return [x._lift(k.astype(np.int64))]
    if not k.dtype.is_int:
        raise IndexError(f"index: tensors used as indices must be integer or bool, got {k.dtype}")
    return [k]


def _take(x, dims: list[int], idxs: list) -> TorchMovement:
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


def stacked_rows(ts: list) -> TorchMovement | None:
    """The stack of views of one tensor taken in one pattern at other offsets (the rows a
    Dataset over a tensor hands the default collate, ``X[i]`` in a loop) as one gather of
    their elements, or None for any other stack. Concatenated, a thousand rows would be a
    thousand pieces to build, walk and plan; gathered, they are one index array bound per
    call, and one plan serves every batch."""
    base, first = ts[0]._view_root()[0], ts[0].node
    if first.op is not Op.VIEW or first.arg.mask is not None or first.srcs[0] is not base.node:
        return None
    v, offsets = first.arg, []
    for t in ts:
        n = t.node
        if n.op is not Op.VIEW or n.srcs[0] is not first.srcs[0] or n.arg.mask is not None:
            return None
        if n.arg.shape != v.shape or n.arg.strides != v.strides:
            return None
        offsets.append(n.arg.offset)
    cells = np.indices(v.shape, dtype=np.int64)  # each element's place in its row
    inner = sum((s * c for s, c in zip(v.strides, cells)), np.zeros(v.shape, np.int64))
    at = np.asarray(offsets, np.int64).reshape((-1,) + (1,) * len(v.shape)) + inner
    flat = base._lift(at.reshape(-1))  # (every index in range: no check)
    return base.reshape(-1).gather(0, flat).reshape(at.shape)


def _index(x: TorchMovement, key) -> TorchMovement:
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
        if isinstance(k, TorchMovement) and k.ndim == 0 and k.dtype.is_int:
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
        y = x._moved((("shrink", tuple(bounds)), ("reshape", tuple(out_shape))))
    if not picks:
        return y
    dims = [out_dim[where[at] + j] for at, found in picks for j in range(len(found))]
    return _take(y, dims, [i for _, found in picks for i in found])


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    try:
        return compose.as_ints(shape, "shape", "shape")
    except TypeError:
        hint = ""
        if any(isinstance(s, str | DType | np.dtype | type) for s in shape):
            hint = "; pass a dtype by keyword (dtype=...)"
        raise TypeError(f"shape: needs ints, got {shape}{hint}") from None


# ---- joining ----------------------------------------------------------------------


@torch_names
def cat(tensors, axis: int = 0) -> TorchMovement:
    ts = list(tensors)
    if not ts:
        raise ValueError("cat: needs at least one tensor")
    d = ts[0].dtype
    for t in ts[1:]:
        d = promote(d, t.dtype)
    if any(t.shape != (0,) for t in ts):  # torch's legacy rule: a 1-d empty one is skipped
        ts = [t for t in ts if t.shape != (0,)]
    axis = compose.normalize_axis(axis, ts[0].ndim, "cat")
    for t in ts[1:]:
        if t.ndim != ts[0].ndim or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != axis
        ):
            raise ValueError(
                f"cat: shapes {[tuple(t.shape) for t in ts]} differ outside axis {axis}"
            )
    out = compose.cat([t.p_cast(d) for t in ts], axis)
    return out.clone() if out is ts[0] else out  # (one tensor: a copy, as torch's)


@torch_names
def stack(tensors, axis: int = 0) -> TorchMovement:
    ts = list(tensors)
    if not ts:
        raise ValueError("stack: needs at least one tensor")
    if any(t.shape != ts[0].shape for t in ts):
        raise ValueError(f"stack: shapes differ: {[tuple(t.shape) for t in ts]}")
    axis = compose.normalize_axis(axis, ts[0].ndim + 1, "stack")
    rows = stacked_rows(ts) if axis == 0 and len(ts) >= 4 else None
    return rows if rows is not None else cat([t.unsqueeze(axis) for t in ts], axis)
