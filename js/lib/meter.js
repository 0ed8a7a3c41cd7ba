// The top bar's compact meter: VRAM (or, without a GPU, the process's RSS) and system RAM from the latest
// sample. Pure: a sample in, bars out (unit-tested under Node); js/meter.js draws them.
import { formatBytes } from "./format.js";

/** [{key, label, text, frac, title}] for the latest sample; frac is 0..1 (null without a total). */
export function meterParts(sample) {
  if (!sample) return [];
  const parts = [];
  const bar = (key, label, used, total, title) => {
    if (!Number.isFinite(used)) return;
    const frac = Number.isFinite(total) && total > 0 ? Math.min(1, Math.max(0, used / total)) : null;
    const text = `${label} ${formatBytes(used)}${frac === null ? "" : ` / ${formatBytes(total)}`}`;
    parts.push({ key, label, text, frac, title });
  };
  if (Number.isFinite(sample.device_used)) {
    bar("vram", "VRAM", sample.device_used, sample.device_total, "GPU memory used by all processes");
  } else {
    bar("rss", "RSS", sample.rss, null, "No GPU on this server: the ComfyUI process's resident memory");
  }
  bar("ram", "RAM", sample.ram_used, sample.ram_total, "System RAM used");
  return parts;
}

/** The bar's colour: green, amber past 75 %, red past 90 %. */
export function meterColor(frac) {
  if (frac === null || frac === undefined) return "#1e88e5";
  return frac > 0.9 ? "#e53935" : frac > 0.75 ? "#fb8c00" : "#43a047";
}
