"""torch.utils.data.sampler: the orders a DataLoader walks a dataset's indices in (in
order, shuffled, drawn with replacement) and their grouping into batches."""

from __future__ import annotations

import numpy as np

from limn import creation
from limn.creation import Generator


def _permutation(n: int, generator: Generator | None) -> np.ndarray:
    return creation._draws(generator, "data").permutation(n)


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
        rng = creation._draws(self.generator, "RandomSampler")
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
