// a2ad console: a one-page application over the admin API
// (/console/api/v1/... is /v1/... with the session's token). No framework.
// Every text that comes from the API (agents' cards, reasons, questions) is
// set with textContent or createTextNode, never parsed as HTML.
"use strict";

// The session's page key: it comes once, in the login's redirect
// (/console/#key=…), and is kept in this origin's localStorage, which no
// other origin (no other port of this host, though it gets the cookie)
// can read. Every /console/api/ request carries it; it is not the token.
var KEY_ITEM = "a2ad_console_key";
(function () {
  var m = /^#key=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (m) {
    localStorage.setItem(KEY_ITEM, m[1]);
    history.replaceState(null, "", location.pathname + "#/dashboard");
  }
})();
var key = localStorage.getItem(KEY_ITEM) || "";
var watch = null; // the EventSource of the page shown, if any
var gen = 0; // counts routes: an answer for a page no longer shown is dropped

// shown wraps a callback of the page of generation g: it does nothing once
// another page is shown.
function shown(g, f) { return function (v) { if (g === gen) { return f(v); } }; }

// el builds an element: attrs are properties/attributes, children are
// nodes or strings (which become text nodes).
function el(tag, attrs) {
  var e = document.createElement(tag);
  if (attrs) {
    Object.keys(attrs).forEach(function (k) {
      if (k === "text") { e.textContent = attrs[k]; }
      else if (k === "class") { e.className = attrs[k]; }
      else if (k.slice(0, 2) === "on") { e.addEventListener(k.slice(2), attrs[k]); }
      else { e.setAttribute(k, attrs[k]); }
    });
  }
  for (var i = 2; i < arguments.length; i++) {
    var c = arguments[i];
    if (c === null || c === undefined) { continue; }
    e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function setStatus(msg, isError) {
  var s = document.getElementById("status");
  s.textContent = msg || "";
  s.className = isError ? "error" : "";
}

// api calls the admin API through the console; it throws an Error whose
// message is the API's "code: message".
function api(path, method, body) {
  var opts = { method: method || "GET", headers: { "X-Console-Key": key }, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  return fetch("/console/api" + path, opts).then(function (r) {
    if (r.status === 401) { toLogin(); }
    return r.json().then(function (j) {
      if (!r.ok) {
        var e = j && j.error ? j.error.code + ": " + j.error.message : "HTTP " + r.status;
        throw new Error(e);
      }
      return j;
    }, function () { throw new Error("HTTP " + r.status + ": not JSON"); });
  });
}

function query(params) {
  var q = new URLSearchParams();
  Object.keys(params).forEach(function (k) { if (params[k]) { q.set(k, params[k]); } });
  var s = q.toString();
  return s ? "?" + s : "";
}

function fmtTime(t) { return t ? String(t).replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }
function stateSpan(s) { return el("span", { class: "state state-" + s, text: s }); }
function pretty(v) { return JSON.stringify(v, null, 2); }
// sorted is v with every object's members in key order, so that two cards
// that differ only in member order diff as equal.
function sorted(v) {
  if (Array.isArray(v)) { return v.map(sorted); }
  if (v && typeof v === "object") {
    var o = {};
    Object.keys(v).sort().forEach(function (k) { o[k] = sorted(v[k]); });
    return o;
  }
  return v;
}

function kv(pairs) {
  var dl = el("dl", { class: "kv" });
  pairs.forEach(function (p) {
    if (p[1] === undefined || p[1] === null || p[1] === "") { return; }
    dl.appendChild(el("dt", { text: p[0] }));
    var dd = el("dd", p[2] ? { id: p[2] } : null);
    if (typeof p[1] === "object" && p[1].nodeType) { dd.appendChild(p[1]); } else { dd.textContent = String(p[1]); }
    dl.appendChild(dd);
  });
  return dl;
}

function table(headers, rows, id) {
  var t = el("table", id ? { id: id } : null);
  var tr = el("tr");
  headers.forEach(function (h) { tr.appendChild(el("th", { text: h })); });
  t.appendChild(el("thead", null, tr));
  var tb = el("tbody");
  rows.forEach(function (r) { tb.appendChild(r); });
  t.appendChild(tb);
  return t;
}

function row(cells, attrs) {
  var tr = el("tr", attrs);
  cells.forEach(function (c) { tr.appendChild(el("td", null, c === undefined ? "" : c)); });
  return tr;
}

function field(name, label, value, placeholder) {
  return el("label", null, label, el("input", { name: name, id: "f-" + name, value: value || "", placeholder: placeholder || "" }));
}

function stopWatch() { if (watch) { watch.close(); watch = null; } }

// ---- tasks ----

var taskFilters = ["state", "agent", "tenant", "older_than", "newer_than", "limit"];

function taskRow(t) {
  return row([el("a", { href: "#/tasks/" + encodeURIComponent(t.task_id), text: t.task_id }),
    el("span", { class: "state state-" + t.state, text: t.state, "data-state": t.state }),
    t.agent_id, t.skill, t.tenant, fmtTime(t.created_at), el("span", { class: "updated", text: fmtTime(t.updated_at) })],
    { id: "task-" + t.task_id });
}

// applyChange shows a TaskChange of the watch stream in its task's row.
function applyChange(tr, c) {
  var s = tr.children[1].firstChild;
  s.textContent = c.state; s.className = "state state-" + c.state; s.setAttribute("data-state", c.state);
  tr.querySelector(".updated").textContent = fmtTime(c.updated_at);
  tr.classList.add("flash");
}

function viewTasks(params) {
  var pending = {}; // task id → its latest change, while its record is fetched
  var view = document.getElementById("view"), g = gen;
  var form = el("form", { class: "filters", id: "task-filters" });
  form.appendChild(field("state", "state (s1,s2)", params.get("state"), "working,completed"));
  form.appendChild(field("agent", "agent", params.get("agent")));
  form.appendChild(field("tenant", "tenant", params.get("tenant")));
  form.appendChild(field("older_than", "older than", params.get("older_than"), "1h"));
  form.appendChild(field("newer_than", "newer than", params.get("newer_than"), "24h"));
  form.appendChild(field("limit", "limit", params.get("limit"), "50"));
  form.appendChild(el("button", { type: "submit", id: "task-filter", text: "Filter" }));
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var p = {};
    taskFilters.forEach(function (k) { p[k] = form.elements[k].value.trim(); });
    location.hash = "#/tasks" + query(p);
  });
  var p = {};
  taskFilters.forEach(function (k) { p[k] = params.get(k); });
  p.page_token = params.get("page_token");
  var live = el("p", { id: "live", class: "hint", text: "live: connecting…" });
  view.replaceChildren(el("h1", { text: "Tasks" }), form, live);
  api("/v1/tasks" + query(p)).then(shown(g, function (page) {
    var rows = page.tasks.map(taskRow);
    var t = table(["task", "state", "agent", "skill", "tenant", "created", "updated"], rows, "tasks");
    view.appendChild(t);
    if (page.next_page_token) {
      var np = Object.assign({}, p, { page_token: page.next_page_token });
      view.appendChild(el("a", { href: "#/tasks" + query(np), id: "next-page", text: "Next page →" }));
    }
    // Live: the watch stream, with the list's state/agent/tenant filters.
    stopWatch();
    watch = openWatch({ state: p.state, agent: p.agent, tenant: p.tenant });
    watch.addEventListener("open", function () { live.textContent = "live: following task changes"; });
    watch.addEventListener("error", function () { live.textContent = "live: reconnecting…"; });
    watch.addEventListener("task", function (ev) {
      var c = JSON.parse(ev.data);
      var tr = document.getElementById("task-" + c.task_id);
      if (tr) {
        applyChange(tr, c);
      } else if (!p.page_token) {
        // A task new to this page: its record, at the top; changes that
        // come while it is fetched are applied after it.
        var first = !(c.task_id in pending);
        pending[c.task_id] = c;
        if (!first) { return; }
        api("/v1/tasks/" + encodeURIComponent(c.task_id)).then(function (rec) {
          var last = pending[rec.task_id];
          delete pending[rec.task_id];
          if (document.getElementById("task-" + rec.task_id)) { return; }
          var n = taskRow(rec); n.classList.add("flash");
          t.tBodies[0].insertBefore(n, t.tBodies[0].firstChild);
          if (last && Date.parse(last.updated_at) >= Date.parse(rec.updated_at)) { applyChange(n, last); }
        }, function () { delete pending[c.task_id]; });
      }
    });
  }), shown(g, function (e) { setStatus(e.message, true); }));
}

function traceID(tp) {
  var m = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(tp || "");
  return m ? m[1] : "";
}

function terminal(s) { return ["completed", "failed", "canceled", "rejected"].indexOf(s) >= 0; }

function viewTask(id) {
  var view = document.getElementById("view"), g = gen;
  view.replaceChildren(el("h1", null, "Task ", el("code", { text: id })));
  Promise.all([api("/v1/tasks/" + encodeURIComponent(id)), api("/v1/audit" + query({ task: id, limit: "1000" }))]).then(shown(g, function (res) {
    var t = res[0], aud = res[1];
    view.appendChild(kv([["state", stateSpan(t.state), "task-state"], ["reason", t.reason], ["status message", t.status_message],
      ["agent", t.agent_id], ["skill", t.skill], ["tenant", t.tenant], ["subject", t.subject],
      ["trace id", traceID(t.traceparent), "trace-id"], ["created", fmtTime(t.created_at)], ["updated", fmtTime(t.updated_at)],
      ["deadline", fmtTime(t.deadline)], ["turns", t.turns], ["brief digest", t.brief_digest], ["output schema", t.output_schema]]));
    if (!terminal(t.state)) {
      view.appendChild(el("button", { type: "button", id: "cancel", text: "Cancel task", onclick: function () {
        if (!confirm("Cancel task " + id + "?")) { return; }
        api("/v1/tasks/" + encodeURIComponent(id) + "/cancel", "POST", {}).then(function () { route(); }, function (e) { setStatus(e.message, true); });
      } }));
    }
    view.appendChild(el("h2", { text: "Question and answer" }));
    view.appendChild(kv([["open question", t.question || "(none)", "question"]]));
    var ex = t.exchanges || [];
    view.appendChild(ex.length ? table(["at", "question", "answer", "by"], ex.map(function (x) {
      return row([fmtTime(x.at), x.question, (x.data ? "answer_data: " : "") + x.answer, x.by || ""]);
    }), "exchanges") : el("p", { text: "no question answered" }));
    view.appendChild(el("h2", { text: "Timeline" }));
    view.appendChild(table(["at", "from", "to", "event", "source", "by", "reason"], t.history.map(function (h) {
      return row([fmtTime(h.at), h.from, stateSpan(h.to), h.event + (h.refused ? " (refused)" : ""), h.source, h.by || "", (h.reason || "") + (h.pointer ? " at " + h.pointer : "")]);
    }), "timeline"));
    view.appendChild(el("h2", { text: "Artifact verdicts" }));
    var vs = t.verdicts || [];
    view.appendChild(vs.length ? table(["artifact", "valid", "violations (pointer keyword)", "warnings (pointer kind)"], vs.map(function (v) {
      return row([v.artifact_id || "(unnamed)", v.valid ? "valid" : "rejected",
        (v.violations || []).map(function (x) { return x.pointer + " " + x.keyword; }).join("\n"),
        (v.warnings || []).map(function (x) { return (x.pointer || "") + " " + (x.kind || ""); }).join("\n")]);
    }), "verdicts") : el("p", { text: "none" }));
    view.appendChild(el("h2", { text: "Dropped evidence" }));
    var de = t.dropped_evidence || [];
    view.appendChild(de.length ? el("ul", { id: "dropped" }, ...de.map(function (p) { return el("li", { text: p }); })) : el("p", { text: "none" }));
    view.appendChild(el("h2", { text: "Audit records of this task" }));
    view.appendChild(auditTable(aud.records));
    stopWatch();
    if (!terminal(t.state)) {
      watch = openWatch({});
      watch.addEventListener("task", function (ev) { if (JSON.parse(ev.data).task_id === id) { stopWatch(); route(); } });
    }
  }), shown(g, function (e) { setStatus(e.message, true); }));
}

// ---- agents ----

function viewAgents() {
  var view = document.getElementById("view"), g = gen;
  view.replaceChildren(el("h1", { text: "Agents" }));
  api("/v1/agents").then(shown(g, function (res) {
    view.appendChild(table(["agent", "status", "delegable", "liveness", "binding", "fingerprint"], res.agents.map(function (a) {
      return row([el("a", { href: "#/agents/" + encodeURIComponent(a.agent_id), text: a.agent_id }),
        el("span", { class: "status-" + a.status, text: a.status }), a.delegable ? "yes" : "no: " + (a.not_delegable_reason || ""),
        (a.liveness && a.liveness.reachability) || "unknown", a.binding || "", a.fingerprint], { id: "agent-" + a.agent_id });
    }), "agents"));
  }), shown(g, function (e) { setStatus(e.message, true); }));
}

// DIFF_MAX_CELLS bounds the table lineDiff aligns lines with (4 bytes a
// cell): past it the changed block is shown removed, then added.
var DIFF_MAX_CELLS = 1000000;

// lineDiff is a line diff of a and b: {lines: [[" "|"-"|"+", line]...],
// aligned: false when the changed block was too large to align}. The
// common first and last lines are taken off, then the rest is aligned by
// a longest common subsequence, only while it is at most DIFF_MAX_CELLS
// pairs of lines: an agent's card is not trusted, and a full table of two
// 30,000-line cards took the page 28 s and 4 GB (red team).
function lineDiff(a, b) {
  var out = [], pre = 0, suf = 0, i, j;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) { out.push([" ", a[pre++]]); }
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) { suf++; }
  var x = a.slice(pre, a.length - suf), y = b.slice(pre, b.length - suf), n = x.length, m = y.length, aligned = true;
  if (n * m > DIFF_MAX_CELLS) {
    aligned = false;
    x.forEach(function (l) { out.push(["-", l]); });
    y.forEach(function (l) { out.push(["+", l]); });
  } else {
    var w = m + 1, L = new Uint32Array((n + 1) * w);
    for (i = n - 1; i >= 0; i--) {
      for (j = m - 1; j >= 0; j--) { L[i * w + j] = x[i] === y[j] ? L[(i + 1) * w + j + 1] + 1 : Math.max(L[(i + 1) * w + j], L[i * w + j + 1]); }
    }
    i = 0; j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { out.push([" ", x[i]]); i++; j++; }
      else if (L[(i + 1) * w + j] >= L[i * w + j + 1]) { out.push(["-", x[i++]]); }
      else { out.push(["+", y[j++]]); }
    }
    while (i < n) { out.push(["-", x[i++]]); }
    while (j < m) { out.push(["+", y[j++]]); }
  }
  for (i = b.length - suf; i < b.length; i++) { out.push([" ", b[i]]); }
  return { lines: out, aligned: aligned };
}

