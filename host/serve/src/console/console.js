// The Cordon console: sessions with a live transcript, approvals, the audit log and the tools.
// Plain JavaScript against the host's API. Everything a model, a tool or a plugin wrote is put
// into the page with textContent, never as markup.
"use strict";

const state = {
  token: sessionStorage.getItem("cordon-token") || "",
  selected: null,
  follow: null, // AbortController of the followed session's event stream
  following: Promise.resolve(), // settles once the followed session's stream is open
  live: null, // element showing text streamed in the current answer
  rejected: new Map(), // call id -> the line showing its refusal until its result arrives
  shownPending: "", // the pending approvals as last drawn, to redraw only when they change
  me: { name: "", scopes: [] }, // who the token is and what it may do (GET /me)
};

/// Whether the signed-in token holds `scope` (the server decides; this only hides what would
/// fail).
const may = (scope) => state.me.scopes.includes(scope);

const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c);
  return e;
}

function status(text) {
  $("status").textContent = text;
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + state.token }, options.headers || {});
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch("/api/v1" + path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    showLogin("That token was not accepted.");
    throw new Error("unauthorized");
  }
  if (!response.ok) {
    let message = response.statusText;
    try {
      message = (await response.json()).error.message;
    } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  if (response.status === 204) return null;
  const type = response.headers.get("Content-Type") || "";
  return type.includes("application/json") ? response.json() : response;
}

// Reads a Server-Sent Events response, calling onEvent with each parsed event.
async function readEvents(response, onEvent, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (!signal || !signal.aborted) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) {
        try { onEvent(JSON.parse(data)); } catch (_) { /* keep-alive or partial */ }
      }
    }
  }
}

// ---- login -----------------------------------------------------------------------------

function showLogin(message) {
  $("login").hidden = false;
  $("app").hidden = true;
  $("login-error").textContent = message || "";
}

async function useToken(token) {
  state.token = token;
  try {
    state.me = await api("/me");
  } catch (e) {
    if (e.message !== "unauthorized") showLogin(e.message);
    return;
  }
  sessionStorage.setItem("cordon-token", token);
  $("login").hidden = true;
  $("app").hidden = false;
  $("who").textContent = `signed in as ${state.me.name} (${state.me.scopes.join(", ")})`;
  $("tab-audit").hidden = !may("audit");
  $("tab-sessions").hidden = !may("sessions");
  $("new-session").hidden = !may("sessions");
  $("composer").hidden = !may("sessions");
  if (!may("sessions")) showTab("approvals");
  refreshAll();
}

// ---- signing in with the identity provider (authorization code with PKCE) -----------------

function base64url(bytes) {
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// Shows the sign-in button when the host takes an identity provider's tokens.
async function offerSignIn() {
  let settings;
  try {
    const response = await fetch("/api/v1/sign-in");
    if (!response.ok) return;
    settings = await response.json();
  } catch (_) {
    return;
  }
  const button = $("sign-in");
  button.textContent = `Sign in with ${settings.issuer}`;
  button.hidden = false;
  button.onclick = async () => {
    if (!window.crypto || !crypto.subtle) {
      showLogin("Signing in needs the console over https (or on this machine's own address).");
      return;
    }
    const verifier = base64url(crypto.getRandomValues(new Uint8Array(32)));
    const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
    const started = base64url(crypto.getRandomValues(new Uint8Array(16)));
    sessionStorage.setItem("cordon-sign-in", JSON.stringify({ verifier, state: started }));
    const url = new URL(settings.authorization_endpoint);
    if (url.protocol !== "https:" && url.protocol !== "http:") {
      showLogin("The identity provider's sign-in address is not a web address.");
      return;
    }
    url.search = new URLSearchParams({
      response_type: "code",
      client_id: settings.client_id,
      redirect_uri: location.origin + "/",
      scope: settings.scope,
      resource: settings.resource,
      state: started,
      code_challenge: base64url(new Uint8Array(digest)),
      code_challenge_method: "S256",
    }).toString();
    location.assign(url.toString());
  };
}

// Back from the identity provider: the code (with the verifier kept for it) becomes a token.
async function finishSignIn(params) {
  const saved = JSON.parse(sessionStorage.getItem("cordon-sign-in") || "null");
  sessionStorage.removeItem("cordon-sign-in");
  history.replaceState(null, "", location.pathname);
  // Nothing from the address is shown unless this page started the sign-in.
  if (!saved || saved.state !== params.get("state")) {
    showLogin("That sign-in was not started from this page; sign in again.");
    return;
  }
  if (params.get("error")) {
    showLogin(`The identity provider refused: ${params.get("error_description") || params.get("error")}`);
    return;
  }
  const response = await fetch("/api/v1/sign-in/token", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code: params.get("code"), code_verifier: saved.verifier, redirect_uri: location.origin + "/" }),
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    showLogin(body.error ? body.error.message : response.statusText);
    return;
  }
  useToken(body.access_token);
}

