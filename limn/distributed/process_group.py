"""torch.distributed's process-group calls, answered by limn's MPI world.

torch programs start data parallelism with ``init_process_group(backend="nccl")`` under
``torchrun`` and then ask ``get_rank()``, ``get_world_size()``, ``all_reduce(t)``. In limn
the launch is ``mpiexec -n N python prog.py`` and the world is ``limn.distributed.init()``
(docs/distributed.md); these functions are that world under torch's names, so such a
program's distributed branch runs with its launch command changed. ``backend`` and the
torchrun settings (``init_method``, ``rank``, ``world_size``) are accepted: MPI decides
them. Before ``init_process_group`` the queries refuse, as torch's do.
"""

from __future__ import annotations

import enum
import sys

import numpy as np

from limn.tensor import Tensor, realize


class ReduceOp(enum.Enum):
    """The reductions ``all_reduce`` takes: a sum, or torch's AVG (the sum over the size)."""

    SUM = "sum"
    AVG = "avg"


def _distributed():
    """``limn.distributed``, which imports this module at its end: loaded by any call."""
    return sys.modules["limn.distributed"]


def is_available() -> bool:
    """Whether mpi4py and an MPI library import here (the ``mpi`` extra)."""
    try:
        _distributed()._mpi()
        return True
    except RuntimeError:
        return False


def is_initialized() -> bool:
    return _distributed()._world[0] is not None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       **_):  # fmt: skip
    """limn's ``distributed.init()``: the world of this MPI launch."""
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    d = _distributed()
    return d.init(d.DEFAULT_TIMEOUT if seconds is None else seconds)


def destroy_process_group(group=None) -> None:
    """Nothing to take down: MPI ends with the process, and the world tells its peers."""


def _world(op: str):
    if not is_initialized():
        raise ValueError(
            f"{op}: the default process group has not been initialized; call "
            "init_process_group() (limn.distributed.init()) under mpiexec first"
        )
    return _distributed().current()


def get_rank(group=None) -> int:
    return _world("get_rank").rank


def get_world_size(group=None) -> int:
    return _world("get_world_size").size


def barrier(group=None, **_) -> None:
    _world("barrier").barrier()


def all_reduce(tensor: Tensor, op: ReduceOp = ReduceOp.SUM, group=None, async_op=False):
    """``tensor`` becomes its sum (or mean, ``ReduceOp.AVG``) over the ranks, in place."""
    if op not in (ReduceOp.SUM, ReduceOp.AVG):
        raise ValueError(f"all_reduce: op must be ReduceOp.SUM or ReduceOp.AVG, got {op!r}")
    world = _world("all_reduce")
    a = np.ascontiguousarray(tensor.detach().numpy()).copy()
    world.all_reduce([a], average=op is ReduceOp.AVG)
    realize(tensor.detach().assign(Tensor(a, dtype=tensor.dtype, device=tensor.device)))
