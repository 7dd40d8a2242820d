"""Movement of limn.Tensor: the ops that rearrange elements without computing, as views
where torch documents a view (``reshape``, ``permute``, ``transpose``, ``expand``,
``squeeze``, ``narrow``, ``select``, ``diagonal``, ``unfold``, ``as_strided``, and the
splits: ``split``, ``chunk``, ``unbind``, ``tensor_split``) and as copies where it
documents a copy (``flip``, ``roll``, ``rot90``, ``repeat``, ``tile``, ``pad``, ``clone``
and the ``*_copy`` twins of the views).

``Movement`` is a mixin of ``limn.Tensor`` (see ``math.py``): each method checks its
arguments in torch's forms (``view(2, -1)`` or ``view((2, -1))``, negative dims) and
hands the work to a movement primitive or ``ir/graph/compose.py``. Joining (``cat``,
``stack``) is in ``joining.py``; picking by index in ``indexing.py``.
"""

from __future__ import annotations

import functools
import math
from typing import Self

import numpy as np

from ir.graph import compose, dtypes
from ir.graph.view import contiguous_strides
from limn import autograd, versions
from limn.ops.arguments import _ints, _shape_arg, _tensors, accept_torch_names, scalar_dims
from limn.ops.inplace import storage_view as _storage_view


class Movement:
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

    def adjoint(self) -> Self:
        """torch's adjoint(): the last two dims swapped (conjugated, which real values are)."""
        if self.ndim < 2:
            raise ValueError(f"adjoint: needs a matrix or a batch of them, got shape {self.shape}")
        return self.mT

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
            return self.clone()
        out = self.p_flip(compose.normalize_axes(axes, self.ndim, "flip"))
        return out._unalias() if out is not self else self.clone()  # torch's flip is a copy

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        if self.ndim == 0:
            return self.reshape(1)
        s = compose.normalize_axis(start_dim, self.ndim, "flatten")
        e = compose.normalize_axis(end_dim, self.ndim, "flatten")
        if s == e:  # torch's: the tensor itself (a 1-d one's flatten too)
            return self
        shape = self.shape[:s] + (math.prod(self.shape[s : e + 1]),) + self.shape[e + 1 :]
        return self.reshape(shape)

    def unflatten(self, axis: int, sizes) -> Self:
        a = compose.normalize_axis(axis, self.ndim, "unflatten")
        sizes = compose.resolve_shape(_shape_arg((sizes,)), (self.shape[a],))
        return self.reshape(self.shape[:a] + sizes + self.shape[a + 1 :])

    def squeeze(self, axis=None) -> Self:
        if axis is None:  # (squeeze keeps the strides torch's view would compute)
            return self.p_reshape(tuple(s for s in self.shape if s != 1))
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

    def _same(self, kind: str = "permute") -> Self:
        """A view of this tensor that moves nothing: torch's view ops give a new tensor
        there too (``x.view(x.shape) is not x``), sharing x's memory, with a record of
        its own (``requires_grad_``, ``.grad``, ``.data =``, ``unsqueeze_`` are its own).
        Its move is a ``kind`` that moves nothing: a reshape where torch's strides are
        view's (a size-1 dim's computed afresh: ``torch_strides``), else a permute."""
        move = (kind, self.shape if kind == "reshape" else tuple(range(self.ndim)))
        t = self._wrap(self.node, ("VIEW", kind), (self,), move[1])
        t._base, t._move = self, move
        return self._alias(t, (move,))

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

    def clone(self, memory_format=None):
        """A copy (limn has one memory format: ``memory_format`` is accepted)."""
        return self.p_contiguous()

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

    def repeat_interleave(self, repeats, axis=None, *, output_size=None):
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


def _cat(ts, axis):
    """``limn.tensor.cat`` of parts already checked for shape (that module imports this one)."""
    d = ts[0].dtype
    for t in ts[1:]:
        d = dtypes.promote(d, t.dtype)
    return compose.cat([t.p_cast(d) for t in ts], compose.normalize_axis(axis, ts[0].ndim, "cat"))


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


def _copying(view: str):
    def method(self, *args, **kw):
        return getattr(self, view)(*args, **kw).clone()

    method.__name__ = f"{view}_copy"
    return method


def broadcast_shapes(*shapes):
    shapes = [(s,) if isinstance(s, int) else tuple(s) for s in shapes]
    return tuple(compose.broadcast_shapes(*shapes, op="broadcast_shapes"))


def broadcast_tensors(*tensors):
    ts = _tensors(tensors, "broadcast_tensors")
    shape = broadcast_shapes(*(t.shape for t in ts))
    return tuple(t if t.shape == shape else t.expand(*shape) for t in ts)  # (torch's: t itself)


def _fresh(fn, kind: str = "permute"):
    """``fn``, a view op, giving a view of self (``Movement._same``) where it gave self."""

    @functools.wraps(fn)
    def method(self, *args, **kw):
        out = fn(self, *args, **kw)
        if isinstance(out, list | tuple):  # (a split into one piece)
            return type(out)(self._same() if p is self else p for p in out)
        return self._same(kind) if out is self else out

    return method


Movement.squeeze = scalar_dims(Movement.squeeze)
for _view in (
    "reshape view view_as reshape_as permute transpose t expand expand_as broadcast_to "
    "unflatten squeeze narrow movedim moveaxis swapaxes swapdims ravel split"
).split():
    kind = "reshape" if _view in ("reshape", "view") else "permute"  # (view_as: a view)
    setattr(Movement, _view, _fresh(getattr(Movement, _view), kind))
Movement.T = property(_fresh(Movement.T.fget))
Movement.unbind_copy = lambda self, dim=0: [t.clone() for t in self.unbind(dim)]
Movement.unsafe_split = lambda self, size, dim=0: self.split(size, dim)
Movement.unsafe_chunk = lambda self, n, dim=0: self.chunk(n, dim)
for _view in (
    "expand view permute t transpose squeeze unsqueeze diagonal narrow unfold select"
).split():
    setattr(Movement, f"{_view}_copy", _copying(_view))
Movement.alias_copy = lambda self: self.clone()
accept_torch_names(Movement)