// ---- tabs ------------------------------------------------------------------------------

function showTab(name) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.tab === name);
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== "panel-" + name;
  if (name === "audit") loadAudit();
  if (name === "tools") loadTools();
  if (name === "approvals") loadApprovals();
}

// ---- sessions --------------------------------------------------------------------------

async function loadSessions() {
  const { sessions } = await api("/sessions");
  const list = $("session-list");
  list.replaceChildren();
  for (const s of sessions) {
    const item = el("li", { "data-session": s.id, class: s.id === state.selected ? "selected" : "" },
      el("div", { text: s.id }),
      el("div", { class: "meta", text: `${s.state}${s.running ? " (running)" : ""} · ${s.turns} turn(s) · ${s.title}` }));
    item.addEventListener("click", () => selectSession(s.id));
    list.append(item);
  }
}

function addMessage(kind, who, text) {
  const box = $("transcript");
  const m = el("div", { class: "msg " + kind }, el("span", { class: "who", text: who }), el("span", { class: "body", text }));
  box.append(m);
  box.scrollTop = box.scrollHeight;
  return m;
}

function renderConversation(data) {
  $("transcript").replaceChildren();
  state.live = null;
  state.rejected.clear();
  for (const m of data.messages) {
    if (m.role === "user") addMessage("user", "you", m.content);
    else if (m.role === "assistant") {
      if (m.content) addMessage("assistant", "model", m.content + (m.partial ? " [partial]" : ""));
      for (const c of m.tool_calls || []) addMessage("tool", "⚙ " + c.name, c.arguments);
    } else if (m.role === "tool") {
      addMessage("tool" + (m.is_error ? " error" : ""), (m.is_error ? "✗ " : "→ ") + m.name, m.content);
    } else if (m.role === "system") addMessage("note", "system", m.content);
  }
  for (const n of data.notes || []) if (n.at_message >= data.messages.length) addMessage("note", "", n.text);
  const labels = data.labels || { held: [], description: "" };
  showLabels(labels.description, labels.held.includes("private") && labels.held.includes("untrusted"));
  $("session-tools").hidden = true;
}

// What the session's model has seen (private data, untrusted content): a line above the
// transcript, which says when tools that can send data out are asked first.
// Which tools the last request offered, when more are installed than it offers.
function showTools(selection) {
  const line = $("session-tools");
  const why = { named: "named by the request", called: "called earlier", client: "the client's",
    routed: "picked by the router model" };
  const offered = selection.offered.map((o) =>
    o.why === "matched" ? o.name + " (matched " + o.score.toFixed(2) + ")"
      : o.why === "related" ? o.name + " (beside " + o.to + ")"
      : why[o.why] ? o.name + " (" + why[o.why] + ")" : o.name);
  line.hidden = false;
  line.textContent = "The last request offered " + offered.length + " of " + selection.of +
    " tools: " + offered.join(", ");
}

