"""limn.optim.lr_scheduler: torch's learning-rate schedules, each a closed form.

A scheduler sets each parameter group's ``"lr"`` (a device scalar, so the step's graph
never changes) to ``lr_at(i, epoch)`` on every ``step()``; the epoch starts at 0 when it is
made, as in torch. torch computes most of these recursively from the last rate; limn
evaluates each closed form (torch's own ``_get_closed_form_lr``), which agrees to float64
rounding. A group's base rate is its rate when the first scheduler met it (torch's
``initial_lr``), so schedulers chained by ``SequentialLR`` all start from it.
"""

from __future__ import annotations

import bisect
import math


class LRScheduler:
    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        self.base_lrs = [g.setdefault("initial_lr", g["lr"]) for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, i: int, epoch: int) -> float:
        """Group i's rate at ``epoch``."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self._last_lr = [self.lr_at(i, self.last_epoch) for i in range(len(self.base_lrs))]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        skip = ("optimizer", "lr_lambdas")  # torch saves neither the optimizer nor lambdas
        return {k: v for k, v in vars(self).items() if k not in skip and not callable(v)}

    def load_state_dict(self, state: dict) -> None:
        vars(self).update(state)


class LambdaLR(LRScheduler):
    """``lr_lambda``: one function of the epoch for every group, or a list, one per group."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = (
            list(lr_lambda) if isinstance(lr_lambda, list | tuple) else [lr_lambda] * n
        )
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: got {len(self.lr_lambdas)} lr_lambdas for {n} groups")
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        return self.base_lrs[i] * self.lr_lambdas[i](epoch)


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        return self.base_lrs[i] * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        return self.base_lrs[i] * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        return self.base_lrs[i] * self.gamma**epoch


class ConstantLR(LRScheduler):
    def __init__(self, optimizer, factor=1 / 3, total_iters: int = 5, last_epoch: int = -1):
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        return self.base_lrs[i] * (self.factor if epoch < self.total_iters else 1.0)


class LinearLR(LRScheduler):
    def __init__(self, optimizer, start_factor=1 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        self.start, self.end, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        done = min(self.total_iters, epoch) / self.total_iters
        return self.base_lrs[i] * (self.start + (self.end - self.start) * done)


class PolynomialLR(LRScheduler):
    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch=-1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        return (
            self.base_lrs[i] * (1 - min(self.total_iters, epoch) / self.total_iters) ** self.power
        )


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, i, epoch):
        cos = 1 + math.cos(math.pi * epoch / self.T_max)
        return self.eta_min + (self.base_lrs[i] - self.eta_min) * cos / 2


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

    def lr_at(self, i, epoch):
        k = bisect.bisect_right(self.milestones, epoch)
        return self.schedulers[k].lr_at(i, epoch - (self.milestones[k - 1] if k else 0))


class ReduceLROnPlateau:
    """Multiply every group's rate by ``factor`` once the metric given to ``step(metric)``
    has not improved (by ``threshold``, relative or absolute, as torch measures it) for
    more than ``patience`` steps; then wait ``cooldown`` steps; never below ``min_lr``
    (one for all groups, or a list)."""

    def __init__(
        self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
        threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8,
    ):  # fmt: skip
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(
                f"ReduceLROnPlateau: mode must be 'min' or 'max' and threshold_mode 'rel' or "
                f"'abs', got {mode!r} and {threshold_mode!r}"
            )
        groups = optimizer.param_groups
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown = threshold, threshold_mode, cooldown
        self.min_lrs = list(min_lr) if isinstance(min_lr, list | tuple) else [min_lr] * len(groups)
        self.eps, self.bad_epochs, self.cooldown_counter = eps, 0, 0
        self.best = math.inf if mode == "min" else -math.inf
        self._last_lr = [g["lr"] for g in groups]

    def _better(self, value: float) -> bool:
        up = self.mode == "max"
        if self.threshold_mode == "rel":
            bound = self.best * (1 + self.threshold if up else 1 - self.threshold)
        else:
            bound = self.best + (self.threshold if up else -self.threshold)
        return value > bound if up else value < bound

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
            for group, low in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, low)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    get_last_lr = LRScheduler.get_last_lr
