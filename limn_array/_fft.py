"""The ``fft`` extension: numpy's transforms on host devices, composed elsewhere.

On a host device (numpy, c) each transform is one CUSTOM node, run by ``numpy.fft``
(pocketfft: O(n log n) for every length, in float64, complex64 and float32 rounded once at
the end), as the factorizations are run by LAPACK (``_linalg.py``): one numpy call, where
the composition is hundreds of nodes, and one node whatever the length, so code that
transforms at many sizes builds no new kernel per size. A device without a host (cuda)
gets the composition below, spelled in primitives; the tests hold it to numpy's transforms
on the numpy device.

A composed transform along one axis works on (re, im) pairs of real tensors:

* length 2**k: the inputs are put in bit-reversed order (one GATHER whose indices are
  integer bit arithmetic on an arange), then k butterfly stages, each one set of views
  and multiply-adds over the whole axis: O(n log n) work in log2(n) fused passes;
* any other length n: Bluestein's identity jk = (j**2 + k**2 - (k-j)**2) / 2 turns the
  transform into a convolution with the chirp e**(i pi m**2 / n), done by power-of-two
  transforms of length >= 2n - 1, so still O(n log n).

Twiddles and chirps are sines and cosines (``ir/graph/functions.py``) of angles formed
exactly: pi * j / h with h a power of two, and pi * (m**2 mod 2n) / n with the square
taken in int64, so no angle error grows with n. complex64 computes in float64 and rounds
once. Errors are those of a textbook FFT: O(eps log n) relative to the largest term.
"""

from __future__ import annotations

import math

import numpy as np

from ir.graph import compose, dtypes, functions
from limn_array import _complex as complex_math
from limn_array._array import Array, on_host, parts, wrap, wrap_complex
from limn_array._creation import asarray
from limn_array._data_types import check_dtype, standard_dtype
from limn_array._elementwise import conj
from limn_array._linalg import KERNELS, _custom, _kernel
from limn_array._manipulation import roll
from limn_array._policy import complex_dtype, real_dtype

F64, I64 = dtypes.float64, dtypes.int64


# ---- one axis, last position -----------------------------------------------------------------


def _bit_reverse(t, n: int):
    bits = n.bit_length() - 1
    i = compose.arange(t, n, I64)
    r = i.p_const(0)
    for b in range(bits):
        bit = i.p_shr(i.p_const(b)).p_and(i.p_const(1))
        r = r.p_or(bit.p_shl(i.p_const(bits - 1 - b)))
    return r


def _gather_last(t, idx):
    lead = tuple(t.shape[:-1])
    n = idx.shape[0]
    full = compose.expand_to(idx, lead + (n,))
    return t.p_gather(full, len(lead))


def _stack_halves(first, second, lead, blocks: int, h: int):
    """Join [..., blocks, h] halves as [..., blocks, 2, h], flattened to [..., 2 h blocks]."""
    nl = len(lead)
    pa = ((0, 0),) * (nl + 1) + ((0, 1), (0, 0))
    pb = ((0, 0),) * (nl + 1) + ((1, 0), (0, 0))
    shape = lead + (blocks, 1, h)
    top = first.p_const(True, shape=shape, dtype=dtypes.bool_).p_pad(pa)
    joined = top.p_where(first.p_reshape(shape).p_pad(pa), second.p_reshape(shape).p_pad(pb))
    return joined.p_reshape(lead + (blocks * 2 * h,))


