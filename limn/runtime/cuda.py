"""The cuda device: loop nests rendered as CUDA C, compiled by NVRTC, run through the driver.

Nothing is pinned to a CUDA version: ``libcuda`` (the driver) and NVRTC are bound through
ctypes when the device is first used, from the prototypes below (``tests/test_cuda.py``
checks them against the headers). NVRTC comes from a CUDA toolkit or from the
``nvidia-cuda-nvrtc`` wheel of the ``cuda`` extra. Kernels compile to PTX for the newest
architecture the loaded NVRTC supports that does not exceed the GPU's; the driver's JIT
covers a GPU newer than the toolkit.

A plan is one NVRTC program (every kernel of the graph, ``ir/cuda/render.py``), cached in
memory by graph structure like the c device's, and its PTX on disk by source hash. Buffers
are host numpy arrays, as on the other devices: a plan's run uploads its inputs once, keeps
every intermediate in GPU memory, and downloads only what the host reads (the sinks and
the values an ASSIGN writes back), so tensors move freely between cuda and the host
devices, and ``limn.capture`` replays plans as it does on c.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import math
import os
import site
import sys
from collections.abc import Sequence
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_ubyte, c_uint, c_uint64, c_void_p
from pathlib import Path

import numpy as np

from ir.cuda import sdpa
from ir.cuda.render import kernels, program
from ir.graph import dtypes
from ir.kernel.kernel import KernelGraph
from limn.runtime.cc import cache_root, private_dir
from limn.runtime.cuda_sdpa import FusedAttention, acc_dtype
from limn.runtime.cuda_sdpa import register as register_sdpa
from limn.runtime.driver import raise_error
from limn.runtime.jit import CompiledDevice, Plan

# name -> (restype, argtypes), as declared in nvrtc.h and cuda.h
NVRTC_PROTOTYPES = {
    "nvrtcVersion": (c_int, [POINTER(c_int), POINTER(c_int)]),
    "nvrtcGetNumSupportedArchs": (c_int, [POINTER(c_int)]),
    "nvrtcGetSupportedArchs": (c_int, [POINTER(c_int)]),
    "nvrtcCreateProgram": (
        c_int,
        [POINTER(c_void_p), c_char_p, c_char_p, c_int, POINTER(c_char_p), POINTER(c_char_p)],
    ),
    "nvrtcCompileProgram": (c_int, [c_void_p, c_int, POINTER(c_char_p)]),
    "nvrtcGetPTXSize": (c_int, [c_void_p, POINTER(c_size_t)]),
    "nvrtcGetPTX": (c_int, [c_void_p, c_char_p]),
    "nvrtcGetProgramLogSize": (c_int, [c_void_p, POINTER(c_size_t)]),
    "nvrtcGetProgramLog": (c_int, [c_void_p, c_char_p]),
    "nvrtcDestroyProgram": (c_int, [POINTER(c_void_p)]),
    "nvrtcGetErrorString": (c_char_p, [c_int]),
}

DRIVER_PROTOTYPES = {
    "cuInit": (c_int, [c_uint]),
    "cuDriverGetVersion": (c_int, [POINTER(c_int)]),
    "cuDeviceGetCount": (c_int, [POINTER(c_int)]),
    "cuDeviceGet": (c_int, [POINTER(c_int), c_int]),
    "cuDeviceGetAttribute": (c_int, [POINTER(c_int), c_int, c_int]),
    "cuDeviceGetName": (c_int, [c_char_p, c_int, c_int]),
    "cuDevicePrimaryCtxRetain": (c_int, [POINTER(c_void_p), c_int]),
    "cuCtxSetCurrent": (c_int, [c_void_p]),
    "cuCtxSynchronize": (c_int, []),
    "cuModuleLoadData": (c_int, [POINTER(c_void_p), c_void_p]),
    "cuModuleGetFunction": (c_int, [POINTER(c_void_p), c_void_p, c_char_p]),
    "cuMemAlloc_v2": (c_int, [POINTER(c_uint64), c_size_t]),
    "cuMemFree_v2": (c_int, [c_uint64]),
    "cuMemcpyHtoD_v2": (c_int, [c_uint64, c_void_p, c_size_t]),
    "cuMemcpyDtoH_v2": (c_int, [c_void_p, c_uint64, c_size_t]),
    "cuMemcpyDtoD_v2": (c_int, [c_uint64, c_uint64, c_size_t]),
    "cuMemsetD8_v2": (c_int, [c_uint64, c_ubyte, c_size_t]),
    # f, grid x y z, block x y z, shared bytes, stream, kernel params, extra
    "cuLaunchKernel": (c_int, [c_void_p, *[c_uint] * 7, c_void_p, *[POINTER(c_void_p)] * 2]),
    "cuGetErrorString": (c_int, [c_int, POINTER(c_char_p)]),
}

COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR = 75, 76  # CUdevice_attribute values
NVRTC_OPTIONS = ("--fmad=false", "--std=c++17", "-default-device")


def bind(lib: ctypes.CDLL, prototypes: dict) -> dict:
    """Each prototype's function from ``lib`` with its restype and argtypes set."""
    out = {}
    for name, (res, args) in prototypes.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
        out[name] = fn
    return out


