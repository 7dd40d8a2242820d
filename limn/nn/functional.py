"""limn.nn.functional: the layers and losses as functions, in torch.nn.functional's names.

Each layer module of ``limn.nn`` calls one of these, and most are a Tensor method under
torch's name. Arguments follow torch's signatures; what differs is said where it does.
"""

from __future__ import annotations

import math

import ml_dtypes

from ir.graph import dtypes
from limn.attention import scaled_dot_product_attention as _sdpa
from limn.autograd import no_grad
from limn.nn.activations import *  # noqa: F403
from limn.nn.conv import conv, conv_transpose
from limn.nn.distances import cosine_similarity, normalize, pairwise_distance  # noqa: F401
from limn.nn.functional_grid import affine_grid, grid_sample  # noqa: F401
from limn.nn.functional_pool import (  # noqa: F401
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    interpolate,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
    pad,
    unfold,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)
from limn.nn.losses import *  # noqa: F403
from limn.ops.inplace import inplace_flag
from limn.ops.pairs import pdist  # noqa: F401
from limn.runtime.profile import name_gather
from limn.tensor import Tensor

gelu, tanh, sigmoid, softplus = Tensor.gelu, Tensor.tanh, Tensor.sigmoid, Tensor.softplus
log_softmax, linear, one_hot = Tensor.log_softmax, Tensor.linear, Tensor.one_hot


@inplace_flag
def relu(x: Tensor, inplace: bool = False) -> Tensor:
    return x.relu()


@inplace_flag
def silu(x: Tensor, inplace: bool = False) -> Tensor:
    return x.silu()


@inplace_flag
def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return x.dropout(p, training)


def _feature_mask(x: Tensor, p: float, batched: int, name: str) -> Tensor:
    """dropout's mask (0 or 1/(1-p)) drawn once per channel: over x's first ``batched``
    dims (the batch and the channels), each broadcast over the rest."""
    if x.ndim < batched:
        raise ValueError(f"{name}: needs at least {batched} dims, got shape {x.shape}")
    shape = x.shape[:batched] + (1,) * (x.ndim - batched)
    return Tensor.ones(*shape, dtype=x.dtype, device=x.device).dropout(p)


@inplace_flag
def dropout1d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Whole channels zeroed: (N, C, L), or (C, L) unbatched."""
    if x.ndim not in (2, 3):
        raise ValueError(f"dropout1d: needs (N, C, L) or (C, L), got shape {x.shape}")
    return _feature_dropout(x, p, training, x.ndim - 1, "dropout1d")


@inplace_flag
def dropout2d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Whole channels zeroed: (N, C, H, W); a 3-d input is taken as (N, C, L), and any
    other as unbatched (C, *), as torch does (with its warnings)."""
    return _feature_dropout(x, p, training, 2 if x.ndim in (3, 4) else 1, "dropout2d")


