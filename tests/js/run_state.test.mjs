import assert from "node:assert/strict";
import { test } from "node:test";

import { BadgeStore, badgeText } from "../../js/lib/badges.js";
import { Latest, coalesce, liveReport } from "../../js/lib/live.js";
import { TEXT_WIDGET, addTextWidget, messageText, showText } from "../../js/lib/nodetext.js";
import { rowState, timelineRows } from "../../js/lib/timeline.js";

const MiB = 2 ** 20;

test("badges belong to the workflow that ran: the same node id elsewhere shows none", () => {
  let onScreen = "wf-a";
  const store = new BadgeStore(() => onScreen);
  store.add({ prompt_id: "p1", workflow_id: "wf-a", node: "3", rss_peak: 100 * MiB, duration_s: 2 });
  assert.equal(store.text("3"), "RSS 100 MiB · 2.0 s");
  onScreen = "wf-b";
  assert.equal(store.text("3"), "");
  assert.equal(store.records.size, 0);
  store.add({ prompt_id: "p2", workflow_id: "wf-b", node: "3", rss_peak: 5 * MiB, duration_s: 1 });
  assert.equal(store.text("3"), "RSS 5.0 MiB · 1.0 s");
  assert.equal(store.text("3", "wf-a"), "RSS 100 MiB · 2.0 s"); // another workflow's run leaves it alone
  store.add({ prompt_id: "p3", node: "4", duration_s: 1 }); // a script's prompt: the workflow on screen
  assert.deepEqual([...store.recordsOf("wf-b").keys()], ["4"]);
});

test("a re-run keeps the cached nodes' badges from the run that computed them", () => {
  const store = new BadgeStore(() => "wf");
  store.add({ prompt_id: "p1", workflow_id: "wf", node: "4", status: "done", rss_peak: MiB, duration_s: 6 });
  store.add({ prompt_id: "p2", workflow_id: "wf", node: "4", status: "cached", cached_from: "p1", rss_peak: MiB, duration_s: 6 });
  assert.equal(store.text("4"), "RSS 1.0 MiB · 6.0 s");
  assert.equal(badgeText({ status: "cached", duration_s: null }), ""); // no run that computed it is known
});

test("a reload restores each workflow's last run, not scripts' runs", () => {
  const store = new BadgeStore(() => "wf");
  store.restore([
    { prompt_id: "p1", workflow_id: "wf", nodes: [{ node: "1", duration_s: 1 }, { node: "2", duration_s: 1 }] },
    { prompt_id: "p2", workflow_id: "wf", nodes: [{ node: "2", duration_s: 3 }] },
    { prompt_id: "p3", workflow_id: null, nodes: [{ node: "9", duration_s: 3 }] },
    { prompt_id: "p4", workflow_id: "other", nodes: [{ node: "1", duration_s: 4 }] },
  ]);
  assert.deepEqual([...store.records.keys()], ["2"]);
  assert.equal(store.text("2"), "3.0 s");
  assert.equal(store.text("1", "other"), "4.0 s");
  assert.equal(store.workflows.size, 2);
});

test("node text: a read-only box made at creation, filled by the executed message", async () => {
  const made = [];
  const node = {
    widgets: [],
    comfyClass: "HeadroomMemoryMonitor",
    size: [140, 116],
    addDOMWidget(name, type, element, options) {
      made.push({ name, type, options });
      const widget = { name, type, options, get value() { return options.getValue(); }, set value(v) { options.setValue(v); } };
      this.widgets.push(widget);
      return widget;
    },
  };
  const doc = { createElement: (tag) => ({ tag, value: "", readOnly: false, style: {} }) };
  const widget = addTextWidget(node, doc);
  assert.equal(widget.inputEl.wrap, "off"); // M18: the report's table rows do not wrap
  assert.equal(widget.inputEl.style.whiteSpace, "pre");
  await Promise.resolve(); // the size is set a moment later (after the host's own sizing)
  assert.equal(widget.name, TEXT_WIDGET);
  assert.equal(made[0].type, "customtext"); // what a multiline STRING is, so the Vue renderer shows a text box
  assert.equal(widget.serialize, false); // not saved in the workflow
  assert.equal(widget.options.serialize, false); // not sent as an input
  assert.deepEqual(node.size, [460, 360]); // VRAM Stats is made big enough for its report (N8)
  assert.equal(addTextWidget({ widgets: [] }, doc), null); // a frontend without DOM widgets
  assert.equal(widget.inputEl.readOnly, true);
  assert.equal(showText(node, { text: ["line 1", "line 2"] }), true);
  assert.equal(widget.value, "line 1\nline 2");
  const seen = [];
  widget.callback = (v) => seen.push(v); // the Vue renderer's wrapped callback copies the value
  showText(node, { text: "again" });
  assert.deepEqual(seen, ["again"]);
  const box = { value: "" };
  const selectors = [];
  const root = { querySelector: (selector) => (selectors.push(selector), box) };
  showText(Object.assign(node, { id: 10 }), { text: ["on screen"] }, root); // the Vue renderer's box
  assert.equal(box.value, "on screen");
  assert.deepEqual(selectors, ['[data-node-id="10"] textarea[placeholder="last run"]']);
  assert.equal(showText(node, { images: [] }), false);
  assert.equal(showText({ widgets: [] }, { text: ["x"] }), false);
  assert.equal(messageText(null), null);
});

