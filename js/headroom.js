// Headroom's frontend entry point, served by ComfyUI from WEB_DIRECTORY at /extensions/<folder>/.
// Imports stay relative: the folder name differs between git clones and registry installs.
// Only extension APIs are used (settings, commands, keybindings, sidebar and bottom-panel tabs, toasts,
// node badges): nothing is injected into the host's own menus, so it works with either node renderer.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { BadgeStore } from "./lib/badges.js";
import { freeVram } from "./lib/free.js";
import { Latest, coalesce, executingNode, liveReport, withProgress } from "./lib/live.js";
import { FitStore, fitAnswer } from "./lib/fit.js";
import { EVENTS, ROUTES, route } from "./lib/names.js";
import { TEXT_NODES, TextStore, addNoWrapStyle, addTextWidget, messageText, showText } from "./lib/nodetext.js";
import { hostSettingsToast, preflightToast, repeatsShown, shownToast } from "./lib/preflight.js";
import { ramBudgetToast, ramBudgetValue } from "./lib/ram.js";
import { answerText, applyRemedy as applyRemedyOn } from "./lib/remedies.js";
import { WorkflowIds } from "./lib/workflow_ids.js";
import { SampleHistory, dueForRedraw } from "./lib/samples.js";
import { MonitorPanel, TimelinePanel } from "./views.js";

const RATE = "Headroom.Monitor.RefreshRate";
const BADGES = "Headroom.Monitor.Badges";
const TOASTS = "Headroom.Monitor.PreflightToasts";
const RAM_BUDGET = "Headroom.RamBudget";
const CARD = "Headroom.Card"; // M6: the card "Will it fit?" checks on ("" = the server's own)
// The Vue node renderer draws a node's badges in a computed that tracks only reactive state: the badge
// function reads this hidden setting (the settings store is reactive), and a new value after node
// records makes every Vue node read its badge again. The classic canvas redraws anyway.
const BADGE_REVISION = "Headroom.Monitor.BadgeRevision";
const RAM_BUDGET_SETTLE_MS = 1200; // the text setting reports every keystroke: send what the user stopped at
// A workflow is known by its graph's id. Frontend 1.27 gives a workflow loaded from an API prompt the nil
// id, which every such workflow shares: those are told apart by the open workflow's path instead, and the
// server's nil workflow_id means "the workflow open when it came".
const NIL_ID = "00000000-0000-0000-0000-000000000000";
// M1: a workflow keeps the key it was first seen with when the frontend gives its graph a new id.
const workflowIds = new WorkflowIds(globalThis.localStorage ?? null);
const workflowKey = () => {
  const id = app.graph?.id;
  const open = app.extensionManager?.workflow?.activeWorkflow;
  const real = id && id !== NIL_ID;
  return workflowIds.key(real ? id : `path:${open?.path ?? ""}`, open, id);
};
const serverWorkflow = (id) => (id && id !== NIL_ID ? workflowIds.resolve(id) : null);
// a run's workflow: the id it was queued with, else (the nil id) the workflow it was seen running in
const runWorkflow = (workflowId, promptId) => serverWorkflow(workflowId) ?? workflowIds.promptKey(promptId);

// One state for the page; exposed on window for debugging and for the browser test.
const state = {
  history: new SampleHistory({ maxAge: 600 }),
  badges: new BadgeStore(workflowKey), // keyed by the workflow on screen (the graph's id)
  fits: new FitStore(workflowKey), // each workflow's last "will it fit?" answer or preflight verdict
  reportsByWorkflow: new Map(), // each workflow's last report: the timeline shows the open workflow's
  noLedger: new Set(), // prompts the RAM guard did not measure (asked once, then not again)
  monitor: null,
  timeline: null,
  report: null,
  lastDraw: 0,
  info: "",
  toasts: [],
  shownToast: null, // the last fit or preflight toast shown ({key, summary, detail, until}): not twice
  running: null, // the prompt the host is executing, while it does
  executing: null, // the node the host runs now: {node, promptId, since, steps} (executing and progress events)
  reports: new Latest(),
  ramBudget: null, // the server's answer to the RAM budget setting: {budget, setting, env, note} or {error}
  ramSent: null, // the setting's value the server has (sent again after a reconnect)
};
window.headroom = state;
state.texts = new TextStore();

