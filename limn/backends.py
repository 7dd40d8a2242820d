"""limn.backends: torch's backend switches, accepted and recorded, changing nothing.

Programs set ``torch.backends.cuda.matmul.allow_tf32 = True`` or
``torch.backends.cudnn.benchmark = True`` and ask ``torch.backends.mps.is_available()``.
limn has no TF32, cuDNN or MPS: its float32 matmul is float32 on every device, so a flag
set here is kept (read back as set) and has no effect; the ``is_available`` answers are
False.
"""

from __future__ import annotations

import types


class _Flags(types.SimpleNamespace):
    """A group of switches a program may set and read back."""

    def __repr__(self) -> str:
        return f"limn.backends flags (no effect in limn): {vars(self)}"


def _unavailable() -> bool:
    return False


cuda = _Flags(matmul=_Flags(allow_tf32=False, allow_bf16_reduced_precision_reduction=True))
cudnn = _Flags(allow_tf32=True, benchmark=False, deterministic=False, enabled=True,
               is_available=_unavailable)  # fmt: skip
mps = _Flags(is_available=_unavailable, is_built=_unavailable)
