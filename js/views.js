// DOM for Headroom's two panels. Everything is drawn inside the element the host hands to a tab's render():
// no element of the host's own menus or canvas is touched. Logic lives in lib/ (pure, unit-tested).
import { chartWindow } from "./lib/samples.js";
import { chartLayout } from "./lib/chart.js";
import { formatBytes, formatSeconds } from "./lib/format.js";
import { freeVram } from "./lib/free.js";
import { locateNode, nameOf } from "./lib/nodes.js";
import { ramRows, ramSummary } from "./lib/ram.js";
import { planBudget, planSummary, timelineRows } from "./lib/timeline.js";

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

/** A node's name (its title) that selects the node and centres the canvas on it when clicked; plain text
 * when the open workflow has no such node (a report of another workflow). */
export function nodeLink(id, classType, app = globalThis.app) {
  const name = nameOf(app, id, classType);
  if (!name.found) return el("span", { className: "headroom-node-name", textContent: name.text, title: name.tooltip });
  return el("a", {
    className: "headroom-node-link",
    href: "#",
    textContent: name.text,
    title: name.tooltip,
    dataset: { node: String(id) },
    style: { color: "inherit", textDecoration: "underline dotted", cursor: "pointer" },
    onclick: (event) => {
      event.preventDefault();
      locateNode(globalThis.app, id, classType);
    },
  });
}

// Our buttons' own look: the host's button classes differ between frontends (PrimeVue's p-button up to
// 1.5x, none by 1.58), and an unstyled native button looks broken in a dark theme.
export const BUTTON_STYLE = {
  padding: "3px 10px", fontSize: "12px", borderRadius: "6px", border: "1px solid rgba(127, 127, 127, 0.45)",
  background: "rgba(127, 127, 127, 0.15)", color: "inherit", cursor: "pointer", font: "inherit",
};

const PANEL_STYLE = { padding: "8px", fontSize: "12px", display: "flex", flexDirection: "column", gap: "8px" };

/** What the time assumes (the plan's "time": the card, how it was chosen, what the time includes), where
 * the server says. */
export function timeLine(time) {
  if (!time?.card) return null;
  const how = { named: "the card named", device: "this server's card", assumed: "assumed" }[time.card_source] ?? time.card_source ?? "";
  const range = Array.isArray(time.range_s) && time.range_s.length === 2 ? `, ${formatSeconds(time.range_s[0])}–${formatSeconds(time.range_s[1])}` : "";
  const text = `Time for ${time.card}${how ? ` (${how})` : ""}${range}${time.includes ? `; includes ${time.includes}` : ""}`;
  return el("div", { className: "headroom-fit-time", textContent: text, style: { opacity: "0.8", fontSize: "11px" } });
}

/** The sidebar tab: live numbers, the chart of the last minutes, and the last run's per-node peaks. */
export class MonitorPanel {
  constructor(root, { checkFit, applyRemedy, copyAnswer, chooseCard, cards = () => [], card = () => "" } = {}) {
    this.root = root;
    this.applyRemedy = applyRemedy;
    this.copyAnswer = copyAnswer;
    this.chooseCard = chooseCard;
    this.cards = cards;
    this.card = card;
    // "Will it fit?": the open workflow checked on the server's card; the answer (or the last run's
    // preflight) stays below the button, with the workflow it belongs to
    this.fitButton = el("button", {
      className: "headroom-check-fit p-button p-button-sm",
      type: "button",
      textContent: "Will it fit?",
      title: "Check the open workflow on this server's card before pressing Run (nothing is queued)",
      style: { ...BUTTON_STYLE, alignSelf: "flex-start", background: "#1e88e5", borderColor: "#1e88e5", color: "#fff" },
      onclick: async () => {
        this.fitButton.disabled = true;
        try {
          await checkFit?.();
        } finally {
          this.fitButton.disabled = false;
        }
      },
    });
    this.fit = el("div", { className: "headroom-fit" });
    this.numbers = el("div", { className: "headroom-numbers" });
    this.chart = el("div", { className: "headroom-chart" });
    this.legend = el("div", { className: "headroom-legend", style: { display: "flex", flexWrap: "wrap", gap: "6px" } });
    this.nodes = el("div", { className: "headroom-nodes" });
    this.status = el("div", { className: "headroom-status", style: { opacity: "0.7" } });
    // the command Alt+Shift+F runs, as a button; what it frees depends on the server (said in the label)
    this.free = el("button", {
      className: "headroom-free p-button p-button-sm p-button-secondary",
      type: "button",
      textContent: "Unload models (free VRAM)",
      title: "Unload every model and free the memory the host caches (Alt+Shift+F)",
      style: { ...BUTTON_STYLE, alignSelf: "flex-start" },
      onclick: async () => {
        this.free.disabled = true;
        try {
          await freeVram({ after: () => window.headroom?.refresh?.() });
        } finally {
          this.free.disabled = false;
        }
      },
    });
    root.replaceChildren(
      el("div", { className: "headroom-monitor", style: PANEL_STYLE },
        el("strong", { textContent: "Headroom" }), this.fitButton, this.fit, this.numbers, this.free, this.chart, this.legend, this.status, this.nodes),
    );
  }