// The text nodes' last texts back on the open workflow's nodes (after a tab switch, an F5, a renderer
// toggle); a node that has its text already keeps it.
function restoreTexts() {
  for (const node of app.graph?.nodes ?? []) {
    if (!TEXT_NODES.has(node.comfyClass)) continue;
    const text = state.texts.load(workflowKey(), node);
    if (text !== null) showText(node, { text: [text] });
  }
}
state.restoreTexts = restoreTexts;
let renderer = null; // the node renderer last seen: a toggle builds the nodes' text boxes again
function watchRenderer() {
  const now = setting("Comfy.VueNodes.Enabled", false);
  if (renderer !== null && now !== renderer) setTimeout(restoreTexts, 500);
  renderer = now;
}
state.refresh = () => fetchStatus(); // the sidebar's unload button refreshes the numbers after it

function setting(id, fallback) {
  try {
    const value = app.extensionManager?.setting?.get(id);
    return value === undefined || value === null ? fallback : value;
  } catch {
    return fallback;
  }
}

const refreshSeconds = () => Number(setting(RATE, 1));

function redraw(force = false) {
  // M1: the open workflow's key settles after its graph (1.49 gives an API prompt's workflow a new id at
  // its first switch, and the key follows once the change tracker holds it): the timeline follows it
  if (state.shownKey !== undefined && String(workflowKey()) !== state.shownKey) loadOpenWorkflowReport();
  const now = Date.now();
  if (!force && !dueForRedraw(state.lastDraw, now, refreshSeconds())) return;
  state.lastDraw = now;
  state.monitor?.draw(state.history, state.badges, state.info, state.fits.get());
}

async function fetchStatus() {
  if (refreshSeconds() <= 0) return; // off: no polling, and the server stops sampling for us
  try {
    const response = await api.fetchApi(`${ROUTES.status}?limit=600`);
    if (!response.ok) return;
    const status = await response.json();
    state.history.push(...status.samples, status.latest);
    const hz = status.rate_hz ? `${status.rate_hz} Hz` : "server sampling off";
    state.info = `${hz}${status.sources?.cuda ? "" : " · CPU"}`;
    redraw(true);
  } catch (error) {
    console.warn("Headroom: /headroom/status failed", error);
  }
}

// The RAM guard's per-node ledger of a prompt; null where the guard did not run or failed. The guard
// measures planned prompts only: an unplanned one is not asked (each 404 is a red line in the console).
async function loadRam(promptId, report) {
  if (!report?.plan || state.noLedger.has(promptId)) return null;
  try {
    const response = await api.fetchApi(route("ram", promptId));
    if (response.status === 404) state.noLedger.add(promptId);
    return response.ok ? await response.json() : null;
  } catch {
    return null;
  }
}

// The workflow a report belongs to: the one it was queued from, else (a script's prompt) the open one.
const reportWorkflow = (report) => runWorkflow(report?.workflow_id, report?.prompt_id) ?? workflowKey();

// The timeline shows the open workflow's last run, or says it has none (never another tab's run).
function showTimeline() {
  state.shownKey = String(workflowKey());
  const report = state.reportsByWorkflow.get(state.shownKey) ?? null;
  state.report = liveReport(report, report?.fetchedLive ? report.prompt_id : state.running, state.executing);
  state.timeline?.draw(state.report);
}
// While a node runs, its row's elapsed time moves on (M11): the timeline is drawn again each second.
setInterval(() => state.executing && state.running && showTimeline(), 1000);

async function loadReport(promptId) {
  if (!promptId) return;
  const ticket = state.reports.next();
  try {
    const response = await api.fetchApi(route("report", promptId));
    if (!response.ok) return;
    const report = await response.json();
    // M15: a report fetched while its prompt ran stays live (its nodes not run yet are pending) until
    // the final one replaces it: after the run ended and before that, they read "skipped" for a moment
    report.fetchedLive = state.running === promptId;
    report.ram = await loadRam(promptId, report);
    if (!state.reports.accept(ticket)) return; // a later request was shown already
    const key = String(reportWorkflow(report));
    state.reportsByWorkflow.delete(key); // re-inserted last: the oldest workflow is dropped first
    state.reportsByWorkflow.set(key, report); // made live (pending, running) when shown
    while (state.reportsByWorkflow.size > 32) state.reportsByWorkflow.delete(state.reportsByWorkflow.keys().next().value);
    showTimeline();
  } catch (error) {
    console.warn("Headroom: report failed", error);
  }
}

