// gatekeeper console: hand-written, no dependencies. It talks to the admin
// API as the person signed in through the identity provider (an HttpOnly
// session cookie the page never sees; calls that change something carry
// the session's CSRF token, held in memory only), or with an admin token
// kept in this tab's sessionStorage, and follows the live event stream
// (GET /admin/v1/stream) to update what it shows.
"use strict";

const TOKEN_KEY = "gatekeeper.token";
const API = "/admin/v1";

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  session: false,    // signed in through the identity provider (cookie)
  csrf: "",          // the session's CSRF token (memory only)
  me: null,          // {name, roles, budget_stages}
  runs: new Map(),   // id -> record
  approvals: new Map(), // id -> request
  keys: null,        // {keys, queues}
  view: "",
  runId: "",
  timeline: [],      // entries of the run shown
  lastEventId: "",
  stream: null,      // AbortController of the stream's fetch
};

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined) e.append(kid);
  return e;
}

// ---- API ----

class APIError extends Error {
  constructor(status, type, message) { super(message); this.status = status; this.type = type; }
}

// authHeaders are a call's credentials: the bearer token, or, for a
// session, the CSRF token on calls that change something.
function authHeaders(method) {
  if (state.token) return { Authorization: "Bearer " + state.token };
  if (method !== "GET" && state.csrf) return { "X-Gatekeeper-CSRF": state.csrf };
  return {};
}

async function api(method, path, body) {
  const init = { method, headers: authHeaders(method), credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(API + path, init);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const e = data.error || {};
    if (res.status === 401) signOut(state.session ? "Your session ended; sign in again." : "Your token was refused; sign in again.");
    throw new APIError(res.status, e.type || "error", e.message || res.statusText);
  }
  return data;
}

const enc = encodeURIComponent;
// A run id may hold slashes (children); each segment is escaped.
const runPath = (id) => "/trajectories/" + id.split("/").map(enc).join("/");
const can = (role) => !!state.me && state.me.roles.includes(role);
const approverRoles = () => (state.me ? state.me.roles.filter((r) => r.startsWith("approver:")).map((r) => r.slice(9)) : []);

// ---- formatting ----

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d";
}
function countdown(iso) {
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (s <= 0) return "expired";
  const m = Math.floor(s / 60);
  return (m > 0 ? m + "m " : "") + String(s % 60).padStart(m > 0 ? 2 : 1, "0") + "s";
}
const dollars = (x) => "$" + (x || 0).toFixed(x >= 100 ? 2 : 4);
const pct = (x) => Math.round((x || 0) * 100) + "%";
const time = (iso) => new Date(iso).toLocaleTimeString();
const tokensOf = (s) => (s.input_tokens || 0) + (s.cached_input_tokens || 0) + (s.cache_write_tokens || 0) + (s.output_tokens || 0);

// ---- sign in ----

async function signIn(token) {
  state.token = token;
  const me = await api("GET", "/whoami");
  state.me = me;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  state.session = !token;
  state.csrf = me.csrf_token || "";
  $("#who").textContent = me.name + " · " + (me.roles.join(", ") || "read only") + (me.tenants ? " · " + me.tenants.join(", ") : "");
  $("#nav").hidden = false;
  $("#signout").hidden = false;
  await Promise.all([loadRuns(), loadApprovals(), loadKeys()]);
  startStream();
  route();
}

function signOut(msg) {
  if (state.session && state.csrf) {
    // Ends the session on the server; the cookie goes with the answer.
    fetch("/console/logout", { method: "POST", headers: { "X-Gatekeeper-CSRF": state.csrf }, credentials: "same-origin" }).catch(() => {});
  }
  state.session = false;
  state.csrf = "";
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = "";
  state.me = null;
  if (state.stream) state.stream.abort();
  state.stream = null;
  state.runs.clear();
  state.approvals.clear();
  $("#nav").hidden = true;
  $("#signout").hidden = true;
  $("#who").textContent = "";
  setLive("");
  $("#signin-error").textContent = msg || "";
  show("signin");
  $("#token").value = "";
  $("#token").focus();
}

// ---- live stream ----
// EventSource cannot send an Authorization header, so the stream is read
// with fetch and parsed here. Last-Event-ID resumes after a break.

function setLive(text, on) {
  const l = $("#live");
  l.textContent = text;
  l.className = "live" + (text ? (on ? " on" : " off") : "");
}

