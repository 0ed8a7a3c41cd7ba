// DOM for Headroom's two panels. Everything is drawn inside the element the host hands to a tab's render():
// no element of the host's own menus or canvas is touched. Logic lives in lib/ (pure, unit-tested).
import { chartGeometry, chartWindow } from "./lib/samples.js";
import { formatBytes, formatSeconds } from "./lib/format.js";
import { planSummary, timelineRows } from "./lib/timeline.js";

const SVG = "http://www.w3.org/2000/svg";

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "style") Object.assign(node.style, value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node[key] = value;
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

const PANEL_STYLE = { padding: "8px", fontSize: "12px", display: "flex", flexDirection: "column", gap: "8px" };

/** The sidebar tab: live numbers, the chart of the last minutes, and the last run's per-node peaks. */
export class MonitorPanel {
  constructor(root) {
    this.root = root;
    this.numbers = el("div", { className: "headroom-numbers" });
    this.chart = el("div", { className: "headroom-chart" });
    this.legend = el("div", { className: "headroom-legend", style: { display: "flex", flexWrap: "wrap", gap: "6px" } });
    this.nodes = el("div", { className: "headroom-nodes" });
    this.status = el("div", { className: "headroom-status", style: { opacity: "0.7" } });
    root.replaceChildren(
      el("div", { className: "headroom-monitor", style: PANEL_STYLE },
        el("strong", { textContent: "Headroom memory" }), this.numbers, this.chart, this.legend, this.status, this.nodes),
    );
  }

  draw(history, badges, info = "") {
    const latest = history.latest();
    const box = this.root.querySelector(".headroom-monitor");
    box.dataset.samples = String(history.length);
    const rows = [
      ["VRAM used", latest?.device_used, latest?.device_total],
      ["torch allocated", latest?.allocated],
      ["torch reserved", latest?.reserved],
      ["process RSS", latest?.rss],
      ["system RAM", latest?.ram_used, latest?.ram_total],
      ["pinned (Headroom)", latest?.pinned],
    ].filter(([, value]) => Number.isFinite(value));
    this.numbers.replaceChildren(
      ...rows.map(([label, value, total]) =>
        el("div", { textContent: `${label}: ${formatBytes(value)}${total ? ` / ${formatBytes(total)}` : ""}` })),
    );
    if (!Number.isFinite(latest?.device_used)) this.numbers.append(el("div", { textContent: "No GPU telemetry here (CPU only)", style: { opacity: "0.7" } }));
    const width = Math.max(160, (this.chart.clientWidth || 280) - 4);
    const height = 140;
    const geometry = chartGeometry(history.samples, { width, height, window: chartWindow(history.samples) });
    const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "memory over the last minutes" });
    chart.append(svg("rect", { x: 0, y: 0, width, height, fill: "none", stroke: "currentColor", "stroke-opacity": 0.2 }));
    for (const s of geometry.series) chart.append(svg("path", { d: s.d, fill: "none", stroke: s.color, "stroke-width": 1.5 }));
    const top = svg("text", { x: 4, y: 12, fill: "currentColor", "font-size": 10 });
    top.textContent = formatBytes(geometry.yMax);
    chart.append(top);
    this.chart.replaceChildren(chart);
    this.legend.replaceChildren(
      ...geometry.series.map((s) =>
        el("span", {}, el("span", { textContent: "■ ", style: { color: s.color } }), `${s.label} ${formatBytes(s.last)}`)),
    );
    this.status.textContent = `${history.length} samples${info ? ` · ${info}` : ""}`;
    const records = [...badges.records.values()];
    this.nodes.replaceChildren(
      ...(records.length ? [el("strong", { textContent: "Last run, per node" })] : []),
      ...records.map((r) => el("div", { className: "headroom-node-row", dataset: { node: String(r.node) },
        textContent: `#${r.node} ${r.class_type}: ${badges.text(r.node)}` })),
    );
  }
}

/** The bottom-panel tab: per node, what the plan predicted and what happened, with a CSV link. */
export class TimelinePanel {
  constructor(root, reportUrl) {
    this.root = root;
    this.reportUrl = reportUrl; // prompt id, format -> URL of GET /headroom/report
    this.box = el("div", { className: "headroom-timeline", style: { ...PANEL_STYLE, overflow: "auto", height: "100%" } });
    root.replaceChildren(this.box);
    this.draw(null);
  }

  draw(report) {
    const header = el("div", { style: { display: "flex", gap: "12px", alignItems: "baseline" } },
      el("strong", { textContent: "Residency timeline" }), el("span", { textContent: planSummary(report) }));
    if (report) {
      header.append(el("a", { href: this.reportUrl(report.prompt_id, "csv"), textContent: "CSV", download: `headroom-${report.prompt_id}.csv` }));
    }
    const rows = timelineRows(report);
    const table = el("table", { style: { borderCollapse: "collapse", width: "100%" } });
    const head = el("tr", {}, ...["node", "class", "time", "state", "VRAM (actual / planned)", "RSS peak", "placements (plan)", "residency events"]
      .map((h) => el("th", { textContent: h, style: { textAlign: "left", padding: "2px 6px" } })));
    table.append(head);
    const colour = { ok: "#43a047", over: "#e53935", unplanned: "#8e24aa", skipped: "#9e9e9e", error: "#e53935" };
    for (const r of rows) {
      const bars = el("div", { style: { position: "relative", height: "14px", minWidth: "160px" } },
        el("div", { title: `planned ${formatBytes(r.planned)}`, style: { position: "absolute", top: "0", height: "6px", width: `${(r.plannedFrac * 100).toFixed(1)}%`, background: "#7e57c2" } }),
        el("div", { title: `actual ${formatBytes(r.actual)}`, style: { position: "absolute", top: "7px", height: "6px", width: `${(r.actualFrac * 100).toFixed(1)}%`, background: colour[r.state] } }));
      table.append(el("tr", { className: `headroom-row headroom-${r.state}`, dataset: { node: r.node } },
        el("td", { textContent: r.node }), el("td", { textContent: r.classType }),
        el("td", { textContent: `${formatSeconds(r.duration)}${r.plannedWall ? ` (plan ${formatSeconds(r.plannedWall)})` : ""}` }),
        el("td", { textContent: r.state }),
        el("td", {}, bars, el("div", { textContent: `${formatBytes(r.actual)} / ${formatBytes(r.planned)}` })),
        el("td", { textContent: formatBytes(r.rss) }),
        el("td", { textContent: r.placements || "–", title: r.reasons }), el("td", { textContent: r.events || "–" })));
    }
    this.box.replaceChildren(header, rows.length ? table : el("div", { textContent: "Run a workflow to see what was planned and what happened." }));
    this.box.dataset.rows = String(rows.length);
  }
}
