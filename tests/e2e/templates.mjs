// Headroom's examples as a user meets them: Templates in the sidebar, the pack's category, its cards
// (title, thumbnail), then each example opened by a click: the missing-models dialog and its download
// links, the nodes' boxes on the canvas, and whether every widget of the Offload Loader can be seen.
// Usage: node templates.mjs BASE_URL ARTIFACTS_DIR PACK_FOLDER_NAME
// Prints one JSON line; tests/e2e/test_templates.py asserts on it.
import { closeDialogs, nodeBoxes, openComfy } from "./lib/page.mjs";

const [base, artifacts, pack] = process.argv.slice(2);
const { page, result, finish } = await openComfy(base, { artifacts });
// This environment lacks the host's comfyui-workflow-templates package (84 MB), so /templates/index.json
// is a 404 and the frontend then refuses to open any template. Answer as an installed package with no
// core templates would: an empty index.
await page.route("**/templates/index.json", (route) => route.fulfill({ json: [] }));

async function openCategory() {
  await closeDialogs(page); // (an example's missing-models dialog would take the click)
  await page.getByRole("button", { name: "Templates" }).first().click();
  await page.waitForSelector("[data-testid^=template-workflow-]", { timeout: 60_000 });
  // in the dialog: on 1.58 the nodes on the canvas carry badges with the pack's name too
  await page.locator("[role=dialog], .p-dialog").getByText(pack, { exact: true }).first().click();
  await page.waitForTimeout(300); // the category's cards replace the first category's (not an assertion)
}

// What the canvas shows now: node boxes (title bars included) and the Offload Loaders' widget rows.
function canvasState() {
  return page.evaluate(() => {
    const nodes = window.app.graph.nodes;
    return {
      nodes: nodes.map((n) => ({
        id: n.id, type: n.type, pos: Array.from(n.pos), size: Array.from(n.size),
        needs: Array.from(n.computeSize()), models: n.properties?.models ?? [],
        widgets: (n.widgets ?? []).map((w) => ({ name: w.name, value: w.value, y: w.y ?? w.last_y, h: w.computedHeight ?? 20 })),
      })),
    };
  });
}

// The missing models as the frontend offers them: the missing-models dialog (1.27; 1.41 has its own), or (1.49+) the
// "errors found" toast whose "View details" opens the Workflow Overview's Missing Models group, where each
// file has a Download button and its URL behind "Copy URL" (read from the clipboard call).
async function missingModels(shot) {
  const OLD = ".comfy-missing-models";
  const GLOBAL = "[aria-labelledby=global-missing-models-warning]"; // 1.41's dialog: a row per file
  const shown = page.locator(`${OLD}, ${GLOBAL}, [data-testid=missing-model-download]`).or(page.getByRole("button", { name: /view details/i }));
  await shown.first().waitFor({ timeout: 15_000 }).catch(() => {});
  if (await page.locator(OLD).count()) {
    if (shot) await page.screenshot({ path: shot });
    return page.evaluate(() => [...document.querySelectorAll(".comfy-missing-models [role=option]")].map((option) => ({
      label: option.querySelector("span[title]")?.textContent.trim(),
      url: option.querySelector("span[title]")?.getAttribute("title"),
      download: [...option.querySelectorAll("button")].some((b) => /download/i.test(b.textContent) && !b.disabled),
    })));
  }
  // 1.41's dialog carries the same global dialog id as 1.27's: 1.27's rows are read above
  if (await page.locator(GLOBAL).count()) {
    if (shot) await page.screenshot({ path: shot });
    return page.evaluate((dialog) => [...document.querySelectorAll(`${dialog} span[title]`)].map((name) => {
      const download = name.parentElement.parentElement.querySelector("button[title]");
      return { label: name.textContent.trim(), url: download?.getAttribute("title"), download: Boolean(download && !download.disabled) };
    }), GLOBAL);
  }
  if (!(await page.locator("[data-testid=error-group-missing-model]").count())) {
    await page.getByRole("button", { name: /view details/i }).first().click({ timeout: 10_000 }).catch(() => {});
  }
  const group = page.locator("[data-testid=error-group-missing-model]");
  if (!(await group.locator("[data-testid=missing-model-download]").first().waitFor({ timeout: 15_000 }).then(() => true, () => false))) return [];
  if (shot) await page.screenshot({ path: shot }); // before the "copied" toasts
  await page.evaluate(() => {
    window.__copied = [];
    Object.defineProperty(navigator, "clipboard", { configurable: true, value: { writeText: async (t) => { window.__copied.push(t); } } });
  });
  const rows = [];
  for (const download of await group.locator("[data-testid=missing-model-download]").all()) {
    const row = download.locator("xpath=..");
    const name = (await row.locator("button[title]").first().getAttribute("title")) ?? "";
    const folder = ((await row.locator("span > span").last().textContent().catch(() => "")) ?? "").trim();
    const before = await page.evaluate(() => window.__copied.length);
    await row.getByRole("button", { name: "Copy URL" }).click({ timeout: 5000 }).catch(() => {});
    const url = await page.waitForFunction((n) => window.__copied.length > n && window.__copied.at(-1), before, { timeout: 5000 })
      .then((h) => h.jsonValue(), () => null);
    rows.push({ label: `${folder} / ${name}`, url, download: await download.isEnabled() });
  }
  return rows;
}

