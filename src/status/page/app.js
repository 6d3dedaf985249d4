// The dashboard: reads /v1/status every interval and draws it. Every figure a test or a person
// may read carries data-figure (its name) and data-value (the raw number from the report).
"use strict";

const SOURCES = ["pool", "solved", "shared"];
const COLORS = { pool: "#3fb950", solved: "#58a6ff", shared: "#e3b341", errors: "#f85149", threads_in_use: "#58a6ff", threads_cap: "#8a96a8" };

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function num(n) {
  if (n === null || n === undefined) return "\u2013";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return String(Math.round(n));
}
function rate(r) {
  if (r === null || r === undefined) return "\u2013";
  if (r === 0) return "0";
  if (r >= 100) return r.toFixed(0);
  if (r >= 10) return r.toFixed(1);
  return r.toFixed(2);
}
function secs(s) {
  if (s === null || s === undefined) return "\u2013";
  if (s < 1) return Math.round(s * 1000) + " ms";
  if (s < 100) return s.toFixed(1) + " s";
  return Math.round(s) + " s";
}
function money(x, currency) { return x.toFixed(2) + " " + currency; }
function windowText(s) { return s >= 90 ? Math.round(s / 60) + " min" : Math.max(1, Math.round(s)) + " s"; }
function pct(x) { return x === null || x === undefined ? "\u2013" : (x * 100).toFixed(x < 0.1 && x > 0 ? 1 : 0) + "%"; }
function attr(name, value) { return 'data-figure="' + esc(name) + '" data-value="' + esc(value === null || value === undefined ? "" : value) + '"'; }

function setFig(name, value, text) {
  for (const el of document.querySelectorAll('[data-figure="' + name + '"]')) {
    el.setAttribute("data-value", value === null || value === undefined ? "" : String(value));
    el.textContent = text;
  }
}

// A line chart in inline SVG: one line (and a faint area) per series, a y axis from zero to a
// round maximum, and time labels counted back from the newest point.
function lineChart(el, points, series) {
  const w = Math.max(el.clientWidth, 200), h = Math.max(el.clientHeight, 60);
  const left = 34, right = 6, top = 6, bottom = 16;
  const iw = w - left - right, ih = h - top - bottom;
  let max = 0;
  for (const p of points) for (const s of series) max = Math.max(max, p[s] || 0);
  max = niceMax(max);
  const t0 = points.length ? points[0].t_ms : 0, t1 = points.length ? points[points.length - 1].t_ms : 1;
  const span = Math.max(t1 - t0, 1);
  const x = t => left + ((t - t0) / span) * iw;
  const y = v => top + ih - (v / max) * ih;
  let svg = '<svg viewBox="0 0 ' + w + " " + h + '" preserveAspectRatio="none" role="img">';
  for (const f of [0, 0.5, 1]) {
    const yy = y(max * f).toFixed(1);
    svg += '<line class="grid-line" x1="' + left + '" x2="' + (w - right) + '" y1="' + yy + '" y2="' + yy + '"/>';
    svg += '<text x="' + (left - 4) + '" y="' + (+yy + 3) + '" text-anchor="end">' + rate(max * f) + "</text>";
  }
  if (points.length > 1) {
    const minutes = span / 60000;
    const step = minutes > 10 ? 5 : minutes > 4 ? 2 : 1;
    for (let m = 0; m <= minutes; m += step) {
      const xx = x(t1 - m * 60000);
      svg += '<text x="' + xx.toFixed(1) + '" y="' + (h - 3) + '" text-anchor="' + (m === 0 ? "end" : "middle") + '">' + (m === 0 ? "now" : "\u2212" + m + "m") + "</text>";
    }
    for (const s of series) {
      const line = points.map(p => x(p.t_ms).toFixed(1) + "," + y(p[s] || 0).toFixed(1)).join(" ");
      const area = left + "," + y(0) + " " + line + " " + x(t1).toFixed(1) + "," + y(0);
      svg += '<polygon points="' + area + '" fill="' + COLORS[s] + '" fill-opacity="0.08"/>';
      svg += '<polyline points="' + line + '" fill="none" stroke="' + COLORS[s] + '" stroke-width="1.6" stroke-linejoin="round"/>';
    }
  } else {
    svg += '<text x="' + (left + iw / 2) + '" y="' + (top + ih / 2) + '" text-anchor="middle">history starts with the next samples</text>';
  }
  el.innerHTML = svg + "</svg>";
}
function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function bar(fraction, cls, mark) {
  const f = Math.max(0, Math.min(1, fraction || 0));
  let html = '<div class="bar"><div class="fill ' + cls + '" style="width:' + (f * 100).toFixed(1) + '%"></div>';
  if (mark !== undefined) html += '<div class="mark" style="left:calc(' + (Math.min(1, mark) * 100).toFixed(1) + '% - 1px)"></div>';
  return html + "</div>";
}

