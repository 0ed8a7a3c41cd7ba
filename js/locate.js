// Toasts that name nodes get buttons that find them: a preflight toast (lib/preflight.js) carries `nodes`;
// once the host shows it, a "Show <name>" button per node selects the node and centres the canvas on it.
// The host renders toasts itself (text only), so the buttons are added to its DOM when it appears.
import { app } from "../../scripts/app.js";
import { locateNode } from "./lib/nodes.js";
import { BUTTON_STYLE } from "./views.js";

// A toast on screen, whatever renders it: PrimeVue's (frontend 1.27-1.5x) or the list items of 1.58's own
// toaster (role=alert, data-testid=toast). Ours are found by their summary text.
const TOAST = ".p-toast-message, [data-testid='toast']";

function summaryOf(message) {
  const prime = message.querySelector(".p-toast-summary");
  if (prime) return prime.textContent ?? "";
  const toasts = window.headroom?.toasts ?? [];
  const texts = [...message.querySelectorAll("div")].map((d) => d.textContent ?? "");
  return texts.find((text) => toasts.some((t) => t.summary === text)) ?? "";
}

function decorate(message) {
  if (message.dataset.headroomLinked) return;
  const summary = summaryOf(message);
  const toast = [...(window.headroom?.toasts ?? [])].reverse().find((t) => t.summary === summary && t.nodes?.length);
  if (!toast) return;
  message.dataset.headroomLinked = "1";
  const row = document.createElement("div");
  row.className = "headroom-toast-links";
  // gridColumn: 1.58's toast is a grid (icon, text, close); the row goes under the text. Ignored elsewhere.
  Object.assign(row.style, { display: "flex", flexWrap: "wrap", gap: "6px", marginTop: "6px", gridColumn: "2 / 3", pointerEvents: "auto" });
  for (const node of toast.nodes) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "headroom-toast-link p-button p-button-sm p-button-text";
    button.dataset.node = node.id;
    button.textContent = `Show ${node.text}`;
    Object.assign(button.style, BUTTON_STYLE);
    button.addEventListener("click", (event) => {
      event.stopPropagation();
      locateNode(app, node.id, node.classType);
    });
    row.append(button);
  }
  const prime = message.querySelector(".p-toast-detail") ?? message.querySelector(".p-toast-message-text");
  (prime ?? message.querySelector(".contents") ?? message).append(row);
}

app.registerExtension({
  name: "Headroom.ToastLinks",
  setup() {
    // Runs on every DOM change of the page: look for toasts only when one was added.
    const isToast = (n) => n.nodeType === 1 && (n.matches(TOAST) || n.querySelector(TOAST));
    const observer = new MutationObserver((mutations) => {
      if (!mutations.some((m) => [...m.addedNodes].some(isToast))) return;
      for (const message of document.querySelectorAll(TOAST)) decorate(message);
    });
    observer.observe(document.body, { childList: true, subtree: true });
  },
});
