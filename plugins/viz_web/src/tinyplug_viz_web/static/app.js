// tinyplug VIZ: the page. State lives in the URL hash (#ctx=..&step=..&match=..&view=..&node=..), so a reload or a
// shared link reopens the same view. Graphs arrive as an input graph plus one delta per match; layout runs in a worker.
"use strict";
const $ = (sel) => document.querySelector(sel);
const esc = HL.escape;
const state = {ctx: null, step: null, match: 0, view: "graph", node: null};
let TRACE = null;                          // /api/trace
const expanded = new Set();                // contexts open in the sidebar
const stepCache = new Map();               // "ctx:step" -> step graph data
let current = null;                        // the step on screen: {key, data, sets: []}
let layoutSeq = 0;
// the layout worker starts with the first graph (starting a worker costs more than the home view itself)
let layoutWorker = null;
const pendingLayouts = new Map();
function worker() {
  if (!layoutWorker) {
    layoutWorker = new Worker("/static/layout_worker.js");
    layoutWorker.onmessage = (e) => { const cb = pendingLayouts.get(e.data.id); pendingLayouts.delete(e.data.id); if (cb) cb(e.data); };
  }
  return layoutWorker;
}

// ---------------------------------------------------------------------------------------------------------------- utils
async function api(path) {
  const res = await fetch(path);
  let body;
  try { body = await res.json(); } catch { body = {error: `${res.status} ${res.statusText}`}; }
  if (!res.ok) throw new Error(body.error || `${res.status}`);
  return body;
}
function showError(msg) {
  const b = $("#error-banner"); b.textContent = msg; b.hidden = false;
  clearTimeout(showError.t); showError.t = setTimeout(() => b.hidden = true, 8000);
}
function fmtTime(ns) {
  if (ns == null) return "";
  if (ns < 1e3) return `${ns.toFixed(0)} ns`;
  if (ns < 1e6) return `${(ns / 1e3).toFixed(2)} us`;
  if (ns < 1e9) return `${(ns / 1e6).toFixed(2)} ms`;
  return `${(ns / 1e9).toFixed(3)} s`;
}
function fmtBytes(b) {
  if (b < 1024) return `${b} B`;
  if (b < 1 << 20) return `${(b / 1024).toFixed(1)} KB`;
  if (b < 1 << 30) return `${(b / (1 << 20)).toFixed(1)} MB`;
  return `${(b / (1 << 30)).toFixed(2)} GB`;
}
// a CSS class from a kind name in the trace: only known kinds, anything else is "other"
const kindClass = (k) => ["kernel", "schedule", "other", "pass", "pattern", "node"].includes(k) ? k : "other";
const shortPath = (p) => (p || "").split("/").slice(-2).join("/");

// ----------------------------------------------------------------------------------------------------- URL state
function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  const int = (k) => p.has(k) && p.get(k) !== "" && !isNaN(+p.get(k)) ? +p.get(k) : null;
  return {ctx: int("ctx"), step: int("step"), match: int("match") ?? 0, view: p.get("view") || "graph", node: int("node")};
}
function writeHash(s, replace = false) {
  const p = new URLSearchParams();
  if (s.view && s.view !== "graph") p.set("view", s.view);
  if (s.ctx != null) p.set("ctx", s.ctx);
  if (s.step != null) p.set("step", s.step);
  if (s.match) p.set("match", s.match);
  if (s.node != null) p.set("node", s.node);
  const h = "#" + p.toString();
  if (h === location.hash) return false;
  if (replace) history.replaceState(null, "", h); else history.pushState(null, "", h);
  return true;
}
function go(changes, replace = false) {
  const next = {...state, ...changes};
  writeHash(next, replace);
  apply(next);
}
// back/forward and edited links: hashchange covers both (history.pushState itself fires nothing)
window.addEventListener("hashchange", () => { const s = readHash(); if (JSON.stringify(s) !== JSON.stringify(lastApplied)) apply(s); });
let lastApplied = null;

// ------------------------------------------------------------------------------------------------------- sidebar
function renderSidebar() {
  const list = $("#ctx-list");
  const parts = [];
  for (const c of TRACE.contexts) {
    const nm = c.steps.reduce((a, s) => a + s.matches, 0);
    const open = expanded.has(c.id);
    const sel = state.ctx === c.id && (!open || state.step == null || state.view !== "graph") && !NAV_VIEWS.includes(state.view);
    parts.push(`<div class="ctx" data-ctx="${+c.id}"><div class="entry ctx-head ${kindClass(c.kind)}${sel ? " selected" : ""}" data-ctx="${c.id}" title="${esc(c.loc || "")}">` +
      `<span class="tw">${c.steps.length ? (open ? "▾" : "▸") : ""}</span><span class="name">${esc(c.display)}</span>` +
      `<span class="count">${c.steps.length ? `(${c.steps.length})` : ""}${nm ? ` · ${nm}` : ""}</span></div>`);
    if (open) {
      parts.push(`<div class="steps">`);
      const stepHtml = (s) => {
        const ssel = state.ctx === c.id && state.step === s.i && (state.view === "graph");
        return `<div class="entry step${s.matches ? "" : " empty"}${ssel ? " selected" : ""}" data-ctx="${c.id}" data-step="${s.i}" title="${esc(s.caller)}">` +
          `${esc(s.title)}${s.matches ? ` <span class="n">- ${s.matches}</span>` : ""}</div>`;
      };
      for (const g of stepGroups(c)) {
        if (g.steps.length < GROUP_MIN) { for (const s of g.steps) parts.push(stepHtml(s)); continue; }
        const key = `${c.id}:${g.steps[0].i}`, inside = state.ctx === c.id && g.steps.some(s => s.i === state.step);
        const gopen = openGroups.has(key) || (inside && state.view === "graph" && !closedGroups.has(key));
        const nm = g.steps.reduce((a, s) => a + s.matches, 0);
        parts.push(`<div class="entry group${inside && !gopen ? " selected" : ""}" data-group="${key}" data-ctx="${c.id}" title="${g.steps.length} consecutive steps of ${esc(g.name)}">` +
          `<span class="tw">${gopen ? "▾" : "▸"}</span>${esc(g.name)} <span class="count">${g.steps.length} steps${nm ? ` · ${nm}` : ""}</span></div>`);
        if (gopen) parts.push(`<div class="group-steps">${g.steps.map(stepHtml).join("")}</div>`);
      }
      parts.push(`</div>`);
    }
    parts.push(`</div>`);
  }
  list.innerHTML = parts.join("");
  $("#nav-profiler").classList.toggle("selected", state.view === "profiler");
  $("#nav-kernels").classList.toggle("selected", state.view === "kernels" && state.ctx == null);
  $("#nav-hot").classList.toggle("selected", state.view === "hot");
  const sel = list.querySelector(".selected");
  if (sel) sel.scrollIntoView({block: "nearest"});
}
// consecutive steps of one pass (or of one name, outside passes) are grouped when there are GROUP_MIN or more
const GROUP_MIN = 3, openGroups = new Set(), closedGroups = new Set();
function stepGroups(c) {
  const out = [];
  for (const s of c.steps) {
    const name = s.pass || s.title, last = out[out.length - 1];
    if (last && last.name === name) last.steps.push(s); else out.push({name, steps: [s]});
  }
  return out;
}
$("#ctx-list").addEventListener("click", (e) => {
  const el = e.target.closest(".entry");
  if (!el) return;
  if (el.dataset.group) {
    const key = el.dataset.group, isOpen = el.querySelector(".tw").textContent === "▾";
    if (isOpen) { openGroups.delete(key); closedGroups.add(key); } else { openGroups.add(key); closedGroups.delete(key); }
    renderSidebar(); return;
  }
  const ctx = +el.dataset.ctx;
  if (el.dataset.step !== undefined) { go({ctx, step: +el.dataset.step, match: 0, node: null, view: "graph"}); return; }
  const c = TRACE.contexts[ctx];
  if (expanded.has(ctx) && state.ctx === ctx) expanded.delete(ctx); else expanded.add(ctx);
  // clicking a schedule opens its kernel table (as DEBUG=2 prints it); its steps are listed below it
  if (c.kernels.length) { go({ctx, step: null, match: 0, node: null, view: "kernels"}); return; }
  // clicking a kernel opens its first step with matches (or its first step)
  const first = c.steps.findIndex(s => s.matches > 0);
  go({ctx, step: c.steps.length ? (first >= 0 ? first : 0) : null, match: 0, node: null, view: c.steps.length ? "graph" : (c.has_code ? "code" : "graph")});
});
document.querySelectorAll(".nav-entry").forEach(el => el.addEventListener("click", () =>
  go(el.dataset.view === "kernels" ? {view: "kernels", ctx: null, step: null, match: 0, node: null} : {view: el.dataset.view, node: null})));
