"""limn.amp: torch's automatic mixed precision names, as no-ops that say so.

torch's ``autocast`` runs chosen ops in a narrower dtype and ``GradScaler`` scales the loss
so float16 gradients do not underflow. limn does neither: every op computes in its
tensors' own dtypes (cast a model with ``model.to(limn.bfloat16)`` to train narrow), so
these exist only so that a torch program that wraps its step in them runs unchanged. Each
warns once when it is asked to do something (``enabled=True`` with a narrow dtype), so a
run that relied on it is not silently different; disabled, they are silent.
"""

from __future__ import annotations

import warnings

from limn.tensor import Tensor

_warned: set[str] = set()


def _say_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(message, stacklevel=3)


class autocast:  # noqa: N801  (torch's spelling)
    """A context manager (and decorator) that changes nothing: the ops inside compute in
    their tensors' own dtypes."""

    def __init__(self, device_type: str = "cpu", dtype=None, enabled: bool = True, **_):
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled
        if enabled:
            _say_once(
                "autocast",
                f"limn.amp.autocast({device_type!r}, dtype={dtype}) is a no-op: limn computes "
                "every op in its tensors' own dtypes; cast the model (model.to(dtype)) to "
                "train in a narrower one",
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def __call__(self, fn):
        return fn


class GradScaler:
    """torch's loss scaler without scaling: ``scale(loss)`` is the loss itself, ``step``
    calls ``optimizer.step()``, ``unscale_`` and ``update`` do nothing. Nothing needs
    unscaling because nothing was scaled; the scale it reports is 1.0."""

    def __init__(self, device: str = "cpu", init_scale: float = 2.0**16, enabled: bool = True, **_):
        self.enabled = enabled
        if enabled:
            _say_once(
                "GradScaler",
                "limn.amp.GradScaler is a no-op: limn scales no losses (its gradients are "
                "in the parameters' own dtype); scale() returns the loss unchanged",
            )

    def scale(self, loss: Tensor) -> Tensor:
        return loss

    def unscale_(self, optimizer) -> None:
        return None

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        return None

    def get_scale(self) -> float:
        return 1.0

    def is_enabled(self) -> bool:
        return False

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None