function showLabels(description, ruleOfTwo) {
  const line = $("session-labels");
  line.hidden = !description;
  line.classList.toggle("rule-of-two", ruleOfTwo);
  line.textContent = description
    ? "This session has seen: " + description + (ruleOfTwo ? ". Tools that can send data out are asked first (Rule of Two)." : ".")
    : "";
}

async function selectSession(id) {
  state.selected = id;
  $("session-title").textContent = id;
  const data = await api("/sessions/" + encodeURIComponent(id));
  renderConversation(data);
  state.shownPending = "";
  followSession(id);
  loadApprovals();
  loadSessions();
}

function onSessionEvent(event) {
  switch (event.type) {
    case "turn_started":
      addMessage("user", "you", event.input);
      break;
    case "text_delta":
      if (!state.live) state.live = addMessage("assistant", "model", "").querySelector(".body");
      state.live.textContent += event.text;
      $("transcript").scrollTop = $("transcript").scrollHeight;
      break;
    case "assistant_message":
      if (!state.live) addMessage("assistant", "model", event.content + (event.partial ? " [partial]" : ""));
      state.live = null;
      break;
    // The calls, their refusals and their results are drawn as a reload draws them from the
    // stored conversation: each call as the model wrote it, then one result per call.
    case "tool_calls_requested":
      state.live = null;
      for (const c of event.calls) addMessage("tool", "⚙ " + c.name, c.arguments);
      break;
    case "tool_call_rejected":
      // Shown at once; replaced by the call's result, which comes when its batch ends.
      state.rejected.set(event.call_id, addMessage("tool error", "✗ " + event.tool, event.reason));
      break;
    case "tool_result": {
      const refusal = state.rejected.get(event.call_id);
      if (refusal) refusal.remove();
      state.rejected.delete(event.call_id);
      addMessage("tool" + (event.is_error ? " error" : ""), (event.is_error ? "✗ " : "→ ") + event.tool, event.content);
      break;
    }
    case "approval_needed":
    case "approval_given":
      loadApprovals();
      break;
    case "labels_changed":
      showLabels(event.sources, event.rule_of_two);
      break;
    case "tools_selected":
      showTools(event.selection);
      break;
    case "turn_finished":
      state.live = null;
      if (event.outcome.kind === "failed") addMessage("note", "", "error: " + event.outcome.error);
      loadSessions();
      loadApprovals();
      break;
    case "turn_stopped":
      addMessage("note", "", event.reason);
      break;
  }
}

function followSession(id) {
  if (state.follow) state.follow.abort();
  const controller = new AbortController();
  state.follow = controller;
  // The host subscribes this stream before it answers, so once the answer's headers are here
  // no event of the session is missed: a message is sent only after that (see send).
  state.following = fetch("/api/v1/sessions/" + encodeURIComponent(id) + "/events", {
    headers: { Authorization: "Bearer " + state.token },
    signal: controller.signal,
  }).then((response) => {
    if (response.ok) {
      readEvents(response, onSessionEvent, controller.signal).catch(() => { /* aborted or the host went away */ });
    }
  }).catch(() => { /* aborted or the host went away */ });
}

async function newSession() {
  const id = $("new-session-id").value.trim();
  try {
    const info = await api("/sessions", { method: "POST", body: JSON.stringify(id ? { id } : {}) });
    $("new-session-id").value = "";
    await selectSession(info.id);
  } catch (e) {
    status(e.message);
  }
}

async function send(event) {
  event.preventDefault();
  const text = $("message").value;
  if (!state.selected || !text.trim()) return;
  $("message").value = "";
  try {
    // The events of the turn reach the transcript through the followed stream.
    await state.following;
    const response = await api("/sessions/" + encodeURIComponent(state.selected) + "/messages", {
      method: "POST",
      body: JSON.stringify({ text }),
    });
    await readEvents(response, () => {});
  } catch (e) {
    addMessage("note", "", e.message);
  }
}