// Ready answers (green), then tasks in flight (blue) after them, and the target as a mark.
function stacked(ready, flight, mark) {
  const r = Math.max(0, Math.min(1, ready || 0)), f = Math.max(0, Math.min(1 - r, flight || 0));
  let html = '<div class="bar"><div class="fill" style="width:' + (r * 100).toFixed(1) + '%"></div>' +
    '<div class="fill flight" style="left:' + (r * 100).toFixed(1) + "%;width:" + (f * 100).toFixed(1) + '%"></div>';
  if (mark !== undefined) html += '<div class="mark" style="left:calc(' + (Math.min(1, mark) * 100).toFixed(1) + '% - 1px)"></div>';
  return html + "</div>";
}

function renderPools(r) {
  const el = document.getElementById("pools");
  if (!r.pools.length) { el.innerHTML = '<div class="empty">no target has had a caller yet</div>'; return; }
  let html = '<div class="row pools-row muted"><span>target</span><span><i class="key pool"></i>ready <i class="key flight"></i>in flight <i class="key mark"></i>target</span><span class="fig">ready</span><span class="fig">in flight</span><span class="fig">waiting</span><span class="fig">hit rate</span><span class="fig">waste</span></div>';
  const scale = Math.max(1, ...r.pools.map(p => Math.max(p.ready + p.in_flight, p.target_size || 0)));
  for (const p of r.pools) {
    const name = p.target + (p.targets ? " (" + p.targets + " targets)" : "");
    const mode = p.mode ? ' <span class="muted">' + esc(p.mode) + "</span>" : "";
    html += '<div class="row pools-row" data-pool="' + esc(p.target) + '">' +
      '<span class="name" title="' + esc(name) + '">' + esc(name) + mode + "</span>" +
      stacked(p.ready / scale, p.in_flight / scale, p.target_size ? p.target_size / scale : undefined) +
      '<span class="fig"><span ' + attr("pool-ready", p.ready) + ">" + num(p.ready) + "</span>" +
      (p.target_size !== null && p.target_size !== undefined ? ' <span class="muted">/ <span ' + attr("pool-target", p.target_size) + ">" + num(p.target_size) + "</span></span>" : "") + "</span>" +
      '<span class="fig" ' + attr("pool-in-flight", p.in_flight) + ">" + num(p.in_flight) + "</span>" +
      '<span class="fig" ' + attr("pool-waiting", p.waiting) + ">" + num(p.waiting) + "</span>" +
      '<span class="fig" ' + attr("pool-hit-rate", p.hit_rate) + ">" + pct(p.hit_rate) + "</span>" +
      '<span class="fig" ' + attr("pool-waste-rate", p.waste_rate) + ">" + pct(p.waste_rate) + "</span></div>";
  }
  el.innerHTML = html;
}

