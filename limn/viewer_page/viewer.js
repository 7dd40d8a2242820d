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
const pipe = (k) => (k && k.pipelines[sel.target]) || { steps: [], source: null };
const stepLines = (k, s) => {
  const steps = pipe(k).steps;
  for (; s >= 0; s--) if (steps[s].lines) return steps[s];
  return null;
};
const finalStep = (k) => stepLines(k, pipe(k).steps.length - 1);

// ---- what the selection highlights ---------------------------------------------------

function selectedRows() {
  // rows of the selected kernel that compute or read the selected node
  const k = kernel();
  if (!k || sel.node < 0) return new Set();
  const out = new Set();
  k.rows.forEach((nid, r) => nid === sel.node && out.add(r));
  k.via.forEach((b, r) => out.has(b) && out.add(r)); // a buffer's loads come from its views
  return out;
}

function nestHighlight(step) {
  // line indices of `step` to highlight: the selected line, or the selected node's rows
  const out = new Set();
  if (!step) return out;
  if (sel.line >= 0 && step === finalStep(kernel())) out.add(sel.line);
  const rows = selectedRows();
  step.rows.forEach((r, i) => rows.has(r) && out.add(i));
  // a row a pass folded into another line (the MUL an ACCUM FMA absorbed) lights that line
  for (const i in step.folded || {}) if (step.folded[i].some((r) => rows.has(r))) out.add(+i);
  return out;
}

function sourceHighlight() {
  const k = kernel();
  const lit = nestHighlight(finalStep(k));
  const out = new Set();
  const origin = pipe(k).origin;
  if (origin) origin.forEach((o, i) => lit.has(o) && out.add(i));
  return out;
}

// ---- actions ---------------------------------------------------------------------------

