// The stage viewer: panels over the data limn/viz.py embeds, and the links between them.
//
// One selection drives every panel: a graph, a kernel, optionally a node (or one loop-nest
// line), and the pass step shown. Each panel is redrawn from the selection, so a click
// anywhere -- a node, a kernel row, a nest line, a C line -- only changes the selection.
"use strict";

const DATA = JSON.parse(document.getElementById("limn-data").textContent);
const $ = (id) => document.getElementById(id);
const sel = { g: 0, k: -1, node: -1, line: -1, step: -1, target: DATA.targets[0] || "", view: "op" };
let drawn = { key: "" };

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const k in attrs || {}) {
    if (k === "onclick") el.onclick = attrs[k];
    else el.setAttribute(k, attrs[k]);
  }
  for (const kid of kids) el.append(kid);
  return el;
}

const graph = () => DATA.graphs[sel.g];
const kernel = () => (sel.k >= 0 ? graph().kernels[sel.k] : null);
const finalStep = (k) => {
  for (let s = k.steps.length - 1; s >= 0; s--) if (k.steps[s].lines) return k.steps[s];
  return null;
};
const stepLines = (k, s) => {
  for (; s >= 0; s--) if (k.steps[s].lines) return k.steps[s];
  return null;
};

// ---- what the selection highlights ---------------------------------------------------

function selectedRows() {
  // rows of the selected kernel that compute or read the selected node
  const k = kernel();
  if (!k || sel.node < 0) return new Set();
  const out = new Set();
  k.rows.forEach((nid, r) => nid === sel.node && out.add(r));
  return out;
}

function nestHighlight(step) {
  // line indices of `step` to highlight: the selected line, or the selected node's rows
  const out = new Set();
  if (!step) return out;
  if (sel.line >= 0 && step === finalStep(kernel())) out.add(sel.line);
  const rows = selectedRows();
  step.rows.forEach((r, i) => rows.has(r) && out.add(i));
  return out;
}

function sourceHighlight(src) {
  const k = kernel();
  const lit = nestHighlight(finalStep(k));
  const out = new Set();
  if (src && src.origin) src.origin.forEach((o, i) => lit.has(o) && out.add(i));
  return out;
}

// ---- actions ---------------------------------------------------------------------------

function selectGraph(g) {
  Object.assign(sel, { g, k: -1, node: -1, line: -1, step: -1 });
  const ks = graph().kernels;
  if (ks.length) sel.k = 0;
  render();
}

function selectKernel(k) {
  Object.assign(sel, { k, node: -1, line: -1, step: -1 });
  render();
  focusKernel();
}

function selectNode(nid, keepKernel) {
  const node = graph().nodes[nid];
  sel.node = nid;
  sel.line = -1;
  const here = kernel() && kernel().rows.includes(nid);
  if (!(keepKernel && here)) {
    const k = node.home >= 0 ? node.home : node.reads.length ? node.reads[0] : -1;
    if (k !== sel.k) sel.step = -1;
    sel.k = k;
  }
  render();
  focusNode();
}

function selectNestLine(i) {
  const k = kernel();
  const step = sel.step >= 0 ? stepLines(k, sel.step) : finalStep(k);
  const r = step.rows[i];
  if (r >= 0) return selectNode(k.rows[r], true);
  sel.node = -1;
  sel.line = step === finalStep(k) ? i : -1;
  render();
}

function selectSourceLine(i) {
  const k = kernel();
  const o = k.sources[sel.target].origin[i];
  if (o === undefined || o < 0) return;
  sel.step = -1;
  const r = finalStep(k).rows[o];
  if (r >= 0) return selectNode(k.rows[r], true);
  sel.node = -1;
  sel.line = o;
  render();
}

// ---- panels ----------------------------------------------------------------------------

function render() {
  renderGraphList();
  renderDrawing();
  renderKernelList();
  renderDetails();
}

function renderGraphList() {
  const s = $("graph-select");
  if (s.options.length !== DATA.graphs.length) {
    s.textContent = "";
    DATA.graphs.forEach((g, i) => {
      const times = g.count > 1 ? `, realized ${g.count}x` : "";
      s.append(h("option", { value: i }, `${g.name}: ${g.nodes.length} nodes, ${g.kernels.length} kernels${times}`));
    });
    s.onchange = () => selectGraph(+s.value);
  }
  s.value = sel.g;
}

function opItems(g) {
  return g.nodes.map((n) => ({
    w: 104,
    h: 32,
    lines: [`${n.name} ${n.op}`, n.type],
    cls: `op-${n.op} ${n.home < 0 ? "input" : ""}`,
    title: n.text,
  }));
}

