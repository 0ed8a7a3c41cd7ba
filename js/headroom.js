// Headroom's frontend entry point, served by ComfyUI from WEB_DIRECTORY at /extensions/<folder>/.
// Imports stay relative: the folder name differs between git clones and registry installs.
// Only extension APIs are used (settings, commands, keybindings, sidebar and bottom-panel tabs, toasts,
// node badges): nothing is injected into the host's own menus, so it works with either node renderer.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { ComfyWidgets } from "../../scripts/widgets.js";
import { BadgeStore } from "./lib/badges.js";
import { freeVram } from "./lib/free.js";
import { Latest, coalesce, liveReport } from "./lib/live.js";
import { EVENTS, ROUTES, route } from "./lib/names.js";
import { TEXT_NODES, addTextWidget, showText } from "./lib/nodetext.js";
import { hostSettingsToast, preflightToast } from "./lib/preflight.js";
import { ramBudgetToast, ramBudgetValue } from "./lib/ram.js";
import { SampleHistory, dueForRedraw } from "./lib/samples.js";
import { MonitorPanel, TimelinePanel } from "./views.js";

const RATE = "Headroom.Monitor.RefreshRate";
const BADGES = "Headroom.Monitor.Badges";
const TOASTS = "Headroom.Monitor.PreflightToasts";
const RAM_BUDGET = "Headroom.RamBudget";

// One state for the page; exposed on window for debugging and for the browser test.
const state = {
  history: new SampleHistory({ maxAge: 600 }),
  badges: new BadgeStore(() => app.graph?.id ?? ""), // keyed by the workflow on screen (the graph's id)
  monitor: null,
  timeline: null,
  report: null,
  lastDraw: 0,
  info: "",
  toasts: [],
  running: null, // the prompt the host is executing, while it does
  reports: new Latest(),
  ramBudget: null, // the server's answer to the RAM budget setting: {budget, setting, env, note} or {error}
  ramSent: null, // the setting's value the server has (sent again after a reconnect)
};
window.headroom = state;
state.refresh = () => fetchStatus(); // the sidebar's unload button refreshes the numbers after it

function setting(id, fallback) {
  try {
    const value = app.extensionManager?.setting?.get(id);
    return value === undefined || value === null ? fallback : value;
  } catch {
    return fallback;
  }
}

const refreshSeconds = () => Number(setting(RATE, 1));

function redraw(force = false) {
  const now = Date.now();
  if (!force && !dueForRedraw(state.lastDraw, now, refreshSeconds())) return;
  state.lastDraw = now;
  state.monitor?.draw(state.history, state.badges, state.info);
}

async function fetchStatus() {
  if (refreshSeconds() <= 0) return; // off: no polling, and the server stops sampling for us
  try {
    const response = await api.fetchApi(`${ROUTES.status}?limit=600`);
    if (!response.ok) return;
    const status = await response.json();
    state.history.push(...status.samples, status.latest);
    const hz = status.rate_hz ? `${status.rate_hz} Hz` : "server sampling off";
    state.info = `${hz}${status.sources?.cuda ? "" : " · CPU"}`;
    redraw(true);
  } catch (error) {
    console.warn("Headroom: /headroom/status failed", error);
  }
}

// The RAM guard's per-node ledger of a prompt; null where the guard did not run (404) or failed.
async function loadRam(promptId) {
  try {
    const response = await api.fetchApi(route("ram", promptId));
    return response.ok ? await response.json() : null;
  } catch {
    return null;
  }
}

async function loadReport(promptId) {
  if (!promptId) return;
  const ticket = state.reports.next();
  try {
    const [response, ram] = await Promise.all([api.fetchApi(route("report", promptId)), loadRam(promptId)]);
    if (!response.ok) return;
    const report = await response.json();
    report.ram = ram;
    if (!state.reports.accept(ticket)) return; // a later request was shown already
    state.report = liveReport(report, state.running);
    state.timeline?.draw(state.report);
  } catch (error) {
    console.warn("Headroom: report failed", error);
  }
}

// While a prompt runs, its report again after node records and residency moves (at most every 0.5 s).
const loadLiveReport = coalesce((promptId) => {
  if (promptId && promptId === state.running) loadReport(promptId);
}, 500);