function renderAccounts(r) {
  const el = document.getElementById("accounts");
  if (!r.accounts.length) { el.innerHTML = '<div class="empty">no account</div>'; return; }
  let html = "";
  for (const a of r.accounts) {
    const cap = Math.max(a.threads, a.threads_cap, 1);
    html += '<div class="row" data-account="' + esc(a.name) + '">' +
      '<span class="name">' + esc(a.name) + '<span class="state ' + esc(a.state) + '">' + esc(a.state) + "</span></span>" +
      bar(a.threads_in_use / cap, a.threads_in_use >= a.threads_cap ? "hot" : "threads", a.threads_cap / cap) +
      '<span class="fig"><span ' + attr("account-threads-in-use", a.threads_in_use) + ">" + num(a.threads_in_use) + '</span> <span class="muted">/ <span ' + attr("account-threads-cap", a.threads_cap) + ">" + num(a.threads_cap) + "</span></span></span></div>";
  }
  html += '<div class="muted" style="margin-top:6px">submits ' + num(r.accounts.reduce((s, a) => s + a.submits, 0)) +
    " &middot; solved " + num(r.accounts.reduce((s, a) => s + a.solved, 0)) +
    " &middot; failed " + num(r.accounts.reduce((s, a) => s + a.failed, 0)) +
    " &middot; timed out " + num(r.accounts.reduce((s, a) => s + a.timeouts, 0)) + "</div>";
  el.innerHTML = html;
}

function renderLatency(r) {
  const rows = [["handout", "request \u2192 answer", r.latency.handout], ["solve", "upstream solve", r.latency.solve], ["ready_to_caller", "answer age at handout", r.latency.ready_to_caller]];
  let html = "<tr><th></th><th>n</th><th>p50</th><th>p90</th><th>p99</th></tr>";
  for (const [key, label, p] of rows) {
    html += "<tr><td class=\"name\">" + label + "</td><td " + attr("latency-" + key + "-count", p.count) + ">" + num(p.count) + "</td>" +
      ["p50", "p90", "p99"].map(q => "<td " + attr("latency-" + key + "-" + q, p[q]) + ">" + secs(p[q]) + "</td>").join("") + "</tr>";
  }
  document.getElementById("latency").innerHTML = html;
  document.getElementById("latency-note").textContent = "last " + windowText(r.window_s) + ", every handout";
}

function renderErrors(r) {
  const el = document.getElementById("errors");
  const rows = r.errors.filter(e => e.total > 0);
  if (!rows.length) { el.innerHTML = '<tr><td class="empty">no errors since start</td></tr>'; return; }
  rows.sort((a, b) => b.per_min - a.per_min || b.total - a.total);
  let html = "<tr><th>class</th><th>/ min</th><th>total</th></tr>";
  for (const e of rows) {
    html += "<tr><td class=\"name\">" + esc(e.class.replace(/_/g, " ")) + "</td><td " + attr("error-rate-" + e.class, e.per_min) + ">" + rate(e.per_min) +
      "</td><td " + attr("error-total-" + e.class, e.total) + ">" + num(e.total) + "</td></tr>";
  }
  el.innerHTML = html;
}

function renderQueue(r) {
  const el = document.getElementById("queue");
  if (!r.queue) return;
  const q = r.queue;
  el.className = "";
  el.innerHTML = "<table class=\"num\"><tr><th>queue</th><th>lag</th><th>dead letters</th></tr><tr><td class=\"name\">" + esc(q.name) +
    "</td><td " + attr("queue-lag", q.lag) + ">" + num(q.lag) + "</td><td " + attr("queue-dead-letters", q.dead_letters) + ">" + num(q.dead_letters) + "</td></tr></table>";
}

// "2 instances" for a fleet of serve processes; "1 front end, 2 workers" once workers publish.
function fleetWords(f) {
  const roles = f.roles || {};
  const count = (n, one, many) => n + " " + (n === 1 ? one : many);
  if (!roles.worker && !roles.other) return count(f.instances, "instance", "instances");
  const parts = [];
  if (roles.serve) parts.push(count(roles.serve, "front end", "front ends"));
  if (roles.worker) parts.push(count(roles.worker, "worker", "workers"));
  if (roles.other) parts.push(count(roles.other, "other", "others"));
  return parts.join(", ");
}

