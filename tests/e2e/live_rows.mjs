// M9, M11 (#42): while a run goes, the timeline's row of the node the host runs says "running" from its
// start (the first node too: the Offload Loader read "pending" for 7 s while it loaded), and a long
// sampler's row gives its elapsed time and steps.
// Usage: node live_rows.mjs BASE_URL ARTIFACTS_DIR PROMPT.json RENDERER(classic|vue)
// Prints one JSON line; tests/e2e/test_live_rows.py asserts on it.
import { readFileSync } from "node:fs";
import { closeDialogs, openComfy, waitForFinalReport } from "./lib/page.mjs";

const [base, artifacts, promptPath, renderer] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const { page, result, finish } = await openComfy(base, { artifacts, vue: renderer === "vue" });
const command = (id) => page.evaluate((id) => window.app.extensionManager.command.execute(id), id);

try {
  await page.evaluate(async (p) => {
    await window.app.loadApiJson(p, "live-rows.json");
    const w = window.app.graph.serialize();
    w.id = crypto.randomUUID();
    await window.app.loadGraphData(w, true, true, "live-rows.json");
  }, prompt);
  await closeDialogs(page);
  if (!(await page.locator(".headroom-timeline").count())) await command("Workspace.ToggleBottomPanelTab.headroom-timeline");
  await page.locator(".headroom-timeline").waitFor({ timeout: 60_000 });
  // the host's cache emptied, so that the first node runs (an earlier script ran the same loader)
  await page.evaluate(() => window.comfyAPI.api.api.fetchApi("/free", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ unload_models: true, free_memory: true }) }));
  await page.waitForTimeout(1500); // the host's worker takes the flag between prompts
  // every 100 ms while the run goes: each row's state and time cell as the user sees them
  result.seen = await page.evaluate(() => new Promise((resolve) => {
    const seen = {};
    const look = () => {
      for (const tr of document.querySelectorAll(".headroom-timeline tr.headroom-row")) {
        const cells = tr.querySelectorAll("td");
        const row = (seen[tr.dataset.node] ??= { states: [], times: [] });
        const state = cells[3]?.textContent ?? "";
        const time = cells[2]?.textContent ?? "";
        if (row.states.at(-1) !== state) row.states.push(state);
        if (state === "running" && row.times.at(-1) !== time) row.times.push(time);
      }
    };
    const timer = setInterval(look, 100);
    const { api } = window.comfyAPI.api;
    for (const name of ["execution_success", "execution_error", "execution_interrupted"]) {
      api.addEventListener(name, ({ detail }) => setTimeout(() => { clearInterval(timer); look(); resolve({ seen, promptId: detail?.prompt_id }); }, 1500), { once: true });
    }
    window.app.queuePrompt(0, 1);
  }));
  const ran = result.seen.promptId;
  result.seen = result.seen.seen;
  if (!ran) throw new Error("the run's end came without its prompt id");
  // this run's final report (on a slow machine it may come after the 1.5 s watched above)
  await waitForFinalReport(page, ran, { timeout: 60_000 });
  // the run's own figures: each node's time, in the order the report lists them (the order they ran)
  result.skippedSeen = Object.entries(result.seen).filter(([, row]) => row.states.includes("skipped")).map(([node]) => node);
  result.durations = await page.evaluate(() => (window.headroom.report?.nodes ?? []).map((n) => [String(n.node), n.duration_s ?? null, n.status]));
  await page.screenshot({ path: `${artifacts}/live-rows-${renderer}.png` });
  await finish();
} catch (error) {
  await finish(error);
}
