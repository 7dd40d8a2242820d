"""``limn.linalg``, torch.linalg's names: the vector and matrix norms, ``vecdot``,
``multi_dot``, ``matrix_power``, ``cond``, and the decompositions of
``decompositions.py``; with them torch's ``tensordot``, ``cross`` and ``renorm``.

Each is composed of Tensor methods (the norms of singular values read them from
``decompositions.svdvals``). ``Tensor.norm(p="nuc")`` is ``linalg.matrix_norm``'s, set
here on ``Reductions``, which cannot import this module.
"""

from __future__ import annotations

import math
import types

from ir.graph import compose
from limn.ops import decompositions, lapack
from limn.ops.joining import stack
from limn.ops.movement import broadcast_tensors
from limn.ops.reductions import Reductions
from limn.tensor import Tensor


def tensordot(a: Tensor, b: Tensor, dims=2):
    """The sum over ``dims`` pairs of a's and b's dims (or a's last ``dims`` with b's
    first) of the outer product, as a matmul of the two flattened."""
    if isinstance(dims, int):
        if dims < 0:
            raise ValueError(f"tensordot: dims must be non-negative, got {dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([int(v) for v in (d if isinstance(d, list | tuple) else [d])] for d in dims)
    da = [compose.normalize_axis(d, a.ndim, "tensordot") for d in da]
    db = [compose.normalize_axis(d, b.ndim, "tensordot") for d in db]
    if len(da) != len(db):
        raise ValueError(f"tensordot: dims {da} and {db} pair up unequal numbers of dims")
    for i, j in zip(da, db):  # a size-1 dim is broadcast to its partner's, as torch's
        if a.shape[i] != b.shape[j] and 1 not in (a.shape[i], b.shape[j]):
            raise ValueError(f"tensordot: contracted sizes differ: {a.shape}{da} and {b.shape}{db}")
        if a.shape[i] == 1:
            a = a.expand(*a.shape[:i], b.shape[j], *a.shape[i + 1 :])
        elif b.shape[j] == 1:
            b = b.expand(*b.shape[:j], a.shape[i], *b.shape[j + 1 :])
    ra = [i for i in range(a.ndim) if i not in da]
    rb = [j for j in range(b.ndim) if j not in db]
    k = math.prod(a.shape[i] for i in da)
    x = a.permute(*ra, *da).reshape(math.prod(a.shape[i] for i in ra), k)
    y = b.permute(*db, *rb).reshape(k, math.prod(b.shape[j] for j in rb))
    return (x @ y).reshape(*[a.shape[i] for i in ra], *[b.shape[j] for j in rb])


def cross(a: Tensor, b: Tensor, dim=None):
    """The cross product of 3-vectors along ``dim`` (the first of size 3 if None, as
    torch.cross)."""
    if a.ndim != b.ndim:
        raise ValueError(f"cross: inputs need as many dims, got {a.shape} and {b.shape}")
    if dim is not None and a.ndim and b.ndim and (a.shape[dim] != 3 or b.shape[dim] != 3):
        raise ValueError(f"cross: dim {dim} must have size 3, got {a.shape} and {b.shape}")
    a, b = broadcast_tensors(*a._align(b, "cross"))
    if dim is None:
        dim = next((d for d, s in enumerate(a.shape) if s == 3), None)
        if dim is None:
            raise ValueError(f"cross: no dim of size 3 in {a.shape}")
    dim = compose.normalize_axis(dim, a.ndim, "cross")
    if a.shape[dim] != 3:
        raise ValueError(f"cross: dim {dim} of {a.shape} must have size 3")
    x, y = a.unbind(dim), b.unbind(dim)
    c = [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]]
    return stack(c, dim)


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    return x.norm(ord, dim, keepdim, dtype=dtype)


def _matrix_norm(x, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    if x.ndim < 2:
        raise ValueError(f"matrix_norm: needs at least 2 dims, got shape {x.shape}")
    if len(dim) != 2:
        raise ValueError(f"matrix_norm: dim must be two dims, got {tuple(dim)}")
    a = (x if dtype is None else x.cast(dtype))._float().abs()
    d0, d1 = (compose.normalize_axis(d, x.ndim, "matrix_norm") for d in dim)
    if ord == "fro":
        return (a * a).sum((d0, d1), keepdim).sqrt()
    if ord in (1, -1, math.inf, -math.inf):
        over, then = (d0, d1) if ord in (1, -1) else (d1, d0)
        s = a.sum(over, keepdim=True)
        out = _largest(s, then) if ord > 0 else s.amin(then, keepdim=True)
        return out if keepdim else out.squeeze((d0, d1))
    if ord in ("nuc", 2, -2):  # of the singular values: their sum, largest, smallest
        if d0 == d1:
            raise ValueError(f"matrix_norm: dims {dim} must be two different dims")
        rest = [i for i in range(x.ndim) if i not in (d0, d1)]
        m = (x if dtype is None else x.cast(dtype))._float().permute(*rest, d0, d1)
        s = decompositions.svdvals(m) if min(m.shape[-2:]) else m.sum(-1)[..., :0]
        out = s.sum(-1) if ord == "nuc" else _largest(s, -1)[..., 0] if ord == 2 else s.amin(-1)
        return out.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1)) if keepdim else out
    raise ValueError(
        f"matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}"
    )


