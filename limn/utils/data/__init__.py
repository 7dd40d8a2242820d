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

The names live in torch's modules, so torch's import paths work too:
``limn/utils/data/dataset.py`` (the datasets, ``random_split``), ``sampler.py`` (the
orders), ``dataloader.py`` (``DataLoader``, ``default_collate``).
"""

from limn.creation import Generator  # noqa: F401
from limn.utils.data.dataloader import DataLoader, default_collate  # noqa: F401
from limn.utils.data.dataset import (  # noqa: F401
    ConcatDataset,
    Dataset,
    Subset,
    TensorDataset,
    random_split,
)
from limn.utils.data.sampler import (  # noqa: F401
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)
