"""Sampling on a grid: ``affine_grid`` gives the sampling points of an affine map, and
``grid_sample`` reads an image (N, C, H, W), or a volume (N, C, D, H, W), at any points,
as torch's (its spatial transformer networks, optical flow warps).

A grid holds points in [-1, 1] per spatial dim, last dim (x, y[, z]) for (W, H[, D]).
Each point becomes a position in pixels (``_unnormalize``: -1 and 1 the centres of the
corner pixels with ``align_corners``, their outer edges without), is kept in the image by
the padding mode (``_source``: ``border`` clamps, ``reflection`` mirrors at the edges;
``zeros`` reads 0 outside), and is read by its taps: the nearest pixel, the 2^k corners
of its cell weighted by their distances (bilinear, trilinear for a volume), or the 4 x 4
pixels of a cubic convolution (bicubic, images only). Every tap is a ``gather`` from the
flattened image, so the result stays lazy, and the gradient reaches the image (as a
scatter-add) and the grid (through the weights), as torch's does.
"""

from __future__ import annotations

import itertools
import math

from ir.graph import dtypes
from limn.ops.joining import cat
from limn.tensor import Tensor

MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")
_CUBIC_A = -0.75  # torch's (and OpenCV's) cubic convolution constant


def _unnormalize(coord: Tensor, size: int, align: bool) -> Tensor:
    return (coord + 1) / 2 * (size - 1) if align else ((coord + 1) * size - 1) / 2