function render(r) {
  setFig("instances", r.fleet.instances, fleetWords(r.fleet));
  setFig("store", r.fleet.store, r.fleet.store === "redis" ? "fleet via Redis" : "embedded store");
  const per = r.answers.per_s, tot = r.answers.total;
  setFig("answers-rate", per.pool + per.solved + per.shared, rate(per.pool + per.solved + per.shared));
  setFig("answers-total", tot.pool + tot.solved + tot.shared, num(tot.pool + tot.solved + tot.shared));
  for (const s of SOURCES) {
    setFig("answers-rate-" + s, per[s], rate(per[s]));
    setFig("answers-total-" + s, tot[s], num(tot[s]));
  }
  const inUse = r.accounts.reduce((s, a) => s + a.threads_in_use, 0), cap = r.accounts.reduce((s, a) => s + a.threads_cap, 0);
  setFig("threads-in-use", inUse, num(inUse));
  setFig("threads-cap", cap, num(cap));
  document.getElementById("threads-meter").style.width = (cap ? Math.min(1, inUse / cap) * 100 : 0) + "%";
  setFig("admission-active", r.admission.active, num(r.admission.active));
  setFig("admission-limit", r.admission.running_limit, num(r.admission.running_limit));
  document.getElementById("admission-meter").style.width = (r.admission.running_limit ? Math.min(1, r.admission.active / r.admission.running_limit) * 100 : 0) + "%";
  setFig("latency-handout-p50", r.latency.handout.p50, secs(r.latency.handout.p50));
  setFig("latency-handout-p90", r.latency.handout.p90, secs(r.latency.handout.p90));
  document.getElementById("latency-window").textContent = num(r.latency.handout.count) + " answers, last " + windowText(r.window_s);
  const perMin = r.errors.reduce((s, e) => s + e.per_min, 0);
  setFig("errors-rate", perMin, rate(perMin));
  document.getElementById("errors-window").textContent = "last " + windowText(r.window_s);
  const top = r.errors.filter(e => e.per_min > 0).sort((a, b) => b.per_min - a.per_min).slice(0, 2);
  document.getElementById("errors-top").textContent = top.length ? top.map(e => e.class.replace(/_/g, " ")).join(", ") : "none";
  const chart = document.getElementById("rate-chart");
  chart.setAttribute("data-points", String(r.history.length));
  lineChart(chart, r.history, SOURCES);
  lineChart(document.getElementById("error-chart"), r.history, ["errors"]);
  lineChart(document.getElementById("threads-chart"), r.history, ["threads_in_use", "threads_cap"]);
  renderPools(r);
  renderAccounts(r);
  renderLatency(r);
  renderErrors(r);
  renderQueue(r);
  const at = new Date(r.at_ms);
  document.getElementById("updated").textContent = "v" + r.version + " \u00b7 updated " + at.toLocaleTimeString();
  document.body.setAttribute("data-updated", String(r.at_ms));
  document.body.setAttribute("data-window-s", String(r.window_s));
}

