"""Which C a plan compiles to: its kernels grouped into translation units. Pure.

``ir/c/render.py`` turns one loop nest into one C function; this file decides, for a
whole kernel graph, which functions exist and how they are grouped for ``cc``: kernels of
one structure share a function (``kernel_key``); small kernels (``SMALL_WORK``) go in
units marked ``QUICK`` that are built without optimization (or by tcc, ``limn/runtime/cc``);
small kernels the rule ``generic`` admits are size-generic, one function per structure
called with its sizes (``ir/loop/generic.py``); big plans are cut into one unit per core.
``plan_units`` is what the c device hands to ``cc`` and what ``ir(x, stage="c")`` prints.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from ir.c.passes import c_passes, default_passes
from ir.c.render import program, render
from ir.c.spell import CTYPE
from ir.c.target import FOLD_BYTES, Target, detect
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
# computes). The marker line, part of the source, is what the toolchain reads.
SMALL_WORK = 1 << 12
QUICK = "/* limn: small kernels, compiled at -O0 */\n"


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


@dataclass
class Units:
    """What a plan compiles to: the specialized translation units, and the size-generic
    kernels, each a C function named by a hash of its text, called with its sizes."""

    units: list[tuple[list[int], str]]  # (kernel indices, translation unit), in cc's order
    generic: dict[str, tuple[str, set]]  # function name -> (its text, the helpers it needs)
    calls: dict[int, tuple[str, tuple[int, ...]]]  # generic kernel -> (function, its sizes)
    functions: list = field(default_factory=list)  # every function's (text, helpers), in order

    def sources(self) -> list[str]:
        """Every translation unit, the generic kernels' last (what ``ir(stage="c")`` prints)."""
        gen = [generic_unit(self.generic)] if self.generic else []
        return [src for _, src in self.units] + gen


def generic_unit(functions: dict[str, tuple[str, set]]) -> str:
    """One translation unit of size-generic kernels (small by the rule: built at -O0)."""
    return QUICK + program([functions[name] for name in sorted(functions)])


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


def plan_units(
    graph: KernelGraph,
    passes=None,
    openmp: bool = True,
    cores: int | None = None,
    generic_kernels: bool = True,
    target: Target | None = None,
) -> Units:
    """The C a plan compiles to. This is the one function that makes what the c device hands
    to ``cc``, and what ``ir(x, stage="c")`` prints.

    Kernel ``i`` is the C function ``k<i>``, or for a generic kernel (``generic``) the
    function ``g_<hash>`` that every kernel of its structure shares; CUSTOM kernels have
    none, nor do the ``constant_kernels`` (the device computes those on the host).
    ``passes`` default to the c device's (``c_passes()``). Kernels of at most
    ``SMALL_WORK`` iterations go in units of their own, marked ``QUICK``. With
    ``generic_kernels=False`` every kernel is specialized to its sizes. ``target`` (default:
    ``detect()``) is the CPU the default passes tune for, printed at each unit's head.
    """
    for spec in graph.buffers:
        if spec.dtype not in CTYPE:
            raise TypeError(
                f"c device: dtype {spec.dtype} is not supported (buffer {spec}); the c "
                f"device computes {', '.join(map(str, CTYPE))}; use the numpy device "
                f"for {spec.dtype}"
            )
    target = target or detect()
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
    for funcs, mark in ((large, ""), (small, QUICK)):
        for part in split_for_cores(funcs, cores or target.cores) if funcs else []:
            kernels = sorted(i for same, _ in part for i in same)
            out.append((kernels, mark + program([f for _, f in part], target)))
    funcs = [f for _, f in large + small] + [gen[name] for name in sorted(gen)]
    return Units(out, gen, calls, funcs)


_GENERIC_SEEN: dict[tuple, tuple[str, tuple[str, set]]] = {}


def generic_function(nest: LoopNest, openmp: bool = True) -> tuple[str, tuple[str, set]]:
    """A lowered generic nest's C function: its name, and its text and helpers.

    Remembered by what decides the text (the body, the buffers' dtypes, the sizes' names;
    a nest's shapes are only its header), so another kernel of the same structure skips
    the passes and the rendering."""
    key = (nest.kind, nest.body, tuple(b.dtype for b in nest.inputs), nest.output.dtype)
    key += (nest.sizes, openmp)
    if key not in _GENERIC_SEEN:
        nest = apply_passes(nest, GENERIC_PASSES)
        name = generic_name(nest, openmp)
        _GENERIC_SEEN[key] = (name, render(nest, name, openmp))
    return _GENERIC_SEEN[key]


def generic_name(nest: LoopNest, openmp: bool = True) -> str:
    """The C name of a size-generic kernel: ``g_`` and a hash of its text, so every kernel
    of one structure, in any plan, is the same function."""
    text, _ = render(nest, "limn_generic_kernel", openmp)
    return "g_" + hashlib.sha256(text.encode()).hexdigest()[:16]


def kernel_key(graph: KernelGraph, k) -> tuple:
    """What a kernel's nest is made from: its rows and the specs of the buffers it touches.

    Two kernels with equal keys lower to the same nest (they differ only in which buffers
    they are handed), so a plan renders and compiles the nest once and the copy calls it.
    """
    return (k.kind, k.rows, tuple(graph.buffers[b] for b in k.inputs), graph.buffers[k.output])
