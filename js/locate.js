// Toasts that name nodes get buttons that find them: a preflight toast (lib/preflight.js) carries `nodes`;
// once the host shows it, a "Show <name>" button per node selects the node and centres the canvas on it.
// The host renders toasts itself (text only), so the buttons are added to its DOM when it appears.
import { app } from "../../scripts/app.js";
import { locateNode } from "./lib/nodes.js";

function decorate(message) {
  if (message.dataset.headroomLinked) return;
  const summary = message.querySelector(".p-toast-summary")?.textContent ?? "";
  const toast = [...(window.headroom?.toasts ?? [])].reverse().find((t) => t.summary === summary && t.nodes?.length);
  if (!toast) return;
  message.dataset.headroomLinked = "1";
  const row = document.createElement("div");
  row.className = "headroom-toast-links";
  Object.assign(row.style, { display: "flex", flexWrap: "wrap", gap: "6px", marginTop: "6px" });
  for (const node of toast.nodes) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "headroom-toast-link p-button p-button-sm p-button-text";
    button.dataset.node = node.id;
    button.textContent = `Show ${node.text}`;
    button.addEventListener("click", (event) => {
      event.stopPropagation();
      locateNode(app, node.id, node.classType);
    });
    row.append(button);
  }
  (message.querySelector(".p-toast-detail") ?? message.querySelector(".p-toast-message-text") ?? message).append(row);
}

app.registerExtension({
  name: "Headroom.ToastLinks",
  setup() {
    // Runs on every DOM change of the page: look for toasts only when one was added.
    const isToast = (n) => n.nodeType === 1 && (n.matches(".p-toast-message") || n.querySelector(".p-toast-message"));
    const observer = new MutationObserver((mutations) => {
      if (!mutations.some((m) => [...m.addedNodes].some(isToast))) return;
      for (const message of document.querySelectorAll(".p-toast-message")) decorate(message);
    });
    observer.observe(document.body, { childList: true, subtree: true });
  },
});