async function startStream() {
  if (state.stream) state.stream.abort();
  const ctl = new AbortController();
  state.stream = ctl;
  let delay = 1000;
  while (!ctl.signal.aborted && (state.token || state.session)) {
    try {
      const headers = authHeaders("GET");
      if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
      const res = await fetch(API + "/stream", { headers, signal: ctl.signal });
      if (res.status === 401) { signOut(state.session ? "Your session ended; sign in again." : "Your token was refused; sign in again."); return; }
      if (!res.ok) throw new Error("stream answered " + res.status);
      setLive("live", true);
      delay = 1000;
      await readSSE(res.body, onStreamEvent);
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    setLive("reconnecting", false);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 15000);
  }
}

async function readSSE(body, fn) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(buf.slice(i).match(/^\r?\n\r?\n/)[0].length + i);
      const ev = { id: "", event: "message", data: [] };
      for (const line of block.split(/\r?\n/)) {
        if (line === "" || line.startsWith(":")) continue;
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
        if (field === "data") ev.data.push(val);
        else if (field === "id") ev.id = val;
        else if (field === "event") ev.event = val;
      }
      if (ev.data.length) fn(ev.event, ev.id, JSON.parse(ev.data.join("\n")));
    }
  }
}

function onStreamEvent(kind, id, ev) {
  if (id) state.lastEventId = id;
  try {
    showEvent(kind, ev);
  } catch (e) {
    // One event the page cannot show must not stop the stream.
    console.error("console: showing a " + kind + " event:", e);
  }
}

function showEvent(kind, ev) {
  switch (kind) {
    case "record": onRecord(ev); break;
    case "approval": onApproval(ev); break;
    case "keys": onKeys(ev); break;
    case "reset": // events were lost: reload what is shown
      Promise.all([loadRuns(), loadApprovals(), loadKeys()]).then(route);
      break;
    case "dropped": // the server ends the stream; the loop resumes after lastEventId
      setLive("catching up", false);
      break;
  }
}

// keepRun stores a record unless the page holds a newer write of it (an
// API answer can arrive after the stream's later changes), and says which.
function keepRun(rec) {
  const old = state.runs.get(rec.id);
  if (old && Date.parse(old.updated_at) > Date.parse(rec.updated_at)) return false;
  state.runs.set(rec.id, rec);
  return true;
}

function onRecord(ev) {
  const rec = ev.data.record;
  const had = state.runs.has(rec.id);
  if (!keepRun(rec)) return; // an older write
  if (rec.parent_id && state.runs.has(rec.parent_id)) {
    const p = state.runs.get(rec.parent_id);
    if (!p.children.includes(rec.id)) p.children.push(rec.id);
  }
  if (!had) { addTenant(rec.tenant); addPerson(rec.person); }
  if (state.view === "runs") renderRuns(rec.id);
  if (state.view === "run" && state.runId === rec.id) {
    for (const e of ev.data.events) state.timeline.push(e);
    renderRun();
  }
}

// normalized fills the lists a request's JSON may carry as null.
function normalized(r) {
  r.votes = r.votes || [];
  r.roles = r.roles || [];
  return r;
}

function onApproval(ev) {
  const r = normalized(ev.data.request);
  state.approvals.set(r.id, r);
  renderPendingCount();
  if (state.view === "approvals") renderApprovals();
  if (state.view === "run" && (state.runId === r.trajectory || state.runId === r.root)) {
    state.timeline.push({ at: ev.at, type: "approval", data: { change: ev.data.change, state: r.state, tool: r.call.name, id: r.id } });
    renderRun();
  }
}

function onKeys(ev) {
  if (!state.keys) return;
  for (const k of state.keys.keys) {
    if (k.key in ev.data.headroom) k.headroom = ev.data.headroom[k.key];
  }
  Object.assign(state.keys.queues, ev.data.queues);
  if (state.view === "keys") renderKeys();
}

// ---- routing ----

function show(id) {
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== id;
}

function route() {
  if (!state.me) { show("signin"); return; }
  const h = decodeURIComponent(location.hash.slice(1));
  let view = "runs";
  if (h.startsWith("/run/")) {
    view = "run";
    if (state.runId !== h.slice(5)) $("#control-result").textContent = ""; // another run's answer
    state.runId = h.slice(5);
  }
  else if (h === "/approvals") view = "approvals";
  else if (h === "/keys") view = "keys";
  const changed = view !== state.view;
  state.view = view;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === (view === "run" ? "runs" : view)) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  show(view);
  if (view === "runs") renderRuns();
  if (view === "run") openRun(state.runId);
  if (view === "approvals") renderApprovals();
  if (view === "keys") renderKeys();
  if (changed) $("#main").focus({ preventScroll: true });
}

// ---- runs ----

