// The core tour: sidebar panel, badges under both node renderers, timeline, a preflight toast.
// Usage: node browser.mjs BASE_URL ARTIFACTS_DIR PROMPT.json PREFLIGHT_PROMPT.json
// Prints one JSON line with what it saw; tests/e2e/test_browser.py asserts on it.
import { readFileSync } from "node:fs";
import { checkFitInToast, openComfy, runApiPrompt, setRenderer, waitForFinalReport } from "./lib/page.mjs";

const LONG = 180_000;
const [base, artifacts, promptPath, preflightPath] = process.argv.slice(2);
const screenshot = `${artifacts}/headroom-monitor.png`;
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const preflightPrompt = JSON.parse(readFileSync(preflightPath, "utf8"));
const { page, result, finish } = await openComfy(base, { artifacts });
try {
  // The sidebar tab, through its own button (what a person clicks).
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleSidebarTab.headroom-monitor")); // the tab's button has no stable class across frontends (1.58)
  await page.waitForSelector(".headroom-monitor", { timeout: 60_000 });
  result.steps.push("sidebar");

  async function runPrompt(label) {
    await page.evaluate(() => { window.headroom.report = null; });
    const { event, promptId } = await runApiPrompt(page, prompt);
    if (event !== "execution_success" || !promptId) throw new Error(`the ${label} run ended with ${event} (${promptId})`);
    // this prompt's final report: loading the workflow shows the tab's last run (the other renderer's,
    // all done) at once, and the live one (running, pending) replaces it while the run goes
    await waitForFinalReport(page, promptId, { minNodes: 3, timeout: LONG });
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
  await setRenderer(page, true);
  result.vue = await runPrompt("Vue node renderer");
  await setRenderer(page, false);
  result.classic = await runPrompt("classic renderer");
  await page.waitForFunction(() => Number(document.querySelector(".headroom-monitor")?.dataset.samples) >= 2, null, { timeout: 60_000 });
  result.samples = await page.evaluate(() => Number(document.querySelector(".headroom-monitor").dataset.samples));
  result.panelNodeRows = await page.locator(".headroom-node-row").count();

  // The bottom panel's tab, through the command the frontend registers for it.
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));
  await page.waitForFunction(() => Number(document.querySelector(".headroom-timeline")?.dataset.rows) >= 3, null, { timeout: 60_000 });
  result.timelineRows = await page.evaluate(() => Number(document.querySelector(".headroom-timeline").dataset.rows));

  // A workflow that cannot fit the assumed card, open in the canvas and checked with "Will it fit?"
  // (queued, the host would refuse it for its missing model files, and its preflight with it: #43).
  await page.evaluate(async (apiPrompt) => { await window.app.loadApiJson(apiPrompt, "flux.json"); }, preflightPrompt);
  await checkFitInToast(page);
  await page.waitForFunction(() => window.headroom.toasts.length >= 1, null, { timeout: 60_000 });
  result.toast = await page.evaluate(() => window.headroom.toasts[0]);
  result.toastShown = await page.locator(".p-toast-message, [data-testid='toast']", { hasText: "Headroom" }).count(); // PrimeVue's, or 1.58's own

  await page.waitForTimeout(500); // let the last toast and chart paint before the picture (not an assertion)
  await page.screenshot({ path: screenshot });
  result.steps.push("screenshot");
  await finish();
} catch (error) {
  await finish(error);
}