function kernelItems(g) {
  // graph inputs first (as buffers), then one item per kernel
  const inputs = g.buffers.filter((b) => b.producer < 0);
  const items = inputs.map((b) => ({ w: 112, h: 32, lines: [b.name, b.spec], cls: "input" }));
  for (const k of g.kernels) {
    const ops = k.summary;
    items.push({ w: 150, h: 46, lines: [`${k.name} ${k.kind}`, k.loop, ops], cls: `kernel kind-${k.kind}`, title: k.title });
  }
  const at = (b) => (g.buffers[b].producer < 0 ? inputs.indexOf(g.buffers[b]) : inputs.length + g.buffers[b].producer);
  const edges = [];
  g.kernels.forEach((k, i) => {
    for (const b of new Set(k.inputs)) edges.push([at(b), inputs.length + i]);
  });
  return { items, edges, base: inputs.length };
}

function renderDrawing() {
  const g = graph();
  for (const b of document.querySelectorAll("#views button")) b.classList.toggle("on", b.dataset.view === sel.view);
  const key = `${sel.g}:${sel.view}`;
  if (drawn.key !== key) {
    // one drawing at a time: a graph's layout is computed when its view is first shown
    if (sel.view === "op") {
      const edges = [];
      g.nodes.forEach((n, i) => n.srcs.forEach((s) => edges.push([s, i])));
      drawn = drawDag($("drawing"), opItems(g), edges, (i) => selectNode(i, false));
      drawn.base = 0;
    } else {
      const kg = kernelItems(g);
      drawn = drawDag($("drawing"), kg.items, kg.edges, (i) => i >= kg.base && selectKernel(i - kg.base));
      drawn.base = kg.base;
    }
    drawn.key = key;
  }
  const q = $("search").value.trim().toLowerCase();
  if (sel.view === "op") {
    drawn.groups.forEach((el, i) => {
      const n = g.nodes[i];
      el.classList.toggle("sel", i === sel.node);
      el.classList.toggle("ink", sel.k >= 0 && n.home === sel.k);
      el.classList.toggle("match", !!q && matches(n.text, q));
    });
  } else {
    drawn.groups.forEach((el, i) => {
      const k = i - drawn.base;
      el.classList.toggle("sel", k === sel.k);
      el.classList.toggle("match", !!q && k >= 0 && matches(kernelText(g.kernels[k]), q));
    });
  }
}

function focusNode() {
  const d = drawn;
  if (!d.zoom || sel.node < 0) return focusKernel();
  if (sel.view === "op") d.zoom.focus(d.box.x[sel.node], d.box.y[sel.node]);
  else if (sel.k >= 0) d.zoom.focus(d.box.x[d.base + sel.k], d.box.y[d.base + sel.k]);
}

function focusKernel() {
  const d = drawn;
  if (!d.zoom || sel.k < 0) return;
  const el = document.querySelector(`#kernels [data-k="${sel.k}"]`);
  if (el) el.scrollIntoView({ block: "nearest" });
  if (sel.view === "kernel") d.zoom.focus(d.box.x[d.base + sel.k], d.box.y[d.base + sel.k]);
}

const matches = (text, q) => text.toLowerCase().includes(q);
const kernelText = (k) => `${k.title} ${k.summary} ${k.block.join(" ")}`;

function statsText(k) {
  const s = k.stats;
  if (!s || !s.seconds || !s.calls) return "";
  let out = `${((s.seconds / s.calls) * 1e3).toFixed(3)} ms`;
  if (s.flops) out += `  ${((s.flops * s.calls) / s.seconds / 1e9).toFixed(2)} GFLOP/s`;
  if (s.bytes) out += `  ${((s.bytes * s.calls) / s.seconds / 1e9).toFixed(2)} GB/s`;
  return out;
}

function renderKernelList() {
  const g = graph();
  const box = $("kernels");
  const q = $("search").value.trim().toLowerCase();
  const order = g.kernels.map((_, i) => i);
  if ($("sort-time").checked) order.sort((a, b) => ((g.kernels[b].stats || {}).seconds || 0) - ((g.kernels[a].stats || {}).seconds || 0));
  box.textContent = "";
  let shown = 0;
  for (const i of order) {
    const k = g.kernels[i];
    if (q && !matches(kernelText(k), q)) continue;
    shown++;
    const row = h("div", { class: "krow" + (i === sel.k ? " sel" : ""), "data-k": i, onclick: () => selectKernel(i) },
      h("span", { class: "kname" }, k.name), h("span", { class: "kkind" }, k.kind), h("span", { class: "kloop" }, k.loop),
      h("span", { class: "ksum" }, k.summary), h("span", { class: "kstat" }, statsText(k)));
    box.append(row);
  }
  $("kernel-count").textContent = q ? `${shown} of ${g.kernels.length} kernels` : `${g.kernels.length} kernels`;
}

function codeBlock(lines, lit, onLine, cls) {
  const pre = h("pre", { class: "code " + (cls || "") });
  lines.forEach((line, i) => {
    const text = typeof line === "string" ? line : line.text;
    const kind = typeof line === "string" ? "same" : line.kind;
    const at = typeof line === "string" ? i : line.at;
    const el = h("div", { class: `ln ${kind}${at >= 0 && lit.has(at) ? " hl" : ""}`, "data-line": at },
      h("span", { class: "no" }, at >= 0 ? String(at + 1) : ""), text);
    if (at >= 0 && onLine) el.onclick = () => onLine(at);
    pre.append(el);
  });
  return pre;
}

