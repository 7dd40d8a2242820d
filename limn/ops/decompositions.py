"""Matrix decompositions: inverse, determinant, solve, singular and symmetric eigenvalues,
and the factors themselves: QR, SVD, symmetric eigenvectors, the pseudo-inverse, least
squares (the LU and Householder forms LAPACK packs are in ``lapack.py``).

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

``matrix_exp`` is composed on the device (scaling and squaring a Taylor series), its scale
read from the input's norm. ``solve`` is ``inv(A) @ B`` and the matrix norms of singular
values ('nuc', 2, -2) are sums and extremes of ``svdvals``, so their gradients come from
these.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ir.graph import dtypes
from limn.ops.joining import stack
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


# ---- factorizations without a gradient rule here, and what is composed of the above -----


def _no_gradient(a: Tensor, op: str) -> None:
    """A result computed on the host without a rule: refused where a gradient would be
    needed, rather than silently cut from the graph."""
    from limn.autograd import grad_enabled

    if a.requires_grad and grad_enabled():
        raise NotImplementedError(
            f"{op}: limn has no gradient for it; compute it under limn.no_grad() or from "
            "a detached input"
        )


def cholesky(a: Tensor, *, upper: bool = False) -> Tensor:
    """L with A = L L^T (``upper``: U with A = U^T U) of a symmetric positive-definite A."""
    _square(a, "linalg.cholesky")
    _no_gradient(a, "linalg.cholesky")
    try:
        low = np.linalg.cholesky(_host(a))
    except np.linalg.LinAlgError as e:
        raise ValueError(f"linalg.cholesky: the matrix is not positive-definite ({e})") from None
    return _result(a, np.swapaxes(low, -1, -2) if upper else low)


class CholeskyEx(NamedTuple):
    L: Tensor  # noqa: N815  (torch's field name)
    info: Tensor


def cholesky_ex(a: Tensor, *, upper: bool = False, check_errors: bool = False) -> CholeskyEx:
    out = cholesky(a, upper=upper)
    return CholeskyEx(out, Tensor.zeros(a.shape[:-2], dtype=dtypes.int32, device=a.device))


def _triangle(a: Tensor, upper: bool, unit: bool) -> Tensor:
    t = a.triu() if upper else a.tril()
    if unit:
        n = a.shape[-1]
        eye = Tensor.eye(n, dtype=dtypes.bool_, device=a.device)
        t = eye.where(1.0, t).cast(a.dtype)
    return t


def solve_triangular(a: Tensor, b: Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> Tensor:  # fmt: skip
    """X with A X = B (``left=False``: X A = B), A's other triangle (and with
    ``unitriangular`` its diagonal) not read: ``solve`` of that triangle."""
    _square(a, "linalg.solve_triangular")
    if b.ndim < 2:
        raise ValueError(f"linalg.solve_triangular: B must be a matrix, got {b.shape}")
    t = _triangle(a, upper, unitriangular)
    return t.inverse() @ b if left else b @ t.inverse()


class TriangularSolve(NamedTuple):
    solution: Tensor
    cloned_coefficient: Tensor


def triangular_solve(b: Tensor, a: Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> TriangularSolve:  # fmt: skip
    """torch's older form: (X with op(A) X = B, A), op(A) = A^T with ``transpose``."""
    t = _triangle(a, upper, unitriangular)
    t = _mT(t) if transpose else t
    x = solve_triangular(t, b, upper=upper != transpose)
    return TriangularSolve(x, a.contiguous())


def _factor(chol: Tensor, upper: bool) -> Tensor:
    """The lower factor: its triangle's values, with torch's gradient, which treats every
    element of the given factor as part of A = L L^T (the other triangle included)."""
    tri = chol.triu() if upper else chol.tril()
    low = chol - (chol - tri).detach()
    return _mT(low) if upper else low


def cholesky_solve(b: Tensor, chol: Tensor, upper: bool = False) -> Tensor:
    """X with A X = B, given A's Cholesky factor (lower, or ``upper``)."""
    low = _factor(chol, upper)
    return (low @ _mT(low)).inverse() @ b


def cholesky_inverse(chol: Tensor, upper: bool = False) -> Tensor:
    """A^-1 from A's Cholesky factor."""
    low = _factor(chol, upper)
    return (low @ _mT(low)).inverse()


