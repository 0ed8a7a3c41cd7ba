// Runs compared (#42): the tiny SD1.5 workflow run twice from one tab; the timeline then says, against
// the previous run, what was read from disk again, how RAM and VRAM changed and the host's settings.
// Usage: node runs_compared.mjs BASE_URL ARTIFACTS_DIR PROMPT.json
// Prints one JSON line with what it saw; tests/e2e/test_runs_compared.py asserts on it.
import { readFileSync } from "node:fs";
import { closeDialogs, openComfy } from "./lib/page.mjs";

const [base, artifacts, promptPath] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const { page, result, finish } = await openComfy(base, { artifacts });
const ENDED = ["execution_success", "execution_error", "execution_interrupted"];
const queueAndWait = () => page.evaluate((names) => new Promise((resolve) => {
  const { api } = window.comfyAPI.api;
  for (const name of names) api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
  window.app.queuePrompt(0, 1);
}), ENDED);

try {
  // an API prompt opened as a workflow with an id of its own, as a saved one has
  await page.evaluate(async (p) => {
    await window.app.loadApiJson(p, "runs-compared.json");
    const w = window.app.graph.serialize();
    w.id = crypto.randomUUID();
    await window.app.loadGraphData(w, true, true, "runs-compared.json");
  }, prompt);
  await closeDialogs(page);
  result.first = await queueAndWait();
  result.second = await queueAndWait();
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));
  await page.waitForFunction((id) => window.headroom.report?.prompt_id === id, result.second.promptId, { timeout: 60_000 });
  await page.waitForFunction(() => document.querySelector(".headroom-compare"), null, { timeout: 10_000 });
  result.compared = await page.evaluate(() => ({
    heading: document.querySelector(".headroom-compare strong")?.textContent ?? "",
    lines: [...document.querySelectorAll(".headroom-compare-line")].map((e) => e.textContent),
    previous: window.headroom.report?.compared?.previous ?? null,
  }));
  await page.screenshot({ path: `${artifacts}/runs-compared.png` });
  await finish();
} catch (error) {
  await finish(error);
}
