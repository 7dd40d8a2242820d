"""limn.signal.windows: torch.signal.windows' tapers (Hann, Hamming, Kaiser, ...).

A window is a function of its length alone, so each is computed on the host in float64
from its formula and becomes a tensor of ``dtype`` (float32 by default), as ``linspace``
does. ``sym=True`` (the default) gives a symmetric window for filter design; ``sym=False``
the periodic one for spectral analysis: the symmetric window one longer, its last point
dropped.
"""

from __future__ import annotations

import math

import numpy as np

from ir.graph import dtypes
from ir.graph.dtypes import as_dtype
from limn.tensor import Tensor


def _window(name: str, M: int, sym: bool, dtype, device, requires_grad, values,  # noqa: N803
            layout=None) -> Tensor:  # fmt: skip
    """``values(n, L)`` at the positions n = 0..L-1 of the symmetric window of length L
    (M, or M + 1 when periodic), as a tensor of the first M."""
    if layout is not None and str(layout).removeprefix("torch.") != "strided":
        raise ValueError(f"{name}: limn's tensors are strided (dense), got layout {layout}")
    if not isinstance(M, int) or M < 0:
        raise ValueError(f"{name}: M must be a non-negative int, got {M!r}")
    d = as_dtype(dtype) if dtype is not None else dtypes.float32
    if not d.is_float or d.itemsize < 4:
        raise TypeError(f"{name}: expects float32 or float64 dtypes, got {d}")
    if M <= 1:
        out = np.ones(M)
    else:
        length = M if sym else M + 1
        out = values(np.arange(length, dtype=np.float64), length)[:M]
    t = Tensor(out, dtype=d, device=device)
    return t.requires_grad_() if requires_grad else t


def general_cosine(M, *, a, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803
    """sum_k (-1)^k a_k cos(2 pi k n / (L - 1))."""
    a = [float(x) for x in a]

    def values(n, L):  # noqa: N803
        x = 2 * math.pi * n / (L - 1)
        return sum((-1) ** k * ak * np.cos(k * x) for k, ak in enumerate(a))

    return _window("general_cosine", M, sym, dtype, device, requires_grad, values, layout)


def general_hamming(M, *, alpha=0.54, sym=True, dtype=None, layout=None, device=None,  # noqa: N803
                    requires_grad=False):  # fmt: skip
    a = [alpha, 1 - alpha]
    return general_cosine(M, a=a, sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)  # fmt: skip


def hann(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)  # fmt: skip


def hamming(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803
    return general_hamming(
        M, sym=sym, dtype=dtype, layout=layout, device=device, requires_grad=requires_grad
    )


def blackman(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803
    a = [0.42, 0.5, 0.08]
    return general_cosine(M, a=a, sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)  # fmt: skip


def nuttall(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803
    a = [0.3635819, 0.4891775, 0.1365995, 0.0106411]
    return general_cosine(M, a=a, sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)  # fmt: skip


def bartlett(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803
    """The triangle 1 - |2n / (L - 1) - 1|."""

    def values(n, L):  # noqa: N803
        return 1 - np.abs(2 * n / (L - 1) - 1)

    return _window("bartlett", M, sym, dtype, device, requires_grad, values, layout)


def cosine(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803
    """sin(pi (n + 1/2) / L)."""

    def values(n, L):  # noqa: N803
        return np.sin(math.pi * (n + 0.5) / L)

    return _window("cosine", M, sym, dtype, device, requires_grad, values, layout)


def exponential(M, *, center=None, tau=1.0, sym=True, dtype=None, layout=None, device=None,  # noqa: N803
                requires_grad=False):  # fmt: skip
    """exp(-|n - center| / tau); the center is the middle, and only a periodic window
    may put it elsewhere."""
    if tau <= 0:
        raise ValueError(f"exponential: tau must be positive, got {tau}")
    if sym and center is not None:
        raise ValueError("exponential: center must be None for symmetric windows")

    def values(n, L):  # noqa: N803
        c = (L - 1) / 2 if center is None else center
        return np.exp(-np.abs(n - c) / tau)

    return _window("exponential", M, sym, dtype, device, requires_grad, values, layout)


def gaussian(M, *, std=1.0, sym=True, dtype=None, layout=None, device=None,  # noqa: N803
             requires_grad=False):  # fmt: skip
    """exp(-(n - (L - 1) / 2)^2 / (2 std^2))."""
    if std <= 0:
        raise ValueError(f"gaussian: std must be positive, got {std}")

    def values(n, L):  # noqa: N803
        return np.exp(-(((n - (L - 1) / 2) / std) ** 2) / 2)

    return _window("gaussian", M, sym, dtype, device, requires_grad, values, layout)


def kaiser(M, *, beta=12.0, sym=True, dtype=None, layout=None, device=None,  # noqa: N803
           requires_grad=False):  # fmt: skip
    """I0(beta sqrt(1 - (2n / (L - 1) - 1)^2)) / I0(beta), I0 the modified Bessel function
    of order 0."""
    if beta < 0:
        raise ValueError(f"kaiser: beta must be non-negative, got {beta}")

    def values(n, L):  # noqa: N803
        r = 2 * n / (L - 1) - 1
        return np.i0(beta * np.sqrt(np.clip(1 - r * r, 0, None))) / np.i0(beta)

    return _window("kaiser", M, sym, dtype, device, requires_grad, values, layout)
