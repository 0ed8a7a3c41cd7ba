// What the nodes say after a run, in one renderer: VRAM Stats names the nodes by their titles on the canvas
// (N15, #29: it listed them by class, "KSampler"), the timeline names each file one way in its placements and
// its residency events (N15), and each Tiled VAE Decode says what it did (M19, #42): in one pass or in
// tiles, per level of the decoder, and what sized the tiles.
// Usage: node node_reports.mjs BASE_URL ARTIFACTS_DIR PROMPT.json RENDERER(classic|vue) TITLES.json
// Prints one JSON line; tests/e2e/test_node_reports.py asserts on it.
import { readFileSync } from "node:fs";
import { loadApiPrompt, openComfy } from "./lib/page.mjs";

const LONG = 180_000;
const [base, artifacts, promptPath, renderer, titlesPath] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const titles = JSON.parse(readFileSync(titlesPath, "utf8")); // node id -> the title the artist gives it
const { page, result, finish } = await openComfy(base, { artifacts, vue: renderer === "vue" });
const command = (id) => page.evaluate((id) => window.app.extensionManager.command.execute(id), id);
const textOf = (id) => page.evaluate((id) => window.app.graph.getNodeById(id)?.widgets?.find((w) => w.name === "last run")?.value ?? null, Number(id));

// A node's box on screen: its DOM element in the Vue renderer, else its place on the canvas.
async function nodeBox(id) {
  return page.evaluate((id) => {
    const el = document.querySelector(`[data-node-id="${id}"]`);
    if (el) {
      const r = el.getBoundingClientRect();
      return { x: r.left, y: r.top, width: r.width, height: r.height };
    }
    const c = window.app.canvas;
    const n = window.app.graph.getNodeById(id);
    const r = c.canvas.getBoundingClientRect();
    const title = window.LiteGraph?.NODE_TITLE_HEIGHT ?? 30;
    return { x: r.left + (n.pos[0] + c.ds.offset[0]) * c.ds.scale, y: r.top + (n.pos[1] - title + c.ds.offset[1]) * c.ds.scale, width: n.size[0] * c.ds.scale, height: (n.size[1] + title) * c.ds.scale };
  }, Number(id));
}

// One node on screen, centred and at 100 %, as a small picture; whether its text shows in a text box on screen.
async function shootNode(id, name) {
  await page.evaluate((id) => {
    const c = window.app.canvas;
    c.ds.scale = 1;
    c.centerOnNode(window.app.graph.getNodeById(id));
    c.setDirty(true, true);
  }, Number(id));
  await page.waitForTimeout(500); // a frame or two: the DOM widgets follow the canvas (their place is read, not timed)
  const box = await nodeBox(id);
  const clip = { x: Math.max(0, box.x - 8), y: Math.max(0, box.y - 8), width: Math.min(box.width + 16, 1000), height: Math.min(box.height + 16, 700) };
  await page.screenshot({ path: `${artifacts}/${name}-${renderer}.png`, clip });
  const text = await textOf(id);
  // its text box on the node: shown, and whether its long lines run on sideways (M18) or wrap
  return page.evaluate(({ text, box }) => {
    const t = [...document.querySelectorAll("textarea")].find((t) => {
      const r = t.getBoundingClientRect();
      return t.value === text && r.width > 20 && r.height > 20 && r.left >= box.x - 2 && r.right <= box.x + box.width + 2 && r.top >= box.y - 2 && r.bottom <= box.y + box.height + 2;
    });
    return t ? { shown: true, sideways: t.scrollWidth > t.clientWidth + 1, whiteSpace: getComputedStyle(t).whiteSpace } : { shown: false };
  }, { text, box });
}

try {
  await loadApiPrompt(page, prompt, "node-reports.json");
  // the artist's titles, given on the canvas (the prompt the page sends carries them in _meta)
  await page.evaluate((titles) => {
    for (const [id, title] of Object.entries(titles)) window.app.graph.getNodeById(Number(id)).title = title;
    window.app.canvas.setDirty(true, true);
  }, titles);
  await command("Workspace.ToggleBottomPanelTab.headroom-timeline");
  await page.locator(".headroom-timeline").waitFor({ timeout: LONG });
  result.run = await page.evaluate((names) => new Promise((resolve) => {
    const { api } = window.comfyAPI.api;
    for (const name of names) api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
    window.app.queuePrompt(0, 1);
  }), ["execution_success", "execution_error", "execution_interrupted"]);
  result.steps.push("ran");
  // the texts on the nodes, and the timeline's rows, once they came
  const ids = Object.keys(prompt).filter((id) => ["HeadroomMemoryMonitor", "HeadroomTiledVAEDecode"].includes(prompt[id].class_type));
  await page.waitForFunction((ids) => ids.every((id) => {
    const v = window.app.graph.getNodeById(Number(id))?.widgets?.find((w) => w.name === "last run")?.value;
    return typeof v === "string" && v.length > 0;
  }), ids, { timeout: 20_000, polling: 100 }).catch(() => result.steps.push("not every node text came"));
  result.texts = {};
  for (const id of ids) result.texts[id] = await textOf(id);
  const rowCount = Object.values(prompt).length;
  await page.waitForFunction((n) => document.querySelectorAll(".headroom-timeline tr.headroom-row").length >= n, rowCount, { timeout: 20_000, polling: 100 })
    .catch(() => result.steps.push("not every timeline row came"));
  result.rows = await page.evaluate(() => [...document.querySelectorAll(".headroom-timeline tr.headroom-row")].map((tr) => {
    const cells = [...tr.querySelectorAll("td")].map((td) => td.textContent);
    return { node: tr.dataset.node, name: cells[0], placements: cells[7], events: cells[8] };
  }));
  await page.screenshot({ path: `${artifacts}/node-reports-timeline-${renderer}.png`, clip: { x: 0, y: 500, width: 1600, height: 500 } });
  // each text in a text box on its node, on screen (the timeline closed: it covers the canvas's lower part)
  await command("Workspace.ToggleBottomPanelTab.headroom-timeline");
  await page.locator(".headroom-timeline").waitFor({ state: "detached", timeout: 10_000 }).catch(() => result.steps.push("the timeline stayed open"));
  result.onScreen = {};
  for (const id of ids) result.onScreen[id] = await shootNode(id, `node-text-${prompt[id].class_type === "HeadroomMemoryMonitor" ? "vram-stats" : "tiled-vae"}-${id}`);
  await finish();
} catch (error) {
  await finish(error);
}
