"""torch's ``native_*`` normalizations: ``layer_norm``, ``group_norm`` and ``batch_norm``
(``limn.nn.functional``'s) with the statistics they saved, the mean and 1/sqrt(var + eps),
as torch's ``native_layer_norm`` and kin answer them.
"""

from __future__ import annotations


def native_layer_norm(input, normalized_shape, weight, bias, eps: float):
    """(layer_norm, its mean, 1/sqrt(var + eps)), the statistics kept as size-1 dims."""
    from limn.nn import functional as F

    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    mean = input.mean(axes, keepdim=True)
    rstd = (input.var(axes, keepdim=True, correction=0) + eps).rsqrt()
    return F.layer_norm(input, normalized_shape, weight, bias, eps), mean, rstd


def native_group_norm(input, weight, bias, N: int, C: int, HxW: int, group: int, eps: float):
    """(group_norm, each (sample, group)'s mean and 1/sqrt(var + eps)), each (N, group)."""
    from limn.nn import functional as F

    g = input.reshape(N, group, C // group * HxW)
    rstd = (g.var(-1, correction=0) + eps).rsqrt()
    return F.group_norm(input, group, weight, bias, eps), g.mean(-1), rstd


def native_batch_norm(input, weight, bias, running_mean, running_var, training: bool,
                      momentum: float, eps: float):  # fmt: skip
    """(batch_norm, the batch's mean and 1/sqrt(var + eps) per channel); in evaluation
    the two are empty, as torch's. Training writes the running statistics."""
    from limn.nn import functional as F

    out = F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    if not training:
        return out, input.new_zeros(0), input.new_zeros(0)
    axes = (0, *range(2, input.ndim))
    return out, input.mean(axes), (input.var(axes, correction=0) + eps).rsqrt()
