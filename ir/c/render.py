"""Stage 4 for C: a loop nest (stage 3) becomes the text of one C function. Pure.

The rendering is literal: each instruction is one C statement (``Statements``, which the
cuda renderer shares), each value a ``const`` local of the C type of its dtype, each Index
the same sum of products, a vector value one ``limn_f32x8_*`` helper call (``VECTORS``).
What the C compiler must not do to the numbers is ruled out by the flags the runtime compiles with:
no ``-ffast-math`` (so float adds are never reassociated and every device folds in the
order the nest prints), ``-fwrapv`` (so integer overflow wraps, as the op table says).

Each ARITH is its op's C template (``ir/c/spell.OPS``); a composite (sin, pow, division,
...) is a call of an inline function from ``ir/c/libm.py``, emitted once per
program, and only where the c device renders that composite at that dtype (``renders``).
Where C itself leaves a case undefined, the rendering defines it the way ``ir/graph/semantics``
does: integer division and remainder by zero give 0, ``INT_MIN / -1`` wraps, shifts past
the width give 0 or the sign fill, a float converts to bfloat16 by round-to-nearest-even.
``exp`` and ``log`` are rendered as branch-free inline functions (range reduction and a
polynomial; float32 in the prelude, float64 in ``ir/c/libm.py``) rather than libm calls,
so a hot loop that uses them still vectorizes; their error is in the precision table.

Vector helpers (``VECTORS``, ``vector_helpers(name)``; ``fma_isa(target)`` before them): for a
type ``limn_f32x<n>`` or ``limn_f64x<n>`` of 16, 32 or 64 bytes, a compiler vector
(``+``, ``*``, ``[]`` work), and ``_load(p)``, ``_store(p, v)`` (unaligned), ``_splat(s)``
and ``_fma(c, a, b)``, a*b + c rounded once per lane: the target's fused instruction in as
many physical vectors as the type holds, or ``fmaf`` per lane where it has none. A loop
nest's vectors are one register of the target (``Target.lanes``); fused attention's are
64 bytes on every target.

A LOOP carrying ``parallel=n`` opens an OpenMP team over it and the n-1 loops inside it
(``collapse(n)``); the team only decides which thread computes which cells, never the
order any one cell is folded in. With ``openmp=False`` the pragmas are left out.
"""

from __future__ import annotations

import math

from ir.c import sort
from ir.c.libm import available, definitions
from ir.c.spell import HELPERS, OPS, cast, ctype, helpers, index, literal, spell
from ir.c.target import Target
from ir.graph import dtypes
from ir.graph.dtypes import DType
from ir.graph.ops import Op
from ir.loop.nest import (
    Accum,
    Arith,
    Check,
    Const,
    DefAcc,
    Load,
    Local,
    Loop,
    LoopNest,
    Mask,
    PairwiseFold,
    Range,
    Role,
    Sort,
    Store,
)
from ir.loop.rewrite import value_dtype

MATH = available()  # the composite functions ir/c/libm.py defines, as "<name>_<ctype>"

PRELUDE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifndef LIMN_NEG /* -x; a compiler whose -x keeps a nan's sign defines its own first */
#define LIMN_NEG(x) (-(x))
#endif

static inline int64_t limn_max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t limn_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline float limn_given_float(int64_t b) { uint32_t u = (uint32_t)b; float f;
  memcpy(&f, &u, 4); return f; }
static inline double limn_given_double(int64_t b) { double f; memcpy(&f, &b, 8); return f; }
static inline float limn_bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f;
  memcpy(&f, &u, 4); return f; }
static inline uint16_t limn_f2bf(float f) { uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }

/* exp(x) = 2^k * e^r with k = round(x / ln2), |r| <= ln2/2: branch-free, so it vectorizes.
   The clamp is ternaries and the rounding rintf (nearest-even in the default mode): gcc 12
   vectorizes those, not fminf/fmaxf or roundevenf. An x whose answer is 0 (exp(-inf), the
   causal mask) computes exp(0) and throws it away, instead of a subnormal, which costs a
   microcode assist per element. */