// The plan advice (GET /v1/advice, the last day): the threads it recommends beside the plan's
// cap and the figures behind them, and per kind what the demand log counted. Read once a
// minute: the log moves in 5-minute buckets.
function renderAdvice(a) {
  const t = a.threads;
  document.getElementById("advice-note").textContent = "last " + Math.round(a.window_s / 3600) + " h, " +
    a.buckets + (a.buckets === 1 ? " bucket of " : " buckets of ") + windowText(a.bucket_s) + " with demand, " + (a.scope === "fleet" ? "the whole fleet" : "this instance");
  let html = '<div class="advice-head">' +
    '<span>threads recommended <span class="big" ' + attr("advice-threads-recommended", t.recommended) + ">" + num(t.recommended) + "</span></span>" +
    '<span>plan allows <b ' + attr("advice-threads-cap", t.cap) + ">" + num(t.cap) + "</b></span>" +
    '<span>in use at the peak (Little\u2019s law) <b ' + attr("advice-threads-littles-law", t.littles_law_at_peak) + ">" + rate(t.littles_law_at_peak) + "</b></span>" +
    '<span>waiting then <b ' + attr("advice-threads-waiting", t.waiting_at_peak) + ">" + num(t.waiting_at_peak) + "</b></span>" +
    '<span>refused then <b ' + attr("advice-threads-refused", t.refused_at_peak) + ">" + num(t.refused_at_peak) + "</b></span>" +
    '<span>most seen in use <b ' + attr("advice-threads-observed", t.observed_peak_in_use) + ">" + num(t.observed_peak_in_use) + "</b></span></div>" +
    '<div class="advice-how muted" data-figure="advice-how">' + esc(t.how) + "</div>";
  if (a.cost) {
    html += '<div class="advice-head"><span>cost a month: now <b ' + attr("advice-cost-now", a.cost.now_per_month) + ">" + money(a.cost.now_per_month, a.cost.currency) +
      "</b></span><span>as recommended <b " + attr("advice-cost-recommended", a.cost.recommended_per_month) + ">" + money(a.cost.recommended_per_month, a.cost.currency) +
      '</b></span></div><div class="advice-how muted">' + esc(a.cost.how) + "</div>";
  }
  if (a.queue_workers) {
    const w = a.queue_workers;
    html += '<div class="advice-head"><span>queue workers: maxReplicaCount <b ' + attr("advice-max-replica-count", w.max_replica_count) + ">" + num(w.max_replica_count) +
      "</b></span><span>running now <b " + attr("advice-workers-now", w.workers_now) + ">" + num(w.workers_now) + '</b></span><span class="muted">' + esc(w.how) + "</span></div>";
  }
  if (a.accounts.length > 1 || (a.accounts.length === 1 && a.accounts[0].cost)) {
    html += '<table class="num"><tr><th>account</th><th>allows</th><th>recommended</th><th>in use at its peak</th><th>waiting then</th><th>solves</th><th>a month now</th><th>as recommended</th></tr>';
    for (const ac of a.accounts) {
      const c = ac.cost;
      html += '<tr data-advice-account="' + esc(ac.name) + '"><td class="name">' + esc(ac.name) + ' <span class="muted">' + esc(ac.provider) + "</span></td>" +
        "<td " + attr("advice-account-cap", ac.cap) + ">" + num(ac.cap) + "</td>" +
        "<td " + attr("advice-account-recommended", ac.recommended) + ">" + num(ac.recommended) + "</td>" +
        "<td " + attr("advice-account-littles-law", ac.littles_law_at_peak) + ">" + rate(ac.littles_law_at_peak) + "</td>" +
        "<td " + attr("advice-account-waiting", ac.waiting_at_peak) + ">" + num(ac.waiting_at_peak) + "</td>" +
        "<td " + attr("advice-account-solves", ac.solves) + ">" + num(ac.solves) + "</td>" +
        "<td " + attr("advice-account-cost-now", c ? c.now_per_month : null) + ">" + (c ? money(c.now_per_month, c.currency) : "\u2013") + "</td>" +
        "<td " + attr("advice-account-cost-recommended", c ? c.recommended_per_month : null) + ">" + (c ? money(c.recommended_per_month, c.currency) : "\u2013") + "</td></tr>";
    }
    html += "</table>";
  }
  html += advicePools(a) + adviceReplay(a.replay, a.cost ? a.cost.currency : "");
  if (!a.kinds.length) {
    html += '<div class="empty">no demand in the window yet</div>';
  } else {
    html += '<table class="num"><tr><th>kind</th><th>callers</th><th>peak / s</th><th>hung up</th><th>solves</th><th>mean solve</th><th>p50 / p95 solve</th><th>thread held / solve</th><th>pool hits</th><th>failed</th></tr>';
    for (const k of a.kinds) {
      const held = k.solves ? k.thread_seconds / k.solves : null;
      html += '<tr data-advice-kind="' + esc(k.kind) + '"><td class="name">' + esc(k.kind) + "</td>" +
        "<td " + attr("advice-callers", k.callers) + ">" + num(k.callers) + "</td>" +
        "<td " + attr("advice-peak-callers-per-s", k.peak_callers_per_s) + ">" + rate(k.peak_callers_per_s) + "</td>" +
        "<td " + attr("advice-departed", k.departed) + ">" + num(k.departed) + "</td>" +
        "<td " + attr("advice-solves", k.solves) + ">" + num(k.solves) + "</td>" +
        "<td " + attr("advice-mean-solve-s", k.mean_solve_s) + ">" + secs(k.mean_solve_s) + "</td>" +
        "<td " + attr("advice-solve-p95-s", k.solve_p95_s) + ">" + secs(k.solve_p50_s) + " / " + secs(k.solve_p95_s) + "</td>" +
        "<td " + attr("advice-thread-held-s", held) + ">" + secs(held) + "</td>" +
        "<td " + attr("advice-pool-hit-rate", k.pool_hit_rate) + ">" + pct(k.pool_hit_rate) + "</td>" +
        "<td " + attr("advice-failed", k.failed) + ">" + num(k.failed) + "</td></tr>";
    }
    html += "</table>";
  }
  const el = document.getElementById("advice");
  el.className = "";
  el.innerHTML = html;
}