const REPORT = {
  prompt_id: "p",
  nodes: [
    { node: "1", status: "done", planned_order: 1, vram_peak: 10, planned_vram_peak: 10 },
    { node: "2", status: "cached", planned_order: 2, vram_peak: null, planned_vram_peak: null },
    { node: "3", status: "not run", planned_order: 3, planned_vram_peak: 20 },
  ],
};

test("while its prompt runs, unrun planned nodes are pending; cached ones are cached without bars", () => {
  const live = liveReport(REPORT, "p");
  assert.deepEqual(live.nodes.map(rowState), ["ok", "cached", "pending"]);
  assert.equal(liveReport(REPORT, "other"), REPORT);
  assert.equal(liveReport(REPORT, null), REPORT);
  assert.deepEqual(REPORT.nodes.map(rowState), ["ok", "cached", "skipped"]);
  const cached = timelineRows(live).find((r) => r.node === "2");
  assert.equal(cached.plannedFrac, 0);
  assert.equal(cached.actualFrac, 0);
});

test("live report fetches: at most one per gap, and always one after the last event", () => {
  const calls = [];
  let now = 0;
  const scheduled = [];
  const timers = { now: () => now, setTimeout: (fn, ms) => scheduled.push({ fn, at: now + ms }) };
  const fetch = coalesce((key) => calls.push([now, key]), 500, timers);
  fetch("a");
  now = 100;
  fetch("b");
  now = 200;
  fetch("c");
  assert.deepEqual(calls, [[0, "a"]]);
  assert.equal(scheduled.length, 1);
  assert.equal(scheduled[0].at, 500);
  now = 500;
  scheduled[0].fn();
  assert.deepEqual(calls, [[0, "a"], [500, "c"]]); // the latest key
  now = 1200;
  fetch("d");
  assert.deepEqual(calls.at(-1), [1200, "d"]);
});

test("an older report response never replaces a newer one", () => {
  const latest = new Latest();
  const first = latest.next();
  const second = latest.next();
  assert.equal(latest.accept(second), true);
  assert.equal(latest.accept(first), false);
  assert.equal(latest.accept(latest.next()), true);
});

test("coalesce's default timers work when the global setTimeout needs its own receiver", async () => {
  // Browsers throw "Illegal invocation" for setTimeout called on another object; emulate that check.
  const real = globalThis.setTimeout;
  globalThis.setTimeout = function (f, ms) {
    if (this !== undefined && this !== globalThis) throw new TypeError("Illegal invocation");
    return real(f, ms);
  };
  try {
    const seen = [];
    const call = coalesce((k) => seen.push(k), 1000);
    call("a");
    call("b"); // within the gap: scheduled as the trailing call through the default timers
    assert.deepEqual(seen, ["a"]);
  } finally {
    globalThis.setTimeout = real;
  }
});

test("a badge is not shown on a node of another class with the same id", () => {
  const store = new BadgeStore(() => "wf");
  store.add({ node: "1", class_type: "EmptyImage", rss_peak: 2 ** 30, duration_s: 0.017, prompt_id: "p" });
  assert.equal(store.text("1", undefined, "CheckpointLoaderSimple"), "");
  assert.match(store.text("1", undefined, "EmptyImage"), /^RSS 1(\.0+)? GiB/);
  assert.match(store.text("1"), /^RSS/); // no class given: the record's
});

