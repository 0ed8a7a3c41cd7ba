// #16 items 5, 6, 7, 14, 15 and the top-bar meter: the pure parts (names, toast, chart axes, free toast,
// timeline header, meter text).
import assert from "node:assert/strict";
import { test } from "node:test";

import { agoLabel, byteTicks, chartLayout, CHART_SERIES, timeTicks } from "../../js/lib/chart.js";
import { freeToast, freeVram } from "../../js/lib/free.js";
import { meterColor, meterParts } from "../../js/lib/meter.js";
import { findNode, locateNode, nameOf, nodeName, renameNodes } from "../../js/lib/nodes.js";
import { preflightToast } from "../../js/lib/preflight.js";
import { planBudget } from "../../js/lib/timeline.js";

const MiB = 2 ** 20;
const GiB = 2 ** 30;

class FakeNode {
  static title = "Empty Latent Image SD3";
  constructor(id, type, title) {
    Object.assign(this, { id, type, comfyClass: type, title: title ?? FakeNode.title, pos: [0, 0], size: [10, 10] });
  }
}

function fakeApp(nodes) {
  const calls = [];
  return {
    calls,
    graph: { getNodeById: (id) => nodes.find((n) => String(n.id) === String(id)) ?? null },
    canvas: {
      selectNode: (node) => calls.push(["select", node.id]),
      centerOnNode: (node) => calls.push(["center", node.id]),
      setDirty: () => {},
    },
  };
}

test("nodes are named by their title, with the class when renamed, and by class and id when absent", () => {
  assert.equal(nodeName(new FakeNode(27, "EmptySD3LatentImage")).text, "Empty Latent Image SD3");
  assert.equal(nodeName(new FakeNode(27, "EmptySD3LatentImage", "Poster")).text, "Poster (EmptySD3LatentImage)");
  assert.deepEqual(nodeName(null, { id: "3", classType: "KSampler" }), {
    text: "KSampler #3", tooltip: "node 3 is not in the open workflow", found: false,
  });
  const app = fakeApp([new FakeNode(27, "EmptySD3LatentImage")]);
  assert.equal(findNode(app.graph, "27", "KSampler"), null); // same id, another workflow's node
  assert.equal(nameOf(app, "27", "EmptySD3LatentImage").found, true);
});

test("locating a node selects it and centres the canvas on it", () => {
  const app = fakeApp([new FakeNode(5, "KSampler", "KSampler")]);
  assert.equal(locateNode(app, "5", "KSampler"), true);
  assert.deepEqual(app.calls, [["select", 5], ["center", 5]]);
  assert.equal(locateNode(app, "6", "KSampler"), false);
});

test("M10: locating a node from far out zooms in to a readable size, a readable zoom is kept", () => {
  const app = fakeApp([new FakeNode(5, "KSampler", "KSampler")]);
  app.canvas.ds = { scale: 0.37, offset: [0, 0] };
  locateNode(app, "5", "KSampler");
  assert.equal(app.canvas.ds.scale, 1);
  app.canvas.ds.scale = 1.5;
  locateNode(app, "5", "KSampler");
  assert.equal(app.canvas.ds.scale, 1.5);
});

test("server messages are rewritten with the canvas's names, unknown nodes kept", () => {
  const text = 'KSampler (node 3) ... set by "Poster" (EmptySD3LatentImage, node 27); VAEDecode (node 8)';
  const out = renameNodes(text, (id) => ({ 3: "Main", 27: "Poster latent" })[id] ?? null);
  assert.equal(out, "Main ... set by Poster latent; VAEDecode (node 8)");
});

test("the preflight toast names the node by title and carries both nodes to find", () => {
  const app = fakeApp([new FakeNode(3, "KSampler", "Main sampler"), new FakeNode(27, "EmptySD3LatentImage", "Poster")]);
  const event = {
    fits: false, level: "error", node: "3", class_type: "KSampler",
    message: 'KSampler (node 3) will run out of VRAM even with Headroom: ... set by EmptySD3LatentImage (node 27).',
    driver: { node: "27", class_type: "EmptySD3LatentImage", width: 2048, height: 2048 },
  };
  const toast = preflightToast(event, app);
  assert.equal(toast.severity, "error");
  assert.equal(toast.summary, "Headroom: Main sampler (KSampler) will run out of VRAM, even with Headroom");
  assert.equal(toast.detail, "Main sampler (KSampler) (#3) will run out of VRAM even with Headroom: ... set by Poster (EmptySD3LatentImage) (#27).");
  assert.deepEqual(toast.nodes.map((n) => [n.id, n.text]), [["3", "Main sampler (KSampler)"], ["27", "Poster (EmptySD3LatentImage)"]]);
  // without the workflow open, the server's own names stay
  const bare = preflightToast(event, null);
  assert.equal(bare.summary, "Headroom: KSampler (node 3) will run out of VRAM, even with Headroom");
  assert.equal(bare.detail, event.message);
});

