// Drives Debian's Chromium through playwright-core against a running ComfyUI with Headroom loaded.
// Usage: node browser.mjs BASE_URL SCREENSHOT.png PROMPT.json PREFLIGHT_PROMPT.json
// Prints one JSON line with what it saw; tests/e2e/test_browser.py asserts on it.
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const [base, screenshot, promptPath, preflightPath] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const preflightPrompt = JSON.parse(readFileSync(preflightPath, "utf8"));
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const LONG = 180_000;

const result = { errors: [], steps: [] };
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: FLAGS, headless: true });
const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
try {
  page.on("console", (msg) => {
    if (msg.type() === "error" && /headroom/i.test(msg.text())) result.errors.push(msg.text());
  });
  page.on("pageerror", (error) => {
    if (/headroom/i.test(String(error.stack || error))) result.errors.push(String(error));
  });
  await page.goto(base, { timeout: LONG });
  await page.waitForFunction(() => window.app?.graph && window.headroom && window.app.extensionManager, null, { timeout: LONG });
  result.steps.push("loaded");
  // A first visit opens the "Get started with a template" dialog: close it as a person would.
  for (let i = 0; i < 5 && (await page.locator(".p-dialog-mask").count()); i++) {
    await page.keyboard.press("Escape");
    await page.locator(".p-dialog-mask").first().waitFor({ state: "detached", timeout: 5000 }).catch(() => {});
  }

  // The sidebar tab, through its own button (what a person clicks).
  await page.locator(".headroom-monitor-tab-button").first().click({ timeout: 60_000 });
  await page.waitForSelector(".headroom-monitor", { timeout: 60_000 });
  result.steps.push("sidebar");

  async function runPrompt(label) {
    await page.evaluate(async (apiPrompt) => {
      window.headroom.report = null;
      await window.app.loadApiJson(apiPrompt, "headroom-e2e.json");
      await window.app.queuePrompt(0, 1);
    }, prompt);
    await page.waitForFunction(() => (window.headroom.report?.nodes?.length ?? 0) >= 3, null, { timeout: LONG });
    result.steps.push(`ran (${label})`);
    return page.evaluate(() => {
      const monitor = window.app.graph.nodes.find((n) => n.comfyClass === "HeadroomMemoryMonitor");
      const ours = (monitor?.badges ?? []).filter((b) => b.headroom).map((b) => b().text);
      return {
        reportNodes: window.headroom.report.nodes.map((r) => [r.node, r.class_type, r.status]),
        badgeRecords: window.headroom.badges.records.size,
        monitorBadges: ours,
      };
    });
  }

  // The new (Vue) node renderer first, then the classic canvas, which the screenshot shows.
  await page.evaluate(() => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", true));
  result.vue = await runPrompt("Vue node renderer");
  await page.evaluate(() => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", false));
  result.classic = await runPrompt("classic renderer");
  await page.waitForFunction(() => Number(document.querySelector(".headroom-monitor")?.dataset.samples) >= 2, null, { timeout: 60_000 });
  result.samples = await page.evaluate(() => Number(document.querySelector(".headroom-monitor").dataset.samples));
  result.panelNodeRows = await page.locator(".headroom-node-row").count();

  // The bottom panel's tab, through the command the frontend registers for it.
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));
  await page.waitForFunction(() => Number(document.querySelector(".headroom-timeline")?.dataset.rows) >= 3, null, { timeout: 60_000 });
  result.timelineRows = await page.evaluate(() => Number(document.querySelector(".headroom-timeline").dataset.rows));

  // Preflight: queue a workflow that cannot fit the assumed card; the host refuses it (no model files),
  // but the warning has already been sent to this client.
  await page.evaluate(async (apiPrompt) => {
    await window.comfyAPI.api.api.fetchApi("/prompt", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: apiPrompt, client_id: window.comfyAPI.api.api.clientId }),
    });
  }, preflightPrompt);
  await page.waitForFunction(() => window.headroom.toasts.length >= 1, null, { timeout: 60_000 });
  result.toast = await page.evaluate(() => window.headroom.toasts[0]);
  result.toastShown = await page.locator(".p-toast-message", { hasText: "Headroom" }).count();

  await page.waitForTimeout(500); // let the last toast and chart paint before the picture (not an assertion)
  await page.screenshot({ path: screenshot });
  result.steps.push("screenshot");
} catch (error) {
  result.failure = String(error.stack || error);
  await page.screenshot({ path: screenshot.replace(/\.png$/, "-failure.png") }).catch(() => {});
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
