"""limn.backends.mps: torch's Apple-GPU queries, a stand-in: limn has no MPS device, so
a program asking takes its CPU branch."""

from __future__ import annotations


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
