// rlnode status page: read-only. It GETs the admin-guarded JSON endpoints
// of the node that served it, once a second, and writes nothing. Data is
// put into the page with textContent only: client ids are untrusted text.
"use strict";

const tokenKey = "rlnode-token";
const $ = (id) => document.getElementById(id);

function headers() {
  const tok = sessionStorage.getItem(tokenKey);
  return tok ? { Authorization: "Bearer " + tok } : {};
}

async function getJSON(path) {
  const r = await fetch(path, { headers: headers(), cache: "no-store", credentials: "same-origin" });
  if (r.status === 401) {
    throw new Error("this node needs the cluster token (or a client certificate): type it above");
  }
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (e) {}
    throw new Error(path + ": HTTP " + r.status + ": " + detail);
  }
  return r.json();
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function bytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}

// leaseCell shows the node's lease totals: keys and units it holds now,
// hits it decided from them and grants it got since it started.
function leaseCell(tr, l) {
  l = l || { keysHeld: 0, unitsHeld: 0, decidedLocal: 0, grants: 0 };
  cell(tr, l.keysHeld + " keys, " + l.unitsHeld + " units · " + l.decidedLocal + " local, " + l.grants + " grants", "leases");
  tr.lastChild.dataset.keysHeld = String(l.keysHeld);
  tr.lastChild.dataset.decidedLocal = String(l.decidedLocal);
}

function renderMembers(members) {
  const body = $("members").tBodies[0];
  body.replaceChildren();
  let leader = null, up = 0, clusterFormat = 0;
  for (const m of members) {
    const tr = document.createElement("tr");
    tr.dataset.member = m.id;
    tr.dataset.reachable = String(m.reachable);
    cell(tr, m.id);
    if (!m.reachable) {
      tr.className = "unreachable";
      tr.dataset.role = "unreachable";
      cell(tr, "unreachable");
      const td = document.createElement("td");
      td.colSpan = 11;
      td.textContent = m.error || "";
      tr.appendChild(td);
      body.appendChild(tr);
      continue;
    }
    up++;
    const s = m.status;
    tr.dataset.role = s.state;
    if (s.state === "Leader") { tr.className = "leader"; leader = m.id; }
    cell(tr, s.state);
    cell(tr, s.format ? (s.version || "-") + " · format " + s.format : "older (format 3)", "version");
    if (s.clusterFormat) clusterFormat = Math.min(clusterFormat || s.clusterFormat, s.clusterFormat);
    cell(tr, s.term, "num");
    cell(tr, s.commitIndex, "num");
    cell(tr, s.appliedIndex, "num");
    cell(tr, m.lag, "num");
    cell(tr, s.state === "Leader" || s.lastContact === "never" || !s.lastContact ? "-" : s.lastContact);
    cell(tr, (s.clockSkewMs >= 0 ? "+" : "") + s.clockSkewMs + " ms" + (s.clockSkewed ? " (skewed)" : ""), "num");
    cell(tr, bytes(s.logBytes), "num");
    cell(tr, bytes(s.snapshotBytes), "num");
    cell(tr, s.liveWindows, "num");
    leaseCell(tr, s.leases);
    body.appendChild(tr);
  }
  const sum = $("summary");
  sum.textContent = "leader: " + (leader || "none") + " · " + up + "/" + members.length + " members reachable" +
    (clusterFormat ? " · cluster log format " + clusterFormat : "");
  sum.dataset.leader = leader || "";
}