async function cancelTurn() {
  if (!state.selected) return;
  try {
    await api("/sessions/" + encodeURIComponent(state.selected) + "/cancel", { method: "POST" });
  } catch (e) {
    status(e.message);
  }
}

// ---- approvals -------------------------------------------------------------------------

function renderApprovals(container, pending) {
  container.replaceChildren();
  for (const p of pending) {
    const box = el("div", { class: "approval", "data-session": p.session, "data-call": p.call_id },
      el("div", {}, el("strong", { text: `${p.tool}` }),
        ` (plugin ${p.plugin}) ${p.client ? `from MCP client ${p.client}` : `in session ${p.session}`} wants to run with:`),
      el("pre", { class: "arguments", text: JSON.stringify(p.arguments, null, 2) }),
      el("div", { class: "grants", text: p.grants.length ? "Grants: " + p.grants.join(", ") : "Grants: none" }),
      el("div", { class: "why", text: "Asked because " + p.reason + "." }),
      el("div", { class: "expires", text: "Denied if unanswered by " + new Date(p.expires_ms).toLocaleTimeString() }));
    const buttons = el("div", { class: "row" });
    const wanted = p.requested_grants || [];
    if (wanted.length) {
      // A grant request: the call ran and its sandbox refused it what these grants allow.
      box.children[0].replaceChildren(el("strong", { text: `${p.tool}` }),
        ` (plugin ${p.plugin}) in session ${p.session} was refused by its sandbox; it would run again with:`);
      box.insertBefore(el("pre", { class: "requested-grants", text: wanted.join("\n") }), box.children[1]);
    }
    // A call the Rule of Two holds back is asked every time: `always` would not hold.
    const answers = wanted.length
      ? [["yes", "Grant for this call"], ["always", "For this session"], ["for 1h", "For an hour"],
         ["forever", "For good"], ["no", "Refuse"], ["never", "Never in this session"]]
      : p.rule_of_two
      ? [["yes", "Approve"], ["no", "Deny"]]
      : [["yes", "Approve"], ["no", "Deny"], ["always", "Always for this tool"]];
    if (p.may_answer === false) {
      // Shown, not offered: the one whose turn caused the call answers only with approve:own.
      box.append(el("div", { class: "why", text: `You may not answer this: it needs the scope ${p.asked_by === state.me.name ? "approve:own" : "approve"}.` }));
      container.append(box);
      continue;
    }
    for (const [answer, label] of answers) {
      const b = el("button", { "data-answer": answer, text: label });
      b.addEventListener("click", () => answerApproval(p.session, p.call_id, answer));
      buttons.append(b);
    }
    box.append(buttons);
    container.append(box);
  }
}

async function loadApprovals() {
  const { pending } = await api("/approvals");
  const count = $("approval-count");
  count.textContent = String(pending.length);
  count.classList.toggle("zero", pending.length === 0);
  // Redrawn only when they change, so a button is never replaced under the pointer.
  const key = JSON.stringify([state.selected, pending]);
  if (key === state.shownPending) return;
  state.shownPending = key;
  renderApprovals($("approval-list"), pending);
  renderApprovals($("session-approvals"), pending.filter((p) => p.session === state.selected));
}

async function answerApproval(session, callId, answer) {
  try {
    await api(`/approvals/${encodeURIComponent(session)}/${encodeURIComponent(callId)}`, {
      method: "POST",
      body: JSON.stringify({ answer }),
    });
    status(`answered ${answer} for ${callId}`);
  } catch (e) {
    status(e.message);
  }
  loadApprovals();
}

// ---- audit -----------------------------------------------------------------------------

function bytes(n) {
  if (n === undefined || n === null) return "";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}

