"""limn.nn.init: torch.nn.init's initializers, each writing a new value into a Tensor.

Each is an ``assign`` of freshly drawn numbers (from limn's generator, ``limn.set_seed``,
or the ``generator=`` given, a ``limn.Generator``)
under ``no_grad``, and returns the Tensor, so ``init.normal_(layer.weight, std=0.02)``
reads as in torch. The fans of a weight (out, in, *kernel) are torch's.
"""

from __future__ import annotations

import math

import numpy as np

from limn.autograd import no_grad
from limn.creation import _draws
from limn.tensor import Tensor


def _write(t: Tensor, value: Tensor) -> Tensor:
    with no_grad():
        return t.assign(value.cast(t.dtype))


def _fans(t: Tensor) -> tuple[int, int]:
    if t.ndim < 2:
        raise ValueError(f"init: fan in and fan out need at least 2 dims, got {t.shape}")
    field = math.prod(t.shape[2:])
    return t.shape[1] * field, t.shape[0] * field


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    return _write(t, Tensor.uniform(t.shape, a, b, device=t.device, generator=generator))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    return _write(t, Tensor.randn(t.shape, device=t.device, generator=generator) * std + mean)


def trunc_normal_(t: Tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None) -> Tensor:
    """N(mean, std) redrawn outside [a, b] (drawn on the host: a rejection loop)."""
    rng = _draws(generator, "trunc_normal_")
    x = rng.normal(mean, std, t.shape)
    while (bad := (x < a) | (x > b)).any():
        x[bad] = rng.normal(mean, std, int(bad.sum()))
    return _write(t, Tensor(np.asarray(x), device=t.device))


def constant_(t: Tensor, value: float) -> Tensor:
    return _write(t, t.full_like(value))


def zeros_(t: Tensor) -> Tensor:
    return constant_(t, 0)


def ones_(t: Tensor) -> Tensor:
    return constant_(t, 1)


def xavier_uniform_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    bound = gain * math.sqrt(6 / sum(_fans(t)))
    return uniform_(t, -bound, bound, generator)


def xavier_normal_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    return normal_(t, 0.0, gain * math.sqrt(2 / sum(_fans(t))), generator)


def _gain(nonlinearity: str, a: float) -> float:
    return math.sqrt(2 / (1 + a * a)) if nonlinearity in ("relu", "leaky_relu") else 1.0


def kaiming_uniform_(t: Tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu",
                     generator=None) -> Tensor:  # fmt: skip
    fan = _fans(t)[mode == "fan_out"]
    bound = _gain(nonlinearity, a) * math.sqrt(3 / fan)
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t: Tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu",
                    generator=None) -> Tensor:  # fmt: skip
    std = _gain(nonlinearity, a) / math.sqrt(_fans(t)[mode == "fan_out"])
    return normal_(t, 0.0, std, generator)
