// The "Residency timeline" bottom panel: plan-vs-actual rows from GET /headroom/report/{prompt_id}.
// Pure: a report in, rows and bar widths out (unit-tested under Node).

/** Status of a row for styling: what happened compared with what was planned. */
export function rowState(row) {
  if (row.status === "not run") return "skipped";
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
    placements: Object.entries(r.planned_placements ?? {})
      .map(([component, tier]) => `${component.replace(/\.safetensors/g, "")}: ${tier}`)
      .join(", "),
    // the plan's one-line reason per placement, one per line (the placements cell's tooltip)
    reasons: Object.entries(r.planned_reasons ?? {})
      .map(([component, why]) => `${component.replace(/\.safetensors/g, "")}: ${why}`)
      .join("\n"),
    events: (r.residency_events ?? []).map((e) => `${e.component}: ${e.tier_from} → ${e.tier_to}`).join(", "),
  }));
}

/** One line on top of the table: whether the plan fitted and what the budget was. */
export function planSummary(report) {
  if (!report) return "No run yet.";
  const plan = report.plan;
  if (!plan) return `No plan: ${report.plan_note || "not planned"}`;
  const fits = plan.fits === true ? "fits" : plan.fits === false ? "does not fit" : "not checked";
  return `Plan ${fits}`;
}