def wheel_dirs() -> list[str]:
    """Where the nvidia-* wheels put their files, under every site-packages dir."""
    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    out = []
    for r in roots:
        for sub in ("nvidia/cu13", "nvidia/cu12", "nvidia/cuda_nvrtc", "nvidia/cuda_nvcc"):
            d = os.path.join(r, sub)
            if os.path.isdir(d) and d not in out:
                out.append(d)
    return out


def find_nvrtc() -> str:
    """The path of an NVRTC library: $LIMN_NVRTC, the cuda extra's wheel, or a toolkit."""
    if os.environ.get("LIMN_NVRTC"):
        return os.environ["LIMN_NVRTC"]
    cands = []
    for d in wheel_dirs():
        cands += sorted(glob.glob(os.path.join(d, "lib", "libnvrtc.so*")))
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cands += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    cands = [c for c in cands if "builtins" not in c]
    if not cands:
        raise RuntimeError(
            "cuda device: NVRTC not found (looked in the nvidia-cuda-nvrtc wheel and "
            f"{home}/lib64); install a CUDA toolkit or `uv sync --extra cuda`, or set LIMN_NVRTC"
        )
    return cands[-1]


def find_ptxas() -> str | None:
    """ptxas from the nvidia-cuda-nvcc wheel or a toolkit: assembles PTX without a GPU."""
    for d in [*wheel_dirs(), os.environ.get("CUDA_HOME") or "/usr/local/cuda"]:
        p = os.path.join(d, "bin", "ptxas")
        if os.path.exists(p):
            return p
    return None


