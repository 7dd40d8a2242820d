"""Which C a plan compiles to: its kernels grouped into translation units. Pure.

``ir/c/render.py`` turns one loop nest into one C function; this file decides, for a
whole kernel graph, which functions exist and how they are grouped for ``cc``: kernels of
one structure share a function (``kernel_key``); small kernels (``SMALL_WORK``) go in
``quick`` units that are built without optimization (or by tcc, ``limn/runtime/cc``);
small kernels the rule ``generic`` admits are size-generic, one function per structure
called with its sizes (``ir/loop/generic.py``); big plans are cut into one unit per core.
``compile`` is what the c device hands to ``cc``, keeps in its plan and prints. Each unit
is a record (``Unit``) of what the renderer knew while writing it; nothing downstream
reads a decision back from the C text.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from ir.c.passes import c_passes, default_passes
from ir.c.render import program, render
from ir.c.spell import CTYPE
from ir.c.target import FOLD_BYTES, Target
from ir.graph.dtypes import acc_dtype
from ir.graph.ops import Op
from ir.kernel.kernel import KernelGraph, constant_kernels
from ir.loop.generic import GENERIC_PASSES, lower_generic, lowers_generic
from ir.loop.lower import lower
from ir.loop.nest import Loop, LoopNest, Sort, walk
from ir.loop.passes import apply_passes

MIN_PART = 24  # kernels per translation unit before a plan is worth splitting

# A kernel of at most this many loop iterations costs its compile, not its run: it goes in
# a unit of its own that ``cc`` builds at -O0 (a quarter of -O3's time; the results are the
# same, as no flag the c device uses lets the compiler change what a float operation
# computes): a ``quick`` unit.
SMALL_WORK = 1 << 12


def work(nest: LoopNest) -> int:
    """Loop iterations, bounded above: the product of every loop's trip count, a SORT of
    n elements counting n log2(n)."""
    loops = [ins for ins in walk(nest.body) if isinstance(ins, Loop)]
    sorts = [ins.n * max(1, ins.n.bit_length()) for ins in walk(nest.body) if isinstance(ins, Sort)]
    return math.prod(max(1, -(-(lp.stop - lp.start) // lp.step)) for lp in loops) * math.prod(sorts)


def split_for_cores(funcs: list, cores: int) -> list[list]:
    """Cut a plan's kernels into up to ``cores`` translation units of similar size.

    ``cc`` is single-threaded, so a plan compiled as one unit keeps one core busy; cut in
    pieces of balanced source length, it compiles on every core at once. Small plans stay
    one unit: a second ``cc`` process costs more than it saves.
    """
    n = max(1, min(cores, len(funcs) // MIN_PART))
    parts: list[list] = [[] for _ in range(n)]
    sizes = [0] * n
    for item in sorted(funcs, key=lambda f: -len(f[1][0])):
        j = sizes.index(min(sizes))
        parts[j].append(item)
        sizes[j] += len(item[1][0])
    return [sorted(p, key=lambda f: f[0]) for p in parts if p]


@dataclass(frozen=True)
class Unit:
    """One translation unit as the renderer made it: its C, the plan's kernels it defines
    (``k<i>``), and what the renderer knew, which the toolchain reads instead of the text:
    ``quick`` (small kernels only: built without optimization) and ``needs``, the C beyond
    C11 and libm it uses ("vectors": GCC's vector extension and ISA builtins, "threads":
    OpenMP teams, "half": ``_Float16``)."""

    source: str
    kernels: frozenset[int] = frozenset()
    quick: bool = False
    needs: frozenset = frozenset()


def unit(functions: list[tuple[str, set]], target: Target, kernels=(), quick=False) -> Unit:
    """The unit of ``functions`` (each its text and the helpers it uses) for ``target``."""
    used = set().union(*(u for _, u in functions)) if functions else set()
    needs = {u[1] for u in used if u[0] == "needs"} | {"vectors" for u in used if u[0] == "vec"}
    return Unit(program(functions, target), frozenset(kernels), quick, frozenset(needs))


@dataclass
class Units:
    """What a plan compiles to: the specialized translation units, and the size-generic
    kernels, each a C function named by a hash of its text, called with its sizes."""

    units: list[Unit]  # in cc's order
    generic: dict[str, tuple[str, set]]  # function name -> (its text, the helpers it needs)
    calls: dict[int, tuple[str, tuple[int, ...]]]  # generic kernel -> (function, its sizes)
    target: Target
    functions: list = field(default_factory=list)  # every function's (text, helpers), in order

    def all(self) -> list[Unit]:
        """Every translation unit, the generic kernels' last (what ``ir(stage="c")`` prints)."""
        return self.units + ([generic_unit(self.generic, self.target)] if self.generic else [])


def generic_unit(functions: dict[str, tuple[str, set]], target: Target) -> Unit:
    """One translation unit of size-generic kernels (small by the rule: a quick unit)."""
    return unit([functions[name] for name in sorted(functions)], target, quick=True)


GENERIC_WORK = SMALL_WORK  # the most loop iterations a size-generic kernel does