def _largest(s: Tensor, axis: int) -> Tensor:
    """The largest along ``axis`` (kept) of values >= 0: 0 over none, as torch's norms."""
    if s.shape[axis] == 0:
        return s.sum(axis, keepdim=True)
    return s.amax(axis, keepdim=True)


def _linalg_norm(x, ord=None, dim=None, keepdim=False, *, dtype=None):
    """torch.linalg.norm: a matrix norm over a pair of dims (or a 2-d input with an
    ``ord``), else a vector norm."""
    pair = isinstance(dim, list | tuple) and len(dim) == 2
    if isinstance(ord, str) or pair or ord is not None and dim is None and x.ndim == 2:
        return _matrix_norm(x, "fro" if ord is None else ord, dim or (-2, -1), keepdim, dtype=dtype)
    return _vector_norm(x, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def _vecdot(x, y, *, dim=-1):
    return (x * y).sum(dim)


def _multi_dot(tensors):
    ts = list(tensors)
    if len(ts) < 2:
        raise ValueError("multi_dot: needs at least two tensors")
    first, last = ts[0].ndim == 1, ts[-1].ndim == 1
    if any(t.ndim != 2 for t in ts[1:-1]) or ts[0].ndim not in (1, 2) or ts[-1].ndim not in (1, 2):
        raise ValueError(
            f"multi_dot: needs 1-d or 2-d ends and matrices between, got {[t.shape for t in ts]}"
        )
    out = ts[0].reshape(1, -1) if first else ts[0]
    for t in ts[1:]:
        out = out @ (t.reshape(-1, 1) if t.ndim == 1 else t)
    if first:
        out = out.squeeze(0)
    return out.squeeze(-1) if last else out


def _matrix_power(x, n: int):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"matrix_power: needs square matrices, got shape {x.shape}")
    if n < 0:  # the inverse's power
        x, n = decompositions.inv(x), -n
    eye = Tensor.eye(x.shape[-1], dtype=x.dtype, device=x.device).expand(*x.shape)
    out, base = eye, x
    while n:
        if n & 1:
            out = out @ base
        n >>= 1
        if n:
            base = base @ base
    return out


def _cond(a: Tensor, p=None) -> Tensor:
    """||A|| ||A^-1|| in the norm ``p``; for None, 2 and -2 the ratio of the extreme
    singular values."""
    if p in (None, 2, -2):
        s = decompositions.svdvals(a)
        big, small = s[..., 0], s[..., -1]
        return big / small if p in (None, 2) else small / big
    decompositions._square(a, "linalg.cond")
    return linalg.matrix_norm(a, p) * linalg.matrix_norm(decompositions.inv(a), p)


linalg = types.SimpleNamespace(
    __name__="limn.linalg",
    vector_norm=_vector_norm,
    matrix_norm=_matrix_norm,
    norm=_linalg_norm,
    vecdot=_vecdot,
    multi_dot=_multi_dot,
    matrix_power=_matrix_power,
    matrix_exp=decompositions.matrix_exp,
    cross=lambda a, b, *, dim=-1: cross(a, b, dim),
    diagonal=lambda a, *, offset=0, dim1=-2, dim2=-1: a.diagonal(offset, dim1, dim2),
    # computed on the host (limn/ops/decompositions.py)
    inv=decompositions.inv,
    inv_ex=decompositions.inv_ex,
    det=decompositions.det,
    slogdet=decompositions.slogdet,
    solve=decompositions.solve,
    solve_ex=decompositions.solve_ex,
    svdvals=decompositions.svdvals,
    eigvalsh=decompositions.eigvalsh,
    cholesky=decompositions.cholesky,
    qr=decompositions.qr,
    svd=decompositions.svd,
    eigh=decompositions.eigh,
    pinv=decompositions.pinv,
    lstsq=decompositions.lstsq,
    lu_factor=lapack.lu_factor,
    lu_factor_ex=lapack.lu_factor_ex,
    lu=lapack.lu,
    lu_solve=lapack.lu_solve,
    householder_product=lapack.householder_product,
    cholesky_ex=decompositions.cholesky_ex,
    solve_triangular=decompositions.solve_triangular,
    tensorinv=decompositions.tensorinv,
    tensorsolve=decompositions.tensorsolve,
    vander=decompositions.vander,
    cond=_cond,
    matrix_rank=decompositions.matrix_rank,
)


# Tensor.norm(p="nuc") (limn.ops.reductions, which this module imports) is linalg's
Reductions._nuclear_norm = lambda x, dims, keepdim, dtype: linalg.matrix_norm(
    x, "nuc", dims, keepdim, dtype=dtype
)


def renorm(self: Tensor, p: float, dim: int, maxnorm: float) -> Tensor:
    """Each slice along ``dim`` whose p-norm exceeds ``maxnorm`` scaled down to it."""
    if not self.dtype.is_float or p <= 0 or maxnorm < 0:
        raise ValueError(
            f"renorm: needs a float input, p > 0 and maxnorm >= 0, got {self.dtype}, p={p}, "
            f"maxnorm={maxnorm}"
        )
    d = dim % self.ndim
    others = tuple(i for i in range(self.ndim) if i != d)
    norm = self.norm(p, others, keepdim=True) if others else self.abs()
    scale = (norm > maxnorm).where(maxnorm / (norm + 1e-7), 1.0).cast(self.dtype)
    return self * scale


Tensor.renorm = renorm
