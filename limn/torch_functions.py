"""torch's free functions that are not a Tensor method: stacks, grids, ranges, index
tables, the norms with their statistics (``native_*``), and the ``limn.linalg`` names
torch programs call.

Each is a composition of Tensor methods; ``limn/__init__.py`` exports them under torch's
names (the Tensor methods are exported there too, as functions).
"""

from __future__ import annotations

import math
import types

import numpy as np

from ir.graph import compose, dtypes
from ir.graph.dtypes import as_dtype
from limn import decompositions
from limn.tensor import Tensor, cat, stack
from limn.torch_methods import TorchMethods


def _tensors(tensors, op: str) -> list[Tensor]:
    ts = (
        list(tensors[0])
        if len(tensors) == 1 and isinstance(tensors[0], list | tuple)
        else list(tensors)
    )
    if not ts:
        raise ValueError(f"{op}: needs at least one tensor")
    return ts


def atleast_1d(*tensors):
    ts = [t.reshape(1) if t.ndim == 0 else t for t in _tensors(tensors, "atleast_1d")]
    return ts[0] if len(ts) == 1 and not isinstance(tensors[0], list | tuple) else tuple(ts)


def atleast_2d(*tensors):
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in _tensors(tensors, "atleast_2d")]
    return ts[0] if len(ts) == 1 and not isinstance(tensors[0], list | tuple) else tuple(ts)


def atleast_3d(*tensors):
    def up(t):
        if t.ndim == 0:
            return t.reshape(1, 1, 1)
        if t.ndim == 1:
            return t.reshape(1, -1, 1)
        return t.unsqueeze(-1) if t.ndim == 2 else t

    ts = [up(t) for t in _tensors(tensors, "atleast_3d")]
    return ts[0] if len(ts) == 1 and not isinstance(tensors[0], list | tuple) else tuple(ts)


def hstack(tensors):
    ts = atleast_1d(list(tensors))
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    return cat(atleast_2d(list(tensors)), 0)


row_stack = vstack


def dstack(tensors):
    return cat(atleast_3d(list(tensors)), 2)


def column_stack(tensors):
    ts = [t.reshape(-1, 1) if t.ndim < 2 else t for t in _tensors((tensors,), "column_stack")]
    return cat(ts, 1)


def broadcast_shapes(*shapes):
    shapes = [(s,) if isinstance(s, int) else tuple(s) for s in shapes]
    return tuple(compose.broadcast_shapes(*shapes, op="broadcast_shapes"))


def broadcast_tensors(*tensors):
    ts = _tensors(tensors, "broadcast_tensors")
    shape = broadcast_shapes(*(t.shape for t in ts))
    return tuple(t.expand(*shape) for t in ts)


def meshgrid(*tensors, indexing: str = "ij"):
    ts = _tensors(tensors, "meshgrid")
    if indexing not in ("ij", "xy") or any(t.ndim > 1 for t in ts):
        raise ValueError(
            f"meshgrid: needs 0-d or 1-d tensors and indexing 'ij' or 'xy', got "
            f"{[t.shape for t in ts]} and {indexing!r}"
        )
    ts = [t.reshape(-1) for t in ts]
    xy = indexing == "xy" and len(ts) > 1
    if xy:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    grids = [
        t.reshape(*[-1 if d == i else 1 for d in range(len(ts))]).expand(*shape)
        for i, t in enumerate(ts)
    ]
    if xy:  # the grids of the swapped pair, given back in the caller's order
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors):
    ts = _tensors(tensors, "cartesian_prod")
    if len(ts) == 1:
        return ts[0]
    return stack([g.reshape(-1) for g in meshgrid(*ts, indexing="ij")], 1)