function renderTop(top) {
  $("window").textContent = "(last " + Math.round(top.windowMs / 1000) + " s, cluster-wide)";
  $("accuracy").textContent = top.accuracy + (top.nodes.some((n) => !n.ok) ?
    "; without " + top.nodes.filter((n) => !n.ok).map((n) => n.id).join(", ") + " (unreachable)" : "");
  const pol = $("policies").tBodies[0];
  pol.replaceChildren();
  const keys = $("top").tBodies[0];
  keys.replaceChildren();
  for (const p of top.policies) {
    const tr = document.createElement("tr");
    tr.dataset.policy = p.policy;
    cell(tr, p.policy);
    cell(tr, p.allowedPerSec.toFixed(1), "num");
    cell(tr, p.refusedPerSec.toFixed(1), "num");
    cell(tr, p.allowed, "num");
    cell(tr, p.refused, "num");
    pol.appendChild(tr);
    for (const k of p.keys) {
      const kr = document.createElement("tr");
      kr.dataset.policy = p.policy;
      kr.dataset.key = k.key;
      cell(kr, p.policy);
      cell(kr, k.key);
      cell(kr, k.count, "num");
      cell(kr, k.min, "num");
      keys.appendChild(kr);
    }
  }
}

// renderSelf says when the node serving this page was removed from the
// cluster (GET /v1/status is public, like /readyz, which says the same).
function renderSelf(s) {
  const el = $("removed");
  el.hidden = s.membership !== "removed";
  el.textContent = el.hidden ? "" : "This node (" + s.id + ") was removed from the cluster: " + (s.removed || "") +
    ". It answers 503 not_member and is not ready; the table below is its last view.";
  el.dataset.membership = s.membership || "";
}

// historyEveryMs is how often the page asks for the charts' history (the
// node keeps it in 5 s steps; the table refreshes every second).
const historyEveryMs = 5000;
let historyAt = 0;

// renderRegion shows a region's slices per global key and its holder at
// the parent; a node in no region answers 404 and the section stays hidden.
function renderRegion(r) {
  const sec = $("region");
  sec.hidden = !r;
  if (!r) return;
  const p = r.parent;
  $("region-summary").textContent = r.region + " · holder " + p.holder + " at " + p.addrs + " · " + (r.holder ?
    (p.up ? "parent up" : "parent DOWN") + ", round trip " + p.rttMs.toFixed(1) + " ms, " + p.calls + " calls, " +
    p.failures + " failed, " + p.unitsReturned + " units returned" :
    "this node is a follower: the leader (" + (r.leaderId || "none") + ") holds the slices and knows the round trip");
  sec.dataset.parentUp = String(p.up);
  const body = $("region-keys").tBodies[0];
  body.replaceChildren();
  for (const k of r.keys) {
    const tr = document.createElement("tr");
    tr.dataset.policy = k.policy;
    tr.dataset.key = k.client;
    cell(tr, k.policy);
    cell(tr, k.client);
    for (const n of [k.held, k.got, k.spent, k.returned, k.short]) cell(tr, n, "num");
    body.appendChild(tr);
  }
}

async function getRegion() {
  try {
    return await getJSON("../v1/cluster/region");
  } catch (e) {
    if (/HTTP 404/.test(e.message)) return null;
    throw e;
  }
}

async function refresh() {
  getJSON("../v1/status").then(renderSelf).catch(() => {});
  try {
    const withHistory = Date.now() - historyAt >= historyEveryMs;
    const [members, top, region] = await Promise.all([getJSON("../v1/cluster/members"),
      getJSON("../v1/top?by=refused&n=10" + (withHistory ? "&history=1" : "")), getRegion()]);
    renderMembers(members.members);
    renderTop(top);
    renderRegion(region);
    const now = Date.now();
    if (withHistory) {
      setHistory(top.history);
      historyAt = now;
    }
    renderCharts(now);
    renderLeaseShare(members.members);
    $("data").hidden = false;
    $("error").textContent = "";
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    // Nothing stays on screen that the token did not unlock.
    $("data").hidden = true;
    $("summary").textContent = "not connected";
    $("error").textContent = e.message;
  }
}

function loop() {
  refresh().finally(() => setTimeout(loop, 1000));
}

document.addEventListener("DOMContentLoaded", () => {
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(tokenKey, $("token").value);
    $("token").value = "";
    refresh();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(tokenKey);
    refresh();
  });
  loop();
});
