import assert from "node:assert/strict";
import { test } from "node:test";

import { BadgeStore, badgeText } from "../../js/lib/badges.js";
import { hostSettingsToast, preflightToast } from "../../js/lib/preflight.js";
import { planSummary, rowState, timelineRows } from "../../js/lib/timeline.js";

const MiB = 2 ** 20;

test("badges show VRAM, or RSS on machines without a GPU", () => {
  assert.equal(badgeText({ vram_peak: 1.5 * 2 ** 30, duration_s: 0.35 }), "VRAM 1.5 GiB · 350 ms");
  assert.equal(badgeText({ vram_peak: null, rss_peak: 800 * MiB, duration_s: 2 }), "RSS 800 MiB · 2.0 s");
  assert.equal(badgeText(null), "");
});

test("a new prompt clears the previous prompt's badges", () => {
  const store = new BadgeStore();
  assert.equal(store.add({ prompt_id: "a", node: 1, duration_s: 1 }), false);
  store.add({ prompt_id: "a", node: "2", duration_s: 1 });
  assert.equal(store.records.size, 2);
  assert.equal(store.add({ prompt_id: "b", node: "3", duration_s: 1 }), true);
  assert.deepEqual([...store.records.keys()], ["3"]);
  assert.equal(store.get(1), null);
  assert.equal(store.text("3"), "1.0 s");
});

test("preflight toasts only when the prompt will not fit", () => {
  assert.equal(preflightToast({ fits: true, level: "ok" }), null);
  assert.equal(preflightToast({ fits: null, level: "skipped" }), null);
  const warn = preflightToast({ fits: false, level: "warn", node: "3", class_type: "KSampler", message: "m", fix: "f" });
  assert.equal(warn.severity, "warn");
  assert.equal(warn.summary, "Headroom: KSampler (node 3) will run out of VRAM");
  assert.equal(warn.detail, "m");
  assert.equal(preflightToast({ fits: false, level: "error", message: "x" }).severity, "error");
});

const REPORT = {
  prompt_id: "p",
  plan: { fits: true, budget_vram: 8 * 2 ** 30, min_vram: 2 ** 30 },
  nodes: [
    { node: "1", class_type: "A", status: "done", planned_order: 1, vram_peak: 100 * MiB, planned_vram_peak: 200 * MiB,
      duration_s: 0.1, planned_placements: { "flux.safetensors [dit]": "gpu" },
      planned_reasons: { "flux.safetensors [dit]": "on GPU: used here, fits (0.20 GiB of 8.00 GiB)" }, residency_events: [] },
    { node: "2", class_type: "B", status: "done", planned_order: 2, vram_peak: 400 * MiB, planned_vram_peak: 200 * MiB,
      residency_events: [{ component: "vae", tier_from: "ram", tier_to: "gpu" }] },
    { node: "3", class_type: "C", status: "done", planned_order: null, vram_peak: null },
    { node: "4", class_type: "D", status: "not run", planned_order: 3, planned_vram_peak: 0 },
    { node: "5", class_type: "E", status: "error", planned_order: 4 },
  ],
};

test("timeline rows compare plan and reality", () => {
  const rows = timelineRows(REPORT);
  assert.deepEqual(rows.map((r) => r.state), ["ok", "over", "unplanned", "skipped", "error"]);
  assert.equal(rows[1].actualFrac, 1);
  assert.equal(rows[0].plannedFrac, 0.5);
  assert.equal(rows[0].placements, "flux [dit]: gpu");
  assert.equal(rows[1].events, "vae: ram → gpu");
  assert.equal(rows[0].reasons, "flux [dit]: on GPU: used here, fits (0.20 GiB of 8.00 GiB)");
  assert.equal(rows[1].reasons, ""); // no reasons: no tooltip text
  assert.equal(rows[2].actual, null);
  assert.equal(rows[0].boundKind, ""); // a report from before "bounded by": nothing shown
  const bound = timelineRows({ nodes: [{ node: "3", status: "done", bounded_by: { kind: "disk", line: "disk-bound: 13.40 GiB read at 2.2 GB/s, 6.4 s of its 9.0 s" } }] });
  assert.equal(bound[0].boundKind, "disk");
  assert.equal(bound[0].bound, "disk-bound: 13.40 GiB read at 2.2 GB/s, 6.4 s of its 9.0 s");
  assert.equal(bound[0].spill, ""); // a report from before the spill reader
  const notes = timelineRows({ nodes: [
    { node: "4", status: "done", bounded_by: { kind: "compute", line: "compute-bound", spilled: null, spill_note: "not reported by this OS: no fallback" } },
    { node: "5", status: "done", bounded_by: { kind: "upload", line: "upload-bound", spilled: 1.5 * 2 ** 30, spill_note: "" } },
    { node: "6", status: "done", bounded_by: { kind: "compute", line: "compute-bound", spilled: 0, spill_note: "" } },
  ] });
  assert.deepEqual(notes.map((r) => r.spill), ["not reported by this OS: no fallback", "1.50 GiB spilled over this node", "nothing spilled over this node"]);
  assert.deepEqual(timelineRows(null), []);
  assert.equal(rowState({ status: "done", planned_order: 1, vram_peak: 205 * MiB, planned_vram_peak: 200 * MiB }), "ok");
});

test("plan summary says whether it fitted or why there is no plan", () => {
  assert.equal(planSummary(REPORT), "Plan fits");
  assert.equal(planSummary({ plan: null, plan_note: "no CUDA device" }), "No plan: no CUDA device");
  assert.equal(planSummary(null), "No run yet.");
});

test("a toast suggests the host's own settings that fit the workflow, each with its figure", () => {
  assert.equal(hostSettingsToast({ fits: true }), null);
  assert.equal(hostSettingsToast({ fits: true, host: { settings: "ComfyUI 2026", suggest: [] } }), null);
  const tip = hostSettingsToast({ fits: true, host: { settings: "ComfyUI 2026 (DynamicVRAM, ram cache)", suggest: ["--cache-classic: saves 0.5 s per run"] } });
  assert.equal(tip.severity, "info");
  assert.equal(tip.detail, "--cache-classic: saves 0.5 s per run");
  assert.ok(tip.summary.includes("ComfyUI 2026"));
});
