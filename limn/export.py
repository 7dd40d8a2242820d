"""limn.export_c: a function's plan as one C file that needs no Python, no limn, no OpenMP.

``export_c(fn, *example_args, path="model.c")`` calls ``fn`` on the example Tensors, takes
the plan the c device builds for what it returns, and writes three files:

* ``model.c``: every kernel of the plan, the text the c device compiles (``plan_units``,
  what ``ir(x, stage="c")`` prints) in one translation unit, the fused-attention source
  where the plan calls it, the buffer plan (each intermediate at its own offset of one
  arena), and the entry points;
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
from ir.c.target import detect
from ir.c.units import plan_units
from ir.graph.dtypes import to_numpy
from ir.graph.ops import Op
from ir.kernel.kernel import constant_kernels
from limn import versions
from limn.runtime.device import get_device, recall
from limn.runtime.numpy_ref import evaluate_kernel
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
    tuned = detect(target) if target else dev.target
    passes = c_passes(tuned) if target else dev.passes
    u = plan_units(g, passes, dev.openmp, None, dev.generic_kernels, tuned)
    arg_of = {id(t.node.arg): j for j, t in enumerate(inputs_given)}
    blob, places, inputs = bytearray(), {}, {}  # places: buffer -> offset in the arena

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
    sizes = [_size(spec) for spec in g.buffers]  # and a scratch buffer per unused output
    body, consts, on_host, called = [], {}, constant_kernels(g), set()
    for i, k in enumerate(g.kernels):
        spec = g.buffers[k.output]
        if i in on_host:
            value = evaluate_kernel(k, [consts[b] for b in k.inputs])
            consts[k.output] = np.asarray(value, to_numpy(spec.dtype)).reshape(spec.shape)
            keep(k.output, consts[k.output])
            continue
        args = ", ".join(f"b[{b}]" for b in (*k.inputs, k.output))
        if k.kind == "CUSTOM":
            group = _call_of(k)
            if group in called:
                continue
            called.add(group)
            siblings = (j for j in g.kernels if j.kind == "CUSTOM" and _call_of(j) == group)
            outs_of = {j.result.arg[1]: j.output for j in siblings}
            body.append(_attention(k, outs_of, sizes))
        elif i in u.calls:
            name, given = u.calls[i]
            body.append(
                f"{{ static const int64_t s[] = {{{', '.join(map(str, given)) or '0'}}};"
                f" void *a[] = {{{args}}}; {name}(a, err, s); }}"
            )
        else:
            body.append(f"{{ void *a[] = {{{args}}}; k{i}(a, err); }}")
        body.append("if (err[0]) return (int)err[0];")
    arena = len(blob)  # the intermediates after the weights, each at its own offset
    for b, n in enumerate(sizes):
        if b not in places and b not in inputs:
            places[b], arena = arena, arena + _aligned(n)
    points = [f"b[{b}] = (void *)in[{j}];" for b, j in inputs.items()]
    points += [f"b[{b}] = arena + {o};" for b, o in sorted(places.items())]
    copies = [f"memcpy(out[{j}], b[{s.buffer}], {_size(s)});" for j, s in enumerate(g.sinks)]
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
        program(u.functions, tuned),
        sdpa.unit("fwd", used.pop()) if used else "",
        _entry(stem, len(sizes), len(blob), _aligned(max(arena, 1)), points, body, copies),
    ]
    path.write_text("\n".join(parts))
    header.write_text(_header(stem, path.name, info))
    path.with_suffix(".bin").write_bytes(bytes(blob))
    return {"c": path, "h": header, "weights": path.with_suffix(".bin"), **info}


def _call_of(k) -> tuple:
    """A CUSTOM kernel's call (its name, inputs, params): one for all its outputs."""
    return k.result.arg[0], k.inputs, repr(k.result.arg[2])


def _attention(k, outs: dict[int, int], sizes: list[int]) -> str:
    """The C call of a fused-attention forward (``ir/c/sdpa.c``): the answer and the
    logsumexp go to their kernels' buffers, or to a scratch buffer added to ``sizes``."""
    name, _, (scale, causal, heads) = k.result.arg
    if name != "sdpa":
        raise NotImplementedError(f"export_c: no C call for the CUSTOM kernel {name!r}")
    srcs = [f"b[{k.inputs[k.rows[r].arg]}]" for r in k.result.srcs]
    q, _, v = (k.rows[r] for r in k.result.srcs[:3])
    rows = math.prod(q.shape[:-1])
    acc = 8 if q.dtype.itemsize == 8 else 4
    for j, n in ((0, rows * v.shape[-1] * q.dtype.itemsize), (1, rows * max(1, heads) * acc)):
        if j not in outs:
            outs[j] = len(sizes)
            sizes.append(n)
    (tq, d), (tk, dv), bh = q.shape[-2:], v.shape[-2:], math.prod(q.shape[:-2])
    if heads:  # (B, t, heads * width) rows
        bh, d, dv = q.shape[0] * heads, d // heads, dv // heads
    mask = srcs[3] if len(srcs) > 3 else "NULL"
    dims = [bh, tq, tk, d, dv, max(heads, 1)]
    args = [*srcs[:3], mask, f"b[{outs[0]}]", f"b[{outs[1]}]", *map(str, dims)]
    return f"{sdpa.entry('fwd', q.dtype)}({', '.join(args)}, {scale!r}, {int(causal)}, threads);"


def _entry(stem, n_bufs, weights, arena, points, body, copies) -> str:
    lines = "\n  ".join([*points, *body, *copies])
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
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  (void)threads;
  {lines}
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
