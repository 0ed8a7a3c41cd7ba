// The run's state as the user sees it (#16 items 2, 3, 4, 8, 11): the tiny SD1.5 workflow runs with the
// sidebar and the timeline open; then it runs again (cached nodes); another workflow opens; back; F5.
// Usage: node run_state.mjs BASE_URL ARTIFACTS_DIR PROMPT.json OTHER_WORKFLOW.json
// Prints one JSON line with what it saw; tests/e2e/test_run_state.py asserts on it.
import { readFileSync } from "node:fs";
import { closeDialogs, gotoComfy, loadWorkflow, openComfy, setRenderer } from "./lib/page.mjs";

const LONG = 180_000;
const [base, artifacts, promptPath, otherPath] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const other = JSON.parse(readFileSync(otherPath, "utf8"));
const { page, result, finish } = await openComfy(base, { artifacts });

// What the panels and the canvas show now.
async function seen() {
  return page.evaluate(() => {
    const box = document.querySelector(".headroom-timeline");
    const rows = [...(box?.querySelectorAll("tr.headroom-row") ?? [])].map((tr) => {
      const cells = [...tr.querySelectorAll("td")].map((td) => td.textContent);
      const planned = tr.querySelector('div[title^="planned"]');
      return { node: tr.dataset.node, cls: cells[1], state: cells[3], plannedBar: planned ? planned.getBoundingClientRect().width : null };
    });
    const badges = {};
    for (const n of window.app.graph.nodes) {
      badges[n.id] = (n.badges ?? []).filter((b) => b.headroom).map((b) => b().text).join("");
    }
    return {
      graphId: window.app.graph.id,
      timelineText: box?.textContent.slice(0, 200) ?? null,
      rows,
      badges,
      panelRows: [...document.querySelectorAll(".headroom-node-row")].map((e) => e.textContent),
    };
  });
}

// The text areas on screen (classic DOM widgets or Vue nodes' textareas) with their text.
async function textAreas() {
  return page.evaluate(() => [...document.querySelectorAll("textarea")]
    .filter((t) => { const r = t.getBoundingClientRect(); return r.width > 20 && r.height > 20; })
    .map((t) => ({ value: t.value, readOnly: t.readOnly || t.disabled, node: t.closest("[data-node-id]")?.dataset.nodeId ?? null })));
}

// The text areas inside one node's box on the classic canvas, with the node centred on screen (the host
// hides DOM widgets of nodes out of view); [] when there is none.
async function classicBoxes(nodeId) {
  await page.evaluate((id) => {
    window.app.canvas.centerOnNode(window.app.graph.getNodeById(id));
    window.app.canvas.setDirty(true, true);
  }, Number(nodeId));
  const handle = await page.waitForFunction((id) => {
    const n = window.app.graph.getNodeById(id);
    const c = window.app.canvas;
    const r = c.canvas.getBoundingClientRect();
    const x0 = r.left + (n.pos[0] + c.ds.offset[0]) * c.ds.scale;
    const y0 = r.top + (n.pos[1] + c.ds.offset[1]) * c.ds.scale;
    const [x1, y1] = [x0 + n.size[0] * c.ds.scale, y0 + n.size[1] * c.ds.scale];
    const inside = [...document.querySelectorAll("textarea")].filter((t) => {
      const b = t.getBoundingClientRect();
      return b.width > 20 && b.height > 20 && b.left >= x0 - 2 && b.right <= x1 + 2 && b.top >= y0 - 2 && b.bottom <= y1 + 2;
    });
    return inside.length ? inside.map((t) => ({ value: t.value, readOnly: t.readOnly })) : null;
  }, Number(nodeId), { timeout: 20_000 }).catch(() => null);
  return handle ? handle.jsonValue() : [];
}

async function openPanels() {
  if (!(await page.locator(".headroom-monitor").count())) {
    await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleSidebarTab.headroom-monitor")); // the tab's button has no stable class across frontends (1.58)
    await page.waitForSelector(".headroom-monitor", { timeout: 60_000 });
  }
  if (!(await page.locator(".headroom-timeline").count())) {
    await page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));
    await page.waitForSelector(".headroom-timeline", { timeout: 60_000 });
  }
}