const NAV_VIEWS = ["profiler", "hot"];   // views of the whole trace (the kernels view is one when no schedule is picked)

// ------------------------------------------------------------------------------------------------------- views
function showView(view) {
  for (const v of ["graph", "code", "uops", "profiler", "hot", "kernels"]) $(`#${v}-view`).hidden = v !== view;
  $("#graph-tools").hidden = view === "profiler" || view === "hot" || view === "kernels";
  $("#profile-tools").hidden = view !== "profiler";
  $("#btn-graph").classList.toggle("on", view === "graph");
  $("#btn-code").classList.toggle("on", view === "code");
  $("#btn-uops").classList.toggle("on", view === "uops");
  const c = state.ctx != null ? TRACE.contexts[state.ctx] : null;
  $("#btn-code").disabled = $("#btn-uops").disabled = !(c && c.has_code);
  $("#btn-graph").disabled = !(c && c.steps.length);
}
$("#btn-graph").onclick = () => go({view: "graph", step: state.step ?? 0});
$("#btn-code").onclick = () => go({view: "code"});
$("#btn-uops").onclick = () => go({view: "uops"});
$("#btn-fit").onclick = () => fitGraph();
$("#btn-fold").onclick = () => { foldConsts = !foldConsts; $("#btn-fold").classList.toggle("on", !foldConsts); if (state.view === "graph") showGraph(); };
$("#btn-prof-fit").onclick = () => { if (prof) { prof.t0 = 0; prof.t1 = prof.data.duration_ns * 1.02 || 1; drawProfile(); } };

async function apply(next) {
  Object.assign(state, next);
  lastApplied = {ctx: state.ctx, step: state.step, match: state.match, view: state.view, node: state.node};
  if (state.ctx != null && (state.ctx < 0 || state.ctx >= TRACE.contexts.length)) { showError(`no context ${state.ctx} in this trace`); state.ctx = null; }
  renderSidebar();
  showView(state.view);
  updateCrumb();
  document.body.dataset.ready = "";
  try {
    if (state.view === "profiler") await showProfiler();
    else if (state.view === "hot") await showHot();
    else if (state.view === "kernels") await showKernels();
    else if (state.view === "code") await showCode();
    else if (state.view === "uops") await showUops();
    else await showGraph();
  } catch (err) { showError(err.message); $("#graph-status").textContent = err.message; document.body.dataset.ready = "error"; }
}
function updateCrumb() {
  const c = state.ctx != null ? TRACE.contexts[state.ctx] : null;
  let h = "";
  if (state.view === "profiler") h = "<b>Profiler</b>";
  else if (state.view === "hot") h = "<b>Hot rules</b>: patterns by total match time";
  else if (state.view === "kernels") h = c ? `<b>${esc(c.display)}</b> / kernels` : "<b>Kernels</b>: every kernel of the trace, all runs";
  else if (c) {
    h = `<b>${esc(c.display)}</b>`;
    const s = state.step != null ? c.steps[state.step] : null;
    if (s && state.view === "graph") h += ` / ${esc(s.title)}` + (s.matches ? ` / match ${state.match} of ${s.matches}` : "");
    if (state.view === "code" || state.view === "uops") h += ` / ${state.view === "code" ? "code" : "UOp list"}`;
  }
  $("#crumb").innerHTML = h;
  const q = `ctx=${state.ctx}&step=${state.step}&match=${state.match}`;
  $("#export-json").href = `/api/export/graph.json?${q}`;
  $("#export-dot").href = `/api/export/graph.dot?${q}`;
}

// ------------------------------------------------------------------------------------------------- graph view
const OP_COLORS = Object.create(null);   // looked up by op names that come from the trace
(() => {
  const groups = {
    "#ffffc0": "ADD MUL SUB FDIV IDIV MOD MAX POW CMPLT CMPNE CMPEQ AND OR XOR SHL SHR THREEFRY WHERE MULACC EXP2 LOG2 SIN SQRT RECIPROCAL NEG TRUNC",
    "#c8f9d4": "RESHAPE PERMUTE EXPAND PAD SHRINK FLIP", "#ffc0c0": "LOAD", "#87ceeb": "STORE", "#c4a0f0": "RANGE END SPECIAL",
    "#ff7070": "REDUCE REDUCE_AXIS", "#a0c0ff": "BUFFER DEFINE_GLOBAL DEFINE_LOCAL DEFINE_REG DEFINE_VAR BIND",
    "#e0e0e0": "CONST VCONST", "#ffb060": "CONTIGUOUS COPY ASSIGN AFTER KERNEL", "#b0e0e0": "INDEX", "#d0b090": "CAST BITCAST",
    "#ffffff": "SINK", "#c0d8a0": "DEVICE UNIQUE", "#f0c0f0": "VECTORIZE GEP",
  };
  for (const [color, ops] of Object.entries(groups)) for (const op of ops.split(" ")) OP_COLORS[op] = color;
})();
const CHAR_W = 6.7, LINE_H = 13;
// a schedule's tensor graph is coloured by the kernel that computes each node (split: /api/step's "split")
let split = null;
const KERNEL_COLORS = ["#8ecae6", "#ffb703", "#90be6d", "#f28482", "#cdb4db", "#f6bd60", "#84a59d", "#ffafcc",
                       "#a2d2ff", "#e9c46a", "#b5e48c", "#f4a261", "#bde0fe", "#d4a373", "#caffbf", "#ffc6ff"];
