// What an artist sees on the frontend under test (#29), in one renderer: "Will it fit?" both ways, the
// verdict kept with its workflow, the timeline of the open workflow only, a running node while it runs,
// the RAM budget setting typed key by key, toast buttons, "Show" clear of the bottom panel, the sidebar's
// per-node list, and the top-bar meter at 1024 px with GPU load and temperature.
// Usage: node artist.mjs BASE_URL ARTIFACTS_DIR PROMPT.json BIG_PROMPT.json RENDERER(classic|vue) EXAMPLE.json...
// Prints one JSON line with what it saw; tests/e2e/test_artist.py asserts on it.
import { readFileSync } from "node:fs";
import { closeDialogs, gotoComfy, openComfy, postPrompt } from "./lib/page.mjs";

const LONG = 180_000;
const [base, artifacts, promptPath, bigPath, renderer] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const big = JSON.parse(readFileSync(bigPath, "utf8"));
const examples = Object.fromEntries(process.argv.slice(7).map((f) => [f.split("/").pop(), JSON.parse(readFileSync(f, "utf8"))]));
const vue = renderer === "vue";
const { page, result, finish } = await openComfy(base, { artifacts });
const shot = (name) => page.screenshot({ path: `${artifacts}/${name}-${renderer}.png` });
const command = (id) => page.evaluate((id) => window.app.extensionManager.command.execute(id), id);

// Every request the page makes to Headroom's RAM routes, and each 404 among them.
result.ramBudgetPosts = [];
result.ram404 = [];
page.on("request", (r) => {
  if (r.method() === "POST" && r.url().includes("/headroom/ram_budget")) result.ramBudgetPosts.push(JSON.parse(r.postData() || "{}").value);
});
page.on("response", (r) => {
  if (r.status() === 404 && r.url().includes("/headroom/")) result.ram404.push(r.url().replace(base, ""));
});
result.consoleNotices = [];
page.on("console", (msg) => {
  if (/internal module|deprecated/i.test(msg.text()) && /widgets|headroom/i.test(msg.text())) result.consoleNotices.push(msg.text().slice(0, 200));
});

// The sidebar's verdict box, the timeline's header and rows, and what the toasts show.
async function seen() {
  return page.evaluate(() => {
    const fit = document.querySelector(".headroom-fit");
    const box = document.querySelector(".headroom-timeline");
    return {
      graphId: window.app.graph.id,
      fits: fit?.dataset.fits ?? null,
      fitText: fit?.querySelector(".headroom-fit-text")?.textContent ?? "",
      fitLinks: [...(fit?.querySelectorAll("a.headroom-node-link") ?? [])].map((a) => a.dataset.node),
      timelineEmpty: Boolean(box?.querySelector(".headroom-timeline-empty")),
      timelineVerdict: box?.querySelector(".headroom-verdict")?.textContent ?? "",
      timelineRows: [...(box?.querySelectorAll("tr.headroom-row") ?? [])].map((tr) => ({ node: tr.dataset.node, state: tr.querySelectorAll("td")[3]?.textContent })),
      panelRows: [...document.querySelectorAll(".headroom-node-row")].map((e) => e.textContent),
    };
  });
}

// An API prompt opened as a workflow, with an id as a saved workflow has (frontend 1.27 gives a workflow
// loaded from an API prompt the nil id, shared by all of them).
async function loadApi(p, name) {
  await page.evaluate(async ({ p, name }) => {
    await window.app.loadApiJson(p, name);
    if (!window.app.graph.id || window.app.graph.id.startsWith("00000000")) {
      const w = window.app.graph.serialize();
      w.id = crypto.randomUUID();
      await window.app.loadGraphData(w, true, true, name);
    }
  }, { p, name });
  await closeDialogs(page);
}

async function checkFit() {
  const before = await page.evaluate(() => window.headroom.fits.get()?.at ?? 0);
  await command("Headroom.CheckFit");
  await page.waitForFunction((t) => (window.headroom.fits.get()?.at ?? 0) > t, before, { timeout: LONG });
  await page.waitForTimeout(300);
  return seen();
}

async function toastTexts() {
  return page.evaluate(() => [...document.querySelectorAll(".p-toast-message, [data-testid='toast']")].map((t) => t.textContent));
}

