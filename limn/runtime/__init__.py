"""Execution: devices, buffers, caches. The one part of limn that is not pure."""

from limn.runtime.device import (
    Buffer,
    Device,
    current_device,
    get_device,
    register_device,
    set_device,
)
from limn.runtime.numpy_ref import NumpyDevice

register_device("numpy", NumpyDevice)


def _c_device():
    from limn.runtime.c import CDevice

    return CDevice()


register_device("c", _c_device)

__all__ = ["Buffer", "Device", "current_device", "get_device", "register_device", "set_device"]