def block_diag(*tensors):
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in tensors]
    if any(t.ndim != 2 for t in ts):
        raise ValueError(
            f"block_diag: needs tensors of at most 2 dims, got {[t.shape for t in ts]}"
        )
    if not ts:
        return Tensor.zeros(1, 0)
    d = ts[0].dtype
    for t in ts[1:]:
        d = dtypes.promote(d, t.dtype)
    width = sum(t.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        rows.append(t.cast(d).pad([(0, 0), (left, width - left - t.shape[1])]))
        left += t.shape[1]
    return cat(rows, 0)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad=False, **_):
    """``steps`` values from ``start`` to ``end``, as torch computes them: from the start
    for the first half and from the end for the second."""
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    d = as_dtype(dtype) if dtype is not None else dtypes.float32
    start, end = float(start), float(end)
    if d.is_int:  # torch's: the ends cast to the dtype first
        start, end = float(int(start)), float(int(end))
    i = np.arange(steps, dtype=np.float64)
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    if steps == 1:
        return Tensor([start], dtype=d, device=device)
    if d.is_int:
        vals = np.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))
        vals = np.trunc(vals)
    else:
        at = np.float32 if d != dtypes.float64 else np.float64
        s, e, st = at(start), at(end), at(step)
        ia = i.astype(at)
        vals = np.where(ia < steps // 2, s + st * ia, e - st * (at(steps - 1) - ia))
    out = Tensor(vals, dtype=d, device=device)
    return out.requires_grad_() if requires_grad else out


def logspace(start, end, steps: int, base: float = 10.0, dtype=None, device=None, **_):
    d = as_dtype(dtype) if dtype is not None else dtypes.float32
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if d.is_int:  # torch's: the exponents' ends cast to the dtype first
        start, end = int(start), int(end)
    exps = linspace(start, end, steps, dtype=dtypes.float64 if d.is_int else d).numpy()
    vals = np.power(base, exps.astype(np.float64) if d.is_int else exps)
    return Tensor(np.trunc(vals) if d.is_int else vals, dtype=d, device=device)


def empty(*size, dtype=None, device=None, requires_grad=False, **_):
    """Zeros: limn never hands out uninitialized memory."""
    return Tensor.zeros(*size, dtype=dtype or dtypes.float32, device=device,
                        requires_grad=requires_grad)  # fmt: skip


def scalar_tensor(s, dtype=None, device=None, requires_grad=False, **_):
    return Tensor.full((), s, dtype or dtypes.float32, device, requires_grad)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None, **_):
    """Draws of N(mean, std): tensors of means and deviations broadcast, or numbers with
    ``size``."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        m = mean if isinstance(mean, Tensor) else Tensor.full((), mean)
        s = std if isinstance(std, Tensor) else Tensor.full((), std, m.dtype)
        shape = broadcast_shapes(m.shape, s.shape)
        like = m if isinstance(mean, Tensor) else s
        return (
            Tensor.randn(shape, dtype=like.dtype, device=like.device, generator=generator) * s + m
        )
    d = dtype or dtypes.float32
    return Tensor.randn(size, dtype=d, device=device, generator=generator) * std + mean


# ---- the norms with the statistics they saved (torch.native_*) ------------------------


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


def _tri_indices(row: int, col: int, offset: int, keep, dtype, device):
    i, j = np.indices((row, col))
    r, c = np.nonzero(keep(j - i, offset))
    return Tensor(np.stack([r, c]).astype(np.int64), dtype or dtypes.int64, device=device)


def tril_indices(row: int, col: int, offset: int = 0, dtype=None, device=None, **_):
    return _tri_indices(row, col, offset, lambda d, k: d <= k, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, dtype=None, device=None, **_):
    return _tri_indices(row, col, offset, lambda d, k: d >= k, dtype, device)


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
    # computed on the host (limn/decompositions.py)
    inv=decompositions.inv,
    inv_ex=decompositions.inv_ex,
    det=decompositions.det,
    slogdet=decompositions.slogdet,
    solve=decompositions.solve,
    solve_ex=decompositions.solve_ex,
    svdvals=decompositions.svdvals,
    eigvalsh=decompositions.eigvalsh,
    cholesky=decompositions.cholesky,
    cholesky_ex=decompositions.cholesky_ex,
    solve_triangular=decompositions.solve_triangular,
    tensorinv=decompositions.tensorinv,
    tensorsolve=decompositions.tensorsolve,
    vander=decompositions.vander,
    cond=_cond,
    matrix_rank=decompositions.matrix_rank,
)

# Tensor.norm(p="nuc") (limn.torch_methods, which this module imports) is linalg's
TorchMethods._nuclear_norm = lambda x, dims, keepdim, dtype: linalg.matrix_norm(
    x, "nuc", dims, keepdim, dtype=dtype
)
