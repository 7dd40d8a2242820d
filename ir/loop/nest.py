"""Stage 3, the loop nest: the instruction stream the backends render and the interpreter runs.

A LoopNest is one kernel as a tree of instructions from a closed set of twelve opcodes: its
body is a tuple of them, and a LOOP holds the tuple it runs (printed up to an ``ENDLOOP``
line that is only text):

    LOOP     var < stop { body }   for var in range(start, stop, step); a kind, a role
    CONST    v = value : dtype     a literal
    LOAD     v = buf[index] if preds : dtype   read memory; 0 where a pred fails
    ARITH    v = OP a, b, c : dtype   any unary/binary/ternary op of ``ir/graph/ops.py``
                                   (composites included: SIN, POW, DIV, ...)
    MASK     v = preds : bool      the pad predicates as a value (for WHERE)
    CHECK    0 <= v < size  what   a data-dependent index must be in range (else an error)
    DEFACC   acc[shape] = identity : dtype   a register accumulator (an array with a shape)
    ACCUM    dst[lane] = OP dst, v   fold v into a register, one lane of an array, or a
                                   memory cell (OP: ADD, MUL, MAX)
             dst = FMA dst, a, b   fold the product a*b, rounded once (a fused multiply-add)
    FOLD     acc = OP pairwise over [shape]   fold an array accumulator into acc[0]
    STORE    buf[index] = v        write memory
    SORT     out[index : +n] = argsort in0[index : +n], ...   the stable permutation of
                                   one row of n elements of each key buffer (ARGSORT)
    LOCAL    t[n] : dtype          a scratch buffer of n elements (a packed panel, a tile)

A value may be a vector of ``lanes`` elements, its dtype printed ``float32x16``: a LOAD
(STORE) of one reads (writes) ``buf[index : +lanes]``, the lanes consecutive elements from
``index`` on; a DEFACC of one is a register of lanes, started from a literal or from a
vector value (``start``); an ACCUM FMA into one folds lane by lane, a scalar operand
standing for every lane. That is all vectors do: what a vector computes is its lanes
computed one by one, so a backend renders it as one vector instruction or as lanes.

Values are named once (``v0``, ``v1``, ...) and accumulators ``acc0``, ...; a name is
visible from its definition to the end of the loop body it was defined in. Loop variables
are ``i<k>`` for an output dim and ``r<k>`` for a reduced one, numbered by the kernel's loop
dim. Every address is an ``Index``: a sum of name*coefficient terms plus a constant, where a
name is a loop variable or a loaded value (a gather's index). A pad is a ``Range`` predicate
on an Index.

A size-generic nest (``ir/loop/generic.py``) names its sizes instead of writing them: the
header lists ``sizes n0, st0, off0, c0, ...``, int64 values the caller passes at run time, and a
loop's stop, a predicate's bounds and a CHECK's size may be one of those names, as may a
CONST's value (``given``: its bits, as an int64). Its
addresses multiply a loop variable by a size name (``i0*st3``: a stride known at run time),
the Index's ``scaled`` terms, and may add a size name (an offset) as a plain term.

A LOOP may carry a ``Role`` (what it is for, to the passes that schedule a contraction or
lane a reduce) and ``parallel=n`` (a team over it and the n-1 loops inside it); neither
changes what the nest computes, and ``verify`` checks the shape each role promises.

A LOCAL names a buffer, ``t0``, ``t1``, ..., that LOADs and STOREs address like any other; it
is visible until the end of the loop body it is declared in and holds nothing a program may
read before it writes it (the interpreter fills it with poison). Inside a parallel loop
each thread has its own.

What each instruction means, exactly (the interpreter in ``ir/loop/interp.py`` is the oracle):

* arithmetic happens in each value's dtype as written: half-width floats are widened and
  rounded by explicit CASTs, so a backend renders what it reads and nothing more;
* ARITH computes ``ir/graph/ops.evaluate(op, srcs, dtype, dtype of the last src)``;
* a guarded LOAD (or CHECK) does nothing where a predicate fails, and a LOAD gives 0;
* ACCUM ADD (MUL) is ARITH ADD (MUL) in the target's dtype; ACCUM MAX is a max that keeps nan
  (a tie of -0.0 and 0.0 takes the later value, as numpy's maximum);
* ACCUM FMA is ``dst + a*b`` computed exactly and rounded once to the target's float dtype
  (C's ``fma``): a pass writes it where the c device folds a product, and prints it;
* a failing CHECK fails the kernel with an IndexError naming ``what`` and the axis, and
  nothing may read or write memory through the bad index;
* SORT writes ``ir/graph/ops.argsort`` of the keys' n elements from ``index`` on (int64
  positions 0..n-1 within the row) to ``out`` from ``index`` on;
* a vector instruction is its lanes, each computed as the scalar instruction would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from ir.graph import dtypes
from ir.graph.dtypes import DType, to_numpy
from ir.graph.ops import Op
from ir.kernel.kernel import BufferSpec

# ---- index expressions --------------------------------------------------------------

_NAME = re.compile(r"([a-z]+)(\d+)$")


def _name_order(name: str):
    """Loop variables first by dim number (``i1`` before ``r2``), then values."""
    m = _NAME.match(name)
    if m is None:
        return (2, name, 0)
    prefix, num = m.group(1), int(m.group(2))
    if prefix in ("i", "r"):
        return (0, "", num)
    return (1, prefix, num)


Size = int | str  # a size written in the nest, or the name of one given at run time


@dataclass(frozen=True)
class Index:
    """``sum(coeff * name) + sum(name * size) + const``, kept canonical: terms sorted, no zero
    coefficient. ``scaled`` are the (name, size name) products of a size-generic nest."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0
    scaled: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(terms, const: int = 0) -> Index:
        acc: dict[str, int] = {}
        for name, c in terms:
            acc[name] = acc.get(name, 0) + c
        kept = sorted(((n, c) for n, c in acc.items() if c), key=lambda t: _name_order(t[0]))
        return Index(tuple(kept), const)

    @staticmethod
    def var(name: str) -> Index:
        return Index(((name, 1),), 0)

    def __add__(self, other: Index | int) -> Index:
        if isinstance(other, int):
            return Index(self.terms, self.const + other, self.scaled)
        out = Index.of(self.terms + other.terms, self.const + other.const)
        scaled = tuple(sorted(self.scaled + other.scaled))
        return replace(out, scaled=scaled) if scaled else out

    __radd__ = __add__

    def __sub__(self, other: Index | int) -> Index:
        return self + other * -1

    def __mul__(self, k: int) -> Index:
        if self.scaled and k != 1:
            raise ValueError(f"Index: {self} has run-time sizes; it cannot be scaled by {k}")
        out = Index.of(((n, c * k) for n, c in self.terms), self.const * k)
        return replace(out, scaled=self.scaled) if self.scaled else out

    def coeff(self, name: str) -> int:
        return dict(self.terms).get(name, 0)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms) + tuple(x for pair in self.scaled for x in pair)

    def substitute(self, mapping: dict[str, Index]) -> Index:
        out = Index((), self.const)
        for n, c in self.terms:
            out = out + (mapping[n] * c if n in mapping else Index(((n, c),)))
        scaled = []
        for pair in self.scaled:  # a product of two names can only be renamed
            for x in pair:
                m = mapping.get(x)
                if m is not None and (
                    m.const or m.scaled or len(m.terms) != 1 or m.terms[0][1] != 1
                ):
                    raise ValueError(
                        f"Index: {x} in {self} is multiplied by a size; {m} is not a name"
                    )
            scaled.append(tuple(mapping[x].terms[0][0] if x in mapping else x for x in pair))
        return replace(out, scaled=tuple(sorted(scaled))) if scaled else out

    def __str__(self) -> str:
        parts = []
        for n, c in self.terms:
            mag = n if abs(c) == 1 else f"{n}*{abs(c)}"
            if not parts:
                parts.append(mag if c > 0 else f"-{mag}")
            else:
                parts.append(f"+ {mag}" if c > 0 else f"- {mag}")
        for n, size in self.scaled:
            parts.append(f"+ {n}*{size}" if parts else f"{n}*{size}")
        if self.const or not parts:
            if not parts:
                parts.append(str(self.const))
            else:
                parts.append(f"+ {self.const}" if self.const > 0 else f"- {-self.const}")
        return " ".join(parts)


