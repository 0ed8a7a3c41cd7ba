// Names for nodes as the user sees them (their title), and a way to find one on the canvas.
// Pure apart from locateNode, which takes the app; nothing here imports the host (unit-tested under Node).

/** The graph node with this id and, when given, this class; null when the open workflow has none. */
export function findNode(graph, id, classType) {
  if (!graph || id === null || id === undefined) return null;
  const node = graph.getNodeById?.(id) ?? graph.getNodeById?.(Number(id)) ?? null;
  if (!node) return null;
  const type = node.comfyClass ?? node.type;
  return classType && type && type !== classType ? null : node; // a record of another workflow
}

/**
 * What a node is called: its title; with its class when the user renamed it ("Main sampler (KSampler)").
 * A node the open workflow lacks keeps its class and id ("KSampler #3"). Returns {text, tooltip, found}.
 */
export function nodeName(node, { id, classType } = {}) {
  if (!node) {
    const text = `${classType || "node"} #${id}`;
    return { text, tooltip: `node ${id} is not in the open workflow`, found: false };
  }
  const type = node.comfyClass ?? node.type ?? classType ?? "";
  const fallback = node.constructor?.title ?? type;
  const title = node.title || fallback || type;
  const renamed = title !== fallback && title !== type;
  return {
    text: renamed ? `${title} (${type})` : title,
    tooltip: `${type}, node #${node.id}: click to show it on the canvas`,
    found: true,
  };
}

/** nodeName for an id (and class) looked up in the app's open graph. */
export function nameOf(app, id, classType) {
  return nodeName(findNode(app?.graph, id, classType), { id, classType });
}

// M10: below this zoom a node's text is not readable (at 37% a node is a grey box): "Show" zooms in to 1.
const READABLE_SCALE = 0.8;

/** Select the node and centre the canvas on it, zoomed in to a readable size when the view is smaller;
 * false when the open workflow has no such node. */
export function locateNode(app, id, classType) {
  const node = findNode(app?.graph, id, classType);
  const canvas = app?.canvas;
  if (!node || !canvas) return false;
  canvas.selectNode?.(node, false);
  if (canvas.ds && Number.isFinite(canvas.ds.scale) && canvas.ds.scale < READABLE_SCALE) canvas.ds.scale = 1;
  canvas.centerOnNode?.(node);
  clearOfPanel(canvas, globalThis.document?.querySelector?.(".headroom-timeline"));
  canvas.setDirty?.(true, true);
  return true;
}

/**
 * centerOnNode centres on the whole canvas element, which the open bottom panel (our timeline, where
 * most "find this node" clicks come from) covers in part: move the view up so that the node sits in the
 * middle of the part left visible. `panel`: an element inside the bottom panel, or nothing.
 */
export function clearOfPanel(canvas, panel) {
  const element = canvas?.canvas;
  const offset = canvas?.ds?.offset;
  if (!panel?.isConnected || !element?.getBoundingClientRect || !offset) return 0;
  const area = element.getBoundingClientRect();
  const top = panel.getBoundingClientRect().top;
  if (!(top > area.top && top < area.bottom)) return 0; // closed, or not over the canvas
  const shift = (area.top + area.bottom) / 2 - (area.top + top) / 2; // screen pixels up
  offset[1] -= shift / (canvas.ds.scale || 1);
  return shift;
}

/**
 * Server messages name nodes 'KSampler (node 3)' or '"My title" (KSampler, node 3)': rewrite each with
 * the name the open workflow gives it (`rename(id, classType)` returns a string or null to keep it).
 */
export function renameNodes(text, rename) {
  return String(text ?? "").replace(
    /"([^"]*)" \(([\w.-]+), node ([\w:]+)\)|([\w.-]+) \(node ([\w:]+)\)/g,
    (match, title, titledClass, titledId, plainClass, plainId) =>
      rename(titledId ?? plainId, titledClass ?? plainClass) ?? match,
  );
}