const kernelColor = (k) => KERNEL_COLORS[k % KERNEL_COLORS.length];
function nodeFill(id, n) {
  if (!split) return OP_COLORS[n[0]] || "#f0f0f0";
  const g = split.groups[id];
  return g === undefined ? "#e4e4e4" : g === split.shared ? "#ffffff" : kernelColor(g);
}
// `<Ops.ADD: 54>` (an enum's repr, in traces written before the recorder cleaned it) reads as `Ops.ADD`
const cleanArg = (a) => a && a.includes("<") ? a.replace(/<([A-Za-z_][\w.]*): [^<>]*>/g, "$1") : a;
function labelLines(n) {
  const [op, dtype, rawArg, , folded] = n, arg = cleanArg(rawArg);
  const lines = [op, dtype];
  if (arg) for (let i = 0; i < arg.length && lines.length < 5; i += 36) lines.push(arg.slice(i, i + 36) + (i + 36 < arg.length && lines.length === 4 ? "…" : ""));
  if (folded) lines.push(...folded);
  return lines;
}
// Constants, devices, unique ids and loop ranges over constant bounds are folded into the label of the node that uses
// them (the Consts button shows them as nodes again): one CONST or RANGE used by a hundred index computations would
// otherwise pull a hundred edges across the graph.
const FOLD_OPS = new Set(["CONST", "VCONST", "DEVICE", "UNIQUE", "LUNIQUE", "RANGE"]);
let foldConsts = true;
function foldGraph(graph) {
  const used = new Set();
  for (const n of graph.values()) for (const s of n[3]) used.add(s);
  const memo = new Map();
  const can = (id) => {
    if (memo.has(id)) return memo.get(id);
    memo.set(id, false);
    const n = graph.get(id);
    const ok = !!n && FOLD_OPS.has(n[0]) && used.has(id) && n[3].every(s => !graph.has(s) || can(s));
    memo.set(id, ok);
    return ok;
  };
  const shown = new Map(), into = new Map();
  for (const [id, n] of graph) {
    if (can(id)) continue;
    const f = n[3].filter(s => graph.has(s) && can(s));
    if (!f.length) { shown.set(id, n); continue; }
    const lines = f.slice(0, 3).map(s => {
      const c = graph.get(s), inner = c[3].filter(x => graph.has(x)).map(x => cleanArg(graph.get(x)[2]) || graph.get(x)[0]);
      return `◂ ${c[0]} ${cleanArg(c[2]) || c[1]}${inner.length ? ` ‹${inner.join(", ")}›` : ""}`.slice(0, 44);
    });
    if (f.length > 3) lines.push(`◂ +${f.length - 3} more`);
    for (const s of f) into.has(s) || into.set(s, id);
    shown.set(id, [n[0], n[1], n[2], n[3], lines]);
  }
  return {shown, into};
}
// graphs[k]: Map(display id -> [op, dtype, arg, src ids]) after k matches, built lazily from the deltas
function graphAt(st, k) {
  const g = st.graphs;
  if (!g.length) g.push(new Map(Object.entries(st.data.nodes).map(([id, rec]) => [+id, rec])));
  for (let i = g.length; i <= k; i++) {
    const m = new Map(g[i - 1]), d = st.deltas[i - 1];
    for (const r of d.removed) m.delete(r);
    for (const [id, rec] of Object.entries(d.added)) m.set(+id, rec);
    for (const [id, src] of Object.entries(d.changed)) { const old = m.get(+id); if (old) m.set(+id, [old[0], old[1], old[2], src]); }
    g.push(m);
  }
  return g[k];
}
async function loadStep(ctx, step, k = 0) {
  const key = `${ctx}:${step}`;
  if (!stepCache.has(key)) {
    const data = await api(`/api/step?ctx=${ctx}&step=${step}`);
    stepCache.set(key, {key, data, deltas: data.deltas, graphs: [], layouts: new Map()});
  }
  const st = stepCache.get(key);
  while (st.deltas.length < Math.min(k, st.data.total)) {   // later matches arrive in chunks, as one steps on
    const more = await api(`/api/step?ctx=${ctx}&step=${step}&from=${st.deltas.length}`);
    st.deltas.push(...more.deltas);
  }
  return st;
}
async function showGraph() {
  $("#welcome").hidden = state.ctx != null && state.step != null;
  if (state.ctx == null || state.step == null) {
    $("#viewport").innerHTML = ""; graphGeom = null; renderDetails(null); document.body.dataset.ready = "home"; return;
  }
  const t0 = performance.now();
  const want = `${state.ctx}:${state.step}:${state.match}`;
  $("#graph-status").textContent = "loading…";
  const st = await loadStep(state.ctx, state.step, state.match);
  const tFetch = performance.now() - t0;
  if (`${state.ctx}:${state.step}:${state.match}` !== want) return;
  const nm = st.data.total;
  if (state.match > nm || state.match < 0) { state.match = Math.max(0, Math.min(nm, state.match)); writeHash(state, true); }
  renderDetails(st);
  const k = state.match;
  const full = graphAt(st, k);
  const {shown: graph, into} = foldConsts ? foldGraph(full) : {shown: full, into: new Map()};
  const changed = new Set();
  if (k > 0) {
    const d = st.deltas[k - 1];
    for (const id of Object.keys(d.added)) changed.add(into.get(+id) ?? +id);
    for (const id of Object.keys(d.changed)) changed.add(into.get(+id) ?? +id);
    if (d.after != null && full.has(d.after)) changed.add(into.get(d.after) ?? d.after);   // the replacement itself
  }
  $("#graph-status").textContent = `laying out ${graph.size} nodes…`;
  const layKey = `${k}:${foldConsts}`;
  let lay = st.layouts.get(layKey);
  if (!lay) {
    const nodes = [], edges = [];
    for (const [id, n] of graph) {
      const lines = labelLines(n);
      nodes.push({id, w: Math.max(...lines.map(l => l.length)) * CHAR_W + 14, h: lines.length * LINE_H + 8});
      for (const s of n[3]) if (graph.has(s)) edges.push([s, id]);
    }
    lay = await new Promise(res => { const id = ++layoutSeq; pendingLayouts.set(id, res); worker().postMessage({id, nodes, edges, aspect: graphSize().height / Math.max(1, graphSize().width)}); });
    st.layouts.set(layKey, lay);
  }
  if (`${state.ctx}:${state.step}:${state.match}` !== want) return;
  const tLayout = performance.now() - t0;
  graphSize();
  split = st.data.split || null;
  drawGraph(graph, lay, changed);
  graphGeom.full = full; graphGeom.into = into;
  $("#graph").dataset.folded = full.size - graph.size;
  const tDraw = performance.now() - t0;
  const pick = state.node != null ? (graph.has(state.node) ? state.node : into.get(state.node)) : null;
  if (pick != null) selectNode(pick, true);
  else fitGraph();
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));   // count the paint in "shown in"
  const ms = performance.now() - t0;
  $("#graph-status").textContent = `${graph.size} nodes · ${nm} matches · layout ${lay.ms.toFixed(0)} ms · shown in ${ms.toFixed(0)} ms`;
  window.__vizLast = {nodes: graph.size, ms, layout_ms: lay.ms};
  document.body.dataset.ready = `graph:${want}`;
}
let graphGeom = null;
const CANVAS_OVER = 1500;   // graphs bigger than this are drawn on a canvas (SVG paints too slowly)
function drawGraph(graph, lay, changed) {
  const size = {};
  for (const [id, n] of graph) {
    const lines = labelLines(n);
    size[id] = [Math.max(...lines.map(l => l.length)) * CHAR_W + 14, lines.length * LINE_H + 8];
  }
  let box = null;
  if (changed.size) {
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const id of changed) if (lay.pos[id]) {
      const [x, y] = lay.pos[id], [w, h] = size[id];
      x0 = Math.min(x0, x); y0 = Math.min(y0, y); x1 = Math.max(x1, x + w); y1 = Math.max(y1, y + h);
    }
    if (isFinite(x0)) box = [x0 - 8, y0 - 8, x1 - x0 + 16, y1 - y0 + 16];
  }
  const useCanvas = graph.size > CANVAS_OVER;
  graphGeom = {pos: lay.pos, size, width: lay.width, height: lay.height, changed, graph, canvas: useCanvas, box, sel: null};
  $("#graph").dataset.nodes = graph.size;
  $("#graph").dataset.renderer = useCanvas ? "canvas" : "svg";
  $("#graph-canvas").hidden = !useCanvas;
  if (useCanvas) { $("#viewport").innerHTML = ""; return; }
  const parts = [], edgeParts = [];
  for (const [id, n] of graph) {
    const lines = labelLines(n), [w, h] = size[id], [x, y] = lay.pos[id];
    let text = "";
    lines.forEach((l, i) => text += `<tspan x="7" y="${(i + 1) * LINE_H}">${esc(l)}</tspan>`);
    parts.push(`<g class="node${changed.has(id) ? " changed" : ""}" data-id="${id}" transform="translate(${x.toFixed(1)},${y.toFixed(1)})"><rect width="${w.toFixed(1)}" height="${h}" rx="4" fill="${nodeFill(id, n)}"/><text>${text}</text></g>`);
  }
  for (const [id, n] of graph) for (const e of edgesInto(id, n, graph)) edgeParts.push(`<path class="edge" data-from="${e.s}" data-to="${id}" marker-end="url(#arrow)" d="${e.d}"/>`);
  $("#viewport").innerHTML = (box ? `<rect class="change-box" x="${box[0]}" y="${box[1]}" width="${box[2]}" height="${box[3]}" rx="6"/>` : "") +
    `<g class="edges">${edgeParts.join("")}</g><g class="nodes">${parts.join("")}</g>`;
}
function edgesInto(id, n, graph) {
  const {pos, size} = graphGeom, [x, y] = pos[id], h = size[id][1], srcs = n[3], out = [];
  srcs.forEach((s, port) => {
    if (!graph.has(s)) return;
    const [sx, sy] = pos[s], [sw, sh] = size[s];
    const x1 = sx + sw, y1 = sy + sh / 2, x2 = x, y2 = y + h / 2 + (srcs.length > 1 ? (port - (srcs.length - 1) / 2) * Math.min(8, h / (srcs.length + 1)) : 0);
    const dx = Math.max(20, (x2 - x1) / 2);
    out.push({s, x1, y1, x2, y2, dx, d: `M${x1.toFixed(1)},${y1.toFixed(1)} C${(x1 + dx).toFixed(1)},${y1.toFixed(1)} ${(x2 - dx).toFixed(1)},${y2.toFixed(1)} ${x2.toFixed(1)},${y2.toFixed(1)}`});
  });
  return out;
}
function drawCanvas() {
  const g = graphGeom;
  if (!g || !g.canvas) return;
  const cv = $("#graph-canvas"), r = graphSize(), dpr = window.devicePixelRatio || 1;
  if (cv.width !== Math.round(r.width * dpr)) { cv.width = Math.round(r.width * dpr); cv.height = Math.round(r.height * dpr); }
  const c = cv.getContext("2d");
  c.setTransform(1, 0, 0, 1, 0, 0); c.clearRect(0, 0, cv.width, cv.height);
  c.setTransform(dpr * view.k, 0, 0, dpr * view.k, dpr * view.x, dpr * view.y);
  const vx0 = -view.x / view.k, vy0 = -view.y / view.k, vx1 = vx0 + r.width / view.k, vy1 = vy0 + r.height / view.k;
  const visible = (id) => { const p = g.pos[id]; if (!p) return false; const [x, y] = p, [w, h] = g.size[id]; return x + w >= vx0 && x <= vx1 && y + h >= vy0 && y <= vy1; };
  if (g.box) { c.fillStyle = "#ff9e6418"; c.strokeStyle = "#ff9e64"; c.lineWidth = 1 / view.k; c.fillRect(...g.box); c.strokeRect(...g.box); }
  c.lineWidth = 1.2 / Math.max(view.k, 0.5);
  const sel = g.sel;
  for (const hot of [false, true]) {
    c.strokeStyle = hot ? "#7aa2f7" : "#4b5178";
    c.beginPath();
    for (const [id, n] of g.graph) {
      const isHot = sel != null && (id === sel || n[3].includes(sel));
      if (isHot !== hot) continue;
      if (!visible(id) && !n[3].some(visible)) continue;
      for (const e of edgesInto(id, n, g.graph)) {
        if (hot && id !== sel && e.s !== sel) continue;
        c.moveTo(e.x1, e.y1); c.bezierCurveTo(e.x1 + e.dx, e.y1, e.x2 - e.dx, e.y2, e.x2, e.y2);
      }
    }
    c.stroke();
  }
  const showText = view.k * LINE_H >= 5;
  c.font = "11px monospace"; c.textBaseline = "alphabetic";
  const parents = sel != null ? new Set(g.graph.get(sel)[3]) : new Set();
  for (const [id, n] of g.graph) {
    if (!visible(id)) continue;
    const [x, y] = g.pos[id], [w, h] = g.size[id];
    c.fillStyle = nodeFill(id, n); c.fillRect(x, y, w, h);
    const ring = id === sel ? "#ff2d95" : parents.has(id) ? "#9ece6a" : sel != null && n[3].includes(sel) ? "#f7768e" : g.changed.has(id) ? "#ff9e64" : null;
    if (ring) { c.strokeStyle = ring; c.lineWidth = 3 / Math.max(view.k, 0.3); c.strokeRect(x, y, w, h); }
    if (showText) { c.fillStyle = "#111"; labelLines(n).forEach((l, i) => c.fillText(l, x + 7, y + (i + 1) * LINE_H)); }
  }
}
function nodeAt(px, py) {
  const g = graphGeom, x = (px - view.x) / view.k, y = (py - view.y) / view.k;
  for (const [id] of g.graph) { const [nx, ny] = g.pos[id], [w, h] = g.size[id]; if (x >= nx && x <= nx + w && y >= ny && y <= ny + h) return id; }
  return null;
}
// zoom and pan with the mouse
const view = {x: 0, y: 0, k: 1};
let canvasFrame = 0;
function applyView() {
  $("#viewport").setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
  if (graphGeom && graphGeom.canvas && !canvasFrame) canvasFrame = requestAnimationFrame(() => { canvasFrame = 0; drawCanvas(); });
}
let svgSize = null;
function graphSize() { return svgSize || (svgSize = $("#graph-view").getBoundingClientRect()); }
window.addEventListener("resize", () => { svgSize = null; });
function fitGraph() {
  if (!graphGeom) return;
  const r = graphSize();
  const pad = 30;
  let {width, height} = graphGeom;
  let x0 = 0, y0 = 0;
  // with a change on screen, frame the change (and its surroundings) rather than the whole graph when it is huge
  view.k = Math.min(2, (r.width - 2 * pad) / Math.max(1, width), (r.height - 2 * pad) / Math.max(1, height));
  if (view.k < 0.25 && graphGeom.changed.size) {
    const id = graphGeom.changed.values().next().value;
    if (graphGeom.pos[id]) { centreOn(id, 0.8); return; }
  }
  view.x = pad + (r.width - 2 * pad - width * view.k) / 2 - x0 * view.k;
  view.y = pad + (r.height - 2 * pad - height * view.k) / 2 - y0 * view.k;
  applyView();
}
function centreOn(id, k) {
  const r = graphSize();
  const [x, y] = graphGeom.pos[id], [w, h] = graphGeom.size[id];
  view.k = k ?? Math.max(view.k, 0.8);
  view.x = r.width / 2 - (x + w / 2) * view.k; view.y = r.height / 2 - (y + h / 2) * view.k;
  applyView();
}
(() => {
  const svg = $("#graph");
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
    const f = Math.exp(-e.deltaY * (e.deltaMode ? 0.05 : 0.0015));
    const k = Math.min(8, Math.max(0.02, view.k * f));
    view.x = mx - (mx - view.x) * (k / view.k); view.y = my - (my - view.y) * (k / view.k); view.k = k;
    applyView();
  }, {passive: false});
  let drag = null;
  svg.addEventListener("mousedown", (e) => { drag = {x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, moved: false}; svg.classList.add("dragging"); });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    view.x = drag.vx + dx; view.y = drag.vy + dy; applyView();
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const moved = drag.moved; drag = null; svg.classList.remove("dragging");
    if (moved) return;
    let g = e.target.closest && e.target.closest("g.node");
    let hitId = g ? +g.dataset.id : null;
    if (graphGeom && graphGeom.canvas && e.target.closest && e.target.closest("#graph")) {
      const r = graphSize(); hitId = nodeAt(e.clientX - r.left, e.clientY - r.top); g = hitId != null;
    }
    if (g) { go({node: hitId}, true); selectNode(hitId, false); }
    else if (e.target.closest && e.target.closest("#graph")) { clearSelection(); if (state.node != null) go({node: null}, true); }
  });
})();
function clearSelection() {
  if (graphGeom && graphGeom.canvas) { graphGeom.sel = null; drawCanvas(); }
  document.querySelectorAll("g.node.selected, g.node.parent, g.node.child").forEach(g => g.classList.remove("selected", "parent", "child"));
  document.querySelectorAll("path.edge.hot").forEach(p => p.classList.remove("hot"));
  $("#node-info").innerHTML = "";
}
function selectNode(id, centre) {
  if (!graphGeom || !graphGeom.graph.has(id)) return;
  clearSelection();
  const graph = graphGeom.graph, n = graph.get(id);
  if (graphGeom.canvas) { graphGeom.sel = id; drawCanvas(); }
  const g = document.querySelector(`g.node[data-id="${id}"]`);
  if (g) g.classList.add("selected");
  for (const s of n[3]) document.querySelector(`g.node[data-id="${s}"]`)?.classList.add("parent");
  const users = [...graph.keys()].filter(u => graph.get(u)[3].includes(id));
  for (const u of users) document.querySelector(`g.node[data-id="${u}"]`)?.classList.add("child");
  document.querySelectorAll(`path.edge[data-from="${id}"], path.edge[data-to="${id}"]`).forEach(p => p.classList.add("hot"));
  const full = graphGeom.full || graph;
  const ref = (x) => graph.has(x) ? `<a href="#" class="noderef" data-node="${x}">#${x} ${esc(graph.get(x)[0])}</a>` :
    `<span class="folded">#${x} ${esc((full.get(x) || ["?"])[0])} ${esc(cleanArg((full.get(x) || [])[2] || ""))}</span>`;
  $("#node-info").innerHTML = `<h3>Node #${id}</h3><div class="kv">op <b>${esc(n[0])}</b></div><div class="kv">dtype <b>${esc(n[1])}</b></div>` +
    (n[2] ? `<div class="kv">arg <b class="mono">${esc(cleanArg(n[2]))}</b></div>` : "") +
    `<div class="kv">sources: ${n[3].map(ref).join(", ") || "none"}</div><div class="kv">used by: ${users.map(ref).join(", ") || "none"}</div>`;
  if (split && split.groups[id] !== undefined) {
    const g = split.groups[id];
    $("#node-info").innerHTML += g === split.shared ? `<div class="kv">kernel: <b>several</b> (each recomputes it)</div>` :
      `<div class="kv">kernel: <b>${esc(split.kernels[g].name)}</b></div><div class="muted">${esc(split.kernels[g].rule)}: ${esc(split.kernels[g].detail)}</div>`;
  }
  if (centre) centreOn(id);
}
$("#node-info").addEventListener("click", (e) => {
  const a = e.target.closest(".noderef"); if (!a) return;
  e.preventDefault(); const id = +a.dataset.node; go({node: id}, true); selectNode(id, true);
});

