// Text a node returns for its own display ({"ui": {"text": [...]}}): the streaming sampler's status line and
// the Memory Monitor's report, shown on the node in a read-only text box after it runs, under either node
// renderer. No DOM of its own: the host's widget factory is passed in (unit-tested under Node with fakes).

/** The nodes whose ui text is shown, by node id (frozen ids). */
export const TEXT_NODES = new Set(["HeadroomStreamingSampler", "HeadroomMemoryMonitor"]);
export const TEXT_WIDGET = "last run"; // also the Vue renderer's placeholder

/** The ui text of an executed message as one string; null when the message has none. */
export function messageText(output) {
  const text = output?.text;
  if (text === null || text === undefined) return null;
  return (Array.isArray(text) ? text : [text]).map(String).join("\n");
}

/**
 * Add the read-only text box to a node when it is created, so that both renderers know it from the start
 * (the Vue renderer reads a node's widgets once). `makeString` is ComfyWidgets.STRING. Neither saved in
 * the workflow nor sent as an input.
 */
export function addTextWidget(node, makeString, app) {
  const { widget } = makeString(node, TEXT_WIDGET, ["STRING", { multiline: true, placeholder: TEXT_WIDGET }], app);
  widget.serialize = false; // not in the workflow's widgets_values
  // readonly: the Vue renderer passes options to its textarea; minNodeSize: the host's 400x200 would make
  // the node take much more room than a status line needs (the box can still be resized)
  Object.assign(widget.options, { serialize: false, readonly: true, minNodeSize: [300, 80] });
  if (widget.inputEl) {
    widget.inputEl.readOnly = true;
  }
  return widget;
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
