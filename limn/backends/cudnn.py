"""limn.backends.cudnn: torch's cuDNN switches, a stand-in. limn has no cuDNN; a flag a
program sets here is kept and read back, and changes nothing (limn's convolutions are the
same loop nests whatever they say)."""

from __future__ import annotations

allow_tf32 = True
benchmark = False
deterministic = False  # every limn result is deterministic already
enabled = True


def is_available() -> bool:
    return False


def version():
    """None, as torch answers where cuDNN is not there."""
    return None