// While a prompt runs, its report again after node records and residency moves (at most every 0.5 s).
const loadLiveReport = coalesce((promptId) => {
  if (promptId && promptId === state.running) loadReport(promptId);
}, 500);

// After a reload: the badges of each workflow's last run, and the last run's report in the timeline.
async function restoreRuns() {
  try {
    const response = await api.fetchApi(ROUTES.runs);
    if (!response.ok) return;
    const { runs } = await response.json();
    state.badges.restore(runs.map((run) => ({ ...run, workflow_id: runWorkflow(run.workflow_id, run.prompt_id) })));
    app.graph?.setDirtyCanvas(true, false);
    bumpBadges();
    redraw(true);
    if (!state.running) await loadOpenWorkflowReport();
  } catch (error) {
    console.warn("Headroom: restoring the last runs failed", error);
  }
}

// The CUDA allocator's history: armed for the next prompt (the server says why not without CUDA), or the
// last snapshot downloaded, named after its prompt.
async function memoryHistory(download) {
  const toast = (severity, detail) => app.extensionManager?.toast?.add({ severity, summary: "Headroom memory history", detail, life: 6000 });
  try {
    const response = download
      ? await api.fetchApi(ROUTES.memory_history)
      : await api.fetchApi(ROUTES.memory_history, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ record: true }) });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) return toast("warn", body.error ?? `HTTP ${response.status}`);
    if (!download) return toast("info", "The next prompt's allocations will be recorded");
    const last = Object.keys(body.files ?? {}).pop();
    if (!last) return toast("info", body.available ? "No prompt recorded yet" : body.reason);
    window.open(api.apiURL(route("memory_history_file", last)), "_blank");
  } catch (error) {
    console.warn("Headroom: memory history failed", error);
  }
}

// After a reload or a switch of workflow: the open workflow's last run in the timeline, fetched once.
async function loadOpenWorkflowReport() {
  const key = String(workflowKey());
  const promptId = state.badges.workflows.get(key)?.promptId;
  if (promptId && state.reportsByWorkflow.get(key)?.prompt_id !== promptId) await loadReport(promptId);
  else showTimeline();
}

// "Will it fit?": the open workflow's prompt planned on the server's card, without queueing it. The
// answer is a toast, and stays in the sidebar with its workflow until the next check or run.
async function checkFit() {
  const key = workflowKey();
  let answer;
  try {
    const { output } = await app.graphToPrompt();
    const prompt = JSON.stringify(output);
    const response = await api.fetchApi(ROUTES.fit, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: output, ...(setting(CARD, "") ? { gpu: setting(CARD, "") } : {}) }),
    });
    const body = await response.json().catch(() => ({}));
    if (Array.isArray(body?.cards)) state.cards = body.cards;
    answer = fitAnswer(response.ok ? body : { error: body?.error ?? `HTTP ${response.status}` }, "check", app);
    answer.prompt = prompt; // what it answered: a graph change that changes the prompt makes it out of date
  } catch (error) {
    answer = fitAnswer({ error: String(error?.message ?? error) }, "check", app);
  }
  state.fits.set(answer, key);
  if (answer.nodes?.length) state.toasts.push(answer);
  // M16: with the sidebar open, its answer is on screen: the toast says the verdict only, not the same
  // text a second time
  const toast = toastOf(answer);
  if (document.querySelector(".headroom-monitor")?.isConnected && answer.fits !== null) toast.detail = "The answer is in the Headroom sidebar.";
  app.extensionManager?.toast?.add(toast);
  state.shownToast = shownToast(answer, key);
  redraw(true);
  return answer;
}
state.checkFit = checkFit;

// M3: the answer is marked out of date once the workflow's prompt differs from the one it answered (the
// frontend's change tracker says "graphChanged" after each edit; moving a node changes no prompt).
let staleTimer = null;
function checkStale() {
  clearTimeout(staleTimer);
  staleTimer = setTimeout(async () => {
    const answer = state.fits.get();
    if (!answer?.prompt || answer.stale) return;
    try {
      const { output } = await app.graphToPrompt();
      if (JSON.stringify(output) === answer.prompt) return;
    } catch {
      // a graph the frontend cannot turn into a prompt has changed all the same
    }
    answer.stale = true;
    redraw(true);
  }, 150);
}
state.checkStale = checkStale;

