"""The stage viewer: one self-contained HTML page showing every stage of a computation.

``limn.viz(x, path="limn.html")`` writes the page for what realizing ``x`` would run;
``LIMN_VIZ=out.html python script.py`` records every distinct graph the program realizes
and writes them all at exit. The page needs no server and no network: the data below is
embedded as JSON, and the drawing and the panels are plain JavaScript shipped beside this
module (``viewer_page/``; docs/viewer.md says how to read it).

What the page holds is exactly what the printers print, gathered per kernel:

* the op graph (stage 1), one entry per node with its ``format_graph`` line;
* the kernel graph (stage 2): each kernel's printed block, the node behind each row
  (``Schedule.row_nodes``) and the buffers between kernels;
* each kernel's loop nest as lowered and after every pass in order (stage 3), each line
  tagged with the kernel row it was lowered from (``Instruction.row``);
* the source each target renders from the final nest (stage 4), each line tagged with
  the nest line it was written for (``ir.c.render.render_mapped``,
  ``ir.cuda.render.render_mapped``).

Those tags are the links: node -> kernel rows -> nest lines -> C/CUDA lines, and back.

Per-kernel measurements are optional: a ``stats`` callable ``(KernelGraph, i) -> dict``
(or, for one graph, a dict by kernel index) gives ``{"calls": n, "seconds": total,
"flops": per call, "bytes": per call}``, any of the last two left out; the page shows
time per call, GFLOP/s and GB/s. Without one, the page shows what limn's kernel profiler
(``limn.profile()``, ``LIMN_PROFILE=1``) measured of each kernel with the same body and
buffers, when it is running or has run; another profiler sets ``limn.viewer.stats_source``
to its own callable and every page written afterwards shows its figures.
"""

from __future__ import annotations

import atexit
import html
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from ir.c.units import generic, generic_function
from ir.graph.node import Node, format_node, toposort
from ir.graph.ops import Op
from ir.kernel.kernel import KernelGraph, constant_kernels
from ir.kernel.schedule import schedule
from ir.loop.generic import GENERIC_PASSES, lower_generic
from ir.loop.lower import lower
from ir.loop.passes import apply_passes
from ir.printer import _roots
from limn.runtime import profile
from limn.runtime.device import current_device, held
from limn.runtime.profile import _short, _source_text

Stats = Callable[[KernelGraph, int], "dict | None"]

stats_source: Stats | None = None
"""Set by a profiler: the per-kernel figures every page written afterwards shows."""


# ---- targets: which passes and which renderer make each target's source ----------------


def _c_target():
    from ir.c.passes import c_passes
    from ir.c.render import render_mapped
    from limn.runtime.target import detect

    return c_passes(detect()), render_mapped


def _cuda_target():
    from ir.cuda.passes import cuda_passes
    from ir.cuda.render import render_mapped

    def spell(nest, name):
        k, origins = render_mapped(nest, name)
        return k.source, k.used, origins

    return cuda_passes(), spell


TARGETS: dict[str, Callable] = {"c": _c_target, "cuda": _cuda_target}
"""Target name -> a function giving (the pass list, a renderer). A renderer is called as
``render(nest, name)`` and returns ``(text, helpers, origins)`` like ``render_mapped``, or
``(text, helpers)`` when it keeps no source map. A device adds its own with ``add_target``."""


def add_target(name: str, target: Callable) -> None:
    """Show ``name``'s source too: ``target()`` gives (passes, render) as in ``TARGETS``."""
    TARGETS[name] = target


# ---- the data of one graph ---------------------------------------------------------------


