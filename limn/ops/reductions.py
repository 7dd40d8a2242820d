"""Reductions and scans of limn.Tensor: sums, extremes, means and moments, norms, counts,
softmax along a dim, and the running (cumulative) forms.

``Reductions`` is a mixin of ``limn.Tensor``, with the rules of every mixin here (see
``math.py``): each method checks its dims in torch's forms (``dim=`` or ``axis=``, a
tuple of dims, torch's dim 0 or -1 on a 0-d tensor) and composes ``ir/graph/compose.py``.
``max``/``min`` given ``dim=`` answer torch's (values, indices) pair; given ``axis`` (or
positionally) they answer the values, as ``amax``/``amin`` do.
"""

from __future__ import annotations

import math
from collections import namedtuple

from ir.graph import compose, dtypes
from ir.graph.dtypes import as_dtype
from limn.ops.arguments import _ints, _labelled, accept_torch_names, on_nodes, scalar_dims
from limn.ops.movement import _cat

MinMax = namedtuple("MinMax", "values indices")  # torch.return_types.max / min / topk / sort


AminMax = namedtuple("aminmax", "min max")


class Reductions:
    def _axes(self, axis, op):
        return compose.normalize_axes(axis, self.ndim, op)

    def sum(self, axis=None, keepdim: bool = False, dtype=None):
        return _labelled(compose.sum_(self._total(dtype), self._axes(axis, "sum"), keepdim), "Sum")

    def _total(self, dtype):
        """The operand of a sum or cumsum, cast to its total's dtype (integers: int64)."""
        want = as_dtype(dtype) if dtype is not None else dtypes.total_dtype(self.dtype, False)
        return self if want == self.dtype else self.p_cast(want)

    def amax(self, axis=None, keepdim: bool = False):
        self._nonempty(axis, "max")
        return compose.max_(self, self._axes(axis, "max"), keepdim)

    def amin(self, axis=None, keepdim: bool = False):
        self._nonempty(axis, "min")
        return compose.min_(self, self._axes(axis, "min"), keepdim)

    def max(self, dim=None, keepdim: bool = False, *, axis=None):
        """torch's three forms: ``max()`` the largest, ``max(dim)`` the pair (values,
        indices), ``max(other)`` the elementwise ``maximum``; limn's ``max(axis=)`` is the
        values alone, as ``amax``."""
        if isinstance(dim, Reductions):
            return self.maximum(dim)
        if dim is None or isinstance(dim, tuple | list):  # several dims: limn's, the values
            return self.amax(axis if dim is None else dim, keepdim)
        return MinMax(self.amax(dim, keepdim), self.argmax(dim, keepdim))

    def min(self, dim=None, keepdim: bool = False, *, axis=None):
        """As ``max``: the smallest, the pair (values, indices), or ``minimum``."""
        if isinstance(dim, Reductions):
            return self.minimum(dim)
        if dim is None or isinstance(dim, tuple | list):
            return self.amin(axis if dim is None else dim, keepdim)
        return MinMax(self.amin(dim, keepdim), self.argmin(dim, keepdim))

    def _nonempty(self, axis, op):
        if any(self.shape[a] == 0 for a in self._axes(axis, op)):
            raise ValueError(f"{op}: cannot reduce a zero-size axis of shape {self.shape}")

    def mean(self, axis=None, keepdim: bool = False, dtype=None):
        return _labelled(self._mean(axis, keepdim, dtype), "Mean")

    def _mean(self, axis, keepdim, dtype):
        if dtype is None and not self.dtype.is_float:
            raise TypeError(
                f"mean: needs a float tensor, got {self.dtype}; accepted: x.float().mean() "
                "or mean(dtype=...), as in torch"
            )
        x = self if dtype is None else self.cast(dtype)
        return on_nodes(compose.mean, x, self._axes(axis, "mean"), keepdim)

    def var(self, axis=None, keepdim: bool = False, correction: float = 1):
        if isinstance(axis, bool):  # torch's var(x, unbiased)
            axis, correction = None, int(axis)
        return on_nodes(compose.var, self._float(), self._axes(axis, "var"), keepdim, correction)

    def std(self, axis=None, keepdim: bool = False, correction: float = 1):
        if isinstance(axis, bool):  # torch's std(x, unbiased)
            axis, correction = None, int(axis)
        return on_nodes(compose.std, self._float(), self._axes(axis, "std"), keepdim, correction)

    def logsumexp(self, axis=None, keepdim: bool = False):
        return on_nodes(compose.logsumexp, self._float(), self._axes(axis, "logsumexp"), keepdim)

    def softmax(self, axis: int = -1, dtype=None):
        x = self._float() if dtype is None else self.cast(dtype)
        return on_nodes(compose.softmax, x, compose.normalize_axis(axis, self.ndim, "softmax"))

    def log_softmax(self, axis: int = -1, dtype=None):
        x = self._float() if dtype is None else self.cast(dtype)
        axis = compose.normalize_axis(axis, self.ndim, "log_softmax")
        return on_nodes(compose.log_softmax, x, axis)

    def _arg(self, fn, axis, keepdim, name):
        if axis is None:
            return fn(self.reshape(-1), 0, False)
        self._nonempty(axis, name)
        return fn(self, compose.normalize_axis(axis, self.ndim, name), keepdim)

    def argmax(self, axis=None, keepdim: bool = False):
        return self._arg(compose.argmax, axis, keepdim, "argmax")

    def argmin(self, axis=None, keepdim: bool = False):
        return self._arg(compose.argmin, axis, keepdim, "argmin")

    def cumsum(self, axis: int = 0, dtype=None):
        axis = compose.normalize_axis(axis, self.ndim, "cumsum")
        return compose.cumsum(self._total(dtype), axis)

    def any(self, axis=None, keepdim: bool = False):
        return self.p_cast(dtypes.bool_).amax(axis, keepdim)

    def all(self, axis=None, keepdim: bool = False):
        return self.p_cast(dtypes.bool_).amin(axis, keepdim)

    def norm(self, p="fro", axis=None, keepdim: bool = False, dtype=None):
        """The vector p-norm over ``axis`` (all dims by default): 0, 1, 2, inf, -inf or any
        p; "fro" (the default) is 2 over the dims given; "nuc", the nuclear norm of the
        matrices over ``axis`` (every dim by default: a 2-d tensor's, as torch's)."""
        if p == "nuc":  # the singular values' sum: ``linalg.matrix_norm``, set on the class
            dims = tuple(range(self.ndim)) if axis is None else axis  # by limn.ops.linalg
            return self._nuclear_norm(dims, keepdim, dtype)
        if p is not None and not isinstance(p, int | float) and p != "fro":
            raise ValueError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
        p = 2 if p is None or p == "fro" else p
        a = (self._float() if dtype is None else self.cast(dtype)).abs()
        if p == 0:  # torch's "norm" of order 0: how many are not zero
            return (a != 0).sum(axis, keepdim).cast(a.dtype)
        if p == math.inf:
            return a.amax(axis, keepdim)
        if p == -math.inf:
            return a.amin(axis, keepdim)
        if p in (1, 2):
            return (a if p == 1 else a * a).sum(axis, keepdim) ** (1 / p)
        return (a**p).sum(axis, keepdim) ** (1 / p)

    def prod(self, axis=None, keepdim: bool = False, dtype=None):
        """The product (integers in int64, as torch), the last of a running product."""
        x = self._total(dtype)
        if axis is None:
            out = x.reshape(-1).prod(0, dtype=x.dtype)
            return out.reshape((1,) * self.ndim) if keepdim else out
        a = compose.normalize_axis(axis, x.ndim, "prod")
        n = x.shape[a]
        if n == 0:
            return x.sum(a, keepdim, dtype=x.dtype).full_like(1)
        out = x.cumprod(a, dtype=x.dtype).narrow(a, n - 1, 1)  # in the dtype asked for
        return out if keepdim else out.squeeze(a)

    def cumprod(self, axis: int, dtype=None):
        axis = compose.normalize_axis(axis, self.ndim, "cumprod")
        return compose.scan(self._total(dtype), axis, "mul")

    def nansum(self, axis=None, keepdim: bool = False, dtype=None):
        x = self.isnan().where(0, self) if self.dtype.is_float else self
        return x.sum(axis, keepdim, dtype)

    def nanmean(self, axis=None, keepdim: bool = False, dtype=None):
        if not self.dtype.is_float:
            raise TypeError(f"nanmean: needs a float tensor, got {self.dtype}")
        n = (~self.isnan()).sum(axis, keepdim)
        return self.nansum(axis, keepdim, dtype) / n.cast(self.dtype)

    def count_nonzero(self, axis=None):
        return (self != 0).sum(axis)

    def aminmax(self, *, axis=None, keepdim: bool = False):
        return AminMax(self.amin(axis, keepdim), self.amax(axis, keepdim))

    def var_mean(self, axis=None, keepdim: bool = False, correction: float = 1):
        if isinstance(axis, bool):  # torch's var_mean(x, unbiased)
            axis, correction = None, int(axis)
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis=None, keepdim: bool = False, correction: float = 1):
        if isinstance(axis, bool):
            axis, correction = None, int(axis)
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def logcumsumexp(self, axis: int):
        """log(cumsum(exp(x))) about the running max, so large values stay finite."""
        x = self._float()
        axis = compose.normalize_axis(axis, x.ndim, "logcumsumexp")
        if x.numel() == 0:
            return x
        m = x.amax(axis, keepdim=True).detach()
        m = m.isfinite().where(m, 0.0)
        return (x - m).exp().cumsum(axis).log() + m

    def cummax(self, axis: int):
        """(running max, the latest index where it was reached)."""
        return self._cumulative_best(axis, "cummax", 1)

    def cummin(self, axis: int):
        return self._cumulative_best(axis, "cummin", -1)

    def _cumulative_best(self, axis: int, name: str, sign: int):
        axis = compose.normalize_axis(axis, self.ndim, name)
        key = self if sign == 1 else (-self if self.dtype.is_float else ~self)
        if self.dtype == dtypes.bool_:
            key = self.cast(dtypes.int8) * sign
        best = key.p_scan(axis, "max") if self.ndim else key
        n = self.shape[axis] if self.ndim else 1
        pos = type(self).arange(n, device=self.device)
        pos = (
            pos.reshape(n, *[1] * (self.ndim - axis - 1)).expand(*self.shape)
            if self.ndim
            else pos[0]
        )
        hit = (key == best) | (key.isnan() if self.dtype.is_float else key != key)
        if self.ndim == 0:
            return MinMax(self, pos * 0)
        idx = hit.where(pos, -1).p_scan(axis, "max")
        values = self.gather(axis, idx)
        return MinMax(values, idx)

    def dist(self, other, p: float = 2):
        return (self - other).norm(p)

    def diff(self, n: int = 1, axis: int = -1, prepend=None, append=None):
        if n < 0 or self.ndim == 0:
            raise ValueError(f"diff: needs n >= 0 and at least 1 dim, got n={n}, {self.shape}")
        axis = compose.normalize_axis(axis, self.ndim, "diff")
        x = self
        if n == 0:  # torch's: a copy of the input, prepend and append unused
            return x.clone()
        if prepend is not None or append is not None:
            parts = [t for t in (prepend, x, append) if t is not None]
            x = _cat([t if isinstance(t, Reductions) else self._lift(t) for t in parts], axis)
        for _ in range(n):
            m = x.shape[axis]
            if m == 0:
                break
            a, b = x.narrow(axis, 1, m - 1), x.narrow(axis, 0, m - 1)
            x = a ^ b if x.dtype == dtypes.bool_ else a - b
        return x.clone() if x is self else x  # (n = 0: a copy, as torch's)

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


