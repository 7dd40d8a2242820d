"""Distances and normalization by a norm, in torch.nn.functional's names and signatures:
what ``limn/nn/functional.py`` exports and the metric losses (``limn/nn/losses.py``) use."""

from __future__ import annotations

from limn.tensor import Tensor


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