// Each busy target's pool for the stated hit rate, beside the demand it comes from.
function advicePools(a) {
  if (!a.pools || !a.pools.length) return "";
  let html = '<table class="num"><tr><th>pool for ' + pct(a.pool_hit_rate_goal) + ' of callers</th><th>callers</th><th>peak / s</th><th>lead</th><th>now</th><th>recommended</th><th>hit rate (model)</th><th>hit rate (replay)</th><th>expired / day</th><th>seen: hit rate</th><th>seen: expired</th></tr>';
  for (const p of a.pools) {
    html += '<tr data-advice-pool="' + esc(p.id) + '"><td class="name">' + esc(p.label) + ' <span class="muted">' + esc(p.id.slice(0, 12)) + "</span></td>" +
      "<td " + attr("advice-pool-callers", p.callers) + ">" + num(p.callers) + "</td>" +
      "<td " + attr("advice-pool-peak-per-s", p.peak_callers_per_s) + ">" + rate(p.peak_callers_per_s) + "</td>" +
      "<td " + attr("advice-pool-lead-s", p.lead_s) + ">" + secs(p.lead_s) + "</td>" +
      "<td " + attr("advice-pool-size-now", p.size_now) + ">" + (p.size_now === null ? "none" : esc(p.mode_now) + " " + num(p.size_now)) + "</td>" +
      "<td " + attr("advice-pool-recommended", p.recommended) + ">" + num(p.recommended) + "</td>" +
      "<td " + attr("advice-pool-hit-rate", p.hit_rate) + ">" + pct(p.hit_rate_now) + " \u2192 " + pct(p.hit_rate) + "</td>" +
      "<td " + attr("advice-pool-replayed-hit-rate", p.replayed_hit_rate) + ">" + pct(p.replayed_hit_rate_now) + " \u2192 " + pct(p.replayed_hit_rate) + "</td>" +
      "<td " + attr("advice-pool-waste-per-day", p.waste_per_day) + ">" + num(Math.round(p.waste_per_day)) + "</td>" +
      "<td " + attr("advice-pool-seen-hit-rate", p.seen_hit_rate) + ">" + pct(p.seen_hit_rate) + "</td>" +
      "<td " + attr("advice-pool-seen-expired", p.seen_expired) + ">" + num(p.seen_expired) + "</td></tr>";
  }
  return html + "</table>";
}