def graph_data(roots: list[Node], name: str = "graph") -> tuple[dict, KernelGraph]:
    """The op graph and kernel graph of ``roots`` as page data (kernels' nests not yet);
    a value the runtime holds is an input, as in the plan that runs."""
    stop = lambda n: n.op == Op.BUFFER or held(n)  # noqa: E731
    order = toposort(roots, stop)
    index = {id(n): i for i, n in enumerate(order)}
    names = {id(n): f"%{i}" for i, n in enumerate(order)}
    sched = schedule(roots, held)
    graph = sched.graph
    nodes = []
    for n in order:
        stopped = stop(n)
        entry = {"name": names[id(n)], "op": n.op.value, "type": f"{n.dtype}{list(n.shape)}"}
        entry["text"] = format_node(n, names, not stopped).strip()
        entry["srcs"] = [] if stopped else [index[id(s)] for s in n.srcs]
        nodes.append({**entry, "home": -1, "reads": [], "fused": []})
    buffers = [
        {"name": f"buf{b}", "spec": str(spec), "producer": -1}
        for b, spec in enumerate(graph.buffers)
    ]
    prof = profile.active() or profile._last  # where each node was made, if it was noted
    for n, entry in zip(order, nodes) if prof is not None else ():
        site, module = prof.sites.get(n), prof.modules.get(n)
        if site:
            entry["site"] = f"{_short(site)} {_source_text(site)}".rstrip()
        if module:
            entry["module"] = module
    blocks = str(graph).split("\n\n")
    kernels = []
    for i, k in enumerate(graph.kernels):
        buffers[k.output]["producer"] = i
        row_nodes = [index[id(n)] for n in sched.row_nodes[i]]
        top = index[id(sched.outputs[i])]
        nodes[top]["home"] = i
        for row, nid in zip(k.rows, row_nodes):
            node = nodes[nid]
            if row.op == Op.BUFFER:
                if i not in node["reads"]:
                    node["reads"].append(i)
            elif i not in node["fused"]:
                node["fused"].append(i)
                if node["home"] < 0 and nid != top:
                    node["home"] = i
        # a VIEW of a BUFFER row is where that buffer's loads come from
        via = [
            row.srcs[0] if row.op == Op.VIEW and k.rows[row.srcs[0]].op == Op.BUFFER else -1
            for row in k.rows
        ]
        ops = Counter(r.op.value for r in k.rows if r.op not in (Op.BUFFER, Op.VIEW, Op.CONST))
        summary = " ".join(op if c == 1 else f"{op}x{c}" for op, c in ops.items())
        title = blocks[i].splitlines()[0]
        loop = title.split("  ")[-1] if k.kind != "CUSTOM" else ""
        entry = {"name": f"k{i}", "kind": k.kind, "title": title, "loop": loop, "summary": summary}
        entry.update(inputs=list(k.inputs), output=k.output, block=blocks[i].splitlines())
        entry.update(rows=row_nodes, via=via, pipelines={}, stats=None)
        kernels.append({**entry, "module": nodes[top].get("module", ""), "top": top})
    data = {"name": name, "count": 1, "device": "", "nodes": nodes}
    data.update(roots=[index[id(r)] for r in roots], buffers=buffers, kernels=kernels)
    data["sinks"] = blocks[-1].splitlines()
    return data, graph


def _nest_lines(nest, graph: KernelGraph, i: int, sizes=None) -> tuple[list[str], list[int], dict]:
    """The nest's text, the kernel row of each line, and {line: rows a pass folded in}."""
    k = graph.kernels[i]
    text = nest.format([f"buf{b}" for b in k.inputs], f"buf{k.output}", sizes).splitlines()
    lines = nest.lines()
    header = len(text) - len(lines)
    rows = [-1] * header + [-1 if ins.row is None else ins.row for ins in lines]
    folded = {header + j: list(ins.folded) for j, ins in enumerate(lines) if ins.folded}
    return text, rows, folded