def tensorinv(a: Tensor, ind: int = 2) -> Tensor:
    """The inverse of A read as a matrix of its first ``ind`` dims by the rest, shaped
    back (the rest's dims first)."""
    rows = int(np.prod(a.shape[:ind], dtype=np.int64))
    if ind <= 0 or rows != int(np.prod(a.shape[ind:], dtype=np.int64)):
        raise ValueError(f"linalg.tensorinv: {a.shape} split at {ind} is not square")
    return inv(a.reshape(rows, rows)).reshape(*a.shape[ind:], *a.shape[:ind])


def tensorsolve(a: Tensor, b: Tensor, dims=None) -> Tensor:
    """X with tensordot(A, X, X.ndim) = B."""
    if dims is not None:
        dims = [d % a.ndim for d in dims]
        a = a.permute(*[i for i in range(a.ndim) if i not in dims], *dims)
    rest = a.shape[b.ndim :]
    n = int(np.prod(b.shape, dtype=np.int64))
    if n != int(np.prod(rest, dtype=np.int64)):
        raise ValueError(
            f"linalg.tensorsolve: A {a.shape} and B {b.shape} do not make a square system"
        )
    return solve(a.reshape(n, n), b.reshape(n)).reshape(rest)


def vander(x: Tensor, N: int | None = None) -> Tensor:  # noqa: N803  (torch's name)
    """Columns x^0, x^1, ..., x^(N-1) (torch's increasing order)."""
    x = x.reshape(1) if x.ndim == 0 else x  # torch's: a 0-d x is one point
    n = x.shape[-1] if N is None else N
    if n < 0:
        raise ValueError(f"linalg.vander: needs at least 1 dim and N >= 0, got {x.shape}, N={N}")
    if n == 0:
        return x.unsqueeze(-1)[..., :0]
    powers = [x.ones_like()] + [x] * (n - 1)
    cols = [powers[0]]
    for p in powers[1:]:
        cols.append(cols[-1] * p)  # running products, as torch's cumprod
    return stack(cols, -1)


def matrix_rank(a: Tensor, tol=None, hermitian: bool = False, *, atol=None, rtol=None) -> Tensor:
    """How many singular values exceed max(atol, rtol * the largest) (rtol by default
    eps * max(m, n), with neither given)."""
    if a.ndim < 2 or not a.dtype.is_float:
        raise ValueError(f"linalg.matrix_rank: needs float matrices, got {a.dtype}{list(a.shape)}")
    if tol is not None:
        atol, rtol = tol, 0.0
    m, n = a.shape[-2:]
    if m * n == 0:
        return Tensor.zeros(a.shape[:-2], dtype=dtypes.int64, device=a.device)
    s = svdvals(a.detach())
    eps = float(np.finfo(dtypes.to_numpy(a.dtype)).eps)
    if rtol is None:
        rtol = eps * max(m, n) if atol is None or _is_zero(atol) else 0.0
    atol = 0.0 if atol is None else atol
    largest = s[..., :1]
    rtol, atol = (t.unsqueeze(-1) if isinstance(t, Tensor) else t for t in (rtol, atol))
    bound = (largest * rtol).maximum(atol)
    return (s > bound).sum(-1).cast(dtypes.int64)


def matrix_exp(a: Tensor) -> Tensor:
    """e**A by scaling and squaring: A / 2**s has a row-sum norm of at most 1/2, where the
    Taylor series to degree 18 has converged in float64, and the sum is squared s times.
    s reads A's norm now; the rest is composed, so the gradient flows through it."""
    _square(a, "matrix_exp")
    if not a.dtype.is_float:
        raise TypeError(f"matrix_exp: needs float matrices, got {a.dtype}")
    x = a.cast(dtypes.float64)
    norm = float(x.abs().sum(-1).amax().item()) if a.numel() else 0.0
    s = math.ceil(math.log2(norm / 0.5)) if 0.5 < norm < math.inf else 0
    x = x / 2.0**s
    term = total = Tensor.eye(a.shape[-1], dtype=dtypes.float64, device=a.device).expand(*a.shape)
    for k in range(1, 19):
        term = (term @ x) / k
        total = total + term
    for _ in range(s):
        total = total @ total
    return total.cast(a.dtype)


# ---- the factors themselves: QR, SVD, symmetric eigenvectors, the pseudo-inverse ---------