// loadRuns asks for the newest runs, or, with a person in the filter, the
// newest runs of that person (the server filters, so a person's runs are
// found however many newer runs others started).
async function loadRuns() {
  const who = personFilter();
  const { trajectories } = await api("GET", "/trajectories?limit=1000" + (who ? "&person=" + encodeURIComponent(who) : ""));
  state.runs.clear();
  for (const r of trajectories) { state.runs.set(r.id, r); addTenant(r.tenant); addPerson(r.person); }
}

// personLabel is how a run's person is named: the email, else the name,
// else the subject, as gatekeeper's logs and metrics name them.
const personLabel = (p) => (p ? p.email || p.name || p.subject : "");
const personText = (p) => (p ? personLabel(p) + (p.groups && p.groups.length ? " (" + p.groups.join(", ") + ")" : "") : "—");
const personFilter = () => $("#f-person").value.trim();

function addPerson(p) {
  const label = personLabel(p);
  const list = $("#f-people");
  if (label && ![...list.options].some((o) => o.value === label)) list.append(el("option", { value: label }));
}

// personChanged follows the person filter: the page's address keeps it
// (?person=, to bookmark or share), and the runs are asked for again.
async function personChanged() {
  const who = personFilter();
  const u = new URL(location.href);
  if (who) u.searchParams.set("person", who);
  else u.searchParams.delete("person");
  history.replaceState(null, "", u);
  try {
    await loadRuns();
    $("#runs-empty").textContent = "No runs match.";
  } catch (err) {
    $("#runs-empty").textContent = "Could not load the runs: " + err.message;
  }
  renderRuns();
}

function addTenant(t) {
  const sel = $("#f-tenant");
  if (![...sel.options].some((o) => o.value === t)) sel.append(el("option", { value: t, text: t }));
}

function runMatches(r) {
  const st = $("#f-state").value, tn = $("#f-tenant").value, sg = $("#f-stage").value, who = personFilter();
  return (!st || r.state === st) && (!tn || r.tenant === tn) && (!sg || r.stage === sg) &&
    (!who || (!!r.person && (r.person.subject === who || personLabel(r.person) === who)));
}

// The rows in tree order: a root, then its children under it, newest
// first at each level. A child whose parent is filtered out or unknown is
// shown as a root.
function treeOrder() {
  const shown = [...state.runs.values()].filter(runMatches);
  const ids = new Set(shown.map((r) => r.id));
  const kids = new Map();
  const roots = [];
  for (const r of shown) {
    if (r.parent_id && ids.has(r.parent_id)) {
      if (!kids.has(r.parent_id)) kids.set(r.parent_id, []);
      kids.get(r.parent_id).push(r);
    } else roots.push(r);
  }
  const newest = (a, b) => Date.parse(b.created_at) - Date.parse(a.created_at);
  const out = [];
  const walk = (r, depth) => {
    out.push([r, depth]);
    for (const c of (kids.get(r.id) || []).sort(newest)) walk(c, depth + 1);
  };
  for (const r of roots.sort(newest)) walk(r, 0);
  return out;
}

function runCells(r) {
  const rho = r.budget_used ? pct(r.budget_used) + (r.binding_dimension ? " " + r.binding_dimension : "") : "—";
  return [
    r.id, r.tenant, personText(r.person), r.state, r.stage, rho, dollars(r.spend.dollars), String(r.spend.turns), r.last_stop_reason || "—", age(r.created_at),
  ];
}

function renderRuns(changedId) {
  const tbody = $("#runs-table tbody");
  const rows = treeOrder();
  const order = rows.map(([r]) => r.id).join("\n");
  $("#runs-empty").hidden = rows.length > 0;
  if (tbody.dataset.order === order) {
    // Same rows in the same order: update the cells in place, so that
    // nothing moves and focus stays where it is.
    for (const tr of tbody.rows) {
      const r = state.runs.get(tr.dataset.id);
      const cells = runCells(r);
      for (let i = 1; i < cells.length; i++) {
        if (tr.cells[i].textContent !== cells[i]) tr.cells[i].textContent = cells[i];
      }
      tr.cells[3].className = "state " + r.state;
      tr.cells[4].className = "stage-" + r.stage;
      if (tr.dataset.id === changedId) flash(tr);
    }
    return;
  }
  const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("#runs-table tr");
  const focusId = focused ? focused.dataset.id : "";
  tbody.replaceChildren(...rows.map(([r, depth]) => {
    const c = runCells(r);
    const link = el("a", { href: "#/run/" + r.id, text: depth ? r.id.slice(r.parent_id.length + 1) : r.id, title: r.id });
    link.style.paddingLeft = depth * 1.2 + "em";
    const tr = el("tr", { class: depth ? "child" : "", "data-id": r.id },
      el("td", {}, link), el("td", { text: c[1] }), el("td", { class: "person", text: c[2], title: r.person ? r.person.subject : "" }),
      el("td", { class: "state " + r.state, text: c[3] }),
      el("td", { class: "stage-" + r.stage, text: c[4] }), el("td", { text: c[5] }), el("td", { class: "num", text: c[6] }),
      el("td", { class: "num", text: c[7] }), el("td", { text: c[8] }), el("td", { text: c[9] }));
    if (r.id === changedId) flash(tr);
    return tr;
  }));
  tbody.dataset.order = order;
  if (focusId) {
    const a = tbody.querySelector(`tr[data-id="${CSS.escape(focusId)}"] a`);
    if (a) a.focus({ preventScroll: true });
  }
}

