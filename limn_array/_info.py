"""Inspection: ``__array_namespace_info__()``, what this namespace supports and where.

The answers are computed from the runtime, not written down twice: the devices are those
limn can start here, and a device's dtypes are what ``_array.device_dtypes`` says it holds.
"""

from __future__ import annotations

from limn.runtime.device import current_device, device_names, get_device
from limn_array._creation import DEFAULT_COMPLEX, DEFAULT_FLOAT, DEFAULT_INT
from limn_array._data_types import ALL, KINDS, isdtype
from limn_array._policy import Device, device_dtypes, device_name


def available_devices() -> list[Device]:
    out = []
    for name in device_names():
        try:
            get_device(name)
        except (RuntimeError, OSError, ImportError):
            continue  # its toolchain is missing here
        out.append(Device(name))
    return out


class Info:
    """The object ``__array_namespace_info__()`` returns."""

    __module__ = "limn_array"

    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> Device:
        return Device(current_device())

    def default_dtypes(self, *, device=None) -> dict:
        device_name(device)
        return {
            "real floating": DEFAULT_FLOAT,
            "complex floating": DEFAULT_COMPLEX,
            "integral": DEFAULT_INT,
            "indexing": DEFAULT_INT,
        }

    def dtypes(self, *, device=None, kind=None) -> dict:
        held = device_dtypes(device_name(device))
        out = {d.name: d for d in ALL if d in held}
        if kind is None:
            return out
        if isinstance(kind, str) and kind not in KINDS:
            raise ValueError(f"dtypes: kind {kind!r} is not one of {list(KINDS)}")
        return {n: d for n, d in out.items() if isdtype(d, kind)}

    def devices(self) -> list[Device]:
        """A new list each call (the standard's ``List[device]``; a caller may extend it)."""
        return available_devices()


def __array_namespace_info__() -> Info:
    return Info()
