"""Pairs of rows: ``combinations`` of a vector's entries, and the distances between rows,
``cdist`` (every row of one set against every row of another) and ``pdist`` (every pair
within one set). Which entries pair up depends on the sizes alone, so the pairs are
picked by an index made on the host and gathered; the distances are p-norms of the
differences, composed, so they take gradients."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ir.graph import dtypes
from limn.tensor import Tensor


def combinations(self: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of a 1-d tensor's entries, one per row, in
    lexicographic order of position (itertools')."""
    if self.ndim != 1 or r < 0:
        raise ValueError(f"combinations: needs a 1-d input and r >= 0, got {self.shape}, r={r}")
    if r == 0:
        return self[:0]
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = np.array(list(pick(range(self.shape[0]), r)), np.int64).reshape(-1, r)
    idx = Tensor(rows.reshape(-1), dtype=dtypes.int64, device=self.device)
    return self.index_select(0, idx).reshape(rows.shape[0], r)


def _p_norm(d: Tensor, p: float) -> Tensor:
    """The p-norm of ``d`` over its last dim (0: how many are not zero; inf: the max)."""
    if p == 0:
        return (d != 0).sum(-1).cast(d.dtype)
    if p == math.inf:
        return d.abs().amax(-1) if d.shape[-1] else d.sum(-1)
    return d.norm(p, -1)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode=None) -> Tensor:
    """(..., P, M) and (..., R, M) -> (..., P, R): the p-norm of every difference of rows."""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1] or p < 0:
        raise ValueError(
            f"cdist: needs (..., P, M) and (..., R, M) with the same M and p >= 0, got "
            f"{x1.shape}, {x2.shape}, p={p}"
        )
    if not x1.dtype.is_float or x1.dtype != x2.dtype:
        raise TypeError(f"cdist: needs two float inputs of one dtype, got {x1.dtype}, {x2.dtype}")
    return _p_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """(N, M) -> (N (N - 1) / 2,): the p-norm between rows i < j, row-major."""
    if input.ndim != 2 or p < 0:
        raise ValueError(f"pdist: needs a 2-d input and p >= 0, got {input.shape}, p={p}")
    n = input.shape[0]
    i, j = np.triu_indices(n, 1)
    a = input.index_select(0, Tensor(i.astype(np.int64), device=input.device))
    b = input.index_select(0, Tensor(j.astype(np.int64), device=input.device))
    return _p_norm(a - b, p)


Tensor.combinations = combinations