  draw(history, badges, info = "", check = null) {
    if (!this.root.isConnected) return; // the sidebar tab is closed: nothing to draw into
    this.drawFit(check);
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
    const gpu = Number.isFinite(latest?.device_used);
    if (!gpu) this.numbers.append(el("div", { textContent: "No GPU telemetry here (CPU only)", style: { opacity: "0.7" } }));
    this.free.textContent = gpu ? "Unload models (free VRAM)" : "Unload models (free RAM)";
    this.drawChart(history);
    this.status.textContent = `${history.length} samples${info ? ` · ${info}` : ""}`;
    const records = [...badges.records.values()];
    const nodeRows = records.map((r) => ({ r, text: badges.text(r.node) || (r.status === "cached" ? "cached" : "") }));
    // drawn again only when a row changed: a row rebuilt under the pointer (every sample) loses the click
    const key = JSON.stringify(nodeRows.map(({ r, text }) => [r.node, nameOf(globalThis.app, r.node, r.class_type).text, text]));
    if (key !== this.nodesKey) {
      this.nodesKey = key;
      this.nodes.replaceChildren(
        ...(records.length ? [el("strong", { textContent: "Last run, per node" })] : []),
        ...nodeRows.map(({ r, text }) => el("div", { className: "headroom-node-row", dataset: { node: String(r.node) } },
          nodeLink(r.node, r.class_type), text ? `: ${text}` : "")),
      );
    }
  }

  /** The open workflow's last verdict: fits (green), will run out (red or amber, with links to the
   * nodes it names), or could not check; nothing before the first check or run. */
  drawFit(check) {
    if (!check) {
      this.fit.replaceChildren();
      this.fit.dataset.fits = "";
      return;
    }
    const colour = check.fits === true ? "#43a047" : check.fits === false ? (check.severity === "error" ? "#e53935" : "#fb8c00") : "#9e9e9e";
    const when = check.source === "run" ? "when queued" : "checked";
    const at = new Date(check.at ?? Date.now()).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    this.fit.dataset.fits = String(check.fits);
    this.fit.replaceChildren(
      el("div", { style: { borderLeft: `3px solid ${colour}`, paddingLeft: "6px", display: "flex", flexDirection: "column", gap: "4px" } },
        el("div", { className: "headroom-fit-text", textContent: check.text, style: { fontWeight: "600" } }),
        check.fits === false && check.detail ? el("div", { className: "headroom-fit-detail", textContent: check.detail, style: { opacity: "0.85" } }) : null,
        check.nodes?.length
          ? el("div", { className: "headroom-fit-links", style: { display: "flex", flexWrap: "wrap", gap: "6px" } },
            ...check.nodes.map((n) => nodeLink(n.id, n.classType)))
          : null,
        timeLine(check.time),
        this.cardChoice(check),
        this.remedies(check),
        check.stale
          ? el("div", { className: "headroom-fit-stale", textContent: "Out of date: the workflow changed since this answer. Press “Will it fit?” again.", style: { color: "#fb8c00", fontWeight: "600" } })
          : null,
        el("div", { style: { display: "flex", gap: "6px", alignItems: "center" } },
          el("span", { textContent: `${when} at ${at}`, style: { opacity: "0.6", fontSize: "11px" } }),
          el("button", {
            className: "headroom-fit-copy p-button p-button-sm p-button-text", type: "button", textContent: "Copy",
            title: "Copy the whole answer as text", style: BUTTON_STYLE, onclick: () => this.copyAnswer?.(check),
          }))),
    );
    this.fit.dataset.stale = String(Boolean(check.stale));
  }

