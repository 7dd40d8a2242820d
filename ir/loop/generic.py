"""Size-generic lowering: one loop nest per kernel structure, its sizes given at run time.

A program that makes many shapes once each (a property-based test suite draws thousands)
pays a compile per shape when every nest writes its sizes as numbers. ``lower_generic``
lowers a kernel the way ``ir/loop/lower.py`` does, except that every number that comes
from a shape is a name instead: each loop's stop, each coefficient and constant of an
address or of a pad predicate, each bound of a pad and each CHECK's size; and so is each
constant of the program (``x + 2.5``: the bits of 2.5, so a test drawing scalars compiles
once, not once per scalar). Each name says what it is and is numbered in the order the
lowering meets it: ``n0`` an extent, ``st0`` a stride, ``off0`` an offset, ``lo0``/``hi0`` a
pad's bounds, ``c0`` a constant; ``lower_generic`` returns their values for this kernel
beside the nest, and the nest prints with them (``CONST v1 = c0 (=2.5) : float32``).

The index arithmetic between a loop variable and memory (views of views, a view over a
fused computation followed back by ``kernel.reindex``, a gathered index) runs here at this
kernel's sizes, exactly as in the specialized lowering; only its results reach the nest,
as an address ``s7 + i0*s8 + i1*s9`` over every loop variable in scope. So the nest's text
depends on the kernel's structure, not on its sizes, in all but degenerate cases (where a
size makes two reads of one row coincide, say), and those only cost sharing, never
correctness: the runtime shares a compiled nest between kernels whose *texts* are equal,
and each kernel's text, run on its own sizes, is that kernel.

A generic nest settles almost nothing from a size: it keeps every pad predicate whose index
moves with the loops (the specialized lowering drops the ones that always hold or always
fail), keeps loops of one iteration, and multiplies a coefficient of 0 (a broadcast) like
any other; only a predicate on an index that is the same in every iteration is decided
(which branch of a concatenation a scalar read takes). None of that changes a number:
every cell is the same function of the same elements, folded in the same order (the
kernel's dim order, which the specialized passes keep too).

It lowers MAP, SUM, MAX, SCAN and SCATTER kernels (``lowers_generic``). Where several
gathered indices are out of range, the one the error names is the first in the generic
nest's loop order, which may differ from the specialized nest's (its passes may reorder
loops); in-range results are the same bits. Which kernels a device makes generic is the
device's rule (the c device's: ``ir/c/units.generic``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ir.graph import dtypes
from ir.graph.dtypes import DType, to_numpy
from ir.graph.ops import ELEMENTWISE, Op
from ir.kernel.kernel import Kernel, KernelGraph
from ir.loop.lower import _flat, _Lowering
from ir.loop.nest import Index, Loop, LoopNest, Range
from ir.loop.passes import Pass, drop_dead_values, reduce_placement, renumber

GENERIC_KINDS = ("MAP", "SUM", "MAX", "SCAN", "SCATTER")


def const_bits(value, d: DType) -> int:
    """The int64 that carries constant ``value`` of dtype ``d``: a float's bits (a nan as
    C's NAN, as the literal would be), an integer or bool as itself (uint64 wrapped)."""
    if d.is_float:
        if np.isnan(value):
            value = float("nan")
        raw = np.array(value, to_numpy(d))
        return int(raw.view(f"i{raw.itemsize}"))
    if d == dtypes.uint64:
        return int(np.array(int(value), np.uint64).view(np.int64))
    return int(value)


# the passes a generic nest runs: none of them reads a size
GENERIC_PASSES: list[Pass] = [reduce_placement, drop_dead_values, renumber]


def lowers_generic(kernel: Kernel) -> bool:
    """Whether ``lower_generic`` can lower ``kernel`` (its kind and every row)."""
    if kernel.kind not in GENERIC_KINDS:
        return False
    rows = kernel.rows
    for j, row in enumerate(rows):
        if j == len(rows) - 1 and kernel.kind != "MAP":
            continue  # the reduce, scan or scatter itself
        if row.op not in (Op.BUFFER, Op.CONST, Op.VIEW, Op.GATHER) and row.op not in ELEMENTWISE:
            return False
    return True


def lower_generic(graph: KernelGraph, i: int) -> tuple[LoopNest, tuple[int, ...]]:
    """The size-generic nest of kernel ``i`` and the values of its sizes for this kernel."""
    k = graph.kernels[i]
    if not lowers_generic(k):
        raise ValueError(
            f"lower_generic: k{i} ({k.kind}) has a row only a specialized nest can hold"
        )
    low = _Generic(k)
    nest = low.nest(graph, i)
    return nest, tuple(low.sizes)


