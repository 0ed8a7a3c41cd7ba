// What a user sees of the nodes' own texts (#16 items 9, 13, 16 and the help pages): titles at the
// default width, hover tooltips on every input and output, the node search for "vram" and "offload",
// the help page from the selection toolbox's info button, and a bad vram_budget refused at queue time.
// argv: BASE ARTIFACTS PROMPT_JSON (an API prompt whose sampler has vram_budget "lots").
import { readFileSync } from "node:fs";
import { closeDialogs, gotoComfy, openComfy, setRenderer } from "./lib/page.mjs";

const [base, artifacts, promptFile, only = "tooltips,vuetips,search,help,validation"] = process.argv.slice(2);
const run = new Set(only.split(","));
const TYPES = [
  "HeadroomOffloadLoader",
  "HeadroomStreamingSampler",
  "HeadroomStreamModel",
  "HeadroomStreamCLIP",
  "HeadroomTiledVAEDecode",
  "HeadroomMemoryMonitor",
];
const { page, result, finish } = await openComfy(base, { artifacts });

// Add one node of `type` at a fixed place on an empty canvas at scale 1; the hover points (page
// coordinates) of its title, each widget, each input slot and each output slot.
async function placeNode(type) {
  return page.evaluate(async (type) => {
    const app = window.app;
    app.graph.clear();
    app.canvas.ds.offset = [0, 0];
    app.canvas.ds.scale = 1;
    const node = window.LiteGraph.createNode(type);
    node.pos = [200, 150];
    app.graph.add(node);
    // a new node takes its size a moment after it is added (VRAM Stats: 460x360, N8): the output slots
    // move with its width, so the points are read after that
    await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 50)));
    app.canvas.setDirty(true, true);
    const rect = app.canvas.canvas.getBoundingClientRect();
    const at = (x, y) => ({ x: rect.left + x, y: rect.top + y });
    const points = [];
    const declared = node.constructor.nodeData?.inputs ?? {};
    // the node's own inputs (extensions may add display widgets such as a status line)
    for (const w of (node.widgets ?? []).filter((w) => w.name in declared)) points.push({ kind: "input", name: w.name, ...at(node.pos[0] + 60, node.pos[1] + w.y + 10) });
    node.inputs.forEach((input, i) => {
      if (input.widget) return;
      const [x, y] = node.getConnectionPos(true, i);
      points.push({ kind: "input", name: input.name, ...at(x + 4, y) });
    });
    node.outputs.forEach((output, i) => {
      const [x, y] = node.getConnectionPos(false, i);
      points.push({ kind: "output", name: output.name, ...at(x - 4, y) });
    });
    const ctx = app.canvas.canvas.getContext("2d");
    ctx.font = node.titleFontStyle;
    const titleHeight = window.LiteGraph.NODE_TITLE_HEIGHT;
    return {
      title: node.title, width: node.size[0], textWidth: ctx.measureText(node.title).width,
      // LGraphNode.drawTitleText cuts the title to the node's width less a title height on each side
      available: node.size[0] - 2 * titleHeight, points, titlePoint: at(node.pos[0] + 40, node.pos[1] - titleHeight / 2),
    };
  }, type);
}

// A loaded machine can miss the frontend's hover delay (the pointer's moves arrive late, the canvas
// redraws late): each miss moves away and hovers again, waiting longer, before it counts as none.
async function hover(point) {
  const tip = page.locator(".node-tooltip");
  for (const wait of [1500, 3000, 6000]) {
    await page.mouse.move(point.x + 30, point.y + 30);
    await page.mouse.move(point.x, point.y, { steps: 3 });
    await tip.waitFor({ timeout: wait }).catch(() => {});
    const text = (await tip.count()) ? (await tip.innerText()).trim() : "";
    if (text) return text;
    await page.mouse.move(5, 500);
  }
  return "";
}