  /** M6: where the server has no card to check on (or one was chosen), a choice of the card table's. */
  cardChoice(check) {
    const cards = this.cards();
    const chosen = this.card();
    if (!cards.length || (check.fits !== null && !chosen)) return null;
    const select = el("select", {
      className: "headroom-card-choice", title: "The card “Will it fit?” plans for (kept as the setting Headroom › Card)",
      style: { font: "inherit", fontSize: "12px", background: "transparent", color: "inherit" },
      onchange: () => this.chooseCard?.(select.value),
    }, el("option", { value: "", textContent: "this server's card" }), ...cards.map((name) => el("option", { value: name, textContent: name })));
    select.value = cards.includes(chosen) ? chosen : "";
    return el("label", { style: { display: "flex", gap: "6px", alignItems: "center" } }, "Check on", select);
  }

  /** Under a "no": each change that makes it fit, with its own peak and time, and Apply. */
  remedies(check) {
    const remedies = check.fits === false ? check.remedies ?? [] : [];
    if (!remedies.length) return null;
    return el("div", { className: "headroom-remedies", style: { display: "flex", flexDirection: "column", gap: "4px" } },
      el("strong", { textContent: "To make it fit" }),
      ...remedies.map((remedy, i) => el("div", { className: "headroom-remedy", dataset: { kind: remedy.kind }, style: { display: "flex", gap: "6px", alignItems: "flex-start" } },
        el("span", { textContent: `${i + 1}. ${remedy.text}`, style: { flex: "1", overflowWrap: "anywhere" } }),
        remedy.changes?.length
          ? el("button", {
            className: "headroom-remedy-apply p-button p-button-sm", type: "button", textContent: "Apply",
            title: "Make this change on the canvas (one undo step), then check again",
            disabled: Boolean(check.stale), style: BUTTON_STYLE, onclick: () => this.applyRemedy?.(remedy, check),
          })
          : null)));
  }

