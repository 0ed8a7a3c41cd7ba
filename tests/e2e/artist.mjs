// What an artist sees on the frontend under test (#29), in one renderer: "Will it fit?" both ways, the
// verdict kept with its workflow, the timeline of the open workflow only, a running node while it runs,
// the RAM budget setting typed key by key, toast buttons, "Show" clear of the bottom panel, the sidebar's
// per-node list, and the top-bar meter at 1024 px with GPU load and temperature.
// Usage: node artist.mjs BASE_URL ARTIFACTS_DIR PROMPT.json BIG_PROMPT.json RENDERER(classic|vue) EXAMPLE.json...
// Prints one JSON line with what it saw; tests/e2e/test_artist.py asserts on it.
import { readFileSync } from "node:fs";
import { closeDialogs, gotoComfy, openComfy, postPrompt, setRenderer } from "./lib/page.mjs";

const LONG = 180_000;
const [base, artifacts, promptPath, bigPath, renderer] = process.argv.slice(2);
const prompt = JSON.parse(readFileSync(promptPath, "utf8"));
const big = JSON.parse(readFileSync(bigPath, "utf8"));
const examples = Object.fromEntries(process.argv.slice(7).map((f) => [f.split("/").pop(), JSON.parse(readFileSync(f, "utf8"))]));
const vue = renderer === "vue";
const { page, result, finish } = await openComfy(base, { artifacts, vue });
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

// Each check's steps run as one named step: a step that throws (a feature the served pack lacks, when
// HEADROOM_E2E_PACK is an older checkout) is recorded in result.stepErrors and the next step still runs, so
// each test fails on its own item. Waits are for what the page shows, bounded, never a fixed sleep.
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
// Wait until fn(arg) is true in the page; false when it is not within ms (what the test then reads says why).
function until(fn, arg, ms = 20_000) {
  return page.waitForFunction(fn, arg, { timeout: ms, polling: 100 }).then(() => true, () => false);
}
const ENDED = ["execution_success", "execution_error", "execution_interrupted"];
// Queue the open workflow as Run does; resolves with {event, promptId} when that run has ended.
function queueAndWait() {
  return page.evaluate((names) => new Promise((resolve) => {
    const { api } = window.comfyAPI.api;
    for (const name of names) api.addEventListener(name, ({ detail }) => resolve({ event: name, promptId: detail?.prompt_id }), { once: true });
    window.app.queuePrompt(0, 1);
  }), ENDED);
}
const monitorText = () => {
  const w = window.app.graph.getNodeById(10)?.widgets?.find((w) => w.name === "last run");
  return typeof w?.value === "string" && w.value.startsWith("Headroom memory at node 10");
};

async function checkFit() {
  const before = await page.evaluate(() => window.headroom.fits.get()?.at ?? 0);
  await command("Headroom.CheckFit");
  await page.waitForFunction((t) => (window.headroom.fits.get()?.at ?? 0) > t, before, { timeout: LONG });
  await until(() => document.querySelector(".headroom-fit")?.dataset.fits, null, 10_000); // the sidebar drew it
  return seen();
}

async function toastTexts() {
  return page.evaluate(() => [...document.querySelectorAll(".p-toast-message, [data-testid='toast']")].map((t) => t.textContent));
}

