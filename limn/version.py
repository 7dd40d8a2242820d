"""limn.version: torch's ``torch.version`` for limn: ``__version__`` (limn's own, from its
installed metadata) and the build facts torch programs print or test. limn is not built
against CUDA or ROCm (its cuda device compiles at run time through NVRTC: docs/cuda.md),
so ``cuda`` and ``hip`` are None, as in a CPU build of torch."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("limn")
except metadata.PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0.0.0+unknown"

cuda = None
hip = None
debug = False