class _Generic(_Lowering):
    """The lowering with every size a name: loops, addresses and pads ask ``size``."""

    def __init__(self, kernel: Kernel):
        super().__init__(kernel)
        self.sizes: list[int] = []
        self.roles: dict[str, int] = {}  # how many sizes of each role are named
        self.extent: dict[str, str] = {}  # loop variable -> the size that is its stop
        self.scope: list[str] = []  # the loop variables open where the lowering is

    def size(self, value: int, role: str) -> str:
        """A fresh name for a number that comes from a shape, saying what it is (``role``:
        ``n`` an extent, ``st`` a stride, ``off`` an offset, ``lo``/``hi`` a pad's bounds,
        ``c`` a constant's bits), numbered within its role; its value is remembered."""
        name = f"{role}{self.roles.get(role, 0)}"
        self.roles[role] = self.roles.get(role, 0) + 1
        self.sizes.append(int(value))
        self.names.append(name)
        return name

    def open(self, names: list[str], extents: list[int]) -> tuple[Index, ...]:
        self.memo = {}
        for name, n in zip(names, extents):  # a loop variable names one dim: one size
            if name not in self.extent:
                self.extent[name] = self.size(n, "n")
            self.emit(Loop(name, self.extent[name]))
            self.scope.append(name)
        return tuple(Index.var(n) for n in names)

    def close(self, names: list[str]) -> None:
        super().close(names)
        self.scope = [n for n in self.scope if n not in names]

    def names_of(self, idx: tuple[Index, ...]) -> list[str]:
        """The loop variables open here, then every other name ``idx`` uses (a gathered
        index): an address over them keeps its shape when a coefficient is 0 at one size."""
        out = list(self.scope)
        for e in idx:
            out += [n for n, _ in e.terms if n not in out]
        return out

    def generalize(self, at: Index, names: list[str]) -> Index:
        """``at``, an Index at this kernel's sizes, with every coefficient of ``names`` and
        the constant given at run time instead."""
        coeff = dict(at.terms)
        if set(coeff) - set(names) or at.scaled:
            raise ValueError(f"lower_generic: {at} uses a name outside {names}")
        scaled = tuple(sorted((n, self.size(coeff.get(n, 0), "st")) for n in names))
        return Index(((self.size(at.const, "off"), 1),), 0, scaled)

    def flat(self, idx: tuple[Index, ...], strides: tuple[int, ...], offset: int = 0) -> Index:
        """The specialized address, generalized: the view arithmetic above a buffer (strides
        of views of views, ``kernel.reindex``) is done here at this kernel's sizes, and
        only the resulting coefficients reach the nest, as sizes."""
        return self.generalize(_flat(idx, strides, offset), self.names_of(idx))

    def bound(self, n: int) -> str:
        return self.size(n, "n")

    def known_in(self, name: str, size: int) -> None:
        pass  # nothing is settled from a range in a generic nest

    def next_nest(self) -> None:
        self.extent = {}  # the same loop variable, another extent

    def constant(self, value, d) -> str:
        """The program's constant is given at run time, as the bits of its compute dtype."""
        out = self.const(value, d)
        lit = self.body[-1]
        if not lit.dtype.is_float or lit.dtype in (dtypes.float32, dtypes.float64):
            bits = const_bits(lit.value, lit.dtype)  # the value lives in the sizes only
            self.body[-1] = replace(lit, value=None, given=self.size(bits, "c"))
        return out

    def pad(self, v, idx: tuple[Index, ...]) -> list[Range] | None:
        """A dim of a masked view whose index moves with the loops is a predicate, not
        settled (that is a size's decision), so a pad that holds everywhere at one size is
        still checked. One whose index is the same in every iteration (a scalar read of a
        concatenation) is decided here, as the specialized lowering does: None where it
        fails (the view reads only pad). Kept, such predicates would differ between the
        branches of a nest of pads and stop the values beneath from being shared: the
        equality test of two scalar elements of ``diff(concat(...))`` lowered to 21,575
        instructions that way, against 347 specialized."""
        if v.mask is None:
            return []
        names = self.names_of(idx)
        preds = []
        for d, (lo, hi) in enumerate(v.mask):
            at = idx[d]
            if not at.terms and not at.scaled:
                if not lo <= at.const < hi:
                    return None
                continue
            preds.append(
                Range(self.generalize(at, names), self.size(lo, "lo"), self.size(hi, "hi"))
            )
        return preds
