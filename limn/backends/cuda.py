"""limn.backends.cuda: torch's CUDA math switches, a stand-in. limn's float32 matmul is
float32 on every device (no TF32, no reduced-precision reduction), so a flag set here is
kept, read back, and changes nothing."""

from __future__ import annotations

import types


class _Flags(types.SimpleNamespace):
    """A group of switches a program may set and read back."""

    def __repr__(self) -> str:
        return f"limn.backends flags (no effect in limn): {vars(self)}"


matmul = _Flags(allow_tf32=False, allow_bf16_reduced_precision_reduction=True,
                allow_fp16_reduced_precision_reduction=True)  # fmt: skip


def is_built() -> bool:
    """False: limn is not built against torch's CUDA (its cuda device is docs/cuda.md)."""
    return False
