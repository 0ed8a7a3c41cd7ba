// Shared steps of the browser scripts: launch Debian's Chromium through playwright-core, open ComfyUI
// with Headroom loaded as a first-time user would, and print one JSON line for the pytest side.
// A script: `const { page, result, finish } = await openComfy(base)`, do its steps inside try, record
// what the user sees in `result`, then `await finish(error?)`.
import { chromium } from "playwright-core";

export const LONG = 180_000;
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

// `vue`: the renderer the script starts in. The setting lives in the server's user settings, so a
// script that left the Vue renderer on would otherwise hand it to every later script of the session
// (the classic canvas's hover tooltips then never show: the pointer is over Vue's DOM nodes).
export async function openComfy(base, { viewport = { width: 1600, height: 1000 }, artifacts = ".", vue = false } = {}) {
  const result = { errors: [], consoleHeadroom: [], steps: [] };
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: FLAGS, headless: true });
  const page = await browser.newPage({ viewport });
  page.on("console", (msg) => {
    const text = msg.text();
    if (/headroom/i.test(text)) result.consoleHeadroom.push(`${msg.type()}: ${text}`);
    // (1.49+ look each node up in the Comfy registry, api.comfy.org, which this offline page may not
    // reach: the URL names our node, but the error is the frontend's)
    if (msg.type() === "error" && /headroom/i.test(text) && !/api\.comfy\.org/.test(text)) result.errors.push(text);
  });
  page.on("pageerror", (error) => {
    if (/headroom/i.test(String(error.stack || error))) result.errors.push(String(error));
  });
  await gotoComfy(page, base);
  await setRenderer(page, vue);
  result.steps.push("loaded");
  async function finish(error) {
    if (error) {
      result.failure = String(error.stack || error);
      await page.screenshot({ path: `${artifacts}/failure-${Date.now()}.png` }).catch(() => {});
    }
    await browser.close();
    console.log(JSON.stringify(result));
  }
  return { browser, page, result, finish };
}

// Load (or reload) the page and wait for the app and Headroom, closing the first-visit template dialog.
export async function gotoComfy(page, base) {
  await page.goto(base, { timeout: LONG });
  await page.waitForFunction(() => window.app?.graph && window.headroom && window.app.extensionManager, null, { timeout: LONG });
  await closeDialogs(page);
}

// Switch the node renderer (Vue when `vue`) and wait until the frontend has it.
export async function setRenderer(page, vue) {
  await page.evaluate((on) => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", on), vue);
  await page.waitForFunction((on) => window.app.extensionManager.setting.get("Comfy.VueNodes.Enabled") === on, vue, { timeout: 10_000 });
}

// PrimeVue's dialogs (frontend 1.27-1.5x) and the reka-ui dialogs of later ones (the templates browser).
const DIALOG = ".p-dialog-mask, [role=dialog][data-state=open]";

export async function closeDialogs(page) {
  for (let i = 0; i < 5 && (await page.locator(DIALOG).count()); i++) {
    await page.keyboard.press("Escape");
    await page.locator(DIALOG).first().waitFor({ state: "detached", timeout: 5000 }).catch(() => {});
  }
}

// Load an API-format prompt into the canvas as a new tab, and wait for its tab as a user sees it before
// pressing Run: 1.41 opens the tab a moment after the graph (meanwhile the old tab is the active one, so
// a run queued at once is the old tab's to the page).
export async function loadApiPrompt(page, apiPrompt, filename = "headroom-e2e.json") {
  await page.evaluate(async ({ apiPrompt, filename }) => window.app.loadApiJson(apiPrompt, filename), { apiPrompt, filename });
  await page.waitForFunction((stem) => (window.app.extensionManager.workflow?.activeWorkflow?.path ?? "").includes(stem),
    filename.replace(/\.json$/, ""), { timeout: 10_000 }).catch(() => {}); // (frontends that name it otherwise)
}

// Load an API-format prompt (loadApiPrompt) and queue it as the Run button does; resolves with the
// prompt id once the run has ended (success, error or interrupt).
export async function runApiPrompt(page, apiPrompt, filename = "headroom-e2e.json") {
  await loadApiPrompt(page, apiPrompt, filename);
  return page.evaluate(async () => {
    const { api } = window.comfyAPI.api;
    const ended = new Promise((resolve) => {
      for (const name of ["execution_success", "execution_error", "execution_interrupted"]) {
        api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
      }
    });
    await window.app.queuePrompt(0, 1);
    return ended;
  });
}

// Wait until the timeline shows the final report of prompt ``promptId`` (not the tab's last run, shown as
// soon as its workflow is loaded, nor the live one the run updates), with at least ``minNodes`` rows.
export function waitForFinalReport(page, promptId, { minNodes = 0, timeout = 180_000 } = {}) {
  return page.waitForFunction(({ id, minNodes }) => {
    const { report, running } = window.headroom;
    return !running && report?.prompt_id === id && !report.live && (report.nodes?.length ?? 0) >= minNodes
      && report.nodes.every((r) => r.status !== "running" && r.status !== "pending");
  }, { id: promptId, minNodes }, { timeout });
}

// Load a UI-format workflow (what a user opens from a file or a template).
export async function loadWorkflow(page, workflow, filename = "workflow.json") {
  await page.evaluate(async ({ workflow, filename }) => {
    await window.app.loadGraphData(workflow, true, true, filename);
  }, { workflow, filename });
}

// Each node's title and its bounding box on screen (canvas coordinates mapped to the page), for
// overlap checks with the classic renderer.
export async function nodeBoxes(page) {
  return page.evaluate(() => {
    const canvas = window.app.canvas;
    const rect = canvas.canvas.getBoundingClientRect();
    const { scale, offset } = canvas.ds;
    return window.app.graph.nodes.map((n) => {
      const [x, y] = n.pos;
      const [w, h] = n.size;
      const title = window.LiteGraph?.NODE_TITLE_HEIGHT ?? 30;
      return {
        id: n.id, type: n.type, title: n.title,
        x: rect.left + (x + offset[0]) * scale, y: rect.top + (y - title + offset[1]) * scale,
        w: w * scale, h: (h + title) * scale,
      };
    });
  });
}

// POST an API prompt to /prompt as this page's client, without loading it into the canvas: the host may
// refuse it (no model files), but the preflight warning reaches this client first.
export async function postPrompt(page, apiPrompt) {
  await page.evaluate(async (apiPrompt) => {
    await window.comfyAPI.api.api.fetchApi("/prompt", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: apiPrompt, client_id: window.comfyAPI.api.api.clientId }),
    });
  }, apiPrompt);
}

/** "Will it fit?" on the open workflow, on the server's card, with Headroom's sidebar closed, so that its toast carries the whole
 * answer (with the sidebar open the answer is there and the toast says the verdict only: M16). */
export async function checkFitInToast(page) {
  await page.evaluate(async () => {
    const command = (id) => window.app.extensionManager.command.execute(id);
    // on the server's card: the card setting is the server's, and an earlier script may have left one chosen
    await window.app.extensionManager.setting.set("Headroom.Card", "");
    if (document.querySelector(".headroom-monitor")?.isConnected) await command("Workspace.ToggleSidebarTab.headroom-monitor");
    await command("Headroom.CheckFit");
  });
}