function section(title, open, ...body) {
  const d = h("details", open ? { open: "" } : {}, h("summary", {}, title), ...body);
  return d;
}

function renderDetails() {
  const box = $("details");
  box.textContent = "";
  const g = graph();
  const k = kernel();
  if (sel.node >= 0) {
    const n = g.nodes[sel.node];
    const links = h("div", { class: "links" }, h("b", {}, n.text));
    if (n.home >= 0) links.append(" computed in ", klink(n.home));
    if (n.reads.length) {
      links.append(" read by ");
      n.reads.forEach((r) => links.append(klink(r), " "));
    }
    if (n.fused.length > 1) {
      links.append(" recomputed in ");
      n.fused.forEach((r) => links.append(klink(r), " "));
    }
    box.append(links);
  }
  if (!k) return;
  const rows = selectedRows();
  const nIn = k.inputs.length;
  const blockLit = new Set([...rows].map((r) => r + nIn + 2));
  box.append(section(`kernel graph: ${k.title}`, true,
    codeBlock(k.block, blockLit, (i) => i >= nIn + 2 && selectNode(k.rows[i - nIn - 2], true), "block")));
  if (k.stats) box.append(h("div", { class: "stats" }, `measured: ${k.stats.calls} calls, ${statsText(k)}`));
  if (!k.steps.length) return;
  const steps = h("div", { class: "steps" });
  const cur = sel.step >= 0 ? sel.step : k.steps.length - 1;
  k.steps.forEach((s, i) => {
    const b = h("button", { class: (i === cur ? "on " : "") + (s.lines ? "changed" : "same"), "data-step": i,
      onclick: () => { sel.step = i; sel.line = -1; render(); } }, `${i}. ${s.pass}`);
    b.title = s.lines ? "changed the nest" : "no change";
    steps.append(b);
  });
  const step = stepLines(k, cur);
  const prev = cur > 0 ? stepLines(k, cur - 1) : null;
  const shown = k.steps[cur].lines && prev ? lineDiff(prev.lines, step.lines) : step.lines;
  const lit = nestHighlight(step);
  const what = k.steps[cur].lines ? (prev ? "diff against the step before" : "as lowered") : "unchanged by this pass";
  box.append(section("loop nest after each pass", true, steps, h("div", { class: "note" }, what),
    codeBlock(shown, lit, selectNestLine, "nest")));
  const tabs = h("div", { class: "steps" });
  for (const t of DATA.targets) {
    if (!k.sources[t]) continue;
    tabs.append(h("button", { class: t === sel.target ? "on" : "", onclick: () => { sel.target = t; render(); } }, t));
  }
  const src = k.sources[sel.target];
  box.append(section(`rendered source (${Object.keys(k.sources).join(", ") || "none"})`, true, tabs,
    src ? codeBlock(src.lines, sourceHighlight(src), selectSourceLine, "source") : h("div", { class: "note" }, "no source for this target")));
  const first = box.querySelector(".nest .hl, .source .hl");
  if (first) first.scrollIntoView({ block: "nearest" });
}

function klink(k) {
  return h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); selectKernel(k); } }, graph().kernels[k].name);
}

// ---- start -----------------------------------------------------------------------------

function start() {
  $("title").textContent = DATA.title;
  for (const b of document.querySelectorAll("#views button")) b.onclick = () => { sel.view = b.dataset.view; renderDrawing(); focusNode(); };
  $("fit").onclick = () => drawn.zoom && drawn.zoom.fit();
  $("search").oninput = () => { renderKernelList(); renderDrawing(); };
  $("search").onkeydown = (ev) => {
    if (ev.key !== "Enter") return;
    const q = $("search").value.trim().toLowerCase();
    const g = graph();
    const byName = g.kernels.findIndex((k) => k.name.toLowerCase() === q);
    if (byName >= 0) return selectKernel(byName);
    const node = g.nodes.findIndex((n) => n.name === q || (q && matches(n.text, q)));
    if (node >= 0) return selectNode(node, false);
    const k = g.kernels.findIndex((k) => matches(kernelText(k), q));
    if (k >= 0) selectKernel(k);
  };
  $("sort-time").onchange = renderKernelList;
  $("sort-time").disabled = !DATA.graphs.some((g) => g.kernels.some((k) => k.stats));
  let big = 0;
  DATA.graphs.forEach((g, i) => { if (g.kernels.length > DATA.graphs[big].kernels.length) big = i; });
  sel.g = big;
  sel.view = DATA.graphs.length && graph().nodes.length > 1500 ? "kernel" : "op";
  if (DATA.graphs.length) selectGraph(big);
  document.body.dataset.ready = "1";
}

start();
