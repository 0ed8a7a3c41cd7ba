// The sidebar chart's layout: series colours, a memory axis in round binary sizes (2/4/6/8 GiB) and a time
// axis in seconds before now. Pure: samples in, geometry out (unit-tested under Node).

const MiB = 2 ** 20;
const GiB = 2 ** 30;

/** Every series its own colour (RSS and system RAM included), first = drawn on top in the legend. */
export const CHART_SERIES = [
  { field: "device_used", label: "VRAM used (all processes)", color: "#e53935" },
  { field: "reserved", label: "torch reserved", color: "#fb8c00" },
  { field: "allocated", label: "torch allocated", color: "#fdd835" },
  { field: "rss", label: "process RSS", color: "#1e88e5" },
  { field: "ram_used", label: "system RAM used", color: "#43a047", dash: "4 3" },
];

// Tick steps: powers of two from 64 MiB up, so labels read 256 MiB, 1 GiB, 2 GiB, 4 GiB, 8 GiB...
const BYTE_STEPS = Array.from({ length: 16 }, (_, i) => 64 * MiB * 2 ** i);

/** A size label without decimals: 512 MiB, 2 GiB, 24 GiB. */
export function tickLabel(bytes) {
  return bytes >= GiB ? `${+(bytes / GiB).toFixed(2)} GiB` : `${Math.round(bytes / MiB)} MiB`;
}

/** The memory axis for values up to `top`: at most 4 ticks of one round binary step; yMax is the last. */
export function byteTicks(top) {
  const value = Number.isFinite(top) && top > 0 ? top : GiB;
  const step = BYTE_STEPS.find((s) => s * 4 >= value) ?? BYTE_STEPS[BYTE_STEPS.length - 1];
  const count = Math.max(1, Math.ceil(value / step));
  const ticks = Array.from({ length: count }, (_, i) => (i + 1) * step);
  return { yMax: ticks[ticks.length - 1], ticks };
}

/** The time axis: seconds before now at a round step, at most 6 ticks, 0 ("now") included. */
export function timeTicks(window) {
  const step = [5, 10, 15, 30, 60, 120].find((s) => window / s <= 6) ?? 300;
  const ticks = [];
  for (let ago = 0; ago <= window + 1e-9; ago += step) ticks.push(ago);
  return ticks;
}

/** "now", "-30 s", "-2 min". */
export function agoLabel(seconds) {
  if (seconds === 0) return "now";
  return seconds % 60 === 0 ? `-${seconds / 60} min` : `-${seconds} s`;
}

/**
 * Paths and axes for the last `window` seconds in a width x height plot area.
 * Returns {series: [{field, label, color, dash, d, last}], yMax, yTicks: [{y, label}], xTicks: [{x, label}]}.
 */
export function chartLayout(samples, { width = 280, height = 120, window = 120, fields = CHART_SERIES } = {}) {
  const t1 = samples.length ? samples[samples.length - 1].t : 0;
  const t0 = t1 - window;
  const visible = samples.filter((s) => s.t >= t0);
  let top = 0;
  for (const s of visible) for (const f of fields) if (Number.isFinite(s[f.field])) top = Math.max(top, s[f.field]);
  const { yMax, ticks } = byteTicks(top);
  const x = (t) => ((t - t0) / window) * width;
  const y = (v) => height - (v / yMax) * height;
  const series = [];
  for (const f of fields) {
    let d = "";
    let pen = false;
    let last = null;
    for (const s of visible) {
      const v = s[f.field];
      if (!Number.isFinite(v)) {
        pen = false;
        continue;
      }
      d += `${pen ? "L" : "M"}${x(s.t).toFixed(1)} ${y(v).toFixed(1)}`;
      pen = true;
      last = v;
    }
    if (d) series.push({ ...f, d, last });
  }
  return {
    series,
    yMax,
    yTicks: ticks.map((v) => ({ y: y(v), label: tickLabel(v) })),
    xTicks: timeTicks(window).map((ago) => ({ x: x(t1 - ago), label: agoLabel(ago) })),
  };
}
