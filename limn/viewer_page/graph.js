// The drawing half of the stage viewer: a layered layout for a DAG, drawn as SVG.
//
// Written here rather than vendored: the graphs are DAGs already in topological order, so a
// layered (Sugiyama-style) layout needs three short steps -- layers by longest path, a few
// barycenter sweeps to untangle each layer's order, then x positions pulled toward the
// neighbours -- and stays near linear in the edges for the thousands of nodes of a
// training step. No dependency, nothing fetched, same picture on every browser.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";

// nodes: [{w, h}] in topological order; edges: [[src, dst]] with src < dst.
// Returns {x: [], y: [], width, height} (centres), layers top to bottom.
function layoutDag(nodes, edges, opts) {
  const n = nodes.length;
  const gapX = (opts && opts.gapX) || 16;
  const gapY = (opts && opts.gapY) || 46;
  const preds = Array.from({ length: n }, () => []);
  const succs = Array.from({ length: n }, () => []);
  for (const [a, b] of edges) {
    preds[b].push(a);
    succs[a].push(b);
  }
  // 1. layers: longest path from the sources; a source then sinks to just above its
  //    first user, so a parameter read late does not hang from the top by a long edge
  const layer = new Array(n).fill(0);
  for (let v = 0; v < n; v++) for (const u of preds[v]) layer[v] = Math.max(layer[v], layer[u] + 1);
  for (let v = n - 1; v >= 0; v--) {
    if (preds[v].length || !succs[v].length) continue;
    let lo = Infinity;
    for (const s of succs[v]) lo = Math.min(lo, layer[s]);
    layer[v] = Math.max(0, lo - 1);
  }
  const depth = n ? Math.max(...layer) + 1 : 0;
  const rows = Array.from({ length: depth }, () => []);
  for (let v = 0; v < n; v++) rows[layer[v]].push(v);
  // 2. order within each layer: barycenter sweeps, down then up
  const pos = new Array(n).fill(0);
  const setPos = (row) => row.forEach((v, i) => (pos[v] = i));
  rows.forEach(setPos);
  const sweep = (row, nbrs) => {
    const key = new Map();
    for (const v of row) {
      const ns = nbrs[v];
      key.set(v, ns.length ? ns.reduce((s, u) => s + pos[u], 0) / ns.length : pos[v]);
    }
    row.sort((a, b) => key.get(a) - key.get(b) || pos[a] - pos[b]);
    setPos(row);
  };
  for (let it = 0; it < 4; it++) {
    for (let l = 1; l < depth; l++) sweep(rows[l], preds);
    for (let l = depth - 2; l >= 0; l--) sweep(rows[l], succs);
  }
  // 3. x: pack each layer in order, pulled toward the mean x of the layer above
  const x = new Array(n).fill(0), y = new Array(n).fill(0);
  let top = 0, width = 0;
  for (let l = 0; l < depth; l++) {
    const row = rows[l];
    const rowH = Math.max(...row.map((v) => nodes[v].h));
    let right = -Infinity;
    for (const v of row) {
      const w = nodes[v].w;
      const above = preds[v].filter((u) => layer[u] < l);
      const want = above.length ? above.reduce((s, u) => s + x[u], 0) / above.length : 0;
      const left = right === -Infinity ? want - w / 2 : Math.max(right + gapX, want - w / 2);
      x[v] = left + w / 2;
      right = left + w;
      y[v] = top + rowH / 2;
    }
    top += rowH + gapY;
  }
  let minX = Infinity;
  for (let v = 0; v < n; v++) minX = Math.min(minX, x[v] - nodes[v].w / 2);
  for (let v = 0; v < n; v++) {
    x[v] -= minX - 10;
    width = Math.max(width, x[v] + nodes[v].w / 2 + 10);
  }
  return { x, y, width, height: top + 10, layer };
}