// ------------------------------------------------------------------------------------------------ right sidebar
function renderDetails(st) {
  const c = state.ctx != null ? TRACE.contexts[state.ctx] : null;
  if (!c) { $("#details").innerHTML = `<h3>Trace</h3><div class="kv">${esc(TRACE.path)}</div><div class="kv">${TRACE.contexts.length} contexts · ${TRACE.nodes} nodes · ${TRACE.spans} profile spans</div>` + (TRACE.warnings.map(w => `<div class="d-del">${esc(w)}</div>`).join("")); $("#match-list").innerHTML = $("#match-info").innerHTML = ""; return; }
  let h = `<h3>${esc(c.display)}</h3><div class="kv">${esc(c.kind)}${c.device ? ` on <b>${esc(c.device)}</b>` : ""}${c.pid ? ` · pid ${c.pid}` : ""}</div>`;
  if (c.loc) h += `<div class="loc">${esc(c.loc)}</div>`;
  if (c.kernels.length) h += `<div class="kv"><a href="#view=kernels&ctx=${+c.id}" id="kernel-table-link">kernel table</a> · ${c.kernels.length} kernel${c.kernels.length > 1 ? "s" : ""}</div>`;
  if (st) {
    const d = st.data;
    h += `<h3>${esc(d.title)}</h3><div class="kv">${d.matches.length} matches · ${fmtTime(d.time_ns)}</div><div class="loc">${esc(d.caller)}</div>`;
    if (d.caller_src) h += `<pre class="src">${HL.highlight(d.caller_src, "c")}</pre>`;
    if (d.split) h += splitPanel(d.split);
    $("#match-list").innerHTML = d.total > 400 ? `<span class="muted">match ${state.match} of ${d.total} (← →)</span>` : d.matches.length ? [`<span class="chip${state.match === 0 ? " selected" : ""}" data-match="0">0</span>`,
      ...d.matches.map((m, i) => `<span class="chip${state.match === i + 1 ? " selected" : ""}" data-match="${i + 1}" title="${esc(m.short)} (${esc(m.owner)})">${i + 1}</span>`)].join("") : "";
    showMatch(st);
  } else { $("#match-list").innerHTML = ""; $("#match-info").innerHTML = ""; }
  $("#details").innerHTML = h;
  $("#details").querySelectorAll("[data-swatch]").forEach(el => el.style.background = kernelColor(+el.dataset.swatch));
  if (st && st.data.split) showWhy(st.data.split);
}
function splitPanel(sp) {
  const opts = sp.kernels.map(k => `<option value="${k.i}">${k.i}: ${esc(k.name)}</option>`).join("");
  const legend = sp.kernels.map(k => `<div class="kernel-row" data-kernel="${k.i}" title="${esc(k.detail)}"><span class="swatch" data-swatch="${k.i}"></span>` +
    `${k.i}: <b>${esc(k.name)}</b> <span class="rule">${esc(k.rule)}</span></div>`).join("");
  const bounds = sp.boundaries.map(b => `<div class="boundary" data-a="${b.a}" data-b="${b.b}">${esc(sp.kernels[b.a].name)} → ${esc(sp.kernels[b.b].name)}: <span class="rule">${esc(b.rule)}</span></div>`).join("");
  return `<h3>Kernels (colours in the graph)</h3><div id="kernel-legend">${legend}</div>` +
    `<h3>Why didn't these two fuse?</h3><div class="why-pick"><select id="why-a">${opts}</select> <select id="why-b">${opts}</select></div>` +
    `<div id="why-answer" class="why-answer"></div><h3>Kernel boundaries (${sp.boundaries.length})</h3><div id="boundaries">${bounds || '<span class="muted">none</span>'}</div>`;
}
let whyPair = null;
async function showWhy(sp, a, b) {
  const sa = $("#why-a"), sb = $("#why-b");
  if (!sa || !sb) return;
  if (a == null) {   // default: the first boundary, or the pair picked last time in this schedule
    const keep = whyPair && whyPair.ctx === state.ctx ? whyPair : null;
    const first = sp.boundaries[0] || {a: 0, b: Math.min(1, sp.kernels.length - 1)};
    a = keep ? keep.a : first.a; b = keep ? keep.b : first.b;
  }
  sa.value = a; sb.value = b;
  whyPair = {ctx: state.ctx, a, b};
  document.querySelectorAll("#boundaries .boundary").forEach(el => el.classList.toggle("selected", +el.dataset.a === a && +el.dataset.b === b));
  const want = `${state.ctx}:${a}:${b}`;
  const d = await api(`/api/why?ctx=${state.ctx}&a=${a}&b=${b}`);
  if (`${state.ctx}:${whyPair.a}:${whyPair.b}` !== want) return;
  const box = $("#why-answer");
  box.textContent = d.text;
  if (d.loc) { const loc = document.createElement("div"); loc.className = "loc"; loc.textContent = `rule: ${d.loc}`; box.appendChild(loc); }
  box.dataset.rule = d.rule;
}
$("#details").addEventListener("change", (e) => {
  if (!e.target.matches("#why-a, #why-b") || !split) return;
  showWhy(split, +$("#why-a").value, +$("#why-b").value);
});
$("#details").addEventListener("click", (e) => {
  const b = e.target.closest(".boundary");
  if (b && split) { showWhy(split, +b.dataset.a, +b.dataset.b); return; }
  const k = e.target.closest(".kernel-row");
  if (k && split && graphGeom) {   // select the kernel's realized node in the graph
    const node = split.kernels[+k.dataset.kernel].node;
    if (node != null && graphGeom.graph.has(node)) { go({node}, true); selectNode(node, true); }
  }
});
$("#match-list").addEventListener("click", (e) => { const c = e.target.closest(".chip"); if (c) go({match: +c.dataset.match, node: null}); });
async function showMatch(st) {
  const k = state.match, box = $("#match-info");
  if (!k) { box.innerHTML = st.data.matches.length ? `<div class="muted">the input graph; press → to step through the ${st.data.matches.length} matches</div>` : `<div class="muted">no pattern matched in this step</div>`; return; }
  const m = st.data.matches[k - 1], dl = st.deltas[k - 1];
  const counts = dl ? `+${Object.keys(dl.added).length} −${dl.removed.length} ~${Object.keys(dl.changed).length} nodes` : "";
  box.innerHTML = `<h3>Match ${k}</h3><div class="loc">${esc(m.loc)}</div><div class="kv">plugin <b>${esc(m.owner)}</b> · ${fmtTime(m.time_ns)}</div><div class="muted">loading…</div>`;
  const want = `${state.ctx}:${state.step}:${k}`;
  const d = await api(`/api/match?ctx=${state.ctx}&step=${state.step}&match=${k}`);
  if (`${state.ctx}:${state.step}:${state.match}` !== want) return;
  const src = d.source.map(([ln, text]) => `<span class="${ln === d.line ? "cur" : ""}"><span class="ln">${String(ln).padStart(4)} </span>${HL.highlight(text, "c")}</span>`).join("\n");
  const diff = d.diff.map(l => `<span class="${l.startsWith("@@") ? "d-hunk" : l.startsWith("+") ? "d-add" : l.startsWith("-") ? "d-del" : ""}">${esc(l)}</span>`).join("\n");
  box.innerHTML = `<h3>Match ${k}: pattern</h3><div class="loc">${esc(d.loc)}</div><div class="kv">plugin <b>${esc(d.owner)}</b> · ${fmtTime(d.time_ns)} · ${counts}</div>` +
    (src ? `<pre class="src">${src}</pre>` : "") + `<h3>Replaced expression</h3><pre class="diff" id="diff">${diff}</pre>`;
}