function selectGraph(g) {
  Object.assign(sel, { g, node: -1, line: -1, step: -1 });
  sel.k = graph().kernels.length ? 0 : -1;
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
  const origin = pipe(k).origin;
  const o = origin ? origin[i] : -1;
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

const textWidth = (lines) => 14 + 6.7 * Math.max(...lines.map((l) => l.length));

// Inputs (graph inputs, parameters, constants) are drawn once per user, right above it:
// a weight read by the forward pass and by the optimizer would otherwise hang a long edge
// across the whole drawing. `keys[i]` is what item i stands for (a node or kernel index).
function opItems(g) {
  const items = [], keys = [], edges = [];
  const item = (n, i) => {
    items.push({
      w: Math.max(72, textWidth([`${n.name} ${n.op}`, n.type])),
      h: 32,
      lines: [`${n.name} ${n.op}`, n.type],
      cls: `op-${n.op} ${n.home < 0 ? "input" : ""}`,
      title: n.text,
    });
    keys.push(i);
    return items.length - 1;
  };
  const at = new Array(g.nodes.length).fill(-1);
  const leaf = (n) => !n.srcs.length;
  g.nodes.forEach((n, i) => {
    for (const s of n.srcs) {
      const src = g.nodes[s];
      edges.push([leaf(src) ? item(src, s) : at[s], -1]);
    }
    at[i] = leaf(n) && n.home < 0 && !g.roots.includes(i) ? -1 : item(n, i);
    for (let e = edges.length - n.srcs.length; e < edges.length; e++) edges[e][1] = at[i];
  });
  return { items, edges, keys };
}

function kernelItems(g) {
  const items = [], keys = [], edges = [];
  const made = new Array(g.kernels.length);
  g.kernels.forEach((k, i) => {
    const from = [];
    for (const b of new Set(k.inputs)) {
      const buf = g.buffers[b];
      if (buf.producer >= 0) {
        from.push(made[buf.producer]);
        continue;
      }
      items.push({ w: textWidth([buf.name, buf.spec]), h: 32, lines: [buf.name, buf.spec], cls: "input" });
      keys.push(-1);
      from.push(items.length - 1);
    }
    const ops = k.summary.length > 40 ? k.summary.slice(0, 39) + "\u2026" : k.summary;
    const lines = [`${k.name} ${k.kind} ${statsText(k)}`, k.loop, ops];
    items.push({ w: textWidth(lines), h: 46, lines, cls: `kernel kind-${k.kind}`, title: `${k.title}\n${k.summary}` });
    keys.push(i);
    made[i] = items.length - 1;
    for (const f of from) edges.push([f, made[i]]);
  });
  return { items, edges, keys };
}

// ---- layers: a big graph is drawn one box per layer until a box is opened -------------
//
// A node's layer is the top of its module path (`blocks.3` of `blocks.3.attn.out_proj`,
// `head`; a gradient's is its forward op's, marked "(grad)"; an optimizer's update is
// named by its parameter's); else the line that made it; else the first output that
// needs it. Closed layers are one box each, with the edges between boxes kept once; a
// click opens one. The op graph starts closed past 1500 nodes, the kernel graph past 600.
const layers = { g: -1, node: null, open: new Set(), on: { op: false, kernel: false } };

function layerName(n) {
  const grad = n.site && n.site.includes("(grad)") ? " (grad)" : "";
  if (!n.module) return n.site || null;
  const parts = n.module.split(".");
  return parts.slice(0, /^\d+$/.test(parts[1] || "") ? 2 : 1).join(".") + grad;
}

function nodeLayers(g) {
  if (layers.g === sel.g) return layers.node;
  const out = g.nodes.map(layerName);
  const seen = new Uint8Array(g.nodes.length);
  for (const r of g.roots) {
    const stack = [r];
    while (stack.length) {
      const v = stack.pop();
      if (seen[v]) continue;
      seen[v] = 1;
      if (out[v] === null) out[v] = `${g.nodes[r].name} ${g.nodes[r].op}`;
      stack.push(...g.nodes[v].srcs);
    }
  }
  Object.assign(layers, { g: sel.g, node: out.map((l) => l || "inputs"), open: new Set() });
  layers.on = { op: g.nodes.length > 1500, kernel: g.kernels.length > 600 };
  return layers.node;
}

function layerOfKey(g, k) {
  const of = nodeLayers(g);
  if (sel.view === "op") return k >= 0 ? of[k] : null;
  return k >= 0 ? of[g.kernels[k].top] : null;
}

function collapse(g, made) {
  if (!layers.on[sel.view]) return made;
  const items = [], keys = [], at = [], box = new Map(), count = new Map();
  const of = made.keys.map((k) => layerOfKey(g, k));
  for (const [a, b] of made.edges) if (made.items[a].cls.includes("input")) of[a] = of[b]; // drawn above its user
  of.forEach((l) => count.set(l, (count.get(l) || 0) + 1));
  made.items.forEach((it, i) => {
    const l = of[i];
    if (l === null || layers.open.has(l)) {
      at[i] = items.push(it) - 1;
      keys.push(made.keys[i]);
      return;
    }
    if (!box.has(l)) {
      const lines = [l.length > 44 ? l.slice(0, 43) + "\u2026" : l, `${count.get(l)} ${sel.view === "op" ? "nodes" : "kernels"}`];
      box.set(l, items.push({ w: textWidth(lines), h: 32, lines, cls: "layer", title: `${l}: click to open` }) - 1);
      keys.push(`layer:${l}`);
    }
    at[i] = box.get(l);
  });
  const seen = new Set();
  const edges = [];
  for (const [a, b] of made.edges) {
    const e = `${at[a]},${at[b]}`;
    if (at[a] !== at[b] && !seen.has(e)) edges.push([at[a], at[b]]) && seen.add(e);
  }
  return { items, edges, keys };
}

function openLayerOf(k) {
  const l = layerOfKey(graph(), k);
  if (layers.on[sel.view] && l !== null && !layers.open.has(l)) layers.open.add(l);
}

function renderDrawing() {
  const g = graph();
  for (const b of document.querySelectorAll("#views button")) b.classList.toggle("on", b.dataset.view === sel.view);
  nodeLayers(g);
  $("layers").classList.toggle("on", layers.on[sel.view]);
  const key = `${sel.g}:${layers.on[sel.view]}:${[...layers.open].join("|")}:${sel.view}`;
  if (drawn.key !== key) {
    // one drawing at a time: a graph's layout is computed when its view is first shown
    const op = sel.view === "op";
    const made = collapse(g, op ? opItems(g) : kernelItems(g));
    const click = (i) => {
      const k = made.keys[i];
      if (typeof k === "string") {
        layers.open.add(k.slice(6));
        renderDrawing();
        const at = drawn.keys.findIndex((kk) => typeof kk === "number" && kk >= 0 && layerOfKey(g, kk) === k.slice(6));
        if (at >= 0) drawn.zoom.focus(drawn.box.x[at], drawn.box.y[at]);
      } else if (op) selectNode(k, false);
      else if (k >= 0) selectKernel(k);
    };
    drawn = drawDag($("drawing"), made.items, made.edges, click);
    Object.assign(drawn, { key, keys: made.keys, edges: made.edges });
  }
  const q = $("search").value.trim().toLowerCase();
  const on = new Set();
  drawn.groups.forEach((el, i) => {
    const k = drawn.keys[i];
    let isSel, ink, match;
    if (typeof k === "string") {
      isSel = ink = false;
      match = !!q && matches(k, q);
    } else if (sel.view === "op") {
      const n = g.nodes[k];
      isSel = k === sel.node;
      ink = sel.k >= 0 && (n.home === sel.k || n.fused.includes(sel.k));
      match = !!q && matches(n.text, q);
    } else {
      isSel = k >= 0 && k === sel.k;
      ink = false;
      match = !!q && k >= 0 && matches(kernelText(g.kernels[k]), q);
    }
    el.classList.toggle("sel", isSel);
    el.classList.toggle("ink", ink);
    el.classList.toggle("match", match);
    if (isSel) on.add(i);
  });
  drawn.edges.forEach(([a, b], e) => drawn.paths[e].classList.toggle("on", on.has(a) || on.has(b)));
}

function itemOf(key) {
  return drawn.keys ? drawn.keys.indexOf(key) : -1;
}

function focusNode() {
  if (sel.node >= 0 && sel.view === "op") openLayerOf(sel.node);
  if (sel.k >= 0 && sel.view === "kernel") openLayerOf(sel.k);
  renderDrawing();
  const d = drawn;
  if (!d.zoom || sel.node < 0) return focusKernel();
  const i = itemOf(sel.view === "op" ? sel.node : sel.k);
  if (i >= 0) d.zoom.focus(d.box.x[i], d.box.y[i]);
}

function focusKernel() {
  if (sel.k >= 0 && sel.view === "kernel") openLayerOf(sel.k);
  if (sel.k >= 0 && sel.view === "op") graph().nodes.forEach((n, i) => n.home === sel.k && openLayerOf(i));
  renderDrawing();
  const d = drawn;
  if (!d.zoom || sel.k < 0) return;
  const el = document.querySelector(`#kernels [data-k="${sel.k}"]`);
  if (el) el.scrollIntoView({ block: "nearest" });
  const g = graph();
  const i = sel.view === "kernel" ? itemOf(sel.k) : d.keys.findIndex((n) => typeof n === "number" && g.nodes[n].home === sel.k);
  if (i >= 0) d.zoom.focus(d.box.x[i], d.box.y[i]);
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

// The kernel list folds into groups: kernels that compute the same thing (the same kind,
// loop shape and fused ops: one per layer, or per parameter in an optimizer step), or of
// the same kind. `opened` holds the groups shown unfolded; selecting a kernel unfolds its
// group, and a new search unfolds the groups with a match. A group of one is a plain row.
const GROUPS = {
  pattern: (k) => `${k.kind}|${k.loop}|${k.summary}`,
  kind: (k) => k.kind,
  none: null,
};
const fold = { opened: new Set(), k: null, q: "", by: "" };

function kernelGroups(g, order, by) {
  const keyOf = GROUPS[by];
  const groups = new Map();
  for (const i of order) {
    const key = keyOf ? keyOf(g.kernels[i]) : `#${i}`;
    if (!groups.has(key)) groups.set(key, { key, ks: [], seconds: 0 });
    const grp = groups.get(key);
    grp.ks.push(i);
    grp.seconds += (g.kernels[i].stats || {}).seconds || 0;
  }
  return [...groups.values()];
}

function kernelRow(g, i) {
  const k = g.kernels[i];
  return h("div", { class: "krow" + (i === sel.k ? " sel" : ""), "data-k": i, title: k.module || "", onclick: () => selectKernel(i) },
    h("span", { class: "kname" }, k.name), h("span", { class: "kkind" }, k.kind), h("span", { class: "kloop" }, k.loop),
    h("span", { class: "ksum" }, k.summary), h("span", { class: "kstat" }, statsText(k)));
}

function renderKernelList() {
  const g = graph();
  const box = $("kernels");
  const q = $("search").value.trim().toLowerCase();
  const by = $("group-by").value;
  const slow = $("sort-time").checked;
  const secs = (i) => (g.kernels[i].stats || {}).seconds || 0;
  const order = g.kernels.map((_, i) => i).filter((i) => !q || matches(kernelText(g.kernels[i]), q));
  if (slow) order.sort((a, b) => secs(b) - secs(a));
  const groups = kernelGroups(g, order, by);
  if (slow) groups.sort((a, b) => b.seconds - a.seconds);
  const keyOf = GROUPS[by];
  if (fold.by !== by || fold.q !== q) {
    // a new grouping or search: unfold what matches the search, else only the selection
    fold.opened = new Set(q ? groups.map((grp) => grp.key) : []);
    Object.assign(fold, { by, q, k: null });
  }
  if (fold.k !== sel.k && sel.k >= 0 && keyOf) fold.opened.add(keyOf(g.kernels[sel.k]));
  fold.k = sel.k;
  box.textContent = "";
  for (const grp of groups) {
    if (grp.ks.length === 1) {
      box.append(kernelRow(g, grp.ks[0]));
      continue;
    }
    const k = g.kernels[grp.ks[0]];
    const total = grp.seconds ? `${(grp.seconds * 1e3).toFixed(3)} ms in all` : "";
    const all = q ? g.kernels.filter((kk) => keyOf(kk) === grp.key).length : grp.ks.length;
    const count = q ? `${grp.ks.length}/${all}` : `${grp.ks.length}`;
    const pattern = by === "pattern";
    const d = h("details", { class: "kgroup", "data-group": grp.key },
      h("summary", { class: "ghead" }, h("span", { class: "kname" }, `${count}\u00d7`), h("span", { class: "kkind" }, k.kind),
        h("span", { class: "kloop" }, pattern ? k.loop : ""), h("span", { class: "ksum" }, pattern ? k.summary : `${k.kind} kernels`),
        h("span", { class: "kstat" }, total)));
    d.open = fold.opened.has(grp.key);
    d.addEventListener("toggle", () => (d.open ? fold.opened.add(grp.key) : fold.opened.delete(grp.key)));
    // a folded group's rows are built when it is first unfolded
    const fill = () => { if (d.childElementCount === 1) for (const i of grp.ks) d.append(kernelRow(g, i)); };
    if (d.open) fill();
    else d.addEventListener("toggle", fill, { once: true });
    box.append(d);
  }
  const folded = groups.filter((grp) => grp.ks.length > 1).length;
  const grouped = folded ? ` in ${groups.length} groups` : "";
  $("kernel-count").textContent = (q ? `${order.length} of ${g.kernels.length} kernels` : `${g.kernels.length} kernels`) + grouped;
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
  return h("details", open ? { open: "" } : {}, h("summary", {}, title), ...body);
}

function renderDetails() {
  const box = $("details");
  box.textContent = "";
  const g = graph();
  const k = kernel();
  if (sel.node >= 0) {
    const n = g.nodes[sel.node];
    const links = h("div", { class: "links" }, h("b", {}, n.text));
    if (n.site || n.module) links.append(h("div", { class: "made" }, `made by ${n.site || "?"}${n.module ? `  in ${n.module}` : ""}`));
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
  const steps = pipe(k).steps;
  if (!steps.length) return;
  const bar = h("div", { class: "steps" });
  const cur = sel.step >= 0 ? sel.step : steps.length - 1;
  steps.forEach((s, i) => {
    const b = h("button", { class: (i === sel.step ? "on " : "") + (s.lines ? "changed" : "same"), "data-step": i,
      onclick: () => { sel.step = i; sel.line = -1; render(); } }, `${i}. ${s.pass}`);
    b.title = s.lines ? "changed the nest" : "no change";
    bar.append(b);
  });
  bar.append(h("button", { class: sel.step < 0 ? "on" : "", "data-step": -1, onclick: () => { sel.step = -1; render(); } }, "final"));
  const step = stepLines(k, cur);
  const prev = cur > 0 ? stepLines(k, cur - 1) : null;
  const diff = sel.step >= 0 && steps[cur].lines && prev;
  const shown = diff ? lineDiff(prev.lines, step.lines) : step.lines;
  let what = "the nest the target renders; click a pass to see what it changed";
  if (sel.step >= 0) what = !steps[cur].lines ? `${steps[cur].pass} left the nest unchanged` : prev ? `what ${steps[cur].pass} changed` : "as lowered";
  const nestCol = h("div", {}, h("div", { class: "note" }, what), codeBlock(shown, nestHighlight(step), selectNestLine, "nest"));
  const tabs = h("div", { class: "steps" });
  for (const t of DATA.targets) {
    if (!k.pipelines[t]) continue;
    tabs.append(h("button", { class: t === sel.target ? "on" : "", "data-target": t, onclick: () => { sel.target = t; sel.step = -1; sel.line = -1; render(); } }, t));
  }
  const src = pipe(k).source;
  const srcCol = h("div", {}, tabs, ...(pipe(k).on_host ? [h("div", { class: "note" }, pipe(k).on_host)] : []),
    src ? codeBlock(src, sourceHighlight(), selectSourceLine, "source") : h("div", { class: "note" }, pipe(k).declined || "no source for this target"));
  box.append(section(`loop nest after each pass, and the source it renders to`, true, bar, h("div", { class: "pair" }, nestCol, srcCol)));
  for (const code of box.querySelectorAll(".nest, .source")) {
    const first = code.querySelector(".hl");
    if (first) code.scrollTop = first.offsetTop - code.clientHeight / 3;
  }
}

function klink(k) {
  return h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); selectKernel(k); } }, graph().kernels[k].name);
}

// ---- start -----------------------------------------------------------------------------

function start() {
  $("title").textContent = DATA.title;
  for (const b of document.querySelectorAll("#views button")) b.onclick = () => { sel.view = b.dataset.view; renderDrawing(); focusNode(); };
  $("fit").onclick = () => drawn.zoom && drawn.zoom.fit(true);
  $("layers").onclick = () => {
    layers.on[sel.view] = !layers.on[sel.view];
    layers.open.clear(); // so pressed twice it closes every layer opened
    renderDrawing();
  };
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
  $("group-by").onchange = renderKernelList;
  $("sort-time").disabled = !DATA.graphs.some((g) => g.kernels.some((k) => k.stats));
  let big = 0;
  DATA.graphs.forEach((g, i) => { if (g.kernels.length > DATA.graphs[big].kernels.length) big = i; });
  sel.g = big;
  $("group-by").value = DATA.graphs.length && graph().kernels.length > 40 ? "pattern" : "none";
  if (DATA.graphs.length) selectGraph(big);
  document.body.dataset.ready = "1";
}

start();