test("memory ticks are round binary sizes and the time axis counts back from now", () => {
  assert.deepEqual(byteTicks(7.3 * GiB), { yMax: 8 * GiB, ticks: [2 * GiB, 4 * GiB, 6 * GiB, 8 * GiB] });
  assert.deepEqual(byteTicks(9.3e9).ticks.map((t) => t / GiB), [4, 8, 12]); // 8.66 GiB: never "9.3 GiB"
  assert.deepEqual(byteTicks(300 * MiB).ticks.map((t) => t / MiB), [128, 256, 384]);
  assert.deepEqual(timeTicks(30), [0, 5, 10, 15, 20, 25, 30]);
  assert.deepEqual(timeTicks(180), [0, 30, 60, 90, 120, 150, 180]);
  assert.deepEqual([0, 30, 120].map(agoLabel), ["now", "-30 s", "-2 min"]);
  const samples = [0, 10, 20, 30].map((t) => ({ t, rss: 1.2 * GiB, ram_used: 5 * GiB }));
  const layout = chartLayout(samples, { width: 200, height: 100, window: 30 });
  assert.deepEqual(layout.yTicks.map((t) => t.label), ["2 GiB", "4 GiB", "6 GiB"]);
  assert.equal(layout.xTicks[0].x, 200); // now, at the right edge
  const colors = layout.series.map((s) => s.color);
  assert.equal(new Set(colors).size, colors.length);
  assert.equal(new Set(CHART_SERIES.map((s) => s.color)).size, CHART_SERIES.length);
});

test("the free toast says RAM, not VRAM, on a server without a GPU", async () => {
  assert.equal(freeToast(true, false).summary, "Headroom: models unloaded; RAM freed — no GPU on this server");
  assert.equal(freeToast(true, true).summary, "Headroom: models unloaded; VRAM freed");
  assert.equal(freeToast(false, true).severity, "error");
  const shown = [];
  const api = {
    fetchApi: async (url) => ({ ok: true, json: async () => ({ sources: { cuda: false } }), url }),
  };
  const toast = await freeVram({ api, app: { extensionManager: { toast: { add: (t) => shown.push(t) } } } });
  assert.deepEqual(shown, [toast]);
  assert.match(toast.summary, /no GPU on this server/);
});

test("the timeline header gives the card and the budget from the report", () => {
  const report = {
    plan: { fits: true, budget_vram: 7.5 * GiB, min_vram: 2.91 * GiB },
    preflight: { card: "NVIDIA GeForce RTX 4060", card_vram: 8 * GiB, reserve: 0.5 * GiB, headroom_peak: 5.49 * GiB },
  };
  assert.deepEqual(planBudget(report), {
    card: "NVIDIA GeForce RTX 4060 · 8.00 GiB",
    budget: "budget 7.50 GiB usable (0.50 GiB reserved) · plan peak 5.49 GiB · needs at least 2.91 GiB",
  });
  assert.deepEqual(planBudget({ plan: { fits: true, budget_vram: GiB } }), { card: "", budget: "budget 1.00 GiB usable" });
  assert.deepEqual(planBudget(null), { card: "", budget: "" });
});

test("the top-bar meter shows VRAM with a GPU, RSS without, and RAM", () => {
  const gpu = meterParts({ device_used: 3 * GiB, device_total: 8 * GiB, ram_used: 12 * GiB, ram_total: 32 * GiB });
  assert.deepEqual(gpu.map((p) => p.text), ["VRAM 3.0 GiB / 8.0 GiB", "RAM 12.0 GiB / 32.0 GiB"]);
  const cpu = meterParts({ rss: 1.5 * GiB, ram_used: 12 * GiB, ram_total: 16 * GiB });
  assert.deepEqual(cpu.map((p) => [p.key, p.frac]), [["rss", null], ["ram", 0.75]]);
  assert.deepEqual(meterParts(null), []);
  assert.deepEqual([0.5, 0.8, 0.95].map(meterColor), ["#43a047", "#fb8c00", "#e53935"]);
});
