"""limn.nn.parallel: torch's module wrappers for data parallelism, over one process.

torch's ``DistributedDataParallel`` averages gradients across processes from hooks inside
``backward``. limn's autograd has no such hooks: multi-process training is
``limn.distributed.DataParallel``, whose ``sync_gradients(loss)`` the loop calls between
``backward`` and ``step`` (docs/distributed.md). So the wrapper here serves a program that
wraps its model but runs as one process (nanoGPT's train.py without torchrun): it is the
model, under ``.module``, and it refuses, naming the alternative, when ``limn.distributed``
has a world of more than one rank, where its gradients would silently stay unaveraged.
``DataParallel`` (torch's one-process, many-GPU wrapper) is the model itself too.
"""

from __future__ import annotations

import contextlib

from limn.nn.module import Module


class DataParallel(Module):
    """The wrapped module, under ``.module``: limn runs one device per process."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class DistributedDataParallel(DataParallel):
    """One-process DDP (module docstring); ``no_sync()`` and ``require_backward_grad_sync``
    are accepted, there being nothing to sync."""

    require_backward_grad_sync = True

    def __init__(self, module: Module, device_ids=None, output_device=None, **options):
        from limn import distributed

        world = distributed._world[0]
        if world is not None and world.size > 1:
            raise RuntimeError(
                f"DistributedDataParallel: limn cannot average gradients inside backward "
                f"(this world has {world.size} ranks); wrap the model with "
                "limn.distributed.DataParallel(model) and call its sync_gradients(loss) "
                "after loss.backward() (docs/distributed.md)"
            )
        super().__init__(module)

    @contextlib.contextmanager
    def no_sync(self):
        yield
