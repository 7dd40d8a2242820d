"""limn.nn.functional's losses, in torch.nn.functional's names and signatures.

Each is a short composition of Tensor methods; ``limn/nn/functional.py`` exports them.
The formulas are torch's documented ones (``tests/test_opinfo.py`` checks each against
torch on its own samples).
"""

from __future__ import annotations

import math

from ir.graph import dtypes
from limn.nn.activations import logsigmoid
from limn.nn.distances import pairwise_distance
from limn.ops.joining import cat, stack
from limn.runtime.profile import name_gather
from limn.tensor import Tensor

log_softmax, one_hot = Tensor.log_softmax, Tensor.one_hot


def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return loss if reduction == "none" else getattr(loss, reduction)()


def _same_shape(a: Tensor, b: Tensor, name: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name}: input {a.shape} and target {b.shape} must share a shape")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error, averaged (or summed) over every element."""
    if input.shape != target.shape:
        raise ValueError(
            f"mse_loss: input {input.shape} and target {target.shape} must share a shape"
        )
    return _reduce((input - target).square(), reduction, "mse_loss")


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce((input - target).abs(), reduction, "l1_loss")


def binary_cross_entropy_with_logits(
    x: Tensor,
    y: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """-(p y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))) for ``pos_weight`` p, as
    (1 - y) x + (1 + (p - 1) y) (log1p(exp(-|x|)) + max(-x, 0)): finite for any logit;
    ``weight`` scales each element."""
    if x.shape != y.shape:
        raise ValueError(
            f"binary_cross_entropy_with_logits: input {x.shape} and target {y.shape} must "
            "share a shape"
        )
    softplus_neg = (-x.abs()).exp().log1p() + (-x).maximum(0)  # -log sigmoid(x)
    if pos_weight is None:
        loss = x.maximum(0) - x * y + (-x.abs()).exp().log1p()
    else:
        loss = (1 - y) * x + (1 + (pos_weight - 1) * y) * softplus_neg
    loss = loss if weight is None else loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def cross_entropy(
    logits: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """-log softmax(logits)[target] from raw logits and integer class ids, or the
    cross-entropy with class probabilities (a float target shaped as the logits).

    logits (N, C) or (N, C, *d) with target (N,) or (N, *d), or logits (C,) with a 0-d
    target, as in torch. log_softmax subtracts the row max before exponentiating, so huge
    logits stay finite. Targets equal to ``ignore_index`` count for nothing; ``weight``
    scales each class, and the mean is over the weights of the targets counted, as torch's.
    """
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if target.dtype.is_float and target.shape == logits.shape and logits.ndim:
        return _soft_cross_entropy(logits, target, weight, reduction, label_smoothing)
    return _nll(logits, target, weight, reduction, ignore_index, "cross_entropy", label_smoothing)


def linear_cross_entropy(input: Tensor, linear_weight: Tensor, target: Tensor, *,
                         linear_bias=None, weight=None, reduction: str = "mean",
                         ignore_index: int | None = None, label_smoothing: float = 0.0,
                         options=None) -> Tensor:  # fmt: skip
    """cross_entropy of the logits ``input`` projected by ``linear_weight`` (C, *K, in): the
    classes, and any further dims of a K-dimensional loss. torch's ``options`` choose how it
    chunks the batch to save memory; limn computes the logits whole and ignores them."""
    name = "linear_cross_entropy"
    if input.ndim not in (1, 2) or linear_weight.ndim < 2:
        raise ValueError(f"{name}: needs an input (N, in) or (in,) and a linear_weight "
                         f"(C, *K, in), got {input.shape} and {linear_weight.shape}")  # fmt: skip
    if linear_weight.shape[-1] != input.shape[-1] or input.ndim == 1 and linear_weight.ndim > 2:
        n = input.shape[-1]
        raise ValueError(f"{name}: linear_weight {linear_weight.shape} must be (C, {n}), or "
                         f"(C, *K, {n}) for a batched input, got input {input.shape}")  # fmt: skip
    if linear_bias is not None and tuple(linear_bias.shape) != tuple(linear_weight.shape[:-1]):
        raise ValueError(
            f"{name}: linear_bias {linear_bias.shape} must be {linear_weight.shape[:-1]}"
        )
    if ignore_index is not None and target.dtype.is_float:
        raise ValueError(f"{name}: ignore_index cannot be given with a target of probabilities")
    w = linear_weight.reshape(-1, linear_weight.shape[-1])
    logits = (input @ w.T).reshape(*input.shape[:-1], *linear_weight.shape[:-1])
    logits = logits if linear_bias is None else logits + linear_bias
    ignore = -100 if ignore_index is None else ignore_index
    return cross_entropy(logits, target, weight, ignore_index=ignore, reduction=reduction,
                         label_smoothing=label_smoothing)  # fmt: skip


def nll_loss(
    logp: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """-logp[target], for log-probabilities laid out as cross_entropy's logits."""
    return _nll(logp, target, weight, reduction, ignore_index, "nll_loss", 0.0)


def _class_weight(weight, scores, class_axis, name):
    c = scores.shape[class_axis]
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != c):
        raise ValueError(f"{name}: weight must hold one value per class ({c}), got {weight.shape}")
    return weight


def _soft_cross_entropy(logits, target, weight, reduction, smoothing):
    class_axis = 0 if logits.ndim == 1 else 1
    weight = _class_weight(weight, logits, class_axis, "cross_entropy")
    c = logits.shape[class_axis]
    if smoothing:
        target = target * (1 - smoothing) + smoothing / c
    logp = logits.log_softmax(class_axis)
    if weight is not None:
        logp = logp * weight.reshape(c, *[1] * (logits.ndim - class_axis - 1))
    loss = -(logp * target).sum(class_axis)
    if reduction == "mean":
        return loss.sum() / max(1, loss.numel())
    return _reduce(loss, reduction, "cross_entropy")


def _nll(scores, target, weight, reduction, ignore_index, name, smoothing):
    if not target.dtype.is_int:
        raise TypeError(
            f"{name}: target must hold integer class ids (or, for cross_entropy, float "
            f"class probabilities of the logits' shape), got {target.dtype}{list(target.shape)}"
        )
    class_axis = 0 if scores.ndim == 1 else 1
    expected = scores.shape[:class_axis] + scores.shape[class_axis + 1 :]
    if scores.ndim == 0 or target.shape != expected:
        raise ValueError(
            f"{name}: logits {scores.shape} need target of shape {expected} "
            f"(class dim {class_axis} removed), got {target.shape}"
        )
    weight = _class_weight(weight, scores, class_axis, name)
    order = tuple(a for a in range(scores.ndim) if a != class_axis) + (class_axis,)
    logp = scores.permute(order)  # classes last
    logp = logp.log_softmax(-1) if name == "cross_entropy" else logp
    keep = target != ignore_index
    safe = keep.where(target, 0)
    picked = name_gather(logp.gather(-1, safe.unsqueeze(-1)), name).squeeze(-1)
    w = keep.cast(logp.dtype) if weight is None else keep.where(weight.cast(logp.dtype)[safe], 0.0)
    nll = -picked * w
    if smoothing:
        spread = -(logp if weight is None else logp * weight).sum(-1) / logp.shape[-1]
        nll = nll * (1 - smoothing) + keep.where(spread, 0.0) * smoothing
    if reduction == "mean":
        return nll.sum() / w.sum()
    return _reduce(nll, reduction, name)


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