function flash(tr) {
  tr.classList.remove("flash");
  void tr.offsetWidth;
  tr.classList.add("flash");
}

// ---- run detail ----

async function openRun(id) {
  try {
    const [rec, evs] = await Promise.all([api("GET", runPath(id)), api("GET", runPath(id) + "/events?limit=1000")]);
    state.runs.set(rec.id, rec);
    state.timeline = evs.events;
    const aprs = [...state.approvals.values()].filter((a) => a.trajectory === id || a.root === id);
    for (const a of aprs) state.timeline.push({ at: a.created_at, type: "approval", data: { change: "requested", state: a.state, tool: a.call.name, id: a.id } });
    state.timeline.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
    renderRun();
  } catch (e) {
    $("#run-title").textContent = id;
    $("#run-summary").replaceChildren(el("p", { class: "error", text: e.message }));
  }
}

function renderRun() {
  const r = state.runs.get(state.runId);
  if (!r) return;
  $("#run-title").textContent = r.id;
  const item = (k, v) => el("div", {}, el("dt", { text: k }), el("dd", {}, v));
  const parent = r.parent_id ? el("a", { href: "#/run/" + r.parent_id, text: r.parent_id }) : "—";
  const kids = r.children.length ? r.children.map((c, i) => [i ? ", " : "", el("a", { href: "#/run/" + c, text: c.slice(r.id.length + 1) })]) : "—";
  $("#run-summary").replaceChildren(el("dl", { class: "summary" },
    item("State", el("span", { class: "state " + r.state, text: r.state + (r.exit_reason ? " (" + r.exit_reason + ")" : "") })),
    item("Tenant", r.tenant), item("Person", personText(r.person)), item("Stage", el("span", { class: "stage-" + r.stage, text: r.stage })),
    item("Turns", String(r.spend.turns)), item("Dollars", dollars(r.spend.dollars)),
    item("Model", r.model || "—"), item("Last stop", r.last_stop_reason || "—"), item("Age", age(r.created_at)),
    item("Created by", r.created_by ? r.created_by.kind + " " + r.created_by.name : "—"),
    item("Parent", parent), item("Children", el("span", {}, kids))));
  renderBudget(r);
  renderPending(r);
  const controls = $("#run-controls");
  controls.hidden = !can("operator");
  const live = !["COMPLETED", "FAILED", "CANCELED"].includes(r.state);
  for (const b of controls.querySelectorAll("button")) b.disabled = !live;
  renderTimeline();
}

function renderBudget(r) {
  const st = state.me.budget_stages;
  const b = r.budget, s = r.spend;
  const dims = [
    ["turns", s.turns, b.turns, String],
    ["tokens", tokensOf(s), b.tokens, (x) => x.toLocaleString()],
    ["wall_clock", s.wall_clock_s, b.wall_clock_s, (x) => Math.round(x) + "s"],
    ["dollars", s.dollars, b.dollars, dollars],
  ];
  const bars = dims.map(([name, used, ceil, fmt]) => {
    const binding = r.binding_dimension === name ? " (binding)" : "";
    if (!ceil) {
      return el("div", { class: "bar" }, el("div", { class: "label" }, el("span", { text: name }), el("span", { text: fmt(used) + " · no ceiling" })));
    }
    const ratio = used / ceil;
    const fill = el("div", { class: "fill " + (ratio >= st.halt ? "halt" : ratio >= st.restrict ? "restrict" : ratio >= st.steer ? "steer" : "") });
    fill.style.width = Math.min(100, ratio * 100) + "%";
    const marks = [["steer", st.steer], ["restrict", st.restrict], ["halt", st.halt]].map(([k, v]) => {
      const m = el("div", { class: "mark " + k, title: k + " at " + pct(v) });
      m.style.left = "calc(" + Math.min(100, v * 100) + "% - 1px)";
      return m;
    });
    return el("div", { class: "bar" },
      el("div", { class: "label" }, el("span", { text: name + binding }), el("span", { text: fmt(used) + " / " + fmt(ceil) + " · " + pct(ratio) })),
      el("div", { class: "track", role: "meter", "aria-label": name, "aria-valuemin": "0", "aria-valuemax": String(ceil), "aria-valuenow": String(used) }, fill, ...marks));
  });
  bars.push(el("div", { class: "legend" }, el("span", { class: "steer", text: "steer " + pct(st.steer) }),
    el("span", { class: "restrict", text: "restrict " + pct(st.restrict) }), el("span", { class: "halt", text: "halt " + pct(st.halt) })));
  $("#run-budget").replaceChildren(...bars);
  budgetControls(r);
}