function viewAgent(id) {
  var view = document.getElementById("view"), g = gen;
  view.replaceChildren(el("h1", null, "Agent ", el("code", { text: id })));
  api("/v1/agents/" + encodeURIComponent(id)).then(shown(g, function (a) {
    var live = a.liveness || {};
    view.appendChild(kv([["status", el("span", { class: "status-" + a.status, text: a.status }), "agent-status"], ["status reason", a.status_reason],
      ["delegable", a.delegable ? "yes" : "no: " + (a.not_delegable_reason || "")], ["liveness", (live.reachability || "unknown") + (live.reason ? ": " + live.reason : "")],
      ["binding", a.binding], ["fingerprint", a.fingerprint, "fingerprint"], ["approved fingerprint", a.approved_fingerprint],
      ["tenants", (a.tenants || []).join(", ")], ["registered", fmtTime(a.registered_at)], ["updated", fmtTime(a.updated_at)]]));
    var reason = el("input", { id: "quarantine-reason", placeholder: "reason", maxlength: "1024" });
    view.appendChild(el("p", null,
      el("button", { type: "button", id: "approve", text: "Approve this card", onclick: function () {
        if (!confirm("Approve agent " + id + " with card " + a.fingerprint + "?")) { return; }
        api("/v1/agents/" + encodeURIComponent(id) + "/approve", "POST", { fingerprint: a.fingerprint }).then(function () { setStatus("approved"); route(); },
          function (e) { setStatus(e.message, true); });
      } }), " ", reason, " ",
      el("button", { type: "button", id: "quarantine", text: "Quarantine", onclick: function () {
        if (!confirm("Quarantine agent " + id + "? No new delegation will go to it.")) { return; }
        api("/v1/agents/" + encodeURIComponent(id) + "/quarantine", "POST", { reason: reason.value }).then(function () { setStatus("quarantined"); route(); },
          function (e) { setStatus(e.message, true); });
      } })));
    if (a.approved_card && a.card) {
      view.appendChild(el("h2", { text: "Changes against the approved card" }));
      if (a.changes && a.changes.length) { view.appendChild(el("p", { id: "changes", text: "changed: " + a.changes.join(", ") })); }
      var pre = el("pre", { id: "card-diff" }), diff = lineDiff(pretty(sorted(a.approved_card)).split("\n"), pretty(sorted(a.card)).split("\n"));
      if (!diff.aligned) { view.appendChild(el("p", { id: "diff-unaligned", text: "The changed part is too large to align line by line: it is shown removed, then added." })); }
      diff.lines.forEach(function (d) {
        pre.appendChild(el("div", { class: d[0] === "+" ? "diff-add" : d[0] === "-" ? "diff-del" : "", text: d[0] + " " + d[1] }));
      });
      view.appendChild(pre);
    }
    view.appendChild(el("h2", { text: "Card" }));
    view.appendChild(el("pre", { id: "card", text: a.card ? pretty(a.card) : "(none registered)" }));
    if ((a.warnings || []).length) {
      view.appendChild(el("h2", { text: "Warnings" }));
      view.appendChild(el("pre", { text: pretty(a.warnings) }));
    }
  }), shown(g, function (e) { setStatus(e.message, true); }));
}

