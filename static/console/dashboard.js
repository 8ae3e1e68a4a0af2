// The live dashboard: renders a snapshot (console/dashboard.py) and re-renders each one the websocket pushes.
"use strict";
(function () {
  const cfg = document.getElementById("config").dataset;
  const canOperate = cfg.canOperate === "1";
  const csrf = document.querySelector("#csrf input[name=csrfmiddlewaretoken]").value;
  const SUBTYPES = ["PENDING", "RETRY", "EXPIRED", "TIMEDOUT", "ERROR", "FAULT"];
  const PARKED = new Set(["EXPIRED", "TIMEDOUT", "ERROR", "FAULT"]);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) node.append(c);
    return node;
  }

  function state(on, onText, offText) {
    return el("span", { class: "state " + (on ? "state-on" : "state-off"), text: on ? onText || "started" : offText || "stopped" });
  }

  function toggle(process, service, started) {
    const action = started ? "stop" : "start";
    const form = el("form", { method: "post", action: cfg.processUrl.replace("PROCESS", process).replace("ACTION", action) });
    form.append(el("input", { type: "hidden", name: "csrfmiddlewaretoken", value: csrf }));
    form.append(el("input", { type: "hidden", name: "service", value: service }));
    form.append(el("input", { type: "hidden", name: "next", value: "/" }));
    form.append(el("button", {
      type: "submit", class: started ? "small danger" : "small",
      "aria-label": `${action} ${process} of ${service}`, text: action,
    }));
    return form;
  }

  function depthCell(service, subtype, value) {
    const cls = ["num"];
    if (value === null || value === undefined) return el("td", { class: "num muted", "data-area": subtype, text: "?", title: "broker unreachable" });
    if (value > 0 && PARKED.has(subtype)) cls.push("attention");
    const link = el("a", {
      href: cfg.areaUrl.replace("SERVICE", encodeURIComponent(service)).replace("SUBTYPE", subtype),
      "aria-label": `${service} ${subtype}: ${value} messages`, text: value.toLocaleString("en"),
    });
    return el("td", { class: cls.join(" "), "data-area": subtype }, link);
  }

  const BREAKER = { closed: ["state-on", "closed"], open: ["state-bad", "open"], half_open: ["state-warn", "half-open"] };

  function breakerCell(b) {
    if (!b) return el("td", { class: "muted breaker", text: "none", title: "no circuit breaker on this unit" });
    const [cls, text] = BREAKER[b.state] || ["state-off", b.state];
    const counts = `${b.consecutive_failures}/${b.threshold} failures · opened ${b.opens}× · closed ${b.closes}×`;
    const since = b.since ? ` since ${new Date(b.since).toLocaleTimeString()}` : "";
    return el("td", { class: "breaker", "data-breaker": b.state },
      el("span", { class: "state " + cls, text, title: `cool-down ${b.cooldown} s` }),
      el("small", { class: "muted", text: " " + counts + since }));
  }

  function renderGroups(snap) {
    const body = document.getElementById("groups-body");
    const rows = (snap.blocked_groups || []).map((g) => el("tr", { "data-group": g.group },
      el("td", { text: g.service }),
      el("th", { scope: "row", text: g.group }),
      el("td", {}, el("a", { href: cfg.messageUrl.replace("MESSAGE", encodeURIComponent(g.blocked_by)), text: g.blocked_by })),
      el("td", { text: g.reason || "—" }),
      el("td", {}, el("span", { class: "state " + (g.phase === "blocked" ? "state-bad" : "state-warn"), text: g.phase })),
      el("td", { text: g.since ? new Date(g.since).toLocaleString() : "—" })));
    if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: "6", class: "muted", text: "No ordered group is waiting." })));
    body.replaceChildren(...rows);
    const problem = document.getElementById("protection-error");
    problem.textContent = snap.protection_error || "";
    problem.hidden = !snap.protection_error;
  }

  function renderUnits(snap) {
    const body = document.getElementById("units-body");
    const rows = snap.units.map((u) => {
      const name = el("a", { href: cfg.unitUrl.replace("SERVICE", encodeURIComponent(u.service)), text: u.service });
      const posting = el("td", {}, state(u.posting_started));
      const sending = el("td", {}, state(u.sending_started));
      if (canOperate) {
        posting.append(toggle("posting", u.service, u.posting_started));
        sending.append(toggle("sending", u.service, u.sending_started));
      }
      const per = el("td", { class: "instances" });
      const names = Object.keys(u.sending_on);
      if (names.length === 0) per.append(el("span", { class: "muted", text: "no live instance" }));
      for (const n of names) per.append(el("span", { class: "inst" }, n + " ", state(u.sending_on[n], "sending", "idle")));
      return el("tr", { "data-service": u.service }, el("th", { scope: "row" }, name), posting, sending, per,
        breakerCell(u.breaker), ...SUBTYPES.map((s) => depthCell(u.service, s, u.areas[s])));
    });
    body.replaceChildren(...rows);
    document.getElementById("no-units").hidden = snap.units.length > 0;
  }

  function renderInstances(snap) {
    const body = document.getElementById("instances-body");
    const rows = snap.instances.map((i) => el("tr", {},
      el("th", { scope: "row", text: i.name }),
      el("td", {}, i.alive ? state(i.connection_status === "connected", "connected", i.connection_status) : el("span", { class: "state state-bad", text: "no heartbeat" })),
      el("td", { text: new Date(i.last_heartbeat).toLocaleTimeString() }),
      el("td", { class: "num", text: String(i.in_flight) }),
      el("td", { text: i.sending_services.join(", ") || "—" })));
    if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: "5", class: "muted", text: "No worker instance has reported. Start a Celery worker." })));
    body.replaceChildren(...rows);
    const live = snap.instances.filter((i) => i.alive).length;
    document.getElementById("instances-count").replaceChildren(
      live > 0 ? state(true, `${live} live`) : el("span", { class: "state state-bad", text: "none live" }));
  }

  function renderChart(rates) {
    const holder = document.getElementById("chart");
    const W = Math.max(240, holder.clientWidth || 600), H = 170, P = 24, L = 40;
    const series = ["accepted", "delivered", "failed"];
    const max = Math.max(1, ...series.flatMap((s) => rates[s]));
    const n = rates.minutes.length;
    const x = (i) => L + (i * (W - L - P)) / Math.max(1, n - 1);
    const y = (v) => H - P - (v * (H - 2 * P)) / max;
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const axis = document.createElementNS(ns, "path");
    axis.setAttribute("d", `M${L} ${P} V${H - P} H${W - P}`);
    axis.setAttribute("class", "axis");
    svg.append(axis);
    const labels = [[String(max), L - 6, P + 4, "end"], ["0", L - 6, H - P + 4, "end"],
      ["30 min ago", L, H - 6, "start"], ["now", W - P, H - 6, "end"]];
    for (const [label, xx, yy, anchor] of labels) {
      const t = document.createElementNS(ns, "text");
      t.setAttribute("x", xx); t.setAttribute("y", yy); t.setAttribute("text-anchor", anchor);
      t.textContent = label;
      svg.append(t);
    }
    for (const s of series) {
      const line = document.createElementNS(ns, "polyline");
      line.setAttribute("points", rates[s].map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
      line.setAttribute("class", "s-" + s);
      svg.append(line);
    }
    holder.replaceChildren(svg);
    for (const s of series) document.getElementById("total-" + s).textContent = rates.totals[s].toLocaleString("en");
  }

  let lastRates = null;
  window.addEventListener("resize", () => { if (lastRates) renderChart(lastRates); });

  function render(snap) {
    lastRates = snap.rates;
    const b = snap.broker;
    document.getElementById("broker-status").replaceChildren(
      b.status === "connected" ? state(true, "connected") : el("span", { class: "state state-bad", text: "unreachable", title: b.error }));
    renderUnits(snap);
    renderInstances(snap);
    renderGroups(snap);
    renderChart(snap.rates);
    document.body.dataset.snapshotAt = snap.at;
  }

  function live(text, ok) {
    document.getElementById("live-status").replaceChildren(
      el("span", { class: "state " + (ok ? "state-on" : "state-bad"), text }));
  }

  let delay = 500;
  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(proto + location.host + cfg.ws);
    ws.onopen = () => { delay = 500; live("live", true); };
    ws.onmessage = (e) => {
      const msg = JSON.parse(e.data);
      if (msg.event === "snapshot") {
        render(msg.data);
        live("live · " + new Date(msg.data.at).toLocaleTimeString(), true);
      }
    };
    ws.onclose = () => {
      live("reconnecting…", false);
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }

  render(JSON.parse(document.getElementById("snapshot").textContent));
  connect();
})();