static inline float limn_expf(float x) {
  float xc = x > 89.0f ? 89.0f : x;
  xc = x < -103.972084f ? 0.0f : xc;
  float k = __builtin_rintf(xc * 1.44269504088896341f);
  float r = fmaf(k, -0.693145751953125f, xc);
  r = fmaf(k, -1.42860682030941723212e-6f, r);
  float p = 1.98756915e-4f;
  p = fmaf(p, r, 1.39819494e-3f); p = fmaf(p, r, 8.33345205e-3f);
  p = fmaf(p, r, 4.16657962e-2f); p = fmaf(p, r, 1.66666657e-1f);
  p = fmaf(p, r, 0.5f); p = fmaf(p * r, r, r) + 1.0f;
  int32_t ki = (int32_t)k; int32_t k1 = ki / 2, k2 = ki - k1;
  uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
  float s1, s2; memcpy(&s1, &b1, 4); memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  y = x > 88.7228394f ? INFINITY : y;
  y = x < -103.972084f ? 0.0f : y;
  return x != x ? x : y;
}

/* log(x) = e*ln2 + log1p(f), m = 1 + f in [sqrt(1/2), sqrt(2)): with s = f/(2+f),
   log1p(f) = f - (hfsq - s*(hfsq + R(s*s))), hfsq = f*f/2, so the error of s only
   touches the small correction terms */
