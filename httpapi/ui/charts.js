// rlnode status page charts: inline SVG drawn here from the data app.js
// already fetched (no library, no external asset; the content security
// policy stays self-only). The history is the node's, not the page's:
// GET /v1/top?history=1 gives each policy's allowed and refused hits per
// 5 s step over the last 10 minutes, merged from every member, so a page
// opened now shows what just happened.
"use strict";

const chartW = 360, chartH = 96;
// The plot area inside the chart: room on the left for the rate labels
// and at the bottom for the time labels.
const plot = { left: 40, right: 354, top: 6, bottom: 76 };
const svgNS = "http://www.w3.org/2000/svg";
let rateHistory = []; // [{policy, stepMs, points: [{t, allowed, refused}]}]

function svgEl(name, attrs) {
  const e = document.createElementNS(svgNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function svgText(x, y, text, cls, anchor) {
  const e = svgEl("text", { x: x, y: y, class: cls, "text-anchor": anchor || "start" });
  e.textContent = text;
  return e;
}

// setHistory keeps the node's latest history (app.js asks for it every
// few seconds).
function setHistory(history) {
  rateHistory = history || [];
}

// niceCeil rounds a peak rate up to 1, 2 or 5 times a power of ten, so
// the axis reads in round numbers.
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(v, 1e-9))));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// ago labels a time axis tick: "now", "-30 s", "-4 min".
function ago(ms) {
  if (ms < 1000) return "now";
  if (ms < 120000) return "-" + Math.round(ms / 1000) + " s";
  return "-" + Math.round(ms / 60000) + " min";
}

// renderCharts draws one chart per policy: allowed (green) and refused
// (red) hits per second per step, from the first step with hits (at least
// the last minute) to now, with a rate axis and a time axis.
function renderCharts(now) {
  const box = document.getElementById("charts");
  box.replaceChildren();
  for (const h of rateHistory) {
    const secs = h.stepMs / 1000;
    const pts = h.points.map((p) => ({ t: p.t, a: p.allowed / secs, r: p.refused / secs }));
    const busy = pts.findIndex((p) => p.a > 0 || p.r > 0);
    if (busy < 0) continue;
    const end = now;
    const start = Math.min(pts[busy].t, end - 60000);
    const shown = pts.filter((p) => p.t >= start);
    const top = niceCeil(Math.max(...shown.map((p) => Math.max(p.a, p.r))));
    const x = (t) => (plot.left + (plot.right - plot.left) * (t - start) / (end - start)).toFixed(1);
    const y = (v) => (plot.bottom - (plot.bottom - plot.top) * v / top).toFixed(1);
    const svg = svgEl("svg", { viewBox: `0 0 ${chartW} ${chartH}`, width: chartW, height: chartH, role: "img" });
    svg.dataset.policy = h.policy;
    svg.dataset.fromMs = String(start);
    const title = svgEl("title");
    title.textContent = h.policy + ": allowed and refused per second, " + secs + " s steps, since " + new Date(start).toLocaleTimeString();
    svg.appendChild(title);
    // Axes: rates on the left (0, half, top), time below (start, middle, now).
    svg.append(svgEl("line", { x1: plot.left, y1: plot.bottom, x2: plot.right, y2: plot.bottom, class: "axis x" }),
      svgEl("line", { x1: plot.left, y1: plot.top, x2: plot.left, y2: plot.bottom, class: "axis y" }));
    for (const v of [0, top / 2, top]) {
      svg.append(svgEl("line", { x1: plot.left - 3, y1: y(v), x2: plot.right, y2: y(v), class: v === 0 ? "tick" : "grid" }),
        svgText(plot.left - 5, Number(y(v)) + 4, (v >= 10 ? v.toFixed(0) : String(Math.round(v * 10) / 10)) + "/s", "tick-label", "end"));
    }
    for (const [t, anchor] of [[start, "start"], [(start + end) / 2, "middle"], [end, "end"]]) {
      svg.append(svgEl("line", { x1: x(t), y1: plot.bottom, x2: x(t), y2: plot.bottom + 3, class: "tick" }),
        svgText(x(t), plot.bottom + 15, ago(end - t), "tick-label", anchor));
    }
    for (const [cls, key] of [["allowed", "a"], ["refused", "r"]]) {
      // Each step at its middle; the current one, still filling, at now.
      const line = svgEl("polyline", { class: cls, points: shown.map((p) => x(Math.min(p.t + h.stepMs / 2, end)) + "," + y(p[key])).join(" ") });
      line.dataset.points = String(shown.length);
      line.dataset.nonzero = String(shown.filter((p) => p[key] > 0).length);
      svg.appendChild(line);
    }
    const last = shown[shown.length - 1];
    const fig = document.createElement("figure");
    fig.className = "chart";
    const cap = document.createElement("figcaption");
    cap.textContent = h.policy + " · " + ago(end - start).replace("-", "last ") + " · now " + last.a.toFixed(1) + " allowed/s · " +
      last.r.toFixed(1) + " refused/s · per " + secs + " s";
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
