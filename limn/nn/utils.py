"""limn.nn.utils: gradient clipping, as torch.nn.utils spells it.

``clip_grad_norm_`` stays lazy: the total norm and the scaled gradients are graph, so they
are computed with the optimizer step that reads them (one realize), and the norm it
returns is a 0-d Tensor that costs nothing until it is read.
"""

from __future__ import annotations

from limn.autograd import no_grad
from limn.ops.joining import stack
from limn.tensor import Tensor


def _grads(parameters) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p for p in params if p.grad is not None]


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale every gradient by min(1, max_norm / (total norm + 1e-6)), as torch does; the
    total norm is over all the gradients together. Returns that norm."""
    params = _grads(parameters)
    if not params:
        return Tensor(0.0)
    total = stack([p.grad.norm(norm_type) for p in params]).norm(norm_type)  # torch's order
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    with no_grad():  # in place, as torch's: a gradient tensor held reads the scaled one
        for p in params:
            p.grad.mul_(scale.cast(p.grad.dtype))
    return total


def clip_grad_value_(parameters, clip_value: float) -> None:
    with no_grad():
        for p in _grads(parameters):
            p.grad.clamp_(-clip_value, clip_value)
