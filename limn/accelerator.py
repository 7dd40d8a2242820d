"""limn.accelerator: torch's ``torch.accelerator`` queries, answered "none".

torch programs ask ``torch.accelerator.is_available()`` and, if so, put their model on
``current_accelerator()``. limn places work by device name (``"c"``, ``"cuda"``, ...) and
picks its default from ``LIMN_DEVICE``, so this module reports no accelerator and such a
program takes its CPU branch, which runs on limn's default device.
"""

from __future__ import annotations


def is_available() -> bool:
    """False: limn has no torch-style accelerator (its cuda device is named, not found)."""
    return False


def current_accelerator(check_available: bool = False):
    """None, as torch answers on a machine without one."""
    return None


def device_count() -> int:
    return 0
