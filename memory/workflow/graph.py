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
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .node_types import (
    host_version,
    is_output_node,
    lookup,
)

MUTED, BYPASSED = 2, 4
SUBGRAPH_INPUT_NODE = -10  # origin id of links that start at a subgraph's input node
UPLOAD_VALUES = frozenset({"image", "video", "audio", "mesh"})  # what upload buttons store
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_JS_INDEX = re.compile(r"^(0|[1-9][0-9]{0,9})$")
# How many output slots past the node-type table's a link may use before it is refused: classes gain
# an output or two in hosts newer than the table.
NEWER_OUTPUTS = 4
GROUP_PREFIXES = ("workflow>", "workflow/")
# Bounds on what one plan reads: big enough for any real workflow (the official templates are under
# 1 MB and 1,000 nodes), small enough that parsing and planning end in seconds to minutes.
MAX_WORKFLOW_BYTES = 20_000_000
MAX_NODES = 100_000  # group node instance types; "/" is the v1 separator


class WorkflowError(ValueError):
    """A workflow we cannot read; the message names the construct and the node (id, type, title)."""


@dataclass(frozen=True, slots=True)
class Link:
    """An input fed by output ``output`` of node ``node`` (the API prompt's ``[node, output]``)."""

    node: str
    output: int


@dataclass(slots=True)
class Node:
    id: str
    class_type: str
    inputs: dict[str, Any]  # input name -> Link or constant, in the order the prompt lists them
    title: str | None = None
    # Only set for classes the node-type table does not know, from what the UI workflow shows.
    output_node: bool | None = None
    outputs: tuple[str, ...] | None = None  # output types


@dataclass(slots=True)
class Graph:
    nodes: dict[str, Node]
    format: str  # "ui" or "api"
    warnings: list[str] = field(default_factory=list)

    def is_output(self, node_id: str) -> bool:
        node = self.nodes[node_id]
        if node.output_node is not None:
            return node.output_node
        return is_output_node(node.class_type)

    def output_nodes(self) -> list[str]:
        """Output node ids in prompt order."""
        return [node_id for node_id in self.nodes if self.is_output(node_id)]

    def to_prompt(self) -> dict[str, dict[str, Any]]:
        """The API prompt (what POST /prompt takes); lists are wrapped as the frontend wraps them."""

        def encode(value: Any) -> Any:
            if isinstance(value, Link):
                return [value.node, value.output]
            return {"__value__": value} if isinstance(value, list) else value

        return {
            node.id: {
                "inputs": {name: encode(value) for name, value in node.inputs.items()},
                "class_type": node.class_type,
                "_meta": {"title": node.title or node.class_type},
            }
            for node in self.nodes.values()
        }


def describe(node: dict[str, Any], path: tuple[str, ...] = ()) -> str:
    """ "node 12:5 (KSampler 'Sampler')" for messages."""
    node_id = ":".join((*path, str(node.get("id"))))
    title = node.get("title")
    return f"node {node_id} ({node.get('type')}{f' {title!r}' if title else ''})"


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


def _link_problem(graph: Graph, node: Node, name: str, link: Link, listed: dict[str, int]) -> str | None:
    """Why the host's validate_inputs rejects this link (prompt[o_id], RETURN_TYPES[slot]), or None."""
    where = f"node {node.id} ({node.class_type}) input {name!r}"
    source = graph.nodes.get(link.node)
    if source is None:
        return f"{where} links to node {link.node}, which is not in the prompt"
    known = lookup(source.class_type)
    outputs = known.outputs if known is not None else source.outputs
    if link.output < 0:
        return f"{where} links to output slot {link.output} of node {link.node} ({source.class_type})"
    # Newer hosts add outputs to classes (GetVideoComponents, PreviewImage in the 3D templates): a UI
    # workflow's own output list is trusted, and a prompt may use a few slots past the table's.
    if outputs is not None and link.output >= max(len(outputs) + NEWER_OUTPUTS, listed.get(link.node, 0)):
        return (
            f"{where} links to output slot {link.output} of node {link.node} ({source.class_type}), "
            f"which has {len(outputs)} output(s) ({', '.join(outputs) or 'none'})"
        )
    return None


def check_links(
    graph: Graph, broken: dict[str, list[str]] | None = None, listed: dict[str, int] | None = None
) -> None:
    """Raise WorkflowError for a broken link on a node the outputs need: ComfyUI refuses such a prompt.

    A link to a missing node or to an output slot its class lacks, and ``broken`` (per node id, what
    the parser found wrong), are errors on nodes some output depends on; elsewhere the host never
    validates them, so they are only warnings. ``listed``: how many outputs a UI workflow shows per node.
    """
    problems: dict[str, list[str]] = {key: list(value) for key, value in (broken or {}).items()}
    for node in graph.nodes.values():
        for name, value in node.inputs.items():
            if isinstance(value, Link):
                problem = _link_problem(graph, node, name, value, listed or {})
                if problem:
                    problems.setdefault(node.id, []).append(problem)
    if not problems:
        return
    seen: set[str] = set()
    stack = graph.output_nodes()
    while stack:
        node_id = stack.pop()
        if node_id in seen or node_id not in graph.nodes:
            continue
        seen.add(node_id)
        if node_id in problems:
            raise WorkflowError(
                f"{problems[node_id][0]}; ComfyUI rejects this prompt (fix or remove the link)"
            )
        stack += [v.node for v in graph.nodes[node_id].inputs.values() if isinstance(v, Link)]
    for messages in problems.values():
        graph.warnings += [f"{m}; no output needs it, so it is ignored" for m in messages]


def _note_unknown(graph: Graph) -> None:
    unknown: Counter[str] = Counter()
    as_output: set[str] = set()
    for node in graph.nodes.values():
        if lookup(node.class_type) is None:
            unknown[node.class_type] += 1
            if graph.is_output(node.id):
                as_output.add(node.class_type)
    for kind, count in sorted(unknown.items()):
        graph.warnings.append(
            f"node type {kind} ({count}x) is unknown to {host_version()}: kept as an opaque node"
            + (", assumed to be an output node" if kind in as_output else "")
        )


# ------------------------------------------------------------------------------------------- public


def parse_workflow(data: dict[str, Any]) -> Graph:
    """A Graph from an API prompt ({id: {class_type, inputs}}) or a UI workflow ({nodes, links, ...})."""
    if not isinstance(data, dict):
        raise WorkflowError(f"not a workflow: expected a JSON object, got {type(data).__name__}")
    if isinstance(data.get("nodes"), list):
        from .workflow_ui import _UiParser  # imports this module

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