def _radix2(z, inverse: bool):
    re, im = z
    n = re.shape[-1]
    lead = tuple(re.shape[:-1])
    rev = _bit_reverse(re, n)
    re, im = _gather_last(re, rev), _gather_last(im, rev)
    h = 1
    while h < n:
        blocks = n // (2 * h)
        split = lead + (blocks, 2, h)

        def half(t, which, split=split, blocks=blocks, h=h):
            box = tuple((0, s) for s in lead) + ((0, blocks), (which, which + 1), (0, h))
            return t.p_reshape(split).p_shrink(box).p_reshape(lead + (blocks, h))

        er, ei = half(re, 0), half(im, 0)
        orr, oi = half(re, 1), half(im, 1)
        j = compose.arange(re, h, I64).p_cast(re.dtype)
        angle = j.p_mul(j.p_const(math.pi / h))  # exact ratio j/h, one rounding
        s, c = functions.sincos(angle)
        if not inverse:
            s = s.p_neg()  # the forward transform turns by e**(-i angle)
        wr = compose.expand_to(c, lead + (blocks, h))
        wi = compose.expand_to(s, lead + (blocks, h))
        tr, ti = complex_math.mul((orr, oi), (wr, wi))
        re = _stack_halves(er.p_add(tr), compose.sub(er, tr), lead, blocks, h)
        im = _stack_halves(ei.p_add(ti), compose.sub(ei, ti), lead, blocks, h)
        h *= 2
    return re, im


def _chirp(t, n: int, count: int, sign: float):
    """e**(sign i pi m**2 / n) for m = 0 .. count-1, the square reduced mod 2n in int64."""
    m = compose.arange(t, count, I64)
    sq = m.p_mul(m).p_mod(m.p_const(2 * n))
    angle = sq.p_cast(F64).p_mul(sq.p_const(math.pi / n, dtype=F64))
    s, c = functions.sincos(angle)
    return c, s.p_mul(s.p_const(sign))


def _bluestein(z, inverse: bool):
    re, im = z
    n = re.shape[-1]
    lead = tuple(re.shape[:-1])
    size = 1
    while size < 2 * n - 1:
        size *= 2
    sign = 1.0 if inverse else -1.0
    cr, ci = _chirp(re, n, n, sign)  # e**(sign i pi j**2 / n)
    a = complex_math.mul(
        (re, im), (compose.expand_to(cr, re.shape), compose.expand_to(ci, re.shape))
    )
    pads = ((0, 0),) * len(lead) + ((0, size - n),)
    a = (a[0].p_pad(pads), a[1].p_pad(pads))
    # b[m] = conj(chirp)[m] for |m| < n, laid out circularly: m at m, -m at size - m
    br, bi = _chirp(re, n, n, -sign)
    tail = ((0, size - n),)
    head_r, head_i = br.p_pad(tail), bi.p_pad(tail)
    back = compose.arange(re, size, I64)
    back = back.p_const(size).p_add(back.p_neg())  # size - m
    mirror = compose.logical_and(
        back.p_cmplt(back.p_const(n)), compose.ne(back, back.p_const(size))
    )
    src = compose.clamp(back, back.p_const(0), back.p_const(n - 1))
    rr = mirror.p_where(br.p_gather(src, 0), head_r)
    ri = mirror.p_where(bi.p_gather(src, 0), head_i)
    b = (compose.expand_to(rr, lead + (size,)), compose.expand_to(ri, lead + (size,)))
    fa, fb = _radix2(a, False), _radix2(b, False)
    conv = _radix2(complex_math.mul(fa, fb), True)
    scale = conv[0].p_const(1 / size)
    box = tuple((0, s) for s in lead) + ((0, n),)
    c = (conv[0].p_mul(scale).p_shrink(box), conv[1].p_mul(scale).p_shrink(box))
    return complex_math.mul(c, (compose.expand_to(cr, re.shape), compose.expand_to(ci, re.shape)))


def _transform_last(z, inverse: bool):
    n = z[0].shape[-1]
    if n <= 1:
        return z
    if n & (n - 1) == 0:
        return _radix2(z, inverse)
    return _bluestein(z, inverse)


# ---- the standard's surface ------------------------------------------------------------------


def _scale(norm: str, n: int, inverse: bool) -> float:
    if norm == "backward":
        return 1 / n if inverse else 1.0
    if norm == "ortho":
        return 1 / math.sqrt(n)
    if norm == "forward":
        return 1.0 if inverse else 1 / n
    raise ValueError(f"fft: norm must be 'backward', 'ortho' or 'forward', got {norm!r}")