try {
  await openCategory();
  // the dialog loads a card's thumbnail only while the card is in view (and may drop it again when the
  // card scrolls out): read each card while it is shown, after its image has loaded or 10 s have passed
  const cardsShown = page.locator("[data-testid^=template-workflow-]");
  result.cards = [];
  for (let i = 0; i < await cardsShown.count(); i++) {
    const card = cardsShown.nth(i);
    await card.scrollIntoViewIfNeeded();
    result.cards.push(await card.evaluate(async (el) => {
      // (1.41 puts the img in only once the card is in view: none yet is not loaded)
      const loaded = () => el.querySelector("img") && [...el.querySelectorAll("img")].every((img) => img.complete && (img.currentSrc || img.src));
      for (let t = 0; t < 100 && !loaded(); t++) await new Promise((done) => setTimeout(done, 100));
      return {
        name: el.dataset.testid.replace(/^template-workflow-/, ""),
        title: el.querySelector("h3")?.textContent.trim(),
        thumbnail: [...el.querySelectorAll("img")].map((img) => ({ src: img.currentSrc || img.src, width: img.naturalWidth })),
      };
    }));
  }
  await cardsShown.first().scrollIntoViewIfNeeded(); // the screenshot shows the dialog as it opens
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid^=template-workflow-] img")]
    .slice(0, 3).every((img) => img.complete && img.naturalWidth > 0), null, { timeout: 10_000 }).catch(() => {});
  await page.screenshot({ path: `${artifacts}/templates-dialog.png` });
  result.steps.push("templates dialog");
  await closeDialogs(page);

  result.examples = {};
  for (const card of result.cards) {
    await openCategory();
    await page.locator(`[data-testid="template-workflow-${card.name}"]`).click();
    await page.waitForFunction((name) => window.app.extensionManager.workflow.activeWorkflow?.filename === name, card.name, { timeout: 60_000 });
    result.steps.push(`clicked ${card.name}`);
    const missing = await missingModels(card === result.cards[0] ? `${artifacts}/example-missing-models.png` : null);
    await closeDialogs(page);
    await page.waitForTimeout(300); // one frame to draw the widgets at their places (not an assertion)
    const state = await canvasState();
    state.missingModels = missing;
    state.boxes = await nodeBoxes(page);
    result.examples[card.name] = state;
    await page.screenshot({ path: `${artifacts}/example-${card.name.replace(/[^\w.-]+/g, "_")}.png` });
    result.steps.push(`opened ${card.name}`);
  }
  await finish();
} catch (error) {
  await finish(error);
}
