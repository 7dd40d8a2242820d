"""Counting and membership: which bucket, how many, which are among, which are distinct.

``isin``, ``bucketize`` and ``searchsorted`` are comparisons summed: the bucket of x is
how many boundaries lie below it (or at it, with ``right``), so they stay lazy and run
on the tensor's device. ``histc`` counts by comparing each element's bin with every bin;
``histogram`` and ``histogramdd`` find each element's bin as ``searchsorted`` does (edges
at or below it), then count as ``histc``, their edges torch's ``linspace`` over the range
(read from the data when not given, as ``histc`` reads it); weights are added to their
bins point by point, in torch's order, so a weighted histogram has torch's bits.
``bincount``, ``unique`` and ``unique_consecutive`` have a result whose length depends on
the values, so they read them (as ``nonzero`` does) and count on the host.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ir.graph import dtypes
from limn.ops.creation import linspace
from limn.tensor import Tensor


def _tensor(x, like: Tensor) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x, device=like.device)


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    """Whether each of ``elements`` is among ``test_elements`` (either may be a number)."""
    like = elements if isinstance(elements, Tensor) else test_elements
    e, t = _tensor(elements, like), _tensor(test_elements, like)
    hit = (e.unsqueeze(-1) == t.reshape(1, -1).reshape(*([1] * e.ndim), -1)).any(-1)
    return ~hit if invert else hit


def _below(boundaries: Tensor, x: Tensor, right: bool) -> Tensor:
    """How many of ``boundaries`` (last dim) lie below each x (at or below, ``right``);
    a NaN x is past them all (NaN sorts last)."""
    b = boundaries.unsqueeze(-2)
    v = x.unsqueeze(-1)
    n = (b <= v) if right else (b < v)
    count = n.sum(-1)
    if x.dtype.is_float:
        count = x.isnan().where(boundaries.shape[-1], count)
    return count


def bucketize(input, boundaries: Tensor, *, out_int32: bool = False, right: bool = False):
    """The bucket of each element among sorted 1-d ``boundaries``: i with
    boundaries[i-1] < x <= boundaries[i] (``right``: boundaries[i-1] <= x < boundaries[i])."""
    if boundaries.ndim != 1:
        raise ValueError(f"bucketize: boundaries must be 1-d, got shape {boundaries.shape}")
    x = _tensor(input, boundaries)
    out = _below(boundaries, x.reshape(-1), right).reshape(x.shape)
    return out.cast(dtypes.int32 if out_int32 else dtypes.int64)


def searchsorted(sorted_sequence: Tensor, values, *, out_int32: bool = False, right=False,
                 side=None, out=None, sorter=None):  # fmt: skip
    """Where each of ``values`` would go in ``sorted_sequence`` (its last dim, the leading
    dims matching ``values``'), keeping it sorted: before equals (side "left"), or after
    them (``right`` or side "right"). ``sorter`` sorts an unsorted sequence."""
    if side is not None:
        if side not in ("left", "right") or (right and side == "left"):
            raise ValueError(
                f"searchsorted: side must be 'left' or 'right' (as right), got {side!r}"
            )
        right = side == "right"
    seq = sorted_sequence
    if sorter is not None:
        seq = seq.gather(-1, sorter)
    v = _tensor(values, seq)
    if v.ndim == 0:
        out_t = _below(seq.reshape(-1), v.reshape(1), right).reshape(())
    elif seq.ndim == 1:
        out_t = _below(seq, v.reshape(-1), right).reshape(v.shape)
    else:
        if seq.shape[:-1] != v.shape[:-1]:
            raise ValueError(
                f"searchsorted: the sequence {seq.shape} and the values {v.shape} must share "
                "their leading dims"
            )
        out_t = _below(seq, v, right)
    return out_t.cast(dtypes.int32 if out_int32 else dtypes.int64)


def histc(self: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002
    """Counts in ``bins`` equal bins over [min, max] (the data's range when both are 0;
    one either side of it when that is a point); what lies outside is not counted."""
    if not self.dtype.is_float:
        raise TypeError(f"histc: needs a float input, got {self.dtype}")
    if bins <= 0 or max < min:
        raise ValueError(f"histc: needs bins > 0 and max >= min, got {bins}, [{min}, {max}]")
    lo, hi = float(min), float(max)
    if lo == hi and self.numel():
        lo, hi = self.min().item(), self.max().item()
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"histc: range [{lo}, {hi}] is not finite")
    x = self.reshape(-1).cast(dtypes.float64)
    b = ((x - lo) * (bins / (hi - lo))).floor().minimum(bins - 1)
    inside = (x >= lo) & (x <= hi)
    pos = Tensor.arange(bins, device=self.device)
    counts = ((b.unsqueeze(-1) == pos) & inside.unsqueeze(-1)).sum(0)
    return counts.cast(self.dtype)


def bincount(self: Tensor, weights=None, minlength: int = 0) -> Tensor:
    """How often each of 0..max appears in a 1-d tensor of non-negative ints (the sum of
    their ``weights`` instead, if given), at least ``minlength`` long."""
    if self.ndim != 1 or not self.dtype.is_int or minlength < 0:
        raise ValueError(
            f"bincount: needs a 1-d tensor of non-negative ints and minlength >= 0, got "
            f"{self.dtype}{list(self.shape)}, minlength={minlength}"
        )
    ids = self.numpy()
    if (ids < 0).any():
        raise ValueError("bincount: the values must be non-negative")
    if weights is not None and tuple(weights.shape) != self.shape:
        raise ValueError(f"bincount: weights {weights.shape} must match the input {self.shape}")
    n = int(max(ids.max() + 1 if ids.size else 0, minlength))
    hit = self.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    if weights is None:
        return hit.sum(0).cast(dtypes.int64)
    w = weights.cast(dtypes.float64) if not weights.dtype.is_float else weights
    out_dtype = w.dtype if w.dtype in (dtypes.float32, dtypes.float64) else dtypes.float64
    return hit.where(w.unsqueeze(-1), 0).sum(0).cast(out_dtype)


def unique(self: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim=None):  # fmt: skip
    """The distinct values in order (slices along ``dim``), and where each element went
    (``return_inverse``) and how often each appears (``return_counts``)."""
    a = self.numpy()
    if dim is None:
        values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(a.shape)
    else:
        values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True,
                                            axis=dim)  # fmt: skip
        inverse = inverse.reshape(-1)
    return _answer(self, values, inverse, counts, return_inverse, return_counts)


def unique_consecutive(self: Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim=None):  # fmt: skip
    """Each run of equal neighbours (slices along ``dim``) kept once, in order."""
    a = self.numpy()
    rows = a.reshape(-1) if dim is None else np.moveaxis(a, dim, 0)
    n = rows.shape[0]
    if n == 0:
        starts = np.zeros(0, bool)
    else:
        flat = rows.reshape(n, -1)
        same = np.all(flat[1:] == flat[:-1], axis=1) if flat.shape[1] else np.ones(n - 1, bool)
        starts = np.concatenate([[True], ~same])
    run = np.cumsum(starts) - 1
    values = rows[starts]
    counts = np.bincount(run, minlength=len(values)) if n else np.zeros(0, np.int64)
    if dim is not None:
        values = np.moveaxis(values, 0, dim)
    inverse = run.reshape(a.shape) if dim is None else run
    return _answer(self, values, inverse, counts, return_inverse, return_counts)


def _answer(x: Tensor, values, inverse, counts, return_inverse: bool, return_counts: bool):
    out = [Tensor(np.ascontiguousarray(values), dtype=x.dtype, device=x.device)]
    if return_inverse:
        out.append(Tensor(inverse.astype(np.int64), dtype=dtypes.int64, device=x.device))
    if return_counts:
        out.append(Tensor(counts.astype(np.int64), dtype=dtypes.int64, device=x.device))
    return out[0] if len(out) == 1 else tuple(out)


Histogram = namedtuple("Histogram", "hist bin_edges")  # torch.return_types.histogram(dd)


def _edges(x: Tensor, bins, lo_hi, op: str) -> list[Tensor]:
    """Each dim's bin edges for the points ``x`` (N, D): the given edge tensors, or torch's
    ``linspace`` of ``bins + 1`` edges over the range (the data's when ``lo_hi`` is None;
    a point widened by 0.5 either side, as torch's and numpy's)."""
    d = x.shape[1]
    if isinstance(bins, int):
        bins = [bins] * d
    bins = list(bins)
    if len(bins) != d:
        raise ValueError(f"{op}: {len(bins)} bins for points of {d} dims; give one per dim")
    if lo_hi is not None and len(lo_hi) != 2 * d:
        raise ValueError(f"{op}: range must hold {2 * d} numbers (a low and a high per dim)")
    edges = []
    for k, b in enumerate(bins):
        if isinstance(b, Tensor):
            if b.ndim != 1 or b.shape[0] < 1:
                raise ValueError(f"{op}: bin edges must be 1-d and not empty, got {b.shape}")
            edges.append(b.cast(x.dtype))
            continue
        if int(b) < 1:
            raise ValueError(f"{op}: bins must be >= 1, got {b}")
        if lo_hi is not None:
            lo, hi = float(lo_hi[2 * k]), float(lo_hi[2 * k + 1])
        elif x.shape[0]:
            lo, hi = x[:, k].min().item(), x[:, k].max().item()
        else:
            lo, hi = 0.0, 1.0  # torch's range for no data
        if lo > hi or not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"{op}: range [{lo}, {hi}] must be finite with low <= high")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges.append(linspace(lo, hi, int(b) + 1, dtype=x.dtype, device=x.device))
    return edges


def histogramdd(input: Tensor, bins, *, range=None, weight=None, density: bool = False):  # noqa: A002
    """Counts of the points ``input`` (..., D) in the D-dim grid of bins ``bins`` (a count
    per dim, one for all, or each dim's edges): a point is in bin i of a dim when
    edges[i] <= it < edges[i + 1] (the last bin holds its right edge); points outside are
    not counted. ``weight`` sums weights instead; ``density`` divides by the total and the
    bins' volumes."""
    op = "histogramdd"
    if not input.dtype.is_float or input.ndim < 2:
        raise TypeError(
            f"{op}: needs float points (..., D) of at least 2 dims, got {input.dtype}"
            f"{list(input.shape)}"
        )
    x = input.reshape(-1, input.shape[-1])
    edges = _edges(x, bins, range, op)
    n = x.shape[0]
    inside, flat = None, None
    for k, e in enumerate(edges):
        col = x[:, k].reshape(n, 1)
        nb = e.shape[0] - 1
        at = (e.reshape(1, -1) <= col).sum(1) - 1
        at = (col.reshape(n) == e[-1]).where(nb - 1, at)
        ok = (col.reshape(n) >= e[0]) & (col.reshape(n) <= e[-1])
        inside = ok if inside is None else inside & ok
        flat = at if flat is None else flat * nb + at
    shape = tuple(e.shape[0] - 1 for e in edges)
    total = math.prod(shape)
    if weight is not None:
        if tuple(weight.shape) != tuple(input.shape[:-1]):
            raise ValueError(f"{op}: weight {weight.shape} must be {tuple(input.shape[:-1])}")
        # added to its bin point by point, in the points' order, as torch adds: a float
        # sum's bits depend on its order (a point outside adds 0 to bin 0)
        w = inside.where(weight.reshape(n).cast(x.dtype), 0)
        hist = x.new_zeros(total).index_add(0, inside.where(flat, 0), w)
    else:
        hit = (flat.reshape(n, 1) == Tensor.arange(total, device=x.device)) & inside.reshape(n, 1)
        hist = hit.sum(0).cast(x.dtype)
    hist = hist.reshape(*shape)
    if density:  # divided by the total, then by each dim's widths in turn: torch's bits
        hist = hist / hist.sum()
        for k, e in enumerate(edges):
            width = (e[1:] - e[:-1]).reshape(*[-1 if j == k else 1 for j, _ in enumerate(edges)])
            hist = hist / width
    return Histogram(hist, list(edges))


def histogram(input: Tensor, bins=100, *, range=None, weight=None, density: bool = False):  # noqa: A002
    """``histogramdd`` of the flattened input as 1-d points: (hist, bin_edges)."""
    if isinstance(bins, Tensor) and bins.ndim != 1:
        raise ValueError(f"histogram: bin edges must be 1-d, got {bins.shape}")
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise ValueError(f"histogram: weight {weight.shape} must be the input's {input.shape}")
    w = None if weight is None else weight.reshape(-1)
    hist, edges = histogramdd(input.reshape(-1, 1), [bins], range=range, weight=w, density=density)
    return Histogram(hist, edges[0])


# torch's Tensor methods and free functions of the same (``x.histc()``, ``limn.isin``)
for _fn in (isin, bucketize, searchsorted, histc, histogram, bincount, unique, unique_consecutive):
    setattr(Tensor, _fn.__name__, _fn)
