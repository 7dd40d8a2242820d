"""More of torch.nn.functional: activations, normalizations, distances and losses.

Each is a short composition of Tensor methods in torch's signature, exported by
``limn/nn/functional.py``; the formulas are torch's documented ones (``tests/test_opinfo.py``
checks each against torch on its own samples).
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from limn.ops.inplace import inplace_flag
from limn.ops.joining import cat, stack
from limn.tensor import Tensor


def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return loss if reduction == "none" else getattr(loss, reduction)()


def _same_shape(a: Tensor, b: Tensor, name: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name}: input {a.shape} and target {b.shape} must share a shape")


# ---- activations ------------------------------------------------------------------


@inplace_flag
def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(x, 0.0, 6.0)


@inplace_flag
def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace=False) -> Tensor:
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} is above max_val {max_val}")
    return x.clamp(min_val, max_val).cast(x.dtype)


@inplace_flag
def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (x > 0).where(x, (x.expm1() * alpha).cast(x.dtype))


@inplace_flag
def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (x > 0).where(x, ((x / alpha).expm1() * alpha).cast(x.dtype))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


@inplace_flag
def selu(x: Tensor, inplace: bool = False) -> Tensor:
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


@inplace_flag
def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    return (x / 6 + 0.5).clamp(0.0, 1.0)


@inplace_flag
def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    return x * (x + 3).clamp(0.0, 6.0) / 6


def logsigmoid(x: Tensor) -> Tensor:
    return -(-x).softplus()


@inplace_flag
def mish(x: Tensor, inplace: bool = False) -> Tensor:
    return x * x.softplus().tanh()


def softsign(x: Tensor) -> Tensor:
    return x / (1 + x.abs())


def tanhshrink(x: Tensor) -> Tensor:
    return x - x.tanh()


@inplace_flag
def threshold(x: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return (x > threshold).where(x, value).cast(x.dtype)


def softshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    if lambd < 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lambd}")
    return (x > lambd).where(x - lambd, (x < -lambd).where(x + lambd, 0.0)).cast(x.dtype)


def hardshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    return ((x > lambd) | (x < -lambd)).where(x, 0.0).cast(x.dtype)


def glu(x: Tensor, dim: int = -1) -> Tensor:
    if x.ndim == 0 or x.shape[dim] % 2:
        raise ValueError(f"glu: dim {dim} of {x.shape} must have an even size")
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """max(0, x) + weight * min(0, x), one weight or one per channel (dim 1)."""
    if (
        weight.ndim > 1
        or weight.numel() != 1
        and (x.ndim < 1 or weight.numel() != x.shape[min(1, x.ndim - 1)])
    ):
        raise ValueError(f"prelu: {weight.numel()} weights do not fit input {x.shape}")
    w = weight.reshape(()) if weight.numel() == 1 else weight
    if w.ndim and x.ndim > 1:
        w = w.reshape(-1, *[1] * (x.ndim - 2))
    return (x > 0).where(x, x * w)


def softmin(x: Tensor, dim=None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return (-x if dtype is None else -x.cast(dtype)).softmax(-1 if dim is None else dim)


# ---- normalization and distances --------------------------------------------------


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    return x / x.norm(p, dim, keepdim=True).clamp(min=eps)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """torch's: each vector scaled by its norm clamped at ``eps`` before the dot product,
    the two broadcast against each other first."""
    x1, x2 = x1._align(x2, "cosine_similarity")
    n1 = (x1 * x1).sum(dim, keepdim=True).sqrt().clamp(min=eps)
    n2 = (x2 * x2).sum(dim, keepdim=True).sqrt().clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    d = x1 - x2 + eps
    return d.norm(p, -1, keepdim) if d.ndim else d.abs()


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


# ---- losses -----------------------------------------------------------------------


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:  # fmt: skip
    """-(y log p + (1 - y) log(1 - p)), each log clamped at -100, as torch's."""
    _same_shape(input, target, "binary_cross_entropy")
    logp = input.log().clamp(min=-100)
    log1mp = (1 - input).log().clamp(min=-100)
    loss = -(target * logp + (1 - target) * log1mp)
    loss = loss if weight is None else loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = (input - target).abs()
    loss = d if beta == 0 else (d < beta).where(0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(loss, reduction, "smooth_l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    d = (input - target).abs()
    loss = (d < delta).where(0.5 * d * d, delta * (d - 0.5 * delta))
    loss = loss if weight is None else loss * weight
    return _reduce(loss, reduction, "huber_loss")


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = target.xlogy(target) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction, "kl_div")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _reduce((-target * input).exp().log1p(), reduction, "soft_margin_loss")


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):  # fmt: skip
    loss = (-target * (input1 - input2) + margin).clamp(min=0)
    return _reduce(loss, reduction, "margin_ranking_loss")


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):  # fmt: skip
    # torch's: the margin term wherever the target is not 1, the input wherever it is not
    # -1 (both for a target that is neither)
    margin_part = (margin - input).clamp(min=0)
    loss = (target != 1).where(margin_part, 0.0) + (target != -1).where(input, 0.0)
    return _reduce(loss.cast(input.dtype), reduction, "hinge_embedding_loss")


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):  # fmt: skip
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + (target > 1).where(stirling, 0.0)
    return _reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    if var.ndim == input.ndim - 1 or var.shape != input.shape and var.shape[-1:] != (1,):
        var = var.unsqueeze(-1) if var.ndim == input.ndim - 1 else var
    if (var < 0).any().item():
        raise ValueError("gaussian_nll_loss: var has negative entries")
    v = var.clamp(min=eps)
    loss = 0.5 * (v.log() + (input - target).square() / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):  # fmt: skip
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    loss = loss if weight is None else loss * weight
    loss = loss.mean(-1) if input.ndim else loss
    return _reduce(loss, reduction, "multilabel_soft_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):  # fmt: skip
    eps = 1e-12
    dot = (input1 * input2).sum(-1)
    n = ((input1 * input1).sum(-1) + eps) * ((input2 * input2).sum(-1) + eps)
    cos = dot / n.sqrt()
    loss = (target == 1).where(1 - cos, 0.0) + (target == -1).where(
        (cos - margin).clamp(min=0), 0.0
    )
    return _reduce(loss, reduction, "cosine_embedding_loss")


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):  # fmt: skip
    if margin <= 0:
        raise ValueError(f"triplet_margin_loss: margin must be > 0, got {margin}")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    loss = (d_pos - d_neg + margin).clamp(min=0)
    return _reduce(loss, reduction, "triplet_margin_loss")


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):  # fmt: skip
    """``triplet_margin_loss`` with any distance (``pairwise_distance`` by default)."""
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: margin must be > 0, got {margin}")
    dist = distance_function or pairwise_distance
    d_pos, d_neg = dist(anchor, positive), dist(anchor, negative)
    if swap:
        d_neg = d_neg.minimum(dist(positive, negative))
    loss = (d_pos - d_neg + margin).clamp(min=0)
    return _reduce(loss, reduction, "triplet_margin_with_distance_loss")


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):  # fmt: skip
    """sum over the classes i other than the target y of max(0, margin - x[y] + x[i])^p,
    over the number of classes (scaled by ``weight[y]``)."""
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: p must be 1 or 2, got {p}")
    x = input if input.ndim == 2 else input.reshape(1, -1)
    y = target.reshape(-1, 1)
    if x.ndim != 2 or y.shape[0] != x.shape[0] or not target.dtype.is_int:
        raise ValueError(
            f"multi_margin_loss: input (N, C) or (C,) and target (N,) of class ids, got "
            f"{input.shape} and {target.dtype}{list(target.shape)}"
        )
    c = x.shape[1]
    xy = x.gather(1, y)
    terms = (margin - xy + x).clamp(min=0)
    terms = terms if p == 1 else terms * terms
    if weight is not None:
        terms = terms * weight.gather(0, y.reshape(-1)).reshape(-1, 1)
    others = y != Tensor.arange(c, device=x.device)
    loss = others.where(terms, 0.0).sum(1) / c
    loss = loss.cast(x.dtype).reshape(target.shape) if input.ndim == 2 else loss.reshape(())
    return _reduce(loss, reduction, "multi_margin_loss")


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """The target's labels (each row's class ids before its first -1) against every other
    class: sum of max(0, 1 - (x[label] - x[other])), over the number of classes."""
    x = input if input.ndim == 2 else input.reshape(1, -1)
    t = target if target.ndim == 2 else target.reshape(1, -1)
    if x.shape != t.shape or not target.dtype.is_int:
        raise ValueError(
            f"multilabel_margin_loss: input and target must share a shape (target of class "
            f"ids), got {input.shape} and {target.dtype}{list(target.shape)}"
        )
    c = x.shape[1]
    valid = (t != -1).cast(dtypes.int64).cumprod(1) > 0  # the ids before the first -1
    classes = Tensor.arange(c, device=x.device)
    names = (t.unsqueeze(-1) == classes) & valid.unsqueeze(-1)  # (N, slot, class)
    is_label = names.any(1)  # (N, C)
    xl = (names.cast(x.dtype) * x.unsqueeze(1)).sum(-1)  # x at each slot's label
    pair = (1 - (xl.unsqueeze(-1) - x.unsqueeze(1))).clamp(min=0)  # (N, slot, other)
    keep = valid.unsqueeze(-1) & ~is_label.unsqueeze(1)
    loss = keep.where(pair, 0.0).sum((1, 2)) / c
    loss = loss.cast(x.dtype) if input.ndim == 2 else loss.cast(x.dtype).reshape(())
    return _reduce(loss, reduction, "multilabel_margin_loss")


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:  # fmt: skip
    """Each element over (k + alpha * the mean of the squares of the ``size`` channels
    around it)^beta, the channels zero-padded as torch's."""
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: needs (N, C, *) with 3+ dims, got {input.shape}")
    if input.numel() == 0:  # torch's: the empty input itself
        return input.contiguous()
    c = input.shape[1]
    sq = (input * input).transpose(1, -1)
    padded = sq.pad(((size // 2, (size - 1) // 2),))
    total = sum(padded.narrow(-1, j, c) for j in range(size))
    total = total.transpose(1, -1)
    # torch's order of rounding, and its integer mean for an integer input
    mean = total / size if input.dtype.is_float else total.div(size, rounding_mode="floor")
    div = (mean * alpha + k) ** beta
    return input / div


def bilinear(input1, input2, weight, bias=None) -> Tensor:
    """y[..., o] = x1 W[o] x2 (+ bias[o])."""
    if (
        weight.ndim != 3
        or input1.shape[-1] != weight.shape[1]
        or input2.shape[-1] != weight.shape[2]
    ):
        raise ValueError(
            f"bilinear: weight (out, in1, in2) {weight.shape} does not fit inputs "
            f"{input1.shape} and {input2.shape}"
        )
    y = ((input1.unsqueeze(-2).unsqueeze(-1) * weight) * input2.unsqueeze(-2).unsqueeze(-2)).sum(
        (-1, -2)
    )
    return y if bias is None else y + bias


def _lse3(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """log(e**a + e**b + e**c), -inf where all three are, with no nan in the gradient. A
    reduction over the three stacked, so each step of a recursion is a kernel of its own
    (fused elementwise, the recursion's shared terms would be recomputed, 3**steps)."""
    x = stack([a, b, c], -1)
    m = x.amax(-1, keepdim=True).detach()
    none = m == -math.inf
    m = none.where(0.0, m)
    total = (x - m).exp().sum(-1, keepdim=True)
    return none.where(-math.inf, m + none.where(1.0, total).log()).squeeze(-1)


def _lengths(v, n: int, what: str) -> list[int]:
    v = v.tolist() if isinstance(v, Tensor) else v
    out = [int(i) for i in (v if isinstance(v, list | tuple) else [v])]
    if len(out) != n:
        raise ValueError(f"ctc_loss: {what} must hold one length per sample ({n}), got {len(out)}")
    return out


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:  # fmt: skip
    """Connectionist temporal classification: -log of the total probability of every
    alignment of each target to its input steps, by the forward algorithm over the target
    with a blank between and around its labels (a label may repeat a step, and skip the
    blank between two different labels). ``log_probs`` (T, N, C) (or (T, C)); ``targets``
    padded (N, S) or concatenated (sum of ``target_lengths``); the lengths read now.
    ``mean`` divides each loss by its target's length first; ``zero_infinity`` gives 0 for
    an impossible target. Each step is a lazy logsumexp, so the gradient is autograd's:
    d loss / d log_probs itself, where torch's adds exp(log_probs) (the two agree through a
    ``log_softmax``, which is how the loss is fed)."""
    op = "ctc_loss"
    if not log_probs.dtype.is_float or log_probs.ndim not in (2, 3):
        raise ValueError(
            f"{op}: log_probs must be float (T, N, C) or (T, C), got {log_probs.shape}"
        )
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    steps, n, classes = lp.shape
    if not 0 <= blank < classes:
        raise ValueError(f"{op}: blank {blank} is not one of the {classes} classes")
    t_len = _lengths(input_lengths, n, "input_lengths")
    s_len = _lengths(target_lengths, n, "target_lengths")
    if any(not 0 <= t <= steps for t in t_len) or any(s < 0 for s in s_len):
        raise ValueError(f"{op}: input lengths {t_len} must lie in 0..{steps}, targets' be >= 0")
    if targets.ndim == 2 or unbatched:  # padded, one row per sample
        rows = [r[:s] for r, s in zip(targets.reshape(n, -1).tolist(), s_len)]
    else:  # concatenated
        flat, at, rows = targets.tolist(), 0, []
        for s in s_len:
            rows.append(flat[at : at + s])
            at += s
    if any(len(r) != s for r, s in zip(rows, s_len)):
        raise ValueError(
            f"{op}: targets {targets.shape} hold fewer labels than target_lengths {s_len}"
        )
    width = 2 * max(s_len, default=0) + 1
    ext = [[blank] * width for _ in range(n)]  # the labels with a blank between and around
    for i, r in enumerate(rows):
        ext[i][1 : 2 * len(r) : 2] = r
    skip = [[s >= 2 and e[s] != blank and e[s] != e[s - 2] for s in range(width)] for e in ext]
    dev = lp.device
    index = Tensor(ext, dtype=dtypes.int64, device=dev)
    can_skip = Tensor(skip, dtype=dtypes.bool_, device=dev)
    picked = lp.gather(2, index.reshape(1, n, width).expand(steps, n, width))  # (T, N, width)
    pos = Tensor.arange(width, device=dev).reshape(1, width)
    start = pos < Tensor([[min(2, 2 * s + 1)] for s in s_len], dtype=dtypes.int64, device=dev)
    alpha = start.where(picked[0], -math.inf)
    live = Tensor([[t] for t in t_len], dtype=dtypes.int64, device=dev)
    floor = lp.new_full((n, 1), -math.inf)
    for t in range(1, steps):
        one = _shift(alpha, 1, floor)
        two = can_skip.where(_shift(alpha, 2, floor), -math.inf)
        step = _lse3(alpha, one, two) + picked[t]
        alpha = (live > t).where(step, alpha)
    last = Tensor([[2 * s] for s in s_len], dtype=dtypes.int64, device=dev)
    end = alpha.gather(1, last)
    before = (last > 0).where(alpha.gather(1, (last - 1).maximum(0)), -math.inf)
    loss = -_lse3(end, before, floor).reshape(n)
    if any(t == 0 for t in t_len):  # no steps: only an empty target has an alignment
        empty = Tensor([t == 0 for t in t_len], dtype=dtypes.bool_, device=dev)
        none = Tensor([s == 0 for s in s_len], dtype=dtypes.bool_, device=dev)
        loss = empty.where(none.where(0.0, math.inf), loss)
    if zero_infinity:
        loss = (loss == math.inf).where(0.0, loss)
    if reduction == "mean":
        per = Tensor([max(s, 1) for s in s_len], dtype=loss.dtype, device=dev)
        return (loss / per).mean()
    out = _reduce(loss, reduction, op)
    return out.reshape(()) if unbatched and reduction == "none" else out


def _shift(x: Tensor, k: int, floor: Tensor) -> Tensor:
    """x (N, W) moved k places right along W, -inf coming in."""
    if k >= x.shape[1]:
        return floor.expand(*x.shape)
    return cat([floor.expand(x.shape[0], k), x[:, : x.shape[1] - k]], 1)