// Every redraw of the timeline, and whether the run had ended when it happened.
async function recordTimeline() {
  await page.evaluate(() => {
    const rec = { frames: [], ended: false };
    window.__runState = rec;
    const { api } = window.comfyAPI.api;
    for (const name of ["execution_success", "execution_error", "execution_interrupted"]) {
      api.addEventListener(name, () => { rec.ended = true; }, { once: true });
    }
    new MutationObserver(() => {
      const box = document.querySelector(".headroom-timeline");
      if (!box) return;
      const states = [...box.querySelectorAll("tr.headroom-row td:nth-child(4)")].map((td) => td.textContent);
      rec.frames.push({ ended: rec.ended, states });
    }).observe(document.body, { subtree: true, childList: true });
  });
}

// Queue what is on the canvas (Run button) and wait for the end; returns the prompt id.
async function queueAndWait() {
  const ended = await page.evaluate(async () => {
    const { api } = window.comfyAPI.api;
    const done = new Promise((resolve) => {
      for (const name of ["execution_success", "execution_error", "execution_interrupted"]) {
        api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
      }
    });
    await window.app.queuePrompt(0, 1);
    return done;
  });
  if (ended.event !== "execution_success") throw new Error(`run ended with ${ended.event}`);
  const history = await page.evaluate(async (id) => (await (await window.comfyAPI.api.api.fetchApi(`/history/${id}`)).json())[id], ended.promptId);
  // the timeline's report is fetched after the run's end: wait for it (not part of any assertion)
  await page.waitForFunction((id) => window.headroom.report?.prompt_id === id, ended.promptId, { timeout: 60_000 });
  return { promptId: ended.promptId, uiText: Object.fromEntries(Object.entries(history.outputs).map(([k, v]) => [k, v.text?.[0] ?? null])) };
}

// The socket through a proxy that adds one headroom.residency message, as the residency controller sends
// on a GPU (this CPU-only machine has no moves to report), after the sampler's node record.
const injected = [];
await page.routeWebSocket(/\/ws(\?|$)/, (ws) => {
  const server = ws.connectToServer();
  ws.onMessage((message) => server.send(message));
  server.onMessage((message) => {
    ws.send(message);
    if (typeof message !== "string" || injected.length) return;
    const { type, data } = JSON.parse(message);
    if (type !== "headroom.node" || data.node !== "3") return;
    const event = { t: Date.now() / 1000, prompt_id: data.prompt_id, node_id: "3", component: "headroom_tiny_sd15 [diffusion_model]",
      tier_from: "ram", tier_to: "gpu", nbytes: 2 ** 20, action: "load" };
    injected.push(event);
    ws.send(JSON.stringify({ type: "headroom.residency", data: event }));
  });
});

