"""Convolution and pooling: windows over a padded input, each window a View.

A convolution is one multiply and one reduce over a windowed view of the padded input
(``_unfold``): each window is a View over the input (``Tensor.p_window``), so the only
copy is the padded input itself, made once when there is padding. A stride-1 convolution
that takes gradients records its own rule (``_conv_grad``): both gradients as
convolutions, not through the unfold. Pooling is the same windowed view reduced by max or
mean.
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from limn import autograd
from limn.nn.module import Module, _uniform_param
from limn.tensor import Tensor


def _tuple(v, n: int, name: str) -> tuple[int, ...]:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n or any(not isinstance(i, int) for i in t):
        raise ValueError(f"conv: {name} must be an int or {n} ints, got {v!r}")
    return t


def _padded(x: Tensor, pads, fill: float = 0.0) -> Tensor:
    """``x`` padded, copied once where there is a pad: a window cannot read through a
    pad's mask."""
    padded = x.pad(pads, value=fill)
    return padded.clone() if any(a or b for a, b in pads) else padded


def _unfold(x: Tensor, kernel, stride, dilation) -> Tensor:
    """(N, C, *L) -> (N, C, *o, *k): every kernel window of every output position, a view."""
    n = len(kernel)
    for i in range(n):
        # spatial dim i sits at axis 2 + 2i once the dims before it became (o, k) pairs
        x = x.p_window(2 + 2 * i, kernel[i], stride[i], dilation[i])
    # now (N, C, o0, k0, o1, k1, ...): outputs first, then kernel offsets
    outs = tuple(2 + 2 * i for i in range(n))
    return x.permute((0, 1) + outs + tuple(a + 1 for a in outs))


