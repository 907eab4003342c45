// The dashboard's script: polls /dashboard/data every 2 s and redraws. No library: tables are
// filled with textContent (never HTML from data), charts are plain SVG lines and bars.
"use strict";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const SVG = "http://www.w3.org/2000/svg";
const int = (n) => Math.round(n).toLocaleString("en-US");
const pct = (x) => (x == null ? "not reported" : (100 * x).toFixed(1) + "%");  // null: a server that never said
const age = (s) => (s == null ? "-" : s < 90 ? s.toFixed(0) + " s" : (s / 60).toFixed(1) + " min");

function cell(tr, text, cls, field) {
  const td = tr.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  if (field) td.dataset.field = field;
  return td;
}

function fill(id, rows, render) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren();
  for (const row of rows) render(body.insertRow(), row);
}

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  parent.appendChild(node);
  return node;
}

// series: [{label, values: [number|null], dashed, color}], x labels: epoch seconds or strings.
function chart(id, xs, series, opts = {}) {
  const svg = document.getElementById(id);
  const legend = document.getElementById("legend-" + id.replace("chart-", ""));
  const w = svg.clientWidth || 440, h = svg.clientHeight || 180, pad = { l: 44, r: 8, t: 8, b: 20 };
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.replaceChildren();
  legend.replaceChildren();
  const all = series.flatMap((s) => s.values.filter((v) => v != null));
  const top = opts.max ?? Math.max(1e-9, ...all) * 1.1;
  const x = (i) => pad.l + (i * (w - pad.l - pad.r)) / Math.max(1, xs.length - 1);
  const y = (v) => h - pad.b - (v / top) * (h - pad.t - pad.b);
  for (const f of [0, 0.5, 1]) {
    el("line", { x1: pad.l, x2: w - pad.r, y1: y(top * f), y2: y(top * f), stroke: "#e5e7eb" }, svg);
    el("text", { x: pad.l - 4, y: y(top * f) + 4, "text-anchor": "end", "font-size": 10, fill: "#6b7280" }, svg)
      .textContent = opts.format ? opts.format(top * f) : (top * f).toPrecision(2);
  }
  if (xs.length) {
    for (const i of [0, xs.length - 1]) {
      el("text", { x: x(i), y: h - 4, "text-anchor": i ? "end" : "start", "font-size": 10, fill: "#6b7280" }, svg)
        .textContent = typeof xs[i] === "number" ? new Date(xs[i] * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : xs[i];
    }
  }
  series.forEach((s, k) => {
    const color = s.color || COLORS[k % COLORS.length];
    if (opts.bars) {
      const bw = Math.max(2, (w - pad.l - pad.r) / Math.max(1, xs.length) / series.length - 2);
      s.values.forEach((v, i) => {
        if (v) el("rect", { x: x(i) - (bw * series.length) / 2 + k * bw, y: y(v), width: bw, height: y(0) - y(v), fill: color }, svg);
      });
    } else {
      let d = "";
      s.values.forEach((v, i) => { if (v != null) d += `${d && s.values[i - 1] != null ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`; });
      if (d) el("path", { d, fill: "none", stroke: color, "stroke-width": 2, "stroke-dasharray": s.dashed ? "5 4" : "none" }, svg);
      // A minute with neighbours missing on both sides is no line at all: a dot, then.
      s.values.forEach((v, i) => {
        if (v != null && s.values[i - 1] == null && s.values[i + 1] == null) {
          el("circle", { cx: x(i), cy: y(v), r: s.dashed ? 2 : 3.5, fill: s.dashed ? "none" : color, stroke: color }, svg);
        }
      });
    }
    if (!s.dashed) {
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = color;
      item.append(swatch, s.label);
      legend.appendChild(item);
    }
  });
  if (!series.length) {
    el("text", { x: w / 2, y: h / 2, "text-anchor": "middle", fill: "#9ca3af" }, svg).textContent = "no data yet";
  }
}

function render(d) {
  document.getElementById("updated").textContent = "updated " + new Date(d.at * 1000).toLocaleTimeString();

  const bill = Object.entries(d.bill.collections).filter(([, t]) => t.calls);
  fill("bill", bill, (tr, [name, t]) => {
    tr.dataset.collection = name;
    cell(tr, name);
    cell(tr, int(t.calls), "n", "calls");
    cell(tr, int(t.input_tokens), "n", "input_tokens");
    cell(tr, int(t.cache_write_tokens), "n", "cache_write_tokens");
    cell(tr, t.cache_read_tokens == null ? "not reported" : int(t.cache_read_tokens), "n", "cache_read_tokens");
    cell(tr, int(t.output_tokens), "n", "output_tokens");
    cell(tr, `${pct(t.cache_read_ratio)} (${pct(t.best_read_ratio)})`, "n", "cache_read");
    cell(tr, t.cost_usd.toFixed(4), "n", "cost_usd");
    cell(tr, `${t.http_429} / ${t.http_529} / ${t.http_5xx}`, "n", "faults");
  });

  fill("replicas", Object.entries(d.replicas || {}), (tr, [label, r]) => {
    cell(tr, label);
    cell(tr, int(r.calls), "n", "calls");
    cell(tr, pct(r.cache_read_ratio), "n", "cache_read");
    cell(tr, int(r.in_flight), "n", "in_flight");
    cell(tr, int(r.moved_away), "n", "moved_away");
    cell(tr, r.down ? "down" : "up", "", "state");
  });
  document.getElementById("replicas-section").hidden = !Object.keys(d.replicas || {}).length;

  const s = d.series;
  const colorOf = {};
  Object.keys(s.cache_read_ratio).concat(Object.keys(s.best_read_ratio)).forEach((k) => {
    if (!(k in colorOf)) colorOf[k] = COLORS[Object.keys(colorOf).length % COLORS.length];
  });
  chart("chart-throughput", s.minutes, Object.entries(s.chunks_per_minute).map(([label, values]) => ({ label, values })),
        { format: (v) => v.toFixed(0) });
  chart("chart-cache", s.minutes, [
    ...Object.entries(s.cache_read_ratio).map(([label, values]) => ({ label, values, color: colorOf[label] })),
    ...Object.entries(s.best_read_ratio).map(([label, values]) => ({ label, values, color: colorOf[label], dashed: true })),
  ], { max: 1, format: pct });
  chart("chart-latency", s.minutes, [
    ...Object.entries(s.latency_p50_s).map(([label, values]) => ({ label: label + " p50", values })),
    ...Object.entries(s.latency_p95_s).map(([label, values]) => ({ label: label + " p95", values })),
  ], { format: (v) => v.toFixed(1) });
  chart("chart-spend", d.spend.days.map((day) => day.slice(5)),
        Object.entries(d.spend.by_collection).map(([label, values]) => ({ label, values })),
        { bars: true, format: (v) => v.toFixed(3) });
  fill("spend-models", Object.entries(d.spend.by_model), (tr, [model, values]) => {
    const lat = d.latency[model] || {};
    cell(tr, model);
    cell(tr, values.reduce((a, b) => a + b, 0).toFixed(4), "n");
    cell(tr, lat.p50 == null ? "-" : lat.p50.toFixed(2), "n");
    cell(tr, lat.p95 == null ? "-" : lat.p95.toFixed(2), "n");
  });

  fill("collections", d.collections, (tr, c) => {
    tr.dataset.collection = c.collection;
    cell(tr, c.collection);
    cell(tr, Object.entries(c.documents).sort().map(([k, v]) => `${k}=${v}`).join(", ") || "-", "", "documents");
    cell(tr, c.chunks_indexed == null ? "?" : int(c.chunks_indexed), "n", "chunks");
    cell(tr, c.contextualizer + (c.model ? ` (${c.model})` : ""));
    const flag = c.model_status;
    cell(tr, flag ? `${flag.status}: ${flag.command}` + (flag.estimate_usd == null ? "" : ` (about $${flag.estimate_usd.toFixed(2)})`)
      : (c.reindex ? `reindex: ${c.reindex}` : "-"), flag ? "warn" : "", "model-status");
  });
  fill("queues", Object.entries(d.queues), (tr, [name, q]) => {
    tr.dataset.queue = name;
    cell(tr, name);
    cell(tr, int(q.waiting), "n", "waiting");
    cell(tr, int(q.parked), "n", "parked");
    cell(tr, age(q.oldest_s), "n", "oldest");
  });
  document.getElementById("unacked").textContent =
    `${d.unacked.count} delivered, not yet acknowledged; stalest heartbeat ${age(d.unacked.oldest_heartbeat_s)} ago`;
  document.getElementById("workers-count").textContent = d.workers.length;
  fill("workers", d.workers, (tr, w) => {
    cell(tr, `${w.hostname} (pid ${w.pid}, ${w.concurrency ?? "?"} slots)`);
    cell(tr, w.queues.join(", "));
    cell(tr, w.active.map((a) => `${a.task} ${a.collection}/${a.doc_id} ${age(a.running_s)}`).join("; ") || "idle",
         w.active.length ? "" : "muted");
  });
  fill("failed", d.failed, (tr, f) => {
    cell(tr, f.collection);
    cell(tr, f.doc_id);
    cell(tr, f.error || "", "bad");
    const button = document.createElement("button");
    button.textContent = "Retry";
    button.dataset.collection = f.collection;
    button.dataset.docId = f.doc_id;
    button.addEventListener("click", () => retry(f.collection, [f.doc_id]));
    tr.insertCell().appendChild(button);
  });
  document.getElementById("retry-all").hidden = !d.failed.length;
}

async function post(path, body) {
  const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF },
                                body: JSON.stringify(body ?? {}), credentials: "same-origin" });
  return [r.status, await r.json().catch(() => ({}))];
}

async function retry(collection, docIds) {
  const [status, body] = await post("/dashboard/retry", { collection, doc_ids: docIds });
  document.getElementById("retry-result").textContent = status === 200
    ? body.retried.map((r) => `${r.doc_id}: ${r.outcome}`).join(", ")
    : `retry refused (${status}): ${body.detail ?? ""}`;
  refresh();
}

document.getElementById("retry-all").addEventListener("click", () => {
  const byCollection = {};
  document.querySelectorAll("#failed button[data-doc-id]").forEach((b) => {
    (byCollection[b.dataset.collection] ??= []).push(b.dataset.docId);
  });
  Object.entries(byCollection).forEach(([c, ids]) => retry(c, ids));
});

document.getElementById("signout").addEventListener("click", async () => {
  await post("/dashboard/logout");
  location.reload();
});

async function refresh() {
  try {
    const r = await fetch("/dashboard/data", { credentials: "same-origin" });
    if (r.status === 401) { location.reload(); return; }
    render(await r.json());
  } catch (e) {
    document.getElementById("updated").textContent = "update failed: " + e;
  }
}

refresh();
setInterval(refresh, 2000);