def _resize(z, axis: int, n: int):
    """Truncate or zero-pad both parts along ``axis`` to length n."""
    m = z[0].shape[axis]
    if n == m:
        return z
    if n < m:
        box = [(0, s) for s in z[0].shape]
        box[axis] = (0, n)
        return tuple(t.p_shrink(tuple(box)) for t in z)
    pads = [(0, 0)] * len(z[0].shape)
    pads[axis] = (0, n - m)
    return tuple(t.p_pad(tuple(pads)) for t in z)


def _along(z, axis: int, inverse: bool, norm: str):
    nd = len(z[0].shape)
    moved = tuple(compose.movedim(t, axis, -1) for t in z) if axis != nd - 1 else z
    n = moved[0].shape[-1]
    out = _transform_last(moved, inverse)
    k = _scale(norm, n, inverse)
    if k != 1.0:
        out = (out[0].p_mul(out[0].p_const(k)), out[1].p_mul(out[1].p_const(k)))
    return tuple(compose.movedim(t, -1, axis) for t in out) if axis != nd - 1 else out


def _wide_parts(x: Array, op: str):
    """(re, im) in float64 and the complex dtype the result is rounded to."""
    check_dtype(x, "floating-point", op)
    out = x.dtype if x.dtype.is_complex else complex_dtype(x.dtype)
    re, im = parts(x)
    return (re.p_cast(F64), im.p_cast(F64)), out


def _finish(z, d) -> Array:
    r = real_dtype(d)
    return wrap_complex(z[0].p_cast(r), z[1].p_cast(r))


def _axis_n(x: Array, n, axis: int, op: str):
    if x.ndim == 0:
        raise ValueError(f"{op}: needs at least a 1-d array")
    axis = compose.normalize_axis(axis, x.ndim, op)
    n = x.shape[axis] if n is None else compose.as_int(n, "n", op)
    if n < 1:
        raise ValueError(f"{op}: n must be at least 1, got {n}")
    return axis, n


def _numpy(op: str, x: Array, d, sizes: dict, **kw) -> Array:
    """``numpy.fft.<op>`` as one CUSTOM node of dtype ``d``, its output shape ``x``'s with
    ``sizes`` (axis -> length) put in."""
    shape = list(x.shape)
    for a, length in sizes.items():
        shape[a] = length
    return _custom("fft." + op, [x], [(d, tuple(shape))], op=op, **kw)[0]


def _run(a, op: str, **kw):
    """A transform in float64 (complex128), rounded to the node's dtype by the caller."""
    a = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64, copy=False)
    return getattr(np.fft, op)(a, **kw)


def _check_norm(norm: str, op: str) -> None:
    if norm not in ("backward", "ortho", "forward"):
        raise ValueError(f"{op}: norm must be 'backward', 'ortho' or 'forward', got {norm!r}")


def _c2c(x: Array, n, axis: int, norm: str, inverse: bool, op: str) -> Array:
    axis, n = _axis_n(x, n, axis, op)
    z, d = _wide_parts(x, op)
    if on_host(x):
        _check_norm(norm, op)
        return _numpy(op, x, d, {axis: n}, n=n, axis=axis, norm=norm)
    return _finish(_along(_resize(z, axis, n), axis, inverse, norm), d)


def fft(x: Array, /, *, n=None, axis: int = -1, norm: str = "backward") -> Array:
    return _c2c(x, n, axis, norm, False, "fft")


def ifft(x: Array, /, *, n=None, axis: int = -1, norm: str = "backward") -> Array:
    return _c2c(x, n, axis, norm, True, "ifft")


def _s_axes(x: Array, s, axes, op: str):
    s = None if s is None else compose.as_ints(s, "s", op)
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    axes = tuple(compose.normalize_axis(a, x.ndim, op) for a in compose.as_ints(axes, "axes", op))
    s = tuple(x.shape[a] for a in axes) if s is None else s
    if len(s) != len(axes):
        raise ValueError(f"{op}: s and axes must have the same length")
    s = tuple(x.shape[a] if v == -1 else v for v, a in zip(s, axes))
    return s, axes


