"""Matrix products of limn.Tensor and the matrices' triangles: ``matmul`` (``@``), ``mm``,
``bmm``, ``mv``, ``dot``, ``outer``, ``inner``, ``kron``, ``linear``, the fused
``addmm`` family (beta * self + alpha * product), ``trace``, ``tril`` and ``triu``.

``Matrices`` is a mixin of ``limn.Tensor`` (see ``math.py``); every product is a
``compose.matmul`` or a broadcast product summed. ``torch.linalg``'s names and the
decompositions are in ``linalg.py`` and ``decompositions.py``.
"""

from __future__ import annotations

from typing import Self

from ir.graph import compose, dtypes
from ir.graph.dtypes import promote
from limn.ops.arguments import accept_torch_names, on_nodes


class Matrices:
    def __rmatmul__(self, o):
        return self._lift(o).matmul(self)

    def matmul(self, o) -> Self:
        o = o if isinstance(o, Matrices) else self._lift(o)
        if self.ndim == 0 or o.ndim == 0:
            raise ValueError(f"matmul: needs at least 1-d operands, got {self.shape} and {o.shape}")
        d = promote(self.dtype, o.dtype)
        return on_nodes(compose.matmul, self.p_cast(d), o.p_cast(d))

    dot = __matmul__ = matmul

    def linear(self, weight: Self, bias: Self | None = None) -> Self:
        out = self @ weight.T
        return out if bias is None else out + bias

    def tril(self, diagonal: int = 0):
        return self._triangle(diagonal, lambda d, k: d <= k, "tril")

    def triu(self, diagonal: int = 0):
        return self._triangle(diagonal, lambda d, k: d >= k, "triu")

    def _triangle(self, k: int, keep, op: str):
        """Zero the elements of the last two dims whose diagonal j - i is not kept."""
        if self.ndim < 2:
            raise ValueError(f"{op}: needs at least 2 dims, got shape {self.shape}")
        n, m = self.shape[-2:]
        i = type(self).arange(n, device=self.device).reshape(n, 1)
        j = type(self).arange(m, device=self.device).reshape(1, m)
        return keep(j - i, compose.as_int(k, "diagonal", op)).where(self, self.p_const(0))

    def trace(self):
        if self.ndim != 2:
            raise ValueError(f"trace: needs a matrix, got shape {self.shape}")
        return self.diagonal().sum()

    def mm(self, mat2):
        if self.ndim != 2 or mat2.ndim != 2:
            raise ValueError(f"mm: needs two matrices, got {self.shape} and {mat2.shape}")
        return self.matmul(mat2)

    def bmm(self, mat2):
        if self.ndim != 3 or mat2.ndim != 3 or self.shape[0] != mat2.shape[0]:
            raise ValueError(
                f"bmm: needs (b, n, m) and (b, m, p), got {self.shape} and {mat2.shape}"
            )
        return self.matmul(mat2)

    def mv(self, vec):
        if self.ndim != 2 or vec.ndim != 1:
            raise ValueError(f"mv: needs a matrix and a vector, got {self.shape} and {vec.shape}")
        return self.matmul(vec)

    def vdot(self, other):
        return self.dot(other)

    def outer(self, vec2):
        if self.ndim != 1 or vec2.ndim != 1:
            raise ValueError(f"outer: needs two vectors, got {self.shape} and {vec2.shape}")
        return self.reshape(-1, 1) * vec2.reshape(1, -1)

    ger = outer

    def inner(self, other):
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        return _inner(self, other)

    def _add_scaled(self, product, beta, alpha):
        if product.dtype.is_int:  # torch takes integer scales for integer tensors
            beta, alpha = int(beta), int(alpha)
        out = product if alpha == 1 else product * alpha
        if beta == 0:  # self is not read, so a nan in it does not show, as in torch
            return out + self.zeros_like()
        return (self if beta == 1 else self * beta) + out

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return self._add_scaled(mat1.mm(mat2), beta, alpha)

    def addmv(self, mat, vec, *, beta=1, alpha=1):
        return self._add_scaled(mat.mv(vec), beta, alpha)

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        if self.dtype == vec1.dtype == vec2.dtype == dtypes.bool_:  # torch's: logical
            outer = vec1.unsqueeze(-1) & vec2.unsqueeze(0)
            kept = self & bool(beta) if beta else self.zeros_like()
            return (kept | (outer & bool(alpha))).expand(*outer.shape).contiguous()
        return self._add_scaled(vec1.outer(vec2), beta, alpha)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return self._add_scaled(batch1.bmm(batch2), beta, alpha)

    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return self._add_scaled(batch1.bmm(batch2).sum(0), beta, alpha)

    def kron(self, other):
        n = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + self.shape)
        b = other.reshape((1,) * (n - other.ndim) + other.shape)
        prod = a.reshape(*[v for s in a.shape for v in (s, 1)]) * b.reshape(
            *[v for s in b.shape for v in (1, s)]
        )
        return prod.reshape(*[x * y for x, y in zip(a.shape, b.shape)])


def _inner(a, b):
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inner: last dims differ: {a.shape} and {b.shape}")
    out = a.reshape(*a.shape[:-1], *[1] * (b.ndim - 1), a.shape[-1]) * b
    return out.sum(-1)


accept_torch_names(Matrices)
