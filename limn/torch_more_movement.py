"""More of torch's movement and indexing under its names: slices, splits, stacks, diagonals.

A mixin of ``limn.Tensor`` beside ``limn/torch_movement.py``: each method is a view or a
composition of the movement methods there (``shrink``, ``permute``, ``reshape``, ``cat``,
``gather``), checked in torch's forms. The ``*_copy`` names are torch's copying twins of
views: here the view's ``contiguous()``.
"""

from __future__ import annotations

import math

from ir.graph import compose, dtypes
from limn import autograd, versions
from limn.torch_inplace import storage_view as _storage_view
from limn.torch_methods import accept_torch_names
from limn.torch_more_math import _cat


class TorchMoreMovement:
    def narrow(self, axis: int, start, length: int):
        axis = compose.normalize_axis(axis, self.ndim, "narrow")
        n = self.shape[axis]
        if hasattr(start, "dtype") and (start.ndim or not start.dtype.is_int):
            raise TypeError(f"narrow: a tensor start must be 0-d and integral, got {start.dtype}")
        start = int(start)
        start = start + n if start < 0 else start
        if not 0 <= start <= n or length < 0 or start + length > n:
            raise IndexError(
                f"narrow: start {start} and length {length} do not fit dim {axis} of {self.shape}"
            )
        return self.shrink(
            [(start, start + length) if d == axis else None for d in range(self.ndim)]
        )

    def select(self, axis: int, index: int):
        axis = compose.normalize_axis(axis, self.ndim, "select")
        return self[(slice(None),) * axis + (index,)]

    def movedim(self, source, destination):
        src = [compose.normalize_axis(a, self.ndim, "movedim") for a in _ints(source)]
        dst = [compose.normalize_axis(a, self.ndim, "movedim") for a in _ints(destination)]
        if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ValueError(f"movedim: {source} and {destination} must be distinct dims, as many")
        rest = iter(d for d in range(self.ndim) if d not in src)
        placed = dict(zip(dst, src))
        return self.permute(*[placed[i] if i in placed else next(rest) for i in range(self.ndim)])

    moveaxis = movedim

    def swapaxes(self, axis0: int, axis1: int):
        return self.transpose(axis0, axis1)

    swapdims = swapaxes

    def fliplr(self):
        if self.ndim < 2:
            raise ValueError(f"fliplr: needs at least 2 dims, got {self.shape}")
        return self.flip(1)

    def flipud(self):
        if self.ndim < 1:
            raise ValueError("flipud: needs at least 1 dim, got a 0-d tensor")
        return self.flip(0)

    def rot90(self, k: int = 1, dims=(0, 1)):
        if len(dims) != 2 or self.ndim < 2:
            raise ValueError(f"rot90: needs two dims of a tensor of >= 2 dims, got {dims}")
        a, b = (compose.normalize_axis(d, self.ndim, "rot90") for d in dims)
        if a == b:
            raise ValueError(f"rot90: the two dims must differ, got {dims}")
        k %= 4
        if k == 1:
            return self.flip(b).transpose(a, b)
        if k == 2:
            return self.flip(a, b)
        if k == 3:
            return self.transpose(a, b).flip(b)
        return self.clone()  # (k = 0: a copy, as torch's)

    def roll(self, shifts, dims=None):
        """Each element moved ``shifts`` along ``dims``, wrapping (all dims flattened if
        none are given); a copy, whatever the shifts."""
        if dims is None:
            return copy_of(self.reshape(-1).roll(shifts, 0).reshape(self.shape), self)
        shifts, dims = _ints(shifts), _ints(dims)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
        x = self
        for s, d in zip(shifts, dims):
            d = compose.normalize_axis(d, x.ndim, "roll")
            n = x.shape[d]
            s = s % n if n else 0
            if s:
                x = _cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d)
        return copy_of(x, self)

    def ravel(self):
        return self.reshape(-1)

    def tile(self, *dims):
        dims = _ints(dims[0] if len(dims) == 1 and isinstance(dims[0], list | tuple) else dims)
        dims = (1,) * (self.ndim - len(dims)) + tuple(dims)
        return self.repeat(*dims)

    def tensor_split(self, indices_or_sections, axis: int = 0):
        axis = compose.normalize_axis(axis, self.ndim, "tensor_split")
        n = self.shape[axis]
        if isinstance(indices_or_sections, int):
            k = indices_or_sections
            if k < 1:
                raise ValueError(f"tensor_split: needs at least 1 section, got {k}")
            cuts = [i * (n // k) + min(i, n % k) for i in range(1, k)]
        else:
            cuts = indices_or_sections
            if hasattr(cuts, "tolist"):
                if cuts.ndim > 1 or cuts.dtype.is_float:
                    raise ValueError("tensor_split: needs a 0-d or 1-d integer tensor of cuts")
                if cuts.ndim == 0:
                    return self.tensor_split(int(cuts.item()), axis)
                cuts = cuts.tolist()
            cuts = _ints(cuts)
        bounds = [0, *[min(max(c + n if c < 0 else c, 0), n) for c in cuts], n]
        return tuple(self.narrow(axis, a, max(b - a, 0)) for a, b in zip(bounds, bounds[1:]))

    def _split_at(self, sections, axis: int, name: str, least: int):
        if self.ndim < least:
            raise ValueError(f"{name}: needs at least {least} dims, got {self.shape}")
        if isinstance(sections, int) and (sections == 0 or self.shape[axis] % sections):
            raise ValueError(f"{name}: dim {axis} of {self.shape} does not split in {sections}")
        return self.tensor_split(sections, axis)

    def hsplit(self, sections):
        return self._split_at(sections, 1 if self.ndim > 1 else 0, "hsplit", 1)

    def vsplit(self, sections):
        return self._split_at(sections, 0, "vsplit", 2)

    def dsplit(self, sections):
        return self._split_at(sections, 2, "dsplit", 3)

    def split_with_sizes(self, split_sizes, axis: int = 0):
        return self.split(list(split_sizes), axis)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The diagonal of dims ``dim1``, ``dim2`` (removed), as a last dim: a view, as
        torch's (the pair flattened, then every (m + 1)-th element), written through both
        ways. A pair whose strides cannot be flattened in either order (a strided slice of
        both dims) gives a copy of the diagonal."""
        a = compose.normalize_axis(dim1, self.ndim, "diagonal")
        b = compose.normalize_axis(dim2, self.ndim, "diagonal")
        if a == b:
            raise ValueError(f"diagonal: dims must differ, got {dim1} and {dim2}")
        rest = [d for d in range(self.ndim) if d not in (a, b)]
        x = self.permute(*rest, a, b)
        if not _flattens(x) and _flattens(self.permute(*rest, b, a)):
            x, offset = self.permute(*rest, b, a), -offset  # the same diagonal, transposed
        n, m = x.shape[-2:]
        start_i, start_j = (0, offset) if offset >= 0 else (-offset, 0)
        count = max(0, min(n - start_i, m - start_j))
        lead = x.shape[:-2]
        v = _storage_view(x)
        tracked = self.requires_grad and autograd.grad_enabled()
        if not _flattens(x) and count and v is not None and not tracked:  # as_strided
            st = v.strides
            at = v.offset + start_i * st[-2] + start_j * st[-1]
            return x.as_strided((*lead, count), (*st[:-2], st[-2] + st[-1]), at)
        flat = x.reshape(*lead, n * m)
        if count == 0:
            return flat.narrow(-1, 0, 0)
        d = flat.narrow(-1, start_i * m + start_j, (count - 1) * (m + 1) + 1)
        return d.p_step((1,) * len(lead) + (m + 1,))

    def as_strided(self, size, stride, storage_offset: int | None = None):
        """torch's ``as_strided``: a view of this tensor's storage (its value in row-major
        order) with ``size``, ``stride`` and ``storage_offset`` (this tensor's own offset if
        None), made of movements a View composes: the storage flattened, cut to the span the
        view reads, and split by one window per dim (a window gives a dim any stride).
        Negative strides are refused, as torch refuses them."""
        size, stride = tuple(_ints(size)), tuple(_ints(stride))
        if self.requires_grad and autograd.grad_enabled():
            raise RuntimeError(
                "as_strided: not differentiable in limn (its view is made from the storage, "
                "outside autograd); call it under limn.no_grad() or on a detached tensor"
            )
        base, v = self._storage_root(), _storage_view(self)
        if v is None:
            raise RuntimeError(
                f"as_strided: the tensor of shape {self.shape} is a copy of its storage (a "
                "padded or composed movement), not a view; call it on a contiguous tensor"
            )
        at = v.offset if storage_offset is None else int(storage_offset)
        n = math.prod(base.shape)
        if len(size) != len(stride) or min(stride, default=0) < 0 or at < 0:
            raise RuntimeError(
                f"as_strided: size {size}, stride {stride} and offset {at} do not fit; "
                "accepted: one non-negative stride per size and a non-negative offset"
            )
        if 0 in size:
            return self.new_zeros(size)
        span = 1 + sum((k - 1) * st for k, st in zip(size, stride))
        if at + span > n:
            raise RuntimeError(
                f"as_strided: size {size}, stride {stride} and offset {at} read past the "
                f"{n} elements of the storage"
            )
        real = [i for i, (k, st) in enumerate(zip(size, stride)) if k > 1 and st > 0]
        out = base.reshape(n).narrow(0, at, span)
        for i in reversed(real):
            out = out.p_window(0, size[i], 1, stride[i])
        out = out.narrow(0, 0, 1).reshape(tuple(size[i] for i in real))
        shape = tuple(size[i] if i in real else 1 for i in range(len(size)))
        return out.reshape(shape).expand(*size)

    def _storage_root(self):
        """A tensor whose value is this tensor's storage's, an alias of it (shares its
        writes and version counter), outside autograd."""
        st = self._storage()
        t = type(self)._make(None, self.device)
        t._st, t._moves, t._vc, t._node = st, (), self._vc, None
        return t

    def diag(self, diagonal: int = 0):
        if self.ndim == 1:
            return self.diag_embed(diagonal)
        if self.ndim == 2:
            return self.diagonal(diagonal)
        raise ValueError(f"diag: needs a 1-d or 2-d tensor, got shape {self.shape}")

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1):
        """Each last-dim vector as the ``offset`` diagonal of a square matrix, whose two
        dims go to ``dim1`` and ``dim2``."""
        k, lead = self.shape[-1], self.shape[:-1]
        n = k + abs(offset)
        if k == 0:
            out = type(self).zeros(*lead, n, n, dtype=self.dtype, device=self.device)
        else:
            i = type(self).arange(n, device=self.device)
            on = (i.reshape(n, 1) + offset) == i.reshape(1, n)  # j - i == offset
            pos = (i.reshape(n, 1) if offset >= 0 else i.reshape(1, n)).expand(n, n)
            pos = pos.minimum(k - 1).expand(*lead, n, n)
            picked = self.unsqueeze(-2).expand(*lead, n, k).gather(-1, pos)
            out = on.where(picked, picked.zeros_like())
        nd = out.ndim
        d1, d2 = (compose.normalize_axis(d, nd, "diag_embed") for d in (dim1, dim2))
        if d1 == d2:
            raise ValueError(f"diag_embed: dims must differ, got {dim1} and {dim2}")
        rest = iter(range(nd - 2))
        order = [nd - 2 if d == d1 else nd - 1 if d == d2 else next(rest) for d in range(nd)]
        return out.permute(*order)

    def diagflat(self, offset: int = 0):
        return self.reshape(-1).diag_embed(offset)

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

    def unfold(self, axis: int, size: int, step: int):
        """Every window of ``size`` along ``axis``, ``step`` apart, as a new last dim."""
        axis = compose.normalize_axis(axis, max(self.ndim, 1), "unfold")
        x = self.reshape(1) if self.ndim == 0 else self
        n = x.shape[axis]
        if size > n or step < 1 or size < 0:
            raise ValueError(
                f"unfold: size {size} and step {step} do not fit dim {axis} of {self.shape}"
            )
        if size == 0:  # windows of no element: n // step + 1 of them, as torch's
            shape = (*x.shape[:axis], n // step + 1, *x.shape[axis + 1 :], 0)
            return type(self).zeros(shape, dtype=self.dtype, device=self.device)
        # a view: the windows overlap where step < size, as torch's do
        out = x.p_window(axis, size, step).movedim(axis + 1, -1)
        return out.reshape(size) if self.ndim == 0 else out

    def sum_to_size(self, *size):
        size = _ints(size[0] if len(size) == 1 and isinstance(size[0], list | tuple) else size)
        if self.ndim == 0 and not size:  # torch's: a 0-d tensor is summed (bool to int64)
            return self.sum()
        lead = self.ndim - len(size)
        if lead < 0 or any(s not in (1, t) for s, t in zip(size, self.shape[lead:])):
            raise ValueError(f"sum_to_size: {self.shape} does not reduce to {tuple(size)}")
        axes = tuple(range(lead)) + tuple(
            lead + i for i, s in enumerate(size) if s == 1 and self.shape[lead + i] != 1
        )
        return self.sum(axes, keepdim=True).reshape(size) if axes else self

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

    def repeat_interleave(self, repeats, axis=None, *, output_size=None):
        import numpy as np

        x = self.reshape(-1) if axis is None else self
        axis = 0 if axis is None else compose.normalize_axis(axis, x.ndim, "repeat_interleave")
        reps = repeats.numpy() if hasattr(repeats, "numpy") else np.asarray(repeats)
        n = x.shape[axis]
        reps = np.broadcast_to(reps, (n,)) if reps.ndim == 0 else reps
        if reps.shape != (n,) or (reps < 0).any():
            raise ValueError(
                f"repeat_interleave: repeats {reps.shape} do not fit dim {axis} of {x.shape}"
            )
        idx = np.repeat(np.arange(n), reps)
        return x.index_select(axis, self._lift(idx.astype(np.int64)))

    def index_fill(self, axis: int, index, value):
        axis = compose.normalize_axis(axis, self.ndim, "index_fill")
        if self.ndim and self.shape[axis] == 0 and index.numel():
            raise IndexError(
                f"index_fill: index out of range for dim {axis} of size 0 in {self.shape}"
            )
        hit = self._index_mask(axis, index)
        return hit.where(value, self).cast(self.dtype)

    def _index_mask(self, axis, index):
        n = self.shape[axis] if self.ndim else 1
        pos = type(self).arange(n, device=self.device)
        i = index.reshape(-1)
        i = (i < 0).where(i + n, i)
        hit = (pos.reshape(n, 1) == i.reshape(1, -1)).any(1)
        return hit.reshape(n, *[1] * (self.ndim - axis - 1)) if self.ndim else hit.reshape(())

    def index_add(self, axis: int, index, source, *, alpha=1):
        if self.ndim == 0:
            return (
                self.reshape(1)
                .index_add(0, index.reshape(-1), source.reshape(-1), alpha=alpha)
                .reshape(())
            )
        axis = compose.normalize_axis(axis, self.ndim, "index_add")
        src = source if alpha == 1 else source * alpha
        want = self.shape[:axis] + (index.numel(),) + self.shape[axis + 1 :]
        if src.shape != want and src.ndim:
            raise ValueError(f"index_add: source {src.shape} must be {want} for {self.shape}")
        src = (
            src.reshape(self.shape[:axis] + (1,) + self.shape[axis + 1 :]) if src.ndim == 0 else src
        )
        shape = list(src.shape)
        idx = index.reshape(*[1] * axis, -1, *[1] * (src.ndim - axis - 1)).expand(*shape)
        return self.scatter_add(axis, idx, src)

    def index_copy(self, axis: int, index, source):
        axis = compose.normalize_axis(axis, self.ndim, "index_copy")
        kept = self.index_fill(axis, index, 0)
        return kept.index_add(axis, index, source)

    def scatter(self, axis: int, index, src=None, *, value=None, reduce=None):
        """out[.., index[i], ..] = src[i] along ``axis`` (each target written once); with
        ``reduce="add"`` or ``"multiply"``, each target accumulates what lands on it."""
        if reduce not in (None, "add", "multiply"):
            raise ValueError(
                f"scatter: reduce={reduce!r} is not supported; accepted: 'add', 'multiply'"
            )
        axis = compose.normalize_axis(axis, self.ndim, "scatter")
        if index.ndim != self.ndim or not index.dtype.is_int:
            raise ValueError(
                f"scatter: index must be an integer tensor with {self.ndim} dims, got "
                f"{index.dtype}{list(index.shape)}"
            )
        if src is None or not hasattr(src, "shape"):
            src = self.full(index.shape, value if src is None else src, self.dtype, self.device)
        if src.dtype != self.dtype:
            raise TypeError(f"scatter: src dtype {src.dtype} must be the target's {self.dtype}")
        src = src.shrink([(0, s) for s in index.shape])
        if reduce == "add":
            return self.scatter_add(axis, index, src)
        if reduce == "multiply":
            return self.scatter_reduce(axis, index, src, "prod")
        hit = self.zeros_like(dtypes.int64).scatter_add(axis, index, index.ones_like())
        return (hit > 0).where(self.zeros_like().scatter_add(axis, index, src), self)

    def scatter_reduce(self, axis: int, index, src, reduce: str, *, include_self: bool = True):
        """Each target along ``axis`` reduced ("sum", "prod", "mean", "amax", "amin") with
        the ``src`` values whose ``index`` names it, and its own value unless
        ``include_self=False``; a target nothing lands on keeps its value.

        Composed as a comparison, not a scatter: position j of the target dim collects
        ``where(index == j, src, identity)`` reduced over the index's own run along that
        dim, so any reduction works (a scatter only adds), at (index size x dim size)."""
        kinds = ("sum", "prod", "mean", "amax", "amin")
        if reduce not in kinds:
            raise ValueError(f"scatter_reduce: reduce={reduce!r}; accepted: {', '.join(kinds)}")
        if self.ndim == 0:
            one = self.reshape(1).scatter_reduce(
                axis, index.reshape(-1), src.reshape(-1), reduce, include_self=include_self
            )
            return one.reshape(())
        axis = compose.normalize_axis(axis, self.ndim, "scatter_reduce")
        if index.ndim != self.ndim or src.ndim != self.ndim or not index.dtype.is_int:
            raise ValueError(
                f"scatter_reduce: index and src must have {self.ndim} dims and index be an "
                f"integer, got {index.dtype}{list(index.shape)} and {src.dtype}{list(src.shape)}"
            )
        if any(i > t for i, t in zip(index.shape, src.shape)):
            raise ValueError(f"scatter_reduce: index {index.shape} is larger than src {src.shape}")
        if any(i > t for d, (i, t) in enumerate(zip(index.shape, self.shape)) if d != axis):
            raise ValueError(f"scatter_reduce: index {index.shape} is larger than {self.shape}")
        n = self.shape[axis]
        src = src.shrink([(0, s) for s in index.shape]).cast(self.dtype)
        pos = type(self).arange(n, device=self.device)
        hit = index.unsqueeze(-1) == pos  # (*index.shape, n)
        vals = src.unsqueeze(-1)
        if reduce in ("sum", "mean"):
            got = hit.where(vals, 0).sum(axis)
        elif reduce == "prod":
            got = hit.where(vals, 1).prod(axis)
        else:
            fill = (
                dtypes.min_value(self.dtype) if reduce == "amax" else dtypes.max_value(self.dtype)
            )
            got = hit.where(vals, fill)
            got = got.amax(axis) if reduce == "amax" else got.amin(axis)
        count = hit.sum(axis)
        back = list(range(self.ndim - 1))  # the target dim (last now) back to ``axis``
        back.insert(axis, self.ndim - 1)
        got, count = got.cast(self.dtype).permute(*back), count.permute(*back)
        pads = [(0, t - g) for t, g in zip(self.shape, got.shape)]  # targets past the index box
        got, count = got.pad(pads), count.pad(pads)
        mine = self
        if reduce == "sum":
            out = mine + got if include_self else got
        elif reduce == "prod":
            out = mine * got if include_self else got
        elif reduce == "mean":
            total = mine + got if include_self else got
            k = count + 1 if include_self else count.maximum(1)
            out = total / k if self.dtype.is_float else total.div(k, rounding_mode="floor")
        else:
            out = (
                (mine.maximum(got) if reduce == "amax" else mine.minimum(got))
                if include_self
                else got
            )
        return (count > 0).where(out, mine).cast(self.dtype)


def copy_of(out, src):
    """``out``, an op's result that torch documents as a copy of ``src``: a copy even where
    the arguments made it ``src`` itself or a view of it (``x.roll(1, 0)`` of a size-1 dim,
    ``x.repeat(1, 1)``, ``cat([x])``), so a later write to ``src`` never reaches it."""
    if out is src or out._st is not None and out._st is src._st:
        return out.clone()
    return out


def _flattens(x) -> bool:
    """Whether x's last two dims flatten into one as a view (no copy)."""
    v = versions.layout_view(x)
    return v is not None and v.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],)) is not None


def _ints(v) -> list[int]:
    return [int(i) for i in v] if isinstance(v, list | tuple) else [int(v)]


def _copying(view: str):
    def method(self, *args, **kw):
        return getattr(self, view)(*args, **kw).clone()

    method.__name__ = f"{view}_copy"
    return method


for _view in (
    "expand view permute t transpose squeeze unsqueeze diagonal narrow unfold select"
).split():
    setattr(TorchMoreMovement, f"{_view}_copy", _copying(_view))
TorchMoreMovement.alias_copy = lambda self: self.clone()
TorchMoreMovement.unbind_copy = lambda self, dim=0: [t.clone() for t in self.unbind(dim)]
TorchMoreMovement.unsafe_split = lambda self, size, dim=0: self.split(size, dim)
TorchMoreMovement.unsafe_chunk = lambda self, n, dim=0: self.chunk(n, dim)
accept_torch_names(TorchMoreMovement)