def fill_kernels(data: dict, graph: KernelGraph, stats=None) -> None:
    """Each kernel's pipeline per target: its nest after every pass, and the source."""
    targets = {name: make() for name, make in TARGETS.items()}
    data["targets"] = list(targets)
    on_host = constant_kernels(graph)
    for i, k in enumerate(graph.kernels):
        entry = data["kernels"][i]
        entry["stats"] = _stats(stats, graph, i)
        if k.kind == "CUSTOM":
            entry["pipelines"] = _custom_pipelines(k)
            continue
        lowered = lower(graph, i)
        for name, (passes, render) in targets.items():
            if name == "c" and i not in on_host and generic(graph, k, list(passes)):
                # a size-generic kernel: the nest and function the c device runs
                nest, sizes = lower_generic(graph, i)
                fn = generic_function(nest)[0]
                pipe = _pipeline(nest, graph, i, GENERIC_PASSES, render, sizes, fn)
            else:
                pipe = _pipeline(lowered, graph, i, passes, render)
            entry["pipelines"][name] = pipe
        if i in on_host and "c" in entry["pipelines"]:
            entry["pipelines"]["c"]["on_host"] = (
                "not compiled: integers from constants alone, which the c device computes "
                "once, on the host, when it builds the plan (the source shows what C would be)"
            )


def _custom_pipelines(k) -> dict:
    """A CUSTOM kernel per target that has its source: the call with its buffers and
    params where a nest would be, and the very source the device compiles."""
    from ir.c import sdpa as c_sdpa
    from ir.cuda import sdpa as cuda_sdpa
    from limn.runtime.target import detect

    pipes, names = {}, [f"buf{b}" for b in k.inputs]
    c_source = lambda k, names: c_sdpa.kernel_source(k, detect(), names)  # noqa: E731
    for name, source in (("c", c_source), ("cuda", cuda_sdpa.kernel_source)):
        got = source(k, names)
        if got is not None:
            step = {"pass": "CUSTOM", "lines": [got[0]], "rows": [-1]}
            pipes[name] = {"steps": [step], "source": got[1].splitlines()}
    return pipes


def _pipeline(nest, graph: KernelGraph, i: int, passes, render, sizes=None, fn=None) -> dict:
    """The steps from the lowered nest through ``passes``, and the source. A size-generic
    nest (``sizes`` its values here) starts from ``lower_generic`` and renders as ``fn``."""
    lines, rows, folded = _nest_lines(nest, graph, i, sizes)
    first = "lower" if sizes is None else "lower_generic"
    steps = [{"pass": first, "lines": lines, "rows": rows}]
    for p in passes:
        nest = apply_passes(nest, [p])
        new, rows, folded = _nest_lines(nest, graph, i, sizes)
        step = {"pass": getattr(p, "__name__", repr(p))}
        if new != lines:
            step.update(lines=new, rows=rows)
            if folded:
                step["folded"] = folded
        steps.append(step)
        lines = new
    try:
        out = render(nest, fn or f"k{i}")
    except (TypeError, NotImplementedError) as e:  # a dtype or kernel the target declines
        return {"steps": steps, "source": None, "declined": str(e)}
    pipe = {"steps": steps, "source": out[0].splitlines()}
    if len(out) > 2:
        header = len(lines) - len(nest.lines())
        pipe["origin"] = [-1 if o is None else header + o for o in out[2]]
    return pipe


def _stats(stats, graph: KernelGraph, i: int):
    source = stats if stats is not None else stats_source
    if source is None:  # the kernel profiler's figures, if it measured this body
        got = profile.measured(graph, i)
        return got and {**got, "body": _body(graph, i)}
    got = source.get(i) if isinstance(source, dict) else source(graph, i)
    keep = ("calls", "seconds", "flops", "bytes")
    return {k: got[k] for k in keep if k in got} if got else None


def _body(graph: KernelGraph, i: int) -> tuple:
    k = graph.kernels[i]
    return (k.kind, k.rows, tuple(graph.buffers[b] for b in (*k.inputs, k.output)))


def _share(graphs: list[tuple[dict, KernelGraph]]) -> None:
    """The profiler measures a kernel body (every launch of every kernel with the same rows
    and buffers); each kernel of the pages gets its part of that: the body's time split over
    its kernels by how often each one's graph ran, so the kernels' times add up to the
    profiler's total. A graph realized once per step runs each of its kernels once."""
    runs: dict[tuple, int] = {}
    for data, _ in graphs:
        for k in data["kernels"]:
            if k["stats"] and "body" in k["stats"]:
                runs[k["stats"]["body"]] = runs.get(k["stats"]["body"], 0) + data["count"]
    for data, _ in graphs:
        for k in data["kernels"]:
            st = k["stats"]
            if st and "body" in st:
                part = data["count"] / runs[st.pop("body")]
                st["seconds"] *= part
                st["calls"] = round(st["calls"] * part)


