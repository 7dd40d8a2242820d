"""Second moments and integrals along a dim: ``cov``, ``corrcoef``, the trapezoid rule.

``cov`` is torch's: variables in rows and observations in columns, each observation
weighted by its frequency (``fweights``) and importance (``aweights``), with torch's
normalization (``correction`` subtracted from the weight, as NumPy's ``ddof``).
``corrcoef`` scales it by the deviations. ``trapezoid`` integrates samples by the
trapezoid rule (spacing ``dx``, or the points ``x``), ``cumulative_trapezoid`` gives the
running integral. All are composed from Tensor methods, so they run anywhere and take
gradients.
"""

from __future__ import annotations

from ir.graph import compose, dtypes
from limn.tensor import Tensor


def cov(self: Tensor, *, correction: int = 1, fweights=None, aweights=None) -> Tensor:
    if self.ndim > 2:
        raise ValueError(
            f"cov: needs a 1-d or 2-d input (variables, observations), got {self.shape}"
        )
    x = self.reshape(1, -1) if self.ndim < 2 else self
    x = x if x.dtype.is_float else x.cast(dtypes.float32)
    n = x.shape[1]
    w = None
    for name, given in (("fweights", fweights), ("aweights", aweights)):
        if given is None:
            continue
        if given.ndim > 1 or given.numel() != n:
            raise ValueError(f"cov: {name} must be 1-d with {n} entries, got {given.shape}")
        if name == "fweights" and not given.dtype.is_int:
            raise TypeError(f"cov: fweights must be integers, got {given.dtype}")
        if name == "aweights" and not given.dtype.is_float:
            raise TypeError(f"cov: aweights must be floats, got {given.dtype}")
        if bool((given < 0).any()):  # torch refuses them: the weights are read
            raise ValueError(f"cov: {name} cannot be negative")
        w = given if w is None else w * given
    if w is None:
        avg = x.mean(1, keepdim=True)
        factor = Tensor(float(n - correction), dtype=x.dtype, device=x.device)
    else:  # the weights' sums in their own dtype, as torch's
        w_sum = w.sum()
        avg = (x * w).sum(1, keepdim=True) / w_sum
        if correction == 0:
            factor = w_sum
        elif aweights is None:
            factor = w_sum - correction
        else:
            factor = w_sum - correction * (w * aweights).sum() / w_sum
    factor = factor.maximum(0)
    d = x - avg
    dw = d if w is None else d * w
    out = (dw @ d.transpose(0, 1)) / factor
    return out.reshape(()) if out.shape == (1, 1) else out


def corrcoef(self: Tensor) -> Tensor:
    c = cov(self)
    if c.ndim == 0:
        return c / c
    d = c.diagonal()
    s = d.sqrt()
    return (c / s.unsqueeze(1) / s.unsqueeze(0)).clamp(-1, 1)


def _spacing(y: Tensor, x, dx, dim: int, op: str):
    """The widths of the intervals along ``dim``: from the points ``x``, or ``dx``."""
    if x is not None and dx is not None:
        raise ValueError(f"{op}: give x or dx, not both")
    if x is None:
        return 1.0 if dx is None else dx
    x = x if isinstance(x, Tensor) else Tensor(x, device=y.device)
    if x.ndim == 1:
        if x.shape[0] != y.shape[dim]:
            raise ValueError(f"{op}: x {x.shape} must have dim {dim}'s {y.shape[dim]} points")
        widths = x[1:] - x[:-1]
        return widths.reshape(-1, *([1] * (y.ndim - 1 - dim)))
    return x.narrow(dim, 1, x.shape[dim] - 1) - x.narrow(dim, 0, x.shape[dim] - 1)


def _pieces(y: Tensor, x, dx, dim: int, op: str) -> Tensor:
    d = compose.normalize_axis(dim, y.ndim, op)
    n = y.shape[d]
    y = y if y.dtype.is_float else y.cast(dtypes.float32)
    h = _spacing(y, x, dx, d, op)
    if n == 0:
        return y.narrow(d, 0, 0), d
    return (y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)) * h / 2, d


def trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    parts, d = _pieces(y, x, dx, dim, "trapezoid")
    return parts.sum(d)


def trapz(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """torch's older name of ``trapezoid``."""
    if x is not None and not isinstance(x, Tensor):  # trapz(y, dx, dim) positionally
        return trapezoid(y, dx=x, dim=dim)
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    parts, d = _pieces(y, x, dx, dim, "cumulative_trapezoid")
    return parts.cumsum(d)


# torch's Tensor methods and free functions of the same
for _fn in (cov, corrcoef, trapezoid, trapz, cumulative_trapezoid):
    setattr(Tensor, _fn.__name__, _fn)
