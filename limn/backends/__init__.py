"""limn.backends: torch's backend switches, accepted and recorded, changing nothing.

Programs set ``torch.backends.cuda.matmul.allow_tf32 = True`` or
``torch.backends.cudnn.benchmark = True`` (often after ``import torch.backends.cudnn as
cudnn``) and ask ``torch.backends.mps.is_available()``. limn has no TF32, cuDNN or MPS:
its float32 matmul is float32 on every device, so a flag set here is kept (read back as
set) and has no effect; the ``is_available`` answers are False. Each backend is a module
of its own (``cudnn.py``, ``cuda.py``, ``mps.py``), as torch's are, so both the attribute
and the import spelling work.
"""

from __future__ import annotations

from limn.backends import cuda, cudnn, mps  # noqa: F401
