"""torch's smaller free functions and methods that fit no family above: uninitialized
makers by stride (``empty_strided``, ``empty_permuted``: zeros, as ``empty``), ``fill``,
``constant_pad_nd``, ``nonzero_static``, ``unravel_index``, ``split_with_sizes_copy``,
``renorm``, ``frexp``, ``gcd`` and ``lcm``.

``gcd`` and ``lcm`` are Euclid's loop, whose length depends on the values, so they read
them and compute on the host, as ``nonzero`` does; the rest are composed.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ir.graph import dtypes
from limn.nn.functional_pool import pad as _pad
from limn.tensor import Tensor

Frexp = namedtuple("Frexp", "mantissa exponent")


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False) -> Tensor:  # fmt: skip
    """Zeros of ``size``: limn never hands out uninitialized memory, and has one layout."""
    return Tensor.zeros(tuple(size), dtype=dtype or dtypes.float32, device=device,
                        requires_grad=requires_grad)  # fmt: skip


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                   requires_grad=False, pin_memory=False) -> Tensor:  # fmt: skip
    if sorted(physical_layout) != list(range(len(size))):
        raise ValueError(f"empty_permuted: {physical_layout} is no order of {len(size)} dims")
    return empty_strided(size, (), dtype=dtype, device=device, requires_grad=requires_grad)


def new_empty_strided(self: Tensor, size, stride, *, dtype=None, device=None,
                      requires_grad=False, **_) -> Tensor:  # fmt: skip
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)  # fmt: skip


def fill(input: Tensor, value) -> Tensor:
    """``input``'s shape and dtype, every element ``value`` (a number or a 0-d tensor)."""
    if isinstance(value, Tensor):
        if value.ndim:
            raise ValueError(f"fill: value must be a number or a 0-d tensor, got {value.shape}")
        return value.cast(input.dtype).expand(*input.shape).contiguous()
    return input.full_like(value)


def constant_pad_nd(input: Tensor, pad, value=0) -> Tensor:
    return _pad(input, pad, "constant", value)


def nonzero_static(input: Tensor, *, size: int, fill_value: int = -1) -> Tensor:
    """``nonzero`` cut or filled (with ``fill_value``) to exactly ``size`` rows."""
    if size < 0:
        raise ValueError(f"nonzero_static: size must be >= 0, got {size}")
    found = input.nonzero().numpy()[:size]
    rows = np.full((size, max(input.ndim, found.shape[1] if found.ndim == 2 else 0)), fill_value,
                   np.int64)  # fmt: skip
    rows[: len(found)] = found
    return Tensor(rows, dtype=dtypes.int64, device=input.device)


def unravel_index(indices, shape) -> tuple:
    """The coordinates in ``shape`` of each flat (row-major) index."""
    idx = indices if isinstance(indices, Tensor) else Tensor(indices)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not idx.dtype.is_int or idx.dtype == dtypes.bool_:
        raise TypeError(f"unravel_index: needs integer indices, got {idx.dtype}")
    if any(s < 0 for s in shape):
        raise ValueError(f"unravel_index: sizes must be >= 0, got {shape}")
    total = int(np.prod(shape, dtype=np.int64))
    if idx.numel() and bool(((idx < -total) | (idx >= total)).any()):
        raise ValueError(f"unravel_index: an index is out of range for shape {shape}")
    flat = (idx < 0).where(idx + total, idx).cast(dtypes.int64)
    out = []
    for s in reversed(shape):
        out.append(flat.remainder(s) if s else flat * 0)
        flat = flat.div(s, rounding_mode="floor") if s else flat
    return tuple(reversed(out))


def split_with_sizes_copy(input: Tensor, split_sizes, dim: int = 0) -> list:
    return [t.contiguous() for t in input.split(list(split_sizes), dim)]


def renorm(self: Tensor, p: float, dim: int, maxnorm: float) -> Tensor:
    """Each slice along ``dim`` whose p-norm exceeds ``maxnorm`` scaled down to it."""
    if not self.dtype.is_float or p <= 0 or maxnorm < 0:
        raise ValueError(
            f"renorm: needs a float input, p > 0 and maxnorm >= 0, got {self.dtype}, p={p}, "
            f"maxnorm={maxnorm}"
        )
    d = dim % self.ndim
    others = tuple(i for i in range(self.ndim) if i != d)
    norm = self.norm(p, others, keepdim=True) if others else self.abs()
    scale = (norm > maxnorm).where(maxnorm / (norm + 1e-7), 1.0).cast(self.dtype)
    return self * scale


def frexp(self: Tensor) -> Frexp:
    """x = mantissa * 2**exponent, |mantissa| in [0.5, 1) (0, inf and nan: exponent 0)."""
    if not self.dtype.is_float:
        raise TypeError(f"frexp: needs a float input, got {self.dtype}")
    x = self.cast(dtypes.float64)
    finite = (x != 0) & x.isfinite()
    safe = finite.where(x.abs(), 1.0)
    e = safe.log2().floor() + 1
    half = (e / 2).floor()
    m = x / (2.0**half) / (2.0 ** (e - half))  # in two steps: 2**e alone may overflow
    big, small = m.abs() >= 1, m.abs() < 0.5
    e = big.where(e + 1, small.where(e - 1, e))
    m = big.where(m / 2, small.where(m * 2, m))
    return Frexp(finite.where(m, x).cast(self.dtype), finite.where(e, 0).cast(dtypes.int32))


def _host_integers(a, b, fn, op: str) -> Tensor:
    a = a if isinstance(a, Tensor) else b._lift(a)
    b = b if isinstance(b, Tensor) else a._lift(b)
    a, b = a._align(b, op)
    if not a.dtype.is_int or a.dtype == dtypes.bool_:
        raise TypeError(f"{op}: needs integer tensors, got {a.dtype}")
    out = fn(a.numpy(), b.numpy())
    return Tensor(np.asarray(out).astype(dtypes.to_numpy(a.dtype)), dtype=a.dtype,
                  device=a.device)  # fmt: skip


def gcd(self: Tensor, other) -> Tensor:
    return _host_integers(self, other, np.gcd, "gcd")


def lcm(self: Tensor, other) -> Tensor:
    return _host_integers(self, other, np.lcm, "lcm")


for _fn in (fill, nonzero_static, split_with_sizes_copy, renorm, frexp, gcd, lcm,
            new_empty_strided, constant_pad_nd):  # fmt: skip
    setattr(Tensor, _fn.__name__, _fn)
