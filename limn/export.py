"""limn.export_c: a function's plan as one C file that needs no Python, no limn, no OpenMP.

``export_c(fn, *example_args, path="model.c")`` calls ``fn`` on the example Tensors, takes
the plan the c device builds for what it returns, and writes three files:

* ``model.c``: every kernel of the plan, the text the c device compiles (``ir.c.units.compile``,
  what ``ir(x, stage="c")`` prints) in one translation unit, the fused-attention source
  where the plan calls it, and the plan's driver: the table of calls and the function
  that runs it (``limn/runtime/driver.py``), the very ones the c device runs the plan
  with, each intermediate at the offset of the arena the device gives it; then the entry
  points;
* ``model.h``: the entry points, and the dtype and shape of every input (one per argument
  of ``fn``, in order, whether it reads it or not) and output;
* ``model.bin``: the bytes of every other buffer the plan reads (the weights, and the
  constants the device computes on the host), each 64-byte aligned, as the C places them.

The names start with the file's stem made a C identifier (``1-model.c`` defines
``model_1_model_run``). ``int model_load(const char *path)`` reads the weights (0 on success);
``int model_run(const void *const in[], void *const out[])`` runs the plan on the caller's
row-major buffers and returns 0, or a kernel's error (1: an index out of range, 2: out of
memory); ``void model_free(void)``. ``cc -O3 model.c -lm`` builds it; ``-fopenmp`` adds
threads, which change no bit. The outputs are the c device's bits: the file turns off the
contraction of a*b+c, as the device's flags do, and on x86 asks for the FMA instructions
that the device's ``-march=native`` has and the attention kernel's multiply-adds need.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ir.c import sdpa
from ir.c.passes import c_passes
from ir.c.render import program
from ir.c.units import compile
from ir.graph.ops import Op
from limn import versions
from limn.runtime.device import get_device, recall
from limn.runtime.driver import ATTENTION_GRAD, HOST, SOURCE, Constant, layout
from limn.runtime.target import detect
from limn.tensor import Tensor

ALIGN = 64
PRELUDE = """#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#pragma GCC diagnostic ignored "-Wunknown-pragmas" /* OpenMP's, without -fopenmp */
#pragma GCC diagnostic ignored "-Wunused-variable" /* a tiled block's clamped indices */
#pragma GCC diagnostic ignored "-Wpsabi" /* 64-byte vectors of static functions, no ABI */
#if defined(__x86_64__) && !defined(__FMA__)
#pragma GCC target("fma")
#endif
#endif
#include <stdio.h>
"""


# The vector FMA of whatever ISA the compiler building the file is told of (the device's
# units spell only their target's): defined first, it is the one every unit uses.
FMA_ANY = """#ifndef LIMN_FMA_BYTES
#if defined(__GNUC__) && !defined(__clang__) /* builtins: immintrin.h is ~0.5 s of cc a unit */
#if defined(__AVX512F__)
#define LIMN_FMA_BYTES 64
#define limn_fma_f32_op(a, b, c) __builtin_ia32_vfmaddps512_mask(a, b, c, 0xffff, 4)
#define limn_fma_f64_op(a, b, c) __builtin_ia32_vfmaddpd512_mask(a, b, c, 0xff, 4)
#elif defined(__FMA__) && defined(__AVX__)
#define LIMN_FMA_BYTES 32
#define limn_fma_f32_op __builtin_ia32_vfmaddps256
#define limn_fma_f64_op __builtin_ia32_vfmaddpd256
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define LIMN_FMA_BYTES 16
#define limn_fma_f32_op __builtin_aarch64_fmav4sf
#define limn_fma_f64_op __builtin_aarch64_fmav2df
#else
#define LIMN_FMA_BYTES 0
#endif
#if LIMN_FMA_BYTES
typedef float limn_fma_f32 __attribute__((vector_size(LIMN_FMA_BYTES)));
typedef double limn_fma_f64 __attribute__((vector_size(LIMN_FMA_BYTES)));
#endif
#else
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif
#if defined(__AVX512F__)
#define LIMN_FMA_BYTES 64
typedef __m512 limn_fma_f32; typedef __m512d limn_fma_f64;
#define limn_fma_f32_op(a, b, c) _mm512_fmadd_ps(a, b, c)
#define limn_fma_f64_op(a, b, c) _mm512_fmadd_pd(a, b, c)
#elif defined(__FMA__) && defined(__AVX__)
#define LIMN_FMA_BYTES 32
typedef __m256 limn_fma_f32; typedef __m256d limn_fma_f64;
#define limn_fma_f32_op(a, b, c) _mm256_fmadd_ps(a, b, c)
#define limn_fma_f64_op(a, b, c) _mm256_fmadd_pd(a, b, c)
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define LIMN_FMA_BYTES 16
typedef float32x4_t limn_fma_f32; typedef float64x2_t limn_fma_f64;
#define limn_fma_f32_op(a, b, c) vfmaq_f32(c, a, b)
#define limn_fma_f64_op(a, b, c) vfmaq_f64(c, a, b)
#else
#define LIMN_FMA_BYTES 0
#endif
#endif
#endif"""


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _size(spec) -> int:
    return math.prod(spec.shape) * spec.dtype.itemsize


