"""limn.fft: torch.fft's real-valued names: the shifts (``fftshift``, ``ifftshift``) and
the sample frequencies (``fftfreq``, ``rfftfreq``).

torch's transforms answer complex tensors, and limn's Tensor has no complex dtype: the
Array API namespace has them (``limn_array.fft``, through ``limn.array_namespace()``), and
a transform's name here says so.
"""

from __future__ import annotations

from ir.graph import dtypes
from limn import missing
from limn.tensor import Tensor


def _shift(input: Tensor, dim, sign: int) -> Tensor:
    dims = range(input.ndim) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [d % max(input.ndim, 1) for d in dims]
    if not dims:
        return input.clone()
    return input.roll([sign * (input.shape[d] // 2) for d in dims], dims)


def fftshift(input: Tensor, dim=None) -> Tensor:
    """The zero frequency moved to the middle: each of ``dim`` (all if None) rolled by
    half its size, rounded down."""
    return _shift(input, dim, 1)


def ifftshift(input: Tensor, dim=None) -> Tensor:
    """fftshift undone: each dim rolled back by half its size, rounded down."""
    return _shift(input, dim, -1)


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad=False, **_):
    """The sample frequencies of an n-point transform: 0, 1, ..., then the negatives, over
    (d * n)."""
    k = Tensor.arange(n, dtype=dtypes.int64, device=device)
    k = (k < (n + 1) // 2).where(k, k - n)
    return _frequencies(k, n, d, dtype, requires_grad)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad=False, **_):
    """The sample frequencies of rfft: 0, 1, ..., n // 2, over (d * n)."""
    k = Tensor.arange(n // 2 + 1, dtype=dtypes.int64, device=device)
    return _frequencies(k, n, d, dtype, requires_grad)


def _frequencies(k: Tensor, n: int, d: float, dtype, requires_grad: bool) -> Tensor:
    out = (k.cast(dtypes.float64) / (d * n)).cast(dtype or dtypes.float32)
    return out.requires_grad_(requires_grad) if requires_grad else out


# torch.fft's names whose results are complex
TRANSFORMS = set(
    "fft ifft fft2 ifft2 fftn ifftn rfft irfft rfft2 irfft2 rfftn irfftn hfft ihfft hfft2 "
    "ihfft2 hfftn ihfftn".split()
)


def __getattr__(name: str):
    instead = (
        "its result is complex: the Array API has it, limn_array.fft" if name in TRANSFORMS else ""
    )
    raise missing.no_such_name(
        __name__, name, ["fftshift", "ifftshift", "fftfreq", "rfftfreq"], instead
    )
