// Preflight warnings (the headroom.preflight event) as toasts. Pure (unit-tested under Node): node names
// come from `app` when given (the open workflow's titles), else from the server's message.
import { nameOf, renameNodes } from "./nodes.js";

/** A toast for app.extensionManager.toast.add, or null when the prompt fits or was not checked.
 * It carries `nodes` ([{id, classType, text}]): the failing node and the one that sets its latent, which
 * the page turns into buttons that find them (js/locate.js). */
export function preflightToast(event, app = globalThis.app) {
  if (!event || event.fits !== false) return null;
  const label = (id, classType) => {
    const name = nameOf(app, id, classType);
    return name.found ? `${name.text} (#${id})` : null;
  };
  const failing = event.node ? nameOf(app, event.node, event.class_type) : null;
  const where = failing ? (failing.found ? failing.text : `${event.class_type ?? "node"} (node ${event.node})`) : "this workflow";
  const nodes = [];
  if (event.node) nodes.push({ id: String(event.node), classType: event.class_type ?? "", text: where });
  const driver = event.driver;
  if (driver?.node) {
    const name = nameOf(app, driver.node, driver.class_type);
    nodes.push({ id: String(driver.node), classType: driver.class_type, text: name.found ? name.text : `${driver.class_type} #${driver.node}` });
  }
  const error = event.level === "error";
  return {
    severity: error ? "error" : "warn",
    summary: `Headroom: ${where} will run out of VRAM${error ? ", even with Headroom" : ""}`,
    detail: renameNodes(event.message, label),
    life: 12000,
    nodes,
  };
}

/** A toast suggesting the host's own settings that fit this workflow better (the verdict's host.suggest:
 * one line each, with the figure it comes from), or null when there is none. */
export function hostSettingsToast(event) {
  const lines = event?.host?.suggest ?? [];
  if (!lines.length) return null;
  return { severity: "info", summary: `Headroom: for ${event.host.settings}`, detail: lines.join("\n"), life: 12000 };
}

/** Whether `toast` repeats one still on screen: the same summary and detail shown for the same workflow
 * (`key`) less than its life ago. A "Will it fit?" answer followed by Run gives the preflight's identical
 * warning; the second toast says nothing new (the sidebar keeps the verdict). `shown`: {key, summary,
 * detail, until} of the last toast, or null. */
export function repeatsShown(shown, toast, key, now = Date.now()) {
  return Boolean(shown && toast && shown.key === key && now < shown.until
    && shown.summary === toast.summary && shown.detail === toast.detail);
}

/** What `repeatsShown` compares later: the toast just shown for workflow `key`. */
export function shownToast(toast, key, now = Date.now()) {
  return { key, summary: toast.summary, detail: toast.detail, until: now + (toast.life ?? 12000) };
}