class Nvrtc:
    """NVRTC through ctypes: CUDA C in, PTX out. Needs no GPU."""

    def __init__(self, path: str | None = None):
        self.path = path or find_nvrtc()
        try:
            self.fn = bind(ctypes.CDLL(self.path), NVRTC_PROTOTYPES)
        except OSError as e:
            raise RuntimeError(f"cuda device: cannot load NVRTC from {self.path}: {e}") from None
        major, minor = c_int(), c_int()
        self.fn["nvrtcVersion"](ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)
        n = c_int()
        self.fn["nvrtcGetNumSupportedArchs"](ctypes.byref(n))
        archs = (c_int * n.value)()
        self.fn["nvrtcGetSupportedArchs"](archs)
        self.archs = tuple(archs)

    def arch_for(self, capability: int) -> int:
        """The newest architecture NVRTC supports that does not exceed the GPU's."""
        fit = [a for a in self.archs if a <= capability]
        if not fit:
            raise RuntimeError(
                f"cuda device: NVRTC {self.version} supports sm_{min(self.archs)} and up; the "
                f"GPU is sm_{capability}"
            )
        return max(fit)

    def check(self, status: int, what: str, prog=None) -> None:
        if status:
            log = self.log(prog) if prog is not None else ""
            err = self.fn["nvrtcGetErrorString"](status).decode()
            raise RuntimeError(f"cuda device: {what} failed: {err}\n{log}")

    def log(self, prog) -> str:
        size = c_size_t()
        self.fn["nvrtcGetProgramLogSize"](prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        self.fn["nvrtcGetProgramLog"](prog, buf)
        return buf.value.decode(errors="replace")

    def ptx(self, source: str, arch: int, name: str = "limn.cu") -> bytes:
        prog = c_void_p()
        args = (ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
        self.check(self.fn["nvrtcCreateProgram"](*args), "nvrtcCreateProgram")
        try:
            opts = [f"--gpu-architecture=compute_{arch}", *NVRTC_OPTIONS]
            arr = (c_char_p * len(opts))(*[o.encode() for o in opts])
            self.check(self.fn["nvrtcCompileProgram"](prog, len(opts), arr), "compile", prog)
            size = c_size_t()
            self.check(self.fn["nvrtcGetPTXSize"](prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            buf = ctypes.create_string_buffer(size.value)
            self.check(self.fn["nvrtcGetPTX"](prog, buf), "nvrtcGetPTX")
            return buf.raw.rstrip(b"\0") + b"\0"
        finally:
            self.fn["nvrtcDestroyProgram"](ctypes.byref(prog))


class Driver:
    """The CUDA driver API through ctypes: one device, its primary context."""

    def __init__(self, ordinal: int = 0):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"cuda device: no NVIDIA driver (libcuda.so.1): {e}") from None
        self.fn = bind(lib, DRIVER_PROTOTYPES)
        self.check(self.fn["cuInit"](0), "cuInit")
        count = c_int()
        self.check(self.fn["cuDeviceGetCount"](ctypes.byref(count)), "cuDeviceGetCount")
        if count.value <= ordinal:
            raise RuntimeError(f"cuda device: {count.value} GPUs visible; asked for #{ordinal}")
        dev = c_int()
        self.check(self.fn["cuDeviceGet"](ctypes.byref(dev), ordinal), "cuDeviceGet")
        self.device = dev.value
        major, minor = c_int(), c_int()
        get = self.fn["cuDeviceGetAttribute"]
        self.check(get(ctypes.byref(major), COMPUTE_CAPABILITY_MAJOR, dev), "attribute")
        self.check(get(ctypes.byref(minor), COMPUTE_CAPABILITY_MINOR, dev), "attribute")
        self.capability = major.value * 10 + minor.value
        name = ctypes.create_string_buffer(256)
        self.fn["cuDeviceGetName"](name, 256, dev)
        self.name = name.value.decode()
        self.ctx = c_void_p()
        self.check(self.fn["cuDevicePrimaryCtxRetain"](ctypes.byref(self.ctx), dev), "context")
        self.check(self.fn["cuCtxSetCurrent"](self.ctx), "cuCtxSetCurrent")

    def check(self, status: int, what: str) -> None:
        if status:
            s = c_char_p()
            self.fn["cuGetErrorString"](status, ctypes.byref(s))
            raise RuntimeError(f"cuda device: {what} failed: {(s.value or b'?').decode()}")

    def alloc(self, nbytes: int) -> int:
        p = c_uint64()
        self.check(self.fn["cuMemAlloc_v2"](ctypes.byref(p), max(1, nbytes)), "cuMemAlloc")
        return p.value

    def free(self, ptr: int) -> None:
        self.fn["cuMemFree_v2"](ptr)

    def upload(self, ptr: int, a: np.ndarray) -> None:
        if a.nbytes:
            self.check(self.fn["cuMemcpyHtoD_v2"](ptr, a.ctypes.data, a.nbytes), "copy to GPU")

    def download(self, a: np.ndarray, ptr: int) -> None:
        if a.nbytes:
            self.check(self.fn["cuMemcpyDtoH_v2"](a.ctypes.data, ptr, a.nbytes), "copy to host")

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self.check(self.fn["cuMemcpyDtoD_v2"](dst, src, nbytes), "copy on the GPU")

    def zero(self, ptr: int, nbytes: int) -> None:
        self.check(self.fn["cuMemsetD8_v2"](ptr, 0, nbytes), "cuMemsetD8")

    def module(self, ptx: bytes):
        m = c_void_p()
        self.check(self.fn["cuModuleLoadData"](ctypes.byref(m), ptx), "cuModuleLoadData")
        return m

    def function(self, module, name: str):
        f = c_void_p()
        self.check(self.fn["cuModuleGetFunction"](ctypes.byref(f), module, name.encode()), name)
        return f

    def launch(self, f, grid: int, block: int, args: Sequence) -> None:
        """Launch ``f``; an int argument is a device pointer, a ctypes value passes as is."""
        vals = [c_uint64(a) if isinstance(a, int) else a for a in args]
        ptrs = (c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), c_void_p) for v in vals])
        self.check(
            self.fn["cuLaunchKernel"](f, grid, 1, 1, block, 1, 1, 0, None, ptrs, None), "launch"
        )

    def sync(self) -> None:
        self.check(self.fn["cuCtxSynchronize"](), "kernel")


