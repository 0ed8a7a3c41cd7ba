// RAM per node in the residency timeline and the RAM budget setting (#17 item 1), as a user sees them.
// Usage: node ram_view.mjs BASE_URL ARTIFACTS_DIR PROMPT.json SMALL_PROMPT.json
// Runs the tiny SD1.5 workflow with the default budget ("auto"), sets the RAM budget in the settings to
// less than ComfyUI holds, runs a small workflow, and types a size the server refuses. Records the
// timeline's RAM cells, the header, the toasts and the server's answers; tests/e2e/test_ram_view.py
// asserts on the JSON line.
import { readFileSync } from "node:fs";
import { LONG, closeDialogs, openComfy, runApiPrompt } from "./lib/page.mjs";

const [base, artifacts, promptPath, smallPath] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const small = JSON.parse(readFileSync(smallPath, "utf8"));
const { page, result, finish } = await openComfy(base, { artifacts });
result.pageErrors = [];
page.on("pageerror", (error) => result.pageErrors.push(String(error.stack || error).slice(0, 600)));

// Through the settings API, as the settings dialog does: the setting's onChange posts it to the server.
async function setBudget(value) {
  await page.evaluate(async (value) => {
    window.headroom.ramBudget = null;
    await window.app.extensionManager.setting.set("Headroom.RamBudget", value);
  }, value);
  await page.waitForFunction(() => window.headroom.ramBudget !== null, null, { timeout: 30_000 });
  return page.evaluate(() => window.headroom.ramBudget);
}

// Run a prompt and read the timeline once its RAM ledger is drawn (with the release after the prompt).
async function runAndRead(apiPrompt, shot) {
  await page.evaluate(() => { window.headroom.report = null; });
  const { promptId } = await runApiPrompt(page, apiPrompt, "headroom-ram.json");
  await page.waitForFunction((id) => window.headroom.report?.prompt_id === id && window.headroom.report?.ram?.after, promptId, { timeout: LONG });
  await page.waitForFunction(() => /after the prompt/.test(document.querySelector(".headroom-ram-budget")?.textContent ?? ""), null, { timeout: 60_000 });
  const view = await page.evaluate(() => ({
    header: document.querySelector(".headroom-timeline-header")?.innerText ?? "",
    ramHeader: document.querySelector(".headroom-ram-budget")?.textContent ?? "",
    columns: [...document.querySelectorAll(".headroom-timeline th")].map((th) => th.textContent),
    rows: [...document.querySelectorAll(".headroom-timeline tr.headroom-row")].map((tr) => {
      const td = tr.querySelector("td.headroom-ram");
      const line = td?.querySelector(".headroom-ram-budget-line");
      return {
        node: tr.dataset.node,
        rowOver: tr.classList.contains("headroom-ram-over"),
        text: td?.innerText ?? "",
        title: td?.title ?? "",
        over: td?.dataset.over ?? null,
        background: td ? getComputedStyle(td).backgroundColor : "",
        line: line ? line.getBoundingClientRect().left - td.getBoundingClientRect().left : null,
      };
    }),
    ledger: window.headroom.report.ram,
  }));
  view.promptId = promptId;
  await page.locator(".headroom-timeline").screenshot({ path: `${artifacts}/${shot}` });
  return view;
}

try {
  result.initialBudget = await page.evaluate(() => window.headroom.ramBudget); // sent at load
  await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));
  await page.waitForSelector(".headroom-timeline", { timeout: 60_000 });
  await closeDialogs(page);
  result.steps.push("timeline");

  // 1. The tiny SD1.5 workflow with the machine's budget ("auto").
  result.auto = await runAndRead(prompt, "ram-timeline.png");
  result.steps.push("auto");

  // 2. The smallest budget the server takes, below what ComfyUI holds with the tiny checkpoint cached
  // (the stock loader's models cannot move): over at every node.
  result.smallSetting = "512MB";
  result.small = await setBudget(result.smallSetting);
  result.over = await runAndRead(small, "ram-over-budget.png");
  result.steps.push("over");

  // 3. A value the server refuses: an error toast, and the budget stays.
  result.refused = await setBudget("lots");
  const toast = page.locator(".p-toast-message, [data-testid='toast']", { hasText: "RAM budget" }).first(); // PrimeVue's, or 1.58's own
  await toast.waitFor({ timeout: 30_000 });
  result.refusedToast = await toast.innerText();
  result.afterRefusal = await page.evaluate(async () => (await (await window.comfyAPI.api.api.fetchApi("/headroom/ram_budget")).json()));
  await page.evaluate(() => window.app.extensionManager.setting.set("Headroom.RamBudget", "auto"));
  result.steps.push("done");
  await finish();
} catch (error) {
  await finish(error);
}