# ---- the page ------------------------------------------------------------------------------


def page(graphs: list[dict], title: str) -> str:
    """The HTML text: the template with the data and the scripts inlined."""
    files = resources.files("limn") / "viewer_page"
    text = (files / "page.html").read_text()
    targets = sorted({t for g in graphs for t in g.get("targets", [])}, key=list(TARGETS).index)
    data = {"version": 1, "title": title, "targets": targets, "graphs": graphs}
    blob = json.dumps(data, separators=(",", ":"))
    blob = blob.replace("<", "\\u003c")  # nothing in the data can close the <script>
    for key, value in (
        ("__GRAPH_JS__", (files / "graph.js").read_text()),
        ("__VIEWER_JS__", (files / "viewer.js").read_text()),
        ("__TITLE__", html.escape(title, quote=False)),
        ("__DATA__", blob),
    ):
        text = text.replace(key, value, 1)
    return text


def viz(x, path: str | os.PathLike = "limn.html", stats=None, title: str | None = None) -> Path:
    """Write the stage viewer for what realizing ``x`` would run; returns the path.

    ``x`` is what ``limn.ir`` takes: a Tensor or Array API array, a Node, or a list of them.
    Nodes that already hold bytes are the graph's inputs, as when it is realized.
    """
    roots = _roots(x)
    data, graph = graph_data(roots, _made_at("viz"))
    data["device"] = current_device()
    fill_kernels(data, graph, stats)
    _share([(data, graph)])
    out = Path(path)
    out.write_text(page([data], title or out.stem))
    return out


# ---- LIMN_VIZ: every graph a program realizes --------------------------------------------


def _made_at(what: str) -> str:
    """A graph's name: the user's line that asked for it (``train.py:88  opt.step(loss)``)."""
    site = profile.user_line(3)
    return f"{_short(site)} {_source_text(site)}".strip() if site else what


class Recorder:
    """Collects each distinct graph realized while it is on, and writes them as one page."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.graphs: dict[tuple, tuple[dict, KernelGraph]] = {}

    def observe(self, device: str, roots: list[Node]) -> None:
        from limn.runtime.jit import walk

        key = (device, walk(roots)[0])
        if key in self.graphs:
            self.graphs[key][0]["count"] += 1
            return
        name = _made_at("realized")
        same = sum(d["name"].split(" (")[0] == name for d, _ in self.graphs.values())
        name += f" ({same + 1})" if same else ""
        data, graph = graph_data(roots, name)
        data["device"] = device
        self.graphs[key] = (data, graph)

    def stop(self) -> None:
        """Stop recording (what was recorded stays, for ``write``)."""
        from limn.runtime.device import observers

        if self.observe in observers:
            observers.remove(self.observe)

    def write(self, stats=None) -> Path:
        for data, graph in self.graphs.values():
            fill_kernels(data, graph, stats)
        _share(list(self.graphs.values()))
        self.path.write_text(page([d for d, _ in self.graphs.values()], self.path.stem))
        return self.path


def record(path: str | os.PathLike, at_exit: bool = True) -> Recorder:
    """Record every graph realized from now on; the page is written at exit (or by
    ``Recorder.write``)."""
    from limn.runtime.device import observers

    rec = Recorder(path)
    observers.append(rec.observe)
    # the profiler notes where each node is made (its line, its module) and times kernels
    ours = profile.profile() if profile.active() is None else None

    def finish():
        rec.stop()
        if ours is not None and profile.active() is ours:
            profile.stop()
        out = rec.write()
        n = sum(len(d["kernels"]) for d, _ in rec.graphs.values())
        print(f"limn: stage viewer, {len(rec.graphs)} graphs, {n} kernels: {out}", file=sys.stderr)

    if at_exit:
        atexit.register(finish)
    return rec
