"""The workflow graph: parsed from an API prompt or a UI workflow into what the executor would receive.

UI workflows are flattened the way the frontend's ``graphToPrompt`` does before it queues a prompt:

- muted nodes (mode 2) are dropped, and so are the inputs they fed;
- bypassed nodes (mode 4) pass an input of the requested type through to their output (the frontend's
  ``ExecutableNodeDTO._getBypassSlotIndex`` rule);
- frontend-only nodes (Reroute, PrimitiveNode, Note, MarkdownNote, KJNodes' GetNode/SetNode) are
  resolved away: a PrimitiveNode's value becomes the value of the widget it drives;
- ``widgets_values`` are mapped onto input names with the node-type table (node_types.py), skipping the
  extra values the frontend stores after some widgets (control_after_generate, upload buttons);
- subgraphs under ``definitions.subgraphs`` are expanded, nested ones too; an inner node's id is the
  path of instance ids then its own id joined by ":" ("12:5", "12:7:3"), as the frontend names them.

Group nodes (the pre-subgraph ``extra.groupNodes``, instances typed ``workflow>NAME``) are expanded the
way the frontend that pairs with the table's host (1.27) queues them: inner node ``i`` of instance 12 runs
as "12:i"; the instance's inputs, outputs and flattened ``widgets_values`` map onto the inner nodes by the
frontend's ``GroupNodeConfig`` rules (see _GroupDef). Node classes unknown to the table are kept as opaque
nodes (see node_types.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Graph, Link, Node and WorkflowError are imported from here by the rest of the pack (graph_types.py holds
# them so that the UI parser does not import this module back).
from .graph_types import MAX_NODES, Graph, Link, Node, WorkflowError, _note_unknown, check_links

# Bounds on what one plan reads (with graph_types.MAX_NODES): the official templates are under 1 MB.
MAX_WORKFLOW_BYTES = 20_000_000

# ---------------------------------------------------------------------------------------------- API


def _is_link(value: Any) -> bool:
    # The host's own test (comfy_execution/graph_utils.is_link).
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], (int, float))
        and abs(value[1]) < float("inf")  # not NaN or infinite: int() of the slot would raise
    )


def _parse_api(data: dict[str, Any]) -> Graph:
    graph = Graph(nodes={}, format="api")
    broken: dict[str, list[str]] = {}
    for node_id, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("class_type"), str):
            raise WorkflowError(f"API prompt node {node_id!r} has no class_type")
        raw = entry.get("inputs", {})
        if not isinstance(raw, dict):
            raise WorkflowError(f"API prompt node {node_id} ({entry['class_type']}): inputs is not an object")
        inputs: dict[str, Any] = {}
        for name, value in raw.items():
            if _is_link(value):
                inputs[name] = Link(value[0], int(value[1]))
                if value[1] != int(value[1]):  # the host indexes RETURN_TYPES with it: a TypeError
                    broken.setdefault(str(node_id), []).append(
                        f"node {node_id} ({entry['class_type']}) input {name!r} links to output slot "
                        f"{value[1]!r} of node {value[0]}, which is not a whole number"
                    )
            elif isinstance(value, dict) and "__value__" in value:  # the frontend's wrapped lists
                inputs[name] = value["__value__"]
            else:
                inputs[name] = value
        meta = entry.get("_meta")
        title = meta.get("title") if isinstance(meta, dict) else None
        graph.nodes[str(node_id)] = Node(str(node_id), entry["class_type"], inputs, title)
    check_links(graph, broken)
    _note_unknown(graph)
    return graph


# ------------------------------------------------------------------------------------------- public


def parse_workflow(data: dict[str, Any]) -> Graph:
    """A Graph from an API prompt ({id: {class_type, inputs}}) or a UI workflow ({nodes, links, ...})."""
    if not isinstance(data, dict):
        raise WorkflowError(f"not a workflow: expected a JSON object, got {type(data).__name__}")
    if isinstance(data.get("nodes"), list):
        from .workflow_ui import _UiParser  # deferred: the UI parser is the larger import

        parser = _UiParser(data)
        try:
            return parser.parse()
        except WorkflowError:
            raise
        except (KeyError, TypeError, AttributeError, IndexError, ValueError, RecursionError) as exc:
            # A shape the parser does not expect (hand-edited or damaged JSON): say where it stopped.
            raise WorkflowError(f"malformed workflow near {parser.where}: {exc!r}") from exc
    if data and all(isinstance(v, dict) and "class_type" in v for v in data.values()):
        if len(data) > MAX_NODES:
            raise WorkflowError(f"the API prompt has {len(data):,} nodes; the limit is {MAX_NODES:,}")
        return _parse_api(data)
    if not data:
        raise WorkflowError("not a workflow: the JSON object is empty")
    raise WorkflowError(
        "not a workflow: a UI workflow has a 'nodes' list and an API prompt maps node ids to "
        f"{{class_type, inputs}}; this object has the keys {sorted(map(str, data))[:8]}"
    )


def load_workflow(path: str | Path) -> Graph:
    """parse_workflow on a JSON file, with errors that name the file (and line/column for bad JSON)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_WORKFLOW_BYTES:
            raise WorkflowError(
                f"{path} is {size / 1e6:.1f} MB; the limit for a workflow is "
                f"{MAX_WORKFLOW_BYTES / 1e6:.0f} MB"
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError(f"cannot read workflow {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkflowError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from exc
    try:
        return parse_workflow(data)
    except WorkflowError as exc:
        raise WorkflowError(f"{path}: {exc}") from exc


def reachable(graph: Graph, outputs: Iterable[str]) -> set[str]:
    """Every node the outputs depend on (themselves included), following all links, lazy ones too: what
    the host runs for them at the most."""
    seen: set[str] = set()
    stack = [node_id for node_id in outputs if node_id in graph.nodes]
    while stack:
        node_id = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        for value in graph.nodes[node_id].inputs.values():
            if isinstance(value, Link) and value.node in graph.nodes and value.node not in seen:
                stack.append(value.node)
    return seen


# the types graph_types.py holds are the rest of the pack's to import from here
__all__ = [
    "MAX_WORKFLOW_BYTES", "Graph", "Link", "Node", "WorkflowError", "load_workflow", "parse_workflow",
    "reachable",
]  # fmt: skip
