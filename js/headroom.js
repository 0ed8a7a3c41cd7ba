// Headroom's frontend entry point, served by ComfyUI from WEB_DIRECTORY at /extensions/<folder>/.
// Imports stay relative: the folder name differs between git clones and registry installs.
// Only extension APIs are used (settings, commands, keybindings, sidebar and bottom-panel tabs, toasts,
// node badges): nothing is injected into the host's own menus, so it works with either node renderer.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { BadgeStore } from "./lib/badges.js";
import { EVENTS, ROUTES, route } from "./lib/names.js";
import { preflightToast } from "./lib/preflight.js";
import { SampleHistory, dueForRedraw } from "./lib/samples.js";
import { MonitorPanel, TimelinePanel } from "./views.js";

const RATE = "Headroom.Monitor.RefreshRate";
const BADGES = "Headroom.Monitor.Badges";
const TOASTS = "Headroom.Monitor.PreflightToasts";

// One state for the page; exposed on window for debugging and for the browser test.
const state = {
  history: new SampleHistory({ maxAge: 600 }),
  badges: new BadgeStore(),
  monitor: null,
  timeline: null,
  report: null,
  lastDraw: 0,
  info: "",
  toasts: [],
};
window.headroom = state;

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

async function loadReport(promptId) {
  if (!promptId) return;
  try {
    const response = await api.fetchApi(route("report", promptId));
    if (!response.ok) return;
    state.report = await response.json();
    state.timeline?.draw(state.report);
  } catch (error) {
    console.warn("Headroom: report failed", error);
  }
}

function badgeFor(node) {
  const text = setting(BADGES, true) ? state.badges.text(node.id) : "";
  return new window.LGraphBadge({ text, fgColor: "#fff", bgColor: "#37474f" });
}

async function freeVram() {
  const response = await api.fetchApi("/free", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ unload_models: true, free_memory: true }),
  });
  app.extensionManager?.toast?.add({
    severity: response.ok ? "success" : "error",
    summary: response.ok ? "Headroom: models unloaded, VRAM freed" : "Headroom: could not free VRAM",
    life: 3000,
  });
  setTimeout(fetchStatus, 500);
}

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
      tooltip: "How often the memory chart redraws; 0 stops the panel and the server's sampling for it.",
      onChange: () => fetchStatus(),
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
  ],
  commands: [
    { id: "Headroom.FreeVRAM", label: "Free VRAM (unload models)", icon: "pi pi-eraser", function: freeVram },
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
    api.addEventListener(EVENTS.sample, ({ detail }) => {
      if (refreshSeconds() <= 0) return;
      state.history.push(detail);
      redraw();
    });
    api.addEventListener(EVENTS.node, ({ detail }) => {
      state.badges.add(detail);
      app.graph?.setDirtyCanvas(true, false);
      redraw(true);
    });
    api.addEventListener(EVENTS.preflight, ({ detail }) => {
      const toast = preflightToast(detail);
      if (!toast || !setting(TOASTS, true)) return;
      state.toasts.push(toast);
      app.extensionManager?.toast?.add(toast);
    });
    for (const event of ["execution_success", "execution_error", "execution_interrupted"]) {
      api.addEventListener(event, ({ detail }) => loadReport(detail?.prompt_id));
    }
    api.addEventListener("reconnected", () => fetchStatus()); // the server's sampler restarts on demand
    fetchStatus();
  },
  nodeCreated(node) {
    if (!window.LGraphBadge || !Array.isArray(node.badges)) return;
    const badge = () => badgeFor(node);
    badge.headroom = true;
    node.badges.push(badge);
  },
});
