"""limn.cuda: the ``torch.cuda`` names a CPU program touches, answered for limn.

limn's CUDA support is a device, ``"cuda"`` (``limn.get_device("cuda")``, docs/cuda.md),
not this module: here are only the queries and seeds torch programs make whether or not
they use a GPU. ``is_available()`` says whether that device can start; the seeds seed
limn's one generator, which every device draws from; ``amp`` is ``limn.amp`` (no-ops).
A name torch has and limn does not is an AttributeError naming ``limn.cuda``.
"""

from __future__ import annotations

from limn.creation import set_seed
from limn.cuda import amp  # noqa: F401  (torch.cuda.amp.GradScaler / autocast)


def is_available() -> bool:
    """Whether limn's cuda device starts here (a driver and a GPU it can use)."""
    from limn.runtime import get_device

    try:
        get_device("cuda")
        return True
    except (RuntimeError, OSError, ValueError):
        return False


def device_count() -> int:
    return 1 if is_available() else 0


def manual_seed(seed: int) -> None:
    """Seeds limn's generator, the one every device draws from (as ``limn.manual_seed``)."""
    set_seed(seed)


manual_seed_all = manual_seed


def is_bf16_supported() -> bool:
    """bfloat16 is a dtype every limn device computes (in float32 where it must)."""
    return True


def synchronize(device=None) -> None:
    """Nothing to wait for: a limn result is finished when it is read."""
    return None


def empty_cache() -> None:
    return None


def _bytes_held(what: str) -> int:
    """0 while limn's cuda device has not started in this process (nothing is on a GPU,
    as torch answers without one); once it has, limn does not count its allocations,
    so the question is refused rather than answered wrong."""
    from limn.runtime.device import _devices

    if "cuda" not in _devices:
        return 0
    raise NotImplementedError(
        f"limn.cuda.{what}: limn's cuda device does not count the bytes it allocates; "
        "nvidia-smi shows the process's GPU memory"
    )


def memory_allocated(device=None) -> int:
    return _bytes_held("memory_allocated")


def max_memory_allocated(device=None) -> int:
    return _bytes_held("max_memory_allocated")


def memory_reserved(device=None) -> int:
    return _bytes_held("memory_reserved")


def reset_peak_memory_stats(device=None) -> None:
    _bytes_held("reset_peak_memory_stats")


def __getattr__(name: str):
    raise AttributeError(
        f"module 'limn.cuda' has no attribute {name!r}: torch.cuda.{name} is not in limn; "
        "it answers only is_available, device_count, manual_seed, manual_seed_all, "
        "is_bf16_supported, synchronize, empty_cache, memory_allocated, "
        "max_memory_allocated, memory_reserved, reset_peak_memory_stats and amp (limn's GPU "
        "is the 'cuda' device: Tensor(..., device='cuda'))",
        name=name,
    )
