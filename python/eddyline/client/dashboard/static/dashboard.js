// The eddyline dashboard page: polls /api/v1 and draws the job graph with
// dagre-d3 and the checkpoint chart with D3 (served from the installed
// XStatic packages under /vendor/), the tables as plain HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
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

// The job graph, laid out by dagre and drawn by dagre-d3 (both vendored
// through the XStatic-Dagre-D3 package, on D3 3.5 from XStatic-D3): one
// node per operator, one edge per input labelled with its partitioning, a
// loop's feedback edge from its feedback producer back to its head (dagre
// reverses it for ranking, so it is drawn as the cycle's back edge), and
// each loop scope as a compound (cluster) node holding its operators, an
// inner loop's cluster nested in the outer one's (DESIGN.md "Loops").
function nodeLabel(v) {
  const g = document.createElementNS(SVG, "g");
  const name = v.name.length > 28 ? v.name.slice(0, 27) + "…" : v.name;
  el("text", { class: "title", x: 0, y: 12 }, g, name);
  el("text", { class: "info", x: 0, y: 28 }, g, v.kind + " ×" + v.parallelism);
  el("text", { class: "rate", x: 0, y: 44 }, g, "in – /s · out – /s");
  if (v.kind === "loop_head") el("text", { class: "loop", x: 0, y: 60 }, g, "queue – · round –");
  return g;
}

function drawGraph(vertices) {
  const g = new dagreD3.graphlib.Graph({ compound: true, multigraph: true })
    .setGraph({ rankdir: "LR", nodesep: 28, ranksep: 70, marginx: 16, marginy: 16 })
    .setDefaultEdgeLabel(() => ({}));
  const ids = new Set(vertices.map(v => String(v.id)));
  for (const v of vertices) {
    g.setNode(String(v.id), { labelType: "svg", label: nodeLabel(v), class: "operator",
      width: 200, height: v.kind === "loop_head" ? 66 : 50, rx: 6, ry: 6,
      paddingLeft: 8, paddingRight: 8, paddingTop: 6, paddingBottom: 6 });
  }
  // One cluster per loop scope, nested like the scopes.
  for (const v of vertices) {
    v.scope.forEach((loop, depth) => {
      const c = "loop-" + loop;
      if (!g.hasNode(c)) g.setNode(c, { label: "loop " + loop, clusterLabelPos: "top",
        paddingTop: 22, rx: 10, ry: 10 });
      if (depth > 0) g.setParent(c, "loop-" + v.scope[depth - 1]);
    });
    if (v.scope.length) g.setParent(String(v.id), "loop-" + v.scope[v.scope.length - 1]);
  }
  for (const v of vertices) {
    v.inputs.forEach((e, port) => {
      if (!ids.has(String(e.id))) return;
      const label = e.ship_strategy + (e.keys.length ? "(" + e.keys.join(",") + ")" : "");
      g.setEdge(String(e.id), String(v.id), { label, class: "forward",
        lineInterpolate: "basis", arrowhead: "vee" }, "in" + port);
    });
    if (v.feedback_from !== null && ids.has(String(v.feedback_from))) {
      g.setEdge(String(v.feedback_from), String(v.id), { label: "feedback", class: "feedback",
        lineInterpolate: "basis", arrowhead: "vee" }, "feedback");
    }
  }
  const svg = d3.select("#graph");
  svg.selectAll("*").remove();
  const inner = svg.append("g").attr("class", "dagre");
  new dagreD3.render()(inner, g);
  const byId = new Map(vertices.map(v => [String(v.id), v]));
  inner.selectAll("g.node").attr("data-id", id => id)
    .attr("data-name", id => byId.get(id).name);
  inner.selectAll("g.cluster").attr("data-loop", c => c.slice("loop-".length));
  inner.selectAll("g.edgePath").attr("data-from", e => e.v).attr("data-to", e => e.w);
  const size = g.graph();
  // Shrunk to the page's width when wider, to 60 % at most (then it scrolls).
  const w = Math.ceil(size.width) + 4, h = Math.ceil(size.height) + 4;
  const room = document.getElementById("graph-wrap").clientWidth || w;
  const scale = Math.max(0.6, Math.min(1, room / w));
  svg.attr("viewBox", `0 0 ${w} ${h}`).attr("width", Math.round(w * scale))
    .attr("height", Math.round(h * scale));
  graphDrawn = true;
}