// The budget form's fields: the input, the record's budget field it sets.
const BUDGET_FIELDS = [["#b-turns", "turns"], ["#b-tokens", "tokens"], ["#b-wall", "wall_clock_s"], ["#b-dollars", "dollars"], ["#b-exhaust", "on_exhaust"]];

const ceilingOf = (b, field) => (field === "on_exhaust" ? b.on_exhaust || "fail" : String(b[field] || 0));

// budgetControls shows the budget form to an operator, prefilled with the
// run's ceilings. The form stays in the page (nothing moves as records
// arrive); a field the operator has edited keeps what was typed, the others
// follow the record. A finished run's form is disabled: the API refuses it.
function budgetControls(r) {
  const form = $("#budget-form");
  form.hidden = !can("operator");
  if (form.hidden) return;
  if (form.dataset.run !== r.id) {
    form.dataset.run = r.id;
    resetBudgetForm();
  }
  for (const [sel, field] of BUDGET_FIELDS) {
    const input = $(sel);
    if (!input.dataset.edited) input.value = ceilingOf(r.budget, field);
  }
  form.querySelector("fieldset").disabled = ["COMPLETED", "FAILED", "CANCELED", "FINALIZING"].includes(r.state);
}

function resetBudgetForm() {
  for (const [sel] of BUDGET_FIELDS) delete $(sel).dataset.edited;
  $("#b-reason").value = "";
  budgetResult("", false);
}

function budgetResult(text, failed) {
  const out = $("#budget-result");
  out.textContent = text;
  out.className = (failed ? "error" : "hint") + " result";
}

// raiseBudget sends the dimensions the operator changed.
async function raiseBudget() {
  const r = state.runs.get(state.runId);
  if (!r) return;
  const body = {};
  for (const [sel, field] of BUDGET_FIELDS) {
    const v = $(sel).value.trim();
    if (v === ceilingOf(r.budget, field)) continue;
    if (field === "on_exhaust") { body.on_exhaust = v; continue; }
    const n = Number(v);
    if (v === "" || !Number.isFinite(n) || n < 0 || (field !== "dollars" && !Number.isInteger(n))) {
      budgetResult(field + " must be " + (field === "dollars" ? "a number" : "a whole number") + " of 0 or more (0: no ceiling).", true);
      $(sel).focus();
      return;
    }
    if (n !== Number(ceilingOf(r.budget, field))) body[field] = n;
  }
  if (!Object.keys(body).length) { budgetResult("Nothing changed: edit a ceiling first.", true); return; }
  const reason = $("#b-reason").value.trim();
  if (reason) body.reason = reason;
  const fieldset = $("#budget-form fieldset");
  fieldset.disabled = true;
  try {
    const rec = await api("PATCH", runPath(r.id) + "/budget", body);
    keepRun(rec);
    resetBudgetForm();
    budgetResult("Budget set: " + Object.keys(body).filter((k) => k !== "reason").join(", ") + (rec.state !== r.state ? " · now " + rec.state : "") + ".", false);
  } catch (e) {
    budgetResult("Budget change refused: " + e.message, true);
  } finally {
    fieldset.disabled = false;
    renderRun();
  }
}

function renderPending(r) {
  const out = [];
  for (const c of r.pending.tool_calls) {
    out.push(el("p", {}, el("strong", { text: c.name }), " ", el("code", { text: c.id }),
      c.deadline ? [" · answer due in ", el("span", { class: "countdown", "data-until": c.deadline, text: countdown(c.deadline) })] : ""));
  }
  if (r.pending.approval_id) {
    out.push(el("p", {}, "Awaiting approval ", el("a", { href: "#/approvals", text: r.pending.approval_id })));
  }
  if (r.pending.control) {
    const c = r.pending.control;
    out.push(el("p", {}, "Control waiting for the turn's end: ", el("strong", { text: c.kind }), c.by ? " by " + c.by : ""));
  }
  $("#run-pending").replaceChildren(...(out.length ? out : [el("p", { class: "hint", text: "Nothing pending." })]));
}