// ---- audit ----

function auditTable(records) {
  return table(["at", "kind", "actor", "tenant", "task", "agent", "details"], records.map(function (r) {
    var d = Object.assign({}, r);
    ["id", "at", "kind", "actor", "tenant", "task_id", "agent_id", "instance"].forEach(function (k) { delete d[k]; });
    return row([fmtTime(r.at), r.kind, r.actor ? r.actor.type + (r.actor.subject ? ":" + r.actor.subject : "") : "", r.tenant || "",
      r.task_id ? el("a", { href: "#/tasks/" + encodeURIComponent(r.task_id), text: r.task_id }) : "", r.agent_id || "",
      Object.keys(d).length ? JSON.stringify(d) : ""], { class: "audit-record" });
  }), "audit");
}

var auditFilters = ["kind", "task", "agent", "tenant", "since", "limit"];

function viewAudit(params) {
  var view = document.getElementById("view"), g = gen;
  var form = el("form", { class: "filters", id: "audit-filters" });
  form.appendChild(field("kind", "kind", params.get("kind"), "task.transition or agent.>"));
  form.appendChild(field("task", "task", params.get("task")));
  form.appendChild(field("agent", "agent", params.get("agent")));
  form.appendChild(field("tenant", "tenant", params.get("tenant")));
  form.appendChild(field("since", "since", params.get("since"), "1h or 2026-01-02T15:04:05Z"));
  form.appendChild(field("limit", "limit", params.get("limit"), "100"));
  form.appendChild(el("button", { type: "submit", id: "audit-search", text: "Search" }));
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var p = {};
    auditFilters.forEach(function (k) { p[k] = form.elements[k].value.trim(); });
    location.hash = "#/audit" + query(p);
  });
  view.replaceChildren(el("h1", { text: "Audit" }), form);
  var p = {};
  auditFilters.forEach(function (k) { p[k] = params.get(k); });
  api("/v1/audit" + query(p)).then(shown(g, function (page) {
    view.appendChild(el("p", { id: "audit-count", text: page.records.length + " records" + (page.more ? " (older ones match too)" : "") }));
    view.appendChild(auditTable(page.records));
  }), shown(g, function (e) { setStatus(e.message, true); }));
}

