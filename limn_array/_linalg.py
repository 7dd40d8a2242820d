"""Linear algebra: the main namespace's four functions and the ``linalg`` extension.

Products and everything built from them are composed: ``matmul`` is ``ir/graph/compose.py``'s
broadcast-multiply-and-sum (four real products for complex pairs), and ``tensordot``,
``vecdot``, ``outer``, ``trace``, ``diagonal`` (a strided view), ``cross``, norms and
``matrix_power`` (repeated squaring) follow from it.

The factorizations (``cholesky``, ``qr``, ``eigh``, ``eig``, ``svd``, ``inv``, ``solve``,
``det``, ``slogdet``, and ``pinv``/``matrix_rank``/spectral norms through ``svd``) are
iterative or pivoting algorithms; they are CUSTOM nodes, the op table's sanctioned escape,
backed on host devices by kernels that call LAPACK through ``numpy.linalg``. They stay lazy
(a CUSTOM node is part of the graph like any other) and a device without the kernel
raises when asked to run one.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ir.graph import compose, dtypes, functions
from ir.graph.node import Node
from ir.graph.ops import Op
from limn.runtime.device import get_device
from limn.tensor import Tensor
from limn_array import _complex as complex_math
from limn_array._array import Array, lift, parts, view_of, wrap, wrap_complex
from limn_array._creation import eye
from limn_array._data_types import cast, check_dtype, result_type
from limn_array._elementwise import conj, multiply, subtract
from limn_array._manipulation import broadcast_arrays, broadcast_to, permute_dims, reshape, stack
from limn_array._policy import complex_dtype, real_dtype
from limn_array._statistical import max as max_
from limn_array._statistical import min as min_
from limn_array._statistical import sum as sum_

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
EigResult = namedtuple("EigResult", ["eigenvalues", "eigenvectors"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])


# ---- products -----------------------------------------------------------------------------


def matmul(x1: Array, x2: Array, /) -> Array:
    if not isinstance(x1, Array) or not isinstance(x2, Array):
        raise TypeError("matmul: both operands must be arrays")
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError(f"matmul: needs at least 1-d operands, got {x1.shape} and {x2.shape}")
    check_dtype(x1, "numeric", "matmul")
    check_dtype(x2, "numeric", "matmul")
    d = result_type(x1, x2)
    a, b = cast(x1, d), cast(x2, d)
    if d.is_complex:
        (ar, ai), (br, bi) = parts(a), parts(b)
        mm = compose.matmul
        re = compose.sub(mm(ar, br), mm(ai, bi))
        return wrap_complex(re, mm(ar, bi).p_add(mm(ai, br)))
    if d == dtypes.bool_:
        raise TypeError("matmul: needs numeric arrays, got bool")
    return wrap(compose.matmul(a._t, b._t))


def matrix_transpose(x: Array, /) -> Array:
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: needs at least 2 dims, got shape {x.shape}")
    order = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return view_of(x, lambda t: t.p_permute(order + tuple(range(x.ndim, len(t.shape)))))


def tensordot(x1: Array, x2: Array, /, *, axes=2) -> Array:
    if not isinstance(axes, tuple | list):
        axes = compose.as_int(axes, "axes", "tensordot")
        if axes < 0 or axes > min(x1.ndim, x2.ndim):
            raise ValueError(f"tensordot: axes={axes} does not fit {x1.shape} and {x2.shape}")
        a1 = tuple(range(x1.ndim - axes, x1.ndim))
        a2 = tuple(range(axes))
    else:
        a1, a2 = (compose.as_ints(a, "axes", "tensordot") for a in axes)
        a1 = tuple(compose.normalize_axis(a, x1.ndim, "tensordot") for a in a1)
        a2 = tuple(compose.normalize_axis(a, x2.ndim, "tensordot") for a in a2)
    if len(a1) != len(a2) or any(x1.shape[i] != x2.shape[j] for i, j in zip(a1, a2)):
        raise ValueError(f"tensordot: contracted axes {a1}, {a2} of {x1.shape}, {x2.shape} differ")
    free1 = [i for i in range(x1.ndim) if i not in a1]
    free2 = [j for j in range(x2.ndim) if j not in a2]
    k = int(np.prod([x1.shape[i] for i in a1])) if a1 else 1
    m = int(np.prod([x1.shape[i] for i in free1])) if free1 else 1
    n = int(np.prod([x2.shape[j] for j in free2])) if free2 else 1
    d = result_type(x1, x2)
    a = reshape(permute_dims(cast(x1, d), tuple(free1) + a1), (m, k))
    b = reshape(permute_dims(cast(x2, d), a2 + tuple(free2)), (k, n))
    out = matmul(a, b)
    return reshape(out, tuple(x1.shape[i] for i in free1) + tuple(x2.shape[j] for j in free2))


def vecdot(x1: Array, x2: Array, /, *, axis: int = -1) -> Array:
    d = result_type(x1, x2)
    check_dtype(x1, "numeric", "vecdot")
    n = max(x1.ndim, x2.ndim)
    ax = compose.normalize_axis(axis, n, "vecdot")
    s1 = (1,) * (n - x1.ndim) + x1.shape
    s2 = (1,) * (n - x2.ndim) + x2.shape
    if x1.ndim == 0 or x2.ndim == 0 or s1[ax] != s2[ax]:
        raise ValueError(f"vecdot: shapes {x1.shape} and {x2.shape} differ along axis {axis}")
    prod = multiply(conj(cast(x1, d)), cast(x2, d))
    return sum_(prod, axis=ax - n, dtype=d)


def outer(x1: Array, x2: Array, /) -> Array:
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"outer: needs 1-d arrays, got {x1.shape} and {x2.shape}")
    return multiply(reshape(x1, (x1.shape[0], 1)), reshape(x2, (1, x2.shape[0])))


def diagonal(x: Array, /, *, offset: int = 0) -> Array:
    """A strided view: the flattened matrix from its first diagonal element, every m+1."""
    if x.ndim < 2:
        raise ValueError(f"diagonal: needs at least 2 dims, got shape {x.shape}")
    offset = compose.as_int(offset, "offset", "diagonal")
    n, m = x.shape[-2:]
    lead = x.shape[:-2]
    start = offset if offset >= 0 else -offset * m
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))

    def view(t):
        flat = t.p_reshape(lead + (n * m,))
        box = tuple((0, s) for s in lead)
        if length == 0:
            return flat.p_shrink(box + ((0, 0),))
        stop = start + (length - 1) * (m + 1) + 1
        return flat.p_shrink(box + ((start, stop),)).p_step((1,) * len(lead) + (m + 1,))

    return lift(view, x)


def trace(x: Array, /, *, offset: int = 0, dtype=None) -> Array:
    return sum_(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def cross(x1: Array, x2: Array, /, *, axis: int = -1) -> Array:
    d = result_type(x1, x2)
    a, b = broadcast_arrays(cast(x1, d), cast(x2, d))
    ax = compose.normalize_axis(axis, a.ndim, "cross")
    if a.shape[ax] != 3:
        raise ValueError(f"cross: axis {axis} must have size 3, got shape {a.shape}")

    def comp(v, i):
        key = [slice(None)] * v.ndim
        key[ax] = i
        return v[tuple(key)]

    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    c0 = subtract(multiply(a1, b2), multiply(a2, b1))
    c1 = subtract(multiply(a2, b0), multiply(a0, b2))
    c2 = subtract(multiply(a0, b1), multiply(a1, b0))
    return stack([c0, c1, c2], axis=ax)


def matrix_power(x: Array, n: int, /) -> Array:
    _square(x, "matrix_power")
    n = compose.as_int(n, "n", "matrix_power")
    if n < 0:
        x, n = inv(x), -n
    if n == 0:
        return broadcast_to(eye(x.shape[-1], dtype=x.dtype, device=x.device), x.shape)
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


# ---- norms --------------------------------------------------------------------------------


def vector_norm(x: Array, /, *, axis=None, keepdims: bool = False, ord=2) -> Array:
    """ord 2 scales by the largest |x| first, so squares neither overflow nor underflow."""
    check_dtype(x, "floating-point", "vector_norm")
    a = complex_math.absolute(parts(x)) if x.dtype.is_complex else functions.fabs(x._t)
    axes = compose.normalize_axes(axis, x.ndim, "vector_norm")
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    out = shape if keepdims else tuple(s for i, s in enumerate(x.shape) if i not in axes)
    if any(x.shape[i] == 0 for i in axes) and ord not in (0, 1, 2):
        if ord in (float("inf"), float("-inf")):
            raise ValueError("vector_norm: an empty axis has no max or min")
    if ord == float("inf"):
        r = a.p_max(axes)
    elif ord == float("-inf"):
        r = compose.min_(a, axes, keepdim=True)
    elif ord == 0:
        r = compose.ne(a, a.p_const(0)).p_cast(a.dtype).p_sum(axes)
    elif ord == 1:
        r = a.p_sum(axes)
    elif ord == 2:
        m = a.p_max(axes) if all(x.shape[i] for i in axes) else a.p_const(0, shape=shape)
        safe = compose.logical_and(a.p_const(0, shape=shape).p_cmplt(m), functions.isfinite(m))
        scale = safe.p_where(m, m.p_const(1))
        s = functions.divide(a, compose.expand_to(scale, a.shape))
        r = s.p_mul(s).p_sum(axes).p_sqrt().p_mul(scale)
        r = functions.isinf(m).p_where(m, r)
    else:
        p = float(ord)
        powed = functions.pow(a, a.p_const(p))
        r = functions.pow(powed.p_sum(axes), a.p_const(1 / p, shape=shape))
    return wrap(r.p_reshape(out))


def matrix_norm(x: Array, /, *, keepdims: bool = False, ord="fro") -> Array:
    check_dtype(x, "floating-point", "matrix_norm")
    if x.ndim < 2:
        raise ValueError(f"matrix_norm: needs at least 2 dims, got shape {x.shape}")
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims, ord=2)
    if ord in ("nuc", 2, -2):
        s = svdvals(x)
        r = sum_(s, axis=-1) if ord == "nuc" else (max_ if ord == 2 else min_)(s, axis=-1)
    elif ord in (1, -1, float("inf"), float("-inf")):
        a = wrap(complex_math.absolute(parts(x)) if x.dtype.is_complex else functions.fabs(x._t))
        col = ord in (1, -1)
        sums = sum_(a, axis=-2 if col else -1)
        r = (max_ if ord in (1, float("inf")) else min_)(sums, axis=-1)
    else:
        raise ValueError(
            f"matrix_norm: ord {ord!r} is not one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf"
        )
    if keepdims:
        r = reshape(r, r.shape + (1, 1))
    return r


# ---- factorizations: CUSTOM nodes run by numpy.linalg on host devices --------------------


def _to_np(v: np.ndarray, is_complex: bool) -> np.ndarray:
    if not is_complex:
        return v
    cd = np.complex64 if v.dtype == np.float32 else np.complex128
    return np.ascontiguousarray(v).view(cd).reshape(v.shape[:-1])


def _from_np(v, d: dtypes.DType) -> np.ndarray:
    v = np.asarray(v, dtype=dtypes.to_numpy(d), order="C")  # a 0-d value stays 0-d
    if d.is_complex:
        return v.reshape(v.shape + (1,)).view(dtypes.to_numpy(real_dtype(d)))
    return v


def _kernel(name: str, fn):
    """Wrap a numpy function of complex-aware arrays as a CUSTOM kernel of pair buffers."""

    def run(vals, params):
        in_complex, out_dtypes, kw = params
        args = [_to_np(v, c) for v, c in zip(vals, in_complex)]
        with np.errstate(all="ignore"):
            outs = fn(*args, **dict(kw))
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(_from_np(o, dtypes.BY_NAME[d]) for o, d in zip(outs, out_dtypes))

    run.__name__ = name
    return run


def _eig(a):
    w, v = np.linalg.eig(a)
    return w.astype(np.result_type(a.dtype, np.complex64)), v.astype(
        np.result_type(a.dtype, np.complex64)
    )


def _solve(a, b):
    return np.linalg.solve(a, b)


def _cholesky(a, upper=False):
    c = np.linalg.cholesky(a)
    return np.conj(np.swapaxes(c, -1, -2)) if upper else c


def _svd(a, full_matrices=True):
    return tuple(np.linalg.svd(a, full_matrices=full_matrices))


def _rtol(a, rtol):
    s = np.linalg.svd(a, compute_uv=False)
    tol = (max(a.shape[-2:]) * np.finfo(s.dtype).eps) if rtol is None else rtol
    return s, np.asarray(tol)[..., None] * s.max(axis=-1, keepdims=True, initial=0.0)


def _matrix_rank(a, rtol=None):
    if a.shape[-1] == 0 or a.shape[-2] == 0:
        return np.zeros(a.shape[:-2], np.int64)
    s, cut = _rtol(a, rtol)
    return (s > cut).sum(axis=-1).astype(np.int64)


def _pinv(a, rtol=None):
    if a.shape[-1] == 0 or a.shape[-2] == 0:
        return np.zeros(a.shape[:-2] + a.shape[:-3:-1], a.dtype)
    tol = (max(a.shape[-2:]) * np.finfo(a.dtype).eps) if rtol is None else rtol
    return np.linalg.pinv(a, rcond=np.asarray(tol))


KERNELS = {
    "linalg.cholesky": _kernel("linalg.cholesky", _cholesky),
    "linalg.det": _kernel("linalg.det", np.linalg.det),
    "linalg.slogdet": _kernel("linalg.slogdet", lambda a: tuple(np.linalg.slogdet(a))),
    "linalg.inv": _kernel("linalg.inv", np.linalg.inv),
    "linalg.solve": _kernel("linalg.solve", _solve),
    "linalg.qr": _kernel("linalg.qr", lambda a, mode: tuple(np.linalg.qr(a, mode=mode))),
    "linalg.eigh": _kernel("linalg.eigh", lambda a: tuple(np.linalg.eigh(a))),
    "linalg.eigvalsh": _kernel("linalg.eigvalsh", np.linalg.eigvalsh),
    "linalg.eig": _kernel("linalg.eig", _eig),
    "linalg.eigvals": _kernel("linalg.eigvals", lambda a: _eig(a)[0]),
    "linalg.svd": _kernel("linalg.svd", _svd),
    "linalg.svdvals": _kernel("linalg.svdvals", lambda a: np.linalg.svd(a, compute_uv=False)),
    "linalg.pinv": _kernel("linalg.pinv", _pinv),
    "linalg.matrix_rank": _kernel("linalg.matrix_rank", _matrix_rank),
}


def _custom(name: str, xs: list[Array], outs: list[tuple], **kw) -> list[Array]:
    """CUSTOM nodes, one per output, sharing sources and params (one kernel call)."""
    device = xs[0]._t.device
    # the numpy reference too: a compiled device may hand it small graphs
    for where in dict.fromkeys((device, "numpy")):
        dev = get_device(where)
        if not dev.has_kernel(name):
            if not dev.host:
                raise NotImplementedError(f"linalg: the {where} device has no {name} kernel")
            dev.register_kernel(name, KERNELS[name])
    params = (
        tuple(x.dtype.is_complex for x in xs),
        tuple(d.name for d, _ in outs),
        tuple(sorted(kw.items())),
    )
    srcs = tuple(x._t.node for x in xs)
    result = []
    for i, (d, shape) in enumerate(outs):
        store = real_dtype(d)
        full = tuple(shape) + ((2,) if d.is_complex else ())
        node = Node(Op.CUSTOM, store, full, srcs, (name, i, params))
        result.append(Array._new(Tensor._make(node, device), d))
    return result


def _square(x: Array, op: str) -> None:
    check_dtype(x, "floating-point", op)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{op}: needs a stack of square matrices, got shape {x.shape}")


def cholesky(x: Array, /, *, upper: bool = False) -> Array:
    _square(x, "cholesky")
    return _custom("linalg.cholesky", [x], [(x.dtype, x.shape)], upper=upper)[0]


def det(x: Array, /) -> Array:
    _square(x, "det")
    return _custom("linalg.det", [x], [(x.dtype, x.shape[:-2])])[0]


def slogdet(x: Array, /) -> SlogdetResult:
    _square(x, "slogdet")
    outs = [(x.dtype, x.shape[:-2]), (real_dtype(x.dtype), x.shape[:-2])]
    return SlogdetResult(*_custom("linalg.slogdet", [x], outs))


def inv(x: Array, /) -> Array:
    _square(x, "inv")
    return _custom("linalg.inv", [x], [(x.dtype, x.shape)])[0]


def solve(x1: Array, x2: Array, /) -> Array:
    _square(x1, "solve")
    d = result_type(x1, x2)
    a, b = cast(x1, d), cast(x2, d)
    if b.ndim == 1:
        shape = compose.broadcast_shapes(a.shape[:-2], (), op="solve") + (a.shape[-1],)
    else:
        batch = compose.broadcast_shapes(a.shape[:-2], b.shape[:-2], op="solve")
        shape = batch + b.shape[-2:]
    return _custom("linalg.solve", [a, b], [(d, shape)])[0]


def qr(x: Array, /, *, mode: str = "reduced") -> QRResult:
    check_dtype(x, "floating-point", "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', got {mode!r}")
    m, n = x.shape[-2:]
    k = min(m, n) if mode == "reduced" else m
    lead = x.shape[:-2]
    outs = [(x.dtype, lead + (m, k)), (x.dtype, lead + (k, n))]
    return QRResult(*_custom("linalg.qr", [x], outs, mode=mode))


def eigh(x: Array, /) -> EighResult:
    _square(x, "eigh")
    outs = [(real_dtype(x.dtype), x.shape[:-1]), (x.dtype, x.shape)]
    return EighResult(*_custom("linalg.eigh", [x], outs))


def eigvalsh(x: Array, /) -> Array:
    _square(x, "eigvalsh")
    return _custom("linalg.eigvalsh", [x], [(real_dtype(x.dtype), x.shape[:-1])])[0]


def eig(x: Array, /) -> EigResult:
    _square(x, "eig")
    c = x.dtype if x.dtype.is_complex else complex_dtype(x.dtype)
    return EigResult(*_custom("linalg.eig", [x], [(c, x.shape[:-1]), (c, x.shape)]))


def eigvals(x: Array, /) -> Array:
    _square(x, "eigvals")
    c = x.dtype if x.dtype.is_complex else complex_dtype(x.dtype)
    return _custom("linalg.eigvals", [x], [(c, x.shape[:-1])])[0]


def svd(x: Array, /, *, full_matrices: bool = True) -> SVDResult:
    check_dtype(x, "floating-point", "svd")
    m, n = x.shape[-2:]
    k = min(m, n)
    lead = x.shape[:-2]
    u = (m, m) if full_matrices else (m, k)
    vh = (n, n) if full_matrices else (k, n)
    outs = [(x.dtype, lead + u), (real_dtype(x.dtype), lead + (k,)), (x.dtype, lead + vh)]
    return SVDResult(*_custom("linalg.svd", [x], outs, full_matrices=full_matrices))


def svdvals(x: Array, /) -> Array:
    check_dtype(x, "floating-point", "svdvals")
    k = min(x.shape[-2:])
    return _custom("linalg.svdvals", [x], [(real_dtype(x.dtype), x.shape[:-2] + (k,))])[0]


def pinv(x: Array, /, *, rtol=None) -> Array:
    check_dtype(x, "floating-point", "pinv")
    shape = x.shape[:-2] + (x.shape[-1], x.shape[-2])
    rt = float(rtol) if isinstance(rtol, int | float) else None
    return _custom("linalg.pinv", [x], [(x.dtype, shape)], rtol=rt)[0]


def matrix_rank(x: Array, /, *, rtol=None) -> Array:
    check_dtype(x, "floating-point", "matrix_rank")
    rt = float(rtol) if isinstance(rtol, int | float) else None
    return _custom("linalg.matrix_rank", [x], [(dtypes.int64, x.shape[:-2])], rtol=rt)[0]