def _matrices(a: Tensor, op: str) -> None:
    if a.ndim < 2 or not a.dtype.is_float:
        raise ValueError(f"{op}: needs float matrices (..., m, n), got {a.dtype}{list(a.shape)}")


class QR(NamedTuple):
    Q: Tensor  # noqa: N815  (torch's field names)
    R: Tensor  # noqa: N815


def qr(a: Tensor, mode: str = "reduced") -> QR:
    """A = QR, Q with orthonormal columns and R upper triangular (LAPACK's Householder
    QR, whose signs torch's shares); ``complete``: Q square; ``r``: R alone, Q empty."""
    _matrices(a, "linalg.qr")
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    _no_gradient(a, "linalg.qr")
    q, r = np.linalg.qr(_host(a), mode="complete" if mode == "complete" else "reduced")
    return QR(_result(a, q if mode != "r" else np.zeros(0)), _result(a, r))


def old_qr(a: Tensor, some: bool = True) -> QR:
    """torch.qr: ``linalg.qr``, reduced with ``some``, else complete."""
    return qr(a, "reduced" if some else "complete")


class SVD(NamedTuple):
    U: Tensor  # noqa: N815
    S: Tensor  # noqa: N815
    Vh: Tensor  # noqa: N815


def svd(a: Tensor, full_matrices: bool = True, *, driver=None) -> SVD:
    """A = U diag(S) Vh, S descending (LAPACK's divide and conquer, as torch's on the CPU)."""
    _matrices(a, "linalg.svd")
    _no_gradient(a, "linalg.svd")
    u, s, vh = np.linalg.svd(_host(a), full_matrices=full_matrices)
    return SVD(_result(a, u), _result(a, s), _result(a, vh))


class OldSVD(NamedTuple):  # torch.svd's fields: V, not Vh
    U: Tensor  # noqa: N815
    S: Tensor  # noqa: N815
    V: Tensor  # noqa: N815


def old_svd(a: Tensor, some: bool = True, compute_uv: bool = True) -> OldSVD:
    """torch.svd: (U, S, V) with A = U diag(S) V^T; without ``compute_uv`` U and V are
    zeros of (m, m) and (n, n), as torch's."""
    u, s, vh = svd(a, full_matrices=not some)
    if not compute_uv:
        m, n = a.shape[-2:]
        zeros = (Tensor.zeros(*a.shape[:-2], k, k, dtype=a.dtype, device=a.device) for k in (m, n))
        return OldSVD(next(zeros), s, next(zeros))
    return OldSVD(u, s, _mT(vh))