// After a reload: the badges of each workflow's last run, and the last run's report in the timeline.
async function restoreRuns() {
  try {
    const response = await api.fetchApi(ROUTES.runs);
    if (!response.ok) return;
    const { runs } = await response.json();
    state.badges.restore(runs);
    app.graph?.setDirtyCanvas(true, false);
    redraw(true);
    if (!state.report && !state.running && runs.length) await loadReport(runs[runs.length - 1].prompt_id);
  } catch (error) {
    console.warn("Headroom: restoring the last runs failed", error);
  }
}

// The CUDA allocator's history: armed for the next prompt (the server says why not without CUDA), or the
// last snapshot downloaded, named after its prompt.
async function memoryHistory(download) {
  const toast = (severity, detail) => app.extensionManager?.toast?.add({ severity, summary: "Headroom memory history", detail, life: 6000 });
  try {
    const response = download
      ? await api.fetchApi(ROUTES.memory_history)
      : await api.fetchApi(ROUTES.memory_history, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ record: true }) });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) return toast("warn", body.error ?? `HTTP ${response.status}`);
    if (!download) return toast("info", "The next prompt's allocations will be recorded");
    const last = Object.keys(body.files ?? {}).pop();
    if (!last) return toast("info", body.available ? "No prompt recorded yet" : body.reason);
    window.open(api.apiURL(route("memory_history_file", last)), "_blank");
  } catch (error) {
    console.warn("Headroom: memory history failed", error);
  }
}

// The RAM budget setting reaches the server (the page sends it at load, on a change and after a
// reconnect: the server keeps it in memory only). A refused value is said in a toast; that
// HEADROOM_RAM_BUDGET, set on the server, wins is said only when the user changes the setting.
async function sendRamBudget(setValue, { force = false, changed = false } = {}) {
  const value = ramBudgetValue(setValue);
  if (!force && value === state.ramSent) return;
  state.ramSent = value;
  try {
    const response = await api.fetchApi(ROUTES.ram_budget, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ value }),
    });
    const body = await response.json().catch(() => ({}));
    state.ramBudget = response.ok ? body : { error: body?.error ?? `HTTP ${response.status}` };
    if (!response.ok) state.ramSent = null;
    const toast = ramBudgetToast(response.ok, body);
    if (toast && (changed || toast.severity === "error")) app.extensionManager?.toast?.add(toast);
  } catch (error) {
    state.ramSent = null;
    console.warn("Headroom: sending the RAM budget failed", error);
  }
}

function badgeFor(node) {
  // Inside a subgraph, ids repeat the root graph's (the server reports "12:5"): no badge rather than a wrong one.
  const inSubgraph = node.graph && app.graph && node.graph !== app.graph;
  const text = setting(BADGES, true) && !inSubgraph ? state.badges.text(node.id, undefined, node.comfyClass ?? node.type) : "";
  return new window.LGraphBadge({ text, fgColor: "#fff", bgColor: "#37474f" });
}

// The socket opens before extensions' setup(): listening from the import on means no message of ours
// arrives unheard (the frontend warns "Unknown message type" for those).
function listen() {
  api.addEventListener(EVENTS.sample, ({ detail }) => {
    if (refreshSeconds() <= 0) return;
    state.history.push(detail);
    redraw();
  });
  api.addEventListener(EVENTS.node, ({ detail }) => {
    state.badges.add(detail);
    app.graph?.setDirtyCanvas(true, false);
    redraw(true);
    loadLiveReport(detail?.prompt_id);
  });
  api.addEventListener(EVENTS.residency, ({ detail }) => loadLiveReport(detail?.prompt_id));
  api.addEventListener("execution_start", ({ detail }) => {
    state.running = detail?.prompt_id ?? null;
    loadLiveReport(state.running);
  });
  api.addEventListener(EVENTS.preflight, ({ detail }) => {
    const tip = hostSettingsToast(detail); // the host's own settings that fit this workflow better
    if (tip && setting(TOASTS, true)) app.extensionManager?.toast?.add(tip);
    const toast = preflightToast(detail);
    if (!toast || !setting(TOASTS, true)) return;
    state.toasts.push(toast);
    if (state.toasts.length > 20) state.toasts.shift(); // kept for the browser test and debugging
    app.extensionManager?.toast?.add(toast);
  });
  for (const event of ["execution_success", "execution_error", "execution_interrupted"]) {
    api.addEventListener(event, ({ detail }) => {
      if (state.running === detail?.prompt_id) state.running = null;
      loadReport(detail?.prompt_id);
    });
  }
  api.addEventListener("reconnected", () => {
    fetchStatus(); // the server's sampler restarts on demand
    sendRamBudget(setting(RAM_BUDGET, "auto"), { force: true }); // a restarted server forgot the setting
  });
}
listen();

