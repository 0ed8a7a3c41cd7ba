// The "Residency timeline" bottom panel: plan-vs-actual rows from GET /headroom/report/{prompt_id}.
// Pure: a report in, rows and bar widths out (unit-tested under Node).

/** Status of a row for styling: what happened compared with what was planned. */
export function rowState(row) {
  if (row.status === "not run") return "skipped";
  // served from the host's cache; not yet run; running now (the server's word while a node executes)
  if (row.status === "cached" || row.status === "pending" || row.status === "running") return row.status;
  if (row.status !== "done") return "error";
  if (row.planned_order === null || row.planned_order === undefined) return "unplanned";
  if (Number.isFinite(row.vram_peak) && Number.isFinite(row.planned_vram_peak) && row.vram_peak > row.planned_vram_peak * 1.1 + 64 * 2 ** 20) {
    return "over"; // more than 10% (and 64 MiB) above the plan
  }
  return "ok";
}

/** Rows with bar fractions (0..1 of the largest planned or actual VRAM peak) and a text for placements. */
export function timelineRows(report) {
  const nodes = report?.nodes ?? [];
  let top = 0;
  for (const r of nodes) {
    for (const v of [r.vram_peak, r.planned_vram_peak]) if (Number.isFinite(v)) top = Math.max(top, v);
  }
  return nodes.map((r) => ({
    node: String(r.node),
    classType: r.class_type ?? "",
    state: rowState(r),
    duration: r.duration_s ?? null,
    plannedWall: r.planned_wall_s ?? null,
    actual: Number.isFinite(r.vram_peak) ? r.vram_peak : null,
    planned: Number.isFinite(r.planned_vram_peak) ? r.planned_vram_peak : null,
    actualFrac: top > 0 && Number.isFinite(r.vram_peak) ? r.vram_peak / top : 0,
    plannedFrac: top > 0 && Number.isFinite(r.planned_vram_peak) ? r.planned_vram_peak / top : 0,
    rss: r.rss_peak ?? null,
    // while it runs: seconds since it started and the sampler's steps (M11)
    elapsed: Number.isFinite(r.elapsed_s) ? r.elapsed_s : null,
    steps: r.steps ? `step ${r.steps.value}/${r.steps.max}` : "",
    placements: Object.entries(r.planned_placements ?? {})
      .map(([component, tier]) => `${component.replace(/\.safetensors/g, "")}: ${tier}`)
      .join(", "),
    // the plan's one-line reason per placement, one per line (the placements cell's tooltip)
    reasons: Object.entries(r.planned_reasons ?? {})
      .map(([component, why]) => `${component.replace(/\.safetensors/g, "")}: ${why}`)
      .join("\n"),
    // files named as in the placements column (N15: one name per file in the table)
    events: (r.residency_events ?? []).map((e) => `${String(e.component).replace(/\.safetensors/g, "")}: ${e.tier_from} → ${e.tier_to}`).join(", "),
    // what bounded the node, measured (compute, disk or upload), and its line with the figures
    boundKind: r.bounded_by?.kind ?? "",
    bound: r.bounded_by?.line ?? "",
    // spill into shared memory: in the line when the OS reported some; else why it was not read
    spill: spillText(r.bounded_by),
  }));
}

const GIB = 2 ** 30;
const gib = (n) => `${(n / GIB).toFixed(2)} GiB`; // as the server's messages print them

/** Spill into shared memory as the OS reported it over a node, else why it could not be read. */
function spillText(bound) {
  if (!bound) return "";
  if (bound.spill_note) return bound.spill_note;
  if (bound.spilled == null) return ""; // a report from before the spill reader
  return bound.spilled > 0 ? `${gib(bound.spilled)} spilled over this node` : "nothing spilled over this node";
}

/** The verdict on top of the table: whether the plan fitted. */
export function planSummary(report) {
  if (!report) return "No run yet.";
  const plan = report.plan;
  if (!plan) return `No plan: ${report.plan_note || "not planned"}`;
  const fits = plan.fits === true ? "fits" : plan.fits === false ? "does not fit" : "not checked";
  return `Plan ${fits}`;
}

/**
 * What the plan was made for, from the report: the card (its name, its VRAM) and the budget, e.g.
 * {card: "NVIDIA RTX 4060 · 8.00 GiB", budget: "budget 7.50 GiB usable (0.50 GiB reserved) · needs 2.91 GiB"}.
 * Empty strings where the report does not say.
 */
export function planBudget(report) {
  const plan = report?.plan;
  if (!plan) return { card: "", budget: "" };
  const pre = report.preflight ?? {};
  const usable = Number.isFinite(plan.budget_vram) ? plan.budget_vram : pre.budget_vram;
  const total = Number.isFinite(pre.card_vram) ? pre.card_vram : null;
  const name = pre.card || "card";
  const card = total !== null ? `${name} · ${gib(total)}` : pre.card || "";
  const parts = [];
  if (Number.isFinite(usable)) {
    parts.push(`budget ${gib(usable)} usable${Number.isFinite(pre.reserve) && pre.reserve > 0 ? ` (${gib(pre.reserve)} reserved)` : ""}`);
  }
  // a workflow without models peaks at 0: nothing to say
  if (pre.headroom_peak > 0) parts.push(`plan peak ${gib(pre.headroom_peak)}`);
  if (plan.min_vram > 0) parts.push(`needs at least ${gib(plan.min_vram)}`);
  return { card, budget: parts.join(" · ") };
}
