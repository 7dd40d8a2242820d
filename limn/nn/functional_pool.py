"""torch.nn.functional's padding modes and pooling, in torch's full signatures.

``pad`` reflects, replicates or wraps by slicing and concatenating the input; pooling
reads windows of the padded input as views (``limn/nn/conv.py``'s ``_unfold``) and
reduces them, with torch's output sizes (``ceil_mode``), dilation, its count of padding in
a mean (``count_include_pad``, ``divisor_override``) and the flat indices of a maximum
(``return_indices``). Adaptive pooling picks torch's windows, floor(i L / o) to
ceil((i + 1) L / o): a mean is a product with the averaging matrix, a maximum a gather of
each window padded with its own last element.
"""

from __future__ import annotations

import math

import numpy as np

from ir.graph import dtypes
from limn.nn.conv import _unfold
from limn.ops.movement import copy_of
from limn.tensor import Tensor


def _ints(v, n: int, name: str, op: str) -> tuple[int, ...]:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) == 1 and n > 1:
        t = t * n
    if len(t) != n or any(not isinstance(i, int) for i in t):
        raise ValueError(f"{op}: {name} must be an int or {n} ints, got {v!r}")
    return t


# ---- pad ------------------------------------------------------------------------------


def pad(x: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """torch's order: (before, after) of the last dim first, then the one before it, ...;
    a negative count crops. "reflect", "replicate" and "circular" pad the last 1 to 3 dims
    of a batched or unbatched input."""
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: needs (before, after) pairs for at most {x.ndim} dims, got {pad}")
    pairs = [(pad[i], pad[i + 1]) for i in range(len(pad) - 2, -1, -2)]
    if mode == "constant":  # a copy, as torch's, even with no pad
        return copy_of(x.pad(pairs, 0.0 if value is None else value), x)
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(
            f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}"
        )
    k = len(pairs)
    if not 1 <= k <= 3 or x.ndim not in (k + 1, k + 2):
        raise ValueError(
            f"pad: mode {mode!r} with {len(pad)} pads needs a {k + 1}-d or {k + 2}-d input, "
            f"got shape {x.shape}"
        )
    for i, (b, a) in enumerate(pairs):
        d = x.ndim - k + i
        x = _pad_dim(x, d, b, a, mode)
    return x


def _pad_dim(x: Tensor, d: int, b: int, a: int, mode: str) -> Tensor:
    """Output position j along ``d`` reads input position j - b, brought inside by the
    mode (mirrored, clamped or wrapped): one gather of the rows it names."""
    n = x.shape[d]
    if mode == "reflect" and (b >= n or a >= n) or mode == "circular" and (b > n or a > n):
        raise ValueError(
            f"pad: {mode} pads ({b}, {a}) must be smaller than dim {d} of size {n}"
            + ("" if mode == "reflect" else " (or equal)")
        )
    if n + b + a < 0 or n == 0 and b + a > 0:
        raise ValueError(f"pad: {mode} pads ({b}, {a}) do not fit dim {d} of size {n}")
    if mode == "circular" and min(b, a) < 0:  # torch's: crop first, then wrap what is left
        lo, m = max(-b, 0), n - max(-b, 0) - max(-a, 0)
        b, a = max(b, 0), max(a, 0)
        rows = [lo + (j - b) % m for j in range(m + b + a)] if m > 0 else []
        return x.index_select(d, Tensor(rows, dtype=dtypes.int64, device=x.device))
    rows = []
    for j in range(n + b + a):
        i = j - b
        if mode == "reflect":
            i = -i if i < 0 else 2 * (n - 1) - i if i > n - 1 else i
        elif mode == "replicate":
            i = min(max(i, 0), n - 1)
        else:
            i %= n
        rows.append(i)
    return x.index_select(d, Tensor(rows, dtype=dtypes.int64, device=x.device))


# ---- pooling --------------------------------------------------------------------------


