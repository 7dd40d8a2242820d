"""Matrix decompositions: inverse, determinant, solve, singular and symmetric eigenvalues.

These are iterative or pivoting algorithms (LU with pivoting, Householder QR sweeps,
Jacobi or QR iterations for eigenvalues), not fixed loops over the primitives: limn
computes them on the host, as numpy's LAPACK does, in float64, rounding the result once
to the input's dtype. So each reads its input's value when called (as ``nonzero`` does),
and the result is a value computed now. The gradients are composed from the results, so
they run on the tensor's device and flow on through autograd:

- inverse: d(A^-1) = -A^-1 dA A^-1, so the gradient is -A^-T g A^-T;
- determinant: d det A = det A tr(A^-1 dA), so g det(A) A^-T (log|det|: g A^-T);
- singular values: ds_i = u_i^T dA v_i, so U diag(g) V^T (distinct values);
- symmetric eigenvalues: dl_i = v_i^T dA v_i, so V diag(g) V^T.

``solve`` is ``inv(A) @ B`` and the matrix norms of singular values ('nuc', 2, -2) are
sums and extremes of ``svdvals``, so their gradients come from these.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ir.graph import dtypes
from limn.tensor import Tensor


def _square(a: Tensor, op: str) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or not a.dtype.is_float:
        raise ValueError(
            f"{op}: needs float square matrices (..., n, n), got {a.dtype}{list(a.shape)}"
        )


def _host(a: Tensor) -> np.ndarray:
    return np.asarray(a.detach().numpy(), np.float64)


def _result(a: Tensor, value: np.ndarray, rule=None, saved=None, dtype=None) -> Tensor:
    """``value`` (host float64) as a Tensor of ``a``'s dtype on its device, recording
    ``rule`` for the gradient with respect to ``a``."""
    d = dtype or a.dtype
    t = Tensor(np.asarray(value).astype(dtypes.to_numpy(d)), dtype=d, device=a.device)
    return Tensor._make(t.node, a.device, rule, (a,), saved) if rule else t


def _mT(x: Tensor) -> Tensor:  # noqa: N802
    return x.transpose(-1, -2)


def inv(a: Tensor) -> Tensor:
    """A^-1; a singular matrix raises, as torch's."""
    _square(a, "linalg.inv")
    try:
        value = np.linalg.inv(_host(a))
    except np.linalg.LinAlgError as e:
        raise ValueError(f"linalg.inv: the matrix {list(a.shape)} is singular ({e})") from None
    return _result(a, value, _inv_grad)


def _inv_grad(ctx, out, g):
    t = _mT(out.detach())
    return (-(t @ g @ t),)


class InvEx(NamedTuple):
    inverse: Tensor
    info: Tensor


def inv_ex(a: Tensor, *, check_errors: bool = False) -> InvEx:
    """torch's ``(inverse, info)``: info 0 where the matrix was inverted; a singular one
    raises (limn has no partial result to hand back)."""
    out = inv(a)
    return InvEx(out, Tensor.zeros(a.shape[:-2], dtype=dtypes.int32, device=a.device))


def det(a: Tensor) -> Tensor:
    _square(a, "linalg.det")
    return _result(a, np.linalg.det(_host(a)), _det_grad)


def _det_grad(ctx, out, g):
    (a,) = ctx.parents
    scale = (g * out.detach()).unsqueeze(-1).unsqueeze(-1)
    return (scale * _mT(inv(a.detach())),)


class SlogDet(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def slogdet(a: Tensor) -> SlogDet:
    _square(a, "linalg.slogdet")
    sign, logabs = np.linalg.slogdet(_host(a))
    return SlogDet(_result(a, sign), _result(a, logabs, _logabsdet_grad))


def _logabsdet_grad(ctx, out, g):
    (a,) = ctx.parents
    return (g.unsqueeze(-1).unsqueeze(-1) * _mT(inv(a.detach())),)


def logdet(a: Tensor) -> Tensor:
    """log det A: nan where the determinant is negative, -inf where it is zero."""
    sign, logabs = slogdet(a)
    return (sign < 0).where(float("nan"), logabs).cast(a.dtype)


def solve(a: Tensor, b: Tensor, *, left: bool = True) -> Tensor:
    """X with A X = B (``left=False``: X A = B). B is a batch of vectors where torch reads
    it so: 1-d, or A's batch shape with one vector each."""
    _square(a, "linalg.solve")
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    if vector:
        x = (inv(a) @ b.unsqueeze(-1)).squeeze(-1) if left else (b.unsqueeze(-2) @ inv(a))
        return x if left else x.squeeze(-2)
    return inv(a) @ b if left else b @ inv(a)


class SolveEx(NamedTuple):
    result: Tensor
    info: Tensor


def solve_ex(a: Tensor, b: Tensor, *, left: bool = True, check_errors: bool = False) -> SolveEx:
    x = solve(a, b, left=left)
    return SolveEx(x, Tensor.zeros(a.shape[:-2], dtype=dtypes.int32, device=a.device))


def svdvals(a: Tensor) -> Tensor:
    """The singular values of each matrix (..., m, n), largest first."""
    if a.ndim < 2 or not a.dtype.is_float:
        raise ValueError(f"linalg.svdvals: needs float matrices, got {a.dtype}{list(a.shape)}")
    u, s, vh = np.linalg.svd(_host(a), full_matrices=False)
    saved = (_result(a, u), _result(a, vh))
    return _result(a, s, _svdvals_grad, saved)


def _svdvals_grad(ctx, out, g):
    u, vh = ctx.saved
    return ((u * g.unsqueeze(-2)) @ vh,)


def eigvalsh(a: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803  (torch's name)
    """The eigenvalues of each symmetric matrix, ascending, from its lower (or ``UPLO="U"``
    upper) triangle."""
    _square(a, "linalg.eigvalsh")
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigvalsh: UPLO must be 'L' or 'U', got {UPLO!r}")
    w, v = np.linalg.eigh(_host(a), UPLO)
    return _result(a, w, _eigvalsh_grad, (_result(a, v),))


def _eigvalsh_grad(ctx, out, g):
    (v,) = ctx.saved
    return ((v * g.unsqueeze(-2)) @ _mT(v),)


# torch's Tensor methods and free functions of the same (``x.det()``, ``limn.logdet(x)``)
Tensor.det, Tensor.logdet, Tensor.slogdet, Tensor.inverse = det, logdet, slogdet, inv
