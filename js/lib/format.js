// Number formatting shared by the panels. Pure: no DOM, no ComfyUI imports (unit-tested under Node).

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** 1536 -> "1.5 KiB"; null/undefined -> "–" (a source this machine does not have). */
export function formatBytes(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "–";
  let value = Math.abs(n);
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 ? 0 : value >= 100 ? 0 : 1;
  return `${n < 0 ? "-" : ""}${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** A VRAM figure in GiB with two decimals, as the server's messages print them: one unit in one answer
 * (M12: "peak 416 MiB" beside the message's "0.41 GiB"). */
export function formatGiB(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "–";
  return `${(n / 2 ** 30).toFixed(2)} GiB`;
}

/** Seconds for people: 0.0042 -> "4 ms", 3.5 -> "3.5 s", 125 -> "2 min 5 s". */
export function formatSeconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

/** Escape text for places that take HTML (we build DOM nodes, but titles and tooltips stay safe too). */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