// Apply: a remedy's changes on the canvas in one undo step, then the workflow is checked again.
const changeTracker = () =>
  app.extensionManager?.workflow?.activeWorkflow?.changeTracker ?? app.workflowManager?.activeWorkflow?.changeTracker ?? null;
async function applyRemedy(remedy) {
  const { missing } = applyRemedyOn(remedy, { graph: app.graph, canvas: app.canvas, LiteGraph: globalThis.LiteGraph, tracker: changeTracker() });
  if (missing.length) {
    const what = missing.map((c) => `node ${c.node}${c.input ? ` ${c.input}` : ""}`).join(", ");
    app.extensionManager?.toast?.add({ severity: "warn", summary: "Headroom: not all of it could be applied", detail: `Not found on the canvas: ${what}`, life: 8000 });
  }
  return checkFit();
}
state.applyRemedy = applyRemedy;

// Copy: the whole answer as text on the clipboard (a textarea's copy where the Clipboard API is refused).
async function copyAnswer(answer) {
  const text = answerText(answer);
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = Object.assign(document.createElement("textarea"), { value: text });
    document.body.append(area);
    area.select();
    document.execCommand?.("copy");
    area.remove();
  }
  state.copied = text;
  app.extensionManager?.toast?.add({ severity: "info", summary: "Headroom: answer copied", life: 2500 });
  return text;
}
state.copyAnswer = copyAnswer;

// M6: the card to check on, chosen in the sidebar and kept as a setting; "" is the server's own card.
async function chooseCard(name) {
  try {
    await app.extensionManager?.setting?.set(CARD, name);
  } catch (error) {
    console.warn("Headroom: could not keep the card setting", error);
  }
  return checkFit();
}
state.chooseCard = chooseCard;
state.card = () => setting(CARD, "");

// What the host's toast takes (the extra fields stay ours).
const toastOf = (a) => ({ severity: a.severity, summary: a.summary, detail: a.detail, life: a.life });

// The RAM budget setting reaches the server (the page sends it at load, on a change and after a
// reconnect: the server keeps it in memory only). A refused value is said in a toast; that
// HEADROOM_RAM_BUDGET, set on the server, wins is said only when the user changes the setting.
async function sendRamBudget(setValue, { force = false, changed = false } = {}) {
  const value = ramBudgetValue(setValue);
  if (!force && value === state.ramSent) return;
  state.ramSent = value;
  try {
    const response = await api.fetchApi(ROUTES.ram_budget, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ value }),
    });
    const body = await response.json().catch(() => ({}));
    state.ramBudget = response.ok ? body : { error: body?.error ?? `HTTP ${response.status}` };
    if (!response.ok) state.ramSent = null;
    const toast = ramBudgetToast(response.ok, body);
    if (toast && (changed || toast.severity === "error")) app.extensionManager?.toast?.add(toast);
  } catch (error) {
    state.ramSent = null;
    console.warn("Headroom: sending the RAM budget failed", error);
  }
}

const bumpBadges = coalesce(() => {
  if (setting("Comfy.VueNodes.Enabled", false) !== true) return;
  app.extensionManager?.setting?.set(BADGE_REVISION, (Number(setting(BADGE_REVISION, 0)) + 1) % 1e6);
}, 500);

function badgeFor(node) {
  setting(BADGE_REVISION, 0); // read for the Vue renderer's tracking (see BADGE_REVISION)
  // Inside a subgraph, ids repeat the root graph's (the server reports "12:5"): no badge rather than a wrong one.
  const inSubgraph = node.graph && app.graph && node.graph !== app.graph;
  const text = setting(BADGES, true) && !inSubgraph ? state.badges.text(node.id, undefined, node.comfyClass ?? node.type) : "";
  return new window.LGraphBadge({ text, fgColor: "#fff", bgColor: "#37474f" });
}

