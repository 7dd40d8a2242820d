"""The factorizations LAPACK packs into one array, in torch's names: ``lu_factor``'s LU
(L below the diagonal, its unit diagonal implied, U on and above) with its row swaps, and
``geqrf``'s R with the Householder reflectors below it; and what reads them back
(``lu_unpack``, ``lu_solve``, ``householder_product``, ``ormqr``).

Like ``decompositions.py`` they are pivoting or sweeping algorithms, computed on the host
in float64 and rounded once to the input's dtype. LU is Gaussian elimination with
partial pivoting, row by row as LAPACK's ``getrf`` chooses (the first largest magnitude
in the column); the pivots are LAPACK's, 1-based int32, each the row swapped with row i
at step i. The results carry no gradient rule: each refuses an input that requires one.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ir.graph import dtypes
from limn.ops.decompositions import _host, _matrices, _no_gradient, _result
from limn.tensor import Tensor


def _getrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LU with partial pivoting of each matrix of ``a`` (..., m, n): (LU, 1-based pivots,
    info: 0, or the 1-based column whose pivot was zero)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    flat = a.reshape(-1, m, n).copy()
    pivots = np.zeros((flat.shape[0], k), np.int64)
    info = np.zeros(flat.shape[0], np.int64)
    for lu, piv, b in zip(flat, pivots, range(flat.shape[0])):
        for j in range(k):
            p = j + int(np.argmax(np.abs(lu[j:, j])))
            piv[j] = p + 1
            if lu[p, j] == 0:
                info[b] = info[b] or j + 1
                continue
            if p != j:
                lu[[j, p]] = lu[[p, j]]
            lu[j + 1 :, j] /= lu[j, j]
            lu[j + 1 :, j + 1 :] -= np.outer(lu[j + 1 :, j], lu[j, j + 1 :])
    batch = a.shape[:-2]
    return flat.reshape(a.shape), pivots.reshape(*batch, k), info.reshape(batch)


class LUFactor(NamedTuple):
    LU: Tensor  # noqa: N815  (torch's field names)
    pivots: Tensor


class LUFactorEx(NamedTuple):
    LU: Tensor  # noqa: N815
    pivots: Tensor
    info: Tensor


def _int32(a: Tensor, values: np.ndarray) -> Tensor:
    return Tensor(values.astype(np.int32), dtype=dtypes.int32, device=a.device)


def lu_factor_ex(a: Tensor, *, pivot: bool = True, check_errors: bool = False) -> LUFactorEx:
    op = "linalg.lu_factor"
    _matrices(a, op)
    if not pivot:
        raise ValueError(f"{op}: LU without pivoting is not computed on the host; pivot=True")
    _no_gradient(a, op)
    lu_, piv, info = _getrf(_host(a))
    if check_errors and info.any():
        raise ValueError(f"{op}: the matrix is singular (a zero pivot at column {info.max()})")
    return LUFactorEx(_result(a, lu_), _int32(a, piv), _int32(a, info))


def lu_factor(a: Tensor, *, pivot: bool = True) -> LUFactor:
    """A = P L U packed as LAPACK's getrf: (LU, pivots)."""
    out = lu_factor_ex(a, pivot=pivot)
    return LUFactor(out.LU, out.pivots)


def _unpack(lu_: np.ndarray, piv: np.ndarray):
    """(P, L, U) of a packed LU and its 1-based pivots, A = P L U."""
    m, n = lu_.shape[-2:]
    k = min(m, n)
    low = np.tril(lu_[..., :, :k], -1) + np.eye(m, k)
    up = np.triu(lu_[..., :k, :])
    perm = np.broadcast_to(np.arange(m), piv.shape[:-1] + (m,)).copy()
    count = math.prod(piv.shape[:-1])
    flat_perm, flat_piv = perm.reshape(count, m), piv.reshape(count, piv.shape[-1])
    for order, swaps in zip(flat_perm, flat_piv):
        for i, p in enumerate(swaps[:k]):
            order[[i, p - 1]] = order[[p - 1, i]]
    p_mat = np.zeros(perm.shape + (m,))
    np.put_along_axis(p_mat, perm[..., :, None], 1.0, -1)  # row i of P^T is e_perm[i]
    return np.swapaxes(p_mat, -1, -2), low, up


class PLU(NamedTuple):
    P: Tensor  # noqa: N815
    L: Tensor  # noqa: N815
    U: Tensor  # noqa: N815


def lu(a: Tensor, *, pivot: bool = True) -> PLU:
    """A = P L U: P a permutation, L unit lower triangular (m, k), U upper (k, n)."""
    lu_, piv = lu_factor(a, pivot=pivot)
    p, low, up = _unpack(_host(lu_), piv.numpy().astype(np.int64))
    return PLU(_result(a, p), _result(a, low), _result(a, up))