@dataclass(frozen=True)
class Range:
    """The predicate ``lo <= index < hi`` (a pad mask, one dim of it)."""

    index: Index
    lo: Size
    hi: Size

    def __str__(self) -> str:
        return f"{self.lo} <= {self.index} < {self.hi}"


def _preds(preds: tuple[Range, ...]) -> str:
    return " and ".join(str(p) for p in preds)


# ---- instructions -------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """What every instruction carries besides its meaning.

    ``row`` is the kernel row (``Kernel.rows``) the instruction was lowered from, or None
    (a loop, or what a pass made up). It is provenance for a reader -- the stage viewer
    links a nest line back to its op-graph node through it -- so it takes no part in
    equality, hashing or the text, and ``dataclasses.replace`` carries it through a pass.
    ``folded`` is the same provenance for instructions a pass folded into this one (the
    MUL an ACCUM FMA absorbed): their rows, so the viewer still finds where they went.
    """

    row: int | None = field(default=None, kw_only=True, compare=False, repr=False)
    folded: tuple[int, ...] = field(default=(), kw_only=True, compare=False, repr=False)


class Role(Enum):
    """What a loop is for, to the passes that schedule it (``Loop.role``, ``Loop.tile``).

    ROWS and COLS: the rows (``tile``: MR) and columns (NR) of a contraction's register
    tile, as ``tile_contraction`` marks them; BLOCK: a cache block of rows, the top of a
    scheduled contraction (``tile``: MR, NR); SLIVER and PANEL: the MR rows and NR columns of
    one tile (the loop steps by its ``tile``); LANES: independent lanes of a laned reduce,
    which a backend may vectorize (``ir/c/passes.lane_reduce``).
    """

    ROWS = "rows"
    COLS = "cols"
    BLOCK = "block"
    SLIVER = "sliver"
    PANEL = "panel"
    LANES = "lanes"


class Kind(Enum):
    """What a loop's iterations do to the cells its body writes (a memory cell, a lane of a
    register array, a register defined outside it), which says what may reorder, split or
    share out the loop: OUTPUT, each iteration writes cells of its own (any order, any
    thread); REDUCE, they all fold into the same cells (in order); SCAN, each writes a cell
    of its own from a register the one before left (a running total: in order, one thread).
    Lowering sets it, every pass that makes a loop says it, and ``verify`` holds each loop to
    the kind its body makes it (``ir/loop/rewrite.kind_of``)."""

    OUTPUT = "output"
    REDUCE = "reduce"
    SCAN = "scan"


@dataclass(frozen=True)
class Loop(Instruction):
    """``for var in range(start, stop, step)``, narrowed by ``lo`` and ``hi``, over ``body``.

    ``lo`` and ``hi`` are Index bounds over outer loop variables: the loop really runs from
    ``max(start, *lo)`` to ``min(stop, *hi)``. They let a pass cut a loop where a pad
    predicate changes value (``ir/c/passes.split_pad_masks``). ``kind`` says what its
    iterations do to the cells written (``Kind``: printed unless OUTPUT); ``role`` and
    ``tile`` what a schedule made it for (``Role``); ``parallel=n`` puts a team over it and
    the n-1 loops of the perfect chain inside it.
    """

    var: str
    stop: Size
    start: int = 0
    step: int = 1
    kind: Kind = Kind.OUTPUT
    role: Role | None = None
    tile: tuple[int, ...] = ()
    parallel: int = 0
    lo: tuple[Index, ...] = ()
    hi: tuple[Index, ...] = ()
    body: tuple = ()

    def text(self, values: dict[str, str] | None = None) -> str:
        stop = _shown(self.stop, values)
        s = f"{self.var} < {stop}" if self.start == 0 else f"{self.start} <= {self.var} < {stop}"
        if self.step != 1:
            s += f" step {self.step}"
        if self.lo or self.hi:
            lo = ", ".join(str(b) for b in self.lo)
            hi = ", ".join(str(b) for b in self.hi)
            s += f"  from max({self.start}, {lo})" if lo else ""
            s += f"  to min({self.stop}, {hi})" if hi else ""
        marks = [self.kind.value] if self.kind is not Kind.OUTPUT else []
        marks += [self.role.value] if self.role else []
        marks += [f"tile={'x'.join(map(str, self.tile))}"] if self.tile else []
        marks += [f"parallel={self.parallel}"] if self.parallel else []
        return s + "  " + " ".join(marks) if marks else s


@dataclass(frozen=True)
class Const(Instruction):
    """A literal; in a size-generic nest, ``given`` names the run-time value holding its
    bits instead (a constant of the user's program, so one compile serves every value)."""

    out: str
    value: object
    dtype: DType
    given: str | None = None

    def text(self, values: dict[str, str] | None = None) -> str:
        if self.given is not None and (values is None or self.given not in values):
            return f"{self.out} = {self.given} : {self.dtype}  (given)"
        return f"{self.out} = {_shown(self.given, values) or repr(self.value)} : {self.dtype}"


def _shown(size: Size | None, values: dict[str, str] | None) -> str:
    """A size as a nest prints it: a run-time size with the value it has here, if known."""
    if values is None or size not in values:
        return "" if size is None else str(size)
    return f"{size} (={values[size]})"


def bits_const(bits: int, d: DType) -> np.ndarray:
    """The constant of dtype ``d`` that ``const_bits`` carried as ``bits``."""
    if d.is_float:
        return np.array(bits, f"i{np.dtype(to_numpy(d)).itemsize}").view(to_numpy(d))
    if d == dtypes.uint64:
        return np.array(bits, np.int64).view(np.uint64)
    return np.asarray(bits).astype(to_numpy(d))


def _vec(dtype: DType, lanes: int) -> str:
    return f"{dtype}x{lanes}" if lanes > 1 else str(dtype)


def _at(buf: str, index: Index, lanes: int) -> str:
    return f"{buf}[{index} : +{lanes}]" if lanes > 1 else f"{buf}[{index}]"


@dataclass(frozen=True)
class Load(Instruction):
    """``buf[index]``; with ``lanes``, the vector of ``buf[index : +lanes]``."""

    out: str
    buf: str
    index: Index
    dtype: DType
    guard: tuple[Range, ...] = ()
    lanes: int = 1

    def text(self) -> str:
        g = f" if {_preds(self.guard)}" if self.guard else ""
        at = _at(self.buf, self.index, self.lanes)
        return f"{self.out} = {at}{g} : {_vec(self.dtype, self.lanes)}"


@dataclass(frozen=True)
class Arith(Instruction):
    out: str
    op: Op
    srcs: tuple[str, ...]
    dtype: DType

    def text(self) -> str:
        return f"{self.out} = {self.op.value} {', '.join(self.srcs)} : {self.dtype}"


@dataclass(frozen=True)
class Mask(Instruction):
    out: str
    preds: tuple[Range, ...]

    def text(self) -> str:
        return f"{self.out} = {_preds(self.preds)} : bool"


@dataclass(frozen=True)
class Check(Instruction):
    """``0 <= value < size`` must hold where ``guard`` does, or the kernel fails."""

    value: str
    size: Size
    what: str  # the op that indexes, e.g. "gather"
    axis: int
    guard: tuple[Range, ...] = ()

    def text(self) -> str:
        g = f" if {_preds(self.guard)}" if self.guard else ""
        return f"0 <= {self.value} < {self.size}{g}  {self.what} axis {self.axis}"


@dataclass(frozen=True)
class DefAcc(Instruction):
    """A register accumulator; with ``shape``, an array of partial totals (lanes, blocks).

    An array accumulator is folded into element 0 by a FOLD before its value is read. With
    ``lanes`` it is a vector register, read as the vector it holds.
    """

    out: str
    value: object
    dtype: DType
    shape: tuple[int, ...] = ()
    lanes: int = 1  # a vector register
    start: str | None = None  # the value it starts from, instead of ``value``

    def text(self) -> str:
        dims = f"[{', '.join(map(str, self.shape))}]" if self.shape else ""
        first = self.start if self.start is not None else repr(self.value)
        return f"{self.out}{dims} = {first} : {_vec(self.dtype, self.lanes)}"


@dataclass(frozen=True)
class Accum(Instruction):
    """``dst = op(dst, src)``: a register when ``index`` is None, else ``dst[index]``.

    ``lane`` picks one element of an array accumulator (a register ``dst`` with a shape).
    With ``mul`` (op ADD, a float dtype) it is a fused multiply-add: ``dst + src*mul``
    computed exactly and rounded once, printed ``FMA``.
    """

    op: Op
    dst: str
    src: str
    index: Index | None = None
    lane: Index | None = None
    mul: str | None = None

    def text(self) -> str:
        d = self.dst if self.index is None else f"{self.dst}[{self.index}]"
        if self.lane is not None:
            d = f"{self.dst}[{self.lane}]"
        if self.mul is not None:
            return f"{d} = FMA {d}, {self.src}, {self.mul}"
        return f"{d} = {self.op.value} {d}, {self.src}"


@dataclass(frozen=True)
class PairwiseFold(Instruction):
    """Fold an array accumulator into its element 0 by a fixed pairwise tree.

    The last axis first (within each row, halves added onto halves: 16 -> 8 -> 4 -> 2 ->
    1), then the rows the same way. The order is a property of the nest, not of the thread
    count, so every run gives the same bits.
    """

    acc: str
    op: Op
    shape: tuple[int, ...]

    def text(self) -> str:
        return f"{self.acc} = {self.op.value} pairwise over [{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Store(Instruction):
    buf: str
    index: Index
    src: str
    lanes: int = 1  # a vector ``src``, written to ``buf[index : +lanes]``

    def text(self) -> str:
        return f"{_at(self.buf, self.index, self.lanes)} = {self.src}"


@dataclass(frozen=True)
class Local(Instruction):
    """A scratch buffer of ``size`` elements, named like a value (``t0``)."""

    out: str
    size: int
    dtype: DType

    def text(self) -> str:
        return f"{self.out}[{self.size}] : {self.dtype}"


@dataclass(frozen=True)
class Sort(Instruction):
    """One row of an ARGSORT: ``dst[index + j]`` for j < n is the position (0..n-1) of the
    j-th element, in stable lexicographic order, of the rows ``key[index : index + n]``
    of the ``keys`` buffers (nans last in both directions, -0.0 equal to 0.0)."""

    dst: str
    keys: tuple[str, ...]
    index: Index
    n: int
    descending: bool = False

    def text(self) -> str:
        row = f"[{self.index} : +{self.n}]"
        keys = ", ".join(k + row for k in self.keys)
        return f"{self.dst}{row} = argsort {keys}" + ("  descending" if self.descending else "")


Instr = (
    Loop
    | Const
    | Load
    | Arith
    | Mask
    | Check
    | DefAcc
    | Accum
    | PairwiseFold
    | Store
    | Sort
    | Local
)

OPCODE = {
    Loop: "LOOP",
    Const: "CONST",
    Load: "LOAD",
    Arith: "ARITH",
    Mask: "MASK",
    Check: "CHECK",
    DefAcc: "DEFACC",
    Accum: "ACCUM",
    PairwiseFold: "FOLD",
    Store: "STORE",
    Sort: "SORT",
    Local: "LOCAL",
}


# ---- the nest -----------------------------------------------------------------------


@dataclass(frozen=True)
class LoopNest:
    """One kernel as a tree of instructions, with the header a reader and a backend need.

    ``notes`` are what a pass has to say about this nest: why a schedule it looks for did
    not apply (``apply_passes(strict=True)`` raises them). They are printed in the header
    and never change what the nest computes.
    """

    name: str  # "k0"
    kind: str  # MAP, SUM, MAX, SCAN, SCATTER, ARGSORT
    loop_shape: tuple[int, ...]
    inputs: tuple[BufferSpec, ...]  # in0, in1, ...
    output: BufferSpec  # out
    body: tuple[Instr, ...]
    sizes: tuple[str, ...] = ()  # a size-generic nest's run-time sizes: n0, st0, c0, ...
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "body", tuple(self.body))  # a pass may hand back a list

    def format(self, input_names=None, output_name=None, size_values=None) -> str:
        """The nest as text; the names (``buf0`` ...) say which buffers the header binds,
        ``size_values`` the values a size-generic nest's sizes take in this call (each
        shown where it is a loop's stop or a constant, and all in the header)."""
        lines = [f"{self.name}  {self.kind}  loop{list(self.loop_shape)}"]
        for i, spec in enumerate(self.inputs):
            bound = f" = {input_names[i]}" if input_names else ""
            lines.append(f"    in{i}{bound}  {spec}")
        bound = f" = {output_name}" if output_name else ""
        lines.append(f"    out{bound}  {self.output}")
        values = None
        if self.sizes and size_values is not None:
            given = {i.given: i.dtype for i in walk(self.body) if isinstance(i, Const) and i.given}
            values = {
                n: str(bits_const(v, given[n])[()]) if n in given else str(v)
                for n, v in zip(self.sizes, size_values)
            }
            bound = ", ".join(f"{n}={v}" for n, v in values.items())
            lines.append(f"    sizes  {bound}  (given at run time)")
        elif self.sizes:
            lines.append(f"    sizes  {', '.join(self.sizes)}  (int64, given at run time)")
        lines += [f"    note  {n}" for n in self.notes]
        lines += format_body(self.body, values=values)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def lines(self) -> tuple[Instr, ...]:
        """The instruction each printed line of the body is for: a loop twice (its LOOP
        and its ENDLOOP line). A line's position here is what source maps point at."""
        return tuple(walk(self.body, True))

    def positions(self) -> dict[int, int]:
        """``id`` of each instruction -> its (first) printed line in ``lines``."""
        return {id(x): i for i, x in reversed(list(enumerate(self.lines())))}


def walk(items, ends: bool = False):
    """Every instruction of a tree, each loop before its body, depth first (with ``ends``,
    each loop again after its body, where the printer closes it)."""
    for ins in items:
        yield ins
        if isinstance(ins, Loop):
            yield from walk(ins.body, ends)
            yield from (ins,) * ends


def format_body(body: tuple[Instr, ...], depth: int = 1, values=None) -> list[str]:
    lines = []
    for ins in body:
        text = ins.text(values) if isinstance(ins, Loop | Const) else ins.text()
        lines.append(f"{'  ' * depth}{OPCODE[type(ins)]:<8}{text}")
        if isinstance(ins, Loop):
            lines += format_body(ins.body, depth + 1, values)
            lines.append(f"{'  ' * depth}{'ENDLOOP':<8}{ins.var}")
    return lines
