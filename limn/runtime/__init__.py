"""Execution: devices, buffers, caches. The one part of limn that is not pure."""

from limn.runtime.c import CDevice
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
register_device("c", CDevice)  # a factory: the toolchain is looked for on first use


def _cuda():
    from limn.runtime.cuda import CudaDevice  # binds the driver and NVRTC when first used

    return CudaDevice()


register_device("cuda", _cuda)

__all__ = ["Buffer", "Device", "current_device", "get_device", "register_device", "set_device"]
