// The residency timeline while a run goes: which report to show, and when to fetch it again.
// Pure (unit-tested under Node).

/**
 * The report as the timeline shows it: while its prompt is still running, planned nodes that have not run
 * yet are "pending" (after the run they are "not run": not reached, or served from the cache).
 */
export function liveReport(report, runningPromptId, executing = null, now = Date.now()) {
  if (!report || !runningPromptId || report.prompt_id !== runningPromptId) return report;
  const here = executing && (!executing.promptId || executing.promptId === runningPromptId) ? executing : null;
  return {
    ...report,
    live: true,
    nodes: (report.nodes ?? []).map((row) => {
      const pending = row.status === "not run" ? { ...row, status: "pending" } : row;
      // M9, M11: the node the host says it is executing is running from that moment (the server's
      // record comes when it ends), with its elapsed time and the sampler's steps
      if (!here || String(row.node) !== String(here.node) || !["pending", "running"].includes(pending.status)) return pending;
      const steps = here.steps && Number.isFinite(here.steps.max) && here.steps.max > 0 ? here.steps : null;
      return { ...pending, status: "running", elapsed_s: Math.max(0, (now - here.since) / 1000), steps };
    }),
  };
}

/** What the host's "executing" and "progress" events say about the node running now: {node, promptId,
 * since, steps: {value, max} | null}, or null when none is. `detail` is the event's (a node id string on
 * old frontends). */
export function executingNode(previous, detail, now = Date.now()) {
  const node = typeof detail === "object" && detail !== null ? detail.display_node ?? detail.node : detail;
  if (node === null || node === undefined) return null;
  const promptId = typeof detail === "object" && detail !== null ? detail.prompt_id ?? null : null;
  if (previous && String(previous.node) === String(node) && previous.promptId === promptId) return previous;
  return { node: String(node), promptId, since: now, steps: null };
}

/** The running node with the sampler's progress event ({value, max, node, prompt_id}) applied. */
export function withProgress(executing, detail) {
  if (!executing || !detail || (detail.node != null && String(detail.node) !== executing.node)) return executing;
  return { ...executing, steps: { value: Number(detail.value), max: Number(detail.max) } };
}

/**
 * Call `fn(key)` at most once per `gapMs` while events keep coming, and once more after the last one
 * (a trailing call), so the last state is always fetched. `timers` is {setTimeout, now} (fakes in tests).
 */
// The default timers wrap the globals: called as `timers.setTimeout(...)` the browser's own function
// throws "Illegal invocation" (its receiver must be the window).
const GLOBAL_TIMERS = { setTimeout: (f, ms) => globalThis.setTimeout(f, ms), now: () => Date.now() };

export function coalesce(fn, gapMs, timers = GLOBAL_TIMERS) {
  let last = -Infinity;
  let pending = null; // the key of a scheduled trailing call
  let timer = null;
  return (key) => {
    const now = timers.now();
    if (timer === null && now - last >= gapMs) {
      last = now;
      fn(key);
      return;
    }
    pending = key;
    if (timer !== null) return;
    timer = timers.setTimeout(() => {
      timer = null;
      last = timers.now();
      const next = pending;
      pending = null;
      fn(next);
    }, Math.max(0, gapMs - (now - last)));
  };
}

/** Responses applied in the order their requests were made: a slow, older one never replaces a newer. */
export class Latest {
  constructor() {
    this.issued = 0;
    this.applied = 0;
  }

  next() {
    this.issued += 1;
    return this.issued;
  }

  /** True when the response of request `ticket` may be shown (no later request was shown first). */
  accept(ticket) {
    if (ticket < this.applied) return false;
    this.applied = ticket;
    return true;
  }
}
