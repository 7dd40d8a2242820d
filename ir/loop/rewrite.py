"""The tools a pass rewrites a loop nest with, and the check it must pass afterwards.

``ir/loop/nest.py`` says what a nest is; this module says what a pass can ask of one: the
names an instruction defines and reads, the addresses it touches, renaming and substituting
inside every Index of an instruction or a whole tree (``tree_map`` under both), fresh names
(``Fresh``), perfect chains of loops, and ``verify``, which every pass's output is checked
against.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ir.graph.dtypes import DType, bool_, int64
from ir.graph.ops import TABLE, Op
from ir.loop.nest import (
    OPCODE,
    Accum,
    Arith,
    Check,
    Const,
    DefAcc,
    Index,
    Instr,
    Kind,
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
    walk,
)

# ---- what an instruction defines, reads and touches ---------------------------------


def defines(ins: Instr) -> str | None:
    """The value or accumulator an instruction introduces."""
    return getattr(ins, "out", None)


def value_dtype(ins: Instr) -> DType | None:
    if isinstance(ins, Mask):
        return bool_
    return getattr(ins, "dtype", None)


def value_lanes(ins: Instr) -> int:
    """How many lanes the value an instruction defines has (1: a scalar)."""
    return getattr(ins, "lanes", 1)


def uses(ins: Instr) -> tuple[str, ...]:
    """Every name an instruction reads: values, accumulators, loop variables."""
    names: list[str] = []
    for idx in indices(ins):
        names += idx.names
    if isinstance(ins, Arith):
        names += ins.srcs
    elif isinstance(ins, Store):
        names.append(ins.src)
    elif isinstance(ins, Accum):
        names.append(ins.src)
        if ins.mul is not None:
            names.append(ins.mul)
        if ins.index is None:
            names.append(ins.dst)
    elif isinstance(ins, Check):
        names.append(ins.value)
    elif isinstance(ins, PairwiseFold):
        names.append(ins.acc)
    elif isinstance(ins, DefAcc) and ins.start is not None:
        names.append(ins.start)
    return tuple(names)


def indices(ins: Instr) -> tuple[Index, ...]:
    """Every Index an instruction evaluates: its address, a lane, bounds, predicates."""
    out = []
    if isinstance(ins, Load | Store | Sort) or isinstance(ins, Accum) and ins.index is not None:
        out.append(ins.index)
    if isinstance(ins, Accum) and ins.lane is not None:
        out.append(ins.lane)
    if isinstance(ins, Loop):
        out += [*ins.lo, *ins.hi]
    for p in getattr(ins, "guard", ()) + getattr(ins, "preds", ()):
        out.append(p.index)
    return tuple(out)


def accesses(ins: Instr) -> tuple[tuple[str, Index], ...]:
    """The memory an instruction touches, as (buffer, address) pairs."""
    if isinstance(ins, Load | Store):
        return ((ins.buf, ins.index),)
    if isinstance(ins, Accum) and ins.index is not None:
        return ((ins.dst, ins.index),)
    if isinstance(ins, Sort):  # a row from index on, of every key and of the output
        return ((ins.dst, ins.index), *((k, ins.index) for k in ins.keys))
    return ()


def tree_map(items, fn) -> tuple:
    """``items`` with ``fn`` applied to every instruction of the tree: a loop's body first,
    then ``fn`` sees the loop holding the new body. ``fn`` gives an instruction, or a tuple
    of them to splice in its place (``()`` drops it)."""
    out: list = []
    for ins in items:
        if isinstance(ins, Loop) and ins.body:
            ins = replace(ins, body=tree_map(ins.body, fn))
        new = fn(ins)
        out += new if isinstance(new, tuple) else [new]
    return tuple(out)


def substitute(ins, mapping: dict[str, Index]):
    """Replace loop variables (or value terms) inside every Index of ``ins``: one
    instruction, a loop and everything inside it, or a tuple of them (a tree)."""
    return _deep(ins, lambda x: _substitute(x, mapping))


def _deep(ins, fn):
    """``fn`` applied throughout ``ins``: a tree, or one instruction (a loop with its body)."""
    if isinstance(ins, Loop) and ins.body:
        return tree_map((ins,), fn)[0]
    return tree_map(ins, fn) if isinstance(ins, tuple) else fn(ins)


def _substitute(ins: Instr, mapping: dict[str, Index]) -> Instr:

    def sub_preds(ps):
        return tuple(Range(p.index.substitute(mapping), p.lo, p.hi) for p in ps)

    if isinstance(ins, Load):
        return replace(ins, index=ins.index.substitute(mapping), guard=sub_preds(ins.guard))
    if isinstance(ins, Store | Sort):
        return replace(ins, index=ins.index.substitute(mapping))
    if isinstance(ins, Accum) and (ins.index is not None or ins.lane is not None):
        return replace(
            ins,
            index=None if ins.index is None else ins.index.substitute(mapping),
            lane=None if ins.lane is None else ins.lane.substitute(mapping),
        )
    if isinstance(ins, Loop) and (ins.lo or ins.hi):
        return replace(
            ins,
            lo=tuple(b.substitute(mapping) for b in ins.lo),
            hi=tuple(b.substitute(mapping) for b in ins.hi),
        )
    if isinstance(ins, Mask):
        return replace(ins, preds=sub_preds(ins.preds))
    if isinstance(ins, Check):
        return replace(ins, guard=sub_preds(ins.guard))
    return ins


def rename(ins, mapping: dict[str, str]):
    """Rename values, accumulators, buffers and loop variables, where defined and where
    used (index terms too): in one instruction, a loop and its body, or a tree."""
    return _deep(ins, lambda x: _rename(x, mapping))


def _rename(ins: Instr, mapping: dict[str, str]) -> Instr:

    def n(x):
        return mapping.get(x, x)

    terms = {t for idx in indices(ins) for t in idx.names if t in mapping}
    if terms:
        ins = _substitute(ins, {t: Index.var(mapping[t]) for t in terms})
    if isinstance(ins, Loop):
        return replace(ins, var=n(ins.var))
    if isinstance(ins, Load):  # a LOCAL buffer is renamed like a value
        return replace(ins, out=n(ins.out), buf=n(ins.buf))
    if isinstance(ins, DefAcc) and ins.start is not None:
        return replace(ins, out=n(ins.out), start=n(ins.start))
    if isinstance(ins, Const | Mask | DefAcc | Local):
        return replace(ins, out=n(ins.out))
    if isinstance(ins, Arith):
        return replace(ins, out=n(ins.out), srcs=tuple(n(s) for s in ins.srcs))
    if isinstance(ins, Store):
        return replace(ins, buf=n(ins.buf), src=n(ins.src))
    if isinstance(ins, Accum):
        dst = n(ins.dst)
        mul = None if ins.mul is None else n(ins.mul)
        return replace(ins, dst=dst, src=n(ins.src), mul=mul)
    if isinstance(ins, Check):
        return replace(ins, value=n(ins.value))
    if isinstance(ins, PairwiseFold):
        return replace(ins, acc=n(ins.acc))
    return ins


# ---- loops and their chains ---------------------------------------------------------


def chain(loop: Loop) -> tuple[list[Loop], tuple]:
    """The loops of a perfect chain starting at ``loop``, and the items inside the last."""
    loops, inner = [loop], loop.body
    while len(inner) == 1 and isinstance(inner[0], Loop):
        loops.append(inner[0])
        inner = inner[0].body
    return loops, inner


def rebuild(loops: list[Loop], inner) -> Loop:
    """``chain`` undone: ``loops`` nested around ``inner``, the outermost first."""
    out = replace(loops[-1], body=tuple(inner))
    for loop in reversed(loops[:-1]):
        out = replace(loop, body=(out,))
    return out


def interleave(block: Loop, loop: Loop, ways: int) -> Loop:
    """``loop`` (of ``block``'s chain, n iterations) as ``ways`` interleaved ones: a loop
    ``<var>s`` of n / ways outside the chain, and ``loop`` itself cut to ``ways``, its
    iteration ``c`` being the old ``c * n / ways + <var>s``."""
    s, p = extent(loop) // ways, loop.var + "s"
    loops, inner = chain(block)
    loops = [Loop(p, s), *(replace(lp, stop=ways) if lp is loop else lp for lp in loops)]
    return rebuild(loops, substitute(inner, {loop.var: Index.var(loop.var) * s + Index.var(p)}))


def instructions(tree):
    """Every instruction of a tree, loops' own headers excluded, depth first."""
    return (x for x in walk(tree) if not isinstance(x, Loop))


def kind_of(loop: Loop, scratch=frozenset()) -> Kind:
    """The kind ``loop``'s body makes it (``Kind``), from the cells it writes that outlive
    an iteration: a register or LOCAL it defines is each iteration's own, and a STORE into
    a LOCAL defined outside it (``scratch``: a packed panel) is overwritten before it is read,
    so neither counts. An iteration has a cell to itself where the cell's address (a memory
    index, a register array's lane) names the loop's variable, or a loop inside whose bounds
    it moves (a block's tiles); a register has none to itself."""
    private, moved, own = set(), {loop.var}, []
    for x in walk(loop.body):
        if isinstance(x, Loop) and moved & {n for b in (*x.lo, *x.hi) for n in b.names}:
            moved.add(x.var)
        elif isinstance(x, DefAcc | Local):
            private.add(x.out)
        elif isinstance(x, Store | Sort | Accum | PairwiseFold):
            cell = x.buf if isinstance(x, Store) else getattr(x, "dst", getattr(x, "acc", None))
            at = getattr(x, "index", None) or getattr(x, "lane", None)
            if cell not in private and not (isinstance(x, Store) and cell in scratch):
                own.append(at is not None and not moved.isdisjoint(at.names))
    if loop.stop == 1 or all(own):
        return Kind.OUTPUT
    return Kind.SCAN if any(own) else Kind.REDUCE


# ---- well-formedness ----------------------------------------------------------------


def extent(loop: Loop) -> int:
    return len(range(loop.start, loop.stop, loop.step))


_KIND = re.compile(r"[a-z]+")


class Fresh:
    """Names no instruction of a nest uses yet. ``fresh("v")`` is ``v<k>`` (with ``bare``
    the prefix itself where it is free), ``fresh.like(name)`` a new name of the kind of
    ``name`` (a value, an accumulator, a LOCAL, a loop variable), and ``fresh.copy(items,
    at)`` a copy of a tree with loop variables moved by ``at`` and everything it defines
    named anew: what a pass that duplicates a body (an unroll) needs."""

    def __init__(self, body):
        self.used = {n for ins in walk(body) for n in (defines(ins), getattr(ins, "var", None))}
        self.next: dict[tuple, int] = {}  # the first number the next name may take: every
        # name of a prefix below it is taken (names are only ever added), so a scan is linear

    def __call__(self, prefix: str, bare: bool = False) -> str:
        k = self.next.get((prefix, bare), 0)
        name = prefix if bare and not k else f"{prefix}{k}"
        while name in self.used:
            k += 1
            name = f"{prefix}{k}"
        self.next[prefix, bare] = k
        self.used.add(name)
        return name

    def like(self, name: str) -> str:
        return self(_KIND.match(name).group() if _KIND.match(name) else name)

    def copy(self, items, at: dict[str, Index] | None = None) -> tuple:
        names = {d: self.like(d) for d in map(defines, walk(items)) if d}
        return rename(substitute(tuple(items), at or {}), names)


def verify(nest: LoopNest) -> None:
    """Raise ValueError unless every name is defined once, in scope, with matching dtypes.

    Passes are checked against this after they run, so a broken user pass fails with the
    instruction it got wrong instead of a wrong number later.
    """
    bufs = {f"in{i}": s.dtype for i, s in enumerate(nest.inputs)} | {"out": nest.output.dtype}
    lanes: dict[str, int] = {}  # the vector values and registers, by name
    sizes = frozenset(nest.sizes)  # a size-generic nest's run-time sizes
    visible: set[str] = set(sizes)
    dtypes: dict[str, DType] = {}
    seen: set[str] = set()

    def fail(ins, why):
        raise ValueError(f"{nest.name}: {OPCODE[type(ins)]} {ins.text()}: {why}")

    def visit(items) -> None:
        mine: list[str] = []  # what this body defines: out of scope after it
        for ins in items:
            check(ins)
            if isinstance(ins, Loop):
                visible.add(ins.var)
                visit(ins.body)
                visible.discard(ins.var)
            elif defines(ins) is not None:
                mine.append(defines(ins))
        visible.difference_update(mine)

    def check(ins) -> None:
        for name in uses(ins):
            if name not in visible:
                fail(ins, f"{name} is not defined here")
        for buf, _ in accesses(ins):
            if buf not in bufs and (buf not in visible or buf not in lanes):
                fail(ins, f"unknown buffer {buf}; this nest has {sorted(bufs)}")
        why = _lanes_fit(ins, lanes)
        if why:
            fail(ins, why)
        for size in _size_names(ins):
            if size not in sizes:
                fail(ins, f"{size} is not one of the nest's sizes {list(nest.sizes)}")
        if isinstance(ins, Loop):
            if ins.var in visible:
                fail(ins, f"{ins.var} is already defined")
            if ins.step < 1:
                fail(ins, "a loop steps forward by at least 1")
            why = role_fits(ins)
            if why:
                fail(ins, why)
            kind = kind_of(ins, {n for n in visible if lanes.get(n) == 0})
            if ins.kind is not kind and (isinstance(ins.stop, str) or extent(ins) != 1):
                fail(ins, f"its body makes it a {kind.value} loop, not {ins.kind.value}")
            return
        if isinstance(ins, Load) and ins.dtype != bufs.get(ins.buf, dtypes.get(ins.buf)):
            fail(ins, f"{ins.buf} holds {bufs.get(ins.buf, dtypes.get(ins.buf))}")
        if isinstance(ins, Sort) and (bufs[ins.dst] != int64 or ins.dst in ins.keys):
            fail(ins, f"SORT writes int64 positions into a buffer it does not read, not {ins.dst}")
        held = bufs.get(getattr(ins, "buf", None), dtypes.get(getattr(ins, "buf", None)))
        if isinstance(ins, Store) and dtypes[ins.src] != held:
            fail(ins, f"{ins.src} is {dtypes[ins.src]} but {ins.buf} holds {held}")
        if isinstance(ins, DefAcc) and ins.start is not None and dtypes[ins.start] != ins.dtype:
            fail(ins, f"{ins.start} is {dtypes[ins.start]}, not {ins.dtype}")
        if isinstance(ins, Accum):
            want = dtypes[ins.dst] if ins.index is None else bufs.get(ins.dst, dtypes.get(ins.dst))
            if dtypes[ins.src] != want:
                fail(ins, f"{ins.src} is {dtypes[ins.src]} but the accumulator is {want}")
            if ins.op not in (Op.ADD, Op.MUL, Op.MAX):
                fail(ins, "ACCUM folds with ADD, MUL or MAX")
            if ins.mul is not None:
                if ins.op != Op.ADD or not want.is_float or want.itemsize < 4:
                    fail(ins, f"FMA folds a product into float32 or float64, not {want}")
                if dtypes[ins.mul] != want:
                    fail(ins, f"{ins.mul} is {dtypes[ins.mul]} but the accumulator is {want}")
        if isinstance(ins, Arith):
            why = _arith_types(ins, [dtypes[s] for s in ins.srcs])
            if why:
                fail(ins, why)
        out = defines(ins)
        if out is not None:
            if out in seen:
                fail(ins, f"{out} is defined twice")
            seen.add(out)
            visible.add(out)
            dtypes[out] = value_dtype(ins)
            lanes[out] = 0 if isinstance(ins, Local) else value_lanes(ins)

    visit(nest.body)


def role_fits(loop: Loop) -> str | None:
    """Why a loop's role, tile and team do not fit its shape, or None (``Role``)."""
    if loop.role is None:
        return "a tile belongs to a loop with a role" if loop.tile else None
    n = {Role.BLOCK: 2, Role.LANES: 0}.get(loop.role, 1)  # the tile sizes a role carries
    if len(loop.tile) != n or any(t < 1 for t in loop.tile):
        return f"a {loop.role.value} loop carries {n} tile sizes, not {loop.tile}"
    if loop.role in (Role.SLIVER, Role.PANEL) and loop.step != loop.tile[0]:
        return f"a {loop.role.value} loop steps by its tile {loop.tile[0]}, not {loop.step}"
    if loop.role == Role.BLOCK and not any(
        x.role == Role.SLIVER for x in walk(loop.body) if isinstance(x, Loop)
    ):
        return "a block of a scheduled contraction holds its tiles' sliver loops"
    if loop.parallel and len(chain(loop)[0]) < loop.parallel:
        return f"a team over {loop.parallel} loops needs a perfect chain of them"
    return None


def _lanes_fit(ins: Instr, lanes: dict[str, int]) -> str | None:
    """Why the vector widths an instruction reads and writes do not fit together, or None.

    ``lanes`` holds 1 for a scalar, the width of a vector, and 0 for a LOCAL buffer. A
    vector is loaded, started, folded into a register by ADD or FMA, and stored; nothing
    else takes one, and only a register folds a vector.
    """
    width = value_lanes(ins)
    for name in (
        getattr(ins, "buf", None),
        None if getattr(ins, "index", None) is None else getattr(ins, "dst", None),
    ):
        if name in lanes and lanes[name] != 0:
            return f"{name} is a value, not a buffer"
    if isinstance(ins, Load) and ins.guard and width > 1:
        return "a vector LOAD takes no guard"
    if isinstance(ins, Store) and lanes.get(ins.src, 1) != ins.lanes:
        return f"{ins.src} has {lanes.get(ins.src, 1)} lanes, the store writes {ins.lanes}"
    if isinstance(ins, DefAcc) and ins.start is not None and lanes.get(ins.start) != width:
        return f"{ins.start} has {lanes.get(ins.start)} lanes, the register {width}"
    if isinstance(ins, Accum):
        dst = 1 if ins.index is not None else lanes.get(ins.dst, 1)
        for src in (ins.src, ins.mul):
            if src is not None and lanes.get(src, 1) not in (1, dst):
                return f"{src} has {lanes[src]} lanes; {ins.dst} folds {dst}"
    elif not isinstance(ins, Store | DefAcc):
        for name in uses(ins):
            if lanes.get(name, 1) > 1:
                return f"{name} is a vector; only LOAD, DEFACC, ACCUM and STORE take one"
    return None


def _size_names(ins: Instr) -> list[str]:
    """The run-time sizes an instruction names outside its Indexes (a loop's stop, ...)."""
    out = [ins.stop] if isinstance(ins, Loop) else []
    if isinstance(ins, Check):
        out.append(ins.size)
    for p in getattr(ins, "guard", ()) + getattr(ins, "preds", ()):
        out += [p.lo, p.hi]
    return [x for x in out if isinstance(x, str)]


def _arith_types(ins: Arith, srcs: list[DType]) -> str | None:
    """Why the operand and result dtypes of an ARITH do not fit its op, or None."""
    arity = TABLE[ins.op].arity
    if TABLE[ins.op].category not in ("unary", "binary", "ternary"):
        return f"{ins.op.value} is not an elementwise op"
    if len(srcs) != arity:
        return f"{ins.op.value} takes {arity} operands"
    if ins.op in (Op.CAST, Op.BITCAST):
        return None
    if ins.op == Op.WHERE:
        ok = srcs[0] == bool_ and srcs[1] == srcs[2] == ins.dtype
        return None if ok else "WHERE takes a bool and two values of the result dtype"
    if len(set(srcs)) != 1:
        return f"operands differ in dtype: {', '.join(map(str, srcs))}"
    want = bool_ if ins.op == Op.CMPLT else srcs[0]
    return None if ins.dtype == want else f"the result of {ins.op.value} is {want}"
