"""torch.utils.data.dataset: what a dataset is (``__getitem__``, ``__len__``), the ones
made of tensors, of picked indices, of datasets end to end, and ``random_split``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from limn.creation import Generator
from limn.tensor import Tensor
from limn.utils.data.sampler import _permutation


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
