// M2 (#42): the top-bar meter stays, whole, while the artist pans the canvas so that a node slides under
// the action bar. In the Vue renderer a node's widgets are buttons and inputs, which the meter before the
// fix took for the frontend's own controls: it shrank, then hid, whenever one passed under it.
// Usage: node meter_under_node.mjs BASE_URL ARTIFACTS_DIR RENDERER(classic|vue)
// Prints one JSON line; tests/e2e/test_meter_under_node.py asserts on it.
import { openComfy } from "./lib/page.mjs";

const [base, artifacts, renderer] = process.argv.slice(2);
const { page, result, finish } = await openComfy(base, { artifacts, vue: renderer === "vue" });
const CONTROLS = "button, a[href], input, select, [role=tab], [role=radio], [role=button], [role=switch]";

try {
  await page.waitForFunction(() => document.querySelector(".headroom-meter .headroom-meter-part"), null, { timeout: 60_000 });
  await page.waitForTimeout(1200); // one redraw: the meter at the level this window width gives it
  result.before = await page.evaluate(() => {
    const m = document.querySelector(".headroom-meter");
    return { visibility: m.style.visibility || "visible", level: m.dataset.level };
  });
  // A KSampler (six widgets) in the open canvas below the meter; the point of it that is to pass under the
  // meter: in the Vue renderer its first widget control, in the classic one its body (drawn on the canvas).
  const start = await page.evaluate(async (CONTROLS) => {
    const meter = document.querySelector(".headroom-meter").getBoundingClientRect();
    const canvas = window.app.canvas;
    const node = window.LiteGraph.createNode("KSampler");
    window.app.graph.add(node);
    const [gx, gy] = canvas.ds.convertCanvasToOffset([meter.right - 200, 480]);
    node.pos = [gx, gy];
    canvas.setDirty(true, true);
    await new Promise((resolve) => setTimeout(resolve, 800)); // the renderer laid it out
    const el = document.querySelector(`[data-node-id="${node.id}"]`);
    const control = el?.querySelector(CONTROLS);
    let point;
    if (control) {
      const c = control.getBoundingClientRect();
      point = [c.left + c.width / 2, c.top + c.height / 2];
    } else {
      const [x, y] = canvas.ds.convertOffsetToCanvas([node.pos[0] + node.size[0] / 2, node.pos[1] + 40]);
      point = [x, y];
    }
    // where the artist grabs the canvas: an empty spot low on the screen
    let grab = null;
    for (let y = 960; y > 600 && !grab; y -= 20) {
      for (let x = 200; x < 1400; x += 20) {
        if (document.elementFromPoint(x, y) === canvas.canvas && !window.app.graph.getNodeOnPos(...canvas.ds.convertCanvasToOffset([x, y]))) {
          grab = [x, y];
          break;
        }
      }
    }
    // the pan that brings the point under the meter's right end (the part that stays at every level)
    const delta = [meter.right - 30 - point[0], meter.top + meter.height / 2 - point[1]];
    return { id: node.id, domNode: Boolean(el), control: Boolean(control), point, grab, delta, meter: [meter.left, meter.right, meter.top, meter.bottom] };
  }, CONTROLS);
  result.start = start;
  if (!start.grab) throw new Error("no empty spot of the canvas to grab");
  // the meter watched from here on, every 100 ms (it redraws once a second)
  await page.evaluate(() => {
    window.__meterSeen = [];
    window.__meterWatch = setInterval(() => {
      const m = document.querySelector(".headroom-meter");
      window.__meterSeen.push(m ? `${m.style.visibility === "hidden" ? "hidden" : "visible"}:${m.dataset.level}` : "gone");
    }, 100);
  });
  // the artist's pan: space held, the canvas dragged up and across (the same in every navigation mode)
  const [gx, gy] = start.grab;
  await page.keyboard.down("Space");
  await page.mouse.move(gx, gy);
  await page.mouse.down();
  const steps = 20;
  for (let i = 1; i <= steps; i++) {
    await page.mouse.move(gx + (start.delta[0] * i) / steps, gy + (start.delta[1] * i) / steps);
    await page.waitForTimeout(150);
  }
  await page.mouse.up();
  await page.keyboard.up("Space");
  result.placed = await page.evaluate(({ id, CONTROLS, meter }) => {
    const over = (r) => r.left < meter[1] && r.right > meter[0] && r.top < meter[3] && r.bottom > meter[2];
    const el = document.querySelector(`[data-node-id="${id}"]`);
    const under = [...(el?.querySelectorAll(CONTROLS) ?? [])].filter((c) => over(c.getBoundingClientRect())).length;
    let box = el?.getBoundingClientRect();
    if (!el) {
      const node = window.app.graph.getNodeById(id);
      const { scale } = window.app.canvas.ds;
      const [x, y] = window.app.canvas.ds.convertOffsetToCanvas(node.pos);
      box = { left: x, right: x + node.size[0] * scale, top: y, bottom: y + node.size[1] * scale };
    }
    return { domNode: Boolean(el), controlsUnder: under, nodeUnder: over(box) };
  }, { id: start.id, CONTROLS, meter: start.meter });
  await page.waitForTimeout(3200); // three redraws with the node under the meter
  result.seen = await page.evaluate(() => {
    clearInterval(window.__meterWatch);
    return window.__meterSeen;
  });
  await page.screenshot({ path: `${artifacts}/meter-under-node-${renderer}.png` });
  await finish();
} catch (error) {
  await finish(error);
}