static inline float limn_logf(float x) {
  uint32_t u; memcpy(&u, &x, 4);
  int32_t sub = (u < 0x00800000u);
  float xs = sub ? x * 8388608.0f : x;
  memcpy(&u, &xs, 4);
  int32_t e = (int32_t)((u >> 23) & 0xff) - 127 - (sub ? 23 : 0);
  uint32_t mb = (u & 0x007fffffu) | 0x3f800000u;
  float m; memcpy(&m, &mb, 4);
  int32_t big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e += big;
  float f = m - 1.0f, s = f / (2.0f + f), z = s * s;
  float r = fmaf(z, 0.2222222222f, 0.2857142857f);
  r = fmaf(z, r, 0.4f); r = fmaf(z, r, 0.6666666667f); r = r * z;
  float hfsq = 0.5f * f * f, fe = (float)e;
  float lo = fmaf(s, hfsq + r, fe * 1.42860682030941723212e-6f);
  float y = fe * 0.693145751953125f - ((hfsq - lo) - f);
  y = x == 0.0f ? -INFINITY : y;
  y = x < 0.0f ? NAN : y;
  y = x == INFINITY ? INFINITY : y;
  return x != x ? x : y;
}
"""


def _preds(preds: tuple[Range, ...], values=None) -> str:
    out = []
    for p in preds:
        e = index(p.index, values)
        out.append(f"({p.lo} <= {e} && {e} < {p.hi})")
    return " && ".join(out)


def renders(op: Op, d: DType) -> bool:
    """Whether C renders the composite ``op`` at compute dtype ``d`` (else it decomposes)."""
    if op == Op.ARGSORT:  # a merge sort per row, at every key dtype (ir/c/sort.py)
        return True
    return d in (dtypes.float32, dtypes.float64) and f"{op.value.lower()}_{ctype(d)}" in MATH


def _sort_and_vector_helpers(used, target: Target) -> str:
    """The row sorts and vector types a program uses (``sort``, ``VECTORS``)."""
    kinds = {"argsort": sort.definition, "vec": vector_helpers}
    vec = [fma_isa(target)] if any(u[0] == "vec" for u in used) else []
    return "\n".join(vec + [kinds[k](t) for k, t in sorted(u for u in used if u[0] in kinds)])


STACK_CELLS = 1024  # the most cells of an array accumulator kept on the stack (8 KiB of doubles)


def render(nest: LoopNest, name: str, openmp: bool = True) -> tuple[str, set]:
    """The C function ``void name(void *const *args, int64_t *err)`` and the helpers it needs.

    ``args`` holds in0, in1, ... then out. ``err`` receives the first failed CHECK as
    (1, value, axis, size, 0 for a gather or 1 for a scatter); the kernel clamps that
    index to 0 and finishes, and the runtime raises. No array on the stack depends on the
    nest's sizes: the per-block partial totals of a long reduce are allocated, and a failed
    allocation returns (2, 0, 0, bytes, 0).
    """
    return _Renderer(nest, openmp).function(name)


def render_mapped(nest: LoopNest, name: str, openmp: bool = True) -> tuple[str, set, list]:
    """``render``, plus its source map: for each line of the C text, the position in
    ``nest.lines()`` (the printed body) of the instruction it was written for (None for the
    function's header).

    A loop's ``for``, its pragmas and its closing brace map to its LOOP.
    """
    r = _Renderer(nest, openmp)
    text, used = r.function(name)
    pos = nest.positions()
    per_entry: list = []
    marks = r.marks + [(len(r.lines), None)]
    for (start, ins), (stop, _) in zip(marks, marks[1:]):
        per_entry += [None if ins is None else pos.get(id(ins))] * (stop - start)
    origins = [o for entry, o in zip(r.lines, per_entry) for _ in range(entry.count("\n") + 1)]
    return text, used, origins


class Statements:
    """Each instruction as one C statement, given what each name is so far: the part of
    rendering a nest that a C-like target shares. ``ir/cuda/render.py`` overrides the
    words (its types, literals, conversions, op spellings, error record), not the cases."""

    OPS = OPS  # how each op is spelled (ir/c/spell.py); a target overlays it
    target = "c device"  # who is rendering, for errors

    def __init__(self, nest: LoopNest):
        self.nest = nest
        self.bufs = {f"in{i}": s.dtype for i, s in enumerate(nest.inputs)}
        self.bufs["out"] = nest.output.dtype
        self.dtype_of: dict[str, DType] = {}
        self.values: dict[str, str] = {}  # names used in addresses, as int64 expressions
        self.used: set = set()
        self.arrays: set[str] = set()  # array accumulators (lanes, blocks)
        self.heap: set[str] = set()  # the ones too large for the stack, freed after their FOLD
        self.vectors: dict[str, int] = {}  # vector values and registers: their lanes

    ctype, literal, cast = staticmethod(ctype), staticmethod(literal), staticmethod(cast)

    def preds(self, preds: tuple[Range, ...]) -> str:
        return _preds(preds, self.values)

    def fail(self, ins: Check) -> str:
        """Record a failed CHECK in ``err``, the first one only (``render`` says the layout)."""
        return (
            f"if (!err[0]) {{ err[0] = 1; err[1] = (int64_t){ins.value}; err[2] = {ins.axis}; "
            f"err[3] = {ins.size}; err[4] = {int(ins.what == 'scatter')}; }}"
        )

    def fold(self, op: Op, dst: str, src: str, d: DType) -> str:
        """``dst = op(dst, src)`` in dtype ``d``, as the nest's ACCUM: ADD, MUL, or MAX keeping
        nan (a tie of -0.0 and 0.0 takes the later value, as numpy and torch do)."""
        sym = {Op.ADD: "+", Op.MUL: "*"}.get(op)
        if d in dtypes.HALF:  # fold at float32, store the rounded result
            cur, new = self.cast(dst, d, dtypes.float32), self.cast(src, d, dtypes.float32)
            if sym:
                return f"{dst} = {self.cast(f'({cur} {sym} {new})', dtypes.float32, d)};"
            return f"{dst} = ({new} >= {cur} || {new} != {new}) ? {src} : {dst};"
        if sym:
            if d == dtypes.bool_:
                return f"{dst} = {dst} {'|' if op == Op.ADD else '&'} {src};"
            return f"{dst} = ({self.ctype(d)})({dst} {sym} {src});"
        if d.is_float:
            return f"{dst} = ({src} >= {dst} || {src} != {src}) ? {src} : {dst};"
        return f"{dst} = {src} > {dst} ? {src} : {dst};"

    def accum(self, ins: Accum) -> str:
        d = self.dtype_of[ins.dst] if ins.index is None else self.bufs[ins.dst]
        dst = ins.dst if ins.index is None else f"{ins.dst}[{index(ins.index, self.values)}]"
        if ins.mul is not None:  # the printed FMA: one rounding, as the interpreter computes it
            return (
                f"{dst} = {'fmaf' if d == dtypes.float32 else 'fma'}({ins.src}, {ins.mul}, {dst});"
            )
        return self.fold(ins.op, dst, ins.src, d)

    def arith(self, ins: Arith, srcd: list[DType]) -> str:
        """The op's spelling (``OPS``); CAST converts (``cast``)."""
        if ins.op == Op.CAST:
            return self.cast(ins.srcs[0], srcd[0], ins.dtype)
        t, s = self.ctype(ins.dtype), self.ctype(srcd[-1])
        return spell(self.OPS, ins.op, ins.srcs, t, s, ins.dtype)

    def declare(self, ins) -> None:
        """Note the dtype of the value ``ins`` defines, and how an address reads it."""
        out = getattr(ins, "out", None)
        if out is not None:
            self.dtype_of[out] = value_dtype(ins)
            self.values.setdefault(out, f"(int64_t){out}")

    def statement(self, ins) -> str:
        values = self.values
        if getattr(ins, "lanes", 1) > 1 or isinstance(ins, Accum) and ins.dst in self.vectors:
            return self.vector(ins)
        if isinstance(ins, Local):
            self.bufs[ins.out] = ins.dtype
            t, n = self.ctype(ins.dtype), ins.size
            if not _on_heap(ins):  # aligned for the vector loads of a packed panel
                return f"{t} {ins.out}[{n}] __attribute__((aligned(64)));"
            return (
                f"{t} *{ins.out} = ({t} *)malloc(sizeof({t}) * {n}); "
                f"if (!{ins.out}) {{ err[0] = 2; err[3] = {n} * (int64_t)sizeof({t}); return; }}"
            )
        if isinstance(ins, DefAcc) and ins.shape:
            n, t = math.prod(ins.shape), self.ctype(ins.dtype)
            self.arrays.add(ins.out)
            init = self.literal(ins.value, ins.dtype)
            fill = f"for (int64_t q = 0; q < {n}; q++) {ins.out}_l[q] = {init};"
            if n <= STACK_CELLS:
                return f"{t} {ins.out}_l[{n}]; {fill}"
            # a block per BLOCK elements: sized by the reduce, so it lives on the heap
            self.heap.add(ins.out)
            return (
                f"{t} *{ins.out}_l = ({t} *)malloc(sizeof({t}) * {n}); "
                f"if (!{ins.out}_l) {{ err[0] = 2; err[3] = {n} * (int64_t)sizeof({t}); return; }} "
                f"{fill}"
            )
        if isinstance(ins, PairwiseFold):
            return self.pairwise_fold(ins)
        if isinstance(ins, Accum) and ins.lane is not None:
            cell = f"{ins.dst}_l[{index(ins.lane, values)}]"
            if ins.op == Op.ADD:
                return f"{cell} = {cell} + {ins.src};"
            return f"{cell} = ({ins.src} > {cell} || {ins.src} != {ins.src}) ? {ins.src} : {cell};"
        if isinstance(ins, Const) and ins.given is not None:  # its bits, given at run time
            t = self.ctype(ins.dtype)
            if ins.dtype.is_float:
                return f"const {t} {ins.out} = limn_given_{t}({ins.given});"
            return f"const {t} {ins.out} = ({t}){ins.given};"
        if isinstance(ins, Const | DefAcc):  # a register may start from a value
            kw, first = ("", ins.start) if isinstance(ins, DefAcc) else ("const ", None)
            first = first or self.literal(ins.value, ins.dtype)
            return f"{kw}{self.ctype(ins.dtype)} {ins.out} = {first};"
        if isinstance(ins, Load):
            at = f"{ins.buf}[{index(ins.index, values)}]"
            if ins.guard:
                at = f"(({self.preds(ins.guard)}) ? {at} : ({self.ctype(ins.dtype)})0)"
            return f"const {self.ctype(ins.dtype)} {ins.out} = {at};"
        if isinstance(ins, Mask):
            return f"const uint8_t {ins.out} = {self.preds(ins.preds)};"
        if isinstance(ins, Arith):
            srcd = [self.dtype_of[s] for s in ins.srcs]
            if ins.op in HELPERS:
                self.used.add((ins.op, self.ctype(srcd[-1]), self.ctype(ins.dtype)))
            fn = f"{ins.op.value.lower()}_{ctype(ins.dtype)}"
            if fn in MATH:  # a composite, or a primitive that ir/c/libm.py spells (exp)
                self.used.add(("math", fn))
            return f"const {self.ctype(ins.dtype)} {ins.out} = {self.arith(ins, srcd)};"
        if isinstance(ins, Check):
            v = ins.value
            cond = f"({v} < 0 || {v} >= {ins.size})"
            if ins.guard:
                cond = f"({self.preds(ins.guard)}) && {cond}"
            check = f"if ({cond}) {{ {self.fail(ins)} }}"
            if values.get(v) == f"{v}_c":  # checked before: the clamped copy exists
                return check
            values[v] = f"{v}_c"  # a clamped copy keeps the kernel inside its buffers
            return (
                f"{check} const int64_t {v}_c = ({v} < 0 || {v} >= {ins.size}) ? 0 : (int64_t){v};"
            )
        if isinstance(ins, Accum):
            return self.accum(ins)
        if isinstance(ins, Store):
            return f"{ins.buf}[{index(ins.index, values)}] = {ins.src};"
        if isinstance(ins, Sort):
            keys = tuple(self.bufs[k] for k in ins.keys)
            self.used.add(("argsort", sort.signature(keys, ins.descending)))
            at = index(ins.index, values)
            rows = ", ".join(f"{k} + {at}" for k in ins.keys)
            fn = sort.name(keys, ins.descending)
            return f"{fn}({rows}, {ins.n}, {ins.dst} + {at}, err);"
        raise TypeError(f"{self.target}: {type(ins).__name__} is not a loop-nest instruction")

    def vector(self, ins) -> str:
        """A vector instruction: one call of the ``limn_*_<t>x<lanes>`` helpers (``VECTORS``)."""
        reg = ins.dst if isinstance(ins, Accum) else None  # an FMA into a vector register
        d = self.dtype_of[reg] if reg else getattr(ins, "dtype", None) or self.bufs[ins.buf]
        n = self.vectors[reg] if reg else ins.lanes
        v = _vector_type(d, n)
        self.used.add(("vec", v))
        if isinstance(ins, Load) and not ins.guard:
            self.vectors[ins.out] = n
            return f"const {v} {ins.out} = {v}_load(&{ins.buf}[{index(ins.index, self.values)}]);"
        if isinstance(ins, Store):
            return f"{v}_store(&{ins.buf}[{index(ins.index, self.values)}], {ins.src});"
        if isinstance(ins, DefAcc) and not ins.shape:
            self.vectors[ins.out] = n
            first = ins.start or f"{v}_splat({literal(ins.value, ins.dtype)})"
            return f"{v} {ins.out} = {first};"
        if isinstance(ins, Accum) and ins.mul is not None and ins.index is None:
            a, b = (x if x in self.vectors else f"{v}_splat({x})" for x in (ins.src, ins.mul))
            return f"{ins.dst} = {v}_fma({ins.dst}, {a}, {b});"
        raise TypeError(f"{self.target}: no vector form of {ins.text()}")

    def pairwise_fold(self, ins: PairwiseFold) -> str:
        """The pairwise order of FOLD, written out: each row, then the rows' totals."""
        a, t = f"{ins.acc}_l", self.ctype(self.dtype_of[ins.acc])
        rows, width = math.prod(ins.shape[:-1]), ins.shape[-1]
        row = _pairwise(lambda i: f"{a}[r*{width} + {i}]", width, ins.op)
        col = _pairwise(lambda i: f"{a}[{width}*{i}]", rows, ins.op)
        done = f" free({a});" if ins.acc in self.heap else ""
        return (
            f"for (int64_t r = 0; r < {rows}; r++) {{ {row} }} {col} {t} {ins.acc} = {a}[0];" + done
        )


class _Renderer(Statements):
    """The state of rendering one nest: what each name is, and the lines so far."""

    def __init__(self, nest: LoopNest, openmp: bool):
        super().__init__(nest)
        self.openmp = openmp
        self.lines: list[str] = []
        self.at = None  # the instruction the lines being written are for (the source map)
        self.marks: list = [(0, None)]  # (first line, instruction) each time ``at`` changes
        self.team = False  # rendering inside an OpenMP team

    def mark(self, ins) -> None:
        self.at = ins
        self.marks.append((len(self.lines), ins))

    def function(self, name: str) -> tuple[str, set]:
        nest = self.nest
        if nest.sizes:  # a size-generic kernel: its sizes come as a third argument
            self.lines.append(
                f"void {name}(void *const *args, int64_t *err, const int64_t *sizes) {{"
            )
            for j, size in enumerate(nest.sizes):
                self.lines.append(f"  const int64_t {size} = sizes[{j}];")
        else:
            self.lines.append(f"void {name}(void *const *args, int64_t *err) {{")
        for i, spec in enumerate(nest.inputs):
            t = ctype(spec.dtype)
            self.lines.append(f"  const {t} *restrict in{i} = (const {t} *)args[{i}];")
        t = ctype(nest.output.dtype)
        self.lines.append(f"  {t} *restrict out = ({t} *)args[{len(nest.inputs)}];")
        self.lines.append("  (void)err;")
        self.items(nest.body, 1)
        self.lines.append("}")
        if dtypes.float16 in {*self.bufs.values(), *self.dtype_of.values()}:
            self.used.add(("needs", "half"))
        return "\n".join(self.lines), self.used

    def items(self, items, depth: int, collapse: int = 0) -> None:
        heap = [x.out for x in items if isinstance(x, Local) and _on_heap(x)]
        if heap and (collapse or self.team):
            raise ValueError(f"c device: LOCAL {heap[0]} is too large for a thread's stack")
        for item in items:
            if isinstance(item, Loop):
                self.block(item, depth, collapse)
            else:
                self.instr(item, depth)
        for name in heap:
            self.lines.append("  " * depth + f"free({name});")

    def block(self, lp: Loop, depth: int, collapse: int = 0) -> None:
        outside = self.at
        self.mark(lp)
        pad = "  " * depth
        par = lp.parallel
        team = self.team
        if par and self.openmp and not collapse:
            self.lines.append(f"{pad}#pragma omp parallel for collapse({par}) schedule(static)")
            collapse, self.team = par, True
            self.used.add(("needs", "threads"))
        start, stop = str(lp.start), str(lp.stop)
        for e in lp.lo:
            start = f"limn_max64({start}, {index(e, self.values)})"
        for e in lp.hi:
            stop = f"limn_min64({stop}, {index(e, self.values)})"
        if lp.role == Role.LANES:  # lanes are independent cells: let the compiler vectorize
            self.lines.append(f"{pad}#pragma omp simd")
        end = ""
        if lp.lo or lp.hi:  # bounds fixed on entry, as in the interpreter
            end, stop = f", {lp.var}_end = {stop}", f"{lp.var}_end"
        v = lp.var
        self.lines.append(
            f"{pad}for (int64_t {v} = {start}{end}; {v} < {stop}; {v} += {lp.step}) {{"
        )
        self.items(lp.body, depth + 1, max(0, collapse - 1))
        self.mark(lp)
        self.lines.append(pad + "}")
        self.team = team
        self.mark(outside)

    def instr(self, ins, depth: int) -> None:
        pad = "  " * depth
        self.declare(ins)
        outside = self.at
        self.mark(ins)
        self.lines.append(pad + self.statement(ins))
        self.mark(outside)


def _pairwise(at, n: int, op: Op) -> str:
    """Fold n elements into the first: x[i] op= x[i + h] with h = ceil(n/2), n = h, repeat."""
    x, y = at("i"), at("(i + h)")
    if op == Op.ADD:
        step = f"{x} = {x} + {y};"
    else:
        step = f"{x} = ({y} > {x} || {y} != {y}) ? {y} : {x};"
    return (
        f"for (int64_t n = {n}, h; n > 1; n = h) {{ h = (n + 1) / 2; "
        f"for (int64_t i = 0; i < n - h; i++) {{ {step} }} }}"
    )


STACK_LOCAL = 1 << 19  # bytes of a LOCAL kept on the stack; a larger one is allocated


def _on_heap(ins: Local) -> bool:
    return ins.size * ins.dtype.itemsize > STACK_LOCAL


VECTORS = """#ifndef LIMN_{t}x{n} /* once, where a unit adds fused attention's (limn.export) */
#define LIMN_{t}x{n}
typedef {c} limn_{t}x{n} __attribute__((vector_size({b})));
static inline limn_{t}x{n} limn_{t}x{n}_load(const {c} *p) {{ limn_{t}x{n} v;
  memcpy(&v, p, sizeof v); return v; }}
static inline void limn_{t}x{n}_store({c} *p, limn_{t}x{n} v) {{ memcpy(p, &v, sizeof v); }}
static inline limn_{t}x{n} limn_{t}x{n}_splat({c} s) {{ return s - (limn_{t}x{n}){{0}}; }}
static inline limn_{t}x{n} limn_{t}x{n}_fma(limn_{t}x{n} c, limn_{t}x{n} a, limn_{t}x{n} b) {{
#if LIMN_FMA_BYTES && {b} % LIMN_FMA_BYTES == 0
  limn_fma_{t} pa[{b} / LIMN_FMA_BYTES], pb[{b} / LIMN_FMA_BYTES], pc[{b} / LIMN_FMA_BYTES];
  memcpy(pa, &a, {b}); memcpy(pb, &b, {b}); memcpy(pc, &c, {b});
  for (int i = 0; i < {b} / LIMN_FMA_BYTES; i++) pc[i] = limn_fma_{t}_op(pa[i], pb[i], pc[i]);
  memcpy(&c, pc, {b});
#else
  for (int l = 0; l < {n}; l++) c[l] = {f}(a[l], b[l], c[l]);
#endif
  return c; }}
#endif"""
"""The vector helpers, the one place C names a vector instruction (``ir/c/sdpa.c`` and the
transcendentals use them too). ``limn_<t>x<n>`` (t ``f32`` or ``f64``, any n whose bytes
are a multiple of 16) is a compiler vector (GCC/Clang ``vector_size``: +, *, [] work on
it), and ``_load``, ``_store`` (unaligned), ``_splat`` and ``_fma(c, a, b)`` = a*b + c
rounded once are its functions. The FMA runs as the widest fused instruction the compiler
has (``fma_isa``: AVX-512, AVX2's FMA3, NEON), in as many physical vectors as the type
holds, or lane by lane through ``fmaf``/``fma`` where it has none: the same bits anywhere."""

# the widest FMA each ISA has, as gcc's builtins (immintrin.h is ~0.5 s of cc a unit) and as
# other compilers' intrinsics: (bytes, float32's and float64's builtin, the header, the
# intrinsic types, float32's and float64's intrinsic); elsewhere fmaf runs lane by lane
FMAS = {
    "avx512": (64, "__builtin_ia32_vfmaddps512_mask(a, b, c, 0xffff, 4)",
               "__builtin_ia32_vfmaddpd512_mask(a, b, c, 0xff, 4)", "immintrin.h", "__m512",
               "__m512d", "_mm512_fmadd_ps(a, b, c)", "_mm512_fmadd_pd(a, b, c)"),
    "avx2": (32, "__builtin_ia32_vfmaddps256(a, b, c)", "__builtin_ia32_vfmaddpd256(a, b, c)",
             "immintrin.h", "__m256", "__m256d", "_mm256_fmadd_ps(a, b, c)",
             "_mm256_fmadd_pd(a, b, c)"),
    "neon": (16, "__builtin_aarch64_fmav4sf(a, b, c)", "__builtin_aarch64_fmav2df(a, b, c)",
             "arm_neon.h", "float32x4_t", "float64x2_t", "vfmaq_f32(c, a, b)",
             "vfmaq_f64(c, a, b)"),
}  # fmt: skip
FMA = """#ifndef LIMN_FMA_BYTES /* {isa}: {how} */
#define LIMN_FMA_BYTES {b}
{types}
#define limn_fma_f32_op(a, b, c) {f32}
#define limn_fma_f64_op(a, b, c) {f64}
#endif"""
GCC_TYPES = """typedef float limn_fma_f32 __attribute__((vector_size({b})));
typedef double limn_fma_f64 __attribute__((vector_size({b})));"""


def fma_isa(target: Target) -> str:
    """The FMA that ``VECTORS``' ``_fma`` runs in physical vectors: ``target``'s, spelled
    for its compiler, or none (then ``fmaf`` lane by lane: the same bits)."""
    if target.isa not in FMAS:
        return FMA.format(isa=target.isa, how="no vector FMA", b=0, types="", f32="", f64="")
    b, f32, f64, header, t32, t64, i32, i64 = FMAS[target.isa]
    if target.gcc:
        return FMA.format(
            isa=target.isa, how="gcc", b=b, types=GCC_TYPES.format(b=b), f32=f32, f64=f64
        )
    types = f"#include <{header}>\ntypedef {t32} limn_fma_f32; typedef {t64} limn_fma_f64;"
    return FMA.format(isa=target.isa, how="intrinsics", b=b, types=types, f32=i32, f64=i64)


def _vector_type(d: DType, lanes: int) -> str:
    if d not in (dtypes.float32, dtypes.float64) or lanes * d.itemsize % 16:
        raise TypeError(
            f"c device: no {lanes}-lane vector of {d}; accepted: float32 and float64 "
            "vectors of a multiple of 16 bytes"
        )
    return f"limn_{'f32' if d == dtypes.float32 else 'f64'}x{lanes}"


def vector_helpers(v: str) -> str:
    """The helpers of vector type ``v`` (``limn_f32x16``, ...): ``VECTORS``."""
    t, n = v[len("limn_") :].split("x")
    c, f = ("float", "fmaf") if t == "f32" else ("double", "fma")
    return VECTORS.format(t=t, n=n, c=c, b=int(n) * (4 if t == "f32" else 8), f=f)


def program(functions: list[tuple[str, set]], target: Target) -> str:
    """One translation unit: the target it is for, the prelude, the helpers any kernel
    needs, every kernel."""
    used = set().union(*(u for _, u in functions)) if functions else set()
    setter = (
        "void limn_set_threads(int n) {\n#ifdef _OPENMP\n  omp_set_num_threads(n);\n#endif\n"
        "  (void)n;\n}\n"
    )
    maths = definitions(u[1] for u in used if u[0] == "math")
    parts = [str(target), PRELUDE, _sort_and_vector_helpers(used, target), helpers(used)]
    parts += [maths, setter]
    parts += [f for f, _ in functions]
    return "\n".join(parts) + "\n"