app.registerExtension({
  name: "Headroom.Core",
  aboutPageBadges: [
    { label: "Headroom", url: "https://github.com/comfyui-headroom/comfyui-headroom", icon: "pi pi-server" },
  ],
  settings: [
    {
      id: RATE,
      name: "Memory panel refresh (seconds, 0 = off)",
      category: ["Headroom", "Monitor", "Refresh"],
      type: "slider",
      attrs: { min: 0, max: 5, step: 0.25 },
      defaultValue: 1,
      tooltip: "How often the memory chart redraws; 0 stops the panel (the server samples while any browser is connected).",
      // called before the store holds the new value: read the value given, after the store is updated
      onChange: (value) => Number(value) > 0 && setTimeout(fetchStatus, 0),
    },
    {
      id: BADGES,
      name: "Show peak memory badges on nodes after a run",
      category: ["Headroom", "Monitor", "Badges"],
      type: "boolean",
      defaultValue: true,
      onChange: () => app.graph?.setDirtyCanvas(true, false),
    },
    {
      id: TOASTS,
      name: "Warn before a run that will run out of VRAM",
      category: ["Headroom", "Monitor", "Preflight"],
      type: "boolean",
      defaultValue: true,
    },
    {
      id: RAM_BUDGET,
      name: "RAM budget (auto, or GB such as 24)",
      category: ["Headroom", "Memory", "RAM budget"],
      type: "text",
      defaultValue: "auto",
      tooltip: "The most system RAM (anonymous + pinned) ComfyUI may hold: Headroom moves idle models to disk (memory-mapped) to stay within it. auto: what the machine leaves free. HEADROOM_RAM_BUDGET on the server wins over this setting.",
      // the frontend also calls it once with the stored value when the setting is registered (no old value)
      onChange: (value, old) => sendRamBudget(value, { changed: old !== undefined }),
    },
  ],
  commands: [
    { id: "Headroom.FreeVRAM", label: "Free VRAM (unload models)", icon: "pi pi-eraser", function: () => freeVram({ api, app, after: fetchStatus }) },
    { id: "Headroom.RecordMemoryHistory", label: "Record the CUDA memory history of the next prompt", icon: "pi pi-history", function: () => memoryHistory(false) },
    { id: "Headroom.DownloadMemoryHistory", label: "Download the last CUDA memory history (for pytorch.org/memory_viz)", icon: "pi pi-download", function: () => memoryHistory(true) },
  ],
  keybindings: [{ combo: { key: "f", alt: true, shift: true }, commandId: "Headroom.FreeVRAM" }],
  bottomPanelTabs: [
    {
      id: "headroom-timeline",
      title: "Residency timeline",
      type: "custom",
      render: (element) => {
        const url = (promptId, format) =>
          api.apiURL(`${route("report", promptId)}?format=${format}`);
        state.timeline = new TimelinePanel(element, url);
        state.timeline.draw(state.report);
      },
    },
  ],
  async setup() {
    app.extensionManager?.registerSidebarTab?.({
      id: "headroom-monitor",
      icon: "pi pi-chart-line",
      title: "Headroom",
      tooltip: "Headroom memory monitor",
      type: "custom",
      render: (element) => {
        state.monitor = new MonitorPanel(element);
        fetchStatus();
      },
    });
    fetchStatus();
    restoreRuns();
    sendRamBudget(setting(RAM_BUDGET, "auto"));
  },
  afterConfigureGraph() {
    redraw(true); // another workflow: the sidebar lists its own last run
  },
  beforeRegisterNodeDef(nodeType, nodeData) {
    if (!TEXT_NODES.has(nodeData?.name)) return;
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (output) {
      onExecuted?.apply(this, arguments);
      showText(this, output);
    };
  },
  nodeCreated(node) {
    if (TEXT_NODES.has(node.comfyClass)) addTextWidget(node, ComfyWidgets.STRING, app);
    if (!window.LGraphBadge || !Array.isArray(node.badges)) return;
    const badge = () => badgeFor(node);
    badge.headroom = true;
    node.badges.push(badge);
  },
});