def _reflect(c: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """c mirrored into [twice_low / 2, twice_high / 2], as often as it takes."""
    if twice_low == twice_high:
        return c * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    c = (c - low).abs()
    extra, flips = c.fmod(span), (c / span).floor()
    return (flips.fmod(2) == 0).where(extra + low, span - extra + low)


def _source(c: Tensor, size: int, padding: str, align: bool) -> Tensor:
    """A position in pixels kept in [0, size - 1] as ``padding`` says (``zeros``: as is)."""
    if padding == "border":
        return c.clamp(0, size - 1)
    if padding == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align else _reflect(c, -1, 2 * size - 1)
        return c.clamp(0, size - 1)
    return c


def _tap(flat: Tensor, at: list[Tensor], sizes: tuple[int, ...]) -> Tensor:
    """The image ``flat`` (N, C, prod(sizes)) read at the integer positions ``at`` (one
    (N, P) tensor per spatial dim, the outermost first): (N, C, P), 0 outside."""
    inside, index = None, None
    for c, size in zip(at, sizes):
        ok = (c >= 0) & (c <= size - 1)
        inside = ok if inside is None else inside & ok
        c = c.clamp(0, size - 1).cast(dtypes.int64)
        index = c if index is None else index * size + c
    n, p = index.shape
    picked = flat.gather(2, index.reshape(n, 1, p).expand(n, flat.shape[1], p))
    return inside.reshape(n, 1, p).where(picked, 0.0)


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """The four weights of a cubic convolution at fraction t of the way from tap 1 to 2."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:  # fmt: skip
    """``input`` (N, C, *spatial) read at the points of ``grid`` (N, *out, k), k = 2 for an
    image and 3 for a volume: (N, C, *out)."""
    op = "grid_sample"
    k = input.ndim - 2
    if k not in (2, 3):
        raise ValueError(f"{op}: input must be (N, C, H, W) or (N, C, D, H, W), got {input.shape}")
    if grid.ndim != k + 2 or grid.shape[-1] != k or grid.shape[0] != input.shape[0]:
        raise ValueError(
            f"{op}: grid must be (N, *out, {k}) with N = {input.shape[0]} for input "
            f"{input.shape}, got {grid.shape}"
        )
    if mode not in MODES or padding_mode not in PADDINGS:
        raise ValueError(
            f"{op}: mode must be one of {MODES} and padding_mode one of {PADDINGS}, got "
            f"{mode!r} and {padding_mode!r}"
        )
    if mode == "bicubic" and k != 2:
        raise ValueError(f"{op}: bicubic needs a 4-d input, got {input.shape}")
    if not input.dtype.is_float or grid.dtype != input.dtype:
        raise TypeError(
            f"{op}: input and grid must share a float dtype, got {input.dtype} and {grid.dtype}"
        )
    align = bool(align_corners)
    n, c, sizes, out = input.shape[0], input.shape[1], input.shape[2:], grid.shape[1:-1]
    p = math.prod(out)
    flat = input.reshape(n, c, math.prod(sizes))
    # the grid's coordinates, outermost spatial dim first: (z,) y, x
    coords = [grid[..., d].reshape(n, p) for d in reversed(range(k))]
    pos = [_unnormalize(g, s, align) for g, s in zip(coords, sizes)]
    if mode == "bicubic":
        val = _bicubic(flat, pos, sizes, padding_mode, align)
    else:
        pos = [_source(x, s, padding_mode, align) for x, s in zip(pos, sizes)]
        if mode == "nearest":
            val = _tap(flat, [x.round() for x in pos], sizes)
        else:
            low = [x.floor() for x in pos]
            frac = [x - f for x, f in zip(pos, low)]
            val = None
            for corner in itertools.product((0, 1), repeat=k):
                w = None
                for bit, f in zip(corner, frac):
                    wd = f if bit else 1 - f
                    w = wd if w is None else w * wd
                term = _tap(flat, [f + bit for f, bit in zip(low, corner)], sizes)
                term = term * w.reshape(n, 1, p)
                val = term if val is None else val + term
    return val.reshape(n, c, *out)


def _bicubic(flat, pos, sizes, padding, align):
    (y, x), (h, w) = pos, sizes
    y0, x0 = y.floor(), x.floor()
    wy, wx = _cubic_weights(y - y0), _cubic_weights(x - x0)
    n, p = x.shape
    out = None
    for j in range(4):
        yj = _source(y0 + (j - 1), h, padding, align).trunc()
        row = None
        for i in range(4):
            xi = _source(x0 + (i - 1), w, padding, align).trunc()
            term = _tap(flat, [yj, xi], sizes) * wx[i].reshape(n, 1, p)
            row = term if row is None else row + term
        term = row * wy[j].reshape(n, 1, p)
        out = term if out is None else out + term
    return out


def _linspace(steps: int, align: bool, like: Tensor) -> Tensor:
    """torch's base grid along one dim: ``steps`` points from -1 to 1 (pixel centres)."""
    if steps <= 1:
        return Tensor.zeros(max(steps, 1), dtype=like.dtype, device=like.device)
    i = Tensor.arange(steps, dtype=like.dtype, device=like.device)
    at = i * (2 / (steps - 1)) - 1
    return at if align else at * ((steps - 1) / steps)


def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The points of ``grid_sample``'s grid for the affine maps ``theta``: (N, 2, 3) for an
    image of ``size`` (N, C, H, W), giving (N, H, W, 2); (N, 3, 4) for a volume (N, C, D,
    H, W), giving (N, D, H, W, 3). Each output pixel's normalized (x, y[, z], 1) times
    theta's transpose."""
    size = tuple(int(s) for s in size)
    k = len(size) - 2
    if k not in (2, 3) or theta.shape != (size[0], k, k + 1):
        raise ValueError(
            f"affine_grid: theta must be (N, 2, 3) for a 4-d size or (N, 3, 4) for a 5-d "
            f"one, got theta {theta.shape} and size {size}"
        )
    if not theta.dtype.is_float:
        raise TypeError(f"affine_grid: theta must be a float tensor, got {theta.dtype}")
    align, spatial = bool(align_corners), size[2:]
    p = math.prod(spatial)
    axes = [_linspace(s, align, theta) for s in spatial]  # (z,) y, x
    cols = []
    for d in reversed(range(k)):  # x first, as the grid's last dim
        shape = [1] * k
        shape[d] = spatial[d]
        cols.append(axes[d].reshape(*shape).expand(*spatial).reshape(p, 1))
    base = cat([*cols, Tensor.ones(p, 1, dtype=theta.dtype, device=theta.device)], 1)
    return (base.reshape(1, p, k + 1) @ theta.transpose(1, 2)).reshape(size[0], *spatial, k)


_MODE_CODES, _PADDING_CODES = dict(enumerate(MODES)), dict(enumerate(PADDINGS))


def grid_sampler_2d(input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> Tensor:  # fmt: skip
    """torch's aten form of ``grid_sample`` on an image, the modes as codes (0 bilinear, 1
    nearest, 2 bicubic; 0 zeros, 1 border, 2 reflection)."""
    if input.ndim != 4:
        raise ValueError(f"grid_sampler_2d: needs a 4-d input, got {input.shape}")
    return grid_sample(input, grid, _MODE_CODES.get(interpolation_mode, interpolation_mode),
                       _PADDING_CODES.get(padding_mode, padding_mode), align_corners)  # fmt: skip


def grid_sampler_3d(input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> Tensor:  # fmt: skip
    """``grid_sampler_2d``'s volume form (codes 0 bilinear and 1 nearest)."""
    if input.ndim != 5:
        raise ValueError(f"grid_sampler_3d: needs a 5-d input, got {input.shape}")
    return grid_sample(input, grid, _MODE_CODES.get(interpolation_mode, interpolation_mode),
                       _PADDING_CODES.get(padding_mode, padding_mode), align_corners)  # fmt: skip
