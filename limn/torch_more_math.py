"""More of torch's math under its names: elementwise ops, reductions and products.

A mixin of ``limn.Tensor`` beside ``limn/torch_methods.py``, with the same rules: each
method checks its arguments, promotes and broadcasts through ``_align`` and composes
methods or ``ir/graph`` functions; nothing here is a new primitive. These are the names
torch programs and torch's OpInfo samples use (``tests/test_opinfo.py`` checks each
against torch).
"""

from __future__ import annotations

import math
from collections import namedtuple

import ml_dtypes

from ir.graph import compose, dtypes, functions
from limn.torch_inplace import write_result
from limn.torch_methods import MinMax, accept_torch_names, scalar_dims

AminMax = namedtuple("aminmax", "min max")


def _binary_float(name: str, fn):
    """A method of two operands promoted together and computed in float."""

    def method(self, other):
        a, b = self._align(other, name)
        return fn(a._float(), b._float())

    method.__name__ = name
    return method


class TorchMoreMath:
    # ---- elementwise ----------------------------------------------------------------

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def positive(self):
        if self.dtype == dtypes.bool_:
            raise TypeError("positive: not defined for bool tensors, as in torch")
        return self

    def conj(self):
        return self

    conj_physical = resolve_conj = resolve_neg = real = conj

    def deg2rad(self):
        return self._float() * (math.pi / 180)

    def rad2deg(self):
        return self._float() * (180 / math.pi)

    def frac(self):
        if not self.dtype.is_float:
            raise TypeError(f"frac: needs a float tensor, got {self.dtype}")
        return self - self.trunc()

    def remainder(self, other):
        """The remainder with the divisor's sign (Python's %), as torch's."""
        a, b = self._align(other, "remainder")
        if a.dtype.is_int:
            return functions.int_remainder(a, b)
        return functions.float_remainder(a, b)

    __mod__ = remainder

    def __rmod__(self, other):
        return self._lift(other).cast(self.dtype).remainder(self)

    def floor_divide(self, other):
        return self.div(other, rounding_mode="floor")

    __floordiv__ = floor_divide

    def __rfloordiv__(self, other):
        return self._lift(other).cast(self.dtype).floor_divide(self)

    def __rdiv__(self, other):
        return self.__rtruediv__(other)

    def rsub(self, other, alpha=1):
        return self._align(other, "rsub")[1] - self * alpha

    def copysign(self, other):
        a, b = self._align(other, "copysign")
        return functions.copysign(a._float(), b._float())

    def nextafter(self, other):
        a, b = self._align(other, "nextafter")
        if not a.dtype.is_float:
            raise TypeError(f"nextafter: needs float tensors, got {a.dtype}")
        return functions.nextafter(a, b)

    def signbit(self):
        if self.dtype.is_float:
            return functions.signbit(self)
        return self < 0

    def sgn(self):
        return self.sign()

    def fmax(self, other):
        """The larger, where a nan loses to a number (torch's fmax)."""
        a, b = self._align(other, "fmax")
        if not a.dtype.is_float:
            return a.maximum(b)
        return a.isnan().where(b, b.isnan().where(a, a.maximum(b)))

    def fmin(self, other):
        a, b = self._align(other, "fmin")
        if not a.dtype.is_float:
            return a.minimum(b)
        return a.isnan().where(b, b.isnan().where(a, a.minimum(b)))

    def logaddexp2(self, other):
        a, b = self._align(other, "logaddexp2")
        ln2 = math.log(2)
        return functions.logaddexp(a._float() * ln2, b._float() * ln2) / ln2

    def logical_not(self):
        return self.cast(dtypes.bool_).__invert__()

    def logical_and(self, other):
        a, b = self._align(other, "logical_and")
        return a.cast(dtypes.bool_) & b.cast(dtypes.bool_)

    def logical_or(self, other):
        a, b = self._align(other, "logical_or")
        return a.cast(dtypes.bool_) | b.cast(dtypes.bool_)

    def logical_xor(self, other):
        a, b = self._align(other, "logical_xor")
        return a.cast(dtypes.bool_) ^ b.cast(dtypes.bool_)

    def bitwise_left_shift(self, other):
        a, b = self._align(other, "bitwise_left_shift")
        if not a.dtype.is_int:
            raise TypeError(f"bitwise_left_shift: needs integer tensors, got {a.dtype}")
        return a.p_shl(b)

    def bitwise_right_shift(self, other):
        a, b = self._align(other, "bitwise_right_shift")
        if not a.dtype.is_int:
            raise TypeError(f"bitwise_right_shift: needs integer tensors, got {a.dtype}")
        return a.p_shr(b)

    __lshift__, __rshift__ = bitwise_left_shift, bitwise_right_shift

    def heaviside(self, values):
        a, b = self._align(values, "heaviside")
        if self.dtype != a.dtype:
            raise TypeError(f"heaviside: needs one dtype, got {self.dtype} and {values.dtype}")
        zero = a.zeros_like()
        return (a == 0).where(b, (a > 0).where(zero + 1, zero)).cast(a.dtype)

    def isclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
        if rtol < 0 or atol < 0:
            raise ValueError(f"isclose: rtol and atol must be >= 0, got {rtol} and {atol}")
        a, b = self._align(other, "isclose")
        if a.dtype == dtypes.bool_ or not a.dtype.is_float:
            return a == b
        close = (a == b) | ((a - b).abs() <= atol + rtol * b.abs())
        close = close & (a.isfinite() & b.isfinite()) | (a == b)
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def isposinf(self):
        return (self == math.inf) if self.dtype.is_float else self.zeros_like(dtypes.bool_)

    def isneginf(self):
        return (self == -math.inf) if self.dtype.is_float else self.zeros_like(dtypes.bool_)

    def isreal(self):
        return self.ones_like(dtypes.bool_)

    def sinc(self):
        """sin(pi x) / (pi x), 1 at 0."""
        x = self._float()
        px = x * math.pi
        return (x == 0).where(1.0, px.sin() / px).cast(x.dtype)

    def angle(self):
        x = self._float()
        return x.isnan().where(x, (x < 0).where(math.pi, 0.0).cast(x.dtype))

    def float_power(self, exponent):
        a, b = self._align(exponent, "float_power")
        return a.cast(dtypes.float64) ** b.cast(dtypes.float64)

    def xlogy(self, other):
        """x log y, 0 where x is 0 (unless y is nan)."""
        x, y = self._align(other, "xlogy")
        x, y = x._float(), y._float()
        return ((x == 0) & ~y.isnan()).where(0.0, x * y.log()).cast(x.dtype)

    def logit(self, eps: float | None = None):
        x = self._float()
        if eps is not None:
            x = x.clamp(eps, 1 - eps)
        return (x / (1 - x)).log()

    def erfc(self):
        return 1 - self._float().erf()

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf=None):
        if not self.dtype.is_float:
            return self
        big = float(ml_dtypes.finfo(dtypes.to_numpy(self.dtype)).max)
        x = self.isnan().where(nan, self)
        x = (x == math.inf).where(big if posinf is None else posinf, x)
        return (x == -math.inf).where(-big if neginf is None else neginf, x).cast(self.dtype)

    def addcmul(self, tensor1, tensor2, *, value=1):
        return self + value * tensor1 * tensor2

    def addcdiv(self, tensor1, tensor2, *, value=1):
        if tensor1.dtype.is_int and tensor2.dtype.is_int:
            raise TypeError("addcdiv: integer division of tensors is not supported, as in torch")
        return self + value * (tensor1 / tensor2)

    def ldexp(self, other):
        return self._float() * (2.0**other)

    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator=None):
        draw = self.uniform(self.shape, a, b, self.dtype, device=self.device)
        return write_result(self, "uniform_", lambda _: draw, cast=False)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None):
        if std < 0:
            raise ValueError(f"normal_: std must be >= 0, got {std}")
        draw = self.randn(self.shape, dtype=self.dtype, device=self.device) * std + mean
        return write_result(self, "normal_", lambda _: draw.cast(self.dtype), cast=False)

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, *, generator=None):
        """Cauchy draws: median + sigma tan(pi (u - 1/2)) for u uniform in [0, 1)."""
        if not sigma > 0:
            raise ValueError(f"cauchy_: sigma must be > 0, got {sigma}")
        return self._draw_by_inverse(
            "cauchy_", lambda u: median + sigma * ((u - 0.5) * math.pi).tan()
        )

    def exponential_(self, lambd: float = 1.0, *, generator=None):
        if not lambd > 0:
            raise ValueError(f"exponential_: lambd must be > 0, got {lambd}")
        return self._draw_by_inverse("exponential_", lambda u: -(1 - u).log() / lambd)

    def geometric_(self, p: float, *, generator=None):
        """The number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
        if not 0 < p < 1:
            raise ValueError(f"geometric_: p must be in (0, 1), got {p}")
        return self._draw_by_inverse(
            "geometric_", lambda u: ((1 - u).log() / math.log1p(-p)).ceil().clamp(min=1)
        )

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, *, generator=None):
        if not std > 0:
            raise ValueError(f"log_normal_: std must be > 0, got {std}")
        draw = self.randn(self.shape, dtype=dtypes.float64, device=self.device) * std + mean
        return write_result(self, "log_normal_", lambda _: draw.exp().cast(self.dtype), cast=False)

    def _draw_by_inverse(self, name: str, inverse_cdf):
        """The write of ``inverse_cdf`` of uniform draws, computed in float64."""
        u = self.uniform(self.shape, 0.0, 1.0, dtypes.float64, device=self.device)
        return write_result(self, name, lambda _: inverse_cdf(u).cast(self.dtype), cast=False)

    # ---- reductions -----------------------------------------------------------------

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

    def equal(self, other) -> bool:
        return self.shape == other.shape and bool((self == other).all().item())

    def diff(self, n: int = 1, axis: int = -1, prepend=None, append=None):
        if n < 0 or self.ndim == 0:
            raise ValueError(f"diff: needs n >= 0 and at least 1 dim, got n={n}, {self.shape}")
        axis = compose.normalize_axis(axis, self.ndim, "diff")
        x = self
        if n == 0:  # torch's: a copy of the input, prepend and append unused
            return x.clone()
        if prepend is not None or append is not None:
            parts = [t for t in (prepend, x, append) if t is not None]
            x = _cat([t if isinstance(t, TorchMoreMath) else self._lift(t) for t in parts], axis)
        for _ in range(n):
            m = x.shape[axis]
            if m == 0:
                break
            a, b = x.narrow(axis, 1, m - 1), x.narrow(axis, 0, m - 1)
            x = a ^ b if x.dtype == dtypes.bool_ else a - b
        return x.clone() if x is self else x  # (n = 0: a copy, as torch's)

    def trace(self):
        if self.ndim != 2:
            raise ValueError(f"trace: needs a matrix, got shape {self.shape}")
        return self.diagonal().sum()

    # ---- products -------------------------------------------------------------------

    def mm(self, mat2):
        if self.ndim != 2 or mat2.ndim != 2:
            raise ValueError(f"mm: needs two matrices, got {self.shape} and {mat2.shape}")
        return self.matmul(mat2)

    def bmm(self, mat2):
        if self.ndim != 3 or mat2.ndim != 3 or self.shape[0] != mat2.shape[0]:
            raise ValueError(
                f"bmm: needs (b, n, m) and (b, m, p), got {self.shape} and {mat2.shape}"
            )
        return self.matmul(mat2)

    def mv(self, vec):
        if self.ndim != 2 or vec.ndim != 1:
            raise ValueError(f"mv: needs a matrix and a vector, got {self.shape} and {vec.shape}")
        return self.matmul(vec)

    def vdot(self, other):
        return self.dot(other)

    def outer(self, vec2):
        if self.ndim != 1 or vec2.ndim != 1:
            raise ValueError(f"outer: needs two vectors, got {self.shape} and {vec2.shape}")
        return self.reshape(-1, 1) * vec2.reshape(1, -1)

    ger = outer

    def inner(self, other):
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        return _inner(self, other)

    def _add_scaled(self, product, beta, alpha):
        if product.dtype.is_int:  # torch takes integer scales for integer tensors
            beta, alpha = int(beta), int(alpha)
        out = product if alpha == 1 else product * alpha
        if beta == 0:  # self is not read, so a nan in it does not show, as in torch
            return out + self.zeros_like()
        return (self if beta == 1 else self * beta) + out

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return self._add_scaled(mat1.mm(mat2), beta, alpha)

    def addmv(self, mat, vec, *, beta=1, alpha=1):
        return self._add_scaled(mat.mv(vec), beta, alpha)

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        if self.dtype == vec1.dtype == vec2.dtype == dtypes.bool_:  # torch's: logical
            outer = vec1.unsqueeze(-1) & vec2.unsqueeze(0)
            kept = self & bool(beta) if beta else self.zeros_like()
            return (kept | (outer & bool(alpha))).expand(*outer.shape).contiguous()
        return self._add_scaled(vec1.outer(vec2), beta, alpha)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return self._add_scaled(batch1.bmm(batch2), beta, alpha)

    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return self._add_scaled(batch1.bmm(batch2).sum(0), beta, alpha)

    def kron(self, other):
        n = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + self.shape)
        b = other.reshape((1,) * (n - other.ndim) + other.shape)
        prod = a.reshape(*[v for s in a.shape for v in (s, 1)]) * b.reshape(
            *[v for s in b.shape for v in (1, s)]
        )
        return prod.reshape(*[x * y for x, y in zip(a.shape, b.shape)])


def _cat(ts, axis):
    """``limn.tensor.cat`` of parts already checked for shape (that module imports this one)."""
    d = ts[0].dtype
    for t in ts[1:]:
        d = dtypes.promote(d, t.dtype)
    return compose.cat([t.p_cast(d) for t in ts], compose.normalize_axis(axis, ts[0].ndim, "cat"))


def _inner(a, b):
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inner: last dims differ: {a.shape} and {b.shape}")
    out = a.reshape(*a.shape[:-1], *[1] * (b.ndim - 1), a.shape[-1]) * b
    return out.sum(-1)


for _name in "prod cumprod nansum nanmean count_nonzero var_mean std_mean".split():
    setattr(TorchMoreMath, _name, scalar_dims(getattr(TorchMoreMath, _name)))
accept_torch_names(TorchMoreMath)