def export_c(fn, *example_args: Tensor, path, target: str | None = None) -> dict:
    """Write ``fn``'s plan for ``example_args`` as C (the module docstring says what);
    returns the three paths and the (dtype, shape) of each input and output. ``target``
    (an ISA of ``ir/c/target.py``: "avx2", "neon", ...) tunes the C for another CPU than
    the c device's; the bits are the same."""
    dev = get_device("c")
    # one input per argument position, each its own buffer: an argument fn does not read
    # keeps its slot, and one Tensor passed twice is two inputs, as the header counts them
    inputs_given = [Tensor(t.numpy().copy(), t.dtype, device=t.device) for t in example_args]
    versions.watch = []
    try:
        result = fn(*inputs_given)
    finally:
        wrote, versions.watch = versions.watch, None
    if wrote:
        raise ValueError(
            f"export_c: fn assigns into a tensor ({wrote[0]}); export a function that returns"
        )
    outs = [result] if isinstance(result, Tensor) else list(result)
    plan, nodes = dev.plan_for([t.node for t in outs])
    g = plan.graph
    if any(s.source is not None for s in g.sinks):
        raise ValueError("export_c: fn assigns into a tensor; export a function that returns")
    path = Path(path)
    stem = re.sub(r"[^A-Za-z0-9_]", "_", path.stem)  # the prefix of every C name it defines
    stem = stem if stem[:1].isalpha() else f"model_{stem}"  # "1-model.c": model_1_model_run
    if target:  # another CPU's: compiled for it; else the units the plan ran
        tuned = detect(target)
        u = compile(g, c_passes(tuned), tuned, dev.openmp, dev.generic_kernels)
    else:
        tuned, u = dev.target, plan.product
    arg_of = {id(t.node.arg): j for j, t in enumerate(inputs_given)}
    blob, places, inputs = bytearray(), {}, {}  # places: buffer -> offset in the .bin bytes

    def keep(b: int, data: np.ndarray) -> None:
        places[b] = len(blob)
        blob.extend(np.ascontiguousarray(data).tobytes())
        blob.extend(bytes(_aligned(len(blob)) - len(blob)))

    for b, n in enumerate(nodes):  # the plan's inputs: the arguments, and the weights
        held = n.arg if n.op == Op.BUFFER else recall(n)
        if id(held) in arg_of:
            inputs[b] = arg_of[id(held)]
        else:
            keep(b, held.data)
    for k, step in zip(g.kernels, plan.steps):  # the constants the device computed once
        if isinstance(step, Constant):
            keep(k.output, step.value)
    # the driver's rows and arena, as the device lays them out, after the weights
    rows, offsets, size = layout(g, plan.steps, set(places) - set(range(g.n_inputs)))
    for row in rows:
        if row.kind == HOST or row.kind == ATTENTION_GRAD:
            name = g.kernels[row.kernel].result.arg[0]
            raise NotImplementedError(f"export_c: no C call for the CUSTOM kernel {name!r}")
    points = [f"b[{b}] = (void *)in[{j}];" for b, j in inputs.items()]
    points += [f"b[{b}] = arena + {o};" for b, o in sorted(places.items())]
    points += [f"b[{b}] = arena + {len(blob) + o};" for b, o in sorted(offsets.items())]
    copies = [f"memcpy(out[{j}], b[{s.buffer}], {_size(s)});" for j, s in enumerate(g.sinks)]
    n_bufs = len(g.buffers) + sum(b >= len(g.buffers) for b in offsets)
    arena = _aligned(len(blob) + max(size, 1))
    info = {
        "inputs": [(t.dtype, tuple(t.shape)) for t in inputs_given],
        "outputs": [(s.dtype, s.shape) for s in g.sinks],
    }
    used = {g.buffers[k.output].dtype for k in g.kernels if k.kind == "CUSTOM"}
    if len(used) > 1:
        raise NotImplementedError(f"export_c: attention in {len(used)} dtypes; one is written")
    header = path.with_suffix(".h")
    parts = [
        f"/* {path.name}: a limn plan (limn.export_c); {header.name} says how to call it */",
        PRELUDE + f'#include "{header.name}"',
        FMA_ANY,
        program(u.functions, tuned),
        sdpa.unit("fwd", used.pop(), tuned) if used else "",
        SOURCE,
        f"static const limn_step {stem}_rows[] = {{\n  {_rows(rows)}\n}};",
        _entry(stem, n_bufs, len(rows), len(blob), arena, points, copies),
    ]
    path.write_text("\n".join(parts))
    header.write_text(_header(stem, path.name, info))
    path.with_suffix(".bin").write_bytes(bytes(blob))
    return {"c": path, "h": header, "weights": path.with_suffix(".bin"), **info}