function describe(e) {
  const d = e.data || {};
  switch (e.type) {
    case "turn": {
      const u = d.usage || {};
      const toks = (u.input_tokens || 0) + (u.cached_input_tokens || 0) + (u.cache_write_tokens || 0);
      return [d.model || "", `in ${toks} · out ${u.output_tokens || 0} tokens · ${dollars(d.dollars)} · stop ${d.stop || "?"}` +
        (d.tool_calls ? " · calls " + d.tool_calls.map((c) => c.name).join(", ") : "")];
    }
    case "transition": return [e.from + " → " + e.to, e.reason || ""];
    case "control": return [d.kind + " by " + (d.by || "?"), (d.applied ? "applied" : d.pending ? "pending" : "") + (d.reason ? " · " + d.reason : "") + (d.message ? " · " + d.message : "")];
    case "stage": return ["stage " + (d.from || "") + " → " + (d.to || ""), d.binding || ""];
    case "budget": {
      const from = d.from || {}, to = d.to || {};
      const moved = ["turns", "tokens", "wall_clock_s", "dollars", "on_exhaust"].filter((k) => (from[k] || 0) !== (to[k] || 0))
        .map((k) => k + " " + (k === "dollars" ? dollars(from[k]) + " → " + dollars(to[k]) : k === "on_exhaust" ? (from[k] || "fail") + " → " + (to[k] || "fail") : (from[k] || 0) + " → " + (to[k] || 0)));
      return ["budget by " + (d.by || "?"), moved.join(" · ") + (d.reason ? " · " + d.reason : "") + (d.resumed ? " · resumed" : "")];
    }
    case "approval": return ["approval " + d.change, (d.tool || "") + " · " + d.state + " · " + d.id];
    case "created": return ["created", d.by ? "by " + d.by : ""];
    case "refused": return ["refused " + d.status, d.reason + (d.folded ? " · " + d.folded + " more refused since the last" : "")];
    default: return [e.type, e.reason || (e.data ? JSON.stringify(e.data) : "")];
  }
}

function renderTimeline() {
  const items = state.timeline.slice(-500).reverse().map((e) => {
    const [what, detail] = describe(e);
    return el("li", { class: e.type }, el("time", { datetime: e.at, text: time(e.at) }), el("span", { class: "what", text: what }), el("span", { text: detail }));
  });
  $("#run-timeline").replaceChildren(...items);
}

async function control(verb) {
  const body = {};
  const reason = $("#c-reason").value.trim();
  if (reason) body.reason = reason;
  if (verb === "interrupt") {
    body.message = $("#c-message").value;
    if (!body.message.trim()) { $("#control-result").textContent = "Write the message to interrupt with."; return; }
  }
  if ((verb === "kill" || verb === "cancel") && !confirm(verb + " " + state.runId + " and every subagent under it?")) return;
  const out = $("#control-result");
  try {
    const rec = await api("POST", runPath(state.runId) + "/" + verb, body);
    keepRun(rec);
    out.textContent = verb + " sent: " + rec.state + (rec.pending.control ? " (" + rec.pending.control.kind + " waits for the turn's end)" : "");
    if (verb === "interrupt") $("#c-message").value = "";
    renderRun();
  } catch (e) {
    out.textContent = verb + " refused: " + e.message;
  }
}

// ---- approvals ----

async function loadApprovals() {
  try {
    const { approvals } = await api("GET", "/approvals?limit=200");
    state.approvals.clear();
    for (const r of approvals) state.approvals.set(r.id, normalized(r));
  } catch (e) {
    if (e.status !== 404) throw e; // 404: no gates configured
  }
  renderPendingCount();
}

const pendingRequests = () => [...state.approvals.values()].filter((r) => r.state === "pending");

function renderPendingCount() {
  const n = pendingRequests().length;
  $("#pending-count").textContent = n ? String(n) : "";
}

function prettyInput(raw) {
  try { return JSON.stringify(typeof raw === "string" ? JSON.parse(raw) : raw, null, 2); } catch { return String(raw); }
}