// ---- dashboard ----

function viewDashboard() {
  var view = document.getElementById("view"), g = gen;
  view.replaceChildren(el("h1", { text: "Dashboard" }));
  api("/v1/dashboard").then(shown(g, function (d) {
    var cards = el("div", { class: "cards" });
    function card(id, title, value, note) { cards.appendChild(el("div", { class: "card", id: id }, el("div", { text: title }), el("div", { class: "big", text: String(value) }), note ? el("div", { class: "hint", text: note }) : null)); }
    var h = d.last_hour, span = "last " + Math.max(1, Math.round(h.window_seconds / 60)) + " min";
    card("delegations", "delegations, " + span, h.delegations);
    card("failures", "failures, " + span, h.failures, h.refused + " refused delegations, " + h.tasks_failed + " failed tasks");
    card("p50", "delegate p50", h.delegate_p50_seconds === null ? "–" : (h.delegate_p50_seconds * 1000).toFixed(1) + " ms");
    card("p99", "delegate p99", h.delegate_p99_seconds === null ? "–" : (h.delegate_p99_seconds * 1000).toFixed(1) + " ms");
    view.appendChild(cards);
    view.appendChild(el("h2", { text: "Open tasks by state" }));
    view.appendChild(table(["state", "tasks"], Object.keys(d.open_tasks).sort().map(function (s) { return row([stateSpan(s), d.open_tasks[s]], { id: "open-" + s }); }), "open-tasks"));
    view.appendChild(el("h2", { text: "Tasks ended, " + span + ", by state" }));
    view.appendChild(table(["state", "tasks"], Object.keys(h.ended).sort().map(function (s) { return row([stateSpan(s), h.ended[s]]); }), "ended-tasks"));
    view.appendChild(el("p", { class: "hint", text: "From this instance's /metrics figures, sampled each minute since " + fmtTime(d.since) + "." }));
  }), shown(g, function (e) { setStatus(e.message, true); }));
}

