// "Will it fit?" before Run, and the last verdict of each workflow: the answer of POST /headroom/fit (a
// check the user asked for) or of the preflight that ran when the workflow was queued. Both ways: "fits"
// with the plan's peak, the usable VRAM and the time, or the warning that names the node. Kept per
// workflow until the next check, so the sidebar shows the open workflow's own verdict.
// Pure (unit-tested under Node).
import { formatGiB, formatSeconds } from "./format.js";
import { preflightToast } from "./preflight.js";

/**
 * The answer as the sidebar and a toast show it: {fits, severity, summary, detail, text, nodes, card}.
 * `response` is the route's body ({card, verdict, vram_peak, wall_s}); a preflight event is passed as
 * {verdict: event}. `source`: "check" (the button or command) or "run" (the preflight at queue time).
 */
export function fitAnswer(response, source = "check", app = globalThis.app) {
  const verdict = response?.verdict ?? {};
  const card = response?.card ?? verdict.card ?? "";
  const on = card ? ` on ${card}` : "";
  if (verdict.fits === true) {
    const peak = response?.vram_peak ?? verdict.headroom_peak ?? verdict.predicted_peak;
    const parts = [`peak ${formatGiB(peak)} of ${formatGiB(verdict.budget_vram)} usable`];
    if (Number.isFinite(response?.wall_s) && response.wall_s > 0) parts.push(`about ${formatSeconds(response.wall_s)}`);
    const text = `Fits${on}: ${parts.join(", ")}`;
    return { fits: true, severity: "success", summary: `Headroom: ${text}`, detail: verdict.message ?? "", text, nodes: [], card, source, life: 6000, remedies: [], time: response?.time ?? null };
  }
  if (verdict.fits === false) {
    const toast = preflightToast(verdict, app);
    const remedies = Array.isArray(response?.remedies) ? response.remedies : [];
    return { ...toast, fits: false, text: toast.summary.replace(/^Headroom: /, ""), card, source, remedies, time: response?.time ?? null };
  }
  const text = `Could not check${on}: ${verdict.message || response?.error || "no answer from the server"}`;
  return { fits: null, severity: "info", summary: "Headroom: will it fit?", detail: text, text, nodes: [], card, source, life: 8000, remedies: [] };
}

const MAX_WORKFLOWS = 32;

/** The last verdict per workflow (the graph's id): a check or a run's preflight replaces the one before. */
export class FitStore {
  constructor(current = () => "") {
    this.current = current;
    this.byWorkflow = new Map();
  }

  set(answer, workflowId = this.current()) {
    const key = String(workflowId ?? "");
    this.byWorkflow.delete(key);
    this.byWorkflow.set(key, { ...answer, at: Date.now() });
    for (const old of this.byWorkflow.keys()) {
      if (this.byWorkflow.size <= MAX_WORKFLOWS) break;
      this.byWorkflow.delete(old);
    }
  }

  get(workflowId = this.current()) {
    return this.byWorkflow.get(String(workflowId ?? "")) ?? null;
  }
}