function renderApprovals() {
  const pending = pendingRequests().sort((a, b) => Date.parse(a.expires_at) - Date.parse(b.expires_at));
  $("#inbox-empty").hidden = pending.length > 0;
  const inbox = $("#inbox");
  const seen = new Set();
  for (const r of pending) {
    seen.add(r.id);
    let card = inbox.querySelector(`[data-id="${CSS.escape(r.id)}"]`);
    const fresh = requestCard(r);
    if (card) {
      // Keep what the approver is typing and whether the call is expanded.
      const reason = card.querySelector("input").value;
      const all = card.querySelector("pre").classList.contains("all");
      fresh.querySelector("input").value = reason;
      if (all) fresh.querySelector("pre").classList.add("all");
      const focusedSel = card.contains(document.activeElement) ? document.activeElement.dataset.focus : "";
      card.replaceWith(fresh);
      if (focusedSel) { const f = fresh.querySelector(`[data-focus="${focusedSel}"]`); if (f) f.focus(); }
    } else inbox.append(fresh);
  }
  for (const card of [...inbox.children]) if (!seen.has(card.dataset.id)) card.remove();
  const done = [...state.approvals.values()].filter((r) => r.state !== "pending")
    .sort((a, b) => Date.parse(b.decided_at || b.created_at) - Date.parse(a.decided_at || a.created_at)).slice(0, 100);
  $("#history tbody").replaceChildren(...done.map((r) => el("tr", {},
    el("td", { text: r.id, title: r.id }), el("td", {}, el("a", { href: "#/run/" + r.trajectory, text: r.trajectory })),
    el("td", { text: r.call.name }), el("td", { text: r.gate }), el("td", { text: r.state + (r.reason ? ": " + r.reason : ""), title: r.reason || "" }),
    el("td", { text: r.votes.map((v) => (v.approve ? "✓ " : "✗ ") + v.approver).join(", ") || "—" }),
    el("td", { text: r.decided_at ? new Date(r.decided_at).toLocaleString() : "—" }))));
}

function requestCard(r) {
  const approving = r.votes.filter((v) => v.approve).length;
  const mayVote = approverRoles().some((role) => r.roles.includes(role)) && !r.votes.some((v) => v.approver === state.me.name);
  const pre = el("pre", { class: "call", tabindex: "0", "aria-label": "the call's complete input" }, prettyInput(r.call.input));
  const expand = el("button", { type: "button", "data-focus": "expand", onclick: () => {
    pre.classList.toggle("all");
    expand.textContent = pre.classList.contains("all") ? "Collapse" : "Show all";
  }, text: "Show all" });
  const reason = el("input", { type: "text", maxlength: "500", "aria-label": "reason for " + r.id, placeholder: "reason (optional)", "data-focus": "reason" });
  const vote = async (verb, btn) => {
    btn.disabled = true;
    try {
      const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
      const upd = normalized(await api("POST", "/approvals/" + enc(r.id) + "/" + verb, body));
      state.approvals.set(upd.id, upd);
      renderApprovals();
      renderPendingCount();
    } catch (e) {
      msg.textContent = verb + " refused: " + e.message;
      btn.disabled = false;
    }
  };
  const msg = el("p", { class: "error", role: "alert" });
  const approve = el("button", { type: "button", class: "approve", "data-focus": "approve", text: "Approve" });
  approve.addEventListener("click", () => vote("approve", approve));
  const deny = el("button", { type: "button", class: "deny", "data-focus": "deny", text: "Deny" });
  deny.addEventListener("click", () => vote("deny", deny));
  return el("article", { class: "card request", "data-id": r.id, "aria-label": "approval " + r.id },
    el("header", {}, el("span", { class: "tool", text: r.call.name }),
      el("span", {}, "run ", el("a", { href: "#/run/" + r.trajectory, text: r.trajectory })),
      el("span", {}, "expires in ", el("span", { class: "countdown", "data-until": r.expires_at, text: countdown(r.expires_at) }))),
    pre, el("div", { class: "buttons" }, expand),
    el("dl", { class: "kv" },
      el("dt", { text: "Gate" }), el("dd", { text: r.gate }),
      el("dt", { text: "Why" }), el("dd", {}, el("code", { text: r.why })),
      el("dt", { text: "Digest" }), el("dd", {}, el("code", { text: r.digest })),
      el("dt", { text: "Quorum" }), el("dd", { text: `${approving} of ${r.quorum} from ${r.roles.join(", ")}${r.distinct_roles ? " (distinct roles)" : ""}` }),
      el("dt", { text: "Budget used" }), el("dd", { text: pct(r.observed.budget_used) + " · stage " + (r.observed.stage || "—") }),
      el("dt", { text: "Request" }), el("dd", { text: r.id })),
    r.votes.length ? el("ul", { class: "votes" }, r.votes.map((v) => el("li", { text: `${v.approve ? "approved" : "denied"} by ${v.approver} (${v.via})${v.reason ? ": " + v.reason : ""}` }))) : null,
    mayVote ? el("div", {}, reason, el("div", { class: "buttons" }, approve, deny)) : el("p", { class: "hint", text: "Your token holds no role of this gate, or has voted." }),
    msg);
}

// ---- keys ----

async function loadKeys() {
  try {
    state.keys = await api("GET", "/keys");
  } catch (e) {
    state.keys = { keys: [], queues: {} };
  }
}

