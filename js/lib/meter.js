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
  // GPU load and temperature where NVML has them (absent on CPU, AMD, Mac): one part, the bar is the load
  const load = Number.isFinite(sample.gpu_util) ? sample.gpu_util : null;
  const temp = Number.isFinite(sample.gpu_temp) ? sample.gpu_temp : null;
  if (load !== null || temp !== null) {
    const text = ["GPU", load !== null ? `${load}%` : null, temp !== null ? `${temp}°C` : null].filter(Boolean).join(" ");
    const title = `GPU load${load !== null ? ` ${load}%` : " –"}, temperature${temp !== null ? ` ${temp} °C` : " –"} (NVML)`;
    parts.push({ key: "gpu", label: "GPU", text, frac: load !== null ? Math.min(1, Math.max(0, load / 100)) : null, title, temp });
  }
  return parts;
}

/** A part's text for a narrow window: no totals ("VRAM 7.4 GiB" for "VRAM 7.4 GiB / 8.0 GiB"). */
export function compactText(part) {
  return part.text.replace(/ \/ .*$/, "");
}

/** The bar's colour: green, amber past 75 %, red past 90 %. */
export function meterColor(frac) {
  if (frac === null || frac === undefined) return "#1e88e5";
  return frac > 0.9 ? "#e53935" : frac > 0.75 ? "#fb8c00" : "#43a047";
}
