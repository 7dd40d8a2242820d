"""What a device may hold and how the standard names devices and dtypes: the array policy.

The standard's device objects are names limn's runtime knows; a device holds the dtypes
it declares, plus the complex dtypes whose float parts it computes (complex arrays are
pairs of real tensors, see ``_array.py``). Every function that makes or moves an array
asks here first, so a refusal always names the device and the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir.graph import dtypes
from ir.graph.dtypes import DType
from limn.runtime.device import current_device, get_device, resolve

API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12")
API_VERSION = "2025.12"


# ---- devices ------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """A device object as the standard sees it: a name limn's runtime knows."""

    name: str

    def __repr__(self) -> str:
        return f"Device({self.name!r})"


def device_dtypes(name: str) -> frozenset[DType]:
    """The dtypes arrays on a device can have: what the device declares it computes
    (``dtypes``; every dtype if it declares nothing), plus each complex dtype whose float
    parts it computes, since complex arrays are pairs of real tensors."""
    declared = getattr(get_device(name), "dtypes", None)
    held = set(dtypes.ALL if declared is None else declared)
    held |= {complex_dtype(d) for d in (dtypes.float32, dtypes.float64) if d in held}
    return frozenset(held)


def device_name(device, default: str | None = None) -> str:
    """Accept a Device, a device name ('cpu' included: c where a C compiler works, else
    numpy), or None (the default device)."""
    if device is None:
        return default or current_device()
    name = device.name if isinstance(device, Device) else device
    if not isinstance(name, str):
        raise ValueError(f"device: {device!r} is not a device; accepted: a Device or a name")
    get_device(name)  # fails here, naming the known devices, if unknown
    return resolve(name)


def check_device_dtype(name: str, d: DType, op: str) -> None:
    if d not in device_dtypes(name):
        raise TypeError(
            f"{op}: the {name} device cannot hold {d} arrays; move the data to a device "
            f"that can (e.g. to_device('numpy')) or use a dtype it holds"
        )


# ---- dtypes -------------------------------------------------------------------------


def real_dtype(d: DType) -> DType:
    """The dtype of a complex dtype's parts (a real dtype is its own)."""
    return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(d, d)


def complex_dtype(d: DType) -> DType:
    return {dtypes.float32: dtypes.complex64, dtypes.float64: dtypes.complex128}[d]
