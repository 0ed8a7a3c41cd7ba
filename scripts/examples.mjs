// The browser half of scripts/make_examples.py: load each example workflow into the real frontend and
// either measure every node's computeSize() (mode "measure") or save a thumbnail of the loaded graph
// as <name>.jpg in OUT_DIR (mode "thumbnail"), 4:3 like the template cards.
// Usage: node scripts/examples.mjs BASE_URL OUT_DIR measure|thumbnail WORKFLOW.json...
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { closeDialogs, gotoComfy, loadWorkflow, openComfy } from "../tests/e2e/lib/page.mjs";

const [base, out, mode, ...files] = process.argv.slice(2);
const { browser, page, result, finish } = await openComfy(base, { artifacts: out, viewport: { width: 1600, height: 1200 } });
try {
  result.sizes = {};
  // Thumbnails: the graph drawn at 100 % (smaller zooms drop the text), on a half-density page so the
  // picture stays small; the page is sized to the graph so no toolbar or minimap covers it.
  const shots = mode === "thumbnail" ? await browser.newPage({ deviceScaleFactor: 0.5 }) : null;
  if (shots) {
    await gotoComfy(shots, base);
    await shots.evaluate(() => window.app.extensionManager.setting.set("Comfy.Minimap.Visible", false));
  }
  for (const file of files) {
    const name = basename(file, ".json");
    const workflow = JSON.parse(readFileSync(file, "utf8"));
    if (mode === "measure") {
      await loadWorkflow(page, workflow, `${name}.json`);
      await closeDialogs(page); // the missing-models dialog: no model files on this server
      const classic = await page.evaluate(() => Object.fromEntries(
        window.app.graph.nodes.filter((n) => n.type !== "MarkdownNote").map((n) => [String(n.id), Array.from(n.computeSize())])));
      // The Vue node renderer draws the same nodes taller (its own widgets): each node gets the larger of
      // the two sizes, so an example laid out here overlaps in neither renderer.
      await page.evaluate(() => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", true));
      await loadWorkflow(page, workflow, `${name}.json`);
      await closeDialogs(page);
      await page.waitForTimeout(1500);
      const vue = await page.evaluate((title) => Object.fromEntries(
        [...document.querySelectorAll("[data-node-id]")].map((el) => {
          const r = el.getBoundingClientRect();
          const scale = window.app.canvas.ds.scale || 1;
          return [el.dataset.nodeId, [r.width / scale, r.height / scale - title]];
        })), 30);
      await page.evaluate(() => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", false));
      result.sizes[name] = Object.fromEntries(Object.entries(classic).map(([id, [w, h]]) =>
        [id, [Math.ceil(Math.max(w, vue[id]?.[0] ?? 0)), Math.ceil(Math.max(h, vue[id]?.[1] ?? 0))]]));
    } else {
      // The graph's box (title bars and the source badges above them included), centred in a 4:3 frame.
      const pad = 24, above = 30 + 20;
      let left = Math.min(...workflow.nodes.map((n) => n.pos[0])) - pad;
      let top = Math.min(...workflow.nodes.map((n) => n.pos[1])) - above - pad;
      let width = Math.max(...workflow.nodes.map((n) => n.pos[0] + n.size[0])) + pad - left;
      let height = Math.max(...workflow.nodes.map((n) => n.pos[1] + n.size[1])) + pad - top;
      if (width / height > 4 / 3) {
        top -= Math.round((width * 3) / 4 - height) / 2;
        height = Math.round((width * 3) / 4);
      } else {
        left -= Math.round((height * 4) / 3 - width) / 2;
        width = Math.round((height * 4) / 3);
      }
      const margin = 200;
      await shots.setViewportSize({ width: width + 2 * margin, height: height + 2 * margin });
      await loadWorkflow(shots, workflow, `${name}.json`);
      await closeDialogs(shots);
      await shots.evaluate(({ left, top, margin }) => {
        const canvas = window.app.canvas;
        const rect = canvas.canvas.getBoundingClientRect();
        canvas.ds.scale = 1;
        canvas.ds.offset = [margin - rect.left - left, margin - rect.top - top];
        canvas.setDirty(true, true);
      }, { left, top, margin });
      await shots.waitForTimeout(500); // a few frames for the canvas and the DOM widgets to follow
      await shots.screenshot({ path: `${out}/${name}.jpg`, type: "jpeg", quality: 80, clip: { x: margin, y: margin, width, height } });
    }
    result.steps.push(`${mode} ${name}`);
  }
  await finish();
} catch (error) {
  await finish(error);
}
