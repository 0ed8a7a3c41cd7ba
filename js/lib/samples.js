// The live memory history behind the sidebar chart. Pure: samples in, geometry out (unit-tested under Node).

/** The series the chart draws, first = most important; a series with no values is left out. */
export const SERIES = [
  { field: "device_used", label: "VRAM used (all processes)", color: "#e53935" },
  { field: "reserved", label: "torch reserved", color: "#fb8c00" },
  { field: "allocated", label: "torch allocated", color: "#fdd835" },
  { field: "rss", label: "process RSS", color: "#1e88e5" },
  { field: "ram_used", label: "system RAM used", color: "#90caf9" },
];

/** A bounded, time-ordered list of samples ({t: seconds, field: bytes...}) keeping the last `maxAge` s. */
export class SampleHistory {
  constructor({ maxAge = 600, maxCount = 3600 } = {}) {
    this.maxAge = maxAge;
    this.maxCount = maxCount;
    this.samples = [];
  }

  /** Add samples (any order, duplicates ignored); returns how many were new. */
  push(...samples) {
    let added = 0;
    for (const s of samples) {
      if (!s || !Number.isFinite(s.t)) continue;
      const last = this.samples[this.samples.length - 1];
      if (last && s.t <= last.t) {
        if (this.samples.some((x) => x.t === s.t)) continue;
        this.samples.push(s);
        this.samples.sort((a, b) => a.t - b.t);
      } else {
        this.samples.push(s);
      }
      added += 1;
    }
    const newest = this.latest()?.t ?? 0;
    while (this.samples.length && (this.samples.length > this.maxCount || this.samples[0].t < newest - this.maxAge)) {
      this.samples.shift();
    }
    return added;
  }

  latest() {
    return this.samples[this.samples.length - 1] ?? null;
  }

  get length() {
    return this.samples.length;
  }

  /** The largest value of `field` over the history (null when no sample has it). */
  peak(field) {
    let best = null;
    for (const s of this.samples) if (Number.isFinite(s[field]) && (best === null || s[field] > best)) best = s[field];
    return best;
  }
}

/** A round axis maximum at or above `value`: 1, 2 or 5 times a power of ten; never 0. */
export function niceMax(value) {
  if (!Number.isFinite(value) || value <= 0) return 1;
  const exp = Math.floor(Math.log10(value));
  for (const m of [1, 2, 5, 10]) {
    const candidate = m * 10 ** exp;
    if (candidate >= value) return candidate;
  }
  return 10 ** (exp + 1);
}

/**
 * SVG path data for every series over the last `window` seconds, scaled into width x height.
 * Returns {series: [{field, label, color, d, last}], yMax, t0, t1}. A null value breaks the line.
 */
export function chartGeometry(samples, { width = 300, height = 120, window = 120, fields = SERIES } = {}) {
  if (!samples.length) return { series: [], yMax: 1, t0: 0, t1: window };
  const t1 = samples[samples.length - 1].t;
  const t0 = t1 - window;
  const visible = samples.filter((s) => s.t >= t0);
  let top = 0;
  for (const s of visible) for (const f of fields) if (Number.isFinite(s[f.field])) top = Math.max(top, s[f.field]);
  const yMax = niceMax(top);
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
  return { series, yMax, t0, t1 };
}

/** Seconds of history the chart spans: what there is, between 30 s and 3 minutes. */
export function chartWindow(samples, { min = 30, max = 180 } = {}) {
  if (samples.length < 2) return min;
  const span = samples[samples.length - 1].t - samples[0].t;
  return Math.min(max, Math.max(min, span));
}

/** The refresh setting (seconds, 0 = off) as a redraw decision: is it time to draw again? */
export function dueForRedraw(lastDrawMs, nowMs, refreshSeconds) {
  if (!(refreshSeconds > 0)) return false;
  return nowMs - lastDrawMs >= refreshSeconds * 1000;
}