// ------------------------------------------------------------------------------------------------- code, uops
async function showCode() {
  const d = await api(`/api/code?ctx=${state.ctx}`);
  $("#code code").innerHTML = HL.highlight(d.src, d.lang);
  renderDetails(null);
  $("#match-info").innerHTML = `<h3>Code</h3><div class="kv">device <b>${esc(d.device)}</b> · ${d.uops.length} uops · ${d.runs} runs · ${fmtTime(d.run_ns)}</div>` +
    (d.opts && d.opts.length ? `<div class="kv">opts <b class="mono">${esc(JSON.stringify(d.opts))}</b></div>` : "");
  document.body.dataset.ready = `code:${state.ctx}`;
}
async function showUops() {
  const d = await api(`/api/code?ctx=${state.ctx}`);
  $("#uops").innerHTML = `<tr><th>#</th><th>op</th><th>dtype</th><th>src</th><th>arg</th></tr>` +
    d.uops.map(([i, op, dt, src, arg]) => `<tr><td class="num">${i}</td><td class="op">${esc(op)}</td><td>${esc(dt)}</td><td class="mono">${esc(src.map(s => "%" + s).join(", "))}</td><td class="mono">${esc(arg)}</td></tr>`).join("");
  $("#uops").querySelectorAll("td.op").forEach(td => td.style.color = OP_COLORS[td.textContent] || "#ddd");
  renderDetails(null);
  document.body.dataset.ready = `uops:${state.ctx}`;
}