def lu_unpack(LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True,  # noqa: N803
              unpack_pivots: bool = True) -> PLU:  # fmt: skip
    """(P, L, U) of ``lu_factor``'s answer; what is not unpacked is an empty tensor."""
    _matrices(LU_data, "lu_unpack")
    if not LU_pivots.dtype.is_int:
        raise TypeError(f"lu_unpack: pivots must be integers, got {LU_pivots.dtype}")
    p, low, up = _unpack(_host(LU_data), LU_pivots.numpy().astype(np.int64))
    empty = np.zeros(0)
    return PLU(
        _result(LU_data, p if unpack_pivots else empty),
        _result(LU_data, low if unpack_data else empty),
        _result(LU_data, up if unpack_data else empty),
    )


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:]
    return np.linalg.solve(a, b) if math.prod(shape) else np.zeros(shape)


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True,  # noqa: N803
             adjoint: bool = False) -> Tensor:  # fmt: skip
    """X with A X = B (``left=False``: X A = B; ``adjoint``: A^T in A's place), A = P L U
    given by ``lu_factor``."""
    op = "linalg.lu_solve"
    _matrices(LU, op)
    n = LU.shape[-1]
    if LU.shape[-2] != n or B.ndim < 2 or B.shape[-2 if left else -1] != n:
        raise ValueError(
            f"{op}: needs a square LU (..., n, n) and B (..., n, k) (left) or (..., k, n), "
            f"got {LU.shape} and {B.shape}"
        )
    _no_gradient(B, op)
    p, low, up = _unpack(_host(LU), pivots.numpy().astype(np.int64))
    a = p @ low @ up
    a = np.swapaxes(a, -1, -2) if adjoint else a
    b = _host(B)
    if left:
        x = _solve(a, b)
    else:  # X A = B is A^T X^T = B^T
        x = np.swapaxes(_solve(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    return _result(B, x)


def old_lu(a: Tensor, pivot: bool = True, get_infos: bool = False):
    """torch.lu: (LU, pivots), with the infos when ``get_infos``."""
    out = lu_factor_ex(a, pivot=pivot)
    return tuple(out) if get_infos else (out.LU, out.pivots)


def old_lu_solve(b: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:  # noqa: N803
    """torch.lu_solve: B first."""
    return lu_solve(LU_data, LU_pivots, b)


# ---- Householder QR as LAPACK packs it --------------------------------------------------


class Geqrf(NamedTuple):
    a: Tensor
    tau: Tensor


def geqrf(a: Tensor) -> Geqrf:
    """LAPACK's QR: R on and above the diagonal, the reflectors' vectors below it (each
    with an implied 1 on the diagonal), and their scales ``tau``."""
    _matrices(a, "geqrf")
    _no_gradient(a, "geqrf")
    h, tau = np.linalg.qr(_host(a), mode="raw")
    return Geqrf(_result(a, np.swapaxes(h, -1, -2)), _result(a, tau))


def _reflectors(v: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Q = H_1 H_2 ... H_k (m, m), H_i = I - tau_i v_i v_i^T, v_i column i of ``v`` below
    the diagonal with a 1 on it."""
    m = v.shape[-2]
    q = np.broadcast_to(np.eye(m), v.shape[:-2] + (m, m)).copy()
    for i in reversed(range(tau.shape[-1])):
        vi = np.concatenate([np.zeros(v.shape[:-2] + (i,)), np.ones(v.shape[:-2] + (1,)),
                             v[..., i + 1 :, i]], -1)[..., None]  # fmt: skip
        q = q - tau[..., i, None, None] * vi @ (np.swapaxes(vi, -1, -2) @ q)
    return q


def _check_reflectors(a: Tensor, tau: Tensor, op: str) -> None:
    _matrices(a, op)
    m, n = a.shape[-2:]
    if (
        tau.dtype != a.dtype
        or tau.shape[-1] > min(m, n)
        or tuple(tau.shape[:-1]) != tuple(a.shape[:-2])
    ):
        raise ValueError(
            f"{op}: tau must be (..., k) with k <= min(m, n) = {min(m, n)} and the input's "
            f"batch and dtype, got {tau.dtype}{list(tau.shape)} for {a.dtype}{list(a.shape)}"
        )


def householder_product(A: Tensor, tau: Tensor) -> Tensor:  # noqa: N803
    """The first n columns of the product of the reflectors in A (m, n) scaled by tau:
    the Q of ``geqrf``."""
    op = "linalg.householder_product"
    _check_reflectors(A, tau, op)
    if A.shape[-2] < A.shape[-1]:
        raise ValueError(f"{op}: needs m >= n, got {A.shape}")
    _no_gradient(A, op)
    return _result(A, _reflectors(_host(A), _host(tau))[..., : A.shape[-1]])


def ormqr(input: Tensor, tau: Tensor, other: Tensor, left: bool = True,
          transpose: bool = False) -> Tensor:  # fmt: skip
    """``other`` multiplied by the Q of ``geqrf``'s reflectors: Q C (``left``) or C Q,
    Q^T with ``transpose``."""
    op = "ormqr"
    _check_reflectors(input, tau, op)
    if other.dtype != input.dtype or other.ndim < 2:
        raise ValueError(f"{op}: other must be matrices of the input's dtype, got {other.dtype}")
    _no_gradient(input, op)
    q = _reflectors(_host(input), _host(tau))
    q = np.swapaxes(q, -1, -2) if transpose else q
    c = _host(other)
    return _result(other, q @ c if left else c @ q)


Tensor.lu = old_lu
Tensor.lu_solve = old_lu_solve
Tensor.geqrf, Tensor.ormqr = geqrf, ormqr
