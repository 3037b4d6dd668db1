// Layered (Sugiyama-style) layout of a DAG, left to right, in a Web Worker so the page never freezes.
// 1. rank: longest path from the sources; 2. order within a rank: barycenter sweeps; 3. coordinates: ranks are
// columns, nodes in a column are packed top-down near the mean height of their neighbours. O(sweeps * (V + E)).
"use strict";
const RANK_GAP = 56, NODE_GAP = 12, SWEEPS = 6, BAND_GAP = 80;

function layout(msg) {
  const nodes = msg.nodes;               // [{id, w, h}]
  const edges = msg.edges;               // [[from, to]] (from = source operand, to = consumer)
  const n = nodes.length, index = new Map();
  nodes.forEach((v, i) => index.set(v.id, i));
  const preds = Array.from({length: n}, () => []), succs = Array.from({length: n}, () => []);
  for (const [a, b] of edges) {
    const ia = index.get(a), ib = index.get(b);
    if (ia === undefined || ib === undefined) continue;
    succs[ia].push(ib); preds[ib].push(ia);
  }
  // ranks by Kahn's algorithm
  const indeg = preds.map(p => p.length), rank = new Int32Array(n), queue = [];
  for (let i = 0; i < n; i++) if (indeg[i] === 0) queue.push(i);
  for (let q = 0; q < queue.length; q++) {
    const i = queue[q];
    for (const j of succs[i]) { rank[j] = Math.max(rank[j], rank[i] + 1); if (--indeg[j] === 0) queue.push(j); }
  }
  if (queue.length < n) for (let i = 0; i < n; i++) if (indeg[i] > 0) rank[i] = 0;   // a cycle: should not happen
  // pull sources right next to their first consumer, so constants sit beside the op that uses them
  for (let q = queue.length - 1; q >= 0; q--) {
    const i = queue[q];
    if (succs[i].length) { let m = Infinity; for (const j of succs[i]) m = Math.min(m, rank[j] - 1); if (m > rank[i]) rank[i] = m; }
  }
  let maxRank = 0;
  for (let i = 0; i < n; i++) maxRank = Math.max(maxRank, rank[i]);
  const layers = Array.from({length: maxRank + 1}, () => []);
  for (const i of queue.length === n ? queue : nodes.map((_, i) => i)) layers[rank[i]].push(i);
  const pos = new Float64Array(n);
  const setPos = () => layers.forEach(l => l.forEach((i, k) => pos[i] = k / Math.max(1, l.length - 1 || 1)));
  setPos();
  const bary = (i, nb) => { if (!nb[i].length) return pos[i]; let s = 0; for (const j of nb[i]) s += pos[j]; return s / nb[i].length; };
  for (let it = 0; it < SWEEPS; it++) {
    const down = it % 2 === 0;
    const order = down ? layers : layers.slice().reverse();
    for (const l of order) {
      const nb = down ? preds : succs;
      const key = new Map(l.map(i => [i, bary(i, nb)]));
      l.sort((a, b) => key.get(a) - key.get(b));
      l.forEach((i, k) => pos[i] = k / Math.max(1, l.length - 1));
    }
  }
  // coordinates. A layer taller than the graph would be at the viewport's aspect ratio (a thousand inputs of one
  // sum) wraps into several columns, so that the whole graph, fitted, is an overview rather than a thin strip.
  const x = new Float64Array(n), y = new Float64Array(n);
  let area = 0;
  for (const v of nodes) area += (v.w + RANK_GAP) * (v.h + NODE_GAP);
  const maxH = Math.max(800, Math.sqrt(area * (msg.aspect || 0.6)));
  const wrapped = new Set();
  let cx = 0;
  for (const l of layers) {
    let w = 0, total = 0;
    for (const i of l) { w = Math.max(w, nodes[i].w); total += nodes[i].h + NODE_GAP; }
    const cols = total > 2 * maxH ? Math.ceil(total / maxH) : 1;   // small graphs never wrap
    if (cols > 1) wrapped.add(l);
    let col = 0, cy = 0;
    for (const i of l) {   // consecutive nodes (in barycenter order) fill a column top-down, then the next
      if (cols > 1 && cy + nodes[i].h > total / cols && cy > 0 && col < cols - 1) { col++; cy = 0; }
      x[i] = cx + col * (w + NODE_GAP * 2) + (w - nodes[i].w) / 2;
      y[i] = cy; cy += nodes[i].h + NODE_GAP;
    }
    cx += cols * (w + NODE_GAP * 2) - NODE_GAP * 2 + RANK_GAP;
  }
  // then move nodes toward the mean centre of their neighbours without overlapping (wrapped layers stay put)
  const centre = i => y[i] + nodes[i].h / 2;
  for (let it = 0; it < 4; it++) {
    const down = it % 2 === 0;
    for (const l of (down ? layers : layers.slice().reverse())) {
      if (wrapped.has(l)) continue;
      const nb = down ? preds : succs;
      const want = l.map(i => {
        const list = nb[i].length ? nb[i] : (down ? succs[i] : preds[i]);
        if (!list.length) return y[i];
        let s = 0; for (const j of list) s += centre(j);
        return s / list.length - nodes[i].h / 2;
      });
      // place top-down, then fix overlaps bottom-up so the layer stays centred on what it wants
      let bottom = -Infinity;
      l.forEach((i, k) => { y[i] = Math.max(want[k], bottom); bottom = y[i] + nodes[i].h + NODE_GAP; });
      let top = Infinity;
      for (let k = l.length - 1; k >= 0; k--) {
        const i = l[k];
        if (y[i] + nodes[i].h + NODE_GAP > top) y[i] = top - nodes[i].h - NODE_GAP;
        top = y[i];
      }
    }
  }
  // a layer pulled toward its neighbours may hang below the wrapped block: keep every layer within its height
  if (wrapped.size) {
    let H = maxH;
    for (const l of wrapped) for (const i of l) H = Math.max(H, y[i] + nodes[i].h);
    for (const l of layers) {
      if (wrapped.has(l) || !l.length) continue;
      let top = Infinity, bottom = -Infinity;
      for (const i of l) { top = Math.min(top, y[i]); bottom = Math.max(bottom, y[i] + nodes[i].h); }
      let d = bottom > H ? H - bottom : 0;
      if (top + d < 0) d = -top;
      if (d) for (const i of l) y[i] += d;
    }
  }
  // a deep graph (a long chain of steps) far wider than it would be at the view's aspect ratio is cut into bands
  // of consecutive ranks stacked top to bottom, like lines of text, so Fit shows it whole and not as a thin strip
  const layerX = layers.map(l => l.length ? Math.min(...l.map(i => x[i])) : 0);
  const totalW = Math.max(0, ...nodes.map((v, i) => x[i] + v.w));
  const bandW = Math.max(1600, Math.sqrt(area / (msg.aspect || 0.6)));
  if (totalW > 2 * bandW) {
    let band = [], bandStart = 0, offsetY = 0;
    const flush = () => {
      if (!band.length) return;
      let top = Infinity, bottom = -Infinity;
      for (const l of band) for (const i of l) { top = Math.min(top, y[i]); bottom = Math.max(bottom, y[i] + nodes[i].h); }
      for (const l of band) for (const i of l) { x[i] -= bandStart; y[i] += offsetY - top; }
      offsetY += bottom - top + BAND_GAP;
      band = [];
    };
    layers.forEach((l, r) => {
      if (band.length && layerX[r] - bandStart > bandW) { flush(); bandStart = layerX[r]; }
      band.push(l);
    });
    flush();
  }
  const out = {};
  let minY = Infinity;
  for (let i = 0; i < n; i++) minY = Math.min(minY, y[i]);
  let maxX = 0, maxY = 0;
  for (let i = 0; i < n; i++) {
    out[nodes[i].id] = [x[i], y[i] - minY];
    maxX = Math.max(maxX, x[i] + nodes[i].w); maxY = Math.max(maxY, y[i] - minY + nodes[i].h);
  }
  return {pos: out, width: maxX, height: maxY};
}

self.onmessage = (e) => {
  const t0 = performance.now();
  const result = layout(e.data);
  self.postMessage({id: e.data.id, ...result, ms: performance.now() - t0});
};