// ------------------------------------------------------------------------------------------------- profiler
let prof = null;
const ROW_H = 18, TRACK_GAP = 8, LABEL_W = 150, AXIS_H = 24, MEM_H = 60, TICK_PX = 90;
async function showProfiler() {
  if (!prof) {
    const data = await api("/api/profile");
    prof = {data, t0: 0, t1: data.duration_ns * 1.02 || 1, tracks: [], hover: null};
    let y = AXIS_H;
    for (const tr of data.tracks) {
      const t = {...tr, y};
      if (tr.type === "spans") {   // a flame view: a span sits one row below the span it runs inside
        t.rows = tr.depth;
        t.h = (tr.depth.reduce((a, d) => Math.max(a, d), 0) + 1) * ROW_H;
      } else t.h = MEM_H;
      y += t.h + TRACK_GAP + 14;
      prof.tracks.push(t);
    }
    prof.height = y;
  }
  renderDetails(null);
  $("#match-info").innerHTML = `<h3>Profile</h3><div class="kv">${prof.data.tracks.length} tracks · ${fmtTime(prof.data.duration_ns)} · peak memory ${fmtBytes(prof.data.peak_bytes)}</div><div class="muted">wheel: zoom · drag: pan · click a kernel to open its code</div><div id="prof-sel"></div>`;
  drawProfile();
  document.body.dataset.ready = "profiler";
}
const KIND_COLORS = {schedule: "#bb9af7", codegen: "#7aa2f7", compile: "#e0af68", run: "#9ece6a", copy: "#2ac3de", user: "#c0caf5"};
function drawProfile() {
  const cv = $("#profiler"), r = cv.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
  cv.width = r.width * dpr; cv.height = r.height * dpr;
  const ctx = cv.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#16161e"; ctx.fillRect(0, 0, r.width, r.height);
  const W = r.width - LABEL_W, sx = (t) => LABEL_W + (t - prof.t0) / (prof.t1 - prof.t0) * W;
  // time axis
  ctx.font = "11px monospace"; ctx.fillStyle = "#7a82a6"; ctx.strokeStyle = "#2a2c3d";
  const span = prof.t1 - prof.t0, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
  // ticks at least TICK_PX apart, so that their labels never run into each other on a narrow view
  const tick = [1, 2, 5, 10, 20, 50].map(m => m * step).find(s => span / s <= Math.max(1, W / TICK_PX));
  prof.ticks = [];
  for (let t = Math.ceil(prof.t0 / tick) * tick; t <= prof.t1; t += tick) {
    const x = sx(t); ctx.beginPath(); ctx.moveTo(x, AXIS_H - 6); ctx.lineTo(x, r.height); ctx.stroke();
    ctx.fillText(fmtTime(t), x + 3, 12);
    prof.ticks.push([x, ctx.measureText(fmtTime(t)).width]);
  }
  prof.boxes = [];
  for (const tr of prof.tracks) {
    ctx.fillStyle = "#c0caf5"; ctx.font = "12px system-ui"; ctx.fillText(tr.name, 8, tr.y + 12);
    ctx.fillStyle = "#20212e"; ctx.fillRect(LABEL_W, tr.y + 14, W, tr.h);
    if (tr.type === "spans") {
      tr.events.forEach((ev, i) => {
        const [st, dur, name, kind, c] = ev;
        let x0 = sx(st), x1 = sx(st + dur);
        if (x1 < LABEL_W || x0 > r.width) return;
        x0 = Math.max(LABEL_W, x0); const w = Math.max(1, x1 - x0);
        const y = tr.y + 14 + tr.rows[i] * ROW_H;
        ctx.fillStyle = KIND_COLORS[kind] || "#a9b1d6";
        if (prof.hover === ev) ctx.fillStyle = "#ff9e64";
        ctx.fillRect(x0, y + 1, w, ROW_H - 2);
        if (w > 30) { ctx.fillStyle = "#111"; ctx.font = "11px monospace"; ctx.save(); ctx.beginPath(); ctx.rect(x0, y, w - 2, ROW_H); ctx.clip(); ctx.fillText(`${name}`, x0 + 3, y + 13); ctx.restore(); }
        prof.boxes.push({x0, x1: x0 + w, y0: y, y1: y + ROW_H, ev, track: tr});
      });
    } else {
      const peak = Math.max(1, tr.peak), base = tr.y + 14 + tr.h;
      ctx.fillStyle = "#7aa2f744"; ctx.strokeStyle = "#7aa2f7"; ctx.beginPath(); ctx.moveTo(LABEL_W, base);
      let last = 0;
      for (const [t, total] of tr.events) { const x = Math.max(LABEL_W, Math.min(r.width, sx(t))); ctx.lineTo(x, base - last / peak * (tr.h - 4)); ctx.lineTo(x, base - total / peak * (tr.h - 4)); last = total; }
      ctx.lineTo(r.width, base - last / peak * (tr.h - 4)); ctx.lineTo(r.width, base); ctx.closePath(); ctx.fill(); ctx.stroke();
      ctx.fillStyle = "#7a82a6"; ctx.font = "11px monospace"; ctx.fillText(`peak ${fmtBytes(tr.peak)}`, LABEL_W + 4, tr.y + 26);
      tr.events.forEach(ev => prof.boxes.push({x0: sx(ev[0]) - 3, x1: sx(ev[0]) + 3, y0: tr.y + 14, y1: base, ev, track: tr}));
    }
  }
}
(() => {
  const cv = $("#profiler"), tip = $("#tooltip");
  cv.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = cv.getBoundingClientRect(), x = e.clientX - r.left;
    if (x < LABEL_W) return;
    const t = prof.t0 + (x - LABEL_W) / (r.width - LABEL_W) * (prof.t1 - prof.t0);
    const f = Math.exp(e.deltaY * 0.002);
    prof.t0 = t - (t - prof.t0) * f; prof.t1 = t + (prof.t1 - t) * f;
    if (prof.t1 - prof.t0 < 100) prof.t1 = prof.t0 + 100;
    drawProfile();
  }, {passive: false});
  let drag = null;
  cv.addEventListener("mousedown", (e) => drag = {x: e.clientX, t0: prof.t0, t1: prof.t1, moved: false});
  window.addEventListener("mousemove", (e) => {
    if (state.view !== "profiler" || !prof) return;
    const r = cv.getBoundingClientRect();
    if (drag) {
      const dt = (e.clientX - drag.x) / (r.width - LABEL_W) * (drag.t1 - drag.t0);
      if (Math.abs(e.clientX - drag.x) > 3) drag.moved = true;
      prof.t0 = drag.t0 - dt; prof.t1 = drag.t1 - dt; drawProfile(); return;
    }
    const x = e.clientX - r.left, y = e.clientY - r.top;
    const hit = prof.boxes && prof.boxes.find(b => x >= b.x0 && x <= b.x1 && y >= b.y0 && y <= b.y1);
    const ev = hit ? hit.ev : null;
    if (ev !== prof.hover) { prof.hover = ev; drawProfile(); }
    if (!hit) { tip.hidden = true; return; }
    tip.hidden = false;
    tip.style.left = Math.min(r.width - 300, x + 14) + "px"; tip.style.top = (y + 14) + "px";
    tip.textContent = describe(hit);
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const moved = drag.moved; drag = null;
    if (moved || state.view !== "profiler") return;
    const r = cv.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    const hit = prof.boxes && prof.boxes.find(b => x >= b.x0 && x <= b.x1 && y >= b.y0 && y <= b.y1);
    if (!hit) return;
    $("#prof-sel").innerHTML = `<h3>Selected</h3><pre class="src">${esc(describe(hit))}</pre>`;
    if (hit.track.type === "spans" && hit.ev[4] != null) {
      const c = TRACE.contexts[hit.ev[4]];
      $("#prof-sel").innerHTML += `<a href="#view=code&ctx=${c.id}" id="jump-code">open code of ${esc(c.display)}</a>`;
      if (hit.ev[3] === "run" || hit.ev[3] === "compile" || hit.ev[3] === "codegen") go({view: "code", ctx: c.id, step: null, match: 0, node: null});
    }
  });
})();
function describe(hit) {
  const ev = hit.ev;
  if (hit.track.type === "memory") return `${ev[2]} ${ev[3]}: ${fmtBytes(ev[4])}\ntotal ${fmtBytes(ev[1])}\nat ${fmtTime(ev[0])}`;
  const [st, dur, name, kind, c, info] = ev;
  let s = `${name}\n${kind} on ${hit.track.name}\nduration ${fmtTime(dur)}\nstart ${fmtTime(st)}`;
  if (info && info.device_time_s != null) s += `\ndevice time ${fmtTime(info.device_time_s * 1e9)}`;
  if (info && info.nbytes != null) s += `\n${fmtBytes(info.nbytes)}`;
  if (info && info.loc) s += `\nat ${info.loc}` + (info.spans ? ` (${info.spans} spans of work)` : "");
  if (c != null) s += `\nkernel ${TRACE.contexts[c].display} (click for code)`;
  return s;
}
window.addEventListener("resize", () => { if (state.view === "profiler" && prof) drawProfile(); });

