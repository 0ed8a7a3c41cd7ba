// A compact VRAM/RAM meter in the top bar, for users who keep no sidebar open (a setting, on by default).
// Frontend 1.27 offers no top-bar slot in its extension API; app.menu.element (the legacy ComfyAppMenu's
// button groups, which the top bar mounts in .comfyui-menu-right) is the place custom nodes use. The meter
// reads window.headroom.history, which headroom.js fills from the server's samples; clicking it opens the
// sidebar tab.
import { app } from "../../scripts/app.js";
import { meterColor, meterParts } from "./lib/meter.js";

const SETTING = "Headroom.Monitor.TopBarMeter";
let box = null;
let timer = null;
let lastT = null; // the newest sample's time, and when it changed here: a meter that stops moving says so
let lastChange = 0;
const STALE_MS = 5000;

function enabled() {
  try {
    return app.extensionManager?.setting?.get(SETTING) !== false;
  } catch {
    return true;
  }
}

function draw() {
  if (!box) return;
  const latest = window.headroom?.history?.latest?.();
  if (latest?.t !== lastT) {
    lastT = latest?.t;
    lastChange = Date.now();
  }
  const stale = latest && Date.now() - lastChange > STALE_MS;
  box.style.opacity = stale ? "0.45" : "1";
  box.dataset.stale = stale ? "1" : "0";
  box.title = stale
    ? "Headroom memory: not updating (panel refresh is 0, or the server stopped sampling); click to open the panel"
    : "Headroom memory: click to open the panel";
  const parts = meterParts(latest);
  const rows = parts.map((p) => {
    const row = document.createElement("span");
    row.className = `headroom-meter-part headroom-meter-${p.key}`;
    row.title = p.title;
    Object.assign(row.style, { display: "inline-flex", flexDirection: "column", gap: "1px", minWidth: "84px" });
    const text = document.createElement("span");
    text.textContent = p.text;
    const track = document.createElement("span");
    Object.assign(track.style, { display: "block", height: "3px", background: "rgba(128,128,128,0.3)", borderRadius: "2px" });
    const fill = document.createElement("span");
    Object.assign(fill.style, { display: "block", height: "100%", borderRadius: "2px", width: `${((p.frac ?? 1) * 100).toFixed(0)}%`, background: meterColor(p.frac) });
    track.append(fill);
    row.append(text, track);
    return row;
  });
  box.replaceChildren(...(rows.length ? rows : [document.createTextNode("Headroom: waiting for samples")]));
}

function mount() {
  const host = app.menu?.element;
  if (!host || box) return;
  box = document.createElement("div");
  box.className = "headroom-meter";
  box.title = "Headroom memory: click to open the panel";
  Object.assign(box.style, { display: "flex", gap: "8px", alignItems: "center", fontSize: "11px", lineHeight: "1.1", cursor: "pointer", padding: "0 6px", whiteSpace: "nowrap" });
  box.addEventListener("click", () => app.extensionManager?.command?.execute("Workspace.ToggleSidebarTab.headroom-monitor"));
  host.prepend(box);
  draw();
  timer = setInterval(draw, 1000);
}

function unmount() {
  clearInterval(timer);
  timer = null;
  box?.remove();
  box = null;
}

const apply = (on) => (on ? mount() : unmount());

app.registerExtension({
  name: "Headroom.TopBarMeter",
  settings: [
    {
      id: SETTING,
      name: "Show a VRAM/RAM meter in the top bar",
      category: ["Headroom", "Monitor", "Top bar meter"],
      type: "boolean",
      defaultValue: true,
      tooltip: "A compact memory meter next to the top bar's buttons; click it to open the Headroom panel.",
      onChange: (value) => apply(value !== false),
    },
  ],
  setup() {
    apply(enabled());
  },
});
