"""Fused attention on the cuda device: the CUSTOM kernels sdpa, sdpa_bwd_q and sdpa_bwd_kv,
launched from the program ``ir/cuda/sdpa.py`` makes of ``ir/cuda/sdpa.cu`` (what they
compute, and how, is said there). The params are (scale, causal, heads): ``heads`` 0 for
(..., t, d) sources, H for the packed (B, t, H * d) layout of ``limn/sdpa.py``.
"""

from __future__ import annotations

import ctypes
import math

from ir.cuda.sdpa import FUNCTIONS, THREADS, acc_dtype, source, widths
from ir.graph import dtypes
from ir.graph.dtypes import DType

__all__ = ["THREADS", "acc_dtype", "source"]


class FusedAttention:
    """The three kernels as CUSTOM kernels of a CudaDevice: compiled per (dtype, d, dv)."""

    outputs = {"sdpa": 2, "sdpa_bwd_q": 1, "sdpa_bwd_kv": 2}

    def __init__(self, device, name: str):
        self.device, self.name = device, name

    def functions(self, dtype: DType, d: int, dv: int):
        key = (dtype, d, dv)
        cache = self.device.sdpa_modules
        if key not in cache:
            drv = self.device.driver
            ptx = self.device.ptx(source(dtype, d, dv))
            mod = drv.module(ptx)
            cache[key] = (mod, {n: drv.function(mod, n) for n in FUNCTIONS.values()})
        return cache[key][1]

    def run(self, drv, shapes, dtype: DType, ins: list[int], outs: list[int], params) -> None:
        """Launch on device pointers: ``ins`` as the CUSTOM node's sources, ``outs`` all of
        the kernel's outputs."""
        scale, causal, heads = params  # heads > 0: the packed (B, t, heads * d) layout
        q, k = shapes[0], shapes[1]
        t_q, t_k = (q[1], k[1]) if heads else (q[-2], k[-2])
        bh = q[0] * heads if heads else math.prod(q[:-2])
        fn = self.functions(dtype, *widths(shapes, heads))[FUNCTIONS[self.name]]
        n_srcs = 3 if self.name == "sdpa" else 6  # the key mask comes after them
        mask = ins[-1] if len(ins) > n_srcs else 0
        rows = bh * (t_k if self.name == "sdpa_bwd_kv" else t_q)
        grid = max(1, min(-(-rows * 32 // THREADS), 1 << 16))
        real = ctypes.c_double if acc_dtype(dtype) == dtypes.float64 else ctypes.c_float
        tail = [ctypes.c_longlong(bh), ctypes.c_int(t_q), ctypes.c_int(t_k)]
        tail += [ctypes.c_int(max(heads, 1)), real(float(scale)), ctypes.c_int(int(bool(causal)))]
        drv.launch(fn, grid, THREADS, [*ins[:n_srcs], mask, *outs, *tail])


def register(device) -> None:
    """Give ``device`` (a CudaDevice) the fused attention kernels."""
    for name in FusedAttention.outputs:
        device.register_kernel(name, FusedAttention(device, name))
