"""torch.utils.data.dataloader: ``DataLoader`` (batches of a dataset's items, in the
sampler's order) and ``default_collate`` (a batch's items stacked field by field)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator

import numpy as np

from limn.creation import Generator
from limn.ops.joining import stack
from limn.tensor import Tensor
from limn.utils.data.sampler import (
    BatchSampler,
    _permutation,
)


def default_collate(batch: list):
    """Stack a list of items into one batch, field by field (module docstring)."""
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch))
    if isinstance(first, np.ndarray | np.generic):
        return Tensor(np.stack(batch))
    if isinstance(first, bool | numbers.Number):
        return Tensor(np.asarray(batch))
    if isinstance(first, str | bytes):
        return list(batch)
    if isinstance(first, dict):
        return {k: default_collate([item[k] for item in batch]) for k in first}
    if isinstance(first, tuple | list):
        if any(len(item) != len(first) for item in batch):
            raise ValueError(
                f"default_collate: items of a batch have {sorted({len(i) for i in batch})} "
                "fields; every item needs the same number"
            )
        fields = [default_collate(list(f)) for f in zip(*batch)]
        return type(first)(*fields) if hasattr(first, "_fields") else type(first)(fields)
    raise TypeError(
        f"default_collate: cannot batch a {type(first).__name__}; accepted: Tensors, numpy "
        "arrays, numbers, strings, and tuples, lists or dicts of them (or pass collate_fn)"
    )


class _Indices:
    """A DataLoader's index order, walked afresh at each epoch."""

    def __init__(self, make: Callable[[], Iterator[int]]):
        self.make = make

    def __iter__(self):
        return self.make()


class DataLoader:
    """Batches of ``dataset`` (module docstring): ``batch_size`` items a batch (None: the
    items one by one, uncollated), in order or ``shuffle``d by ``generator``, the last
    short batch dropped with ``drop_last``. ``sampler`` (any iterable of indices) or
    ``batch_sampler`` (of index lists) replaces the order."""

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool = False,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        generator: Generator | None = None,
        **_workers,  # timeout, worker_init_fn, prefetch_factor, persistent_workers
    ):
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(
                f"DataLoader: batch_size must be a positive int or None, got {batch_size!r}"
            )
        if shuffle and (sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader: shuffle=True cannot go with a sampler or batch_sampler")
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.sampler, self.batch_sampler, self.drop_last = sampler, batch_sampler, drop_last
        self.collate_fn = collate_fn or (default_collate if batch_size is not None else None)
        self.generator, self.num_workers = generator, num_workers
        _permutation(0, generator)  # a wrong kind of generator is refused here, not later

    def _indices(self) -> Iterator[int]:
        if self.sampler is not None:
            return iter(self.sampler)
        n = len(self.dataset)
        return iter(_permutation(n, self.generator).tolist() if self.shuffle else range(n))

    def _batches(self) -> Iterator[list[int]]:
        if self.batch_sampler is not None:
            return iter(self.batch_sampler)
        return iter(BatchSampler(_Indices(self._indices), self.batch_size, self.drop_last))

    def __iter__(self):
        if self.batch_size is None and self.batch_sampler is None:
            for i in self._indices():
                item = self.dataset[i]
                yield self.collate_fn(item) if self.collate_fn else item
            return
        for idx in self._batches():
            yield self.collate_fn([self.dataset[i] for i in idx])

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