// ------------------------------------------------------------------------------------------------- kernel table
// columns: [key, header, cell text]; numbers sort descending first, names ascending
const dims = (d) => d ? d.join("×") : "";
const KERNEL_COLS = [
  ["i", "#", r => r.i], ["name", "kernel", r => r.name], ["device", "device", r => r.device],
  ["global", "global", r => dims(r.global)], ["local", "local", r => dims(r.local)], ["bufs", "args", r => r.bufs ?? ""],
  ["runs", "runs", r => r.runs], ["time_ns", "time", r => r.time_ns == null ? "" : fmtTime(r.time_ns)],
  ["gflops", "GFLOP/s", r => r.gflops == null ? "" : r.gflops.toFixed(2)], ["gbs", "GB/s", r => r.gbs == null ? "" : r.gbs.toFixed(2)],
];
// the estimates behind the rates, on hover (the table stays DEBUG=2's columns and fits a 1280-wide window)
const kernelTip = (r) => r.ops == null ? "" : `${r.ops} ALU ops, ${fmtBytes(r.mem || 0)} moved per run (codegen's estimate)`;
let kernelSort = {key: "i", desc: false}, kernelRows = null;
async function showKernels() {
  const c = state.ctx != null ? TRACE.contexts[state.ctx] : null;
  const want = `${state.ctx}`;
  const d = await api(c ? `/api/kernels?ctx=${c.id}` : "/api/kernels");
  if (`${state.ctx}` !== want || state.view !== "kernels") return;
  kernelRows = d.rows;
  renderDetails(null);
  const total = d.rows.reduce((a, r) => a + (r.time_ns || 0), 0);
  $("#match-info").innerHTML = `<h3>Kernels</h3><div class="kv">${d.rows.length} kernels · ${fmtTime(total)} run time</div><div class="muted">click a header to sort, a row to open the kernel</div>`;
  renderKernelTable();
  document.body.dataset.ready = `kernels:${c ? c.id : "all"}`;
}
function renderKernelTable() {
  const {key, desc} = kernelSort;
  const rows = [...kernelRows].sort((a, b) => {
    let x = a[key], y = b[key];
    if (Array.isArray(x) || Array.isArray(y)) { x = x ? x.reduce((p, q) => p * q, 1) : -1; y = y ? y.reduce((p, q) => p * q, 1) : -1; }
    if (x == null) return 1; if (y == null) return -1;
    const o = typeof x === "string" ? x.localeCompare(y) : x - y;
    return desc ? -o : o;
  });
  const head = KERNEL_COLS.map(([k, h]) => `<th data-key="${k}"${k === key ? ` class="sorted ${desc ? "desc" : "asc"}"` : ""}>${h}${k === key ? (desc ? " ▾" : " ▴") : ""}</th>`).join("");
  const body = rows.map(r => `<tr class="click" data-ctx="${r.ctx ?? ""}" title="${esc(kernelTip(r))}">` + KERNEL_COLS.map(([k, , f]) =>
    `<td class="${k === "name" ? "kname" : k === "device" ? "" : "num"}">${esc(String(f(r)))}</td>`).join("") + "</tr>").join("");
  $("#kernels").innerHTML = `<thead><tr>${head}</tr></thead><tbody>${body}</tbody>`;
}
$("#kernels").addEventListener("click", (e) => {
  const th = e.target.closest("th[data-key]");
  if (th) {
    const k = th.dataset.key;
    kernelSort = kernelSort.key === k ? {key: k, desc: !kernelSort.desc} : {key: k, desc: !["i", "name", "device"].includes(k)};
    renderKernelTable(); return;
  }
  const tr = e.target.closest("tr.click");
  if (!tr || tr.dataset.ctx === "") return;
  const c = TRACE.contexts[+tr.dataset.ctx], first = c.steps.findIndex(s => s.matches > 0);
  go({ctx: c.id, step: c.steps.length ? Math.max(0, first) : null, match: 0, node: null, view: c.steps.length ? "graph" : "code"});
});

