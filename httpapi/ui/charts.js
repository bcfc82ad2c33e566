// rlnode status page charts: inline SVG drawn here from the data app.js
// already fetched (no library, no external asset; the content security
// policy stays self-only). Rates are remembered by this page since it
// opened, up to chartSpanMs: /v1/top gives each policy's allowed and
// refused rate over its last minute, once a second.
"use strict";

const chartSpanMs = 5 * 60 * 1000;
const chartW = 320, chartH = 64;
const svgNS = "http://www.w3.org/2000/svg";
const rateHistory = new Map(); // policy -> [{t, a, r}]

function svgEl(name, attrs) {
  const e = document.createElementNS(svgNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

// recordRates keeps each policy's rates over the last chartSpanMs.
function recordRates(top, now) {
  for (const p of top.policies) {
    let h = rateHistory.get(p.policy);
    if (!h) rateHistory.set(p.policy, (h = []));
    h.push({ t: now, a: p.allowedPerSec, r: p.refusedPerSec });
  }
  for (const [policy, h] of rateHistory) {
    while (h.length && h[0].t < now - chartSpanMs) h.shift();
    if (!h.length) rateHistory.delete(policy);
  }
}

// renderCharts draws one small chart per policy: allowed (green) and
// refused (red) per second, the right edge now, the left edge a minute
// ago, or further back as the history grows (up to chartSpanMs).
function renderCharts(now) {
  const box = document.getElementById("charts");
  box.replaceChildren();
  for (const [policy, h] of [...rateHistory].sort((x, y) => x[0].localeCompare(y[0]))) {
    const peak = Math.max(1, ...h.map((p) => Math.max(p.a, p.r)));
    const span = Math.min(chartSpanMs, Math.max(60000, now - h[0].t));
    const x = (t) => (chartW * (t - (now - span)) / span).toFixed(1);
    const y = (v) => (chartH - 2 - (chartH - 6) * v / peak).toFixed(1);
    const svg = svgEl("svg", { viewBox: `0 0 ${chartW} ${chartH}`, width: chartW, height: chartH, role: "img" });
    svg.dataset.policy = policy;
    const last = h[h.length - 1];
    const title = svgEl("title");
    title.textContent = policy + ": allowed and refused per second, last " + Math.round(span / 60000) + " min";
    svg.append(title, svgEl("line", { x1: 0, y1: chartH - 1.5, x2: chartW, y2: chartH - 1.5, class: "axis" }));
    for (const [cls, key] of [["allowed", "a"], ["refused", "r"]]) {
      const line = svgEl("polyline", { class: cls, points: h.map((p) => x(p.t) + "," + y(p[key])).join(" ") });
      line.dataset.points = String(h.length);
      svg.appendChild(line);
    }
    const fig = document.createElement("figure");
    fig.className = "chart";
    const cap = document.createElement("figcaption");
    cap.textContent = policy + " · last " + Math.round(span / 60000) + " min · " + last.a.toFixed(1) + " allowed/s · " + last.r.toFixed(1) + " refused/s · peak " + peak.toFixed(1);
    fig.append(svg, cap);
    box.appendChild(fig);
  }
}

// renderLeaseShare draws one bar split by the members' shares of the
// leased units held now.
function renderLeaseShare(members) {
  const svg = document.getElementById("lease-share");
  const cap = document.getElementById("lease-share-caption");
  svg.replaceChildren();
  const held = members.filter((m) => m.reachable && m.status.leases)
    .map((m) => ({ id: m.id, units: m.status.leases.unitsHeld, local: m.status.leases.decidedLocal }));
  const total = held.reduce((s, m) => s + m.units, 0);
  svg.dataset.total = String(total);
  if (total === 0) {
    cap.textContent = "no member holds leased units now";
    return;
  }
  const w = 640, h = 22;
  let x = 0;
  held.forEach((m, i) => {
    const width = w * m.units / total;
    const rect = svgEl("rect", { x: x.toFixed(1), y: 0, width: width.toFixed(1), height: h, class: "share s" + (i % 5) });
    rect.dataset.member = m.id;
    rect.dataset.units = String(m.units);
    const t = svgEl("title");
    t.textContent = m.id + ": " + m.units + " units held, " + m.local + " hits decided locally since start";
    rect.appendChild(t);
    svg.appendChild(rect);
    if (width > 48) {
      const label = svgEl("text", { x: (x + 4).toFixed(1), y: 15, class: "share-label" });
      label.textContent = m.id + " " + Math.round(100 * m.units / total) + "%";
      svg.appendChild(label);
    }
    x += width;
  });
  cap.textContent = total + " units held: " + held.map((m) => m.id + " " + Math.round(100 * m.units / total) + "%").join(" · ");
}
