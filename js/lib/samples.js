// The live memory history behind the sidebar chart (drawn by chart.js). Pure, unit-tested under Node.

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