// toLogin forgets the page key and shows the login form.
function toLogin() {
  localStorage.removeItem(KEY_ITEM);
  location.href = "/console/login";
}

// openWatch opens the task watch with the list's filters (f) and the page
// key (EventSource sends no headers: a query parameter the console takes
// off before the admin API sees it). A stream the console refuses (the
// session ended) closes: the session is checked, and the login shown.
function openWatch(f) {
  var w = new EventSource("/console/api/v1/tasks/watch" + query(Object.assign({}, f, { console_key: key })));
  w.addEventListener("error", function () {
    if (w.readyState !== EventSource.CLOSED) { return; }
    api("/session").catch(function () {}); // a 401 shows the login
  });
  return w;
}

// ---- routing ----

function route() {
  gen++;
  stopWatch();
  setStatus("");
  var hash = location.hash || "#/dashboard";
  var qi = hash.indexOf("?");
  var path = qi >= 0 ? hash.slice(1, qi) : hash.slice(1);
  var params = new URLSearchParams(qi >= 0 ? hash.slice(qi + 1) : "");
  var parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  document.querySelectorAll("header nav a").forEach(function (a) { a.classList.toggle("active", a.id === "nav-" + parts[0]); });
  if (parts[0] === "tasks" && parts[1]) { viewTask(parts[1]); }
  else if (parts[0] === "tasks") { viewTasks(params); }
  else if (parts[0] === "agents" && parts[1]) { viewAgent(parts[1]); }
  else if (parts[0] === "agents") { viewAgents(); }
  else if (parts[0] === "audit") { viewAudit(params); }
  else { viewDashboard(); }
}

api("/session").then(function (s) {
  document.getElementById("who").textContent = s.subject + " (" + s.tenant + "), until " + fmtTime(s.expires_at);
  document.getElementById("logout").addEventListener("click", function () {
    fetch("/console/logout", { method: "POST", headers: { "X-Console-Key": key }, credentials: "same-origin" })
      .then(toLogin);
  });
  window.addEventListener("hashchange", route);
  route();
}, toLogin);
