// The eddyline dashboard page: polls /api/v1 and draws the job graph, the
// tables and the checkpoint chart as plain SVG and HTML (no external code).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 200, NODE_H = 62, GAP_X = 90, GAP_Y = 36, MARGIN = 40;
let jobId = null;
let graphDrawn = false;

function el(tag, attrs, parent, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function fmt(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (a >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function bytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}

function ms(n) { return n === null || n === undefined ? "–" : n.toFixed(1) + " ms"; }

function watermark(w) {
  if (w === null || w === undefined) return "–";
  if (w >= 8e15 || w <= -8e15) return w > 0 ? "end" : "start";
  return new Date(w).toISOString().replace("T", " ").replace("Z", "");
}

async function get(path) {
  const r = await fetch("/api/v1" + path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

// Layers by longest path from the sources, over forward edges only (a
// loop's feedback edge goes back and is drawn separately).
function layout(vertices) {
  const byId = new Map(vertices.map(v => [v.id, v]));
  const layer = new Map();
  const depth = id => {
    if (layer.has(id)) return layer.get(id);
    layer.set(id, 0);
    const v = byId.get(id);
    let d = 0;
    for (const e of v.inputs) if (byId.has(e.id)) d = Math.max(d, depth(e.id) + 1);
    layer.set(id, d);
    return d;
  };
  vertices.forEach(v => depth(v.id));
  const rows = new Map();
  const pos = new Map();
  for (const v of vertices) {
    const l = layer.get(v.id);
    const r = rows.get(l) || 0;
    rows.set(l, r + 1);
    const indent = v.scope.length * 14;
    pos.set(v.id, { x: MARGIN + l * (NODE_W + GAP_X), y: MARGIN + 20 + r * (NODE_H + GAP_Y) + indent });
  }
  return pos;
}

function drawGraph(vertices) {
  const svg = document.getElementById("graph");
  svg.innerHTML = "";
  const defs = el("defs", {}, svg);
  for (const [id, color] of [["arrow", "#6c7a89"], ["arrow-feedback", "#e76f51"]]) {
    const m = el("marker", { id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
      markerHeight: 7, orient: "auto-start-reverse" }, defs);
    el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: color }, m);
  }
  const pos = layout(vertices);
  let maxX = 0, maxY = 0;
  pos.forEach(p => { maxX = Math.max(maxX, p.x + NODE_W); maxY = Math.max(maxY, p.y + NODE_H); });
  // Loop scopes: one dashed box around the operators of each loop, the
  // outer loops' boxes drawn first and larger.
  const scopes = new Map();
  for (const v of vertices) v.scope.forEach((loop, depth) => {
    const s = scopes.get(loop) || { depth, ids: [] };
    s.ids.push(v.id);
    scopes.set(loop, s);
  });
  const scopeLayer = el("g", { class: "scopes" }, svg);
  [...scopes.entries()].sort((a, b) => a[1].depth - b[1].depth).forEach(([loop, s]) => {
    const pad = 26 - s.depth * 8;
    const xs = s.ids.map(id => pos.get(id));
    const x0 = Math.min(...xs.map(p => p.x)) - pad, y0 = Math.min(...xs.map(p => p.y)) - pad - 12;
    const x1 = Math.max(...xs.map(p => p.x + NODE_W)) + pad;
    const y1 = Math.max(...xs.map(p => p.y + NODE_H)) + pad + 30;
    const g = el("g", { class: "scope", "data-loop": loop }, scopeLayer);
    el("rect", { x: x0, y: y0, width: x1 - x0, height: y1 - y0 }, g);
    el("text", { x: x0 + 8, y: y0 + 13 }, g, "loop " + loop);
    maxY = Math.max(maxY, y1);
  });
  const edges = el("g", { class: "edges" }, svg);
  for (const v of vertices) {
    const to = pos.get(v.id);
    for (const e of v.inputs) {
      const from = pos.get(e.id);
      if (!from) continue;
      const x0 = from.x + NODE_W, y0 = from.y + NODE_H / 2, x1 = to.x, y1 = to.y + NODE_H / 2;
      const mx = (x0 + x1) / 2;
      el("path", { class: "edge", "data-from": e.id, "data-to": v.id,
        d: `M ${x0} ${y0} C ${mx} ${y0}, ${mx} ${y1}, ${x1} ${y1}`, "marker-end": "url(#arrow)" }, edges);
      const label = e.ship_strategy + (e.keys.length ? "(" + e.keys.join(",") + ")" : "");
      el("text", { class: "edge-label", x: mx - 24, y: (y0 + y1) / 2 - 4 }, edges, label);
    }
    if (v.feedback_from !== null && pos.has(v.feedback_from)) {
      // The loop's cycle: from the feedback producer back under the body to the head.
      const from = pos.get(v.feedback_from);
      const x0 = from.x + NODE_W / 2, y0 = from.y + NODE_H, x1 = to.x + NODE_W / 2, y1 = to.y + NODE_H;
      const low = Math.max(y0, y1) + 34;
      el("path", { class: "edge feedback", "data-from": v.feedback_from, "data-to": v.id,
        d: `M ${x0} ${y0} C ${x0} ${low}, ${x1} ${low}, ${x1} ${y1}`,
        "marker-end": "url(#arrow-feedback)" }, edges);
      el("text", { class: "edge-label", x: (x0 + x1) / 2 - 22, y: low - 4 }, edges, "feedback");
      maxY = Math.max(maxY, low + 10);
    }
  }
  const nodes = el("g", { class: "nodes" }, svg);
  for (const v of vertices) {
    const p = pos.get(v.id);
    const g = el("g", { class: "node", "data-id": v.id, "data-name": v.name,
      transform: `translate(${p.x},${p.y})` }, nodes);
    el("title", {}, g, v.name + " (" + v.kind + ")");
    el("rect", { width: NODE_W, height: NODE_H, fill: "#e8f1f8" }, g);
    const name = v.name.length > 26 ? v.name.slice(0, 25) + "…" : v.name;
    el("text", { class: "title", x: 8, y: 17 }, g, name);
    el("text", { class: "info", x: 8, y: 34 }, g, v.kind + " ×" + v.parallelism);
    el("text", { class: "rate", x: 8, y: 51 }, g, "");
  }
  svg.setAttribute("width", maxX + MARGIN);
  svg.setAttribute("height", maxY + MARGIN);
  graphDrawn = true;
}

function updateGraph(vertices) {
  for (const v of vertices) {
    const g = document.querySelector(`#graph .node[data-id="${v.id}"]`);
    if (!g) continue;
    const m = v.metrics;
    g.querySelector(".rate").textContent =
      `in ${fmt(m["read-records-per-second"])}/s · out ${fmt(m["write-records-per-second"])}/s`;
    // Colour by backpressure: white-blue when free, red when blocked.
    const bp = Math.min(1, m.backPressuredTimeMsPerSecond / 1000);
    const busy = Math.min(1, m.busyTimeMsPerSecond / 1000);
    const r = Math.round(232 + 23 * bp), gr = Math.round(241 - 140 * bp - 30 * busy * (1 - bp));
    const b = Math.round(248 - 160 * bp - 60 * busy * (1 - bp));
    g.querySelector("rect").setAttribute("fill", `rgb(${r},${gr},${b})`);
  }
}

function fillTable(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.innerHTML = "";
  for (const { cells, attrs } of rows) {
    const tr = document.createElement("tr");
    for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
    for (const c of cells) {
      const td = document.createElement("td");
      if (typeof c === "object" && c !== null) { td.textContent = c.text; td.className = c.cls; }
      else td.textContent = c;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function drawTables(job) {
  fillTable("operators", job.vertices.map(v => {
    const m = v.metrics;
    return { attrs: { "data-name": v.name }, cells: [v.name, v.parallelism, fmt(m["read-records"]),
      fmt(m["write-records"]), fmt(m["read-records-per-second"]), fmt(m["write-records-per-second"]),
      fmt(m.busyTimeMsPerSecond), fmt(m.backPressuredTimeMsPerSecond), fmt(m.idleTimeMsPerSecond),
      watermark(m.currentOutputWatermark),
      m.watermarkLagMs === null ? "–" : fmt(m.watermarkLagMs) + " ms",
      fmt(m["late-records-dropped"]), bytes(m["spilled-bytes"])] };
  }));
  const subs = [];
  for (const v of job.vertices) for (const s of v.subtasks) subs.push({ cells: [v.name, s.subtask,
    fmt(s["read-records"]), fmt(s["write-records"]), fmt(s["read-records-per-second"]),
    fmt(s["write-records-per-second"]), fmt(s.busyTimeMsPerSecond),
    fmt(s.backPressuredTimeMsPerSecond), fmt(s.idleTimeMsPerSecond),
    watermark(s.currentOutputWatermark)] });
  fillTable("subtasks", subs);
}

function drawCheckpoints(c) {
  document.getElementById("checkpoint-counts").textContent =
    `completed: ${c.counts.completed} · failed: ${c.counts.failed}`;
  const rows = c.history.map(h => ({ attrs: { "data-id": h.id, "data-status": h.status }, cells: [
    h.id, h.status, h.is_savepoint ? "savepoint" : "checkpoint",
    new Date(h.trigger_timestamp).toLocaleTimeString(), bytes(h.state_size),
    ms(h.end_to_end_duration), ms(h.alignment_duration), h.null_state_checkpoint,
    h.num_acknowledged_subtasks] }));
  for (const f of c.failures) rows.push({ attrs: { "data-id": f.id, "data-status": f.status },
    cells: [f.id, f.status, f.is_savepoint ? "savepoint" : "checkpoint", "", "", "", "", "",
      { text: f.failure_message || "", cls: "cause" }] });
  fillTable("checkpoints", rows);
  // Chart: duration (blue) and size (yellow) of the last 30 checkpoints.
  const svg = document.getElementById("checkpoint-chart");
  svg.innerHTML = "";
  const hist = c.history.slice(0, 30).reverse();
  if (!hist.length) return;
  const W = 720, H = 180, base = H - 24, top = 14;
  const maxD = Math.max(1, ...hist.map(h => h.end_to_end_duration));
  const maxS = Math.max(1, ...hist.map(h => h.state_size));
  const step = (W - 60) / hist.length, bw = Math.max(2, step / 2 - 2);
  hist.forEach((h, i) => {
    const x = 50 + i * step;
    const hd = (base - top) * h.end_to_end_duration / maxD, hs = (base - top) * h.state_size / maxS;
    el("rect", { class: "bar duration", x, y: base - hd, width: bw, height: hd }, svg,
      ).appendChild(el("title", {}, null, `#${h.id}: ${ms(h.end_to_end_duration)}`));
    el("rect", { class: "bar size", x: x + bw, y: base - hs, width: bw, height: hs }, svg)
      .appendChild(el("title", {}, null, `#${h.id}: ${bytes(h.state_size)}`));
    el("text", { class: "axis", x, y: H - 8 }, svg, String(h.id));
  });
  el("text", { class: "axis", x: 2, y: top + 4 }, svg, ms(maxD));
  el("text", { class: "axis", x: 2, y: top + 16 }, svg, bytes(maxS));
  el("line", { x1: 48, y1: base, x2: W, y2: base, stroke: "#99a" }, svg);
}

function drawRestarts(e) {
  fillTable("restarts", e.exceptionHistory.entries.map(x => ({ cells: [x.attempt,
    new Date(x.timestamp).toLocaleTimeString(), { text: x.stacktrace, cls: "cause" }] })));
}

async function refresh() {
  try {
    if (jobId === null) {
      const jobs = await get("/jobs");
      jobId = jobs.jobs[0].id;
    }
    const job = await get("/jobs/" + jobId);
    document.getElementById("job-name").textContent = job.name;
    document.getElementById("job-state").textContent =
      `${job.state} · ${(job.duration / 1000).toFixed(1)} s · restarts ${job.restarts}`;
    if (!graphDrawn) drawGraph(job.vertices);
    updateGraph(job.vertices);
    drawTables(job);
    drawCheckpoints(await get(`/jobs/${jobId}/checkpoints`));
    drawRestarts(await get(`/jobs/${jobId}/exceptions`));
  } catch (err) {
    document.getElementById("job-state").textContent = "UNREACHABLE (" + err.message + ")";
  }
}

refresh();
setInterval(refresh, 1000);
