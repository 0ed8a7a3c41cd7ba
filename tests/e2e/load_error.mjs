// An Offload Loader whose file the machine cannot map (the faults pack's ENOMEM, as on a machine out of
// memory or a Windows page file too small): what the frontend shows of the failed run, in whichever view
// this frontend uses (1.27's error dialog, 1.41's errors popover, 1.49+'s toast and Workflow Overview).
// Usage: node load_error.mjs BASE_URL ARTIFACTS_DIR PROMPT.json
// Prints one JSON line; tests/e2e/test_load_errors.py asserts on it.
import { readFileSync } from "node:fs";
import { openComfy, runApiPrompt } from "./lib/page.mjs";

const [base, artifacts, promptPath] = process.argv.slice(2);
const { page, result, finish } = await openComfy(base, { artifacts });
const SHOWN = "[role=dialog], .p-dialog, .p-toast-message, [data-testid=toast], [data-testid=properties-panel]";

try {
  const errors = page.evaluate(() => new Promise((resolve) => {
    window.comfyAPI.api.api.addEventListener("execution_error", ({ detail }) => resolve(detail), { once: true });
  }));
  result.ended = await runApiPrompt(page, JSON.parse(readFileSync(promptPath, "utf8")), "enomem.json");
  result.error = await errors;
  await page.locator(SHOWN).first().waitFor({ timeout: 15_000 }).catch(() => {});
  await page.waitForTimeout(500); // the view fills in (read, not timed)
  result.shown = (await page.locator(SHOWN).allInnerTexts()).join("\n");
  // 1.41 and 1.49+ say more behind a button: the Workflow Overview's errors
  const more = page.getByRole("button", { name: /see errors|view details/i }).first();
  if (await more.count()) {
    await more.click({ timeout: 10_000 }).catch(() => {});
    await page.locator("[data-testid=properties-panel]").first().waitFor({ timeout: 15_000 }).catch(() => {});
    await page.waitForTimeout(500);
    result.shown += "\n" + (await page.locator(SHOWN).allInnerTexts()).join("\n");
  }
  await page.screenshot({ path: `${artifacts}/offload-loader-out-of-memory.png` });
  result.steps.push("error shown");
  await finish();
} catch (error) {
  await finish(error);
}
