// "Make it fit" (#42) in one renderer: the official Wan 2.2 14B example, its latent made larger than an
// RTX 4060 (chosen in the sidebar: M6) holds; "Will it fit?" says no with the remedies; Copy gives the
// whole answer; Apply makes the canvas match the latent remedy in one undo step and the check then says
// it fits; an edit marks the answer out of date (M3). Then "Show" zooms in to a readable size (M10).
// Usage: node make_it_fit.mjs BASE_URL ARTIFACTS_DIR WORKFLOW.json RENDERER(classic|vue)
// Prints one JSON line with what it saw; tests/e2e/test_make_it_fit.py asserts on it.
import { readFileSync } from "node:fs";
import { closeDialogs, loadWorkflow, openComfy } from "./lib/page.mjs";

const [base, artifacts, workflowPath, renderer] = process.argv.slice(2);
const workflow = JSON.parse(readFileSync(workflowPath, "utf8"));
const vue = renderer === "vue";
const { page, result, finish } = await openComfy(base, { artifacts, vue });
const shot = (name) => page.screenshot({ path: `${artifacts}/${name}-${renderer}.png` });
const command = (id) => page.evaluate((id) => window.app.extensionManager.command.execute(id), id);
const LATENT = 59; // EmptyHunyuanLatentVideo in the example

result.stepErrors = {};
async function step(name, fn) {
  try {
    await fn();
    result.steps.push(name);
  } catch (error) {
    result.stepErrors[name] = String(error?.message ?? error).split("\n")[0].slice(0, 300);
    await closeDialogs(page).catch(() => {});
  }
}
const latent = () => page.evaluate((id) => Object.fromEntries(window.app.graph.getNodeById(id).widgets.map((w) => [w.name, w.value])), LATENT);
// The latent's widgets set as a user's edit is: the value, the widget's callback, the change tracker.
const edit = (values) => page.evaluate(({ id, values }) => {
  const node = window.app.graph.getNodeById(id);
  for (const [name, value] of Object.entries(values)) {
    const widget = node.widgets.find((w) => w.name === name);
    widget.value = value;
    widget.callback?.(value, window.app.canvas, node);
  }
  window.app.extensionManager.workflow.activeWorkflow?.changeTracker?.checkState();
}, { id: LATENT, values });
const sidebar = () => page.evaluate(() => {
  const fit = document.querySelector(".headroom-fit");
  return {
    fits: fit?.dataset.fits ?? null,
    stale: fit?.dataset.stale ?? null,
    text: fit?.querySelector(".headroom-fit-text")?.textContent ?? "",
    time: document.querySelector(".headroom-fit-time")?.textContent ?? "", // M5: the card and what it counts
    remedies: [...(fit?.querySelectorAll(".headroom-remedy") ?? [])].map((r) => ({ kind: r.dataset.kind, text: r.textContent, apply: Boolean(r.querySelector(".headroom-remedy-apply")) })),
    cardChoice: fit?.querySelector(".headroom-card-choice")?.value ?? null,
    severity: window.headroom.fits.get()?.severity ?? null, // error: even Headroom's plan does not fit
  };
});
async function checkFit() {
  const before = await page.evaluate(() => window.headroom.fits.get()?.at ?? 0);
  await page.locator(".headroom-check-fit").click();
  await page.waitForFunction((t) => (window.headroom.fits.get()?.at ?? 0) > t, before, { timeout: 60_000 });
  await page.waitForFunction(() => document.querySelector(".headroom-fit")?.dataset.fits, null, { timeout: 10_000 });
  return sidebar();
}

try {
  result.frontend = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  await command("Workspace.ToggleSidebarTab.headroom-monitor");
  await page.locator(".headroom-monitor").waitFor({ timeout: 60_000 });
  await loadWorkflow(page, workflow, "wan22-make-it-fit.json");
  await closeDialogs(page);

  await step("M6 card chosen", async () => {
    // the test server assumes a 1 GB card: first, a check there (the setting is the server's: an earlier
    // script may have left a card chosen); then the card chosen in the sidebar
    await page.evaluate(() => window.app.extensionManager.setting.set("Headroom.Card", ""));
    result.onServerCard = await checkFit();
    await page.evaluate(() => window.app.extensionManager.setting.set("Headroom.Card", "RTX 4060"));
    result.onChosen = await checkFit();
  });
  await step("does not fit", async () => {
    await edit({ width: 1280, height: 720 });
    result.before = await latent();
    result.noFit = await checkFit();
    // M16: the sidebar's text is not shown a second time in a toast
    result.toastRepeats = await page.evaluate(() => {
      const detail = (document.querySelector(".headroom-fit-detail")?.textContent ?? "").slice(0, 80);
      return [...document.querySelectorAll(".p-toast-message, [data-testid='toast']")].filter((t) => detail && t.textContent.includes(detail)).length;
    });
    await shot("make-it-fit-remedies");
  });
  await step("M10 zoom", async () => {
    // a "Show" link of the verdict, from far out: the node found is readable, not a grey box
    await page.evaluate(() => {
      window.app.canvas.ds.scale = 0.37;
      window.app.canvas.setDirty(true, true);
    });
    await page.locator(".headroom-fit-links .headroom-node-link").first().click();
    result.zoomAfterShow = await page.evaluate(() => window.app.canvas.ds.scale);
  });
  await step("Copy", async () => {
    await page.locator(".headroom-fit-copy").click();
    await page.waitForFunction(() => typeof window.headroom.copied === "string", null, { timeout: 5000 });
    result.copied = await page.evaluate(() => window.headroom.copied);
  });
  await step("Apply", async () => {
    result.remedy = await page.evaluate(() => window.headroom.fits.get().remedies.find((r) => r.kind === "latent"));
    const before = await page.evaluate(() => window.headroom.fits.get()?.at ?? 0);
    await page.locator(".headroom-remedy[data-kind=latent] .headroom-remedy-apply").click();
    await page.waitForFunction((t) => (window.headroom.fits.get()?.at ?? 0) > t, before, { timeout: 60_000 });
    result.applied = await latent();
    result.afterApply = await sidebar();
    await shot("make-it-fit-applied");
  });
  await step("M3 stale", async () => {
    await edit({ width: 1920 });
    await page.waitForFunction(() => document.querySelector(".headroom-fit")?.dataset.stale === "true", null, { timeout: 5000 });
    result.afterEdit = await sidebar();
    await shot("make-it-fit-stale");
  });
  await step("undo", async () => {
    // the edit, then Apply: two undo steps take the latent back to what it was before Apply
    const undo = () => page.evaluate(async () => window.app.extensionManager.workflow.activeWorkflow.changeTracker.undo());
    await undo();
    result.undoEdit = await latent();
    await undo();
    result.undoApply = await latent();
  });
  await finish();
} catch (error) {
  await finish(error);
}