test("M9, M11: the node the host is executing is running from its start, with elapsed time and steps", async () => {
  const { executingNode, withProgress } = await import("../../js/lib/live.js");
  const { timelineRows } = await import("../../js/lib/timeline.js");
  const report = { prompt_id: "p", nodes: [{ node: "1", status: "not run" }, { node: "3", status: "not run" }] };
  let executing = executingNode(null, { node: "1", display_node: "1", prompt_id: "p" }, 1000);
  let live = liveReport(report, "p", executing, 8000);
  assert.deepEqual(live.nodes.map((r) => r.status), ["running", "pending"]); // the first node, loading for 7 s
  assert.equal(live.nodes[0].elapsed_s, 7);
  assert.equal(executingNode(executing, { node: "1", prompt_id: "p" }, 5000), executing); // same node: same start
  executing = withProgress(executingNode(executing, "3", 9000), { value: 12, max: 20, node: "3" });
  live = liveReport({ ...report, prompt_id: "p" }, "p", { ...executing, promptId: "p" }, 69000);
  const rows = timelineRows(live);
  assert.equal(rows[1].state, "running");
  assert.equal(rows[1].elapsed, 60);
  assert.equal(rows[1].steps, "step 12/20");
  assert.equal(withProgress(executing, { value: 1, max: 2, node: "9" }), executing); // another node's progress
  assert.equal(executingNode(executing, null), null); // the host's "executing: null": the prompt ended
  assert.equal(liveReport(report, "p", { node: "1", promptId: "other", since: 0 }, 1).nodes[0].status, "pending");
});

test("N15: the timeline names a file one way in placements and residency events", async () => {
  const { timelineRows } = await import("../../js/lib/timeline.js");
  const [row] = timelineRows({ nodes: [{ node: "3", status: "done", planned_placements: { "flux1-dev.safetensors [diffusion_model]": "gpu" }, residency_events: [{ component: "flux1-dev.safetensors [diffusion_model]", tier_from: "disk", tier_to: "gpu" }] }] });
  assert.equal(row.placements, "flux1-dev [diffusion_model]: gpu");
  assert.equal(row.events, "flux1-dev [diffusion_model]: disk → gpu");
});

test("M18 in the Vue renderer: one style rule keeps the text boxes of our nodes from wrapping", async () => {
  const { NO_WRAP_CSS, NO_WRAP_STYLE_ID, addNoWrapStyle } = await import("../../js/lib/nodetext.js");
  const added = [];
  const doc = {
    head: { append: (el) => added.push(el) },
    getElementById: (id) => added.find((el) => el.id === id) ?? null,
    createElement: (tag) => ({ tag }),
  };
  assert.equal(addNoWrapStyle(doc), true);
  assert.equal(addNoWrapStyle(doc), false); // once per page
  assert.equal(added.length, 1);
  assert.equal(added[0].tag, "style");
  assert.equal(added[0].id, NO_WRAP_STYLE_ID);
  assert.match(added[0].textContent, /\[data-node-id\] textarea\[placeholder="last run"\],\n/); // 1.27-1.41
  assert.match(added[0].textContent, /\[node-type="HeadroomMemoryMonitor"\] textarea[^{]*\{ white-space: pre;/); // 1.49+
  assert.equal(added[0].textContent, NO_WRAP_CSS);
  assert.equal(addNoWrapStyle({}), false); // no document head: nothing to do
});

test("M19: the Tiled VAE Decode shows its text on the node, and a new one is made big enough for it", async () => {
  const { TEXT_NODES } = await import("../../js/lib/nodetext.js");
  const { NODE_IDS } = await import("../../js/lib/names.js");
  assert.ok(TEXT_NODES.has(NODE_IDS.tiled_vae_decode));
  const node = { comfyClass: NODE_IDS.tiled_vae_decode, size: [320, 120], widgets: [], addDOMWidget(name, type, el, options) {
    const widget = { name, type, options };
    this.widgets.push(widget);
    return widget;
  } };
  addTextWidget(node, { createElement: () => ({ style: {} }) });
  await Promise.resolve();
  assert.deepEqual(node.size, [420, 300]);
});
