// M2 (#42): in the Vue renderer the top-bar meter stays when a node slides under the action bar (its
// widgets are buttons and inputs, which the meter took for the frontend's own controls and stepped aside).
// Usage: node meter_under_node.mjs BASE_URL ARTIFACTS_DIR RENDERER(classic|vue)
// Prints one JSON line; tests/e2e/test_meter_under_node.py asserts on it.
import { openComfy } from "./lib/page.mjs";

const [base, artifacts, renderer] = process.argv.slice(2);
const { page, result, finish } = await openComfy(base, { artifacts, vue: renderer === "vue" });

try {
  await page.waitForFunction(() => document.querySelector(".headroom-meter .headroom-meter-part"), null, { timeout: 60_000 });
  result.before = await page.evaluate(() => document.querySelector(".headroom-meter").style.visibility || "visible");
  // a KSampler (six widgets) put where the meter is on screen
  result.placed = await page.evaluate(async () => {
    const meter = document.querySelector(".headroom-meter").getBoundingClientRect();
    const canvas = window.app.canvas;
    const area = canvas.canvas.getBoundingClientRect();
    const { scale, offset } = canvas.ds;
    const node = window.LiteGraph.createNode("KSampler");
    window.app.graph.add(node);
    node.pos = [(meter.left - area.left) / scale - offset[0] - 40, (meter.top - area.top) / scale - offset[1] - 20];
    canvas.setDirty(true, true);
    await new Promise((resolve) => setTimeout(resolve, 800)); // the renderer laid it out
    const el = document.querySelector(`[data-node-id="${node.id}"]`);
    // then moved so that one of its widget controls sits right under the meter (the case of M2)
    const CONTROLS = "button, a[href], input, select, [role=tab], [role=radio], [role=button], [role=switch]";
    const control = el?.querySelector(CONTROLS);
    if (control) {
      const c = control.getBoundingClientRect();
      node.pos = [node.pos[0] + (meter.left + 8 - c.left) / scale, node.pos[1] + (meter.top + meter.height / 2 - (c.top + c.height / 2)) / scale];
      canvas.setDirty(true, true);
      await new Promise((resolve) => setTimeout(resolve, 800));
    }
    const over = (r) => r.left < meter.right && r.right > meter.left && r.top < meter.bottom && r.bottom > meter.top;
    const after = control?.getBoundingClientRect();
    return { id: node.id, domNode: Boolean(el), under: Boolean(after && over(after)) };
  });
  // watch the meter over three of its redraws (one a second)
  result.hiddenSeen = await page.evaluate(() => new Promise((resolve) => {
    let hidden = 0;
    const timer = setInterval(() => {
      if (document.querySelector(".headroom-meter")?.style.visibility === "hidden") hidden += 1;
    }, 100);
    setTimeout(() => { clearInterval(timer); resolve(hidden); }, 3200);
  }));
  await page.screenshot({ path: `${artifacts}/meter-under-node-${renderer}.png` });
  await finish();
} catch (error) {
  await finish(error);
}
