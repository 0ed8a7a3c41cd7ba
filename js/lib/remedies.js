// "Make it fit": the remedies /headroom/fit answers with (memory/planning/remedies.py), made on the canvas
// (Apply) and said as text (Copy). Pure apart from what the caller passes in (the graph, LiteGraph, the
// change tracker): unit-tested under Node with stand-in graphs.
import { formatBytes, formatSeconds } from "./format.js";

/** The node a server id names: "59" on the root graph, "128:74" inside subgraph node 128. Returns
 * {node, graph} (the graph that holds it) or null. */
export function resolveNode(graph, id) {
  let holder = graph;
  const parts = String(id).split(":");
  for (const [n, part] of parts.entries()) {
    const node = holder?.getNodeById?.(part) ?? holder?.getNodeById?.(Number(part)) ?? null;
    if (!node) return null;
    if (n === parts.length - 1) return { node, graph: holder };
    holder = node.subgraph;
  }
  return null;
}

function setWidget(node, name, value, canvas) {
  const widget = node.widgets?.find((w) => w.name === name);
  if (!widget) return false;
  widget.value = value;
  widget.callback?.(value, canvas, node);
  return true;
}

function linkOf(graph, id) {
  const links = graph.links;
  return links?.get?.(id) ?? links?.[id] ?? null;
}

/** Swap `node` for a new node of class `type` where it stands, with its links (by input and output name)
 * and the widgets both have. */
function replaceNode(graph, node, type, LiteGraph) {
  const fresh = LiteGraph.createNode(type);
  if (!fresh) return null;
  fresh.pos = [...node.pos];
  graph.add(fresh);
  for (const input of node.inputs ?? []) {
    const link = input.link != null ? linkOf(graph, input.link) : null;
    const target = fresh.findInputSlot?.(input.name) ?? -1;
    if (link && target >= 0) graph.getNodeById(link.origin_id)?.connect(link.origin_slot, fresh, target);
  }
  for (const widget of node.widgets ?? []) setWidget(fresh, widget.name, widget.value);
  for (const [slot, output] of (node.outputs ?? []).entries()) {
    const out = fresh.findOutputSlot?.(output.name) ?? slot;
    for (const id of [...(output.links ?? [])]) {
      const link = linkOf(graph, id);
      if (link) fresh.connect(out, graph.getNodeById(link.target_id), link.target_slot);
    }
  }
  graph.remove(node);
  return fresh;
}

/** Put a new node of class `type` on `node`'s input `name`: it takes what fed that input and feeds it. */
function insertNode(graph, node, name, type, LiteGraph) {
  const slot = node.findInputSlot?.(name) ?? -1;
  const input = node.inputs?.[slot];
  const link = input?.link != null ? linkOf(graph, input.link) : null;
  const fresh = link ? LiteGraph.createNode(type) : null;
  if (!fresh) return null;
  fresh.pos = [node.pos[0] - 40, node.pos[1] - 120];
  graph.add(fresh);
  graph.getNodeById(link.origin_id)?.connect(link.origin_slot, fresh, 0);
  fresh.connect(0, node, slot);
  return fresh;
}

/**
 * Make `remedy`'s changes on the open graph, as one undo step: the change tracker's pending state is
 * taken first, the changes are made inside beforeChange/afterChange (no step of their own), and one
 * checkState records them. Returns {applied, missing}: the changes made, and what could not be (a node
 * the open workflow no longer has, say).
 */
export function applyRemedy(remedy, { graph, canvas, LiteGraph, tracker } = {}) {
  const applied = [];
  const missing = [];
  tracker?.checkState?.();
  tracker?.beforeChange?.();
  try {
    for (const change of remedy?.changes ?? []) {
      const found = resolveNode(graph, change.node);
      let ok = false;
      if (found && (change.op ?? "set") === "set") ok = setWidget(found.node, change.input, change.value, canvas);
      else if (found && change.op === "replace" && LiteGraph) ok = Boolean(replaceNode(found.graph, found.node, change.value, LiteGraph));
      else if (found && change.op === "insert" && LiteGraph) ok = Boolean(insertNode(found.graph, found.node, change.input, change.value, LiteGraph));
      (ok ? applied : missing).push(change);
    }
  } finally {
    tracker?.afterChange?.();
    tracker?.checkState?.();
  }
  graph?.setDirtyCanvas?.(true, true);
  canvas?.setDirty?.(true, true);
  return { applied, missing };
}

/** One remedy in a line: its text, which already carries its peak and time. */
export function remedyLine(remedy, n) {
  const figures = remedy.vram_peak ? ` [peak ${formatBytes(remedy.vram_peak)}${Number.isFinite(remedy.wall_s) ? `, ${formatSeconds(remedy.wall_s)}` : ""}]` : "";
  return `${n}. ${remedy.text}${remedy.text.includes("peak") ? "" : figures}`;
}

/** The whole answer as text, for the clipboard: the verdict, its detail, the card and the remedies. */
export function answerText(answer) {
  if (!answer) return "";
  const lines = [`Headroom: ${answer.text}`];
  if (answer.detail && answer.detail !== answer.text) lines.push(answer.detail);
  if (answer.time?.card) lines.push(`Time for ${answer.time.card}${answer.time.includes ? ` (${answer.time.includes})` : ""}`);
  const remedies = answer.remedies ?? [];
  if (remedies.length) lines.push("To make it fit:", ...remedies.map((r, i) => `  ${remedyLine(r, i + 1)}`));
  if (answer.stale) lines.push("(out of date: the workflow changed since this check)");
  return lines.join("\n");
}