// The socket opens before extensions' setup(): listening from the import on means no message of ours
// arrives unheard (the frontend warns "Unknown message type" for those).
function listen() {
  api.addEventListener("graphChanged", () => {
    checkStale(); // the change tracker, after each edit
    redraw(true); // and the key of the open workflow may have settled (M1)
  });
  api.addEventListener(EVENTS.sample, ({ detail }) => {
    watchRenderer();
    if (refreshSeconds() <= 0) return;
    state.history.push(detail);
    redraw();
  });
  api.addEventListener(EVENTS.node, ({ detail }) => {
    const workflowId = runWorkflow(detail?.workflow_id, detail?.prompt_id);
    if (!workflowId) workflowIds.notePrompt(detail?.prompt_id, workflowKey()); // queued with the nil id
    state.badges.add({ ...detail, workflow_id: runWorkflow(detail?.workflow_id, detail?.prompt_id) });
    app.graph?.setDirtyCanvas(true, false);
    bumpBadges();
    redraw(true);
    loadLiveReport(detail?.prompt_id);
  });
  // A Stream Model or Stream CLIP node's text: what its model streamed, when the node that ran it ended
  api.addEventListener(EVENTS.node_text, ({ detail }) => {
    if (!detail?.node || typeof detail.text !== "string") return;
    const workflowId = runWorkflow(detail.workflow_id, detail.prompt_id) ?? workflowKey();
    if (String(workflowId) !== String(workflowKey())) return; // another workflow's run: not its nodes
    const node = app.graph?.getNodeById?.(Number(detail.node)) ?? app.graph?.getNodeById?.(detail.node);
    if (!node || !TEXT_NODES.has(node.comfyClass)) return;
    showText(node, { text: [detail.text] });
    state.texts.save(workflowId, node, detail.text);
  });
  api.addEventListener(EVENTS.residency, ({ detail }) => loadLiveReport(detail?.prompt_id));
  api.addEventListener("execution_start", ({ detail }) => {
    state.running = detail?.prompt_id ?? null;
    state.executing = null;
    loadLiveReport(state.running);
  });
  // M9: the node the host starts is running now, not when its record arrives at its end
  api.addEventListener("executing", ({ detail }) => {
    state.executing = executingNode(state.executing, detail);
    // the report asked for at execution_start may have come before the server knew the run: ask again
    // (coalesced), else the first node's row only appears when its record comes, at its end
    if (state.running && state.report?.prompt_id !== state.running) loadLiveReport(state.running);
    showTimeline();
  });
  api.addEventListener("progress", ({ detail }) => {
    state.executing = withProgress(state.executing, detail);
  });
  api.addEventListener(EVENTS.preflight, ({ detail }) => {
    const tip = hostSettingsToast(detail); // the host's own settings that fit this workflow better
    if (tip && setting(TOASTS, true)) app.extensionManager?.toast?.add(tip);
    // the verdict of the workflow just queued (the open one) stays in the sidebar until the next check
    if (detail?.fits === true || detail?.fits === false) state.fits.set(fitAnswer({ verdict: detail }, "run", app));
    redraw(true);
    const toast = preflightToast(detail);
    if (!toast || !setting(TOASTS, true)) return;
    state.toasts.push(toast);
    if (state.toasts.length > 20) state.toasts.shift(); // kept for the browser test and debugging
    if (repeatsShown(state.shownToast, toast, workflowKey())) return; // "Will it fit?" just said it
    app.extensionManager?.toast?.add(toastOf(toast));
    state.shownToast = shownToast(toast, workflowKey());
  });
  for (const event of ["execution_success", "execution_error", "execution_interrupted"]) {
    api.addEventListener(event, ({ detail }) => {
      if (state.running === detail?.prompt_id) state.running = state.executing = null;
      loadReport(detail?.prompt_id);
    });
  }
  api.addEventListener("reconnected", () => {
    fetchStatus(); // the server's sampler restarts on demand
    sendRamBudget(setting(RAM_BUDGET, "auto"), { force: true }); // a restarted server forgot the setting
  });
}
listen();

