// the-loop dashboard: reads the local read-only API, renders with textContent only
// (no HTML from data ever), follows /api/events/stream. No external asset.
"use strict";

const MAX_EVENTS = 200;
const REFRESH_MS = 5000;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

async function getJSON(path) {
  const answer = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (!answer.ok) throw new Error(path + ": HTTP " + answer.status);
  return answer.json();
}

function cell(row, label, text, cls) {
  const td = el("td", text, cls);
  td.dataset.label = label;
  row.appendChild(td);
}

function renderHealth(status) {
  const badge = document.getElementById("health");
  badge.textContent = status.ok ? "healthy" : "NOT OK";
  badge.className = "badge " + (status.ok ? "ok" : "bad");
  const s = status.sessions || {};
  document.getElementById("summary").textContent =
    (s.registered || 0) + " sessions: " + (s.live || 0) + " live, " + (s.dead || 0) +
    " dead · " + (status.tracker || "") + " · the-loop " + (status.version || "");
}

function renderAttention(rows) {
  const list = document.getElementById("attention");
  list.replaceChildren();
  for (const row of rows) {
    const li = el("li");
    li.appendChild(el("strong", row.item || row.workItem || "?"));
    li.appendChild(document.createTextNode(" " + (row.why || "") + (row.since ? " since " + row.since : "")));
    if (row.remedy) {
      li.appendChild(document.createTextNode(" · "));
      li.appendChild(el("code", row.remedy));
    }
    list.appendChild(li);
  }
  document.getElementById("attention-count").textContent = String(rows.length);
  document.getElementById("attention-empty").hidden = rows.length > 0;
}

function renderFleet(sessions, status, inbox) {
  const drift = {};
  const env = status.sessionEnvironment || {};
  for (const row of env.rows || []) drift[row.ref] = row.state;
  const waiting = {};
  for (const row of (inbox && inbox.rows) || []) {
    const ref = row.workItem || row.work_item;
    waiting[ref] = (waiting[ref] || 0) + 1;
  }
  const body = document.querySelector("#fleet tbody");
  body.replaceChildren();
  const active = sessions.filter((s) => s.status === "active");
  for (const s of active) {
    const tr = el("tr");
    tr.dataset.ref = s.ref;
    cell(tr, "host", s.host || (status.hosts && status.hosts.this) || "this host");
    cell(tr, "item", s.displayRef || s.ref);
    cell(tr, "state", s.presence, s.presence);
    cell(tr, "activity", s.presence === "live" ? s.activity : "-", s.activity);
    cell(tr, "drift", drift[s.ref] || "-", drift[s.ref]);
    cell(tr, "inbox", waiting[s.ref] || 0);
    body.appendChild(tr);
  }
  document.getElementById("fleet-count").textContent = String(active.length);
  document.getElementById("fleet-empty").hidden = active.length > 0;
}

async function refresh() {
  try {
    const [status, sessions, inbox] = await Promise.all([
      getJSON("/api/status"), getJSON("/api/sessions"), getJSON("/api/inbox?limit=1000"),
    ]);
    renderHealth(status);
    renderAttention(Array.isArray(status.attention) ? status.attention : []);
    renderFleet(sessions, status, inbox);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    document.getElementById("updated").textContent = "not updated: " + err.message;
  }
}

const seen = new Set();
let newest = "";

function addEvent(record) {
  const key = [record.ts, record.type, record.deliveryId, record.workItem].join("|");
  if (seen.has(key)) return;  // a record fetched after a reconnect and streamed too
  seen.add(key);
  if ((record.ts || "") > newest) newest = record.ts || "";
  const list = document.getElementById("events");
  const li = el("li", null, record.level || "");
  li.hidden = record.level === "debug" && !document.getElementById("show-debug").checked;
  li.dataset.type = record.type || "";
  li.appendChild(el("span", (record.ts || "").replace("T", " ").slice(0, 19) + " ", "t"));
  li.appendChild(el("b", record.type || "?"));
  const rest = [record.workItem, record.deliveryId].filter(Boolean).join(" ");
  if (rest) li.appendChild(document.createTextNode(" " + rest));
  const detail = record.detail && Object.keys(record.detail).length ? " " + JSON.stringify(record.detail) : "";
  if (detail) li.appendChild(document.createTextNode(detail));
  list.prepend(li);
  li.dataset.key = key;
  while (list.children.length > MAX_EVENTS) {
    seen.delete(list.lastElementChild.dataset.key);
    list.lastElementChild.remove();
  }
}

function follow() {
  const state = document.getElementById("stream-state");
  const source = new EventSource("/api/events/stream");
  let dropped = false;
  source.onopen = () => {
    state.textContent = "live";
    state.className = "badge ok";
    if (dropped) catchUp();  // what was written while the stream was down
    dropped = false;
  };
  source.onerror = () => {
    dropped = true;
    state.textContent = "reconnecting";
    state.className = "badge bad";
  };
  source.addEventListener("record", (message) => {
    try { addEvent(JSON.parse(message.data)); } catch (err) { /* a damaged record: skipped */ }
  });
}

function toggleDebug() {
  const show = document.getElementById("show-debug").checked;
  for (const li of document.querySelectorAll("#events li.debug")) li.hidden = !show;
}

async function catchUp() {
  try {
    const since = newest;
    const recent = await getJSON("/api/events?limit=200");
    for (const record of recent) if ((record.ts || "") > since) addEvent(record);
  } catch (err) { /* the stream goes on */ }
}

async function start() {
  document.getElementById("show-debug").addEventListener("change", toggleDebug);
  try {
    const recent = await getJSON("/api/events?limit=50");
    for (const record of recent) addEvent(record);
  } catch (err) { /* the stream still follows */ }
  follow();
  refresh();
  setInterval(refresh, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", start);