try {
  result.frontend = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  result.renderer = renderer;
  await step("N8 new VRAM Stats size", async () => {
    result.newMonitorSize = await page.evaluate(async () => {
      const node = window.LiteGraph.createNode("HeadroomMemoryMonitor");
      window.app.graph.add(node);
      await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 50))); // its onAdded ran
      const size = [...node.size];
      window.app.graph.remove(node);
      return size;
    });
  });
  await command("Workspace.ToggleSidebarTab.headroom-monitor");
  await page.locator(".headroom-monitor").waitFor({ timeout: LONG });

  // N4: the RAM budget typed key by key, as the settings dialog reports it (all keys typed in the page,
  // 60 ms apart, so a slow round trip to the browser does not split the typing)
  const type = (text) => page.evaluate(async (text) => {
    for (let i = 1; i <= text.length; i++) {
      window.app.extensionManager.setting.set("Headroom.RamBudget", text.slice(0, i));
      await new Promise((resolve) => setTimeout(resolve, 60));
    }
  }, text);
  const postsGrow = async (from, ms) => {
    for (const end = Date.now() + ms; Date.now() < end && result.ramBudgetPosts.length <= from;) await page.waitForTimeout(100);
  };
  await step("N4 RAM budget typed", async () => {
    result.ramBudgetPosts.length = 0;
    await type("auto");
    await page.waitForTimeout(2500); // the settle time (1.2 s) and more: nothing should be sent
    result.ramAutoPosts = [...result.ramBudgetPosts];
    result.ramAutoToasts = (await toastTexts()).filter((t) => /RAM budget/.test(t));
    await type("16GB");
    await postsGrow(result.ramAutoPosts.length, 15_000); // sent once typing stopped
    await page.waitForTimeout(1500); // and nothing after it
    result.ram16Posts = result.ramBudgetPosts.slice(result.ramAutoPosts.length);
    result.ramBudgetNow = await page.evaluate(() => window.headroom.ramBudget);
    const before = result.ramBudgetPosts.length;
    await page.evaluate(() => window.app.extensionManager.setting.set("Headroom.RamBudget", "auto"));
    await postsGrow(before, 15_000);
  });

  // Workflow A (the tiny SD1.5 one): will it fit? Then its run, the timeline watched while it runs.
  await loadApi(prompt, "tiny-sd15.json");
  await step("fit A", async () => {
    result.fitA = await checkFit();
    await shot("sidebar-fits");
  });
  await command("Workspace.ToggleBottomPanelTab.headroom-timeline");
  await page.locator(".headroom-timeline").waitFor({ timeout: LONG });
  await step("N1 run A watched", async () => {
    result.liveStates = [];
    let done = null;
    queueAndWait().then((v) => { done = v; });
    let shotWhileRunning = false;
    while (!done) {
      const states = (await seen()).timelineRows.map((r) => r.state);
      result.liveStates.push(states.join(","));
      if (!shotWhileRunning && states.includes("running")) {
        shotWhileRunning = true;
        await shot("timeline-running");
      }
      await page.waitForTimeout(150);
    }
    result.runA = done;
  });
  await step("N15 Stream Model text", async () => {
    const said = () => {
      const v = window.app.graph.getNodeById(11)?.widgets?.find((w) => w.name === "last run")?.value;
      return typeof v === "string" && v.length > 0;
    };
    await until(said, null, 20_000);
    result.streamText = await page.evaluate(() => window.app.graph.getNodeById(11)?.widgets?.find((w) => w.name === "last run")?.value ?? null);
  });
  await until(() => document.querySelectorAll(".headroom-timeline tr.headroom-row").length >= 9, null, 20_000);
  result.afterRunA = await seen();
  result.workflowA = await page.evaluate(() => window.app.graph.serialize());

  // N14: a node found from the timeline (the open bottom panel) lands in the canvas part left visible
  await step("N14 show above the panel", async () => {
    await page.locator('.headroom-timeline tr.headroom-row[data-node="10"] a.headroom-node-link').click({ timeout: 10_000 });
    await page.waitForTimeout(400); // one frame for the canvas to move (the position is read, not timed)
    result.shown = await page.evaluate(() => {
      const c = window.app.canvas;
      const n = window.app.graph.getNodeById(10);
      const r = c.canvas.getBoundingClientRect();
      const y = r.top + (n.pos[1] + n.size[1] / 2 + c.ds.offset[1]) * c.ds.scale;
      const panelTop = document.querySelector(".headroom-timeline")?.getBoundingClientRect().top ?? null;
      return { nodeCentreY: y, panelTop, canvasTop: r.top, selected: Boolean(c.selected_nodes?.[n.id]) };
    });
    await shot("show-node-above-panel");
  });

  // again: the host serves most nodes from its cache (N17: the sidebar's list has no bare colon)
  await step("N17 N3 re-run A", async () => {
    const before = await page.evaluate(() => window.headroom.badges.text("10"));
    result.rerunA = await queueAndWait();
    // the re-run's report reached the sidebar and the badges (the monitor node runs every time)
    await until((b) => window.headroom.badges.text("10") !== b && document.querySelectorAll(".headroom-node-row").length > 0, before, 20_000);
    result.afterRerunA = await seen();
    // N3: in the Vue renderer, the badge on the node is this run's
    await until(() => {
      const el = document.querySelector('[data-node-id="10"]');
      const text = window.headroom.badges.text("10");
      return !el || (text && el.textContent.includes(text));
    }, null, 10_000);
    result.nodeBadge = await page.evaluate(() => {
      const el = document.querySelector('[data-node-id="10"]');
      return { dom: el?.textContent ?? null, expected: window.headroom.badges.text("10") };
    });
    await shot("sidebar-rerun");
  });

  // Workflow B (Flux at 2048 on a 1 GB card): not this workflow's run in the timeline; will it fit? no.
  await loadApi(big, "flux.json");
  await step("N9 open B", async () => {
    // the timeline redrew for B: no row of A's run (A's rows name nodes B lacks)
    await until(() => !document.querySelector(".headroom-timeline tr.headroom-row") || document.querySelector(".headroom-timeline-empty"), null, 10_000);
    result.openB = await seen();
    await shot("timeline-other-workflow");
  });
  await step("fit B", async () => {
    result.fitB = await checkFit();
    await shot("sidebar-will-not-fit");
    // N2: the answer's toast offers a button per node it names
    if (!(await until(() => document.querySelector(".headroom-toast-link"), null, 30_000))) result.steps.push("no toast button");
    result.toastButtons = await page.locator(".headroom-toast-link").allTextContents();
    // N16: our buttons look like buttons on every frontend (rounded, a border, a pointer)
    result.buttons = await page.evaluate(() => [".headroom-free", ".headroom-check-fit", ".headroom-toast-link"].map((sel) => {
      const b = document.querySelector(sel);
      const cs = b && getComputedStyle(b);
      return cs ? { sel, radius: parseFloat(cs.borderTopLeftRadius), border: cs.borderTopStyle, cursor: cs.cursor } : { sel, missing: true };
    }));
    await shot("toast-show-buttons");
  });
  // B queued (posted as the Run button would): the host refuses it (its model files are not on this
  // server), so its preflight is dropped (#43) and the fit check's warning, shown moments ago, is not
  // toasted a second time; the sidebar keeps B's verdict
  await step("N2 N10 preflight of B", async () => {
    const toasts = await page.evaluate(() => window.headroom.toasts.length);
    const summary = await page.evaluate(() => window.headroom.toasts.at(-1)?.summary ?? "");
    await postPrompt(page, big);
    await until(() => document.querySelector(".headroom-fit")?.dataset.fits === "false", null, 10_000);
    result.afterPreflightB = await seen();
    await until((n) => window.headroom.toasts.length > n, toasts, 5_000);
    result.refusedToasts = (await page.evaluate(() => window.headroom.toasts.length)) - toasts;
    result.sameWarningToasts = (await toastTexts()).filter((t) => summary && t.includes(summary)).length;
  });
  // a node link of the verdict finds the node (the screenshot of the sidebar with the panel open)
  await step("fit B link", async () => {
    const link = page.locator(".headroom-fit a.headroom-node-link").first();
    if (await link.count()) {
      await link.click();
      await page.waitForTimeout(400);
      await shot("sidebar-will-not-fit-found");
    }
  });

  // Back to A (the same graph id): its own verdict and its own run again
  await page.evaluate(async (w) => window.app.loadGraphData(w, true, true, "tiny-sd15.json"), result.workflowA);
  await closeDialogs(page);
  await step("N9 N10 back to A", async () => {
    await until(() => document.querySelectorAll(".headroom-timeline tr.headroom-row").length >= 9 && document.querySelector(".headroom-fit")?.dataset.fits === "true", null, 15_000);
    result.backToA = await seen();
  });
  delete result.workflowA;

  // N7: VRAM Stats' text on the node survives a tab switch, an F5 and a renderer toggle
  const textOf10 = () => page.evaluate(() => {
    const n = window.app.graph.getNodeById(10);
    const w = n?.widgets?.find((w) => w.name === "last run");
    return { widget: w?.value ?? null, graphId: window.app.graph.id };
  });
  await step("N7 node text kept", async () => {
    await until(monitorText, null, 10_000);
    result.textAfterSwitch = await textOf10();
    await gotoComfy(page, base);
    await until(monitorText, null, 20_000);
    result.textAfterReload = await textOf10();
    await setRenderer(page, !vue);
    await until(monitorText, null, 20_000);
    result.textAfterToggle = await textOf10();
    await setRenderer(page, vue);
  });

  // N6: the examples laid out for both renderers (no two nodes overlap on screen)
  await step("N6 examples", async () => {
    result.exampleOverlaps = {};
    for (const [name, workflow] of Object.entries(examples)) {
      await page.evaluate(async ({ w, name }) => window.app.loadGraphData(w, true, true, name), { w: workflow, name });
      await closeDialogs(page);
      // the Vue renderer drew every node (1.27's draws none of a workflow loaded while it is on: bounded)
      await until(() => !window.app.extensionManager.setting.get("Comfy.VueNodes.Enabled")
        || document.querySelectorAll("[data-node-id]").length >= window.app.graph.nodes.length, null, 15_000);
      await page.waitForTimeout(500); // the nodes measured their widgets (sizes are read, not timed)
      result.exampleOverlaps[name] = await page.evaluate(() => {
        const boxes = vueBoxes();
        if (boxes === null) return "not rendered"; // 1.27's Vue renderer draws no nodes of a graph loaded in it
        function vueBoxes() {
          const dom = [...document.querySelectorAll("[data-node-id]")].map((el) => ({ id: el.dataset.nodeId, r: el.getBoundingClientRect() }));
          if (window.app.extensionManager.setting.get("Comfy.VueNodes.Enabled")) {
            if (dom.length < window.app.graph.nodes.length) return null;
            return dom.map(({ id, r }) => ({ id, x: r.left, y: r.top, w: r.width, h: r.height }));
          }
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
  });

  // N13 and the meter's GPU part: 1024 px wide, a sample as NVML gives it on a GPU
  await step("N13 meter at 1024 px", async () => {
    await page.setViewportSize({ width: 1024, height: 768 });
    await page.evaluate(() => {
      const h = window.headroom.history;
      const last = h.latest() ?? {};
      h.push({ ...last, t: Date.now() / 1000 + 5, device_used: 7.4 * 2 ** 30, device_total: 8 * 2 ** 30, gpu_util: 63, gpu_temp: 71 });
      window.headroom.refresh = () => {}; // keep the fake sample on screen
    });
    await until(() => /VRAM 7\.4/.test(document.querySelector(".headroom-meter")?.textContent ?? ""), null, 10_000);
    await page.waitForTimeout(500); // the meter narrowed to the room it has (its width is read, not timed)
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
  });
  await finish();
} catch (error) {
  await finish(error); // (no process.exit: it would cut the JSON line short on a pipe)
}
