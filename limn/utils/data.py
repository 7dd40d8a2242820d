"""limn.utils.data: datasets, batches and splits in torch.utils.data's names.

A dataset is anything with ``__getitem__`` and ``__len__``; ``DataLoader`` walks its
indices (in order, or shuffled), fetches each batch's items and ``default_collate``s them:
Tensors, numpy arrays and numbers are stacked along a new first axis, and tuples, lists and
dicts are collated field by field, so ``for x, y in loader`` gets a (B, ...) Tensor each.

Loading happens in the calling process: ``num_workers``, ``pin_memory`` and
``persistent_workers`` are accepted for torch programs' sake and change nothing (limn's
batches are host arrays handed to the device at the first kernel that reads them).

Order comes from numpy generators. ``shuffle=True`` without a ``generator`` draws a fresh
seed from limn's generator at each epoch (so ``limn.manual_seed`` fixes the whole run);
``Generator().manual_seed(s)`` fixes one loader's or one split's order by itself. The
orders are not torch's (its generator is another algorithm): a program gets the same
batches from one run to the next, not the batches torch would have drawn.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from limn import creation
from limn.tensor import Tensor, stack


class Generator:
    """A seeded source of data order (``DataLoader(generator=)``, ``random_split``):
    torch's ``torch.Generator().manual_seed(s)`` spelling over a numpy generator."""

    def __init__(self, device=None):
        self._rng = np.random.default_rng(int(creation._rng[0].integers(2**63)))

    def manual_seed(self, seed: int) -> Generator:
        self._rng = np.random.default_rng(seed)
        return self

    def permutation(self, n: int) -> np.ndarray:
        return self._rng.permutation(n)


def _permutation(n: int, generator: Generator | None) -> np.ndarray:
    if generator is None:
        return creation._rng[0].permutation(n)
    if not isinstance(generator, Generator):
        raise TypeError(
            f"data: generator must be a limn.utils.data.Generator (limn.Generator), got "
            f"{type(generator).__name__}"
        )
    return generator.permutation(n)


class Dataset:
    """Base class: define ``__getitem__(i)`` (and ``__len__`` for a DataLoader)."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__}: define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Item i is ``(t[i] for t in tensors)``; every tensor's first dim is the length."""

    def __init__(self, *tensors: Tensor):
        sizes = [t.shape[0] if t.ndim else None for t in tensors]
        if not tensors or None in sizes or len(set(sizes)) != 1:
            raise ValueError(
                f"TensorDataset: needs tensors whose first dims agree, got shapes "
                f"{[tuple(t.shape) for t in tensors]}"
            )
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The items of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """Several datasets one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        self.ends = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def __getitem__(self, index: int):
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"ConcatDataset: index {index} out of range for length {len(self)}")
        d = int(np.searchsorted(self.ends, index, side="right"))
        return self.datasets[d][index - (self.ends[d - 1] if d else 0)]


class Sampler:
    """Base class: an iterable of dataset indices (``DataLoader(sampler=)``)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__}: define __iter__")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A permutation of the indices, or with ``replacement`` ``num_samples`` uniform
    draws (makemore's endless loader: ``num_samples=int(1e10)``, drawn lazily)."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None, generator=None):
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        _permutation(0, generator)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        if not self.replacement:
            yield from _permutation(n, self.generator).tolist()[: self.num_samples]
            return
        rng = creation._rng[0] if self.generator is None else self.generator._rng
        left = self.num_samples
        while left > 0:  # in chunks: a sampler of 1e10 draws must not make them all at once
            chunk = rng.integers(0, n, min(left, 1024))
            left -= len(chunk)
            yield from chunk.tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler``, the last short one unless
    ``drop_last``."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch: list[int] = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def random_split(dataset, lengths: Sequence, generator: Generator | None = None) -> list[Subset]:
    """Disjoint random Subsets of the given lengths, or of fractions summing to 1 (the
    remainder given one item each to the first parts, as torch does)."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) for x in lengths) and math.isclose(sum(lengths), 1):
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n or any(not isinstance(x, numbers.Integral) or x < 0 for x in lengths):
        raise ValueError(
            f"random_split: lengths {lengths} must be counts summing to the dataset's "
            f"length {n}, or fractions summing to 1"
        )
    order = _permutation(n, generator).tolist()
    starts = np.cumsum([0] + lengths).tolist()
    return [Subset(dataset, order[a:b]) for a, b in zip(starts, starts[1:])]


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