def generic(graph: KernelGraph, k, passes) -> bool:
    """The c device's rule for a size-generic kernel: lowered with its sizes as run-time
    arguments (``ir/loop/generic.py``), so one compile serves every shape of its structure.

    A kernel goes generic when ``lower_generic`` can lower it (MAP, SUM, MAX, SCAN over
    buffers, constants, elementwise ops and views of a buffer or a constant), it runs the
    c device's default passes, its loops do at most ``GENERIC_WORK`` iterations, and no pass
    of the specialized path would change its numbers at its size: a float reduce folds
    fewer elements per cell than two lanes' worth (``lane_reduce``'s regrouping), and a
    float SUM does not fold a product (a tiled contraction's FMA). Everything else
    specializes, as before: threads, tiles, lanes and pad splitting decide by the sizes.
    """
    if (
        not default_passes(passes)
        or not lowers_generic(k)
        or math.prod(k.loop_shape) > GENERIC_WORK
    ):
        return False
    if k.kind in ("SUM", "MAX"):
        r = k.result
        acc = acc_dtype(r.dtype) if k.kind == "SUM" else r.dtype
        src = k.rows[r.srcs[0]]
        if acc.is_float and acc.itemsize >= 4:
            folded = math.prod(src.shape[a] for a in r.arg)
            if folded >= 2 * (FOLD_BYTES // acc.itemsize):
                return False
        if acc.is_float and k.kind == "SUM" and src.op == Op.MUL:
            return False
    return True


def compile(
    graph: KernelGraph,
    passes,
    target: Target,
    openmp: bool = True,
    generic_kernels: bool = True,
    cores: int | None = None,
) -> Units:
    """The C a plan compiles to, for ``target`` with ``passes`` (None: the c device's, for
    that target). This is the one function that makes what the c device hands to ``cc``,
    keeps in its plan and prints (``ir(x, stage="c")``).

    Kernel ``i`` is the C function ``k<i>``, or for a generic kernel (``generic``) the
    function ``g_<hash>`` that every kernel of its structure shares; CUSTOM kernels have
    none, nor do the ``constant_kernels`` (the device computes those on the host). Kernels
    of at most ``SMALL_WORK`` iterations go in ``quick`` units of their own. With
    ``generic_kernels=False`` every kernel is specialized to its sizes. Big plans are cut
    into ``cores`` units (default: the target's cores).
    """
    for spec in graph.buffers:
        if spec.dtype not in CTYPE:
            raise TypeError(
                f"c device: dtype {spec.dtype} is not supported (buffer {spec}); the c "
                f"device computes {', '.join(map(str, CTYPE))}; use the numpy device "
                f"for {spec.dtype}"
            )
    passes = c_passes(target) if passes is None else passes
    first: dict[tuple, int] = {}  # a kernel's structure -> the first kernel that has it
    copies: dict[int, list[int]] = {}
    gen: dict[str, tuple[str, set]] = {}
    calls: dict[int, tuple[str, tuple[int, ...]]] = {}
    on_host = constant_kernels(graph)
    for i, k in enumerate(graph.kernels):
        if k.kind == "CUSTOM" or i in on_host:
            continue
        j = first.setdefault(kernel_key(graph, k), i)
        if generic_kernels and generic(graph, k, passes):
            if j == i:  # each structure lowered once: the others are the same call
                nest, sizes = lower_generic(graph, i)
                name, text = generic_function(nest, openmp)
                gen[name], calls[i] = text, (name, sizes)
            calls[i] = calls[j]
            continue
        copies.setdefault(j, []).append(i)
    small, large = [], []
    for i, same in copies.items():
        nest = apply_passes(lower(graph, i), passes)
        text, used = render(nest, f"k{i}", openmp)
        for j in same[1:]:  # the same nest over other buffers (the next layer's): one call
            text += f"\nvoid k{j}(void *const *args, int64_t *err) {{ k{i}(args, err); }}"
        (small if work(nest) <= SMALL_WORK else large).append((same, (text, used)))
    out = []
    for funcs, quick in ((large, False), (small, True)):
        for part in split_for_cores(funcs, cores or target.cores) if funcs else []:
            kernels = sorted(i for same, _ in part for i in same)
            out.append(unit([f for _, f in part], target, kernels, quick))
    funcs = [f for _, f in large + small] + [gen[name] for name in sorted(gen)]
    return Units(out, gen, calls, target, funcs)


_GENERIC_SEEN: dict[tuple, tuple[str, tuple[str, set]]] = {}


def generic_function(nest: LoopNest, openmp: bool = True) -> tuple[str, tuple[str, set]]:
    """A lowered generic nest's C function: its name, and its text and helpers. The name is
    ``g_`` and a hash of the text, so every kernel of one structure, in any plan, is the
    same function.

    Remembered by what decides the text (the body, the buffers' dtypes, the sizes' names;
    a nest's shapes are only its header), so another kernel of the same structure skips
    the passes and the rendering."""
    key = (nest.kind, nest.body, tuple(b.dtype for b in nest.inputs), nest.output.dtype)
    key += (nest.sizes, openmp)
    if key not in _GENERIC_SEEN:
        text, used = render(apply_passes(nest, GENERIC_PASSES), "g_", openmp)
        name = "g_" + hashlib.sha256(text.encode()).hexdigest()[:16]
        _GENERIC_SEEN[key] = (name, (text.replace("void g_(", f"void {name}(", 1), used))
    return _GENERIC_SEEN[key]


def kernel_key(graph: KernelGraph, k) -> tuple:
    """What a kernel's nest is made from: its rows and the specs of the buffers it touches.

    Two kernels with equal keys lower to the same nest (they differ only in which buffers
    they are handed), so a plan renders and compiles the nest once and the copy calls it.
    """
    return (k.kind, k.rows, tuple(graph.buffers[b] for b in k.inputs), graph.buffers[k.output])