// The charts above the table, drawn from the records it shows (the filters apply to both),
// as SVG made element by element: a tool's name is only ever an SVG text node's text.
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// A call that did not do what was asked: refused by a policy or a person, or by its sandbox.
function refusedCall(r) {
  return r.outcome.status === "not_run" || (r.outcome.status === "error" && r.outcome.kind === "denied")
    || ((r.report || {}).refused || []).length > 0;
}

// Calls and refusals over time: the span of the records in up to 24 equal buckets, one bar of
// calls each with its refusals in red over it.
function drawCallsChart(calls) {
  const chart = $("chart-calls");
  chart.replaceChildren();
  if (!calls.length) return;
  const first = Math.min(...calls.map((r) => r.at_ms));
  const last = Math.max(...calls.map((r) => r.at_ms));
  const n = Math.min(24, calls.length);
  const width = Math.max(1, last - first + 1) / n;
  const buckets = Array.from({ length: n }, () => ({ calls: 0, refused: 0 }));
  for (const r of calls) {
    const b = buckets[Math.min(n - 1, Math.floor((r.at_ms - first) / width))];
    b.calls += 1;
    if (refusedCall(r)) b.refused += 1;
  }
  const most = Math.max(...buckets.map((b) => b.calls));
  const W = 360, H = 90, bar = W / n;
  const g = svg("svg", { viewBox: `0 0 ${W} ${H + 16}`, width: W, height: H + 16, role: "img" });
  g.append(svg("title", {}, `tool calls from ${new Date(first).toLocaleString()} to ${new Date(last).toLocaleString()}`));
  buckets.forEach((b, i) => {
    const h = (b.calls / most) * H, hr = (b.refused / most) * H;
    const at = new Date(first + i * width).toLocaleString();
    const col = svg("g", { class: "bucket", "data-calls": b.calls, "data-refused": b.refused });
    col.append(svg("title", {}, `${at}: ${b.calls} calls, ${b.refused} refused`));
    col.append(svg("rect", { class: "calls", x: i * bar + 1, y: H - h, width: bar - 2, height: h }));
    col.append(svg("rect", { class: "refused", x: i * bar + 1, y: H - hr, width: bar - 2, height: hr }));
    g.append(col);
  });
  g.append(svg("text", { x: 0, y: H + 13 }, new Date(first).toLocaleTimeString()));
  g.append(svg("text", { x: W, y: H + 13, "text-anchor": "end" }, new Date(last).toLocaleTimeString()));
  chart.append(g);
}

// The slowest tools by their median duration, at most five.
function drawSlowestChart(calls) {
  const chart = $("chart-slowest");
  chart.replaceChildren();
  const by = new Map();
  for (const r of calls) {
    const ms = (r.report || {}).duration_ms;
    if (ms === undefined) continue;
    const name = `${r.plugin}.${r.tool}`;
    if (!by.has(name)) by.set(name, []);
    by.get(name).push(ms);
  }
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };
  const rows = [...by].map(([name, xs]) => ({ name, ms: median(xs), n: xs.length }))
    .sort((a, b) => b.ms - a.ms).slice(0, 5);
  if (!rows.length) return;
  const most = rows[0].ms || 1;
  const W = 360, row = 18;
  const g = svg("svg", { viewBox: `0 0 ${W} ${rows.length * row}`, width: W, height: rows.length * row, role: "img" });
  g.append(svg("title", {}, "the slowest tools, by median duration"));
  rows.forEach((r, i) => {
    const line = svg("g", { class: "tool", "data-tool": r.name, "data-median-ms": r.ms });
    line.append(svg("rect", { x: 150, y: i * row + 3, width: Math.max(1, (r.ms / most) * (W - 230)), height: row - 6 }));
    line.append(svg("text", { x: 0, y: i * row + 13 }, r.name.length > 22 ? r.name.slice(0, 21) + "…" : r.name));
    line.append(svg("text", { x: W, y: i * row + 13, "text-anchor": "end" }, `${r.ms.toFixed(1)} ms ×${r.n}`));
    g.append(line);
  });
  chart.append(g);
}