class Eigh(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


def eigh(a: Tensor, UPLO: str = "L") -> Eigh:  # noqa: N803  (torch's name)
    """A symmetric A's eigenvalues (ascending) and eigenvectors (columns), read from the
    ``UPLO`` triangle."""
    _square(a, "linalg.eigh")
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    _no_gradient(a, "linalg.eigh")
    w, v = np.linalg.eigh(_host(a), UPLO)
    return Eigh(_result(a, w), _result(a, v))


def _cutoff(s: np.ndarray, a: Tensor, atol, rtol) -> np.ndarray:
    """torch's threshold below which a singular value counts as zero: max(atol, rtol *
    the largest), rtol by default eps * max(m, n) (0 where only atol is given)."""
    m, n = a.shape[-2:]
    if rtol is None:
        eps = float(np.finfo(dtypes.to_numpy(a.dtype)).eps)
        rtol = eps * max(m, n) if atol is None or _is_zero(atol) else 0.0
    atol, rtol = (
        np.asarray(_host(t) if isinstance(t, Tensor) else (0.0 if t is None else t), np.float64)
        for t in (atol, rtol)
    )
    largest = s.max(-1, initial=0.0) if s.size else np.zeros(s.shape[:-1])
    return np.maximum(atol, rtol * largest)[..., None]


def pinv(a: Tensor, *, atol=None, rtol=None, hermitian: bool = False) -> Tensor:
    """The Moore-Penrose pseudo-inverse: A's SVD with each singular value above torch's
    cutoff inverted and the rest zeroed (``hermitian``: from the eigenvalues' sizes)."""
    _matrices(a, "linalg.pinv")
    _no_gradient(a, "linalg.pinv")
    h = _host(a)
    if hermitian:
        w, v = np.linalg.eigh(h)
        keep = np.abs(w) > _cutoff(np.abs(w), a, atol, rtol)
        inv_w = np.where(keep, 1 / np.where(keep, w, 1.0), 0.0)
        return _result(a, (v * inv_w[..., None, :]) @ np.swapaxes(v, -1, -2))
    u, s, vh = np.linalg.svd(h, full_matrices=False)
    keep = s > _cutoff(s, a, atol, rtol)
    inv_s = np.where(keep, 1 / np.where(keep, s, 1.0), 0.0)
    return _result(a, (np.swapaxes(vh, -1, -2) * inv_s[..., None, :]) @ np.swapaxes(u, -1, -2))


def pinverse(a: Tensor, rcond: float = 1e-15) -> Tensor:
    """torch.pinverse: ``pinv`` with ``rcond`` as the relative cutoff."""
    return pinv(a, rtol=rcond)


class Lstsq(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(a: Tensor, b: Tensor, rcond=None, *, driver: str | None = None) -> Lstsq:
    """X minimizing ||AX - B|| (the least-norm one where A is short or rank-deficient),
    with what torch's ``driver`` (default ``gelsy``) reports beside it: the squared
    residuals (m > n, full rank, not ``gelsy``), the ranks (not ``gels``) and the
    singular values (``gelsd``, ``gelss``); the rest empty."""
    op = "linalg.lstsq"
    _matrices(a, op)
    driver = driver or "gelsy"
    if driver not in LSTSQ_DRIVERS:
        raise ValueError(f"{op}: driver must be one of {LSTSQ_DRIVERS}, got {driver!r}")
    if (
        b.ndim < 1
        or b.dtype != a.dtype
        or b.shape[a.ndim - 2 if b.ndim == a.ndim else -1] != a.shape[-2]
    ):
        raise ValueError(
            f"{op}: B must be (..., m, k) or (..., m) with A's m = {a.shape[-2]} and dtype "
            f"{a.dtype}, got {b.dtype}{list(b.shape)}"
        )
    _no_gradient(a, op)
    _no_gradient(b, op)
    vector = b.ndim == a.ndim - 1
    h, hb = _host(a), _host(b)
    hb = hb[..., None] if vector else hb
    batch = np.broadcast_shapes(h.shape[:-2], hb.shape[:-2])
    h = np.broadcast_to(h, batch + h.shape[-2:])
    hb = np.broadcast_to(hb, batch + hb.shape[-2:])
    m, n = h.shape[-2:]
    u, s, vh = np.linalg.svd(h, full_matrices=False)
    eps = float(np.finfo(dtypes.to_numpy(a.dtype)).eps)
    cut = (eps * max(m, n) if rcond is None else rcond) * (s[..., :1] if s.size else 0.0)
    keep = s > cut
    inv_s = np.where(keep, 1 / np.where(keep, s, 1.0), 0.0)
    x = np.swapaxes(vh, -1, -2) @ (inv_s[..., None] * (np.swapaxes(u, -1, -2) @ hb))
    rank = keep.sum(-1).astype(np.int64)
    empty = np.zeros(0)
    full = m > n and bool((rank == n).all())
    residuals = ((h @ x - hb) ** 2).sum(-2) if full and driver != "gelsy" else empty
    out = x[..., 0] if vector else x
    return Lstsq(
        _result(a, out),
        _result(a, residuals[..., 0] if vector and residuals.size else residuals),
        Tensor(
            rank if driver != "gels" else np.zeros(0, np.int64), dtype=dtypes.int64, device=a.device
        ),  # fmt: skip
        _result(a, s if driver in ("gelsd", "gelss") else empty),
    )


def _is_zero(v) -> bool:
    return (not isinstance(v, Tensor)) and v == 0


# torch's Tensor methods and free functions of the same (``x.det()``, ``limn.logdet(x)``)
Tensor.det, Tensor.logdet, Tensor.slogdet, Tensor.inverse = det, logdet, slogdet, inv
Tensor.matrix_exp = matrix_exp
Tensor.cholesky, Tensor.cholesky_solve, Tensor.cholesky_inverse = (
    cholesky,
    cholesky_solve,
    cholesky_inverse,
)
Tensor.triangular_solve = triangular_solve
Tensor.qr, Tensor.svd, Tensor.pinverse = old_qr, old_svd, pinverse
