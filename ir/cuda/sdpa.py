"""The CUDA of fused attention's CUSTOM kernels: ``sdpa.cu`` beside this file, one NVRTC
program per (storage dtype, d, dv), so the row length is a constant the compiler unrolls.

The cuda device compiles ``source(dtype, d, dv)`` and launches its three functions;
``ir(x, stage="cuda")`` and the stage viewer show ``kernel_source``, that same program under
a line naming the launch.
"""

from __future__ import annotations

from pathlib import Path

from ir.cuda.render import PRELUDE, cast, ctype
from ir.graph import dtypes
from ir.graph.dtypes import DType

SOURCE = Path(__file__).with_name("sdpa.cu").read_text()
THREADS = 128
FUNCTIONS = {
    "sdpa": "limn_sdpa_fwd",
    "sdpa_bwd_q": "limn_sdpa_bwd_q",
    "sdpa_bwd_kv": "limn_sdpa_bwd_kv",
}


def acc_dtype(d: DType) -> DType:
    return dtypes.float64 if d == dtypes.float64 else dtypes.float32


def source(dtype: DType, d: int, dv: int) -> str:
    """The three kernels for one storage dtype and head widths, as one NVRTC program."""
    acc = acc_dtype(dtype)
    fn = "static __device__ __forceinline__"
    defs = (
        f"#define D {d}\n#define DV {dv}\n#define THREADS {THREADS}\n"
        f"typedef {ctype(acc)} acc_t;\ntypedef {ctype(dtype)} store_t;\n"
        f"{fn} acc_t ld(store_t x) {{ return {cast('x', dtype, acc)}; }}\n"
        f"{fn} store_t st(acc_t x) {{ return {cast('x', acc, dtype)}; }}\n"
    )
    return PRELUDE + defs + SOURCE


def widths(shapes, heads: int) -> tuple[int, int]:
    """d and dv of q's and v's shapes, in either layout (``heads`` > 0: packed)."""
    q, v = shapes[0], shapes[2]
    return (q[-1] // heads, v[-1] // heads) if heads else (q[-1], v[-1])


def kernel_source(k, names: list[str] | None = None) -> tuple[str, str] | None:
    """(the launch, the program) of CUSTOM kernel ``k`` on the cuda device: the function
    with its buffers and params, and the NVRTC program it comes from; None for a CUSTOM
    kernel with no CUDA here."""
    name, _, params = k.result.arg
    if name not in FUNCTIONS:
        return None
    rows = [k.rows[r] for r in k.result.srcs]
    names = names or [f"in{i}" for i in range(len(k.inputs))]
    d, dv = widths([r.shape for r in rows], params[2])
    srcs = ", ".join(names[r.arg] for r in rows)
    return f"{FUNCTIONS[name]}({srcs}; params {params})", source(rows[0].dtype, d, dv)