  /** The chart: memory ticks at round binary sizes, seconds before now, one colour per series. */
  drawChart(history) {
    const width = Math.max(200, (this.chart.clientWidth || 280) - 4);
    const height = 150;
    const left = 48;
    const bottom = 16;
    const plotW = width - left - 4;
    const plotH = height - bottom - 6;
    const layout = chartLayout(history.samples, { width: plotW, height: plotH, window: chartWindow(history.samples) });
    const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "memory over the last minutes", class: "headroom-chart-svg" });
    const plot = svg("g", { transform: `translate(${left} 6)` });
    plot.append(svg("rect", { x: 0, y: 0, width: plotW, height: plotH, fill: "none", stroke: "currentColor", "stroke-opacity": 0.3 }));
    for (const tick of layout.yTicks) {
      plot.append(svg("line", { x1: 0, x2: plotW, y1: tick.y, y2: tick.y, stroke: "currentColor", "stroke-opacity": 0.12 }));
      const label = svg("text", { x: -4, y: tick.y + 3, fill: "currentColor", "font-size": 9, "text-anchor": "end", class: "headroom-y-tick" });
      label.textContent = tick.label;
      plot.append(label);
    }
    for (const tick of layout.xTicks) {
      plot.append(svg("line", { x1: tick.x, x2: tick.x, y1: plotH, y2: plotH + 3, stroke: "currentColor", "stroke-opacity": 0.5 }));
      const label = svg("text", { x: tick.x, y: plotH + 13, fill: "currentColor", "font-size": 9, "text-anchor": tick.x > plotW - 10 ? "end" : "middle", class: "headroom-x-tick" });
      label.textContent = tick.label;
      plot.append(label);
    }
    for (const s of layout.series) {
      plot.append(svg("path", { d: s.d, fill: "none", stroke: s.color, "stroke-width": 1.5, ...(s.dash ? { "stroke-dasharray": s.dash } : {}), "data-field": s.field }));
    }
    chart.append(plot);
    this.chart.replaceChildren(chart);
    this.legend.replaceChildren(
      ...layout.series.map((s) => {
        const swatch = svg("svg", { width: 14, height: 8 });
        swatch.append(svg("line", { x1: 0, x2: 14, y1: 4, y2: 4, stroke: s.color, "stroke-width": 2, ...(s.dash ? { "stroke-dasharray": "3 2" } : {}) }));
        return el("span", { className: "headroom-legend-item", dataset: { field: s.field, color: s.color }, style: { display: "inline-flex", alignItems: "center", gap: "3px" } },
          swatch, `${s.label} ${formatBytes(s.last)}`);
      }),
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
    const { card, budget } = planBudget(report);
    const ram = ramRows(report?.ram); // the RAM guard's ledger, by node (absent: the guard did not run)
    const ramLine = ramSummary(report?.ram);
    const header = el("div", { className: "headroom-timeline-header", style: { display: "flex", flexWrap: "wrap", gap: "12px", alignItems: "baseline" } },
      el("strong", { textContent: "Residency timeline" }), el("span", { className: "headroom-verdict", textContent: planSummary(report) }),
      card ? el("span", { className: "headroom-card", textContent: card, title: "the card the plan was made for" }) : null,
      budget ? el("span", { className: "headroom-budget", textContent: budget, style: { opacity: "0.8" } }) : null,
      ramLine ? el("span", { className: "headroom-ram-budget", textContent: ramLine, style: { opacity: "0.8" } }) : null,
      timeLine(report?.preflight?.time)); // the card the planned times assume, what they count, their range
    if (report) {
      header.append(el("a", { href: this.reportUrl(report.prompt_id, "csv"), textContent: "CSV", download: `headroom-${report.prompt_id}.csv` }));
    }
    const rows = timelineRows(report);
    const table = el("table", { style: { borderCollapse: "collapse", width: "100%" } });
    const head = el("tr", {}, ...["node", "class", "time", "state", "VRAM (actual / planned)", "RSS peak", "RAM at end (actual / predicted)", "placements (plan)", "residency events"]
      .map((h) => el("th", { textContent: h, style: { textAlign: "left", padding: "2px 6px" } })));
    table.append(head);
    const colour = { ok: "#43a047", over: "#e53935", unplanned: "#8e24aa", skipped: "#9e9e9e", error: "#e53935", running: "#1e88e5", pending: "#9e9e9e", cached: "#9e9e9e" };
    for (const r of rows) {
      const bars = el("div", { style: { position: "relative", height: "14px", minWidth: "160px", marginRight: "10px" } },
        el("div", { title: `planned ${formatBytes(r.planned)}`, style: { position: "absolute", top: "0", height: "6px", width: `${(r.plannedFrac * 100).toFixed(1)}%`, background: "#7e57c2" } }),
        el("div", { title: `actual ${formatBytes(r.actual)}`, style: { position: "absolute", top: "7px", height: "6px", width: `${(r.actualFrac * 100).toFixed(1)}%`, background: colour[r.state] } }));
      const m = ram.get(r.node);
      table.append(el("tr", { className: `headroom-row headroom-${r.state}${m?.over ? " headroom-ram-over" : ""}`, dataset: { node: r.node } },
        el("td", {}, nodeLink(r.node, r.classType)), el("td", { textContent: r.classType }),
        el("td", { className: "headroom-row-time", textContent: timeText(r), title: r.spill ? `${r.bound}\nshared memory: ${r.spill}` : r.bound }),
        el("td", { textContent: r.state }),
        el("td", {}, bars, el("div", { textContent: `${formatBytes(r.actual)} / ${formatBytes(r.planned)}` })),
        el("td", { textContent: formatBytes(r.rss) }),
        ramCell(m),
        el("td", { textContent: r.placements || "–", title: r.reasons }), el("td", { textContent: r.events || "–" })));
    }
    // the run against its workflow's previous one: disk reads again and why, RAM/VRAM change and who
    // holds it, the host's settings (the server's lines, memory/telemetry/compare.py)
    const compared = report?.compared?.lines ?? [];
    const compare = compared.length
      ? el("div", { className: "headroom-compare", style: { display: "flex", flexDirection: "column", gap: "2px", opacity: "0.9" } },
        el("strong", { textContent: report.compared.previous ? "Since the last run" : "This run" }),
        ...compared.map((line) => el("div", { className: "headroom-compare-line", textContent: line })))
      : null;
    this.box.replaceChildren(header, ...(compare ? [compare] : []), rows.length ? table : el("div", { className: "headroom-timeline-empty", textContent: "No run of this workflow yet. Press Run to see, per node, what was planned and what happened (“Will it fit?” in the Headroom sidebar checks it first)." }));
    this.box.dataset.rows = String(rows.length);
  }
}

