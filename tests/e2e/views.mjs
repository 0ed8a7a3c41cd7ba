// What the panels and toasts say (#16 items 5, 6, 7, 14, 15 and the top-bar meter), as a user sees them.
// Usage: node views.mjs BASE_URL ARTIFACTS_DIR PROMPT.json PREFLIGHT_PROMPT.json
// Records DOM text, toasts and where a node is on the canvas after its name is clicked; every step
// records what it found rather than failing, so a run against the old pack (HEADROOM_E2E_PACK) reports
// what is missing. tests/e2e/test_views.py asserts on the JSON line.
import { readFileSync } from "node:fs";
import { LONG, checkFitInToast, loadApiPrompt, openComfy } from "./lib/page.mjs";

const [base, artifacts, promptPath, preflightPath] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const preflightPrompt = JSON.parse(readFileSync(preflightPath, "utf8"));
const { page, result, finish } = await openComfy(base, { artifacts });
result.pageErrors = [];
page.on("pageerror", (error) => result.pageErrors.push(String(error.stack || error).slice(0, 600)));

// Pan the canvas far away and clear the selection, click `locator`, then say whether node `id` ended up
// selected and with its centre inside the visible canvas.
async function clickFinds(locator, id) {
  await page.evaluate(() => {
    window.app.canvas.deselectAll?.();
    window.app.canvas.ds.offset = [20000, 20000];
    window.app.canvas.setDirty(true, true);
  });
  const before = await onScreen(id);
  await locator.click({ timeout: 10_000 });
  await page.waitForTimeout(200); // one frame for the canvas to redraw (the state is read, not timed)
  return { before, after: await onScreen(id) };
}

async function onScreen(id) {
  return page.evaluate((id) => {
    const canvas = window.app.canvas;
    const node = window.app.graph.getNodeById(id) ?? window.app.graph.getNodeById(Number(id));
    if (!node) return { exists: false };
    const rect = canvas.canvas.getBoundingClientRect();
    const { scale, offset } = canvas.ds;
    const cx = rect.left + (node.pos[0] + node.size[0] / 2 + offset[0]) * scale;
    const cy = rect.top + (node.pos[1] + node.size[1] / 2 + offset[1]) * scale;
    const selected = Object.keys(canvas.selected_nodes ?? {}).map(String);
    return {
      exists: true,
      selected: selected.includes(String(node.id)),
      visible: cx >= rect.left && cx <= rect.right && cy >= rect.top && cy <= rect.bottom,
    };
  }, id);
}

// A toast, whatever renders it: PrimeVue's (frontend 1.27-1.5x) or 1.58's own toaster.
const TOAST = ".p-toast-message, [data-testid='toast']";
const TOAST_CLOSE = ".p-toast-message .p-toast-close-button, [data-testid='toast'] button[aria-label]";

async function toastTexts() {
  return page.locator(TOAST).allInnerTexts();
}

async function closeToasts() {
  for (const close of await page.locator(TOAST_CLOSE).all()) await close.click({ timeout: 2000 }).catch(() => {});
  await page.locator(TOAST).first().waitFor({ state: "detached", timeout: 5000 }).catch(() => {});
}

