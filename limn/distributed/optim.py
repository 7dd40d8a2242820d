"""torch.distributed.optim: ``ZeroRedundancyOptimizer``, a stand-in that does not shard.

torch's ZeRO optimizer keeps each rank's share of the optimizer state and broadcasts the
updated parameters; the steps it takes are those of ``optimizer_class`` over every
parameter. limn's is that unsharded optimizer: the same steps on every rank (their
gradients already averaged by ``limn.distributed.DataParallel``), each rank holding the
whole state, so only the memory differs.
"""

from __future__ import annotations


def ZeroRedundancyOptimizer(  # noqa: N802  (torch's name for what is a class there)
    params, optimizer_class, process_group=None, parameters_as_bucket_view=False,
    overlap_with_ddp=False, **defaults,
):  # fmt: skip
    """``optimizer_class(params, **defaults)``, unsharded (see the module's docstring)."""
    return optimizer_class(params, **defaults)