/** A row's time: its duration (and the plan's), or while it runs, how long it has been running and the
 * sampler's steps. */
function timeText(r) {
  const plan = r.plannedWall ? ` (plan ${formatSeconds(r.plannedWall)})` : "";
  if (r.state === "running" && r.elapsed !== null) return `${formatSeconds(r.elapsed)} so far${r.steps ? ` · ${r.steps}` : ""}${plan}`;
  return `${formatSeconds(r.duration)}${plan}${r.boundKind ? ` · ${r.boundKind}-bound` : ""}`;
}

/** A node's RAM at its end: the predicted bar (RssAnon + pinned, then the mapped file pages it reads,
 * lighter), the actual one (red when over), and the budget as a line at the same place on every row. */
function ramCell(m) {
  if (!m) return el("td", { className: "headroom-ram", textContent: "–", title: "not measured: the RAM guard checks the plan's nodes" });
  const bar = (top, frac, background, extra = {}) =>
    el("div", { style: { position: "absolute", top, height: "6px", width: `${(frac * 100).toFixed(1)}%`, background, ...extra } });
  const bars = el("div", { style: { position: "relative", height: "14px", minWidth: "160px", marginRight: "10px" } },
    bar("0", m.predictedFrac + m.mappedFrac, "rgba(126, 87, 194, 0.35)"), bar("0", m.predictedFrac, "#7e57c2"),
    bar("7px", m.actualFrac, m.over ? "#e53935" : "#43a047"));
  if (m.budgetFrac !== null) {
    // the track from 0 to the budget, then the budget's line: a gauge, whatever the scale
    bars.prepend(el("div", { className: "headroom-ram-track", style: { position: "absolute", top: "0", bottom: "0", left: "0", width: `${(m.budgetFrac * 100).toFixed(1)}%`, background: "rgba(127, 127, 127, 0.18)" } }));
    bars.append(el("div", { className: "headroom-ram-budget-line", style: { position: "absolute", top: "-2px", bottom: "-2px", left: `calc(${(m.budgetFrac * 100).toFixed(1)}% - 1px)`, width: "2px", background: "#ffb300" } }));
  }
  return el("td", { className: `headroom-ram${m.over ? " headroom-ram-over" : ""}`, title: m.title, dataset: { over: String(m.over) },
    style: m.over ? { background: "rgba(229, 57, 53, 0.18)" } : {} },
  bars, el("div", { textContent: `${m.text}${m.over ? " · over budget" : ""}` }),
  m.moves ? el("div", { className: "headroom-ram-moves", textContent: `guard: ${m.moves}`, style: { opacity: "0.8" } }) : null);
}