try {
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleSidebarTab.headroom-monitor")); // the tab's button has no stable class across frontends (1.58)
  await page.waitForSelector(".headroom-monitor", { timeout: 60_000 });
  result.steps.push("sidebar");

  // Item 14: the free button in the sidebar, and what its toast says on this CPU-only server.
  const button = page.locator(".headroom-monitor button", { hasText: /unload|free/i });
  result.freeButton = { count: await button.count(), text: (await button.allInnerTexts()).join(" | ") };
  if (result.freeButton.count) await button.first().click();
  else await page.evaluate(() => window.app.extensionManager.command.execute("Headroom.FreeVRAM"));
  await page.locator(TOAST, { hasText: /unload|freed|free/i }).first().waitFor({ timeout: 30_000 });
  result.freeToast = (await toastTexts()).join(" | ");
  await closeToasts();
  result.steps.push("free");

  // A run of a workflow whose nodes have titles of their own.
  await loadApiPrompt(page, prompt, "headroom-views.json");
  const ranId = await page.evaluate(async () => {
    const { api } = window.comfyAPI.api;
    const ended = new Promise((resolve) => api.addEventListener("execution_success", ({ detail }) => resolve(detail?.prompt_id), { once: true }));
    window.headroom.report = null;
    await window.app.queuePrompt(0, 1);
    return ended;
  });
  if (!ranId) throw new Error("the run's end came without its prompt id");
  // this run's report (not one shown before it, when the workflow was loaded)
  await page.waitForFunction((id) => window.headroom.report?.prompt_id === id && (window.headroom.report?.nodes?.length ?? 0) >= 3, ranId, { timeout: LONG });
  await page.waitForFunction(() => document.querySelectorAll(".headroom-node-row").length >= 3, null, { timeout: 60_000 });
  await page.waitForFunction(() => Number(document.querySelector(".headroom-monitor")?.dataset.samples) >= 8, null, { timeout: 60_000 });
  result.steps.push("ran");

  // Item 5 (sidebar): rows name nodes by title; clicking one finds the node.
  result.sidebarRows = await page.locator(".headroom-node-row").allInnerTexts();
  const sidebarLink = page.locator(".headroom-node-row a, .headroom-node-row button").filter({ hasText: "Watch memory" });
  result.sidebarLinks = await sidebarLink.count();
  if (result.sidebarLinks) result.sidebarClick = await clickFinds(sidebarLink.first(), "2");

  // Item 7: the chart's axis labels and its series' colours.
  result.chart = await page.evaluate(() => {
    const svg = document.querySelector(".headroom-chart svg");
    return {
      texts: [...svg.querySelectorAll("text")].map((t) => t.textContent),
      yTicks: [...svg.querySelectorAll(".headroom-y-tick")].map((t) => t.textContent),
      xTicks: [...svg.querySelectorAll(".headroom-x-tick")].map((t) => t.textContent),
      strokes: [...svg.querySelectorAll("path")].map((p) => p.getAttribute("stroke")),
      legend: [...document.querySelectorAll(".headroom-legend > *")].map((s) => ({
        text: s.textContent,
        colors: [...s.querySelectorAll("[stroke], [style*=color]")].map((c) => c.getAttribute("stroke") || c.style.color),
      })),
    };
  });
  await page.locator(".headroom-monitor").screenshot({ path: `${artifacts}/sidebar.png` });

  // Items 15 and 5 (timeline): the header names the budget and the card; node names find nodes.
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));
  await page.waitForFunction(() => Number(document.querySelector(".headroom-timeline")?.dataset.rows) >= 3, null, { timeout: 60_000 });
  result.timelineHeader = await page.evaluate(() => document.querySelector(".headroom-timeline > div")?.innerText ?? "");
  result.timelineNodeCells = await page.evaluate(() =>
    [...document.querySelectorAll(".headroom-timeline tr.headroom-row")].map((tr) => tr.cells[0].innerText));
  const timelineLink = page.locator(".headroom-timeline tr.headroom-row td:first-child a").filter({ hasText: "Blank canvas" });
  result.timelineLinks = await timelineLink.count();
  if (result.timelineLinks) result.timelineClick = await clickFinds(timelineLink.first(), "1");
  await page.locator(".headroom-timeline").screenshot({ path: `${artifacts}/timeline.png` });
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));

  // Items 6 and 5 (toast): a 2048x2048 Flux workflow that a 1 GB card cannot run, open in the canvas (so
  // its nodes can be found). Queued, the host would refuse it (its model files are not on this server)
  // and its preflight is dropped with it (#43), so the same verdict comes from "Will it fit?", with the
  // sidebar closed: its toast then carries the whole answer (M16).
  await page.evaluate(async (apiPrompt) => {
    window.headroom.toasts.length = 0;
    await window.app.loadApiJson(apiPrompt, "flux-2048.json");
  }, preflightPrompt);
  await checkFitInToast(page);
  await page.waitForFunction(() => window.headroom.toasts.length >= 1, null, { timeout: 60_000 });
  const toast = page.locator(TOAST, { hasText: "will run out of VRAM" }).first();
  await toast.waitFor({ timeout: 30_000 });
  await toast.locator("button", { hasText: /^Show/ }).first().waitFor({ timeout: 10_000 }).catch(() => {}); // decorated
  await page.waitForTimeout(300); // let the toast finish its entry animation before reading and the picture
  result.preflightToast = await toast.innerText();
  await page.screenshot({ path: `${artifacts}/toast-preflight.png` });
  const toastLink = toast.locator("button", { hasText: /^Show/ }).filter({ hasText: "Poster latent" });
  result.toastLinks = await toast.locator("button", { hasText: /^Show/ }).allInnerTexts();
  if (await toastLink.count()) result.toastClick = await clickFinds(toastLink.first(), "27");
  await closeToasts();

  // The top-bar meter (on by default), then off and on again through its setting. (The top bar is
  // .comfyui-menu up to 1.3x; later frontends mount the legacy menu's buttons elsewhere in the top bar.)
  const meter = page.locator(".headroom-meter");
  const topBar = async () => {
    const box = await meter.boundingBox().catch(() => null);
    const height = Math.max(40, Math.ceil((box?.y ?? 0) + (box?.height ?? 0) + 8));
    return { x: 0, y: 0, width: page.viewportSize().width, height };
  };
  result.meter = { count: await meter.count() };
  if (result.meter.count) {
    await page.waitForFunction(() => /RAM/.test(document.querySelector(".headroom-meter")?.innerText ?? ""), null, { timeout: 30_000 })
      .catch(() => result.steps.push("the meter never showed RAM")); // the meter's test says what it showed
    result.meter.text = await meter.innerText();
    result.meter.box = await meter.boundingBox();
    await page.screenshot({ path: `${artifacts}/topbar-meter.png`, clip: await topBar() });
    await page.evaluate(() => window.app.extensionManager.setting.set("Headroom.Monitor.TopBarMeter", false));
    result.meter.afterOff = await meter.count();
    await page.evaluate(() => window.app.extensionManager.setting.set("Headroom.Monitor.TopBarMeter", true));
    result.meter.afterOn = await meter.count();
  } else {
    await page.screenshot({ path: `${artifacts}/topbar-meter.png`, clip: await topBar() });
  }
  result.steps.push("done");
  await finish();
} catch (error) {
  await finish(error);
}