app.registerExtension({
  name: "Headroom.Core",
  aboutPageBadges: [
    { label: "Headroom", url: "https://github.com/comfyui-headroom/comfyui-headroom", icon: "pi pi-server" },
  ],
  settings: [
    {
      id: RATE,
      name: "Memory panel refresh (seconds, 0 = off)",
      category: ["Headroom", "Monitor", "Refresh"],
      type: "slider",
      attrs: { min: 0, max: 5, step: 0.25 },
      defaultValue: 1,
      tooltip: "How often the memory chart redraws; 0 stops the panel (the server samples while any browser is connected).",
      // called before the store holds the new value: read the value given, after the store is updated
      onChange: (value) => Number(value) > 0 && setTimeout(fetchStatus, 0),
    },
    {
      id: BADGES,
      name: "Show peak memory badges on nodes after a run",
      category: ["Headroom", "Monitor", "Badges"],
      type: "boolean",
      defaultValue: true,
      onChange: () => app.graph?.setDirtyCanvas(true, false),
    },
    { id: BADGE_REVISION, name: "Headroom badge revision (internal)", type: "hidden", defaultValue: 0 },
    {
      id: CARD,
      name: "Card to check on (empty: this server's card)",
      category: ["Headroom", "Monitor", "Card"],
      type: "text",
      defaultValue: "",
      tooltip: "\"Will it fit?\" plans for this card instead of the server's (a server with no GPU has none): a name of Headroom's card table, such as RTX 4060. Also chosen in the Headroom sidebar.",
    },
    {
      id: TOASTS,
      name: "Warn before a run that will run out of VRAM",
      category: ["Headroom", "Monitor", "Preflight"],
      type: "boolean",
      defaultValue: true,
    },
    {
      id: RAM_BUDGET,
      name: "RAM budget (auto, or GB such as 24)",
      category: ["Headroom", "Memory", "RAM budget"],
      type: "text",
      defaultValue: "auto",
      tooltip: "The most system RAM (anonymous + pinned) ComfyUI may hold: Headroom moves idle models to disk (memory-mapped) to stay within it. auto: what the machine leaves free. HEADROOM_RAM_BUDGET on the server wins over this setting.",
      // the frontend also calls it once with the stored value when the setting is registered (no old value)
      onChange: (value, old) => {
        clearTimeout(state.ramTimer);
        if (old === undefined) return void sendRamBudget(value); // the stored value, once at load
        state.ramTimer = setTimeout(() => sendRamBudget(value, { changed: true }), RAM_BUDGET_SETTLE_MS);
      },
    },
  ],
  commands: [
    { id: "Headroom.CheckFit", label: "Will it fit? (check the open workflow on this card)", icon: "pi pi-check-circle", function: () => checkFit() },
    { id: "Headroom.FreeVRAM", label: "Free VRAM (unload models)", icon: "pi pi-eraser", function: () => freeVram({ api, app, after: fetchStatus }) },
    { id: "Headroom.RecordMemoryHistory", label: "Record the CUDA memory history of the next prompt", icon: "pi pi-history", function: () => memoryHistory(false) },
    { id: "Headroom.DownloadMemoryHistory", label: "Download the last CUDA memory history (for pytorch.org/memory_viz)", icon: "pi pi-download", function: () => memoryHistory(true) },
  ],
  keybindings: [{ combo: { key: "f", alt: true, shift: true }, commandId: "Headroom.FreeVRAM" }],
  bottomPanelTabs: [
    {
      id: "headroom-timeline",
      title: "Residency timeline",
      type: "custom",
      render: (element) => {
        const url = (promptId, format) =>
          api.apiURL(`${route("report", promptId)}?format=${format}`);
        state.timeline = new TimelinePanel(element, url);
        showTimeline();
      },
    },
  ],
  async setup() {
    addNoWrapStyle(); // M18: the Vue renderer's text boxes of our nodes do not wrap
    app.extensionManager?.registerSidebarTab?.({
      id: "headroom-monitor",
      icon: "pi pi-chart-line",
      title: "Headroom",
      tooltip: "Headroom memory monitor",
      type: "custom",
      render: (element) => {
        state.monitor = new MonitorPanel(element, { checkFit, applyRemedy, copyAnswer, chooseCard, cards: () => state.cards ?? [], card: state.card });
        fetchStatus();
      },
    });
    fetchStatus();
    restoreRuns();
    sendRamBudget(setting(RAM_BUDGET, "auto"));
  },
  afterConfigureGraph() {
    bumpBadges(); // the Vue nodes of the workflow just opened read their badges again
    redraw(true); // another workflow: the sidebar lists its own last run and its own verdict
    loadOpenWorkflowReport(); // and the timeline its own last run
    setTimeout(restoreTexts, 0); // and the text nodes their last text (after the nodes are on screen)
  },
  beforeRegisterNodeDef(nodeType, nodeData) {
    if (!TEXT_NODES.has(nodeData?.name)) return;
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (output) {
      onExecuted?.apply(this, arguments);
      showText(this, output);
      const text = messageText(output);
      if (text !== null) state.texts.save(workflowKey(), this, text);
    };
  },
  nodeCreated(node) {
    if (TEXT_NODES.has(node.comfyClass)) addTextWidget(node);
    if (!window.LGraphBadge || !Array.isArray(node.badges)) return;
    const badge = () => badgeFor(node);
    badge.headroom = true;
    node.badges.push(badge);
  },
});
