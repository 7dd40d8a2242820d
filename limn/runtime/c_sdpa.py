"""The c device's fused attention: the units of ``ir/c/sdpa.c`` compiled on first use and
called through ctypes.

``sdpa`` runs the forward; ``sdpa_bwd_q`` and ``sdpa_bwd_kv`` run the backward in mode 1
(dq, a task per query tile) and mode 2 (dk and dv, a task per key tile); mode 3 (a task
per head, the probabilities computed once for all three gradients) is the one the plan
driver picks for a step that holds both where there are at least two heads per thread.
Every mode gives the same bits.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ir.c import sdpa as source


def _ptr(a: np.ndarray | None):
    return None if a is None else ctypes.c_void_p(a.ctypes.data)


class SdpaKernels:
    """The kernels bound to one c device (its toolchain, thread count and buffer pool)."""

    def __init__(self, device):
        self.device = device
        self.functions: dict[tuple, object] = {}

    def fn(self, part: str, dtype):
        """The compiled ``part`` ("fwd" or "bwd") for storage ``dtype``, built on first use."""
        key = (part, np.dtype(dtype))
        if key not in self.functions:
            lib = self.device.toolchain.library(source.unit(part, dtype, self.device.target))
            self.functions[key] = getattr(lib, source.entry(part, dtype))
        return self.functions[key]

    def _dims(self, q, v, scale, causal, heads):
        """bh, t_q, t_k, d, dv, heads, scale, causal: (..., t, d) sources (``heads`` 0), or
        (B, t, heads * d) ones"""
        if heads:
            bh, (tq, d), (tk, dv) = q.shape[0] * heads, q.shape[1:], v.shape[1:]
            d, dv = d // heads, dv // heads
        else:
            bh, (tq, d), (tk, dv) = math.prod(q.shape[:-2]), q.shape[-2:], v.shape[-2:]
        ints = [ctypes.c_int64(n) for n in (bh, tq, tk, d, dv, max(heads, 1))]
        return [*ints, ctypes.c_double(scale), ctypes.c_int(int(causal))]

    def _threads(self) -> int:
        return max(1, int(self.device.threads))

    def _empty(self, shape, dtype) -> np.ndarray:
        """A result array (the driver calls these kernels itself; this is the host path)."""
        return np.empty(tuple(shape), np.dtype(dtype))

    def sdpa(self, vals, params):
        q, k, v = (np.ascontiguousarray(a) for a in vals[:3])
        mask = np.ascontiguousarray(vals[3]) if len(vals) > 3 else None
        acc = np.float64 if q.dtype == np.float64 else np.float32
        heads = params[2]
        o = self._empty(q.shape[:-1] + v.shape[-1:], q.dtype)
        lse = self._empty(q.shape[:-1] + ((heads,) if heads else ()), acc)
        fn = self.fn("fwd", q.dtype)
        threads = ctypes.c_int(self._threads())
        fn(*map(_ptr, (q, k, v, mask, o, lse)), *self._dims(q, v, *params), threads)
        return o, lse

    def bwd(self, vals, params, mode: int):
        """dq (mode 1), dk and dv (mode 2), or all three (mode 3)."""
        q, k, v, do = (np.ascontiguousarray(a) for a in vals[:4])
        acc = np.float64 if q.dtype == np.float64 else np.float32
        lse, delta = (np.ascontiguousarray(a, acc) for a in vals[4:6])
        mask = np.ascontiguousarray(vals[6]) if len(vals) > 6 else None
        dq = self._empty(q.shape, q.dtype) if mode & 1 else None
        dk, dv = (self._empty(a.shape, a.dtype) for a in (k, v)) if mode & 2 else (None, None)
        ptrs = map(_ptr, (q, k, v, do, lse, delta, mask, dq, dk, dv))
        dims = self._dims(q, v, *params)
        threads = self._threads()
        self.fn("bwd", q.dtype)(*ptrs, *dims, ctypes.c_int(mode), ctypes.c_int(threads))
        return tuple(a for a in (dq, dk, dv) if a is not None)


def register(device) -> SdpaKernels:
    """Give ``device`` (a CDevice) the three fused attention kernels. Its plans call their C
    from the driver (``limn/runtime/driver.py``: the two gradient kernels of one step in
    one call); these are the same functions called from Python."""
    ks = SdpaKernels(device)
    device.register_kernel("sdpa", ks.sdpa)
    device.register_kernel("sdpa_bwd_q", lambda vals, params: ks.bwd(vals, params, 1))
    device.register_kernel("sdpa_bwd_kv", lambda vals, params: ks.bwd(vals, params, 2))
    return ks
