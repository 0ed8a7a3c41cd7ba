"""The workflow graph both parsers build (graph.py for API prompts, workflow_ui.py for UI workflows): its
nodes and links, the errors they raise, and the link checks the host's validation makes. The rest of the
pack imports Graph, Link, Node and WorkflowError from graph.py; this module exists so that the UI parser,
which graph.parse_workflow calls, does not import graph.py back."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .node_types import is_output_node, lookup, node_table_host

MUTED, BYPASSED = 2, 4
SUBGRAPH_INPUT_NODE = -10  # origin id of links that start at a subgraph's input node
UPLOAD_VALUES = frozenset({"image", "video", "audio", "mesh"})  # what upload buttons store
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_JS_INDEX = re.compile(r"^(0|[1-9][0-9]{0,9})$")
# How many output slots past the node-type table's a link may use before it is refused: classes gain
# an output or two in hosts newer than the table.
NEWER_OUTPUTS = 4
GROUP_PREFIXES = ("workflow>", "workflow/")  # group node instance types; "/" is the v1 separator
# Bounds on what one plan reads (with graph.MAX_WORKFLOW_BYTES): big enough for any real workflow (the
# official templates are under 1,000 nodes), small enough that parsing and planning end in seconds to
# minutes.
MAX_NODES = 100_000


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


def describe(node: dict[str, Any], path: tuple[str, ...] = ()) -> str:
    """ "node 12:5 (KSampler 'Sampler')" for messages."""
    node_id = ":".join((*path, str(node.get("id"))))
    title = node.get("title")
    return f"node {node_id} ({node.get('type')}{f' {title!r}' if title else ''})"


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
    if outputs is None:
        return None
    # Newer hosts add outputs to classes (GetVideoComponents, PreviewImage in the 3D templates): a UI
    # workflow's own output list is trusted, and a prompt may use a few slots past the table's, but
    # never for a model input (no class gained a model as a new output).
    wanted = _input_type(node, name)
    spare = 0 if wanted & MODEL_TYPES else NEWER_OUTPUTS
    if link.output >= max(len(outputs) + spare, listed.get(link.node, 0)):
        return (
            f"{where} links to output slot {link.output} of node {link.node} ({source.class_type}), "
            f"which has {len(outputs)} output(s) ({', '.join(outputs) or 'none'})"
        )
    given = set(outputs[link.output].split(",")) if link.output < len(outputs) else set()
    # The host's validate_node_input: types match when they share one ("*" matches any).
    if wanted & STRICT_TYPES and given & STRICT_TYPES and not wanted & given:
        return (
            f"{where} takes {'/'.join(sorted(wanted))} but links to output {link.output} of node "
            f"{link.node} ({source.class_type}), a {outputs[link.output]}"
        )
    return None


MODEL_TYPES = frozenset(
    {"MODEL", "CLIP", "VAE", "CONTROL_NET", "CLIP_VISION", "UPSCALE_MODEL", "STYLE_MODEL", "MODEL_PATCH"}
)
# Types a link is checked for, as the host's validation checks them (a mismatch is refused): model and
# data types only; primitives and combos convert and are left to the host.
STRICT_TYPES = frozenset(
    {
        "MODEL", "CLIP", "VAE", "CONDITIONING", "LATENT", "IMAGE", "MASK", "CONTROL_NET", "CLIP_VISION",
        "CLIP_VISION_OUTPUT", "UPSCALE_MODEL", "STYLE_MODEL", "GUIDER", "SAMPLER", "SIGMAS", "NOISE",
        "MODEL_PATCH",
    }
)  # fmt: skip


def _input_type(node: Node, name: str) -> set[str]:
    """The types input ``name`` accepts, from the node-type table (empty when unknown or "*")."""
    known = lookup(node.class_type)
    spec = known.input(name) if known is not None else None
    types = {t.strip() for t in spec.type.split(",")} if spec is not None else set()
    return set() if "*" in types else types


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
            f"node type {kind} ({count}x) is unknown to {node_table_host()}: kept as an opaque node"
            + (", assumed to be an output node" if kind in as_output else "")
        )