def _rows(rows) -> str:
    """The driver's table as C: each row's function, buffers and integers."""
    out = []
    for r in rows:
        fn = f"(void *){r.fn}" if r.fn else "NULL"
        args, ints = (", ".join(map(str, x)) or "0" for x in (r.args, r.ints))
        out.append(f"{{{fn}, {r.kind}, {len(r.args)}, (const int64_t[]){{{args}}}, "
                   f"(const int64_t[]){{{ints}}}, {r.scale!r}, 0}}")  # fmt: skip
    return ",\n  ".join(out) or "{NULL, 0, 0, NULL, NULL, 0.0, 0}"


def _entry(stem, n_bufs, n_rows, weights, arena, points, copies) -> str:
    points, copies = "\n  ".join(points), "\n  ".join(copies)
    return f"""
/* the weights and constants (the first {weights} bytes, read from the .bin file), then
   each intermediate buffer at its own offset */
static unsigned char *arena;

int {stem}_load(const char *path) {{
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  free(arena);
  arena = aligned_alloc({ALIGN}, {arena});
  size_t got = arena ? fread(arena, 1, {weights}, f) : 0;
  int more = fgetc(f) != EOF;
  fclose(f);
  if (got == {weights} && !more) return 0;
  {stem}_free();
  return -1;
}}

void {stem}_free(void) {{
  free(arena);
  arena = NULL;
}}

int {stem}_run(const void *const in[], void *const out[]) {{
  if (!arena) return -1;
  void *b[{n_bufs}];
  int64_t err[5] = {{0}};
#ifdef _OPENMP
  limn_driver_threads(omp_get_max_threads());
#endif
  {points}
  if (limn_drive({stem}_rows, 0, {n_rows}, b, err, NULL)) return (int)err[0];
  {copies}
  return 0;
}}
"""


def _header(stem: str, name: str, info: dict) -> str:
    def lines(kind, specs):
        return [
            f" * {kind}[{j}]: {d} {list(s)}, {math.prod(s) * d.itemsize} bytes"
            for j, (d, s) in enumerate(specs)
        ]

    def nbytes(specs):
        return [str(math.prod(s) * d.itemsize) for d, s in specs]

    io = "\n".join(lines("in", info["inputs"]) + lines("out", info["outputs"]))
    return f"""/* {stem}.h: a limn plan as C (limn.export_c); row-major buffers the caller owns:
{io}
 * {stem}_load reads the weights file (0 on success, -1 if it is missing or the wrong size);
 * {stem}_run computes every output from the inputs: 0, or 1 (an index out of range), 2
 * (out of memory), -1 (not loaded). Build: cc -O3 {name} -lm [-fopenmp] */
#ifndef {stem.upper()}_H
#define {stem.upper()}_H
#define {stem.upper()}_INPUTS {len(info["inputs"])}
#define {stem.upper()}_OUTPUTS {len(info["outputs"])}
#define {stem.upper()}_IN_BYTES {{{", ".join(nbytes(info["inputs"]))}}}
#define {stem.upper()}_OUT_BYTES {{{", ".join(nbytes(info["outputs"]))}}}
int {stem}_load(const char *path);
int {stem}_run(const void *const in[], void *const out[]);
void {stem}_free(void);
#endif
"""