def _c2c_n(x: Array, s, axes, norm: str, inverse: bool, op: str) -> Array:
    s, axes = _s_axes(x, s, axes, op)
    z, d = _wide_parts(x, op)
    if on_host(x) and axes:
        _check_norm(norm, op)
        return _numpy(op, x, d, dict(zip(axes, s)), s=s, axes=axes, norm=norm)
    for n, a in zip(s, axes):
        z = _along(_resize(z, a, n), a, inverse, norm)
    return _finish(z, d)


def fftn(x: Array, /, *, s=None, axes=None, norm: str = "backward") -> Array:
    return _c2c_n(x, s, axes, norm, False, "fftn")


def ifftn(x: Array, /, *, s=None, axes=None, norm: str = "backward") -> Array:
    return _c2c_n(x, s, axes, norm, True, "ifftn")


def _keep(z, axis: int, m: int):
    box = [(0, v) for v in z[0].shape]
    box[axis] = (0, m)
    return tuple(t.p_shrink(tuple(box)) for t in z)


def rfft(x: Array, /, *, n=None, axis: int = -1, norm: str = "backward") -> Array:
    check_dtype(x, "real floating-point", "rfft")
    axis, n = _axis_n(x, n, axis, "rfft")
    z, d = _wide_parts(x, "rfft")
    if on_host(x):
        _check_norm(norm, "rfft")
        return _numpy("rfft", x, d, {axis: n // 2 + 1}, n=n, axis=axis, norm=norm)
    z = _along(_resize(z, axis, n), axis, False, norm)
    return _finish(_keep(z, axis, n // 2 + 1), d)


def _hermitian(z, axis: int, n: int):
    """The full length-n spectrum from its first n//2 + 1 terms: X[n-k] = conj(X[k])."""
    z = _resize(z, axis, n // 2 + 1)
    m = z[0].shape[axis]
    count = n - m  # the mirrored terms, k = n - m .. 1 read from X[m - 1 + ...]
    if count <= 0:
        return _keep(z, axis, n)
    idx = compose.arange(z[0], count, I64)
    src = idx.p_const(n - m).p_add(idx.p_neg())  # n - k for the k-th mirrored position
    src = compose.clamp(src, src.p_const(0), src.p_const(m - 1))
    shape = list(z[0].shape)
    shape[axis] = count
    view = [1] * len(shape)
    view[axis] = count
    full = compose.expand_to(src.p_reshape(tuple(view)), tuple(shape))
    mr = z[0].p_gather(full, axis)
    mi = z[1].p_gather(full, axis).p_neg()
    return (compose.cat([z[0], mr], axis), compose.cat([z[1], mi], axis))


def irfft(x: Array, /, *, n=None, axis: int = -1, norm: str = "backward") -> Array:
    if x.ndim == 0:
        raise ValueError("irfft: needs at least a 1-d array")
    axis = compose.normalize_axis(axis, x.ndim, "irfft")
    n = 2 * (x.shape[axis] - 1) if n is None else compose.as_int(n, "n", "irfft")
    if n < 1:
        raise ValueError(f"irfft: n must be at least 1, got {n}")
    z, d = _wide_parts(x, "irfft")
    if on_host(x):
        _check_norm(norm, "irfft")
        return _numpy("irfft", x, real_dtype(d), {axis: n}, n=n, axis=axis, norm=norm)
    z = _along(_hermitian(z, axis, n), axis, True, norm)
    return wrap(z[0].p_cast(real_dtype(d)))


def rfftn(x: Array, /, *, s=None, axes=None, norm: str = "backward") -> Array:
    check_dtype(x, "real floating-point", "rfftn")
    s, axes = _s_axes(x, s, axes, "rfftn")
    z, d = _wide_parts(x, "rfftn")
    last, n_last = axes[-1], s[-1]
    if on_host(x):
        _check_norm(norm, "rfftn")
        sizes = {**dict(zip(axes, s)), last: n_last // 2 + 1}
        return _numpy("rfftn", x, d, sizes, s=s, axes=axes, norm=norm)
    z = _along(_resize(z, last, n_last), last, False, norm)
    z = _keep(z, last, n_last // 2 + 1)
    for n, a in zip(s[:-1], axes[:-1]):
        z = _along(_resize(z, a, n), a, False, norm)
    return _finish(z, d)


def irfftn(x: Array, /, *, s=None, axes=None, norm: str = "backward") -> Array:
    if axes is None and s is None:
        axes = tuple(range(x.ndim))
    if axes is None:
        axes = tuple(range(x.ndim - len(s), x.ndim))
    axes = tuple(compose.normalize_axis(a, x.ndim, "irfftn") for a in axes)
    if s is None:
        s = tuple(x.shape[a] for a in axes[:-1]) + (2 * (x.shape[axes[-1]] - 1),)
    s = tuple(int(v) for v in s)
    z, d = _wide_parts(x, "irfftn")
    if on_host(x):
        _check_norm(norm, "irfftn")
        return _numpy("irfftn", x, real_dtype(d), dict(zip(axes, s)), s=s, axes=axes, norm=norm)
    for n, a in zip(s[:-1], axes[:-1]):
        z = _along(_resize(z, a, n), a, True, norm)
    z = _along(_hermitian(z, axes[-1], s[-1]), axes[-1], True, norm)
    return wrap(z[0].p_cast(real_dtype(d)))


_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def hfft(x: Array, /, *, n=None, axis: int = -1, norm: str = "backward") -> Array:
    """The transform of a Hermitian-symmetric signal: irfft(conj(x)) with norm swapped."""
    if norm not in _SWAP:
        raise ValueError(f"hfft: norm must be one of {list(_SWAP)}, got {norm!r}")
    return irfft(conj(x), n=n, axis=axis, norm=_SWAP[norm])


def ihfft(x: Array, /, *, n=None, axis: int = -1, norm: str = "backward") -> Array:
    if norm not in _SWAP:
        raise ValueError(f"ihfft: norm must be one of {list(_SWAP)}, got {norm!r}")
    return conj(rfft(x, n=n, axis=axis, norm=_SWAP[norm]))


def _freq(values, n: int, d: float, dtype, device) -> Array:
    out = standard_dtype(dtype, "fftfreq") if dtype is not None else F64
    if not out.is_float:
        raise TypeError(f"fftfreq: needs a real floating dtype, got {out}")
    v = asarray(0.0, dtype=F64, device=device)._t  # the device anchor
    t = values(v)
    return wrap(t.p_cast(F64).p_mul(t.p_const(1.0 / (d * n), dtype=F64)).p_cast(out))


def fftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> Array:
    """[0, 1, ..., (n-1)//2, -(n//2), ..., -1] / (d n)."""
    n = compose.as_int(n, "n", "fftfreq")

    def values(anchor):
        i = compose.arange(anchor, n, I64)
        half = (n - 1) // 2 + 1
        return i.p_const(half).p_cmplt(i.p_add(i.p_const(1))).p_where(i.p_add(i.p_const(-n)), i)

    return _freq(values, n, d, dtype, device)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> Array:
    n = compose.as_int(n, "n", "rfftfreq")
    return _freq(lambda a: compose.arange(a, n // 2 + 1, I64), n, d, dtype, device)


def _shift(x: Array, axes, sign: int) -> Array:
    op = "fftshift" if sign > 0 else "ifftshift"
    axes = tuple(range(x.ndim)) if axes is None else compose.int_or_ints(axes, "axes", op)
    shifts = tuple(sign * (x.shape[a] // 2) for a in axes)
    return roll(x, shifts, axis=axes)


def fftshift(x: Array, /, *, axes=None) -> Array:
    return _shift(x, axes, 1)


def ifftshift(x: Array, /, *, axes=None) -> Array:
    return _shift(x, axes, -1)


for _op in ("fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn"):
    KERNELS["fft." + _op] = _kernel("fft." + _op, _run)
