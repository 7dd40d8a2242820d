"""Layout algebra: a View says where each element of a shape lives in a flat buffer.

View = (shape, strides, offset, mask). Element ``i`` of the view is read from
``offset + sum(i[d] * strides[d])`` when every ``mask[d][0] <= i[d] < mask[d][1]``, and is
zero otherwise (that zero is how a pad exists without bytes). Every movement op
(reshape, permute, expand, pad, shrink, strided slicing with any step, and sliding
windows) maps one View to one View, so a chain of them costs nothing until a kernel turns
the final View into index arithmetic. Two movements cannot always stay a single View: a
reshape that regroups dims whose strides or masks do not line up, and windows over a dim
that carries a pad (a window straddling the pad's edge is not a box). Each returns None
then, and the frontend materialises a CONTIGUOUS copy first.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod

Shape = tuple[int, ...]


@functools.lru_cache(maxsize=4096)
def contiguous_strides(shape: Shape) -> tuple[int, ...]:
    """Row-major strides of ``shape`` (a tuple), 0 on size-1 dims. Remembered per shape:
    every movement asks whether its result is contiguous, and a program has few shapes."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(int(acc) if s != 1 else 0)
        acc *= s
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=4096)
def _contiguous(shape: Shape) -> View:
    return View(shape, contiguous_strides(shape), 0, None)