// The window replayed under the plan now and as recommended, side by side.
function adviceReplay(r, currency) {
  if (!r) return "";
  let html = '<table class="num"><tr><th>replayed</th><th>threads</th><th>callers</th><th>refused</th><th>past deadline</th><th>waited for a thread</th><th>p95 wait</th><th>pool hits</th><th>expired unused</th><th>solves</th><th>a month</th></tr>';
  for (const [name, p] of [["now", r.now], ["recommended", r.recommended]]) {
    html += '<tr data-advice-replay="' + name + '"><td class="name">' + name + "</td>" +
      "<td " + attr("advice-replay-threads", p.threads) + ">" + num(p.threads) + "</td>" +
      "<td " + attr("advice-replay-callers", p.callers) + ">" + num(p.callers) + "</td>" +
      "<td " + attr("advice-replay-refused", p.refused) + ">" + num(p.refused) + "</td>" +
      "<td " + attr("advice-replay-timed-out", p.timed_out) + ">" + num(p.timed_out) + "</td>" +
      "<td " + attr("advice-replay-waited", p.waited) + ">" + num(p.waited) + "</td>" +
      "<td " + attr("advice-replay-p95-wait-s", p.p95_wait_s) + ">" + secs(p.p95_wait_s) + "</td>" +
      "<td " + attr("advice-replay-pool-hit-rate", p.pool_hit_rate) + ">" + pct(p.pool_hit_rate) + "</td>" +
      "<td " + attr("advice-replay-wasted", p.wasted) + ">" + num(p.wasted) + "</td>" +
      "<td " + attr("advice-replay-solves", p.solves) + ">" + num(p.solves) + "</td>" +
      "<td " + attr("advice-replay-cost", p.cost_per_month) + ">" + (p.cost_per_month === null ? "\u2013" : money(p.cost_per_month, currency)) + "</td></tr>";
  }
  return html + '</table><div class="advice-how muted">' + esc(r.how) + (r.complete ? "" : " (cut short)") + "</div>";
}

async function refreshAdvice() {
  try {
    const key = opsKey();
    const res = await fetch("/v1/advice?window_s=86400", { cache: "no-store", headers: key ? { Authorization: "Bearer " + key } : {} });
    if (res.ok) {
      renderAdvice(await res.json());
      document.getElementById("advice-card").setAttribute("data-status", "ok");
    } else if (res.status !== 401) {
      document.getElementById("advice").textContent = "no advice: HTTP " + res.status;
    }
  } catch (e) {
    document.getElementById("advice").textContent = "no advice: " + e.message;
  }
  setTimeout(refreshAdvice, 60000);
}

// The operations key, when the gateway asks for one: given once in the address as #key=...
// (a fragment reaches no server and no log), then kept for this tab only and taken out of the
// address bar and its history entry.
let memoKey = null;
function opsKey() {
  const m = /^#key=(.+)$/.exec(location.hash);
  if (m) {
    memoKey = decodeURIComponent(m[1]);
    try { sessionStorage.setItem("ops-key", memoKey); } catch (e) { /* kept in memoKey */ }
    history.replaceState(null, "", location.pathname + location.search);
  }
  if (memoKey === null) {
    try { memoKey = sessionStorage.getItem("ops-key"); } catch (e) { /* none kept */ }
  }
  return memoKey;
}

let every = 5000;
async function refresh() {
  try {
    const key = opsKey();
    const headers = key ? { Authorization: "Bearer " + key } : {};
    const res = await fetch("/v1/status", { cache: "no-store", headers });
    if (res.status === 401) {
      document.body.setAttribute("data-status", "key-needed");
      document.getElementById("updated").textContent = (key ? "the operations key was refused" :
        "this gateway needs its operations key") + ": open this page as /#key=<operations key>";
      setTimeout(refresh, every);
      return;
    }
    if (!res.ok) throw new Error("HTTP " + res.status);
    const r = await res.json();
    every = Math.max(2000, Math.min(30000, (r.interval_s || 5) * 1000));
    render(r);
    document.body.setAttribute("data-status", "ok");
  } catch (e) {
    document.body.setAttribute("data-status", "error");
    document.getElementById("updated").textContent = "gateway unreachable (" + e.message + "), retrying";
  }
  setTimeout(refresh, every);
}
refresh();
refreshAdvice();