@inplace_flag
def dropout3d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Whole channels zeroed: (N, C, D, H, W), or (C, D, H, W) unbatched."""
    return _feature_dropout(x, p, training, 2 if x.ndim == 5 else 1, "dropout3d")


def _feature_dropout(x: Tensor, p: float, training: bool, batched: int, name: str) -> Tensor:
    """dropout with one draw (0 or 1/(1-p)) per channel: over x's first ``batched`` dims
    (the batch and the channels), each broadcast over the rest."""
    if not 0 <= p <= 1:
        raise ValueError(f"{name}: p must be in [0, 1], got {p}")
    if x.ndim < batched or not x.ndim:
        raise ValueError(f"{name}: needs at least {max(batched, 1)} dims, got shape {x.shape}")
    if not training or p == 0:
        return x
    shape = x.shape[:batched] + (1,) * (x.ndim - batched)
    return x * Tensor.ones(*shape, dtype=x.dtype, device=x.device).dropout(p)


# -selu(-inf), SELU's floor: scale * alpha, as torch spells it (an ulp below the product)
_SELU_SATURATION = 1.7580993408473766


def _alpha_dropout(x, p, training, keep_shape, name):
    """Dropped values go to SELU's floor, and the result is scaled and shifted so a
    standard input keeps mean 0 and variance 1 (torch's formula)."""
    if not 0 <= p <= 1:
        raise ValueError(f"{name}: p must be in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0
    a = 1 / math.sqrt((_SELU_SATURATION**2 * p + 1) * (1 - p))
    keep = Tensor.ones(*keep_shape, dtype=x.dtype, device=x.device).dropout(p) != 0
    sa = _SELU_SATURATION * a
    return keep.where(x * a + sa * p, x * 0 + (-sa + sa * p))  # (x * 0: a nan stays)


@inplace_flag
def alpha_dropout(x: Tensor, p: float = 0.5, training: bool = False,
                  inplace: bool = False) -> Tensor:  # fmt: skip
    return _alpha_dropout(x, p, training, x.shape, "alpha_dropout")


@inplace_flag
def feature_alpha_dropout(x: Tensor, p: float = 0.5, training: bool = False,
                          inplace: bool = False) -> Tensor:  # fmt: skip
    """alpha_dropout of whole channels: one draw per (sample, channel) of (N, C, *)."""
    if x.ndim < 2 and training and p:
        raise ValueError(f"feature_alpha_dropout: needs at least 2 dims, got shape {x.shape}")
    shape = x.shape[:2] + (1,) * (x.ndim - 2)
    return _alpha_dropout(x, p, training, shape, "feature_alpha_dropout")


def softmax(x: Tensor, dim=None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return x.softmax(-1 if dim is None else dim, dtype)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(x, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(x, weight, bias, stride, padding, dilation, groups, 2)


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(x, weight, bias, stride, padding, dilation, groups, 3)


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:  # fmt: skip
    _check_conv(x, weight, bias, 1, "conv_transpose1d")
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:  # fmt: skip
    _check_conv(x, weight, bias, 2, "conv_transpose2d")
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:  # fmt: skip
    _check_conv(x, weight, bias, 3, "conv_transpose3d")
    return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation)


def _check_conv(x, weight, bias, n: int, name: str) -> None:
    ts = [t for t in (x, weight, bias) if t is not None]
    if any(t.dtype == dtypes.bool_ or t.dtype != x.dtype for t in ts) or weight.ndim != n + 2:
        raise TypeError(
            f"{name}: input, weight and bias must share one number dtype and the weight have "
            f"{n + 2} dims, got {[f'{t.dtype}{list(t.shape)}' for t in ts]}"
        )


def _conv(x, weight, bias, stride, padding, dilation, groups, n: int) -> Tensor:
    _check_conv(x, weight, bias, n, f"conv{n}d")
    return conv(x, weight, bias, stride, padding, dilation, groups)


@inplace_flag
def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return (x > 0).where(x, x * negative_slope)  # at 0 the gradient is the slope, as torch's


@inplace_flag
def rrelu(x: Tensor, lower: float = 1 / 8, upper: float = 1 / 3, training: bool = False,
          inplace: bool = False) -> Tensor:  # fmt: skip
    """leaky_relu whose negative slope is drawn from U(lower, upper) per element in
    training, and is their mean in evaluation."""
    if not x.dtype.is_float:
        raise TypeError(f"rrelu: needs a float input, got {x.dtype}")
    if lower > upper:
        raise ValueError(f"rrelu: lower {lower} must be at most upper {upper}")
    if not training:
        return leaky_relu(x, (lower + upper) / 2)
    slope = Tensor.rand(*x.shape, dtype=x.dtype, device=x.device) * (upper - lower) + lower
    return (x >= 0).where(x, x * slope)


def embedding(ids: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:  # fmt: skip
    """Rows of ``weight`` picked by the integer ``ids``: a gather, whose gradient adds.
    Picks of row ``padding_idx`` pass no gradient back to it.

    torch's options: ``max_norm`` first rescales, in ``weight`` itself (a write, as
    torch's), each picked row whose ``norm_type``-norm exceeds it, to that norm;
    ``scale_grad_by_freq`` divides each row's gradient by how often the batch picks it
    (the value unchanged: the row is its value plus a part that only carries gradient).
    ``sparse`` gradients are torch's storage choice; limn's are dense."""
    if not ids.dtype.is_int:
        raise TypeError(f"embedding: ids must be an integer tensor, got {ids.dtype}")
    n, dim = ids.numel(), weight.shape[1]
    if max_norm is not None or scale_grad_by_freq:
        rows = Tensor.arange(weight.shape[0], device=weight.device)
        counts = (ids.reshape(n, 1) == rows).sum(0).reshape(-1, 1)  # picks of each row
    if max_norm is not None:
        with no_grad():
            norms = weight.norm(norm_type, 1, keepdim=True)
            over = (counts > 0) & (norms > max_norm)
            weight.assign(over.where(weight * (max_norm / (norms + 1e-7)), weight))
    if scale_grad_by_freq:
        scaled = weight / counts.maximum(1).cast(weight.dtype)
        weight = scaled + (weight - scaled).detach()
    picked = name_gather(weight.gather(0, ids.reshape(n, 1).expand(n, dim)), "Embedding")
    if padding_idx is not None:
        pad = (ids.reshape(n, 1) == padding_idx % weight.shape[0]).expand(n, dim)
        picked = pad.where(picked.detach(), picked)
    return picked.reshape(*ids.shape, dim)


def embedding_bag(input: Tensor, weight: Tensor, offsets=None, max_norm=None,
                  norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights=None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:  # fmt: skip
    """Each bag of rows of ``weight`` reduced to one row, (bags, embedding_dim). A 2-d
    ``input`` (B, L) is B bags of L ids; a 1-d one is cut where ``offsets`` say (bag b
    runs from offsets[b] to the next offset; with ``include_last_offset`` the last offset
    ends the last bag). ``mode`` sums, averages or takes the largest of a bag's rows (an
    empty bag gives zeros); ``per_sample_weights`` (``"sum"`` only) scales each row first;
    a pick of ``padding_idx`` is left out of its bag. The rows are ``embedding``'s (its
    ``max_norm`` and ``scale_grad_by_freq``); which bag holds a position is a comparison
    with the offsets, and a bag's sum is a product with that 0/1 membership, so it stays
    lazy and its gradient reaches the weight and the per-sample weights."""
    op = "embedding_bag"
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"{op}: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if not input.dtype.is_int or input.dtype == dtypes.bool_:
        raise TypeError(f"{op}: input must hold integer ids, got {input.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"{op}: weight must be 2-d (num_embeddings, dim), got {weight.shape}")
    n = input.numel()
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"{op}: offsets must be None for a 2-d input {input.shape}")
        bags = input.shape[0]
        bag = Tensor.arange(n, device=input.device) // max(input.shape[1], 1)
    elif input.ndim == 1:
        if offsets is None or offsets.ndim != 1 or not offsets.dtype.is_int:
            raise ValueError(f"{op}: a 1-d input needs 1-d integer offsets, got {offsets!r}")
        bags = offsets.shape[0] - (1 if include_last_offset else 0)
        pos = Tensor.arange(n, device=input.device).reshape(n, 1)
        bag = (offsets.reshape(1, -1) <= pos).sum(1) - 1  # the last offset at or before pos
    else:
        raise ValueError(f"{op}: input must be 1-d (with offsets) or 2-d, got {input.shape}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise ValueError(f"{op}: per_sample_weights needs mode='sum', got mode={mode!r}")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(
                f"{op}: per_sample_weights {per_sample_weights.shape} must have the input's "
                f"shape {input.shape}"
            )
    ids = input.reshape(n)
    rows = embedding(ids, weight, None, max_norm, norm_type, scale_grad_by_freq)
    member = bag.reshape(1, n) == Tensor.arange(bags, device=input.device).reshape(bags, 1)
    if padding_idx is not None:
        num = weight.shape[0]
        if not -num <= padding_idx < num:
            raise ValueError(f"{op}: padding_idx {padding_idx} is outside the {num} rows")
        member = member & (ids != padding_idx % num).reshape(1, n)
    if mode == "max":
        picked = member.reshape(bags, n, 1).where(rows.reshape(1, n, -1), -math.inf)
        out = member.any(1, keepdim=True).where(picked.amax(1), 0.0)
        return out.cast(weight.dtype)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(n, 1)
    m = member.cast(rows.dtype)
    out = m @ rows
    return out / m.sum(1, keepdim=True).maximum(1) if mode == "mean" else out


def _trailing(x: Tensor, shape: tuple, op: str) -> tuple[int, ...]:
    n = len(shape)
    if x.ndim < n or tuple(x.shape[x.ndim - n :]) != tuple(shape):
        raise ValueError(f"{op}: input shape {x.shape} does not end in {tuple(shape)}")
    return tuple(range(x.ndim - n, x.ndim))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing dims (biased variance), then scale and shift."""
    shape = tuple(normalized_shape)
    if not shape:
        raise ValueError("layer_norm: normalized_shape needs at least one dim")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"layer_norm: {name} {t.shape} must have normalized_shape {shape}")
    axes = _trailing(x, shape, "layer_norm")
    mean = x.mean(axes, keepdim=True)
    y = (x - mean) * (x.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x**2) + eps) over the trailing dims; eps defaults to the dtype's
    machine epsilon, as torch's."""
    if not tuple(normalized_shape):
        raise ValueError("rms_norm: normalized_shape needs at least one dim")
    axes = _trailing(x, tuple(normalized_shape), "rms_norm")
    eps = float(ml_dtypes.finfo(dtypes.to_numpy(x.dtype)).eps) if eps is None else eps
    y = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return y if weight is None else y * weight


def batch_norm(
    x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5
):
    """Normalize each channel (dim 1) over the batch and the spatial dims. Training uses
    the batch's statistics and writes the running ones (``assign``: the unbiased variance,
    as torch keeps it); evaluation uses the running ones."""
    if x.ndim < 2:  # torch answers an empty 1-d input with itself, and refuses the rest
        if x.numel() == 0:
            return x.contiguous()
        raise ValueError(f"batch_norm: input must be (N, C, *), got shape {x.shape}")
    axes = (0, *range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training:
        mean, var = x.mean(axes), x.var(axes, correction=0)
        if running_mean is not None:
            n = x.numel() // x.shape[1]
            with no_grad():
                running_mean.assign(running_mean * (1 - momentum) + mean.detach() * momentum)
                unbiased = var.detach() * (n / max(n - 1, 1))
                running_var.assign(running_var * (1 - momentum) + unbiased * momentum)
    else:
        mean, var = running_mean, running_var
    y = (x - mean.reshape(shape)) * (var.reshape(shape) + eps).rsqrt()
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5) -> Tensor:  # fmt: skip
    """Normalize each (sample, channel) over the spatial dims. With ``use_input_stats``
    those statistics are used, and running ones (if given) move toward their mean over the
    batch (the unbiased variance, as torch keeps it); without, the running ones are."""
    axes = tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if use_input_stats:
        mean = x.mean(axes, keepdim=True)
        var = x.var(axes, keepdim=True, correction=0)
        if running_mean is not None:
            n = math.prod(x.shape[2:])
            with no_grad():
                m = mean.detach().mean(0).reshape(-1)
                v = (var.detach() * (n / max(n - 1, 1))).mean(0).reshape(-1)
                running_mean.assign(running_mean * (1 - momentum) + m * momentum)
                running_var.assign(running_var * (1 - momentum) + v * momentum)
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    y = (x - mean) * (var + eps).rsqrt()
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def scaled_dot_product_attention(
    q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal=False, scale=None
) -> Tensor:
    """torch's signature. Without a mask or dropout this is limn's fused attention
    (``limn.attention``); an ``attn_mask`` (bool: True takes part; float: added to the
    scores) or ``dropout_p`` composes it from matmul and softmax."""
    if attn_mask is None and dropout_p == 0:
        return _sdpa(q, k, v, is_causal=is_causal, scale=scale)
    s = (q @ k.mT) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        later = Tensor.ones(s.shape[-2:], dtype="bool", device=s.device).triu(1)
        s = s.masked_fill(later, -math.inf)
    if attn_mask is not None:
        s = attn_mask.where(s, -math.inf) if attn_mask.dtype == dtypes.bool_ else s + attn_mask
    return s.softmax(-1).dropout(dropout_p) @ v


# ---- normalization and shuffles -------------------------------------------------


def group_norm(x: Tensor, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    n, c = x.shape[0], x.shape[1]
    if c % num_groups:
        raise ValueError(f"group_norm: {c} channels do not split in {num_groups} groups")
    g = x.reshape(n, num_groups, x.numel() // max(1, n * num_groups))
    y = (g - g.mean(-1, keepdim=True)) * (g.var(-1, keepdim=True, correction=0) + eps).rsqrt()
    y = y.reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def pixel_shuffle(x: Tensor, upscale_factor: int) -> Tensor:
    r = upscale_factor
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: {c} channels are not divisible by {r}**2")
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(x: Tensor, downscale_factor: int) -> Tensor:
    r = downscale_factor
    *lead, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"pixel_unshuffle: {h}x{w} is not divisible by {r}")
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    n, c = x.shape[0], x.shape[1]
    if c % groups:
        raise ValueError(f"channel_shuffle: {c} channels do not split in {groups} groups")
    rest = x.shape[2:]
    return x.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(x.shape)
