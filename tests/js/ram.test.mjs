import assert from "node:assert/strict";
import { test } from "node:test";

import { guardActions, ramBudgetToast, ramBudgetValue, ramRows, ramSummary } from "../../js/lib/ram.js";

const MiB = 2 ** 20;
const GiB = 2 ** 30;

// What GET /headroom/ram/{prompt_id} answers for a two-expert prompt with a 1 GiB budget: node 2 (the
// second loader) made room by sending the encoder to disk; node 8 ended over the budget.
const LEDGER = {
  prompt_id: "p",
  budget: { ram: GiB, pinned: GiB, source: "setting", detail: "" },
  baseline: 476 * MiB,
  nodes: [
    { node: "1", class_type: "HeadroomOffloadLoader", predicted_anon: 900 * MiB, predicted_pinned: 0, predicted_mapped: 0, anon: 950 * MiB, pinned: 0, budget: GiB, how: "RssAnon", actions: [] },
    {
      node: "2", class_type: "HeadroomOffloadLoader", predicted_anon: 800 * MiB, predicted_pinned: 64 * MiB, predicted_mapped: 0, anon: 780 * MiB, pinned: 64 * MiB, budget: GiB, how: "RssAnon",
      actions: [
        { kind: "applied", action: "map", component: "1:text_encoder_1:text_encoder", label: "clip_l [text_encoder]", nbytes: 235 * MiB, detail: "on disk: RAM budget 1.0 GB leaves 432 MB" },
        { kind: "ram", action: "", component: "", label: "", nbytes: 844 * MiB, detail: "RssAnon 780 MB (predicted 800 MB)" },
      ],
    },
    { node: "8", class_type: "KSamplerAdvanced", predicted_anon: 700 * MiB, predicted_pinned: 0, predicted_mapped: 290 * MiB, anon: 1100 * MiB, pinned: 0, budget: GiB, how: "RssAnon",
      actions: [{ kind: "note", action: "", component: "", label: "", nbytes: 76 * MiB, detail: "over the RAM budget by 76 MB: nothing idle is left to move to disk" }] },
  ],
  after: { anon: 492 * MiB, pinned: 0, baseline: 476 * MiB, moves: 2, seconds: 1.5 },
};

test("each measured node: actual and predicted RssAnon + pinned against the budget, on one scale", () => {
  const rows = ramRows(LEDGER);
  assert.deepEqual([...rows.keys()], ["1", "2", "8"]);
  const second = rows.get("2");
  assert.equal(second.predicted, 864 * MiB);
  assert.equal(second.actual, 844 * MiB);
  assert.equal(second.text, "844 MiB / 864 MiB");
  assert.equal(second.over, false);
  const last = rows.get("8");
  assert.equal(last.over, true); // 1100 MiB > 1 GiB
  assert.equal(last.predictedOver, false);
  assert.equal(last.mapped, 290 * MiB);
  // the scale's top is the largest bar (predicted 700 + mapped 290 < actual 1100): the actual bar is full
  assert.equal(last.actualFrac, 1);
  assert.equal(last.budgetFrac, 1024 / 1100);
  for (const r of rows.values()) assert.equal(r.budgetFrac, 1024 / 1100); // the line is at one place
  assert.match(last.title, /over by 76\.0 MiB/);
  assert.match(last.title, /290 MiB of mapped file pages/);
});

test("what the guard did, in a few words", () => {
  const rows = ramRows(LEDGER);
  assert.equal(rows.get("2").moves, "clip_l [text_encoder] → disk 235 MiB");
  assert.equal(rows.get("8").moves, "over by 76.0 MiB, nothing idle to move");
  assert.equal(rows.get("1").moves, "");
  assert.equal(guardActions([{ kind: "skipped", action: "map", label: "vae", nbytes: 1 }]), "vae: skipped");
  const twice = [{ kind: "note", nbytes: 50 * MiB }, { kind: "ram", nbytes: GiB }, { kind: "note", nbytes: 48 * MiB }];
  assert.equal(guardActions(twice), "over by 48.0 MiB, nothing idle to move"); // the node's end says it last
  assert.match(rows.get("2").title, /on disk: RAM budget 1\.0 GB leaves 432 MB/);
});

test("the summary names the budget's source, the nodes over it and the RAM after the prompt", () => {
  assert.equal(
    ramSummary(LEDGER),
    "RAM budget 1.0 GiB (setting) · over at 1 node · after the prompt RssAnon 492 MiB (baseline 476 MiB), 2 idle copies to disk in 1.5 s",
  );
  const machine = { ...LEDGER, budget: { ...LEDGER.budget, source: "machine", ram: 24 * GiB }, nodes: [], after: null };
  assert.equal(ramSummary(machine), "RAM budget 24.0 GiB (machine default)");
  assert.equal(ramSummary(null), "");
});

test("no ledger (the guard did not run): no rows, no summary", () => {
  assert.equal(ramRows(null).size, 0);
  assert.equal(ramRows({ budget: { ram: GiB }, nodes: [] }).size, 0);
});

test("a row without a budget is never over and draws no line", () => {
  const rows = ramRows({ nodes: [{ node: 3, anon: 5 * GiB, pinned: 0, predicted_anon: GiB }] });
  assert.equal(rows.get("3").over, false);
  assert.equal(rows.get("3").budgetFrac, null);
});

test("the setting's value and the server's answer", () => {
  assert.equal(ramBudgetValue(""), "auto");
  assert.equal(ramBudgetValue(" AUTO "), "auto");
  assert.equal(ramBudgetValue(undefined), "auto");
  assert.equal(ramBudgetValue(" 24 GB "), "24 GB");
  assert.equal(ramBudgetValue(24), "24");
  const error = ramBudgetToast(false, { error: "RAM budget: not a size: 'lots'" });
  assert.equal(error.severity, "error");
  assert.match(error.detail, /not a size/);
  assert.equal(ramBudgetToast(false, null).detail, "the server refused it");
  const env = ramBudgetToast(true, { note: "HEADROOM_RAM_BUDGET=16GB is set on the server: it wins over this setting" });
  assert.equal(env.severity, "warn");
  assert.equal(ramBudgetToast(true, { note: "" }), null);
});