async function loadAudit(event) {
  if (event) event.preventDefault();
  const params = new URLSearchParams({ limit: "500" });
  for (const [key, id] of [["session", "audit-session"], ["tool", "audit-tool"], ["since", "audit-since"], ["kind", "audit-kind"]]) {
    const v = $(id).value.trim();
    if (v) params.set(key, v);
  }
  $("audit-error").textContent = "";
  let records;
  try {
    ({ records } = await api("/audit?" + params));
  } catch (e) {
    $("audit-error").textContent = e.message;
    return;
  }
  const calls = records.filter((r) => r.kind === "tool_call");
  drawCallsChart(calls);
  drawSlowestChart(calls);
  $("audit-charts").hidden = calls.length === 0;
  const body = $("audit-table").querySelector("tbody");
  body.replaceChildren();
  for (const r of records.reverse()) {
    const time = new Date(r.at_ms).toLocaleString();
    let cells;
    if (r.kind === "tool_call") {
      const o = r.outcome;
      const outcome = o.status === "ok" ? "ok" : o.status === "error" ? `${o.kind}: ${o.message}` : `not run: ${o.reason}`;
      const report = r.report || {};
      cells = [time, r.origin, r.session || "", `${r.plugin}.${r.tool}`, r.decision, r.decided_by, outcome,
        report.duration_ms !== undefined ? report.duration_ms.toFixed(1) + " ms" : "", bytes(report.peak_memory), (report.refused || []).join("; ")];
    } else {
      cells = [time, r.origin, "", `${r.action} ${r.plugin}`, "", r.by, (r.details || []).join("; "), "", "", ""];
    }
    const row = el("tr", { "data-kind": r.kind });
    cells.forEach((c, i) => row.append(el("td", { class: i === 9 && c ? "refused" : "", text: c })));
    body.append(row);
  }
}

// ---- tools -----------------------------------------------------------------------------

async function loadTools() {
  const { tools } = await api("/tools");
  const body = $("tool-table").querySelector("tbody");
  body.replaceChildren();
  for (const t of tools) {
    const row = el("tr", {});
    const rules = (t.rules || []).map((r) => `${r.id} (${r.source}): ${r.decision}${r.reason ? " — " + r.reason : ""}`).join("; ");
    for (const c of [t.name, t.plugin, t.policy, t.reason, t.grants.join(", "), t.description, rules || "none"]) row.append(el("td", { text: c }));
    body.append(row);
  }
}

// ---- start -----------------------------------------------------------------------------

async function refreshAll() {
  try {
    if (may("sessions")) await loadSessions();
    await loadApprovals();
    status("connected");
  } catch (e) {
    status(e.message === "unauthorized" ? "" : "cannot reach the host: " + e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showTab(tab.dataset.tab));
  $("token-save").addEventListener("click", () => useToken($("token-input").value.trim()));
  $("token-input").addEventListener("keydown", (e) => { if (e.key === "Enter") useToken($("token-input").value.trim()); });
  $("new-session").addEventListener("click", newSession);
  $("composer").addEventListener("submit", send);
  $("cancel").addEventListener("click", cancelTurn);
  $("audit-filters").addEventListener("submit", loadAudit);
  offerSignIn();
  // A token handed over in the URL's fragment (never sent to the server) is taken and removed.
  const fragment = new URLSearchParams(location.hash.slice(1));
  const query = new URLSearchParams(location.search);
  if (query.get("state") && (query.get("code") || query.get("error"))) {
    finishSignIn(query);
  } else if (fragment.get("token")) {
    history.replaceState(null, "", location.pathname);
    useToken(fragment.get("token"));
  } else if (state.token) {
    useToken(state.token);
  } else {
    showLogin();
  }
  setInterval(() => { if (!$("app").hidden) refreshAll(); }, 2000);
});