try {
  await gotoComfy(page, base); // again, through the proxy
  await openPanels();
  result.steps.push("panels");
  // Run 1, under the Vue node renderer: live timeline, node text in Vue nodes.
  // (the workflow first: in this frontend, a graph loaded while the Vue renderer is on renders no nodes)
  // with an id as a saved workflow has (1.27-1.49 give a workflow loaded from an API prompt the nil id,
  // and a new random one each time it is opened again)
  await page.evaluate(async (apiPrompt) => {
    await window.app.loadApiJson(apiPrompt, "headroom-run-state.json");
    if (!window.app.graph.id || window.app.graph.id.startsWith("00000000")) {
      const w = window.app.graph.serialize();
      w.id = crypto.randomUUID();
      await window.app.loadGraphData(w, true, true, "headroom-run-state.json");
    }
  }, prompt);
  await page.evaluate(() => { // the same seed on the re-run, so the host can serve the sampler from its cache
    for (const n of window.app.graph.nodes) for (const w of n.widgets ?? []) if (w.name === "control_after_generate") w.value = "fixed";
  });
  await setRenderer(page, true);
  await page.waitForFunction(() => document.querySelectorAll("[data-node-id]").length >= 8, null, { timeout: 60_000 });
  await recordTimeline();
  // the host's cache emptied, so that run 1 computes every node (an earlier script in the session ran the
  // same loader and prompts: those nodes were served from its cache, with no badge to keep)
  await page.evaluate(() => window.comfyAPI.api.api.fetchApi("/free", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ unload_models: true, free_memory: true }) }));
  result.run1 = await queueAndWait();
  result.run1.frames = await page.evaluate(() => window.__runState.frames);
  result.run1.seen = await seen();
  result.run1.textAreasVue = await textAreas();
  await page.screenshot({ path: `${artifacts}/timeline-after-run.png` });
  await page.screenshot({ path: `${artifacts}/sidebar-after-run.png`, clip: { x: 0, y: 0, width: 700, height: 1000 } });
  // The node text pictures without the bottom panel over the canvas.
  const toggleTimeline = () => page.evaluate(() => window.app.extensionManager.command.execute("Workspace.ToggleBottomPanelTab.headroom-timeline"));
  await toggleTimeline();
  await page.evaluate(() => window.app.canvas.centerOnNode(window.app.graph.getNodeById(3)));
  await page.waitForFunction(() => [...document.querySelectorAll('[data-node-id="3"] textarea')].some((t) => t.getBoundingClientRect().bottom < window.innerHeight), null, { timeout: 20_000 })
    .catch(() => result.steps.push("the Vue sampler's text box is not on screen"));
  await page.screenshot({ path: `${artifacts}/node-text-vue.png` });
  // The classic canvas: node text there too.
  await setRenderer(page, false);
  await page.waitForFunction(() => !document.querySelector("[data-node-id]"), null, { timeout: 60_000 });
  result.run1.classic = { 3: await classicBoxes(3) };
  await page.screenshot({ path: `${artifacts}/node-text-sampler.png` });
  result.run1.classic[10] = await classicBoxes(10);
  await page.screenshot({ path: `${artifacts}/node-text.png` });
  await toggleTimeline();
  await page.waitForSelector(".headroom-timeline", { timeout: 60_000 });
  result.steps.push("run 1");

  // Run 2, nothing changed: the host serves all but the monitor and the preview from its cache.
  result.run2 = await queueAndWait();
  result.run2.seen = await seen();
  result.run2.classic = { 10: await classicBoxes(10) };
  await page.screenshot({ path: `${artifacts}/timeline-cached.png` });
  result.steps.push("run 2");
  result.injected = injected.length;

  // Another workflow, never run: no badges or per-node rows from the run above.
  const ran = await page.evaluate(() => window.app.graph.serialize());
  await loadWorkflow(page, other, "flux_dev_2048_tiled_vae.json");
  await closeDialogs(page);
  await page.waitForFunction(() => document.querySelectorAll(".headroom-node-row").length === 0, null, { timeout: 15_000 })
    .catch(() => result.steps.push("per-node rows stayed"));
  result.other = await seen();
  await page.screenshot({ path: `${artifacts}/other-workflow.png` });
  result.steps.push("other workflow");
  // Back to the workflow that ran (as its tab would): its badges again.
  await loadWorkflow(page, ran, "headroom-run-state.json");
  await closeDialogs(page);
  result.back = await seen();

  // F5: the same workflow comes back; the last run's state should too.
  await gotoComfy(page, base);
  await openPanels();
  await page.waitForFunction(() => (window.headroom.report?.nodes?.length ?? 0) > 0, null, { timeout: 15_000 })
    .catch(() => result.steps.push("no report after reload"));
  await page.waitForFunction(() => document.querySelectorAll(".headroom-node-row").length > 0, null, { timeout: 15_000 })
    .catch(() => result.steps.push("no per-node rows after reload"));
  result.reload = await seen();
  await page.screenshot({ path: `${artifacts}/after-reload.png` });
  result.steps.push("reload");
  await finish();
} catch (error) {
  await finish(error);
}
