// A report's page: live progress (polls GET /api/reports/<id>/ until it has finished), then its results drawn
// as hand-made SVG charts (outcomes per hour, latency percentiles, attempts, top reasons) and tables with CSV links.
"use strict";
(function () {
  const box = document.getElementById("report");
  const bar = document.getElementById("report-progress");
  const stage = document.getElementById("report-stage");
  const status = document.getElementById("report-status");
  const result = document.getElementById("report-result");
  const COLUMNS = JSON.parse(document.getElementById("report-columns").textContent);
  const CLASSES = { succeeded: "state-on", failed: "state-bad", running: "state-warn", queued: "state-off" };
  const NS = "http://www.w3.org/2000/svg";
  const OUTCOMES = ["acked", "faulted", "errored", "timed_out", "expired"];
  const PERCENTILES = ["p50", "p95", "p99"];
  const TITLES = {
    outcomes: "Outcomes per service per hour", latency: "Post → ack latency (ms)", attempts: "Attempts distribution",
    retries: "Retries and their success rate", reasons: "Top fault and error reasons", parking: "Time parked before purge or recycle (s)",
  };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString("en") : v.toLocaleString("en", { maximumFractionDigits: 3 });
    return String(v);
  }

  function frame(holder, height) {
    const W = Math.max(260, holder.clientWidth || 600);
    const root = svg("svg", { viewBox: `0 0 ${W} ${height}`, style: `height:${height}px` });
    holder.replaceChildren(root);
    return [root, W];
  }

  function empty(holder, text) {
    holder.replaceChildren(el("p", { class: "muted", text }));
  }

  // -- outcomes per hour: one line per outcome, every selected service summed -----------------------------
  function hours(data, rows) {
    const start = new Date(data.parameters.start), end = new Date(data.parameters.end);
    const first = Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), start.getUTCDate(), start.getUTCHours());
    const count = Math.ceil((end - first) / 3600000);
    if (count > 0 && count <= 24 * 31) return Array.from({ length: count }, (_, i) => first + i * 3600000);
    return [...new Set(rows.map((r) => Date.parse(r.hour)))].sort((a, b) => a - b);
  }

  function label(ms, withDay) {
    const d = new Date(ms).toISOString();
    return withDay ? d.slice(5, 10) + " " + d.slice(11, 16) : d.slice(11, 16);
  }

  function outcomesChart(data) {
    const holder = document.getElementById("chart-outcomes");
    const rows = data.results.outcomes || [];
    const xs = hours(data, rows);
    if (xs.length === 0) return empty(holder, "No outcome in this range.");
    const index = new Map(xs.map((h, i) => [h, i]));
    const series = Object.fromEntries(OUTCOMES.map((o) => [o, xs.map(() => 0)]));
    for (const r of rows) {
      const i = index.get(Date.parse(r.hour));
      if (i !== undefined) for (const o of OUTCOMES) series[o][i] += r[o] || 0;
    }
    const H = 190, P = 24, L = 44;
    const [root, W] = frame(holder, H);
    const max = Math.max(1, ...OUTCOMES.flatMap((o) => series[o]));
    const n = xs.length;
    const x = (i) => (n === 1 ? (L + W - P) / 2 : L + (i * (W - L - P)) / (n - 1));
    const y = (v) => H - P - (v * (H - 2 * P)) / max;
    root.append(svg("path", { d: `M${L} ${P} V${H - P} H${W - P}`, class: "axis" }));
    const days = new Date(xs[0]).toISOString().slice(0, 10) !== new Date(xs[n - 1]).toISOString().slice(0, 10);
    for (const [t, xx, yy, anchor] of [[fmt(max), L - 6, P + 4, "end"], ["0", L - 6, H - P + 4, "end"],
      [label(xs[0], days), n === 1 ? x(0) : L, H - 6, n === 1 ? "middle" : "start"]]) {
      root.append(svg("text", { x: xx, y: yy, "text-anchor": anchor }, t));
    }
    if (n > 1) root.append(svg("text", { x: W - P, y: H - 6, "text-anchor": "end" }, label(xs[n - 1], days)));
    for (const o of OUTCOMES) {
      const points = series[o].map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
      root.append(svg("polyline", { points: points.join(" "), class: "s-" + o, "data-series": o }));
      if (n <= 48) {
        series[o].forEach((v, i) => {
          const dot = svg("circle", { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 3, class: "s-" + o });
          dot.append(svg("title", {}, `${label(xs[i], true)} UTC: ${v} ${o.replace("_", " ")}`));
          root.append(dot);
        });
      }
    }
  }

  // -- vertical bars (grouped) ----------------------------------------------------------------------------
  function bars(holder, groups, keys, unit) {
    const H = 200, P = 22, L = 50, B = 34;
    const [root, W] = frame(holder, H);
    const max = Math.max(1, ...groups.flatMap((g) => keys.map((k) => g.values[k] || 0)));
    const y = (v) => H - B - (v * (H - B - P)) / max;
    root.append(svg("path", { d: `M${L} ${P} V${H - B} H${W - 8}`, class: "axis" }));
    root.append(svg("text", { x: L - 6, y: P + 4, "text-anchor": "end" }, fmt(max) + unit));
    root.append(svg("text", { x: L - 6, y: H - B + 4, "text-anchor": "end" }, "0"));
    const slot = (W - L - 8) / groups.length;
    const width = Math.min(40, (slot * 0.8) / keys.length);
    groups.forEach((g, gi) => {
      const left = L + gi * slot + (slot - width * keys.length) / 2;
      keys.forEach((k, ki) => {
        const v = g.values[k] || 0;
        const rect = svg("rect", { x: (left + ki * width).toFixed(1), y: y(v).toFixed(1), width: (width - 2).toFixed(1),
          height: Math.max(0, H - B - y(v)).toFixed(1), class: "bar s-" + k, "data-group": g.label, "data-key": k });
        rect.append(svg("title", {}, `${g.label} ${k}: ${fmt(v)}${unit}`));
        root.append(rect);
        root.append(svg("text", { x: (left + ki * width + width / 2 - 1).toFixed(1), y: (y(v) - 3).toFixed(1), "text-anchor": "middle", class: "value" }, fmt(v)));
      });
      root.append(svg("text", { x: (L + gi * slot + slot / 2).toFixed(1), y: H - B + 16, "text-anchor": "middle", class: "group" }, g.label));
    });
  }

  function latencyChart(data) {
    const holder = document.getElementById("chart-latency");
    const rows = data.results.latency || [];
    if (rows.length === 0) return empty(holder, "No message was posted and acknowledged in this range.");
    bars(holder, rows.map((r) => ({ label: r.service, values: { p50: r.p50_ms, p95: r.p95_ms, p99: r.p99_ms } })), PERCENTILES, " ms");
  }

  function attemptsChart(data) {
    const holder = document.getElementById("chart-attempts");
    const sums = new Map();
    for (const r of data.results.attempts || []) sums.set(r.attempts, (sums.get(r.attempts) || 0) + r.messages);
    if (sums.size === 0) return empty(holder, "No attempt in this range.");
    const groups = [...sums.entries()].sort((a, b) => a[0] - b[0])
      .map(([n, count]) => ({ label: `${n} attempt${n === 1 ? "" : "s"}`, values: { messages: count } }));
    bars(holder, groups, ["messages"], "");
  }

  // -- horizontal bars: top reasons -----------------------------------------------------------------------
  function reasonsChart(data) {
    const holder = document.getElementById("chart-reasons");
    const rows = data.results.reasons || [];
    if (rows.length === 0) return empty(holder, "No fault or error in this range.");
    const R = 24, H = rows.length * R + 8;
    const [root, W] = frame(holder, H);
    const labelWidth = Math.min(420, W * 0.5);
    const max = Math.max(1, ...rows.map((r) => r.count));
    rows.forEach((r, i) => {
      const text = `${r.service} · ${r.kind} · ${r.target_status ?? "—"} · ${r.reason || "(no reason)"}`;
      const t = svg("text", { x: labelWidth - 8, y: i * R + 17, "text-anchor": "end", class: "group" },
        text.length > 70 ? text.slice(0, 69) + "…" : text);
      t.append(svg("title", {}, text));
      root.append(t);
      const w = ((W - labelWidth - 50) * r.count) / max;
      root.append(svg("rect", { x: labelWidth, y: i * R + 4, width: Math.max(1, w).toFixed(1), height: R - 8, class: "bar s-" + r.kind, "data-reason": r.reason || "" }));
      root.append(svg("text", { x: (labelWidth + w + 6).toFixed(1), y: i * R + 17, class: "value" }, fmt(r.count)));
    });
  }

  // -- tables ---------------------------------------------------------------------------------------------
  function tables(data) {
    const out = [];
    for (const [name, columns] of Object.entries(COLUMNS)) {
      const rows = data.results[name] || [];
      const heading = el("div", { class: "heading" }, el("h3", { text: TITLES[name] || name }));
      if (data.csv[name]) heading.append(el("a", { href: data.csv[name], class: "button small", download: "", text: `${name}.csv`, "aria-label": `Download ${name} as CSV` }));
      const numeric = (c) => rows.length > 0 && typeof rows[0][c] === "number";
      const head = el("tr", {}, ...columns.map((c) => el("th", { scope: "col", class: numeric(c) ? "num" : "", text: c.replace(/_/g, " ") })));
      const body = rows.map((r) => el("tr", {}, ...columns.map((c) => el("td", { class: typeof r[c] === "number" ? "num" : "", text: fmt(r[c]) }))));
      if (body.length === 0) body.push(el("tr", {}, el("td", { colspan: String(columns.length), class: "muted", text: "No row." })));
      out.push(el("section", { class: "report-table", "data-report": name }, heading,
        el("div", { class: "scroll" }, el("table", {}, el("thead", {}, head), el("tbody", {}, ...body)))));
    }
    document.getElementById("tables").replaceChildren(...out);
  }

  let shown = null;
  function renderResults(data) {
    shown = data;
    document.getElementById("results").hidden = false;
    outcomesChart(data);
    latencyChart(data);
    attemptsChart(data);
    reasonsChart(data);
    tables(data);
  }
  window.addEventListener("resize", () => {
    if (shown) { outcomesChart(shown); latencyChart(shown); attemptsChart(shown); reasonsChart(shown); }
  });

  function show(data) {
    bar.value = data.progress;
    stage.textContent = data.status === "queued" ? "waiting for a worker" : data.stage || data.status;
    status.replaceChildren(el("span", { class: "state " + (CLASSES[data.status] || "state-off"), text: data.status }));
    box.dataset.status = data.status;
    if (data.status === "succeeded") {
      result.textContent = `Done: ${fmt(data.events)} history events read.`;
      renderResults(data);
    } else if (data.status === "failed") {
      result.replaceChildren(el("span", { class: "error", text: data.error }));
    }
  }

  async function poll() {
    let data;
    try {
      const response = await fetch(box.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      data = await response.json();
    } catch (err) {
      result.textContent = "Progress unavailable (" + err.message + "); retrying…";
      setTimeout(poll, 2000);
      return;
    }
    result.textContent = "";
    show(data);
    if (data.status === "queued" || data.status === "running") setTimeout(poll, 500);
  }

  const initial = JSON.parse(document.getElementById("report-data").textContent);
  show(initial);
  if (initial.status === "queued" || initial.status === "running") poll();
})();
