// A compact VRAM/RAM meter in the top bar, for users who keep no sidebar open (a setting, on by default).
// Frontend 1.27 offers no top-bar slot in its extension API; app.menu.element (the legacy ComfyAppMenu's
// button groups, which the top bar mounts in .comfyui-menu-right) is the place custom nodes use. The meter
// reads window.headroom.history, which headroom.js fills from the server's samples; clicking it opens the
// sidebar tab.
import { app } from "../../scripts/app.js";
import { compactText, meterColor, meterParts } from "./lib/meter.js";

const SETTING = "Headroom.Monitor.TopBarMeter";
let box = null;
let timer = null;
let lastT = null; // the newest sample's time, and when it changed here: a meter that stops moving says so
let lastChange = 0;
const STALE_MS = 5000;
// Below this window width the meter drops its totals and its minimum widths: at 1024 px the frontend's
// own controls (the Graph/App switch, Run, the queue) need the room.
const NARROW_PX = 1400;

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
  if (!parts.length) {
    box.replaceChildren(document.createTextNode("Headroom: waiting for samples"));
    return;
  }
  // The frontend's own controls come first: narrower and narrower until none is under the meter (at
  // 1024 px on 1.58 the Graph/App switch is), else the meter steps aside (the sidebar has every figure).
  const first = window.innerWidth < NARROW_PX ? 1 : 0;
  box.style.visibility = "";
  for (let level = first; level <= 4; level++) {
    box.dataset.level = String(level);
    // 1: no totals; 2: no system RAM (the sidebar shows it); 3: memory and GPU load stacked in two
    // short lines; 4: memory only
    const shown = level === 2 || level === 3 ? parts.filter((p) => p.key !== "ram") : level === 4 ? parts.slice(0, 1) : parts;
    Object.assign(box.style, level === 3 ? { flexDirection: "column", alignItems: "flex-start", gap: "2px" } : { flexDirection: "row", alignItems: "center", gap: "8px" });
    box.replaceChildren(...shown.map((p) => part(p, level > 0)));
    if (!overlapsControl()) return;
  }
  box.style.visibility = "hidden";
  box.dataset.level = "hidden";
}

function part(p, narrow) {
  const row = document.createElement("span");
  row.className = `headroom-meter-part headroom-meter-${p.key}`;
  row.title = p.title;
  Object.assign(row.style, { display: "inline-flex", flexDirection: "column", gap: "1px", minWidth: narrow ? "0" : "84px" });
  const text = document.createElement("span");
  text.textContent = narrow ? compactText(p) : p.text;
  const track = document.createElement("span");
  Object.assign(track.style, { display: "block", height: "3px", background: "rgba(128,128,128,0.3)", borderRadius: "2px" });
  const fill = document.createElement("span");
  Object.assign(fill.style, { display: "block", height: "100%", borderRadius: "2px", width: `${((p.frac ?? 1) * 100).toFixed(0)}%`, background: p.temp ? meterColor(p.temp / 95) : meterColor(p.frac) });
  track.append(fill);
  row.append(text, track);
  return row;
}

// What lives on the canvas, not in the page's bars: the Vue renderer's nodes (their widgets are buttons and
// inputs) and the classic renderer's DOM widgets. A node that slides under the action bar is drawn below it
// and must not push the meter out (M2: the meter blinked away whenever one did).
const ON_CANVAS = "[data-node-id], .lg-node, .dom-widget";

// Whether a control of the page's bars (a button, a tab, a switch) lies under the meter: read-only,
// nothing of the host is changed.
function overlapsControl() {
  const r = box.getBoundingClientRect();
  if (!r.width || !r.height) return false;
  for (const b of document.querySelectorAll("button, a[href], input, select, [role=tab], [role=radio], [role=button], [role=switch]")) {
    if (box.contains(b) || b.contains(box) || b.closest(ON_CANVAS)) continue;
    const q = b.getBoundingClientRect();
    if (q.width && q.height && q.left < r.right - 1 && q.right > r.left + 1 && q.top < r.bottom - 1 && q.bottom > r.top + 1) return true;
  }
  return false;
}

function mount() {
  const host = app.menu?.element;
  if (!host || box) return;
  box = document.createElement("div");
  box.className = "headroom-meter";
  box.title = "Headroom memory: click to open the panel";
  Object.assign(box.style, { display: "flex", gap: "8px", alignItems: "center", fontSize: "11px", lineHeight: "1.1", cursor: "pointer", padding: "0 6px", whiteSpace: "nowrap", minWidth: "0", flexShrink: "1", overflow: "hidden" });
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