@dataclass(frozen=True)
class View:
    shape: Shape
    strides: tuple[int, ...]
    offset: int = 0
    mask: tuple[tuple[int, int], ...] | None = None

    @staticmethod
    def contiguous(shape: Shape) -> View:
        return _contiguous(tuple(shape))  # one View per shape: Views never change

    def __repr__(self) -> str:
        m = "" if self.mask is None else f", mask={self.mask}"
        return f"View({self.shape}, strides={self.strides}, offset={self.offset}{m})"

    # ---- facts ---------------------------------------------------------------------

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return (
            self.offset == 0
            and self.mask is None
            and self.strides == contiguous_strides(self.shape)
        )

    @property
    def is_empty_mask(self) -> bool:
        return self.mask is not None and any(lo >= hi for lo, hi in self.mask)

    @property
    def is_injective(self) -> bool:
        """No two elements read one address, so a write through the view is well defined.

        With the dims sorted by stride, each stride must step past every address the
        smaller-strided dims reach (a stride-0 dim of size > 1, a broadcast, never does).
        """
        if self.size == 0:
            return True
        reach = 0
        for st, s in sorted((abs(st), s) for s, st in zip(self.shape, self.strides) if s > 1):
            if st <= reach:
                return False
            reach += st * (s - 1)
        return True

    def address(self, idx: tuple[int, ...]) -> int | None:
        """Where element ``idx`` is read from, or None if it lies in the pad."""
        if self.mask is not None and any(not lo <= i < hi for i, (lo, hi) in zip(idx, self.mask)):
            return None
        return self.offset + sum(i * s for i, s in zip(idx, self.strides))

    def _full_mask(self) -> tuple[tuple[int, int], ...]:
        return self.mask if self.mask is not None else tuple((0, s) for s in self.shape)

    def _with(self, shape, strides, offset, mask) -> View:
        shape = tuple(shape)
        if mask is None and 1 not in shape:
            return View(shape, tuple(strides), offset, None)
        if mask is not None:
            mask = tuple((max(0, lo), min(s, hi)) for (lo, hi), s in zip(mask, shape))
            mask = tuple((lo, max(lo, hi)) for lo, hi in mask)
            if all(lo == 0 and hi == s for (lo, hi), s in zip(mask, shape)):
                mask = None
        # a size-1 dim never moves the address, so its stride is canonically 0
        strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides))
        return View(shape, strides, offset, mask)

    # ---- movement ------------------------------------------------------------------

    def permute(self, order: tuple[int, ...]) -> View:
        shape, strides = self.shape, self.strides
        mask = None if self.mask is None else [self.mask[o] for o in order]
        return self._with([shape[o] for o in order], [strides[o] for o in order], self.offset, mask)

    def expand(self, shape: Shape) -> View:
        if self.mask is None:  # a size-1 dim that grows reads its one element: stride 0
            strides = [
                st if old == new else 0 for old, new, st in zip(self.shape, shape, self.strides)
            ]
            return self._with(shape, strides, self.offset, None)
        strides, mask = [], []
        for old, new, st, (lo, hi) in zip(self.shape, shape, self.strides, self._full_mask()):
            if old == new:
                strides.append(st)
                mask.append((lo, hi))
            else:  # old == 1: every index reads element 0, valid iff element 0 is
                strides.append(0)
                mask.append((0, new) if lo < hi else (0, 0))
        return self._with(shape, strides, self.offset, None if self.mask is None else mask)

    def pad(self, pads: tuple[tuple[int, int], ...]) -> View:
        shape = tuple(s + b + a for s, (b, a) in zip(self.shape, pads))
        offset = self.offset - sum(b * st for (b, _), st in zip(pads, self.strides))
        mask = tuple((lo + b, hi + b) for (lo, hi), (b, _) in zip(self._full_mask(), pads))
        return self._with(shape, self.strides, offset, mask)

    def shrink(self, bounds: tuple[tuple[int, int], ...]) -> View:
        shape = tuple(e - b for b, e in bounds)
        offset = self.offset + sum(b * st for (b, _), st in zip(bounds, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple((lo - b, hi - b) for (lo, hi), (b, _) in zip(self.mask, bounds))
        return self._with(shape, self.strides, offset, mask)

    def flip(self, axes: tuple[int, ...]) -> View:
        strides, offset, mask = list(self.strides), self.offset, list(self._full_mask())
        for a in axes:
            s = self.shape[a]
            if s == 0:
                continue
            offset += (s - 1) * strides[a]
            strides[a] = -strides[a]
            lo, hi = mask[a]
            mask[a] = (s - hi, s - lo)
        return self._with(self.shape, strides, offset, None if self.mask is None else mask)

    def step(self, steps: tuple[int, ...]) -> View:
        """Every k-th element along each dim (k >= 1); negative steps are flip + step."""
        shape = tuple(-(-s // k) for s, k in zip(self.shape, steps))
        strides = tuple(st * k for st, k in zip(self.strides, steps))
        mask = None
        if self.mask is not None:
            mask = tuple((-(-lo // k), -(-hi // k)) for (lo, hi), k in zip(self.mask, steps))
        return self._with(shape, strides, self.offset, mask)

    def window(self, axis: int, k: int, stride: int = 1, dilation: int = 1) -> View | None:
        """Sliding windows along ``axis``: its size L becomes (o, k), element (i, j) read
        from position i*stride + j*dilation, with o = (L - dilation*(k-1) - 1) // stride + 1.

        Windows overlap, so one element is read by several; two strides over the one dim
        say that without a copy. A mask on ``axis`` cannot be carried into (o, k), so a
        padded dim gives None.
        """
        size = self.shape[axis]
        if min(k, stride, dilation) < 1 or dilation * (k - 1) + 1 > size:
            raise ValueError(
                f"window: k={k}, stride={stride}, dilation={dilation} do not fit dim {axis} "
                f"of {self.shape}; accepted: all >= 1 and dilation*(k-1)+1 <= {size}"
            )
        if self.mask is not None and self.mask[axis] != (0, size):
            return None
        o = (size - dilation * (k - 1) - 1) // stride + 1
        st = self.strides[axis]
        shape = self.shape[:axis] + (o, k) + self.shape[axis + 1 :]
        strides = self.strides[:axis] + (st * stride, st * dilation) + self.strides[axis + 1 :]
        mask = None
        if self.mask is not None:
            mask = self.mask[:axis] + ((0, o), (0, k)) + self.mask[axis + 1 :]
        return self._with(shape, strides, self.offset, mask)

    def reshape(self, shape: Shape) -> View | None:
        """The same elements in row-major order under a new shape, or None if no View can."""
        shape = tuple(shape)
        if shape == self.shape:
            return self
        if self.is_contiguous or prod(shape) == 0:
            return View.contiguous(shape)
        if self.is_empty_mask:
            if not shape:  # a 0-d View has no dim to carry the empty mask on
                return None
            return View(shape, contiguous_strides(shape), 0, tuple((0, 0) for _ in shape))
        # only size-1 dims added or dropped (matmul's (n, k) -> (n, 1, k) of a transposed
        # operand): every other dim keeps its stride and mask, as the grouping below gives
        kept = [d for d, s in enumerate(self.shape) if s != 1]
        if [self.shape[d] for d in kept] == [s for s in shape if s != 1]:
            it = iter(kept)
            picks = [-1 if s == 1 else next(it) for s in shape]
            strides = [0 if d < 0 else self.strides[d] for d in picks]
            if self.mask is None:  # (and a size-1 dim's stride is already 0)
                return View(shape, tuple(strides), self.offset, None)
            mask = [(0, 1) if d < 0 else self.mask[d] for d in picks]
            return self._with(shape, strides, self.offset, mask)
        # drop size-1 dims, then match groups of old dims to groups of new dims
        old = [
            (s, st, m) for s, st, m in zip(self.shape, self.strides, self._full_mask()) if s != 1
        ]
        new_dims = [s for s in shape if s != 1]
        out_st: list[int] = []
        out_mask: list[tuple[int, int]] = []
        i = j = 0
        while i < len(old) or j < len(new_dims):
            if i >= len(old) or j >= len(new_dims):
                return None
            gi, gj = [old[i]], [new_dims[j]]
            i, j = i + 1, j + 1
            while prod(s for s, _, _ in gi) != prod(gj):
                if prod(s for s, _, _ in gi) < prod(gj):
                    gi.append(old[i])
                    i += 1
                else:
                    gj.append(new_dims[j])
                    j += 1
            merged = _merge(gi)
            split = None if merged is None else _split(merged, gj)
            if split is None:
                return None
            out_st += split[0]
            out_mask += split[1]
        it = iter(range(len(out_st)))
        picks = [-1 if s == 1 else next(it) for s in shape]  # a size-1 dim: stride 0, full
        strides = [0 if p < 0 else out_st[p] for p in picks]
        mask = [(0, 1) if p < 0 else out_mask[p] for p in picks]
        return self._with(shape, strides, self.offset, None if self.mask is None else mask)


def _merge(dims: list[tuple[int, int, tuple[int, int]]]):
    """Fuse dims into one (size, stride, mask) if their strides nest and inner masks are full."""
    size, stride, (lo, hi) = dims[-1]
    for s, st, (mlo, mhi) in reversed(dims[:-1]):
        if st != stride * size or (lo, hi) != (0, size):
            return None
        lo, hi = mlo * size, mhi * size
        size = s * size
    return size, stride, (lo, hi)


def _split(merged, sizes: list[int]):
    """Split one (size, stride, mask) dim into ``sizes``; a mask must fall on the outer dim."""
    size, stride, (lo, hi) = merged
    inner = prod(sizes[1:])
    if (lo, hi) != (0, size) and (lo % inner or hi % inner):
        return None
    strides, masks, acc = [], [], 1
    for s in reversed(sizes):
        strides.append(stride * acc)
        masks.append((0, s))
        acc *= s
    strides.reverse()
    masks.reverse()
    masks[0] = (lo // inner, -(-hi // inner)) if (lo, hi) != (0, size) else (0, sizes[0])
    return strides, masks