def ptx_cache(source: str, arch: int, nvrtc: Nvrtc) -> bytes:
    """PTX for ``source`` at ``arch``, from the disk cache when NVRTC made it before."""
    key = hashlib.sha256(f"{nvrtc.version}|{arch}|{NVRTC_OPTIONS}|{source}".encode()).hexdigest()
    d = private_dir(cache_root() / "cuda")
    path = d / f"{key}.ptx"
    if path.exists():  # the sha256 of key and PTX in front: a flipped digit is built again
        blob = path.read_bytes()
        if hashlib.sha256(key.encode() + blob[32:]).digest() == blob[:32]:
            return blob[32:]
    ptx = nvrtc.ptx(source, arch)
    tmp = Path(f"{path}.{os.getpid()}.tmp")
    tmp.write_bytes(hashlib.sha256(key.encode() + ptx).digest() + ptx)
    os.replace(tmp, path)
    return ptx


class _CudaRun:
    """Runs a plan's kernels on the GPU (``Plan.runner``); only what the host reads (the
    sinks, the ASSIGNs' values, the kept values) comes back."""

    def __init__(self, graph: KernelGraph, calls: list, drv, kept: tuple):
        self.graph, self.calls, self.drv, self.kept, self.stats = graph, calls, drv, kept, None

    def source(self, i: int) -> tuple[str, str] | None:
        return getattr(self.calls[i], "source", None)  # a fused attention launch's

    def run(self, inputs: Sequence[np.ndarray], keep: bool, prof=None) -> dict:
        g, drv = self.graph, self.drv
        host: list[np.ndarray | None] = list(inputs) + [None] * (len(g.buffers) - g.n_inputs)
        wanted = {s.buffer for s in g.sinks} | {s.source for s in g.sinks if s.source is not None}
        wanted |= {b for b, _ in self.kept}
        dev: dict[int, int] = {}
        memo: dict = {"scratch": []}  # one run's shared state: sibling outputs, scratch
        err = drv.alloc(40)
        try:
            drv.zero(err, 40)
            for b, a in enumerate(inputs):
                dev[b] = drv.alloc(a.nbytes)
                drv.upload(dev[b], np.ascontiguousarray(a))
            for i, k in enumerate(g.kernels):
                spec = g.buffers[k.output]
                out = np.empty(spec.shape, dtypes.to_numpy(spec.dtype))
                dev[k.output] = drv.alloc(out.nbytes)
                self.calls[i](drv, [dev[b] for b in k.inputs] + [dev[k.output]], err, memo, k)
                if k.output in wanted:
                    host[k.output] = out
            drv.sync()
            status = np.zeros(5, np.int64)
            drv.download(status, err)
            if status[0]:  # a kernel's error record
                raise_error(status)
            for b in wanted:
                if b >= g.n_inputs and host[b] is not None:
                    drv.download(host[b], dev[b])
            out = {b: host[b] if b >= g.n_inputs else host[b].copy() for b in wanted}
            for s in g.sinks:  # the ASSIGNs, after every value exists
                if s.source is not None:
                    np.copyto(inputs[s.buffer], host[s.source].reshape(inputs[s.buffer].shape))
            return out
        finally:
            for p in [*dev.values(), *memo["scratch"]]:
                drv.free(p)
            drv.free(err)


