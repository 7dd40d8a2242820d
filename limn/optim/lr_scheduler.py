"""limn.optim.lr_scheduler: torch's learning-rate schedules, each a closed form.

A scheduler sets ``optimizer.lr`` (a device scalar, so the step's graph never changes) to
``lr_at(epoch)`` on every ``step()``; the epoch starts at 0 when it is made, as in torch.
torch computes most of these recursively from the last rate; limn evaluates each closed
form (torch's own ``_get_closed_form_lr``), which agrees to float64 rounding. The base
rate is the optimizer's rate when the first scheduler met it (torch's ``initial_lr``), so
schedulers chained by ``SequentialLR`` all start from it. One optimizer, one rate: torch's
per-group lists (``get_last_lr()``) have one entry.
"""

from __future__ import annotations

import bisect
import math


class LRScheduler:
    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        self.base_lr = vars(optimizer).setdefault("initial_lr", optimizer.lr)
        self.base_lrs = [self.base_lr]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, epoch: int) -> float:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self._last_lr = self.lr_at(self.last_epoch)
        self.optimizer.lr = self._last_lr

    def get_last_lr(self) -> list[float]:
        return [self._last_lr]

    def state_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state: dict) -> None:
        vars(self).update(state)


class LambdaLR(LRScheduler):
    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return self.base_lr * self.lr_lambda(epoch)


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return self.base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return self.base_lr * self.gamma**epoch


class ConstantLR(LRScheduler):
    def __init__(self, optimizer, factor=1 / 3, total_iters: int = 5, last_epoch: int = -1):
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return self.base_lr * (self.factor if epoch < self.total_iters else 1.0)


class LinearLR(LRScheduler):
    def __init__(self, optimizer, start_factor=1 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        self.start, self.end, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        done = min(self.total_iters, epoch) / self.total_iters
        return self.base_lr * (self.start + (self.end - self.start) * done)


class PolynomialLR(LRScheduler):
    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch=-1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return self.base_lr * (1 - min(self.total_iters, epoch) / self.total_iters) ** self.power


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        cos = 1 + math.cos(math.pi * epoch / self.T_max)
        return self.eta_min + (self.base_lr - self.eta_min) * cos / 2


class SequentialLR(LRScheduler):
    """``schedulers[i]`` from ``milestones[i-1]`` on, each counting its epochs from 0."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR: needs one milestone fewer than schedulers, got "
                f"{len(milestones)} for {len(schedulers)}"
            )
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        i = bisect.bisect_right(self.milestones, epoch)
        return self.schedulers[i].lr_at(epoch - (self.milestones[i - 1] if i else 0))


class ReduceLROnPlateau:
    """Multiply the rate by ``factor`` once the metric given to ``step(metric)`` has not
    improved (by ``threshold``, relative or absolute) for more than ``patience`` steps;
    then wait ``cooldown`` steps; never below ``min_lr``."""

    def __init__(
        self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
        threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8,
    ):  # fmt: skip
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown = threshold, threshold_mode, cooldown
        self.min_lr, self.eps = min_lr, eps
        self.best, self.bad_epochs, self.cooldown_counter = None, 0, 0
        self._last_lr = optimizer.lr

    def _better(self, value: float) -> bool:
        if self.best is None:
            return True
        sign = 1 if self.mode == "min" else -1
        rel = self.threshold_mode == "rel"
        margin = self.threshold * abs(self.best) if rel else self.threshold
        return sign * (self.best - value) > margin

    def step(self, metric) -> None:
        value = float(metric)
        if self._better(value):
            self.best, self.bad_epochs = value, 0
        else:
            self.bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.bad_epochs = 0
        if self.bad_epochs > self.patience:
            new = max(self.optimizer.lr * self.factor, self.min_lr)
            if self.optimizer.lr - new > self.eps:
                self.optimizer.lr = new
            self.cooldown_counter, self.bad_epochs = self.cooldown, 0
        self._last_lr = self.optimizer.lr

    def get_last_lr(self) -> list[float]:
        return [self._last_lr]