def _windows(x, kernel, stride, padding, dilation, ceil_mode, fill, op):
    """The windows of (N, C, *L) padded as torch pads them, (N*C, 1, *o, *k), and how the
    padded input was made (for a mask or an index of the same shape)."""
    n = len(kernel)
    if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ValueError(
            f"{op}: kernel {kernel}, stride {stride} and dilation {dilation} must be >= 1 and "
            f"padding {padding} >= 0"
        )
    if any(p > (d * (k - 1) + 1) // 2 for p, k, d in zip(padding, kernel, dilation)):
        raise ValueError(f"{op}: padding {padding} must be at most half of kernel {kernel}")
    size = x.shape[-n:]
    outs = []
    for L, k, s, p, d in zip(size, kernel, stride, padding, dilation):
        span = L + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= L + p:
            o -= 1
        if o < 1:
            raise ValueError(f"{op}: input {tuple(size)} is too small for kernel {kernel}")
        outs.append(o)
    pads = [(p, (o - 1) * s + d * (k - 1) + 1 - L - p)
            for L, k, s, p, d, o in zip(size, kernel, stride, padding, dilation, outs)]  # fmt: skip
    flat = x.reshape(-1, 1, *size)
    padded = flat.pad(pads, fill)
    cols = _unfold(padded.clone(), kernel, stride, dilation)
    return cols, pads, tuple(outs)


def _batched(x: Tensor, n: int, op: str) -> None:
    """(C, *n sizes) or (N, C, *n sizes): only the batch may be empty, as torch's."""
    if x.ndim not in (n + 1, n + 2) or 0 in x.shape[-(n + 1) :]:
        raise ValueError(
            f"{op}: needs a {n + 1}-d or {n + 2}-d input, empty in the batch dim only, got "
            f"shape {x.shape}"
        )


def _max_pool(x, n, kernel_size, stride, padding, dilation, ceil_mode, return_indices, op):
    _batched(x, n, op)
    kernel = _ints(kernel_size, n, "kernel_size", op)
    stride = _ints(kernel if stride is None or stride in ([], ()) else stride, n, "stride", op)
    if min(stride) < 1:
        raise ValueError(f"{op}: stride must be greater than zero, got {stride}")
    padding, dilation = _ints(padding, n, "padding", op), _ints(dilation, n, "dilation", op)
    lowest = -math.inf if x.dtype.is_float else dtypes.min_value(x.dtype)
    cols, pads, outs = _windows(x, kernel, stride, padding, dilation, ceil_mode, lowest, op)
    k = math.prod(kernel)
    win = cols.reshape(*cols.shape[: 2 + n], k)
    values = win.amax(-1).reshape(*x.shape[:-n], *outs)
    if not return_indices:
        return values
    size = x.shape[-n:]
    pos = Tensor.arange(math.prod(size), device=x.device).reshape(1, 1, *size)
    pos_cols = _unfold(pos.pad(pads, -1).clone(), kernel, stride, dilation)
    pos_win = pos_cols.reshape(1, 1, *outs, k).expand(*win.shape)
    best = win.argmax(-1, keepdim=True)
    idx = pos_win.gather(-1, best).reshape(*x.shape[:-n], *outs)
    return values, idx


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):  # fmt: skip
    return _max_pool(x, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices,
                     "max_pool1d")  # fmt: skip


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):  # fmt: skip
    return _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices,
                     "max_pool2d")  # fmt: skip


def _avg_pool(x, n, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor, op):
    _batched(x, n, op)
    if x.dtype == dtypes.bool_:
        raise TypeError(f"{op}: needs a number tensor, got {x.dtype}")
    if divisor is not None and divisor == 0:
        raise ValueError(f"{op}: divisor_override must not be zero")
    kernel = _ints(kernel_size, n, "kernel_size", op)
    stride = _ints(stride if stride else kernel, n, "stride", op)
    padding = _ints(padding, n, "padding", op)
    ones = (1,) * n
    cols, pads, outs = _windows(x, kernel, stride, padding, ones, ceil_mode, 0.0, op)
    axes = tuple(range(2 + n, 2 + 2 * n))
    total = cols.sum(axes)
    if divisor is not None:
        out = total.div(divisor, rounding_mode="trunc" if x.dtype.is_int else None)
    else:
        size = x.shape[-n:]
        inside = Tensor.ones(1, 1, *size, dtype=total.dtype, device=x.device)
        if count_include_pad:  # the pad counts, not the overhang ceil_mode adds
            inside = inside.pad([(p, p) for p in padding], 1.0)
            mask_pads = [(0, a - p) for (_, a), p in zip(pads, padding)]
        else:
            mask_pads = pads
        count = _unfold(inside.pad(mask_pads).clone(), kernel, stride, ones).sum(axes)
        out = total.div(count, rounding_mode="trunc" if x.dtype.is_int else None)
    return out.reshape(*x.shape[:-n], *outs)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None,
                     "avg_pool1d")  # fmt: skip


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):  # fmt: skip
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, "avg_pool2d")  # fmt: skip