function svgEl(tag, attrs, parent) {
  const el = document.createElementNS(SVGNS, tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(el);
  return el;
}

// Draw a laid-out graph into `svg`. items: [{w, h, lines: [str], cls, title}].
// Returns the <g> of each item, indexed like items; onClick(i) on a click.
function drawDag(svg, items, edges, onClick) {
  svg.textContent = "";
  const box = layoutDag(items, edges);
  const view = svgEl("g", { class: "view" }, svg);
  const edgeLayer = svgEl("g", { class: "edges" }, view);
  const paths = [];
  for (const [a, b] of edges) {
    const x1 = box.x[a];
    const y1 = box.y[a] + items[a].h / 2;
    const x2 = box.x[b];
    const y2 = box.y[b] - items[b].h / 2;
    const my = (y1 + y2) / 2;
    paths.push(
      svgEl("path", { d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}` }, edgeLayer),
    );
  }
  const groups = items.map((it, i) => {
    const g = svgEl("g", {
      class: "node " + (it.cls || ""),
      transform: `translate(${box.x[i] - it.w / 2},${box.y[i] - it.h / 2})`,
      "data-i": i,
    }, view);
    svgEl("rect", { width: it.w, height: it.h, rx: 4 }, g);
    it.lines.forEach((line, j) => {
      const t = svgEl("text", { x: 6, y: 14 + j * 13, class: j ? "sub" : "" }, g);
      t.textContent = line;
    });
    if (it.title) svgEl("title", {}, g).textContent = it.title;
    g.addEventListener("click", (ev) => {
      ev.stopPropagation();
      onClick(i);
    });
    return g;
  });
  const zoom = panZoom(svg, view, box);
  return { groups, paths, box, zoom };
}

// The smallest zoom a view opens or centres at: 11-px text shrunk further stops being
// read, so a big graph opens on a legible part and the rest is a drag or a wheel away.
const LEGIBLE = 0.9;

// Drag to pan, wheel to zoom; `focus(x, y)` centres a point.
function panZoom(svg, view, box) {
  const st = { k: 1, tx: 0, ty: 0 };
  const apply = () => view.setAttribute("transform", `translate(${st.tx},${st.ty}) scale(${st.k})`);
  const fit = (whole) => {
    // the whole drawing ("fit"), or on first show its top at a size that can be read
    const r = svg.getBoundingClientRect();
    st.k = Math.min(1, r.width / box.width, whole ? r.height / box.height : Infinity) || 1;
    st.k = Math.max(st.k, whole ? 0.02 : LEGIBLE);
    st.tx = Math.max(4, (r.width - box.width * st.k) / 2);
    st.ty = 4;
    apply();
  };
  let drag = null;
  svg.onmousedown = (ev) => (drag = { x: ev.clientX - st.tx, y: ev.clientY - st.ty });
  svg.onmousemove = (ev) => {
    if (!drag) return;
    st.tx = ev.clientX - drag.x;
    st.ty = ev.clientY - drag.y;
    apply();
  };
  svg.onmouseup = svg.onmouseleave = () => (drag = null);
  svg.onwheel = (ev) => {
    ev.preventDefault();
    const r = svg.getBoundingClientRect();
    const mx = ev.clientX - r.left;
    const my = ev.clientY - r.top;
    const f = Math.exp(-ev.deltaY * 0.0015);
    st.tx = mx - (mx - st.tx) * f;
    st.ty = my - (my - st.ty) * f;
    st.k *= f;
    apply();
  };
  const focus = (x, y) => {
    const r = svg.getBoundingClientRect();
    st.k = Math.max(st.k, LEGIBLE);
    st.tx = r.width / 2 - x * st.k;
    st.ty = r.height / 2 - y * st.k;
    apply();
  };
  fit(false);
  return { fit, focus };
}

// The lines of `b` against `a`: [{text, kind: "same" | "add" | "del", at}] where `at` is
// the line's index in b (or -1 for a deleted line). A longest-common-subsequence diff.
function lineDiff(a, b) {
  const n = a.length, m = b.length;
  if (n * m > 4e6) return b.map((text, at) => ({ text, kind: "same", at }));
  const dp = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      out.push({ text: b[j], kind: "same", at: j });
      i++;
      j++;
    } else if (j < m && (i === n || dp[i][j + 1] >= dp[i + 1][j])) {
      out.push({ text: b[j], kind: "add", at: j });
      j++;
    } else {
      out.push({ text: a[i], kind: "del", at: -1 });
      i++;
    }
  }
  return out;
}
