// Text a node returns for its own display ({"ui": {"text": [...]}}): the streaming sampler's status line and
// the Memory Monitor's report, shown on the node in a read-only text box after it runs, under either node
// renderer. The document is passed in (unit-tested under Node with fakes).

import { NODE_IDS } from "./names.js";

/** The nodes whose ui text is shown, by node id. */
export const TEXT_NODES = new Set([
  NODE_IDS.streaming_sampler,
  NODE_IDS.memory_monitor,
  NODE_IDS.stream_model,
  NODE_IDS.stream_clip,
  NODE_IDS.tiled_vae_decode, // M19: tiled or whole, its tiles and what sized them, or why the host decoded
]);
// The size a new node gets, so that its text shows: VRAM Stats' report is about 15 lines; the sampler's
// status one or two; the Tiled VAE Decode's about 10. A workflow's saved sizes win (they are set after the
// node is created).
const NEW_SIZE = {
  [NODE_IDS.memory_monitor]: [460, 360],
  [NODE_IDS.streaming_sampler]: [320, 0],
  [NODE_IDS.tiled_vae_decode]: [420, 300],
};
export const TEXT_WIDGET = "last run"; // also the Vue renderer's placeholder

// M18 in the Vue renderer: it shows the widget in a text box of its own, which wraps long lines, so VRAM
// Stats' table rows broke in two; they run on sideways there too. That box is found by its placeholder
// (1.27-1.41) or as the text box of a widget of one of our text nodes (1.49+ mark a widget's element with
// its node's type; these nodes have no other text box).
export const NO_WRAP_STYLE_ID = "headroom-node-text-style";
export const NO_WRAP_CSS = [
  `[data-node-id] textarea[placeholder="${TEXT_WIDGET}"]`,
  ...[...TEXT_NODES].map((type) => `[data-node-id] [node-type="${type}"] textarea`),
].join(",\n") + " { white-space: pre; overflow-wrap: normal; }";

/** Add the page's one style rule for the Vue renderer's text boxes (once); false when it is there. */
export function addNoWrapStyle(doc = globalThis.document) {
  if (!doc?.head || doc.getElementById(NO_WRAP_STYLE_ID)) return false;
  const style = doc.createElement("style");
  style.id = NO_WRAP_STYLE_ID;
  style.textContent = NO_WRAP_CSS;
  doc.head.append(style);
  return true;
}

/** The ui text of an executed message as one string; null when the message has none. */
export function messageText(output) {
  const text = output?.text;
  if (text === null || text === undefined) return null;
  return (Array.isArray(text) ? text : [text]).map(String).join("\n");
}

/**
 * Add the read-only text box to a node when it is created, so that both renderers know it from the start
 * (the Vue renderer reads a node's widgets once). It is the node's own DOM widget (node.addDOMWidget, the
 * frontend's public widget API) of the type a multiline STRING has, "customtext": the classic canvas
 * shows this textarea, the Vue renderer its own text box of that type. Neither saved in the workflow nor
 * sent as an input. `doc`: the page's document (a fake in tests). Returns the widget, or null on a
 * frontend without DOM widgets.
 */
export function addTextWidget(node, doc = globalThis.document) {
  if (typeof node.addDOMWidget !== "function" || !doc) return null;
  const box = doc.createElement("textarea");
  box.className = "comfy-multiline-input headroom-node-text";
  box.placeholder = TEXT_WIDGET;
  box.readOnly = true;
  box.spellcheck = false;
  // M18: VRAM Stats' report is a table: its rows scroll sideways in a narrow node, they do not wrap
  box.wrap = "off";
  if (box.style) Object.assign(box.style, { whiteSpace: "pre", overflowX: "auto" });
  // readonly (1.27) / read_only (1.49+) and placeholder: the Vue renderer passes options to its textarea;
  // minNodeSize: a status line needs less room than the host's 400x200 for a text box (still resizable)
  let widget = null;
  widget = node.addDOMWidget(TEXT_WIDGET, "customtext", box, {
    getValue: () => box.value,
    setValue: (value) => {
      box.value = value ?? "";
      // The Vue renderer of 1.49+ draws a widget's state, which the frontend's own text widgets update
      // with their value and a DOM widget's value setter does not: without this the Vue node's box
      // stays empty. (Fails open: no state, no copy.)
      if (widget?._state && typeof widget._state === "object") widget._state.value = box.value;
    },
    serialize: false,
    readonly: true,
    read_only: true,
    placeholder: TEXT_WIDGET,
    minNodeSize: [300, 80],
  });
  widget.serialize = false; // not in the workflow's widgets_values
  widget.inputEl = box;
  newNodeSize(node);
  return widget;
}

/**
 * A new node's size, big enough for its text. The host sizes a node after its extensions' nodeCreated,
 * and a workflow's node gets its saved size from configure() right after: so the size is set a moment
 * later, on nodes that were not configured (made from the node library or search, not loaded).
 */
export function newNodeSize(node, later = (f) => Promise.resolve().then(f)) {
  const size = NEW_SIZE[node.comfyClass ?? node.type];
  if (!size) return;
  const onConfigure = node.onConfigure;
  node.onConfigure = function () {
    this.headroomConfigured = true;
    return onConfigure?.apply(this, arguments);
  };
  later(() => {
    if (node.headroomConfigured || !(node.size?.length >= 2)) return; // litegraph's size: a typed array
    const wanted = [Math.max(node.size[0], size[0]), Math.max(node.size[1], size[1])];
    if (typeof node.setSize === "function") node.setSize(wanted);
    else node.size = wanted;
  });
}

/** Show a message's text in the node's box; false when there is no box or no text. `root`: the page. */
export function showText(node, output, root = globalThis.document) {
  const text = messageText(output);
  const widget = node.widgets?.find((w) => w.name === TEXT_WIDGET);
  if (!widget || text === null) return false;
  // The Vue renderer wraps a widget's callback to copy the value into its own state; the classic one reads
  // widget.value (the text area) when it draws.
  if (typeof widget.callback === "function") widget.callback(text);
  if (widget.value !== text) widget.value = text;
  // The Vue renderer of frontend 1.27 fills a text box from that state only when it creates the box (its
  // watch of the value never fires): the box already on screen gets the text here.
  const id = String(node.id).replace(/["\\]/g, "\\$&");
  const box = root?.querySelector?.(`[data-node-id="${id}"] textarea[placeholder="${TEXT_WIDGET}"]`);
  if (box && box.value !== text) box.value = text;
  return true;
}

/**
 * The last text of each text node, by workflow and node, kept in the tab's sessionStorage: a workflow's
 * nodes are built again from its JSON on a tab switch, an F5 or a renderer toggle, and the text box is
 * not part of the JSON (the widget is not serialized). `storage`: sessionStorage, or a fake in tests.
 */
export class TextStore {
  constructor(storage = globalThis.sessionStorage) {
    this.storage = storage;
  }

  key(workflowId, nodeId) {
    return `headroom.text.${workflowId ?? ""}.${nodeId}`;
  }

  save(workflowId, node, text) {
    try {
      this.storage?.setItem(this.key(workflowId, node.id), JSON.stringify({ classType: node.comfyClass ?? node.type, text }));
    } catch {
      // a full or disabled storage: the text stays on the node until the next rebuild
    }
  }

  /** The saved text of this node (same workflow, id and class), or null. */
  load(workflowId, node) {
    try {
      const saved = JSON.parse(this.storage?.getItem(this.key(workflowId, node.id)) ?? "null");
      return saved && saved.classType === (node.comfyClass ?? node.type) ? saved.text : null;
    } catch {
      return null;
    }
  }
}