# ---- adaptive pooling -----------------------------------------------------------------


def _bounds(L: int, o: int) -> list[tuple[int, int]]:
    return [(i * L // o, -(-(i + 1) * L // o)) for i in range(o)]


def _adaptive(x, n, output_size, op):
    _batched(x, n, op)
    size = x.shape[-n:]
    outs = tuple(s if o is None else o for s, o in zip(size, _sizes(output_size, n, op)))
    if any(s == 0 for s in size) or any(o < 0 for o in outs):
        raise ValueError(f"{op}: input {x.shape} and output {outs} must be non-empty")
    return size, outs


def _sizes(output_size, n, op):
    t = (
        (output_size,) * n
        if isinstance(output_size, int) or output_size is None
        else tuple(output_size)
    )
    if len(t) != n:
        raise ValueError(f"{op}: output_size must be an int or {n} sizes, got {output_size!r}")
    return t


def _adaptive_avg(x, n, output_size, op):
    size, outs = _adaptive(x, n, output_size, op)
    if not x.dtype.is_float:
        raise TypeError(f"{op}: needs a float tensor, got {x.dtype}")
    for i, (L, o) in enumerate(zip(size, outs)):
        d = x.ndim - n + i
        if L % o == 0:  # equal windows: the mean of each
            k = L // o
            x = x.unflatten(d, (o, k)).mean(d + 1)
            continue
        rows = [[1 / (b - a) if a <= j < b else 0.0 for j in range(L)] for a, b in _bounds(L, o)]
        avg = Tensor(rows, dtype=x.dtype, device=x.device)  # (o, L)
        x = (x.movedim(d, -1) @ avg.T).movedim(-1, d)
    return x


def adaptive_avg_pool1d(x, output_size):
    return _adaptive_avg(x, 1, output_size, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(x, output_size):
    return _adaptive_avg(x, 2, output_size, "adaptive_avg_pool2d")


def _adaptive_max(x, n, output_size, return_indices, op):
    size, outs = _adaptive(x, n, output_size, op)
    lead = x.shape[:-n]
    pos = Tensor.arange(math.prod(size), device=x.device).reshape(*size)
    for i, (L, o) in enumerate(zip(size, outs)):
        d = len(lead) + i  # each window's dim goes last, so the spatial dims stay here
        spans = _bounds(L, o)
        w = max(b - a for a, b in spans)
        idx = Tensor([[min(a + t, b - 1) for t in range(w)] for a, b in spans], device=x.device)
        x = x.index_select(d, idx.reshape(-1)).unflatten(d, (o, w)).movedim(d + 1, -1)
        pos = pos.index_select(i, idx.reshape(-1)).unflatten(i, (o, w)).movedim(i + 1, -1)
    win = x.reshape(*lead, *outs, -1)
    values = win.amax(-1)
    if not return_indices:
        return values
    best = win.argmax(-1, keepdim=True)
    flat = pos.reshape(*outs, -1).expand(*win.shape)
    return values, flat.gather(-1, best).squeeze(-1)


def adaptive_max_pool1d(x, output_size, return_indices=False):
    return _adaptive_max(x, 1, output_size, return_indices, "adaptive_max_pool1d")


def adaptive_max_pool2d(x, output_size, return_indices=False):
    return _adaptive_max(x, 2, output_size, return_indices, "adaptive_max_pool2d")


# ---- the same over three spatial dims --------------------------------------------------


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):  # fmt: skip
    return _max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices,
                     "max_pool3d")  # fmt: skip


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):  # fmt: skip
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, "avg_pool3d")  # fmt: skip


def adaptive_avg_pool3d(x, output_size):
    return _adaptive_avg(x, 3, output_size, "adaptive_avg_pool3d")


def adaptive_max_pool3d(x, output_size, return_indices=False):
    return _adaptive_max(x, 3, output_size, return_indices, "adaptive_max_pool3d")


# ---- unfold: the windows themselves -----------------------------------------------------


