import assert from "node:assert/strict";
import { test } from "node:test";

import { fitAnswer } from "../../js/lib/fit.js";
import { answerText, applyRemedy, resolveNode } from "../../js/lib/remedies.js";

const GiB = 2 ** 30;

// A stand-in for LiteGraph's graph: nodes with widgets, and links by id, as the frontend keeps them.
function graphOf(nodes, links = {}) {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  return {
    links,
    nodes,
    getNodeById: (id) => byId.get(Number(id)) ?? null,
    add(node) { node.id = 100 + nodes.length; nodes.push(node); byId.set(node.id, node); },
    remove(node) { byId.delete(node.id); },
  };
}

function latentNode(id = 59) {
  const widgets = ["width", "height", "length", "batch_size"].map((name) => ({ name, value: name === "length" ? 81 : 640, calls: 0, callback() { this.calls += 1; } }));
  return { id, type: "EmptyHunyuanLatentVideo", widgets, pos: [0, 0] };
}

const REMEDY = {
  kind: "latent",
  text: "Make the latent 576×576×81 frames at EmptyHunyuanLatentVideo (node 59) (now 640×640×81 frames): fits, peak 3.45 GiB, about 6.2 min",
  changes: [{ node: "59", input: "width", value: 576, op: "set" }, { node: "59", input: "height", value: 576, op: "set" }],
  vram_peak: 3.45 * GiB, wall_s: 373, fits: true,
};

test("Apply sets the widgets in one undo step: one checkState after the changes, none in between", () => {
  const node = latentNode();
  const graph = graphOf([node]);
  const calls = [];
  let depth = 0;
  const tracker = {
    checkState: () => calls.push(depth ? "suppressed" : `check ${node.widgets[0].value}`),
    beforeChange: () => { depth += 1; calls.push("before"); },
    afterChange: () => { depth -= 1; calls.push("after"); },
  };
  const { applied, missing } = applyRemedy(REMEDY, { graph, tracker });
  assert.equal(applied.length, 2);
  assert.deepEqual(missing, []);
  assert.deepEqual(node.widgets.map((w) => w.value), [576, 576, 81, 640]);
  assert.equal(node.widgets[0].calls, 1); // the widget's own callback, as a user's edit runs it
  assert.deepEqual(calls, ["check 640", "before", "after", "check 576"]);
});

test("Apply finds a node inside a subgraph by its path and says what it could not find", () => {
  const inner = latentNode(74);
  const outer = { id: 128, type: "subgraph", subgraph: graphOf([inner]) };
  const graph = graphOf([outer]);
  assert.equal(resolveNode(graph, "128:74").node, inner);
  assert.equal(resolveNode(graph, "128:75"), null);
  const remedy = { ...REMEDY, changes: [{ node: "128:74", input: "width", value: 576 }, { node: "7", input: "width", value: 1 }] };
  const { applied, missing } = applyRemedy(remedy, { graph });
  assert.equal(inner.widgets[0].value, 576);
  assert.deepEqual([applied.length, missing.map((c) => c.node)], [1, ["7"]]);
});

test("Apply swaps a node for the Headroom node, its links and widgets kept", () => {
  const made = [];
  const connect = (from) => function (slot, target, targetSlot) { made.push([from(this), slot, target.id, targetSlot]); };
  const source = { id: 4, type: "CheckpointLoaderSimple", connect: connect((n) => n.id) };
  const save = { id: 9, type: "SaveImage" };
  const sampler = {
    id: 3, type: "KSampler", pos: [10, 20],
    inputs: [{ name: "model", link: 1 }],
    outputs: [{ name: "LATENT", links: [2] }],
    widgets: [{ name: "seed", value: 42 }],
  };
  const graph = graphOf([source, sampler, save], { 1: { origin_id: 4, origin_slot: 0 }, 2: { target_id: 9, target_slot: 0 } });
  const LiteGraph = {
    createNode: (type) => ({
      type, widgets: [{ name: "seed", value: 0 }, { name: "vram_budget", value: "auto" }],
      findInputSlot: (name) => (name === "model" ? 0 : -1), findOutputSlot: () => 0, connect: connect((n) => n.type),
    }),
  };
  const remedy = { changes: [{ node: "3", input: null, value: "HeadroomStreamingSampler", op: "replace" }] };
  const { applied } = applyRemedy(remedy, { graph, LiteGraph });
  assert.equal(applied.length, 1);
  assert.equal(graph.getNodeById(3), null);
  const fresh = graph.nodes.at(-1);
  assert.equal(fresh.type, "HeadroomStreamingSampler");
  assert.deepEqual(fresh.pos, [10, 20]);
  assert.equal(fresh.widgets[0].value, 42);
  assert.deepEqual(made, [[4, 0, fresh.id, 0], ["HeadroomStreamingSampler", 0, 9, 0]]);
});

test("the answer carries the remedies and Copy gives the whole answer as text", () => {
  const response = {
    card: "assumed card", remedies: [REMEDY],
    verdict: { fits: false, level: "error", node: "57", class_type: "KSamplerAdvanced", message: "KSamplerAdvanced (node 57) will run out of VRAM even with Headroom" },
    time: { card: "RTX 4060", card_source: "assumed", includes: "sampling and loading", range_s: null },
  };
  const answer = fitAnswer(response, "check", null);
  assert.equal(answer.remedies.length, 1);
  const text = answerText(answer);
  assert.match(text, /^Headroom: KSamplerAdvanced \(node 57\) will run out of VRAM, even with Headroom/);
  assert.match(text, /To make it fit:\n {2}1\. Make the latent 576×576×81 frames/);
  assert.match(text, /Time for RTX 4060 \(sampling and loading\)/);
  assert.doesNotMatch(text, /out of date/);
  assert.match(answerText({ ...answer, stale: true }), /out of date/);
  assert.deepEqual(fitAnswer({ verdict: { fits: false, level: "warn" } }, "check", null).remedies, []);
});