function renderKeys() {
  const k = state.keys || { keys: [], queues: {} };
  $("#keys-table tbody").replaceChildren(...k.keys.map((x) => {
    let head = el("span", { class: "hint", text: "not used yet" });
    if (x.headroom !== null && x.headroom !== undefined) {
      const bar = el("span", { class: x.headroom <= 0 ? "out" : x.headroom < 0.2 ? "low" : "" });
      bar.style.width = Math.max(0, Math.min(100, x.headroom * 100)) + "%";
      head = el("span", {}, el("span", { class: "meter", role: "meter", "aria-label": "headroom of " + x.key, "aria-valuenow": String(x.headroom), "aria-valuemin": "0", "aria-valuemax": "1" }, bar), pct(x.headroom));
    } else if (!x.rpm && !x.input_tpm && !x.output_tpm) head = el("span", { class: "hint", text: "no limits set" });
    return el("tr", {}, el("td", { text: x.key }), el("td", { class: "num", text: x.rpm ? String(x.rpm) : "—" }),
      el("td", { class: "num", text: x.input_tpm ? x.input_tpm.toLocaleString() : "—" }),
      el("td", { class: "num", text: x.output_tpm ? x.output_tpm.toLocaleString() : "—" }), el("td", {}, head));
  }));
  const classes = ["interactive", "standard", "batch"];
  for (const c of Object.keys(k.queues || {})) if (!classes.includes(c)) classes.push(c);
  $("#queues-table tbody").replaceChildren(...classes.map((c) => el("tr", {}, el("td", { text: c }), el("td", { class: "num", text: String((k.queues || {})[c] || 0) }))));
}

// ---- wiring ----

function tick() {
  for (const c of document.querySelectorAll(".countdown[data-until]")) {
    const t = countdown(c.dataset.until);
    if (c.textContent !== t) c.textContent = t;
    c.classList.toggle("soon", Date.parse(c.dataset.until) - Date.now() < 60000);
  }
  if (state.view === "runs") {
    for (const tr of $("#runs-table tbody").rows) {
      const r = state.runs.get(tr.dataset.id);
      if (r) { const a = age(r.created_at); if (tr.cells[8].textContent !== a) tr.cells[8].textContent = a; }
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#signin-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    $("#signin-error").textContent = "";
    try {
      await signIn($("#token").value.trim());
    } catch (err) {
      if (state.me === null) sessionStorage.removeItem(TOKEN_KEY);
      $("#signin-error").textContent = err.status === 401 ? "That token was refused." : "Sign-in failed: " + err.message;
    }
  });
  $("#signout").addEventListener("click", () => signOut(""));
  $("#run-filters").addEventListener("change", (e) => { if (e.target.id === "f-person") personChanged(); else renderRuns(); });
  $("#run-filters").addEventListener("submit", (e) => { e.preventDefault(); personChanged(); });
  $("#f-person").value = new URLSearchParams(location.search).get("person") || "";
  for (const b of document.querySelectorAll("#run-controls button[data-verb]")) b.addEventListener("click", () => control(b.dataset.verb));
  $("#budget-form").addEventListener("submit", (e) => { e.preventDefault(); raiseBudget(); });
  $("#budget-form").addEventListener("input", (e) => { if (e.target.id !== "b-reason") e.target.dataset.edited = "1"; });
  window.addEventListener("hashchange", route);
  setInterval(tick, 1000);
  start();
});

// The sign-in errors the provider's callback sends the page back with.
const SIGNIN_ERRORS = {
  no_role: "You signed in, but none of your groups gives you a role in gatekeeper.",
  unavailable: "The identity provider could not be reached; try again shortly.",
  state: "That sign-in was not started in this browser, or took too long; sign in again.",
  refused: "The identity provider's answer was refused; sign in again.",
};

async function start() {
  const params = new URLSearchParams(location.search);
  const err = params.get("error");
  if (err !== null) history.replaceState(null, "", location.pathname + location.hash);
  const info = await fetch("/console/signin.json").then((r) => r.json()).catch(() => ({}));
  $("#signin-idp").hidden = !info.identity_provider;
  if (state.token) {
    signIn(state.token).catch(() => signOut("Sign in again."));
    return;
  }
  if (info.identity_provider && err === null) {
    // A session cookie, if there is one, signs the page in.
    const probe = await fetch(API + "/whoami", { credentials: "same-origin" }).catch(() => null);
    if (probe && probe.ok) {
      try { await signIn(""); return; } catch (e) { state.session = false; }
    }
  }
  show("signin");
  $("#signin-error").textContent = err === null ? "" : (SIGNIN_ERRORS[err] || SIGNIN_ERRORS.refused);
}
