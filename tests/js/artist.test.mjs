import assert from "node:assert/strict";
import { test } from "node:test";

import { FitStore, fitAnswer } from "../../js/lib/fit.js";
import { compactText, meterParts } from "../../js/lib/meter.js";
import { clearOfPanel } from "../../js/lib/nodes.js";
import { preflightToast, repeatsShown, shownToast } from "../../js/lib/preflight.js";
import { rowState } from "../../js/lib/timeline.js";

const GiB = 2 ** 30;

test("a running node is running, not an error (N1)", () => {
  assert.equal(rowState({ status: "running" }), "running");
  assert.equal(rowState({ status: "error" }), "error");
});

test("will it fit: yes with the card, the peak, the usable VRAM and the time", () => {
  const a = fitAnswer({ card: "NVIDIA GeForce RTX 4060", verdict: { fits: true, level: "ok", budget_vram: 7.5 * GiB }, vram_peak: 7.4 * GiB, wall_s: 35 });
  assert.equal(a.fits, true);
  assert.equal(a.text, "Fits on NVIDIA GeForce RTX 4060: peak 7.40 GiB of 7.50 GiB usable, about 35 s");
  assert.equal(a.severity, "success");
});

test("will it fit: no names the node and carries the nodes to find", () => {
  const a = fitAnswer({ card: "c", verdict: { fits: false, level: "error", node: "6", class_type: "CLIPTextEncode", message: "m" } }, "check", null);
  assert.equal(a.fits, false);
  assert.match(a.text, /CLIPTextEncode \(node 6\) will run out of VRAM, even with Headroom/);
  assert.deepEqual(a.nodes.map((n) => n.id), ["6"]);
});

test("will it fit: a server that cannot check says why", () => {
  const a = fitAnswer({ card: "", verdict: { fits: null, level: "skipped", message: "no CUDA device" } });
  assert.equal(a.fits, null);
  assert.match(a.text, /Could not check: no CUDA device/);
});

test("each workflow keeps its own verdict until the next check", () => {
  let open = "A";
  const store = new FitStore(() => open);
  store.set({ fits: true, text: "a" });
  open = "B";
  assert.equal(store.get(), null);
  store.set({ fits: false, text: "b" });
  open = "A";
  assert.equal(store.get().text, "a");
  store.set({ fits: false, text: "a2" });
  assert.equal(store.get().text, "a2");
});

test("the meter shows GPU load and temperature where NVML has them, and a compact text", () => {
  const parts = meterParts({ device_used: 7.4 * GiB, device_total: 8 * GiB, ram_used: GiB, ram_total: 16 * GiB, gpu_util: 63, gpu_temp: 71 });
  assert.deepEqual(parts.map((p) => p.key), ["vram", "ram", "gpu"]);
  assert.equal(parts[2].text, "GPU 63% 71°C");
  assert.equal(parts[2].frac, 0.63);
  assert.equal(compactText(parts[0]), "VRAM 7.4 GiB");
  assert.deepEqual(meterParts({ rss: GiB }).map((p) => p.key), ["rss"]); // a CPU: no GPU part
});

test("Show moves the node into the part of the canvas the bottom panel leaves (N14)", () => {
  const rect = (top, bottom) => ({ getBoundingClientRect: () => ({ top, bottom }) });
  const canvas = { canvas: rect(0, 1000), ds: { offset: [0, 0], scale: 2 } };
  const panel = { isConnected: true, ...rect(600, 1000) };
  assert.equal(clearOfPanel(canvas, panel), 200); // centre 500 -> 300, the middle of 0..600
  assert.equal(canvas.ds.offset[1], -100); // in canvas units
  assert.equal(clearOfPanel(canvas, { isConnected: false }), 0);
});

test("a new node grows to show its text; a loaded one keeps its saved size (N8)", async () => {
  const { newNodeSize } = await import("../../js/lib/nodetext.js");
  const fresh = { comfyClass: "HeadroomMemoryMonitor", size: [140, 66] };
  newNodeSize(fresh);
  await Promise.resolve();
  assert.deepEqual(fresh.size, [460, 360]);
  const loaded = { comfyClass: "HeadroomMemoryMonitor", size: [140, 66] };
  newNodeSize(loaded);
  loaded.onConfigure({});
  loaded.size = [300, 200]; // the saved size
  await Promise.resolve();
  assert.deepEqual(loaded.size, [300, 200]);
});

test("Run right after a 'will it fit?' that said no shows no second toast with the same text", () => {
  const verdict = { fits: false, level: "warn", node: "3", class_type: "KSampler", message: "needs 9 GiB" };
  const fit = fitAnswer({ verdict }, "check", { graph: null });
  const shown = shownToast(fit, "wf-1", 1000);
  const again = preflightToast(verdict, { graph: null });
  assert.equal(repeatsShown(shown, again, "wf-1", 5000), true);
  assert.equal(repeatsShown(shown, again, "wf-2", 5000), false); // another workflow's run
  assert.equal(repeatsShown(shown, again, "wf-1", 1000 + 12000), false); // the first toast is gone
  const other = preflightToast({ ...verdict, message: "needs 10 GiB" }, { graph: null });
  assert.equal(repeatsShown(shown, other, "wf-1", 5000), false); // new figures: said again
  assert.equal(repeatsShown(null, again, "wf-1", 5000), false);
});
