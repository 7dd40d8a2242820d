"""The C of fused attention's CUSTOM kernels: ``sdpa.c`` beside this file, unit by unit.

The c device compiles ``unit(part, dtype, target)`` and calls its one function, ``entry``;
the printer (``ir(x, stage="c")``), the stage viewer and the profiler show
``kernel_source``, that same unit and the call, so what prints is what runs. A unit is the
storage dtype's ``SDPA_*`` definitions, then ``sdpa.c``, whose ``SDPA_BACKWARD`` keeps one
pass: the forward (``limn_sdpa_fwd_<dtype>``) or the backward (``limn_sdpa_bwd_<dtype>``,
three modes). A
program compiles only what it runs: a float32 GPT step two small units, about 1 s of gcc
-O3, where one unit of every dtype's kernels cost 7 s (15-20 s under load).

How they work. The forward: one task per (batch*head, 64-query tile). K (transposed) and
V of every head are laid out once, before the tasks; they stream past the tile 64 keys at
a time, and each query row keeps a running max, denominator and weighted sum (the online
softmax), then writes its answer and logsumexp L. The backward recomputes the
probabilities exp(s - L) tile by tile; a task owns the rows it writes: a query tile's dq
(mode 1), a key tile's dk and dv (mode 2), or a whole head's dq, dk and dv (mode 3, which
computes the probabilities once for all three). The inner products are a block of R rows
against a 64-wide tile with R x 64 accumulators in registers (``sdpa_dots``), and a
weighted sum of a tile's rows into a block of rows (``sdpa_acc``), written with the
compilers' vector extension. No task writes another task's rows and every sum runs in one
fixed order (a dot product or a weighted sum of rows term by term; a tile's max or sum
lane-wise, then across the lanes left to right), so results are the same bits on every
run, at every thread count and in every mode. Nothing is t_q x t_k. Under a causal mask
no task visits a tile its rows cannot see, and on the diagonal a block of rows computes
only the vectors of scores some row of the block sees.

Rounding. a*b+c is written ``fma()`` (``vfma`` on vectors) wherever these kernels fold a
product: every dot product, every weighted sum of rows, the denominator's rescaled sum and
exp's argument reduction. That is one rounding where the numpy reference's BLAS and numpy
calls may round twice, and the sums run in an order of their own, so the answers differ
from the reference's in the last bits: float32 answers and gradients stay within 16
float32 ulps of the largest float64 value, within the reference's and torch's own error
(``test_float32_kernels_are_as_close_to_the_float64_answer_as_the_reference_and_torch``).
The c device compiles with ``-ffp-contract=off``, so no other a*b+c is fused. exp is the
c device's own float32 ``limn_expf`` of ``ir/c/render.py``'s prelude, which a unit
carries (about 1 ulp, exactly 0 below exp(-104) as exp(-inf) is; float64: libm's), and
bfloat16 converts by the prelude's functions. Half widths load into float32 and round once on store.

Special values. The reference multiplies every hidden (query, key) pair's terms by its
exact 0 probability, and 0 * inf and 0 * nan are nan: an inf or nan in a value row (or in
a gradient's factors) reaches every row the key is hidden from. These kernels skip hidden
pairs, so where a head's inputs hold an inf or nan (``sdpa_nonfinite`` scans them) the
``sdpa_hide_*`` routines put those nans in afterwards; elsewhere a skipped term is a zero
and skipping it changes no bit.
"""

from __future__ import annotations

from pathlib import Path

from ir.c.render import PRELUDE, fma_isa, vector_helpers
from ir.c.target import Target
from ir.graph import dtypes

SOURCE = Path(__file__).with_name("sdpa.c").read_text()  # its part chosen by SDPA_BACKWARD

DTYPES = {  # storage dtype: (its name, C type, computes in double, load, store)
    dtypes.float32: ("float32", "float", 0, "(x)", "(x)"),
    dtypes.float64: ("float64", "double", 1, "(x)", "(x)"),
    dtypes.float16: ("float16", "_Float16", 0, "((float)(x))", "((_Float16)(x))"),
    dtypes.bfloat16: ("bfloat16", "uint16_t", 0, "limn_bf2f(x)", "limn_f2bf(x)"),
}

KERNELS = {"sdpa": "fwd", "sdpa_bwd_q": "bwd", "sdpa_bwd_kv": "bwd"}  # CUSTOM name: part
SOURCES = {
    "fwd": ("q", "k", "v", "key_mask"),
    "bwd": ("q", "k", "v", "do", "lse", "delta", "key_mask"),
}
MODES = {"sdpa_bwd_q": "1 (dq)", "sdpa_bwd_kv": "2 (dk, dv)"}


def check(dtype) -> dtypes.DType:
    d = dtypes.as_dtype(dtype)
    if d not in DTYPES:
        raise TypeError(f"sdpa: the c device's kernels take {', '.join(map(str, DTYPES))}, got {d}")
    return d


def unit(part: str, dtype, target: Target) -> str:
    """The translation unit of ``part`` ("fwd" or "bwd") for storage ``dtype``."""
    name, ctype, wide, load, store = DTYPES[check(dtype)]
    vec = "limn_f64x8" if wide else "limn_f32x16"  # FOLD_BYTES of the compute type
    return (
        f"#define SDPA_T {ctype}\n#define SDPA_NAME {name}\n#define SDPA_WIDE {wide}\n"
        f"#define SDPA_LD(x) {load}\n#define SDPA_ST(x) {store}\n#define SDPA_VFMA {vec}_fma\n"
        f"#define SDPA_BACKWARD {int(part == 'bwd')}\n"
        f"#ifndef LIMN_NEG /* once: an exported program holds the prelude already */\n"
        f"{PRELUDE}#endif\n{fma_isa(target)}\n{vector_helpers(vec)}\n{SOURCE}"
    )


def entry(part: str, dtype) -> str:
    return f"limn_sdpa_{part}_{DTYPES[check(dtype)][0]}"


def kernel_source(k, target: Target, names: list[str] | None = None) -> tuple[str, str] | None:
    """(the call, the unit) of CUSTOM kernel ``k`` on the c device: the function it runs
    with its buffers (``names``: of the kernel's inputs) and params, and the source that
    function is compiled from; None for a CUSTOM kernel with no C here (one the device
    runs on the host)."""
    name, _, params = k.result.arg
    part = KERNELS.get(name)
    if part is None:
        return None
    dtype = k.rows[k.result.srcs[0]].dtype
    names = names or [f"in{i}" for i in range(len(k.inputs))]
    srcs = [names[k.rows[r].arg] for r in k.result.srcs] + ["NULL"]
    scale, causal, heads = params
    mode = MODES.get(name)
    args = ", ".join(f"{a}={b}" for a, b in zip(SOURCES[part], srcs))
    call = f"{entry(part, dtype)}({args}; scale={scale!r}, causal={int(causal)}, heads={heads}"
    call += (f", mode={mode}, or 3 with its sibling" if mode else "") + ")"
    return call, unit(part, dtype, target)