class CudaDevice(CompiledDevice):
    name = "cuda"

    def __init__(self):
        super().__init__()
        self.nvrtc = Nvrtc()  # fails first, naming what is missing, without a GPU
        self.driver = Driver()
        self.arch = self.nvrtc.arch_for(self.driver.capability)
        self.sdpa_modules: dict = {}
        register_sdpa(self)  # fused attention: sdpa, sdpa_bwd_q, sdpa_bwd_kv on the GPU

    def ptx(self, source: str) -> bytes:
        return ptx_cache(source, self.arch, self.nvrtc)

    def build(self, graph: KernelGraph, slots=(), kept=(), sites=()) -> Plan:
        ks = kernels(graph)
        module = None
        if ks:
            ptx = self.ptx(program(list(ks.values())))
            module = self.driver.module(ptx)
        calls = []
        for i, k in enumerate(graph.kernels):
            if k.kind == "CUSTOM":
                calls.append(self._custom_call(graph, k))
                continue
            fns = [(self.driver.function(module, ln.func), ln) for ln in ks[i].launches]
            calls.append(_launcher(fns))
        runner = _CudaRun(graph, calls, self.driver, kept)
        return Plan(graph, (), tuple(slots), tuple(kept), tuple(sites), None, runner)

    def _custom_call(self, graph: KernelGraph, k):
        """A CUSTOM kernel registered on cuda as a host function: its operands go through
        the host (the fused kernels the attention issue adds run on the GPU instead)."""
        name, out_index, params = k.result.arg
        if name not in self.kernels:
            raise RuntimeError(f"cuda device: no kernel registered for CUSTOM {name!r}")
        fn = self.kernels[name]

        if isinstance(fn, FusedAttention):
            return self._gpu_custom(graph, k, fn)

        def call(drv, ptrs, err, memo, kernel):
            drv.sync()
            args = []
            for b, p in zip(kernel.inputs, ptrs[:-1]):
                spec = graph.buffers[b]
                a = np.empty(spec.shape, dtypes.to_numpy(spec.dtype))
                drv.download(a, p)
                args.append(a)
            out = graph.buffers[kernel.output]
            res = np.ascontiguousarray(fn(args, params)[out_index], dtypes.to_numpy(out.dtype))
            drv.upload(ptrs[-1], res)

        return call

    def _gpu_custom(self, graph: KernelGraph, k, fn):
        """A CUSTOM kernel that runs on the GPU; siblings of one call share a single run."""
        name, out_index, params = k.result.arg
        # a kernel reads each buffer once; the kernel wants its sources in the node's order,
        # repeats included (self-attention over one tensor gives q, k and v one buffer)
        order = [k.rows[r].arg for r in k.result.srcs]

        def call(drv, ptrs, err, memo, kernel):
            key = (name, kernel.inputs, repr(params))
            specs = [graph.buffers[kernel.inputs[i]] for i in order]
            out = graph.buffers[kernel.output]
            if key not in memo:
                outs = []
                for d, shape in _custom_outputs(name, specs, params):
                    p = drv.alloc(_nbytes(d, shape))
                    memo["scratch"].append(p)
                    outs.append(p)
                ins = [ptrs[i] for i in order]
                fn.run(drv, [s.shape for s in specs], specs[0].dtype, ins, outs, params)
                memo[key] = outs
            drv.copy(ptrs[-1], memo[key][out_index], _nbytes(out.dtype, out.shape))

        call.source = sdpa.kernel_source(k)  # (the launch, its program), for the profiler
        return call


def _nbytes(d, shape) -> int:
    return d.itemsize * math.prod(shape)


def _custom_outputs(name: str, specs, params) -> list[tuple]:
    """The (dtype, shape) of every output of a fused attention kernel, from its sources and
    params (scale, causal, heads)."""
    q, k, v = specs[0], specs[1], specs[2]
    acc = acc_dtype(q.dtype)
    heads = params[2]
    if name == "sdpa":
        lse = (*q.shape[:-1], heads) if heads else q.shape[:-1]
        return [(q.dtype, (*q.shape[:-1], v.shape[-1])), (acc, lse)]
    if name == "sdpa_bwd_q":
        return [(q.dtype, q.shape)]
    return [(k.dtype, k.shape), (v.dtype, v.shape)]


def _launcher(fns):
    def call(drv, ptrs, err, memo, kernel):
        for f, ln in fns:
            drv.launch(f, ln.grid, ln.block, [*ptrs, err])

    return call


__all__ = ["CudaDevice", "Driver", "Nvrtc", "find_nvrtc", "find_ptxas"]
