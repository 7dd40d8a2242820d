"""Stage 4 for CUDA: a loop nest becomes CUDA C kernels, one of three shapes per phase. Pure.

A nest (after ``ir/cuda/passes``) is a sequence of phases: each top-level loop chain that
writes memory, or a top-level register fold ending in a STORE. Each phase is one
``__global__`` function, launched in order, so a phase sees everything the one before it
wrote. The shape of a phase:

* **cells**: one thread per output cell, in a grid-stride loop so any size runs with a
  bounded grid. The cell's own loops (its reduce axes) run in order inside the thread, so
  every total folds in the serial order, as on the c device.
* **split**: a long reduce over few cells. One block per cell; thread ``p`` folds the
  terms ``p, p + 256, p + 512, ...`` in order, and the 256 partial totals are folded by a
  fixed pairwise tree in shared memory. The one shape that regroups the arithmetic; the
  grouping is a constant of the kernel, not of the GPU, so two runs give the same bits.
* **tile**: a contraction (``out[.., a, b] = fold over r of f(A[.., a, r], B[.., r, b])``).
  A block owns a BM x BN tile of cells, each thread a TM x TN patch in registers; slabs of
  BK reduce steps of every operand are staged through shared memory. Each cell still folds
  r in order, so only where the operands are read from changes.

Only a scatter's colliding adds use atomics, so only a float scatter may differ between
runs; a scatter whose dtype has no atomic add is declined by name.

Each instruction is C's statement (``ir/c/render.Statements``) spelled by C's table
(``ir/c/spell.OPS``) overlaid with CUDA's math library (``CUDA_OPS``), with what CUDA lacks
defined in the prelude: the fixed-width integer names, and float16 held as its bits and
converted by PTX ``cvt`` (round to nearest even, as numpy). NVRTC compiles with
``--fmad=false``: a*b+c rounds twice, as the nest says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ir.c import spell as c
from ir.c.render import Statements
from ir.c.spell import OPS, helpers, index, literal
from ir.cuda.passes import cuda_passes
from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.ops import COMPOSITE, Op
from ir.kernel.kernel import KernelGraph
from ir.loop.lower import lower
from ir.loop.nest import Accum, Check, DefAcc, Kind, Load, Loop, LoopNest, Store
from ir.loop.passes import apply_passes
from ir.loop.rewrite import chain, extent, instructions

THREADS = 256  # threads per block in every shape
MAX_BLOCKS = 1 << 15  # grid cap: bigger problems stride
SPLIT_MIN = 4096  # a reduce this long over ...
SPLIT_CELLS = 1024  # ... at most this many cells takes the split shape
BM, BN, BK, TM, TN = 64, 64, 16, 4, 4  # the tile: block cells, reduce slab, thread patch
SMEM_LIMIT = 48 * 1024  # static shared memory a block may declare

# atomicAdd overloads: the C type an out cell is added through (int64 as unsigned: two's
# complement wraps as a signed add does)
ATOMIC = {dtypes.float32: "float", dtypes.float64: "double", dtypes.int32: "int",
          dtypes.uint32: "unsigned int", dtypes.int64: "unsigned long long",
          dtypes.uint64: "unsigned long long"}  # fmt: skip

PRELUDE = r"""
typedef signed char int8_t; typedef short int16_t; typedef int int32_t;
typedef long long int64_t; typedef unsigned char uint8_t; typedef unsigned short uint16_t;
typedef unsigned int uint32_t; typedef unsigned long long uint64_t;
typedef unsigned short limn_half; /* float16 bits */
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define LIMN_NEG(x) (-(x)) /* the op table's C spelling of NEG (ir/c/render.py says why) */
static __device__ __forceinline__ float limn_h2f(limn_half h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
static __device__ __forceinline__ limn_half limn_f2h(float f) {
  limn_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
static __device__ __forceinline__ limn_half limn_d2h(double d) {
  limn_half h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }
static __device__ __forceinline__ float limn_bf2f(uint16_t b) {
  return __uint_as_float((uint32_t)b << 16); }
static __device__ __forceinline__ uint16_t limn_f2bf(float f) { uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static __device__ __forceinline__ void limn_fail(int64_t *err, int64_t v, int64_t axis,
    int64_t size, int64_t kind) {
  if (atomicCAS((unsigned long long *)err, 0ull, 1ull) == 0ull) {
    err[1] = v; err[2] = axis; err[3] = size; err[4] = kind; } }
"""


def ctype(d: DType) -> str:
    return "limn_half" if d == dtypes.float16 else c.ctype(d, "cuda")


def cliteral(value, d: DType) -> str:
    if d == dtypes.float16:
        import numpy as np

        return f"((limn_half)0x{int(np.float16(value).view(np.uint16)):04x}u)"
    return literal(value, d)


def cast(src: str, s: DType, d: DType) -> str:
    """A value of dtype ``s`` as dtype ``d``; both half widths are held as bits and convert
    through float32, but float64 goes to float16 in one rounding, as numpy."""
    if s == dtypes.float64 and d == dtypes.float16:
        return f"limn_d2h({src})"
    return c.cast(src, s, d, {dtypes.float16: "h", dtypes.bfloat16: "bf"})


# C's spellings, but CUDA's math library for exp and log (C's are the c device's inline
# ones); no composite: the cuda device decomposes them all first
CUDA_OPS = {op: spelling for op, spelling in OPS.items() if op not in COMPOSITE} | {
    Op.EXP: {"": "exp({0})", "float32": "expf({0})"},
    Op.LOG: {"": "log({0})", "float32": "logf({0})"},
}


@dataclass(frozen=True)
class Launch:
    """One ``__global__`` function of a kernel and how to launch it."""

    func: str
    grid: int
    block: int
    shape: str  # "cells", "split" or "tile"
    smem: int = 0  # static shared memory, bytes


@dataclass(frozen=True)
class CudaKernel:
    """A nest as CUDA C: its functions (no prelude), its launches in order, helpers used."""

    source: str
    launches: tuple[Launch, ...]
    used: frozenset


@dataclass(frozen=True)
class TilePlan:
    """The sizes of a tile-shaped phase (``tests/test_cuda.py`` models its index arithmetic)."""

    outer: int  # cells of the loops outside the tile
    m: int  # extent of the row loop
    n: int  # extent of the column loop
    r: int  # reduce terms per cell

    @property
    def tiles(self) -> int:
        return self.outer * -(-self.m // BM) * -(-self.n // BN)


def _decompose(var_loops: list[Loop], linear: str) -> list[str]:
    """C declarations of each loop's variable from a row-major linear index over them."""
    out, stride = [], 1
    for lp in reversed(var_loops):
        e = extent(lp)
        q = f"({linear} / {stride})" if stride != 1 else linear
        pos = f"{q} % {e}" if lp is not var_loops[0] else q
        val = pos if (lp.start, lp.step) == (0, 1) else f"{lp.start} + ({pos}) * {lp.step}"
        out.append(f"const int64_t {lp.var} = {val};")
        stride *= e
    return list(reversed(out))


class _Src:
    """Lines of CUDA C, each with the nest instruction it was written for (None: for no
    one instruction). A line may hold several, joined by newlines; they share it."""

    def __init__(self):
        self.text: list[str] = []
        self.ins: list = []

    def add(self, ins, *lines: str) -> _Src:
        self.text += lines
        self.ins += [ins] * len(lines)
        return self

    def __iadd__(self, other: _Src) -> _Src:
        self.text += other.text
        self.ins += other.ins
        return self

    def origins(self) -> list:
        return [ins for line, ins in zip(self.text, self.ins) for _ in range(line.count("\n") + 1)]


def _decls(out: _Src, loops: list[Loop], linear: str, pad: str) -> None:
    """``_decompose``'s declarations, each mapped to the loop whose variable it declares."""
    for lp, d in zip(loops, _decompose(loops, linear)):
        out.add(lp, pad + d)


class _Cuda(Statements):
    """The state of rendering one nest: each name's dtype, the functions so far, and for
    each function the instruction behind each line (the source map). Each instruction is
    C's statement (``ir/c/render.Statements``) in CUDA's words."""

    OPS = CUDA_OPS
    target = "cuda device"

    def __init__(self, nest: LoopNest, name: str):
        super().__init__(nest)
        self.name = name
        self.funcs: list[str] = []
        self.maps: list[list] = []  # per function: the instruction of each line, or None
        self.launches: list[Launch] = []
        self.scatter = nest.kind == "SCATTER"

    # ---- CUDA's words for C's statements -----------------------------------------------

    ctype, literal, cast = staticmethod(ctype), staticmethod(cliteral), staticmethod(cast)

    def fail(self, ins: Check) -> str:
        kind = int(ins.what == "scatter")
        return f"limn_fail(err, (int64_t){ins.value}, {ins.axis}, {ins.size}, {kind});"

    def accum(self, ins: Accum) -> str:
        if self.scatter and ins.index is not None:  # colliding adds: atomic
            cell = f"{ins.dst}[{index(ins.index, self.values)}]"
            return self.atomic(ins, cell, self.bufs[ins.dst])
        return super().accum(ins)

    def statement(self, ins) -> str:
        if isinstance(ins, DefAcc) and ins.shape:
            raise NotImplementedError("cuda device: array accumulators are a c-device form")
        return super().statement(ins)

    def stmt(self, ins) -> str:
        self.declare(ins)
        return self.statement(ins)

    def atomic(self, ins: Accum, cell: str, d: DType) -> str:
        if ins.op != Op.ADD or d not in ATOMIC:
            raise TypeError(
                f"cuda device: a scatter into {d} needs an atomic add, which CUDA has only for "
                f"{', '.join(map(str, ATOMIC))}; scatter in one of those dtypes and cast, or "
                "use the c or numpy device"
            )
        t = ATOMIC[d]
        return f"atomicAdd(({t} *)&{cell}, ({t}){ins.src});"

    def items(self, items, depth: int) -> _Src:
        pad, lines = "  " * depth, _Src()
        for item in items:
            if isinstance(item, Loop):
                lp = item
                if lp.lo or lp.hi:
                    raise NotImplementedError(
                        "cuda device: symbolic loop bounds are a c-device form"
                    )
                lines.add(
                    lp,
                    f"{pad}for (int64_t {lp.var} = {lp.start}; {lp.var} < {lp.stop}; "
                    f"{lp.var} += {lp.step}) {{",
                )
                lines += self.items(item.body, depth + 1)
                lines.add(lp, pad + "}")
            else:
                lines.add(item, pad + self.stmt(item))
        return lines

    # ---- functions -------------------------------------------------------------------

    def header(self, func: str) -> str:
        ins = (
            f"const {ctype(s.dtype)} *__restrict__ in{i}" for i, s in enumerate(self.nest.inputs)
        )
        out = f"{ctype(self.nest.output.dtype)} *__restrict__ out"
        params = [*ins, out, "int64_t *__restrict__ err"]
        bounds = f"__launch_bounds__({THREADS}, 1)"
        return f'extern "C" __global__ void {bounds} {func}({", ".join(params)}) {{'

    def emit(self, shape: str, body: _Src, grid: int, smem: int = 0) -> None:
        func = f"{self.name}_{len(self.funcs)}"
        src = _Src().add(None, self.header(func), "  (void)err;")
        src += body
        src.add(None, "}")
        self.funcs.append("\n".join(src.text))
        self.maps.append(src.origins())
        self.launches.append(Launch(func, max(1, min(grid, MAX_BLOCKS)), THREADS, shape, smem))

    def render(self) -> CudaKernel:
        values: list = []
        single: list | None = None
        for item in self.nest.body:
            if single is not None:
                single.append(item)
                if (
                    isinstance(item, Store)
                    or isinstance(item, Accum)
                    and item.index is not None
                    or isinstance(item, Loop)  # a scan's loop stores its register every step
                    and any(isinstance(x, Store) for x in instructions((item,)))
                ):
                    self.phase_single(values, single)
                    single = None
            elif isinstance(item, Loop):
                self.phase_block(values, item)
            elif isinstance(item, DefAcc):
                single = [item]
            elif isinstance(item, Store | Accum):
                self.phase_single(values, [item])
            else:
                values.append(item)
        if single is not None:
            raise ValueError(f"cuda device: {self.name} folds into a register it never stores")
        return CudaKernel("\n\n".join(self.funcs), tuple(self.launches), frozenset(self.used))

    def pre(self, values: list) -> _Src:
        out = _Src()
        for v in values:
            out.add(v, "  " + self.stmt(v))
        return out

    def phase_single(self, values: list, items: list) -> None:
        """Top-level work of one cell: a long register fold goes split, the rest one thread."""
        red = _register_fold(tuple(items))
        if red is not None and math.prod(extent(lp) for lp in red[2]) >= SPLIT_MIN:
            self.split(values, [], red)
            return
        body = self.pre(values).add(None, "  if (blockIdx.x == 0 && threadIdx.x == 0) {")
        body += self.items(items, 2)
        self.emit("cells", body.add(None, "  }"), 1)

    def phase_block(self, values: list, block: Loop) -> None:
        loops, inner = chain(block)
        if self.scatter and not any(isinstance(x, Loop) for x in inner):
            cells, inner_loops = loops, []  # collisions are atomic: every point is a thread
        else:
            k = next((j for j, lp in enumerate(loops) if lp.kind is not Kind.OUTPUT), len(loops))
            cells, inner_loops = loops[:k], loops[k:]
        if inner_loops:
            inner = (inner_loops[0],)  # the loops of a perfect chain hold the rest of it
        n = math.prod(extent(lp) for lp in cells)
        red = _register_fold(inner)
        if red is not None and not inner_loops:
            plan = self.tile_plan(cells, red)
            if plan is not None:
                self.tile(values, cells, red, plan)
                return
            if n <= SPLIT_CELLS and math.prod(extent(lp) for lp in red[2]) >= SPLIT_MIN:
                self.split(values, cells, red)
                return
        body = self.pre(values)
        body.add(
            block,  # the grid-stride loop over the cells stands for the first LOOP
            f"  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < {n}; "
            "c += (int64_t)gridDim.x * blockDim.x) {",
        )
        if cells:
            _decls(body, cells, "c", "    ")
        body += self.items(inner, 2)
        self.emit("cells", body.add(block, "  }"), -(-n // THREADS))

    # ---- split: few cells, long reduce -------------------------------------------------

    def split(self, values: list, cells: list[Loop], red) -> None:
        pre, acc, reds, body, tail = red
        n = math.prod(extent(lp) for lp in cells)
        r = math.prod(extent(lp) for lp in reds)
        t = ctype(acc.dtype)
        fin = body[-1]  # the ACCUM: the partial totals and their tree are its fold
        cell = cells[0] if cells else acc  # what the loop over cells stands for
        lines = self.pre(values)
        lines.add(acc, f"  __shared__ {t} part[{THREADS}];")
        lines.add(cell, f"  for (int64_t c = blockIdx.x; c < {n}; c += gridDim.x) {{")
        _decls(lines, cells, "c", "    ")
        lines += self.items(pre, 2)
        self.dtype_of[acc.out] = acc.dtype
        lines.add(acc, f"    {t} {acc.out} = {cliteral(acc.value, acc.dtype)};")
        lines.add(reds[0], f"    for (int64_t t = threadIdx.x; t < {r}; t += {THREADS}) {{")
        _decls(lines, reds, "t", "      ")
        lines += self.items(body, 3)
        lines.add(reds[0], "    }")
        step = self.fold(body[-1].op, "part[threadIdx.x]", "part[threadIdx.x + h]", acc.dtype)
        lines.add(
            fin,
            f"    part[threadIdx.x] = {acc.out};",
            "    __syncthreads();",
            f"    for (int h = {THREADS // 2}; h > 0; h >>= 1) {{",
            f"      if (threadIdx.x < h) {{ {step} }}",
            "      __syncthreads();",
            "    }",
            "    if (threadIdx.x == 0) {",
            f"      {acc.out} = part[0];",
        )
        lines += self.items(tail, 3)
        lines.add(fin, "    }")
        lines.add(cell, "    __syncthreads();", "  }")
        self.emit("split", lines, n, THREADS * acc.dtype.itemsize)

    # ---- tile: contractions ----------------------------------------------------------

    def tile_plan(self, cells: list[Loop], red) -> TilePlan | None:
        pre, acc, reds, body, tail = red
        if len(cells) < 2 or pre or any(isinstance(x, Check | Store | Accum) for x in body[:-1]):
            return None
        ia, ib = cells[-2], cells[-1]
        if any((lp.start, lp.step) != (0, 1) for lp in (*cells, *reds)):
            return None
        loads = [x for x in body if isinstance(x, Load)]
        if not loads or any(x.guard for x in loads):
            return None
        if any(x.index.coeff(ia.var) and x.index.coeff(ib.var) for x in loads):
            return None  # one operand indexed by both the row and the column: no slab
        if any(not set(x.index.names) <= {lp.var for lp in (*cells, *reds)} for x in loads):
            return None  # a gathered address
        if not {ia.var, ib.var} <= set(tail[-1].index.names):
            return None
        m, n, r = extent(ia), extent(ib), math.prod(extent(lp) for lp in reds)
        if m < 16 or n < 16 or r < 16:
            return None
        smem = sum(BK * (BN if x.index.coeff(ib.var) else BM) * x.dtype.itemsize for x in loads)
        if smem > SMEM_LIMIT:
            return None
        outer = math.prod(extent(lp) for lp in cells[:-2])
        return TilePlan(outer, m, n, r)

    def tile(self, values: list, cells: list[Loop], red, plan: TilePlan) -> None:
        _, acc, reds, body, tail = red
        ia, ib = cells[-2], cells[-1]
        tm_count, tn_count = -(-plan.m // BM), -(-plan.n // BN)
        loads = [x for x in body if isinstance(x, Load)]
        side = {x.out: ("b" if x.index.coeff(ib.var) else "a") for x in loads}
        t_acc = ctype(acc.dtype)
        # the block's own bookkeeping stands for its first LOOP (as in ir/c/tile.py), the
        # slab loops for the first reduce LOOP, staging an operand for its LOAD
        top, red0, fin = cells[0], reds[0], body[-1]
        lines = self.pre(values)
        smem = 0
        for x in loads:
            w = BN if side[x.out] == "b" else BM
            lines.add(x, f"  __shared__ {ctype(x.dtype)} s_{x.out}[{BK}][{w}];")
            smem += BK * w * x.dtype.itemsize
        lines.add(
            top,
            f"  const int tx = threadIdx.x % {BN // TN}, ty = threadIdx.x / {BN // TN};",
            f"  for (int64_t tb = blockIdx.x; tb < {plan.tiles}; tb += gridDim.x) {{",
            f"    const int64_t o = tb / {tm_count * tn_count};",
            f"    const int64_t tm = tb / {tn_count} % {tm_count}, tn = tb % {tn_count};",
        )
        _decls(lines, cells[:-2], "o", "    ")
        ident = cliteral(acc.value, acc.dtype)
        each = f"for (int a = 0; a < {TM}; a++) for (int b = 0; b < {TN}; b++)"
        lines.add(acc, f"    {t_acc} acc[{TM}][{TN}];", f"    {each} acc[a][b] = {ident};")
        lines.add(red0, f"    for (int64_t t0 = 0; t0 < {plan.r}; t0 += {BK}) {{")
        for x in loads:  # stage the slab: every slot written, zero past the edges
            s = side[x.out]
            w, lim, lp, base = (
                (BN, plan.n, ib, f"tn * {BN}") if s == "b" else (BM, plan.m, ia, f"tm * {BM}")
            )
            lines.add(
                x,
                f"      for (int e = threadIdx.x; e < {BK * w}; e += {THREADS}) {{",
                f"        const int kk = e / {w}, j = e % {w};",
                f"        const int64_t {lp.var} = {base} + j, t = t0 + kk;",
                f"        if ({lp.var} < {lim} && t < {plan.r}) {{",
            )
            _decls(lines, reds, "t", "          ")
            lines.add(
                x,
                f"          s_{x.out}[kk][j] = {x.buf}[{index(x.index, self.values)}];",
                f"        }} else s_{x.out}[kk][j] = ({ctype(x.dtype)})0;",
                "      }",
            )
        lines.add(
            red0,
            "      __syncthreads();",
            f"      const int kn = {plan.r} - t0 < {BK} ? (int)({plan.r} - t0) : {BK};",
            "      for (int kk = 0; kk < kn; kk++) {",
            f"        #pragma unroll\n        for (int a = 0; a < {TM}; a++) {{",
            f"          #pragma unroll\n          for (int b = 0; b < {TN}; b++) {{",
        )
        for ins in body[:-1]:
            if isinstance(ins, Load):
                self.dtype_of[ins.out] = ins.dtype
                j = f"ty * {TM} + a" if side[ins.out] == "a" else f"tx * {TN} + b"
                lines.add(
                    ins, f"            const {ctype(ins.dtype)} {ins.out} = s_{ins.out}[kk][{j}];"
                )
            else:
                lines.add(ins, "            " + self.stmt(ins))
        self.dtype_of[acc.out] = acc.dtype
        lines.add(fin, "            " + self.fold(fin.op, "acc[a][b]", fin.src, acc.dtype))
        lines.add(red0, "          }\n        }\n      }", "      __syncthreads();", "    }")
        lines.add(top, f"    for (int a = 0; a < {TM}; a++) for (int b = 0; b < {TN}; b++) {{")
        lines.add(ia, f"      const int64_t {ia.var} = tm * {BM} + ty * {TM} + a;")
        lines.add(ib, f"      const int64_t {ib.var} = tn * {BN} + tx * {TN} + b;")
        lines.add(top, f"      if ({ia.var} < {plan.m} && {ib.var} < {plan.n}) {{")
        lines.add(acc, f"        const {t_acc} {acc.out} = acc[a][b];")
        lines += self.items(tail, 4)
        lines.add(top, "      }\n    }\n  }")
        self.emit("tile", lines, plan.tiles, smem)


def _register_fold(items: tuple):
    """Match ``pre.. DEFACC acc; reduce loops {body; ACCUM acc}; tail.. STORE``.

    Returns (pre, acc, reduce loops, body, tail) or None.
    """
    k = next((j for j, x in enumerate(items) if isinstance(x, DefAcc)), None)
    if k is None or k + 1 >= len(items):
        return None
    pre, acc, blk, tail = items[:k], items[k], items[k + 1], items[k + 2 :]
    if not isinstance(blk, Loop) or not tail or not isinstance(tail[-1], Store) or acc.shape:
        return None
    if any(isinstance(x, Loop | Load | Accum) for x in pre):
        return None
    reds, body = chain(blk)
    last = body[-1] if body else None
    if not isinstance(last, Accum) or last.index is not None or last.dst != acc.out:
        return None
    if any(isinstance(x, Loop) for x in (*body, *tail)) or any(lp.lo or lp.hi for lp in reds):
        return None
    if any(isinstance(x, Accum | Store) for x in (*body[:-1], *tail[:-1])):
        return None
    return pre, acc, reds, body, tail


def render(nest: LoopNest, name: str) -> CudaKernel:
    """The CUDA C of one nest: ``name_0``, ``name_1``, ... one function per phase."""
    return _Cuda(nest, name).render()


def render_mapped(nest: LoopNest, name: str) -> tuple[CudaKernel, list]:
    """``render``, plus its source map: for each line of the kernel's source, the position
    in ``nest.lines()`` (the printed body) of the instruction it was written for (None for
    a function's header, its closing brace, the blank line between functions and a
    single-thread guard).
    docs/viewer.md says what each shape's own lines map to.
    """
    r = _Cuda(nest, name)
    kernel = r.render()
    pos = nest.positions()
    origins: list = []
    for j, lines in enumerate(r.maps):
        if j:
            origins.append(None)  # the blank line between two functions
        origins += [None if ins is None else pos.get(id(ins)) for ins in lines]
    return kernel, origins


def program(kernels: list[CudaKernel]) -> str:
    """One NVRTC program: the prelude, the helpers any kernel needs, every kernel."""
    used = set().union(*(k.used for k in kernels)) if kernels else set()
    defs = helpers(used).replace("static inline", "static __device__ __forceinline__")
    return "\n".join([PRELUDE, defs, *(k.source for k in kernels)]) + "\n"


def kernels(graph: KernelGraph, passes=None) -> dict[int, CudaKernel]:
    """Every non-CUSTOM kernel of ``graph`` as CUDA C, by kernel index (``k<i>_<phase>``)."""
    for spec in graph.buffers:
        ctype(spec.dtype)  # refuses what CUDA C cannot spell, by name
    passes = cuda_passes() if passes is None else passes
    return {
        i: render(apply_passes(lower(graph, i), passes), f"k{i}")
        for i, k in enumerate(graph.kernels)
        if k.kind != "CUSTOM"
    }


def source(graph: KernelGraph, passes=None) -> str:
    """The CUDA C program a plan compiles to: what ``ir(x, stage="cuda")`` prints."""
    return program(list(kernels(graph, passes).values()))
