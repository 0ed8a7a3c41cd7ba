// RAM per node in the residency timeline: the RAM guard's ledger (GET /headroom/ram/{prompt_id}), the
// plan's prediction against what the OS reported at each node's end, with the RAM budget; and what the
// server said to the "Headroom.RamBudget" setting. Pure (unit-tested under Node).
import { formatBytes, formatSeconds } from "./format.js";

const SOURCES = { HEADROOM_RAM_BUDGET: "HEADROOM_RAM_BUDGET", setting: "setting", machine: "machine default" };
const num = (v) => (Number.isFinite(v) ? v : 0);

/** What the guard did at one node, in a few words: "high → disk 290 MiB", "over by 1.2 GiB". */
export function guardActions(actions) {
  const all = actions ?? [];
  const lastNote = all.filter((a) => a.kind === "note").at(-1); // the node's start and end may both say it
  return all
    .filter((a) => a.action === "map" || a === lastNote)
    .map((a) => {
      if (a.kind === "note") return `over by ${formatBytes(a.nbytes)}, nothing idle to move`;
      const name = a.label || a.component;
      if (a.kind === "applied") return `${name} → disk ${formatBytes(a.nbytes)}`;
      return `${name}: ${a.kind}`; // skipped (the loader converted it) or failed
    })
    .join(", ");
}

/**
 * One row per node the guard measured, keyed by node id. Predicted and actual are what the budget
 * bounds (RssAnon + pinned); `mapped` is the file pages the plan predicts the node reads (page cache,
 * outside the budget). Fractions are of one scale for the whole prompt, so the budget line is at the same
 * place on every row.
 */
export function ramRows(ledger) {
  const nodes = ledger?.nodes ?? [];
  const budget = Number.isFinite(ledger?.budget?.ram) ? ledger.budget.ram : null;
  const rows = nodes.map((r) => {
    const predicted = num(r.predicted_anon) + num(r.predicted_pinned);
    const actual = num(r.anon) + num(r.pinned);
    const limit = Number.isFinite(r.budget) ? r.budget : budget;
    const moves = guardActions(r.actions);
    const details = (r.actions ?? []).map((a) => a.detail).filter(Boolean);
    return {
      node: String(r.node),
      classType: r.class_type ?? "",
      predicted,
      mapped: num(r.predicted_mapped),
      actual,
      pinned: num(r.pinned),
      budget: limit,
      over: limit !== null && actual > limit,
      predictedOver: limit !== null && predicted > limit,
      moves,
      text: `${formatBytes(actual)} / ${formatBytes(predicted)}`,
      title: [
        `actual: RssAnon ${formatBytes(r.anon)} + pinned ${formatBytes(r.pinned)} (${r.how || "OS"})`,
        `predicted: RssAnon ${formatBytes(r.predicted_anon)} + pinned ${formatBytes(r.predicted_pinned)}` +
          (r.predicted_mapped ? `, and ${formatBytes(r.predicted_mapped)} of mapped file pages` : ""),
        limit !== null ? `RAM budget ${formatBytes(limit)}${actual > limit ? `: over by ${formatBytes(actual - limit)}` : ""}` : "",
        ...details,
      ].filter(Boolean).join("\n"),
    };
  });
  let top = budget ?? 0;
  for (const r of rows) top = Math.max(top, r.actual, r.predicted + r.mapped, r.budget ?? 0);
  const frac = (v) => (top > 0 ? Math.min(1, v / top) : 0);
  const byNode = new Map();
  for (const r of rows) {
    byNode.set(r.node, { ...r, actualFrac: frac(r.actual), predictedFrac: frac(r.predicted), mappedFrac: frac(r.mapped), budgetFrac: r.budget === null ? null : frac(r.budget) });
  }
  return byNode;
}

/** The line above the table: the budget, where it comes from, and the RAM after the prompt. */
export function ramSummary(ledger) {
  const budget = ledger?.budget;
  if (!budget || !Number.isFinite(budget.ram)) return "";
  const parts = [`RAM budget ${formatBytes(budget.ram)} (${SOURCES[budget.source] ?? budget.source})`];
  const over = (ledger.nodes ?? []).filter((r) => num(r.anon) + num(r.pinned) > num(r.budget ?? budget.ram)).length;
  if (over) parts.push(`over at ${over} node${over === 1 ? "" : "s"}`);
  const after = ledger.after;
  if (after && Number.isFinite(after.anon)) {
    const moved = after.moves ? `, ${after.moves} idle cop${after.moves === 1 ? "y" : "ies"} to disk in ${formatSeconds(after.seconds)}` : "";
    parts.push(`after the prompt RssAnon ${formatBytes(after.anon)} (baseline ${formatBytes(after.baseline)})${moved}`);
  }
  return parts.join(" · ");
}

/** The setting's value as the server takes it: "auto", or the size as typed. */
export function ramBudgetValue(value) {
  const text = String(value ?? "").trim();
  return text === "" || text.toLowerCase() === "auto" ? "auto" : text;
}

/** A toast for the server's answer to the setting (null: nothing to say), as {severity, summary, detail}. */
export function ramBudgetToast(ok, body) {
  if (!ok) {
    return { severity: "error", summary: "Headroom: RAM budget not changed", detail: body?.error || "the server refused it", life: 8000 };
  }
  if (body?.note) return { severity: "warn", summary: "Headroom: RAM budget", detail: body.note, life: 8000 };
  return null;
}