function updateGraph(vertices) {
  for (const v of vertices) {
    const node = document.querySelector(`#graph g.node[data-id="${v.id}"]`);
    if (!node) continue;
    const m = v.metrics;
    node.querySelector("text.rate").textContent =
      `in ${fmt(m["read-records-per-second"])}/s · out ${fmt(m["write-records-per-second"])}/s`;
    if (v.loop) node.querySelector("text.loop").textContent =
      `queue ${fmt(v.loop["feedback-queue-events"])} · spilled ${bytes(v.loop["spilled-bytes"])}` +
      ` · round ${v.loop["termination-rounds"]}`;
    // Colour by backpressure: white-blue when free, red when blocked.
    const bp = Math.min(1, m.backPressuredTimeMsPerSecond / 1000);
    const busy = Math.min(1, m.busyTimeMsPerSecond / 1000);
    const r = Math.round(232 + 23 * bp), gr = Math.round(241 - 140 * bp - 30 * busy * (1 - bp));
    const b = Math.round(248 - 160 * bp - 60 * busy * (1 - bp));
    node.querySelector("rect").style.fill = `rgb(${r},${gr},${b})`;
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
  const loops = job.vertices.filter(v => v.loop);
  document.getElementById("loops-section").hidden = !loops.length;
  fillTable("loops", loops.map(v => ({ attrs: { "data-name": v.name, "data-loop": v.loop["loop-id"] },
    cells: [v.name, v.loop["loop-id"], fmt(v.loop["feedback-queue-events"]),
      bytes(v.loop["feedback-queue-bytes"]), bytes(v.loop["spilled-bytes"]),
      fmt(v.loop["spill-files"]), v.loop["termination-rounds"]] })));
}

function drawCheckpoints(c) {
  document.getElementById("checkpoint-counts").textContent =
    `completed: ${c.counts.completed} · failed: ${c.counts.failed}`;
  const rows = c.history.map(h => ({ attrs: { "data-id": h.id, "data-status": h.status }, cells: [
    h.id, h.status, h.is_savepoint ? "savepoint" : "checkpoint",
    new Date(h.trigger_timestamp).toLocaleTimeString(), bytes(h.state_size),
    h.incremental_size === null ? "–" : bytes(h.incremental_size),
    ms(h.end_to_end_duration), ms(h.alignment_duration), h.null_state_checkpoint,
    h.num_acknowledged_subtasks] }));
  for (const f of c.failures) rows.push({ attrs: { "data-id": f.id, "data-status": f.status },
    cells: [f.id, f.status, f.is_savepoint ? "savepoint" : "checkpoint", "", "", "", "", "", "",
      { text: f.failure_message || "", cls: "cause" }] });
  fillTable("checkpoints", rows);
  drawCheckpointChart(c.history.slice(0, 30).reverse());
}

// The checkpoint history chart (D3): end-to-end duration as bars on the left
// axis, size as a line on the right axis, one band per checkpoint id. A
// checkpoint's incrementally written bytes (when the stats carry them:
// `incremental_size`) are drawn as a second line; until then it is absent.
function drawCheckpointChart(hist) {
  const svg = d3.select("#checkpoint-chart");
  svg.selectAll("*").remove();
  if (!hist.length) return;
  const W = +svg.attr("width"), H = +svg.attr("height");
  const m = { top: 12, right: 64, bottom: 28, left: 58 };
  const plot = svg.append("g").attr("transform", `translate(${m.left},${m.top})`);
  const w = W - m.left - m.right, h = H - m.top - m.bottom;
  const x = d3.scale.ordinal().domain(hist.map(c => c.id)).rangeBands([0, w], 0.25);
  const yd = d3.scale.linear().domain([0, d3.max(hist, c => c.end_to_end_duration) || 1])
    .range([h, 0]).nice();
  const sizes = hist.map(c => Math.max(c.state_size, c.incremental_size || 0));
  const ys = d3.scale.linear().domain([0, d3.max(sizes) || 1]).range([h, 0]).nice();
  const every = Math.max(1, Math.ceil(hist.length / 15));
  plot.append("g").attr("class", "axis x").attr("transform", `translate(0,${h})`)
    .call(d3.svg.axis().scale(x).orient("bottom")
      .tickValues(hist.map(c => c.id).filter((_, i) => i % every === 0)));
  plot.append("g").attr("class", "axis duration")
    .call(d3.svg.axis().scale(yd).orient("left").ticks(5).tickFormat(d => d + " ms"));
  plot.append("g").attr("class", "axis size").attr("transform", `translate(${w},0)`)
    .call(d3.svg.axis().scale(ys).orient("right").ticks(5).tickFormat(bytes));
  plot.selectAll("rect.bar").data(hist).enter().append("rect")
    .attr("class", "bar duration").attr("data-id", c => c.id)
    .attr("x", c => x(c.id)).attr("width", x.rangeBand())
    .attr("y", c => yd(c.end_to_end_duration)).attr("height", c => h - yd(c.end_to_end_duration))
    .append("title").text(c => `#${c.id}: ${ms(c.end_to_end_duration)}, ${bytes(c.state_size)}`);
  const line = key => d3.svg.line().x(c => x(c.id) + x.rangeBand() / 2).y(c => ys(c[key]));
  plot.append("path").datum(hist).attr("class", "line size").attr("d", line("state_size"));
  const incremental = hist.filter(c => c.incremental_size !== null && c.incremental_size !== undefined);
  if (incremental.length) plot.append("path").datum(incremental).attr("class", "line incremental")
    .attr("d", line("incremental_size"));
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