// ------------------------------------------------------------------------------------------------- hot rules
async function showHot() {
  const d = await api("/api/hot");
  renderDetails(null);
  $("#hot").innerHTML = `<tr><th>pattern</th><th>plugin</th><th>matches</th><th>total time</th><th>mean</th><th>contexts</th><th>source</th></tr>` +
    d.rows.map((r) => `<tr class="click" data-first="${r.first.join(",")}" title="${esc(r.loc)}"><td class="loc">${esc(r.short)}</td><td>${esc(r.owner)}</td><td class="num">${r.matches}</td><td class="num">${fmtTime(r.time_ns)}</td><td class="num">${fmtTime(r.time_ns / r.matches)}</td><td class="num">${r.contexts}</td><td class="mono">${esc(r.source.slice(0, 90))}</td></tr>`).join("");
  $("#match-info").innerHTML = `<h3>Hot rules</h3><div class="kv">${d.rows.length} patterns matched; click one to open its first match</div>`;
  document.body.dataset.ready = "hot";
}
$("#hot").addEventListener("click", (e) => {
  const tr = e.target.closest("tr.click"); if (!tr) return;
  const [ctx, step, match] = tr.dataset.first.split(",").map(Number);
  go({view: "graph", ctx, step, match, node: null});
});

// ------------------------------------------------------------------------------------------------- search
let searchSeq = 0, searchResults = [], searchActive = -1;
$("#search").addEventListener("input", () => {
  clearTimeout(searchSeq);
  searchSeq = setTimeout(runSearch, 150);
});
async function runSearch() {
  const q = $("#search").value.trim(), box = $("#search-results");
  if (!q) { box.hidden = true; return; }
  const d = await api(`/api/search?q=${encodeURIComponent(q)}`);
  if ($("#search").value.trim() !== q) return;
  searchResults = d.results; searchActive = -1;
  box.hidden = false;
  box.innerHTML = d.results.length ? d.results.map((r, i) => `<div class="result" data-i="${i}"><span class="kind ${kindClass(r.kind)}">${esc(r.kind)}</span>${esc(r.label)}<span class="detail">${esc(r.detail)}</span></div>`).join("")
    : `<div class="result muted">nothing matches ${esc(q)}</div>`;
}
function openResult(r) {
  const t = r.target;
  $("#search-results").hidden = true;
  if (t.step == null) {
    const c = TRACE.contexts[t.ctx];
    const first = c.steps.findIndex(s => s.matches > 0);
    go({ctx: t.ctx, step: c.steps.length ? Math.max(0, first) : null, match: 0, node: null, view: c.steps.length ? "graph" : "code"});
  } else go({ctx: t.ctx, step: t.step, match: t.match || 0, node: t.node ?? null, view: "graph"});
}
$("#search-results").addEventListener("click", (e) => { const el = e.target.closest(".result[data-i]"); if (el) openResult(searchResults[+el.dataset.i]); });
$("#search").addEventListener("keydown", (e) => {
  const items = document.querySelectorAll("#search-results .result[data-i]");
  if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    e.preventDefault();
    searchActive = Math.max(0, Math.min(items.length - 1, searchActive + (e.key === "ArrowDown" ? 1 : -1)));
    items.forEach((el, i) => el.classList.toggle("active", i === searchActive));
  } else if (e.key === "Enter" && searchResults.length) openResult(searchResults[Math.max(0, searchActive)]);
  else if (e.key === "Escape") { $("#search").blur(); $("#search-results").hidden = true; }
});

// ------------------------------------------------------------------------------------------------- keyboard
document.addEventListener("keydown", (e) => {
  if (e.target.matches("input, textarea") || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === "/") { e.preventDefault(); $("#search").focus(); return; }
  if (e.key === " ") { e.preventDefault(); if (state.view === "graph") fitGraph(); return; }
  const c = state.ctx != null ? TRACE.contexts[state.ctx] : null;
  if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
    if (state.view !== "graph" || !c || state.step == null) return;
    e.preventDefault();
    const n = c.steps[state.step].matches, m = state.match + (e.key === "ArrowRight" ? 1 : -1);
    if (m >= 0 && m <= n) go({match: m, node: null});
  } else if (e.key === "ArrowUp" || e.key === "ArrowDown") {
    e.preventDefault();
    const d = e.key === "ArrowDown" ? 1 : -1;
    if (c == null) { if (TRACE.contexts.length) selectContext(d > 0 ? 0 : TRACE.contexts.length - 1, d); return; }
    if (expanded.has(c.id) && c.steps.length && state.view === "graph") {
      const s = (state.step ?? -1) + d;
      if (s >= 0 && s < c.steps.length) { go({step: s, match: 0, node: null}); return; }
    }
    const next = c.id + d;
    if (next >= 0 && next < TRACE.contexts.length) selectContext(next, d);
  } else if (e.key === "Enter") {
    if (!c) return;
    e.preventDefault();
    if (expanded.has(c.id)) { expanded.delete(c.id); renderSidebar(); }
    else { expanded.add(c.id); renderSidebar(); }
  }
});
function selectContext(id, dir) {
  const c = TRACE.contexts[id];
  // moving up into an expanded context lands on its last step
  const first = Math.max(0, c.steps.findIndex(s => s.matches > 0));
  const step = !c.steps.length ? null : expanded.has(id) && dir < 0 ? c.steps.length - 1 : expanded.has(id) ? 0 : first;
  go({ctx: id, step, match: 0, node: null, view: step == null && c.has_code ? "code" : "graph"});
}

// ------------------------------------------------------------------------------------------------- panels
// the side panels: drag a divider to resize, double-click it to hide or show the panel; kept across reloads
const PANEL_MIN = 120, panels = {left: 270, right: 360, leftHidden: false, rightHidden: false};
try { Object.assign(panels, JSON.parse(localStorage.getItem("viz.panels") || "{}")); } catch { /* a damaged entry: defaults */ }
function layoutPanels(save = true) {
  const app = $("#app");
  app.style.setProperty("--left-w", `${panels.leftHidden ? 0 : panels.left}px`);
  app.style.setProperty("--right-w", `${panels.rightHidden ? 0 : panels.right}px`);
  $("#left").classList.toggle("collapsed", panels.leftHidden);
  $("#right").classList.toggle("collapsed", panels.rightHidden);
  if (save) try { localStorage.setItem("viz.panels", JSON.stringify(panels)); } catch { /* storage off: not kept */ }
  svgSize = null;
  if (graphGeom) applyView();
  if (state.view === "profiler" && prof) drawProfile();
}
document.querySelectorAll(".resizer").forEach(el => {
  const side = el.dataset.side;
  el.addEventListener("dblclick", () => { panels[side + "Hidden"] = !panels[side + "Hidden"]; layoutPanels(); });
  el.addEventListener("mousedown", (e) => {
    e.preventDefault();
    const x0 = e.clientX, w0 = panels[side + "Hidden"] ? 0 : panels[side];
    el.classList.add("dragging");
    const move = (ev) => {
      const dx = ev.clientX - x0, w = Math.round(side === "left" ? w0 + dx : w0 - dx);
      const max = window.innerWidth - 300 - (side === "left" ? panels.right : panels.left);
      panels[side + "Hidden"] = w < PANEL_MIN / 2;
      if (!panels[side + "Hidden"]) panels[side] = Math.max(PANEL_MIN, Math.min(max, w));
      layoutPanels(false);
    };
    const up = () => { el.classList.remove("dragging"); window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); layoutPanels(); };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  });
});
layoutPanels(false);

// ------------------------------------------------------------------------------------------------- start
(async () => {
  try { TRACE = await api("/api/trace"); }
  catch (err) { document.body.innerHTML = `<div class="fatal"><h1>tinyplug VIZ cannot open this trace</h1><p id="fatal-message">${esc(err.message)}</p></div>`; return; }
  for (const w of TRACE.warnings) showError(w);
  const initial = readHash();
  if (initial.ctx != null && initial.step != null) expanded.add(initial.ctx);   // a deep link opens its context
  await apply(initial);
  // when the first view is painted, in ms since navigation began (benchmarks/viz_trace_size.py reads it)
  requestAnimationFrame(() => setTimeout(() => window.__vizInteractiveMs = performance.now(), 0));
})();
