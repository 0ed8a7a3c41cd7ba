// M1 (#42): a workflow opened from an API prompt keeps its Headroom results (badges, the sidebar's
// per-node list, the timeline) through a tab switch, and after F5. Frontend 1.49 gives such a workflow a
// new graph id at its first tab switch.
// Usage: node tab_switch.mjs BASE_URL ARTIFACTS_DIR PROMPT.json RENDERER(classic|vue)
// Prints one JSON line; tests/e2e/test_tab_switch.py asserts on it.
import { readFileSync } from "node:fs";
import { closeDialogs, gotoComfy, loadApiPrompt, openComfy } from "./lib/page.mjs";

const [base, artifacts, promptPath, renderer] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const { page, result, finish } = await openComfy(base, { artifacts, vue: renderer === "vue" });
const command = (id) => page.evaluate((id) => window.app.extensionManager.command.execute(id), id);
const ENDED = ["execution_success", "execution_error", "execution_interrupted"];

// What the user sees of the last run on the open workflow.
const seen = () => page.evaluate(() => ({
  graphId: window.app.graph.id,
  path: window.app.extensionManager.workflow.activeWorkflow?.path ?? null,
  badges: window.headroom.badges.records.size,
  panelRows: document.querySelectorAll(".headroom-node-row").length,
  timelineRows: document.querySelectorAll(".headroom-timeline tr.headroom-row").length,
}));
const settle = (ms) => page.waitForTimeout(ms); // the tab's graph is loaded and drawn (bounded, not asserted)

try {
  // open (not toggle: an earlier script may have left them open) the sidebar tab and the timeline
  if (!(await page.locator(".headroom-monitor").count())) await command("Workspace.ToggleSidebarTab.headroom-monitor");
  await page.locator(".headroom-monitor").waitFor({ timeout: 60_000 });
  if (!(await page.locator(".headroom-timeline").count())) await command("Workspace.ToggleBottomPanelTab.headroom-timeline");
  await page.locator(".headroom-timeline").waitFor({ timeout: 60_000 });
  await loadApiPrompt(page, prompt, "m1-api-prompt.json");
  await closeDialogs(page);
  result.run = await page.evaluate((names) => new Promise((resolve) => {
    const { api } = window.comfyAPI.api;
    for (const name of names) api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
    window.app.queuePrompt(0, 1);
  }), ENDED);
  await page.waitForFunction((id) => window.headroom.report?.prompt_id === id, result.run.promptId, { timeout: 60_000 });
  result.afterRun = await seen();
  await command("Comfy.NewBlankWorkflow");
  await settle(1000);
  result.otherTab = await seen();
  await command("Workspace.PreviousOpenedWorkflow");
  await page.waitForFunction((path) => window.app.extensionManager.workflow.activeWorkflow?.path === path, result.afterRun.path, { timeout: 10_000 });
  await settle(1500);
  result.back = await seen();
  await page.screenshot({ path: `${artifacts}/m1-tab-switch-${renderer}.png` });
  await gotoComfy(page, base); // F5: the open tab is restored
  if (!(await page.locator(".headroom-monitor").count())) await command("Workspace.ToggleSidebarTab.headroom-monitor");
  await page.locator(".headroom-monitor").waitFor({ timeout: 60_000 }).catch(() => {});
  await page.waitForFunction((path) => window.app.extensionManager.workflow.activeWorkflow?.path === path, result.afterRun.path, { timeout: 10_000 }).catch(() => {});
  await page.waitForFunction(() => document.querySelectorAll(".headroom-node-row").length > 0, null, { timeout: 15_000 }).catch(() => {});
  result.afterReload = await seen();
  await finish();
} catch (error) {
  await finish(error);
}