try {
  await page.evaluate(() => window.app.extensionManager.setting.set("LiteGraph.Node.TooltipDelay", 50));
  result.nodes = {};
  for (const type of run.has("tooltips") ? TYPES : []) {
    const placed = await placeNode(type);
    await page.waitForTimeout(200);
    const tooltips = [];
    for (const point of placed.points) tooltips.push({ kind: point.kind, name: point.name, text: await hover(point) });
    delete placed.points;
    delete placed.titlePoint;
    result.nodes[type] = { ...placed, tooltips };
    await page.mouse.move(5, 500);
    await page.screenshot({ path: `${artifacts}/node-${type}.png`, clip: { x: 150, y: 100, width: 600, height: 520 } });
  }
  result.steps.push("tooltips");

  // The same in the Vue node renderer, where each input's and output's label is a DOM element with its
  // own tooltip (1.41+; 1.27's Vue renderer was a preview without them).
  const version = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? "0");
  result.frontend = version;
  result.vueTips = null;
  const [major, minor] = version.split(".").map(Number);
  if (run.has("vuetips") && (major > 1 || (major === 1 && minor >= 41))) {
    await setRenderer(page, true);
    result.vueTips = {};
    for (const type of TYPES) {
      const names = await page.evaluate((type) => {
        const app = window.app;
        // (each node removed, not graph.clear(): on 1.41 the Vue widgets of nodes added after a clear
        // show no tooltips, slots still do; 1.58 either way)
        for (const node of [...app.graph.nodes]) app.graph.remove(node);
        app.canvas.ds.offset = [0, 0];
        app.canvas.ds.scale = 1;
        const node = window.LiteGraph.createNode(type);
        node.pos = [200, 150];
        app.graph.add(node);
        const declared = node.constructor.nodeData?.inputs ?? {};
        return [...new Set([...(node.widgets ?? []).map((w) => w.name).filter((n) => n in declared),
          ...node.inputs.map((i) => i.name), ...node.outputs.map((o) => o.label ?? o.name)])];
      }, type);
      const vueNode = page.locator("[data-node-id]").first();
      await vueNode.waitFor({ timeout: 20_000 });
      await page.waitForTimeout(300);
      const tips = {};
      for (const name of names) {
        tips[name] = [];
        const labels = vueNode.getByText(name, { exact: true });
        for (let i = 0; i < (await labels.count()); i++) {
          const box = await labels.nth(i).boundingBox();
          if (!box) continue;
          await page.mouse.move(5, 500);
          await page.mouse.move(box.x + Math.min(5, box.width / 2), box.y + box.height / 2, { steps: 3 });
          // the first shown tooltip's text, once it has one (1.41's PrimeVue tooltip, which lacks 1.58's
          // role, is on screen a moment before its text)
          const text = await page.waitForFunction(() => [...document.querySelectorAll("[role=tooltip], .p-tooltip")]
            .filter((e) => e.getClientRects().length && e.innerText.trim()).map((e) => e.innerText.trim())[0], null, { timeout: 5000 })
            .then((handle) => handle.jsonValue()).catch(() => "");
          tips[name].push(text);
          if (type === TYPES[0] && name === "model_residency") {
            await page.screenshot({ path: `${artifacts}/vue-tooltip-${type}.png`, clip: { x: 0, y: 100, width: 910, height: 520 } }); // (1.41 shows it on the left)
          }
        }
      }
      result.vueTips[type] = tips;
    }
    await page.mouse.move(5, 500);
    await setRenderer(page, false);
  }
  result.steps.push("vuetips");

  // The node search, as a double click on the empty canvas opens it.
  result.search = {};
  for (const query of run.has("search") ? ["vram", "offload"] : []) {
    await page.evaluate(() => window.app.graph.clear());
    // the search box of 1.27-1.4x, or the one of 1.49+ (a combobox over its results list)
    const input = page.locator(".comfy-vue-node-search-container input, input[role=combobox][aria-controls=results-list]").first();
    // a double click that a dialog or toast of the frontend took (1.58 opens a template at first visit)
    // is made again once they are closed
    for (let i = 0; i < 3 && !(await input.isVisible()); i++) {
      await closeDialogs(page);
      await page.mouse.dblclick(900, 600);
      await input.waitFor({ timeout: 10_000 }).catch(() => {});
    }
    await input.waitFor({ timeout: 1000 });
    await input.fill(query);
    const items = ".comfy-vue-node-search-container li, .p-autocomplete-list li, [role=option]";
    // the results are the query's once the first one names a Headroom node (bounded: the test says why)
    await page.waitForFunction((sel) => /headroom|VRAM|Offload/i.test(document.querySelector(sel)?.textContent ?? ""), items, { timeout: 15_000 }).catch(() => {});
    result.search[query] = await page.locator(items)
      .evaluateAll((items) => items.map((li) => li.innerText.replace(/\s+/g, " ").trim()).slice(0, 12));
    await page.screenshot({ path: `${artifacts}/node-search-${query}.png` });
    // closed before the next double click (1.58's box can outlive one Escape: a double click on it would
    // add the result under the pointer)
    for (let i = 0; i < 3 && (await input.isVisible()); i++) {
      await page.keyboard.press("Escape");
      await input.waitFor({ state: "hidden", timeout: 5000 }).catch(() => {});
    }
    await closeDialogs(page);
  }
  result.steps.push("search");

  // The help page: select the node, press the selection toolbox's info button.
  result.help = {};
  for (const type of run.has("help") ? TYPES : []) {
    const placed = await placeNode(type);
    await page.waitForTimeout(200);
    await page.mouse.click(placed.titlePoint.x, placed.titlePoint.y); // select it by its title bar
    const info = page.locator("[data-testid=info-button]");
    await info.waitFor({ timeout: 10_000 });
    await info.click();
    const content = page.locator(".node-help-content");
    await content.waitFor({ timeout: 10_000 });
    await page.waitForFunction(() => !document.querySelector(".node-help-content")?.innerText.includes("Loading"), null, { timeout: 10_000 }).catch(() => {});
    await page.waitForTimeout(300);
    const text = (await content.innerText()).trim();
    result.help[type] = { title: placed.title, heading: text.split("\n")[0], length: text.length, hasInputs: /\bInputs?\b/.test(text), hasExample: /Example/.test(text), hasLimits: /Limits/.test(text) };
    await page.screenshot({ path: `${artifacts}/help-${type}.png` });
    // close the node library again (1.27-1.4x show the page there); 1.49+ show it in the right-side
    // panel's Info tab, away from where the next node is placed
    if (await content.evaluate((el) => el.getBoundingClientRect().left < window.innerWidth / 2)) {
      await page.locator(".node-library-tab-button").click();
    }
    await page.waitForTimeout(200);
  }
  result.steps.push("help");

  // A prompt with a bad vram_budget: refused when queued, the error on the node, nothing executed.
  if (!run.has("validation")) throw new Error("skip");
  await gotoComfy(page, base);
  const apiPrompt = JSON.parse(readFileSync(promptFile, "utf8"));
  result.validation = await page.evaluate(async (apiPrompt) => {
    const { api } = window.comfyAPI.api;
    const started = [];
    for (const name of ["execution_start", "executing"]) api.addEventListener(name, ({ detail }) => started.push(name + ":" + JSON.stringify(detail)));
    await window.app.loadApiJson(apiPrompt, "bad-budget.json");
    await window.app.queuePrompt(0, 1);
    await new Promise((r) => setTimeout(r, 1500));
    const errors = window.app.lastNodeErrors ?? {};
    const nodes = window.app.graph.nodes.filter((n) => n.has_errors).map((n) => ({ id: String(n.id), type: n.type, title: n.title }));
    return { started, errors, nodesWithErrors: nodes };
  }, apiPrompt);
  // 1.27 shows PrimeVue's dialog (1.41 once showed a plain role=dialog "Prompt execution failed" one)
  const refusal = page.locator(".p-dialog, [role=dialog]").filter({ hasText: "vram_budget" });
  result.validation.dialog = (await refusal.allInnerTexts()).join("\n").slice(0, 2000);
  // 1.41+ show no dialog: an errors popover or toast whose "See Errors" (1.41) or "View details" (1.49+)
  // opens the Workflow Overview's errors: one row per rejected input ("<node title> - <input>" on 1.49+;
  // 1.41's tab has no error groups: "<input> - <node title>: <reason>" in the panel)
  result.validation.panel = "";
  if (!result.validation.dialog) {
    const group = page.locator("[data-testid=error-group-execution]");
    const panel = page.locator("[data-testid=properties-panel]").filter({ hasText: "vram_budget" });
    if (!(await group.count())) await page.getByRole("button", { name: /view details|see errors/i }).first().click({ timeout: 15_000 }).catch(() => {});
    await group.or(panel).first().waitFor({ timeout: 15_000 }).catch(() => {});
    const shown = (await group.count()) ? group : panel;
    result.validation.panel = (await shown.allInnerTexts()).join("\n").slice(0, 2000);
  }
  await page.screenshot({ path: `${artifacts}/bad-vram-budget.png` });
  result.steps.push("validation");
} catch (error) {
  await finish(error);
  process.exit(0);
}
await finish();
