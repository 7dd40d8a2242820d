"""``ir(x)``: print what realizing ``x`` would run, at any stage of the compiler.

``x`` is anything with a ``.node`` (a limn Tensor, an Array API array), an op-graph Node,
or a list of them. ``stage`` picks the floor:

* ``"graph"``: the op graph, one node per line (stage 1);
* ``"kernel"``: the kernel graph, each kernel's fused rows and buffers (stage 2);
* ``"loop"`` (default): every kernel's loop nest after the passes, then the sinks
  (stage 3) -- the instruction stream the compiled devices render; with the c device's
  passes (``passes=c_passes(target)``), a small kernel prints as the size-generic nest that
  device runs (``ir/loop/generic.py``: its sizes are names, given at run time);
* ``"c"``: the C source the c device compiles for ``x`` (stage 4) for ``target``, made by
  the function the device itself calls (``ir.c.units.compile``), with the c device's
  passes unless ``passes`` are given, then each CUSTOM kernel's unit
  (``ir.c.sdpa.kernel_source``);
* ``"cuda"``: the CUDA C program the cuda device hands NVRTC (``ir.cuda.render.source``),
  with the cuda device's passes unless ``passes`` are given, then each CUSTOM kernel's
  program (``ir.cuda.sdpa.kernel_source``).

Buffers are named per printout: graph inputs first (``buf0``, ``buf1``, ...), then each
kernel's output in run order. ``is_realized`` names the nodes whose values a runtime holds
(``limn.ir`` passes the runtime's own answer, so it prints the plan a device runs): they are
inputs, each marked ``held`` (with the op that made it) above the kernel and loop stages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ir.c import sdpa as c_sdpa
from ir.c.render import renders
from ir.c.target import Target
from ir.c.units import compile, generic
from ir.cuda import sdpa as cuda_sdpa
from ir.cuda.render import source as cuda_source
from ir.graph.decompose import decompose
from ir.graph.dtypes import compute_dtype
from ir.graph.node import Node, format_graph
from ir.kernel.kernel import (
    KernelGraph,
    buffer_lines,
    constant_kernels,
    kernel_title,
    sink_lines,
)
from ir.kernel.schedule import schedule
from ir.loop.generic import GENERIC_PASSES, lower_generic
from ir.loop.lower import lower
from ir.loop.passes import Pass, apply_passes

STAGES = ("graph", "kernel", "loop", "c", "cuda")
# which composites each device's stage renders itself (ir/graph/decompose.py spells the rest)
DECOMPOSES = {
    "c": lambda n: renders(n.op, compute_dtype(n.dtype)),
    "cuda": lambda n: False,
}


def _roots(x) -> list[Node]:
    if isinstance(x, Node):
        return [x]
    if hasattr(x, "node"):
        return [x.node]
    if isinstance(x, list | tuple):
        return [r for item in x for r in _roots(item)]
    raise TypeError(
        f"ir: cannot print a {type(x).__name__}; accepted: a Tensor (anything with .node), "
        "a Node, or a list of them"
    )


def format_loops(graph: KernelGraph, passes: Sequence[Pass] | None = None) -> str:
    """Every kernel of ``graph`` as its loop nest, then the sinks."""
    blocks = []
    on_host = constant_kernels(graph)
    for i, k in enumerate(graph.kernels):
        constant = passes is not None and i in on_host  # a compiled device evaluates it once
        if k.kind == "CUSTOM" or constant:
            note = "  constant: numpy computes it once, at plan time" if constant else ""
            blocks.append("\n".join([kernel_title(i, k) + note, *buffer_lines(graph, k)]))
            continue
        sizes = None
        if passes is not None and generic(graph, k, list(passes)):
            # the c device's passes: a small kernel is the size-generic nest it runs
            nest, sizes = lower_generic(graph, i)
            nest = apply_passes(nest, GENERIC_PASSES)
        else:
            nest = apply_passes(lower(graph, i), passes)
        names = [f"buf{b}" for b in k.inputs]
        blocks.append(nest.format(names, f"buf{k.output}", sizes))
    return "\n\n".join([*blocks, "\n".join(sink_lines(graph))])


def ir(
    x,
    stage: str = "loop",
    passes: Sequence[Pass] | None = None,
    is_realized: Callable[[Node], bool] | None = None,
    target: Target | None = None,
) -> str:
    """The text of ``x`` at ``stage`` ("graph", "kernel", "loop", "c" or "cuda"); stage
    "c" for ``target``, the CPU it compiles for."""
    roots = _roots(x)
    if stage == "graph":
        return format_graph(roots)
    if stage not in STAGES:
        raise ValueError(f"ir: unknown stage {stage!r}; accepted: {', '.join(STAGES)}")
    if stage in DECOMPOSES:  # what that device compiles: composites it renders, the rest spelled
        roots = decompose(roots, DECOMPOSES[stage], is_realized)
    sched = schedule(roots, is_realized)
    graph = sched.graph
    # an input with sources: a value the runtime holds, read instead of computed
    held = [f"buf{i} = held {n.op.value}" for i, n in enumerate(sched.inputs) if n.srcs]
    if stage == "kernel":
        return "\n".join([*held, str(graph)])
    if stage == "cuda":
        source = cuda_sdpa.kernel_source
        return "\n".join([cuda_source(graph, passes), *custom_sources(graph, source)])
    if stage == "c":
        if target is None:
            raise ValueError("ir: stage 'c' compiles for a target; give ir.c.target.Target")
        return c_sources(graph, compile(graph, passes, target))
    return "\n".join([*held, format_loops(graph, passes)])


def c_sources(graph: KernelGraph, units) -> str:
    """What stage "c" prints: the units a plan compiles (``ir.c.units.Units``), then each
    CUSTOM kernel's source for their target."""
    source = lambda k, names: c_sdpa.kernel_source(k, units.target, names)  # noqa: E731
    return "\n".join([u.source for u in units.all()] + custom_sources(graph, source))


def custom_sources(graph: KernelGraph, kernel_source) -> list[str]:
    """Each CUSTOM kernel's source as a device runs it (``kernel_source(k, names)``: the
    call and its source, as ``ir.c.sdpa``'s and ``ir.cuda.sdpa``'s give them), under a
    line naming the kernel; a source two kernels share (an op's outputs) printed once."""
    out, shown = [], set()
    for i, k in enumerate(graph.kernels):
        if k.kind != "CUSTOM":
            continue
        name, index, _ = k.result.arg
        got = kernel_source(k, [f"buf{b}" for b in k.inputs])
        if got is None:
            out.append(f"/* k{i}: CUSTOM {name}: a host function of the device */")
            continue
        call, body = got
        out.append(
            f"/* k{i}: CUSTOM {name}[{index}]: {call} */" + ("" if body in shown else "\n" + body)
        )
        shown.add(body)
    return out
