"""limn.nn.functional's activations beyond the Tensor's own, in torch's names.

Each is a short composition of Tensor methods in torch's signature (``inplace=True``
writes the result into its input, as torch's does); ``limn/nn/functional.py`` exports them.
"""

from __future__ import annotations

from limn.ops.inplace import inplace_flag
from limn.tensor import Tensor


@inplace_flag
def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(x, 0.0, 6.0)


@inplace_flag
def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace=False) -> Tensor:
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} is above max_val {max_val}")
    return x.clamp(min_val, max_val).cast(x.dtype)


@inplace_flag
def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (x > 0).where(x, (x.expm1() * alpha).cast(x.dtype))


@inplace_flag
def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (x > 0).where(x, ((x / alpha).expm1() * alpha).cast(x.dtype))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


@inplace_flag
def selu(x: Tensor, inplace: bool = False) -> Tensor:
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


@inplace_flag
def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    return (x / 6 + 0.5).clamp(0.0, 1.0)


@inplace_flag
def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    return x * (x + 3).clamp(0.0, 6.0) / 6


def logsigmoid(x: Tensor) -> Tensor:
    return -(-x).softplus()


@inplace_flag
def mish(x: Tensor, inplace: bool = False) -> Tensor:
    return x * x.softplus().tanh()


def softsign(x: Tensor) -> Tensor:
    return x / (1 + x.abs())


def tanhshrink(x: Tensor) -> Tensor:
    return x - x.tanh()


@inplace_flag
def threshold(x: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return (x > threshold).where(x, value).cast(x.dtype)


def softshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    if lambd < 0:
        raise ValueError(f"softshrink: lambd must be >= 0, got {lambd}")
    return (x > lambd).where(x - lambd, (x < -lambd).where(x + lambd, 0.0)).cast(x.dtype)


def hardshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    return ((x > lambd) | (x < -lambd)).where(x, 0.0).cast(x.dtype)


def glu(x: Tensor, dim: int = -1) -> Tensor:
    if x.ndim == 0 or x.shape[dim] % 2:
        raise ValueError(f"glu: dim {dim} of {x.shape} must have an even size")
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """max(0, x) + weight * min(0, x), one weight or one per channel (dim 1)."""
    if (
        weight.ndim > 1
        or weight.numel() != 1
        and (x.ndim < 1 or weight.numel() != x.shape[min(1, x.ndim - 1)])
    ):
        raise ValueError(f"prelu: {weight.numel()} weights do not fit input {x.shape}")
    w = weight.reshape(()) if weight.numel() == 1 else weight
    if w.ndim and x.ndim > 1:
        w = w.reshape(-1, *[1] * (x.ndim - 2))
    return (x > 0).where(x, x * w)


def softmin(x: Tensor, dim=None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return (-x if dtype is None else -x.cast(dtype)).softmax(-1 if dim is None else dim)