try {
  await page.evaluate((on) => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", on), vue);
  result.frontend = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  result.renderer = renderer;
  // N8: a new VRAM Stats node is big enough for its report
  result.newMonitorSize = await page.evaluate(async () => {
    const node = window.LiteGraph.createNode("HeadroomMemoryMonitor");
    window.app.graph.add(node);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const size = [...node.size];
    window.app.graph.remove(node);
    return size;
  });
  await command("Workspace.ToggleSidebarTab.headroom-monitor");
  await page.locator(".headroom-monitor").waitFor({ timeout: LONG });

  // N4: the RAM budget typed key by key, as the settings dialog reports it
  const type = async (text) => {
    for (let i = 1; i <= text.length; i++) {
      await page.evaluate((v) => window.app.extensionManager.setting.set("Headroom.RamBudget", v), text.slice(0, i));
      await page.waitForTimeout(60);
    }
    await page.waitForTimeout(2500);
  };
  result.ramBudgetPosts.length = 0;
  await type("auto");
  result.ramAutoPosts = [...result.ramBudgetPosts];
  result.ramAutoToasts = (await toastTexts()).filter((t) => /RAM budget/.test(t));
  await type("16GB");
  result.ram16Posts = result.ramBudgetPosts.slice(result.ramAutoPosts.length);
  result.ramBudgetNow = await page.evaluate(() => window.headroom.ramBudget);
  await page.evaluate(() => window.app.extensionManager.setting.set("Headroom.RamBudget", "auto"));
  await page.waitForTimeout(2000);
  result.steps.push("ram budget typed");

  // Workflow A (the tiny SD1.5 one): will it fit? Then its run, the timeline watched while it runs.
  await loadApi(prompt, "tiny-sd15.json");
  result.fitA = await checkFit();
  await shot("sidebar-fits");
  await command("Workspace.ToggleBottomPanelTab.headroom-timeline");
  await page.locator(".headroom-timeline").waitFor({ timeout: LONG });
  result.liveStates = [];
  const ended = page.evaluate(() => new Promise((resolve) => {
    const { api } = window.comfyAPI.api;
    for (const name of ["execution_success", "execution_error", "execution_interrupted"]) {
      api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
    }
  }));
  await page.evaluate(() => window.app.queuePrompt(0, 1));
  let done = null;
  ended.then((v) => { done = v; });
  let shotWhileRunning = false;
  while (!done) {
    const rows = (await seen()).timelineRows;
    const states = rows.map((r) => r.state);
    result.liveStates.push(states.join(","));
    if (!shotWhileRunning && states.includes("running")) {
      shotWhileRunning = true;
      await shot("timeline-running");
    }
    await page.waitForTimeout(150);
  }
  result.runA = done;
  await page.waitForTimeout(1500);
  result.streamText = await page.evaluate(() => window.app.graph.getNodeById(11)?.widgets?.find((w) => w.name === "last run")?.value ?? null);
  result.afterRunA = await seen();
  result.workflowA = await page.evaluate(() => window.app.graph.serialize());
  // again: the host serves most nodes from its cache (N17: the sidebar's list has no bare colon)
  result.rerunA = await page.evaluate(() => new Promise((resolve) => {
    const { api } = window.comfyAPI.api;
    for (const name of ["execution_success", "execution_error", "execution_interrupted"]) {
      api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
    }
    window.app.queuePrompt(0, 1);
  }));
  await page.waitForTimeout(2000);
  result.afterRerunA = await seen();
  // N3: in the Vue renderer, the badge on the node is this run's (the monitor runs every time)
  await page.waitForTimeout(1500);
  result.nodeBadge = await page.evaluate(() => {
    const el = document.querySelector('[data-node-id="10"]');
    return { dom: el?.textContent ?? null, expected: window.headroom.badges.text("10") };
  });
  await shot("sidebar-rerun");

  // Workflow B (Flux at 2048 on a 1 GB card): not this workflow's run in the timeline; will it fit? no.
  await loadApi(big, "flux.json");
  await page.waitForTimeout(800);
  result.openB = await seen();
  await shot("timeline-other-workflow");
  result.fitB = await checkFit();
  await shot("sidebar-will-not-fit");
  // its preflight when queued (posted as the Run button would; the host then refuses the missing files)
  await postPrompt(page, big);
  await page.waitForFunction(() => document.querySelector(".headroom-toast-link"), null, { timeout: 30_000 })
    .catch(() => result.steps.push("no toast button"));
  result.toastButtons = await page.locator(".headroom-toast-link").allTextContents();
  await shot("toast-show-buttons");
  result.afterPreflightB = await seen();
  // N16: our buttons look like buttons on every frontend (rounded, a border, the theme's text colour)
  result.buttons = await page.evaluate(() => [".headroom-free", ".headroom-check-fit", ".headroom-toast-link"].map((sel) => {
    const b = document.querySelector(sel);
    const cs = b && getComputedStyle(b);
    return cs ? { sel, radius: parseFloat(cs.borderTopLeftRadius), border: cs.borderTopStyle, cursor: cs.cursor } : { sel, missing: true };
  }));

  // N14: "Show" from the sidebar, with the timeline open: the node lands in the part of the canvas left visible
  const link = page.locator(".headroom-fit a.headroom-node-link").first();
  if (await link.count()) {
    await link.click();
    await page.waitForTimeout(400);
    result.shown = await page.evaluate((id) => {
      const c = window.app.canvas;
      const n = window.app.graph.getNodeById(Number(id)) ?? window.app.graph.getNodeById(id);
      const r = c.canvas.getBoundingClientRect();
      const y = r.top + (n.pos[1] + n.size[1] / 2 + c.ds.offset[1]) * c.ds.scale;
      const panelTop = document.querySelector(".headroom-timeline")?.getBoundingClientRect().top ?? null;
      return { nodeCentreY: y, panelTop, canvasTop: r.top };
    }, result.afterPreflightB.fitLinks[0]);
    await shot("show-node-above-panel");
  }

  // Back to A (the same graph id): its own verdict and its own run again
  await page.evaluate(async (w) => window.app.loadGraphData(w, true, true, "tiny-sd15.json"), result.workflowA);
  await closeDialogs(page);
  await page.waitForTimeout(1500);
  result.backToA = await seen();
  delete result.workflowA;

  // N7: VRAM Stats' text on the node survives a tab switch, an F5 and a renderer toggle
  const textOf10 = () => page.evaluate(() => {
    const n = window.app.graph.getNodeById(10);
    const w = n?.widgets?.find((w) => w.name === "last run");
    return { widget: w?.value ?? null, graphId: window.app.graph.id };
  });
  result.textAfterSwitch = await textOf10();
  await gotoComfy(page, base);
  await page.waitForTimeout(2500);
  result.textAfterReload = await textOf10();
  await page.evaluate((on) => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", on), !vue);
  await page.waitForTimeout(3000);
  result.textAfterToggle = await textOf10();
  await page.evaluate((on) => window.app.extensionManager.setting.set("Comfy.VueNodes.Enabled", on), vue);
  await page.waitForTimeout(1000);

  // N6: the examples laid out for both renderers (no two nodes overlap on screen)
  result.exampleOverlaps = {};
  for (const [name, workflow] of Object.entries(examples)) {
    await page.evaluate(async ({ w, name }) => window.app.loadGraphData(w, true, true, name), { w: workflow, name });
    await closeDialogs(page);
    await page.waitForTimeout(1500);
    result.exampleOverlaps[name] = await page.evaluate(() => {
      const boxes = vueBoxes();
      if (boxes === null) return "not rendered"; // 1.27's Vue renderer draws no nodes of a graph loaded in it
      function vueBoxes() {
        const dom = [...document.querySelectorAll("[data-node-id]")].map((el) => ({ id: el.dataset.nodeId, r: el.getBoundingClientRect() }));
        if (window.app.extensionManager.setting.get("Comfy.VueNodes.Enabled")) {
          if (dom.length < window.app.graph.nodes.length) return null;
          return dom.map(({ id, r }) => ({ id, x: r.left, y: r.top, w: r.width, h: r.height }));
        }
        const c = window.app.canvas;
        const t = window.LiteGraph?.NODE_TITLE_HEIGHT ?? 30;
        return window.app.graph.nodes.map((n) => ({ id: String(n.id), x: n.pos[0], y: n.pos[1] - t, w: n.size[0], h: n.size[1] + t }));
      }
      const pairs = [];
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const [a, b] = [boxes[i], boxes[j]];
        if (a.x < b.x + b.w - 1 && b.x < a.x + a.w - 1 && a.y < b.y + b.h - 1 && b.y < a.y + a.h - 1) pairs.push([a.id, b.id]);
      }
      return pairs;
    });
  }
  if (vue) await shot("example-offload-loader");

  // N13 and the meter's GPU part: 1024 px wide, a sample as NVML gives it on a GPU
  await page.setViewportSize({ width: 1024, height: 768 });
  await page.evaluate(() => {
    const h = window.headroom.history;
    const last = h.latest() ?? {};
    h.push({ ...last, t: Date.now() / 1000 + 5, device_used: 7.4 * 2 ** 30, device_total: 8 * 2 ** 30, gpu_util: 63, gpu_temp: 71 });
    window.headroom.refresh = () => {}; // keep the fake sample on screen
  });
  await page.waitForTimeout(1500);
  result.meter = await page.evaluate(() => {
    const m = document.querySelector(".headroom-meter");
    if (!m) return null;
    const r = m.getBoundingClientRect();
    const overlaps = [...document.querySelectorAll("button, [role=tab], [role=radio], a, input")]
      .filter((b) => !m.contains(b) && !b.contains(m))
      .map((b) => ({ text: (b.textContent || b.getAttribute("aria-label") || "").trim().slice(0, 30), r: b.getBoundingClientRect() }))
      .filter(({ r: b }) => b.width > 0 && b.height > 0 && b.left < r.right - 1 && b.right > r.left + 1 && b.top < r.bottom - 1 && b.bottom > r.top + 1)
      .map((b) => b.text);
    return { text: m.textContent, width: r.width, overlaps, visible: r.width > 0 };
  });
  await page.screenshot({ path: `${artifacts}/topbar-1024-${renderer}.png`, clip: { x: 0, y: 0, width: 1024, height: 100 } });
  await finish();
} catch (error) {
  await finish(error); // (no process.exit: it would cut the JSON line short on a pipe)
}