def unfold(input, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch's im2col: (N, C, H, W) (or (C, H, W)) -> (N, C * kh * kw, L), each column one
    window of the zero-padded input, the L windows in row-major order."""
    op = "unfold"
    if input.ndim not in (3, 4) or 0 in input.shape[-3:]:
        raise ValueError(
            f"{op}: needs a 3-d or 4-d input with non-empty (C, H, W), got {input.shape}"
        )
    x = input if input.ndim == 4 else input.unsqueeze(0)
    kernel = _ints(kernel_size, 2, "kernel_size", op)
    dilation, stride = _ints(dilation, 2, "dilation", op), _ints(stride, 2, "stride", op)
    padding = _ints(padding, 2, "padding", op)
    if min(kernel) < 1 or min(dilation) < 1 or min(stride) < 1 or min(padding) < 0:
        raise ValueError(f"{op}: kernel, dilation and stride must be >= 1 and padding >= 0")
    padded = x.pad(tuple((p, p) for p in padding)).contiguous()
    if any(s < d * (k - 1) + 1 for s, d, k in zip(padded.shape[-2:], dilation, kernel)):
        raise ValueError(f"{op}: the kernel {kernel} does not fit the padded input {padded.shape}")
    cols = _unfold(padded, kernel, stride, dilation)  # (N, C, oh, ow, kh, kw)
    n, c, oh, ow = cols.shape[:4]
    out = cols.permute(0, 1, 4, 5, 2, 3).reshape(n, c * kernel[0] * kernel[1], oh * ow)
    return out if input.ndim == 4 else out[0]


# ---- unpooling ------------------------------------------------------------------------


def _max_unpool(x, indices, n, kernel_size, stride, padding, output_size, op):
    """max_pool undone: each value written at its flat index within its (sample, channel)
    plane of the output, zeros elsewhere (of torch's size, or ``output_size``). An index
    named twice (torch keeps one write, unspecified which) keeps the larger value."""
    if x.ndim not in (n + 1, n + 2) or tuple(indices.shape) != tuple(x.shape):
        raise ValueError(
            f"{op}: needs a {n + 1}-d or {n + 2}-d input and indices of its shape, got "
            f"{x.shape} and {indices.shape}"
        )
    if not indices.dtype.is_int or indices.dtype == dtypes.bool_:
        raise TypeError(f"{op}: indices must be integers, got {indices.dtype}")
    kernel = _ints(kernel_size, n, "kernel_size", op)
    stride = _ints(kernel if stride is None or stride in ([], ()) else stride, n, "stride", op)
    padding = _ints(padding, n, "padding", op)
    default = [(x.shape[-n + i] - 1) * stride[i] - 2 * padding[i] + kernel[i] for i in range(n)]
    size = default if output_size is None else list(output_size)
    size = size[2:] if len(size) == n + 2 else size
    if len(size) != n or any(
        not d - s < o < d + s for d, s, o in zip(default, stride, size)
    ):  # fmt: skip
        raise ValueError(
            f"{op}: output_size {output_size} must be {n} sizes (or the whole shape), each "
            f"within a stride of {tuple(default)}"
        )
    lead = x.shape[:-n]
    flat = Tensor.zeros(*lead, math.prod(size), dtype=x.dtype, device=x.device)
    plane = x.reshape(*lead, -1)
    # overlapping windows may name one cell twice, with one value: written once, as torch's
    idx = indices.reshape(*lead, -1).cast(dtypes.int64)
    out = flat.scatter_reduce(-1, idx, plane, "amax", include_self=False)
    return out.reshape(*lead, *size)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, 1, kernel_size, stride, padding, output_size,
                       "max_unpool1d")  # fmt: skip


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, 2, kernel_size, stride, padding, output_size,
                       "max_unpool2d")  # fmt: skip


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, 3, kernel_size, stride, padding, output_size,
                       "max_unpool3d")  # fmt: skip


# ---- resampling -----------------------------------------------------------------------

_MODE_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_CUBIC_A = -0.75  # the cubic convolution's free parameter, torch's (and OpenCV's) choice


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners=None, recompute_scale_factor=None, antialias=False):  # fmt: skip
    """Resample the spatial dims (all but the first two) to ``size``, or by
    ``scale_factor`` (each size floor(in * factor)), dim by dim: "nearest" and
    "nearest-exact" pick a source element, "linear", "bilinear" and "trilinear" mix the two
    around the source position, "bicubic" four by cubic convolution, "area" averages
    (adaptive average pooling). The source position of output i is (i + 0.5) * scale - 0.5
    (i * scale for "nearest"), with scale = in / out, or 1 / factor when a factor is given
    and not recomputed; ``align_corners`` maps the corner elements onto each other
    instead, scale = (in - 1) / (out - 1)."""
    n = input.ndim - 2
    op = "interpolate"
    if mode not in (*_MODE_DIMS, "nearest", "nearest-exact", "area"):
        raise ValueError(f"{op}: mode {mode!r} is not one of nearest, nearest-exact, linear, "
                         "bilinear, bicubic, trilinear, area")  # fmt: skip
    if not 1 <= n <= 3 or _MODE_DIMS.get(mode, n) != n:
        want = _MODE_DIMS.get(mode)
        raise ValueError(f"{op}: mode {mode!r} needs a {want + 2 if want else '3 to 5'}-d input "
                         f"(N, C, *spatial), got shape {input.shape}")  # fmt: skip
    if align_corners is not None and mode not in _MODE_DIMS:
        raise ValueError(f"{op}: align_corners is for linear, bilinear, bicubic and trilinear, "
                         f"not {mode!r}")  # fmt: skip
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if antialias:
        raise NotImplementedError(f"{op}: antialias is not in limn")
    if size is not None:
        sizes, scales = _ints(size, n, "size", op), [None] * n
    else:
        factors = (scale_factor,) * n if isinstance(scale_factor, int | float) else scale_factor
        if len(factors) != n:
            raise ValueError(f"{op}: scale_factor needs {n} factors, got {scale_factor!r}")
        sizes = tuple(math.floor(s * f) for s, f in zip(input.shape[2:], factors))
        scales = [None] * n if recompute_scale_factor else list(factors)
    if mode == "area":
        return _adaptive_avg(input, n, sizes, "interpolate")
    x = input
    for i in range(n):
        x = _resample(x, 2 + i, sizes[i], scales[i], mode, bool(align_corners))
    return x


def _resample(x: Tensor, axis: int, out: int, factor, mode: str, align: bool) -> Tensor:
    """x resampled along ``axis`` to ``out`` elements: a sum of picks (index_select) times
    their weights, which are computed in x's float dtype as torch computes them."""
    size, f = x.shape[axis], np.float32 if x.dtype != dtypes.float64 else np.float64
    i = np.arange(out).astype(f)
    if align and mode in _MODE_DIMS:
        scale = f((size - 1) / (out - 1)) if out > 1 else f(0)
        src = i * scale
    else:
        scale = f(1 / factor) if factor else f(size) / f(out)
        if mode == "nearest":
            src = np.minimum(np.floor(i * np.float32(scale)), size - 1)
            return x.index_select(axis, Tensor(src.astype(np.int64), device=x.device))
        if mode == "nearest-exact":
            src = np.minimum(np.floor((i + f(0.5)) * np.float32(scale)), size - 1)
            return x.index_select(axis, Tensor(src.astype(np.int64), device=x.device))
        src = scale * (i + f(0.5)) - f(0.5)
        src = src if mode == "bicubic" else np.maximum(src, f(0))
    base = np.floor(src)
    t = (src - base).astype(f)
    base = base.astype(np.int64)
    if mode == "bicubic":
        a = _CUBIC_A
        near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1  # noqa: E731  (|d| <= 1)
        far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # noqa: E731  (1 < |d| < 2)
        picks = [(base - 1, far(t + 1)), (base, near(t)), (base + 1, near(1 - t)),
                 (base + 2, far(2 - t))]  # fmt: skip
    else:
        picks = [(base, 1 - t), (np.where(base < size - 1, base + 1, base), t)]
    shape = [1] * x.ndim
    shape[axis] = out
    total = None
    for idx, w in picks:
        idx = Tensor(np.clip(idx, 0, size - 1), device=x.device)
        term = x.index_select(axis, idx) * Tensor(w.astype(f), device=x.device).reshape(shape)
        total = term if total is None else total + term
    return total


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """interpolate under its older name."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """bilinear interpolate with the corners aligned, as torch's."""
    return interpolate(input, size, scale_factor, "bilinear", align_corners=True)


_pad = pad  # (constant_pad_nd's argument is torch's ``pad``)


def constant_pad_nd(input: Tensor, pad, value=0) -> Tensor:
    return _pad(input, pad, "constant", value)


Tensor.constant_pad_nd = constant_pad_nd