for _name in (
    "sum amax amin max min mean var std logsumexp softmax log_softmax argmax argmin cumsum "
    "any all norm prod cumprod nansum nanmean count_nonzero var_mean std_mean"
).split():
    setattr(Reductions, _name, scalar_dims(getattr(Reductions, _name)))
accept_torch_names(Reductions)


def gradient(input, *, spacing=1, dim=None, edge_order: int = 1) -> tuple:
    """torch.gradient: the derivative of ``input`` along each of ``dim`` (every dim when
    None) by differences: central inside (second order, for uneven coordinates too), one-
    sided at the two ends to ``edge_order`` (1 or 2). ``spacing`` is the step (a number,
    or one per dim) or the coordinates (a 1-d tensor per dim); integers give floats."""
    dims = list(range(input.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [compose.normalize_axis(d, input.ndim, "gradient") for d in dims]
    if len(set(dims)) != len(dims):
        raise ValueError(f"gradient: dim {dims} names a dim more than once")
    if edge_order not in (1, 2):
        raise ValueError(f"gradient: edge_order must be 1 or 2, got {edge_order}")
    steps = list(spacing) if isinstance(spacing, list | tuple) else [spacing] * len(dims)
    if spacing is None:
        steps = [1] * len(dims)
    if len(steps) != len(dims):
        raise ValueError(
            f"gradient: expected spacing to be unspecified, a scalar or a list of "
            f"{len(dims)} (one per dim), got {len(steps)}"
        )
    x = input if input.dtype.is_float else input.float()
    out = []
    for d, h in zip(dims, steps):
        n = x.shape[d]
        if n < edge_order + 1:
            raise ValueError(
                f"gradient: each dim's size must be at least edge_order + 1 = "
                f"{edge_order + 1}, dim {d} has {n}"
            )
        f = lambda a, m=None, d=d, n=n: x.narrow(d, a, n - a if m is None else m)  # noqa: E731
        if isinstance(h, Reductions):  # coordinates along d, broadcast against x
            c = h.to(x.dtype).reshape([n if i == d else 1 for i in range(x.ndim)])
            dx = c.narrow(d, 1, n - 1) - c.narrow(d, 0, n - 1)
            hl, hr = dx.narrow(d, 0, n - 2), dx.narrow(d, 1, n - 2)
            inner = hl * hl * f(2) - hr * hr * f(0, n - 2) + (hr * hr - hl * hl) * f(1, n - 2)
            inner = inner / (hl * hr * (hl + hr))
            a, b = dx.narrow(d, 0, 1), dx.narrow(d, 1, 1) if n > 2 else None
            y, z = dx.narrow(d, n - 2, 1), dx.narrow(d, n - 3, 1) if n > 2 else None
        else:
            inner = (f(2) - f(0, n - 2)) / (2 * h)
            a = b = y = z = h
        if edge_order == 1:
            first = (f(1, 1) - f(0, 1)) / a
            last = (f(n - 1, 1) - f(n - 2, 1)) / y
        else:  # the parabola through the three points at each end
            first = (-(2 * a + b) / (a * (a + b)) * f(0, 1) + (a + b) / (a * b) * f(1, 1)
                     - a / (b * (a + b)) * f(2, 1))  # fmt: skip
            last = (y / (z * (z + y)) * f(n - 3, 1) - (y + z) / (z * y) * f(n - 2, 1)
                    + (2 * y + z) / (y * (z + y)) * f(n - 1, 1))  # fmt: skip
        out.append(_cat([first, inner, last] if n > 2 else [first, last], d))
    return tuple(out)