def conv(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups=1
) -> Tensor:
    """N-d cross-correlation as torch computes it: x (N, C, *L), weight (O, C/groups, *k).

    ``padding`` is an int, one int per spatial dim, or "valid" / "same" (stride 1). An
    unbatched x (C, *L) gives an unbatched result.
    """
    n = weight.ndim - 2
    if n < 1:
        raise ValueError(f"conv: weight must be (out, in/groups, *kernel), got {weight.shape}")
    if x.ndim == n + 1:
        return conv(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups)[0]
    if x.ndim != n + 2:
        raise ValueError(
            f"conv{n}d: input must be (N, C, *{n} spatial dims) or (C, *spatial), got {x.shape}"
        )
    O, cg, *kernel = weight.shape
    N, C, *size = x.shape
    stride, dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    if groups < 1 or C != cg * groups or O % groups:
        raise ValueError(
            f"conv{n}d: input {x.shape} with {C} channels, weight {weight.shape} and "
            f"groups={groups} do not fit: need C == weight.shape[1] * groups and out "
            f"channels divisible by groups"
        )
    if min(stride) < 1 or min(dilation) < 1:
        raise ValueError(f"conv{n}d: stride {stride} and dilation {dilation} must be >= 1")
    spans = [d * (k - 1) for d, k in zip(dilation, kernel)]
    if padding == "valid":
        pads = ((0, 0),) * n
    elif padding == "same":
        if max(stride) != 1:
            raise ValueError(f"conv{n}d: padding='same' needs stride 1, got {stride}")
        pads = tuple((t // 2, t - t // 2) for t in spans)
    else:
        pads = tuple((p, p) for p in _tuple(padding, n, "padding"))
        if min(p for p, _ in pads) < 0:
            raise ValueError(f"conv{n}d: padding must be >= 0, got {padding}")
    sizes = [s + a + b for s, (a, b) in zip(size, pads)]
    if any(L < d * (k - 1) + 1 for L, d, k in zip(sizes, dilation, kernel)):
        raise ValueError(
            f"conv{n}d: kernel {tuple(kernel)} with dilation {dilation} is larger than "
            f"the padded input {tuple(sizes)}"
        )
    direct = max(stride) == 1 and groups == 1 and all(max(p) <= s for p, s in zip(pads, spans))
    if direct and autograd.grad_enabled() and (x.requires_grad or weight.requires_grad):
        # the gradients as convolutions of their own (see _conv_grad), not through unfold
        with autograd.no_grad():
            out = _correlate(x, weight, pads, dilation)
        out = Tensor._make(out.node, x.device, _conv_grad, (x, weight), (pads, dilation))
    else:
        out = _correlate(x, weight, pads, dilation, stride, groups)
    return out if bias is None else out + bias.reshape(O, *([1] * n))


def _correlate(x: Tensor, weight: Tensor, pads, dilation, stride=None, groups: int = 1) -> Tensor:
    """The cross-correlation as one contraction over (C, *k) of the unfolded padded input."""
    n = weight.ndim - 2
    O, cg, *kernel = weight.shape
    N = x.shape[0]
    stride = stride or (1,) * n
    cols = _unfold(_padded(x, pads), kernel, stride, dilation)  # (N, C, *o, *k)
    outs = cols.shape[2 : 2 + n]
    cols = cols.reshape(N, groups, 1, cg, *outs, *kernel)
    w = weight.reshape(1, groups, O // groups, cg, *([1] * n), *kernel)
    reduce = (3,) + tuple(range(4 + n, 4 + 2 * n))
    return (cols * w).sum(reduce).reshape(N, O, *outs)


def _conv_grad(ctx, out, g):
    """Both gradients of a stride-1 convolution, each a contraction on the tiled path.

    dx is the correlation of g, padded by span - pad on each side, with the kernel flipped
    and its in/out channels swapped (each input element collects every output it fed);
    dw[o, c, *k] sums g[n, o, *y] * x_padded[n, c, *y + d*k] over n and the positions.
    Autograd through the unfold would make a (N, C, *y, *k) gradient first, k times the
    input, and overlap-add it.
    """
    x, weight = ctx.parents
    pads, dilation = ctx.saved
    n = weight.ndim - 2
    O, C, *kernel = weight.shape
    N, _, *outs = g.shape
    spans = [d * (k - 1) for d, k in zip(dilation, kernel)]
    gx = gw = None
    if x.requires_grad:
        flipped = weight.flip(*range(2, 2 + n)).transpose(0, 1)  # (C, O, *k)
        back = tuple((s - a, s - b) for s, (a, b) in zip(spans, pads))
        gx = _correlate(g, flipped.clone(), back, dilation)
    if weight.requires_grad:
        cols = _unfold(_padded(x, pads), kernel, (1,) * n, dilation)  # (N, C, *o, *k)
        cols = cols.reshape(N, 1, C, *outs, *kernel)
        gg = g.reshape(N, O, 1, *outs, *([1] * n))
        gw = (gg * cols).sum((0, *range(3, 3 + n)))
    return gx, gw


class _ConvNd(Module):
    n = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        dtype=None,
    ):
        name = type(self).__name__
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: in_channels={in_channels} and out_channels={out_channels} must "
                f"both be divisible by groups={groups}"
            )
        kernel = _tuple(kernel_size, self.n, "kernel_size")
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * math.prod(kernel)
        bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
        dt = dtype or dtypes.float32
        self.weight = _uniform_param((out_channels, in_channels // groups, *kernel), bound, dt)
        self.bias = _uniform_param((out_channels,), bound, dt) if bias else None

    def extra_repr(self) -> str:
        """torch's: channels, then kernel_size and stride as tuples, then what differs
        from the defaults."""
        n = self.n
        out, cg, *kernel = self.weight.shape
        shown = [f"{cg * self.groups}, {out}", f"kernel_size={tuple(kernel)}",
                 f"stride={_tuple(self.stride, n, 'stride')}"]  # fmt: skip
        if isinstance(self.padding, str):
            shown.append(f"padding={self.padding}")
        elif _tuple(self.padding, n, "padding") != (0,) * n:
            shown.append(f"padding={_tuple(self.padding, n, 'padding')}")
        if _tuple(self.dilation, n, "dilation") != (1,) * n:
            shown.append(f"dilation={_tuple(self.dilation, n, 'dilation')}")
        shown += [f"groups={self.groups}"] if self.groups != 1 else []
        return ", ".join(shown + (["bias=False"] if self.bias is None else []))

    def forward(self, x: Tensor) -> Tensor:
        return conv(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )


class Conv1d(_ConvNd):
    """x (N, C, L) -> (N, O, L'); weight (O, C/groups, k), init U(+-1/sqrt(fan_in))."""

    n = 1


class Conv2d(_ConvNd):
    """x (N, C, H, W) -> (N, O, H', W'); weight (O, C/groups, kh, kw)."""

    n = 2


def _pool(x: Tensor, kernel: tuple, stride, padding, reduce: str, fill: float) -> Tensor:
    """(N, C, *L) or (C, *L) windows of ``kernel`` every ``stride`` (the kernel's size by
    default), each padded side filled with ``fill``, reduced by max or mean."""
    n = len(kernel)
    stride = _tuple(stride if stride else kernel, n, "stride")
    pads = tuple((p, p) for p in _tuple(padding, n, "padding"))
    padded = _padded(x, pads, fill)
    cols = _unfold(padded.reshape(-1, 1, *padded.shape[-n:]), kernel, stride, (1,) * n)
    axes = tuple(range(2 + n, 2 + 2 * n))
    out = cols.amax(axes) if reduce == "max" else cols.mean(axes)
    return out.reshape(*x.shape[:-n], *out.shape[2 : 2 + n])


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    return _pool(x, _tuple(kernel_size, 2, "kernel_size"), stride, padding, "max", -math.inf)


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    """Padding counts in the mean, as torch's default ``count_include_pad=True``."""
    return _pool(x, _tuple(kernel_size, 2, "kernel_size"), stride, padding, "mean", 0.0)


def max_pool1d(x: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    return _pool(x, _tuple(kernel_size, 1, "kernel_size"), stride, padding, "max", -math.inf)


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    """The mean over equal windows; each spatial size must be a multiple of the output's."""
    out = _tuple(output_size, 2, "output_size")
    size = x.shape[-2:]
    if any(s % o for s, o in zip(size, out)):
        raise ValueError(
            f"adaptive_avg_pool2d: input size {size} is not a multiple of output {out}; "
            "accepted: sizes that divide evenly"
        )
    kernel = tuple(s // o for s, o in zip(size, out))
    return avg_pool2d(x, kernel)
