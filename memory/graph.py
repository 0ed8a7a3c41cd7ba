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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .node_types import (
    CONTROL_VALUES,
    VIRTUAL_TYPES,
    WIDGET_TYPES,
    InputSpec,
    guess_output_node,
    host_version,
    is_control_widget,
    is_output_node,
    lookup,
)

MUTED, BYPASSED = 2, 4
SUBGRAPH_INPUT_NODE = -10  # origin id of links that start at a subgraph's input node
UPLOAD_VALUES = frozenset({"image", "video", "audio", "mesh"})  # what upload buttons store
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_JS_INDEX = re.compile(r"^(0|[1-9][0-9]{0,9})$")
GROUP_PREFIXES = ("workflow>", "workflow/")  # group node instance types; "/" is the v1 separator


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
    )


def _parse_api(data: dict[str, Any]) -> Graph:
    graph = Graph(nodes={}, format="api")
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
            elif isinstance(value, dict) and "__value__" in value:  # the frontend's wrapped lists
                inputs[name] = value["__value__"]
            else:
                inputs[name] = value
        meta = entry.get("_meta")
        title = meta.get("title") if isinstance(meta, dict) else None
        graph.nodes[str(node_id)] = Node(str(node_id), entry["class_type"], inputs, title)
    for node in graph.nodes.values():
        for name, value in node.inputs.items():
            if isinstance(value, Link) and value.node not in graph.nodes:
                graph.warnings.append(
                    f"node {node.id} ({node.class_type}) input {name!r} links to node {value.node}, "
                    "which is not in the prompt"
                )
    _note_unknown(graph)
    return graph


# ----------------------------------------------------------------------------------------------- UI


@dataclass(frozen=True, slots=True)
class _Value:
    """A constant that replaces a widget's value (a PrimitiveNode's, a promoted subgraph widget's)."""

    value: Any


@dataclass(frozen=True, slots=True)
class _UiLink:
    origin: int | str
    origin_slot: int
    target: int | str
    target_slot: int


class _Scope:
    """One graph level: the root, or one instance of a subgraph definition."""

    def __init__(
        self,
        parser: _UiParser,
        nodes: list[Any],
        links: list[Any],
        path: tuple[str, ...] = (),
        definition: dict[str, Any] | None = None,
        instance: dict[str, Any] | None = None,
        parent: _Scope | None = None,
        group: _GroupDef | None = None,
    ) -> None:
        self.parser, self.path, self.definition, self.instance, self.parent, self.group = (
            parser,
            path,
            definition,
            instance,
            parent,
            group,
        )
        kind = "group node" if group else "subgraph"
        where = f" in {kind} {describe(instance, parent.path)}" if instance and parent else ""
        self.nodes: dict[str, dict[str, Any]] = {}
        for node in nodes:
            if not isinstance(node, dict) or "id" not in node or not isinstance(node.get("type"), str):
                raise WorkflowError(f"a node{where} has no id or type: {str(node)[:80]}")
            if str(node["id"]) in self.nodes:
                raise WorkflowError(f"two nodes{where} share the id {node['id']}")
            self.nodes[str(node["id"])] = node
        self.links: dict[str, _UiLink] = {}
        for link in links or ():
            parsed = _parse_link(link)
            if parsed is None:
                raise WorkflowError(f"malformed link{where}: {str(link)[:80]}")
            self.links[parsed[0]] = parsed[1]
        self.children: dict[str, _Scope] = {}
        self.promoted: dict[str, _Value] = {}
        self.overrides: dict[str, dict[str, Any]] = {}  # group node widget values, by inner node id

    def exec_id(self, node: dict[str, Any]) -> str:
        return ":".join((*self.path, str(node["id"])))

    def child(self, node: dict[str, Any]) -> _Scope:
        """The scope of subgraph instance ``node`` (created once)."""
        key = str(node["id"])
        if key not in self.children:
            definition = self.parser.subgraphs[node["type"]]
            chain, scope = [node["type"]], self
            while scope.definition is not None:
                chain.append(scope.definition["id"])
                scope = scope.parent  # type: ignore[assignment]
            if node["type"] in chain[1:]:
                raise WorkflowError(f"subgraph {describe(node, self.path)} contains itself")
            scope = _Scope(
                self.parser,
                definition.get("nodes") or [],
                definition.get("links") or [],
                (*self.path, key),
                definition,
                node,
                self,
            )
            scope.promoted = self.parser.promoted_values(scope)
            self.children[key] = scope
        return self.children[key]

    def group_child(self, node: dict[str, Any]) -> _Scope:
        """The scope of group node instance ``node``: its definition's nodes, ids "<instance>:<index>"."""
        key = str(node["id"])
        if key not in self.children:
            if self.path:
                # ExecutableGroupNodeChildDTO throws for these; nesting cannot be built in the UI.
                raise WorkflowError(
                    f"{describe(node, self.path)} is a group node nested in "
                    f"{describe(self.instance or {}, self.parent.path if self.parent else ())}, which the "
                    "frontend cannot run either: convert the group node to a subgraph"
                )
            group = self.parser.group_def(node, self.path)
            overrides = self.parser.group_values(group, node, self.path)
            nodes = []
            for inner in group.nodes:
                values = overrides.get(str(inner["id"]), {})
                if inner["type"] == "PrimitiveNode" and "value" in values:
                    old = inner.get("widgets_values")
                    rest = old[1:] if isinstance(old, list) else []
                    inner = inner | {"widgets_values": [values["value"], *rest]}
                nodes.append(inner)
            scope = _Scope(self.parser, nodes, [], (*self.path, key), None, node, self, group)
            scope.overrides = overrides
            self.children[key] = scope
        return self.children[key]


def _parse_link(link: Any) -> tuple[str, _UiLink] | None:
    """Root links are [id, origin, slot, target, slot, type]; subgraph links are objects."""
    try:
        if isinstance(link, list):
            return str(link[0]), _UiLink(link[1], int(link[2]), link[3], int(link[4]))
        if isinstance(link, dict):
            return str(link["id"]), _UiLink(
                link["origin_id"], int(link["origin_slot"]), link["target_id"], int(link["target_slot"])
            )
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    return None


def _valid_connection(a: Any, b: Any) -> bool:
    """litegraph's isValidConnection: "*"/"" match anything; comma-separated types match any member."""
    if a in ("*", "", None, 0) or b in ("*", "", None, 0) or a == b:
        return True
    a, b = str(a).lower(), str(b).lower()
    if "," not in a and "," not in b:
        return a == b
    return bool(set(a.split(",")) & set(b.split(",")))


def _inputs(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [slot for slot in node.get("inputs") or [] if isinstance(slot, dict)]


@dataclass(slots=True)
class _GroupDef:
    """One ``extra.groupNodes`` entry as the frontend's GroupNodeConfig reads it (groupNode.ts, 1.27).

    Inner nodes are walked in definition order (execution order when the group was made). Of each
    node's definition inputs, widget inputs become instance widgets, except those the node shows as
    inputs ("converted"); sockets with no link inside the group become instance inputs, in order. After
    all nodes, the converted widgets with no link inside the group become both instance inputs and
    instance widgets. An output is an instance output unless it is linked inside the group and not
    listed in ``external``. ``config`` can rename or hide slots; a hidden socket gets no instance input.
    """

    name: str
    nodes: list[dict[str, Any]]  # inner nodes, "id" replaced by their index
    # (inner node, input slot) -> (inner node, output slot) for links inside the group
    links_to: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    inputs: dict[tuple[int, int], int] = field(default_factory=dict)  # (inner node, slot) -> instance input
    outputs: list[tuple[int, int]] = field(default_factory=list)  # instance output -> (inner node, slot)
    widgets: list[tuple[int, InputSpec]] = field(default_factory=list)  # instance widgets, in order
    warnings: list[str] = field(default_factory=list)


def _read_group(name: str, data: Any, instance: str) -> _GroupDef:
    """Build a _GroupDef; ``instance`` names the node that uses it, for messages."""
    where = f"{instance} is a group node whose definition extra.groupNodes[{name!r}]"
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise WorkflowError(f"{where} has no nodes list")
    nodes = []
    for index, node in enumerate(data["nodes"]):
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise WorkflowError(f"{where} has an inner node {index} without a type")
        if node["type"].startswith(GROUP_PREFIXES):
            raise WorkflowError(f"{where} contains group node {node['type']}, which the frontend cannot run")
        nodes.append(node | {"id": index})
    group = _GroupDef(name, nodes)
    links_from: dict[tuple[int, int], list[list[Any]]] = {}
    try:
        for link in data.get("links") or []:
            if link[0] is None:  # came from outside the group when it was made; the instance input has it
                continue
            origin, target = (int(link[0]), int(link[1])), (int(link[2]), int(link[3]))
            group.links_to[target] = origin
            links_from.setdefault(origin, []).append(link)
        external = {(int(e[0]), int(e[1])) for e in data.get("external") or [] if len(e) > 2 and e[2]}
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise WorkflowError(f"{where} has a malformed link: {exc!r}") from exc
    config = data.get("config") if isinstance(data.get("config"), dict) else {}

    def custom(index: int, side: str, key: str | int) -> dict[str, Any]:
        entry = config.get(str(index))
        slots = entry.get(side) if isinstance(entry, dict) else None
        found = slots.get(str(key)) if isinstance(slots, dict) else None
        return found if isinstance(found, dict) else {}

    converted: list[tuple[int, list[tuple[int, InputSpec]]]] = []
    for index, node in enumerate(nodes):
        found = _group_inner_def(node, index, group, links_from, external)
        if found is None:
            continue
        specs, outputs = found
        saved = _inputs(node)
        sockets, shown = [], []
        for spec in specs:
            if not spec.widget:
                sockets.append(spec)
                continue
            slot = next(
                (
                    i
                    for i, s in enumerate(saved)
                    if s.get("name") == spec.name
                    and isinstance(s.get("widget"), dict)
                    and s["widget"].get("name") == spec.name
                ),
                None,
            )
            if slot is None:
                group.widgets.append((index, spec))
            else:
                shown.append((slot, spec))
        for position, spec in enumerate(sockets):
            # Keyed by the real slot, found by name; a Reroute's slot is unnamed (positional).
            slot = next((i for i, s in enumerate(saved) if s.get("name") == spec.name), position)
            if (index, slot) in group.links_to or custom(index, "input", spec.name).get("visible") is False:
                continue
            group.inputs[(index, slot)] = len(group.inputs)
        converted.append((index, sorted(shown, key=lambda item: item[0])))
        for slot in range(len(outputs)):
            hidden = (index, slot) in links_from and (index, slot) not in external
            if custom(index, "output", slot).get("visible", not hidden):
                group.outputs.append((index, slot))
    for index, shown in converted:
        for slot, spec in shown:
            if (index, slot) not in group.links_to:
                group.widgets.append((index, spec))
                group.inputs[(index, slot)] = len(group.inputs)
    return group


def _group_inner_def(
    node: dict[str, Any],
    index: int,
    group: _GroupDef,
    links_from: dict[tuple[int, int], list[list[Any]]],
    external: set[tuple[int, int]],
) -> tuple[list[InputSpec], list[str]] | None:
    """An inner node's definition inputs (in order) and output types; None when the group skips it."""
    kind = node["type"]
    known = lookup(kind)
    if known is not None:
        # The frontend adds a control_after_generate widget after any seed or noise_seed.
        specs = [
            replace(s, control=s.control or (s.name in ("seed", "noise_seed") and s.type == "INT"))
            for s in known.inputs
        ]
        return specs, list(known.outputs)
    linked_out = any(origin == index for origin, _ in links_from)
    if kind == "PrimitiveNode":
        if not linked_out:
            return None  # not linked: skipped
        first = links_from.get((index, 0), [[]])[0]
        value_type = str(first[5]) if len(first) > 5 else "*"
        widget = value_type in WIDGET_TYPES
        return [InputSpec("value", value_type, widget, control=value_type in ("INT", "COMBO"))], [value_type]
    if kind == "Reroute":
        linked_in = any(target == index for target, _ in group.links_to)
        if linked_in and linked_out and (index, 0) not in external:
            return None  # used only inside the group
        return [InputSpec("", "*")], ["*"]  # forceInput: always a socket
    if kind in VIRTUAL_TYPES:
        return None
    # The frontend refuses groups with classes it lacks; we read what the inner node lists.
    group.warnings.append(
        f"group node {group.name!r}: inner node {index} ({kind}) is unknown to {host_version()}; its "
        "inputs are read from the workflow, so the group's widget values may not line up"
    )
    specs = [
        InputSpec(
            str(s.get("name")), str(s.get("type")), widget=isinstance(s.get("widget"), dict), optional=True
        )
        for s in _inputs(node)
    ]
    outputs = [str(o.get("type")) for o in node.get("outputs") or [] if isinstance(o, dict)]
    return specs, outputs


class _UiParser:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.warnings: list[str] = []
        definitions = data.get("definitions") or {}
        self.subgraphs: dict[str, dict[str, Any]] = {}
        for definition in (definitions.get("subgraphs") if isinstance(definitions, dict) else None) or []:
            if isinstance(definition, dict) and isinstance(definition.get("id"), str):
                self.subgraphs[definition["id"]] = definition
        extra = data.get("extra") if isinstance(data.get("extra"), dict) else {}
        groups = extra.get("groupNodes") if isinstance(extra, dict) else None
        self.group_nodes: dict[str, Any] = groups if isinstance(groups, dict) else {}
        self.groups: dict[str, _GroupDef] = {}
        self.included: list[tuple[_Scope, dict[str, Any]]] = []
        self.where = "the top level"  # the node being read, for messages about malformed JSON

    # -- walking

    def parse(self) -> Graph:
        root = _Scope(self, self.data["nodes"], self.data.get("links") or [])
        self._walk(root)
        nodes = [self._build(scope, node) for scope, node in self.included]
        graph = Graph(nodes={}, format="ui", warnings=self.warnings)
        # Keys in the order Python sees them in the frontend's JSON: JavaScript enumerates
        # integer-like keys first, ascending, then the others ("12:5") in insertion order.
        plain = sorted((n for n in nodes if _JS_INDEX.match(n.id)), key=lambda n: int(n.id))
        for node in plain + [n for n in nodes if not _JS_INDEX.match(n.id)]:
            graph.nodes[node.id] = node
        for node in graph.nodes.values():  # the frontend drops links to nodes it did not send
            for name in [
                k for k, v in node.inputs.items() if isinstance(v, Link) and v.node not in graph.nodes
            ]:
                del node.inputs[name]
        _note_unknown(graph)
        return graph

    def _walk(self, scope: _Scope) -> None:
        for node in scope.nodes.values():
            kind = node["type"]
            self.where = describe(node, scope.path)
            if node.get("mode", 0) in (MUTED, BYPASSED):
                continue  # a bypassed one is resolved through its own inputs, whatever it is
            if kind.startswith(GROUP_PREFIXES):
                self._walk(scope.group_child(node))
            elif kind in self.subgraphs:
                self._walk(scope.child(node))
            elif _UUID.match(kind):
                raise WorkflowError(
                    f"{describe(node, scope.path)} is a subgraph whose definition is missing from "
                    "definitions.subgraphs"
                )
            elif kind not in VIRTUAL_TYPES:
                self.included.append((scope, node))

    # -- group nodes

    def group_def(self, node: dict[str, Any], path: tuple[str, ...]) -> _GroupDef:
        """The definition of group node instance ``node`` (read once per group name)."""
        name = node["type"][len(GROUP_PREFIXES[0]) :]  # both prefixes are 9 characters
        if name not in self.groups:
            if name not in self.group_nodes:
                raise WorkflowError(
                    f"{describe(node, path)} is a group node whose definition is missing from "
                    "extra.groupNodes"
                )
            self.groups[name] = _read_group(name, self.group_nodes[name], describe(node, path))
            self.warnings.extend(self.groups[name].warnings)
        return self.groups[name]

    def group_values(
        self, group: _GroupDef, node: dict[str, Any], path: tuple[str, ...]
    ) -> dict[str, dict[str, Any]]:
        """The instance's widgets_values by inner node id and input name (GroupNodeHandler.populateWidgets).

        Its widgets are the group's in order, each followed by the extras the frontend stores; an
        instance that saved none leaves the inner nodes' own values.
        """
        values = node.get("widgets_values")
        if not isinstance(values, list) or not values:
            return {}
        # Unique names for _align; two inner nodes may share an input name.
        specs = [replace(spec, name=f"{i}:{spec.name}") for i, spec in group.widgets]
        mapped, leftover = _align(specs, values)
        if leftover or len(mapped) < len(specs):
            self.warnings.append(
                f"group node {describe(node, path)}: {len(values)} widget values for {len(specs)} group "
                "widgets; mapped by position"
            )
        overrides: dict[str, dict[str, Any]] = {}
        for key, value in mapped.items():
            inner, name = key.split(":", 1)
            overrides.setdefault(inner, {})[name] = value
        return overrides

    def resolve_group_input(self, scope: _Scope, node: dict[str, Any], index: int, seen: set) -> Any:
        """Input ``index`` of an inner node: the instance input it maps to, or the link inside the group."""
        assert scope.group is not None and scope.instance is not None and scope.parent is not None
        inner = int(node["id"])
        outer = scope.group.inputs.get((inner, index))
        if outer is not None:
            if outer >= len(_inputs(scope.instance)):
                self.warnings.append(
                    f"group node {describe(scope.instance, scope.parent.path)} has no input {outer} for "
                    f"{describe(node, scope.path)}; left unconnected"
                )
                return None
            return self.resolve_input(scope.parent, scope.instance, outer, seen)
        origin = scope.group.links_to.get((inner, index))
        if origin is None:
            return None
        source = scope.nodes.get(str(origin[0]))
        if source is None:
            self.warnings.append(
                f"{describe(node, scope.path)}: linked inner node {origin[0]} does not exist; "
                "left unconnected"
            )
            return None
        slots = _inputs(node)
        want = slots[index].get("type") if index < len(slots) else None
        return self.resolve_output(scope, source, origin[1], want, seen)

    def _group_output(self, inner: _Scope, slot: int, want: Any, seen: set) -> Any:
        assert inner.group is not None and inner.instance is not None and inner.parent is not None
        if slot >= len(inner.group.outputs):
            self.warnings.append(
                f"group node {describe(inner.instance, inner.parent.path)} has no output {slot}; the input "
                "it feeds is left unconnected"
            )
            return None
        index, inner_slot = inner.group.outputs[slot]
        return self.resolve_output(inner, inner.nodes[str(index)], inner_slot, want, seen)

    # -- one node

    def _build(self, scope: _Scope, node: dict[str, Any]) -> Node:
        self.where = describe(node, scope.path)
        inputs = self.widget_values(scope, node)
        inputs.update(scope.overrides.get(str(node["id"]), {}))
        for index, slot in enumerate(_inputs(node)):
            name = slot.get("name")
            if not isinstance(name, str):
                continue
            resolved = self.resolve_input(scope, node, index, set())
            if isinstance(resolved, _Value):
                inputs[name] = resolved.value
            elif isinstance(resolved, Link):
                inputs[name] = resolved
        kind = node["type"]
        output_node = outputs = None
        if lookup(kind) is None:
            slots = [slot for slot in node.get("outputs") or [] if isinstance(slot, dict)]
            outputs = tuple(str(slot.get("type")) for slot in slots)
            output_node = guess_output_node(kind, len(outputs))
        title = node.get("title") if isinstance(node.get("title"), str) else None
        return Node(scope.exec_id(node), kind, inputs, title, output_node, outputs)

    def widget_specs(self, node: dict[str, Any]) -> list[InputSpec] | None:
        """The node's widgets in widgets_values order, or None when we cannot tell.

        Candidates: the table's widgets (ComfyUI 0.3.64), those plus widgets the workflow lists that the
        table lacks (the class gained inputs in a newer host), and only what the workflow lists (unknown
        classes; current frontends list every widget as an input with a "widget" entry, older ones only
        the converted ones). The first whose value count fits wins; a known class falls back to its table.
        """
        values = node.get("widgets_values") or []
        listed = [
            InputSpec(slot["widget"]["name"], str(slot.get("type")), widget=True)
            for slot in _inputs(node)
            if isinstance(slot.get("widget"), dict) and isinstance(slot["widget"].get("name"), str)
        ]
        listed = [replace(s, control=is_control_widget(s.name, s.type)) for s in listed]
        known = lookup(node["type"])
        candidates = []
        if known is not None:
            names = {spec.name for spec in known.inputs}
            candidates.append(list(known.widgets))
            newer = [spec for spec in listed if spec.name not in names]
            if newer:
                candidates.append(list(known.widgets) + newer)
        candidates.append(listed)
        for specs in candidates:
            if len(values) in (len(specs), len(specs) + sum(s.control + s.upload for s in specs)):
                return specs
        return list(known.widgets) if known is not None else None

    def widget_values(self, scope: _Scope, node: dict[str, Any]) -> dict[str, Any]:
        values = node.get("widgets_values")
        if values is None:
            return {}
        if isinstance(values, dict):  # some custom nodes save their widgets by name
            return {str(k): v for k, v in values.items()}
        if not isinstance(values, list):
            self.warnings.append(f"{describe(node, scope.path)}: widgets_values is not a list; ignored")
            return {}
        specs = self.widget_specs(node)
        if specs is None:
            if values:
                self.warnings.append(
                    f"{describe(node, scope.path)}: {len(values)} widget values of an unknown node type "
                    "that the workflow does not name; not mapped"
                )
            return {}
        mapped, leftover = _align(specs, values)
        if leftover or len(mapped) < len(specs):
            expected = len(specs) + sum(s.control or s.upload for s in specs)
            self.warnings.append(
                f"{describe(node, scope.path)}: {len(values)} widget values where {host_version()} has "
                f"{len(specs)} widgets ({expected} values with their extras); mapped by position"
            )
        return mapped

    # -- link resolution, as the frontend's ExecutableNodeDTO does it

    def resolve_input(self, scope: _Scope, node: dict[str, Any], index: int, seen: set) -> Any:
        """What feeds input ``index`` of ``node``: a Link, a _Value, or None (unconnected)."""
        if scope.group is not None:
            return self.resolve_group_input(scope, node, index, seen)
        slots = _inputs(node)
        if index >= len(slots) or slots[index].get("link") is None:
            return None
        link = scope.links.get(str(slots[index]["link"]))
        if link is None:
            self.warnings.append(
                f"{describe(node, scope.path)} input {slots[index].get('name')!r}: link "
                f"{slots[index]['link']} does not exist; treated as unconnected"
            )
            return None
        if link.origin == SUBGRAPH_INPUT_NODE and scope.instance is not None:
            return self.resolve_subgraph_input(scope, link.origin_slot, seen)
        origin = scope.nodes.get(str(link.origin))
        if origin is None:
            self.warnings.append(
                f"{describe(node, scope.path)} input {slots[index].get('name')!r}: linked node "
                f"{link.origin} does not exist; treated as unconnected"
            )
            return None
        return self.resolve_output(scope, origin, link.origin_slot, slots[index].get("type"), seen)

    def resolve_subgraph_input(self, scope: _Scope, slot: int, seen: set) -> Any:
        """Input ``slot`` of a subgraph seen from inside: the instance's outer link, or its widget value."""
        assert scope.instance is not None and scope.parent is not None and scope.definition is not None
        inputs = scope.definition.get("inputs") or []
        if slot >= len(inputs):
            raise WorkflowError(f"subgraph {describe(scope.instance, scope.parent.path)} has no input {slot}")
        name = inputs[slot].get("name")
        outer = _inputs(scope.instance)
        index = next((i for i, s in enumerate(outer) if s.get("name") == name), None)
        if index is not None and outer[index].get("link") is not None:
            return self.resolve_input(scope.parent, scope.instance, index, seen)
        return scope.promoted.get(name)

    def resolve_output(self, scope: _Scope, node: dict[str, Any], slot: int, want: Any, seen: set) -> Any:
        key = (scope.path, str(node["id"]), slot)
        if key in seen:
            raise WorkflowError(
                f"{describe(node, scope.path)}: its links loop through virtual or bypassed nodes"
            )
        seen.add(key)
        mode, kind = node.get("mode", 0), node["type"]
        if mode == MUTED:
            return None
        if mode == BYPASSED:
            group = kind.startswith(GROUP_PREFIXES)
            index = _group_bypass_slot(node, slot, want) if group else _bypass_slot(node, slot, want)
            if index is None:
                self.warnings.append(
                    f"bypassed {describe(node, scope.path)} has no input of type {want} to pass through "
                    f"output {slot}; the input it feeds is left unconnected"
                )
                return None
            return self.resolve_input(scope, node, index, seen)
        if kind in self.subgraphs:
            return self._subgraph_output(scope.child(node), slot, want, seen)
        if kind.startswith(GROUP_PREFIXES):
            return self._group_output(scope.group_child(node), slot, want, seen)
        if kind == "Reroute":
            return self.resolve_input(scope, node, 0, seen)
        if kind == "PrimitiveNode":
            values = node.get("widgets_values")
            return _Value(values[0]) if isinstance(values, list) and values else None
        if kind == "GetNode":
            return self._get_node(scope, node, seen)
        if kind in VIRTUAL_TYPES:
            return None
        return Link(scope.exec_id(node), slot)

    def _subgraph_output(self, inner: _Scope, slot: int, want: Any, seen: set) -> Any:
        outputs = (inner.definition or {}).get("outputs") or []
        link_ids = outputs[slot].get("linkIds") if slot < len(outputs) else None
        if not link_ids:
            return None
        link = inner.links.get(str(link_ids[0]))
        if link is None:
            return None
        if link.origin == SUBGRAPH_INPUT_NODE:  # an input wired straight to an output
            return self.resolve_subgraph_input(inner, link.origin_slot, seen)
        origin = inner.nodes.get(str(link.origin))
        return None if origin is None else self.resolve_output(inner, origin, link.origin_slot, want, seen)

    def _get_node(self, scope: _Scope, node: dict[str, Any], seen: set) -> Any:
        """KJNodes' GetNode reads the input of the SetNode with the same name (widgets_values[0])."""
        name = (node.get("widgets_values") or [None])[0]
        for other in scope.nodes.values():
            if other["type"] == "SetNode" and (other.get("widgets_values") or [None])[0] == name:
                return self.resolve_input(scope, other, 0, seen)
        self.warnings.append(f"{describe(node, scope.path)}: no SetNode named {name!r}")
        return None

    def promoted_values(self, scope: _Scope) -> dict[str, _Value]:
        """Values a subgraph instance stores for its promoted widgets, by subgraph input name.

        The instance saves one value per subgraph input that feeds a widget input, in input order.
        Newer workflows promote inner widgets directly (properties.proxyWidgets) and save none: the
        inner nodes' own values then stand.
        """
        assert scope.instance is not None and scope.definition is not None and scope.parent is not None
        values = scope.instance.get("widgets_values")
        if not isinstance(values, list) or not values:
            return {}
        names = [
            sub_input.get("name")
            for sub_input in scope.definition.get("inputs") or []
            if any(_feeds_widget(scope, link_id) for link_id in sub_input.get("linkIds") or [])
        ]
        if len(names) != len(values):
            self.warnings.append(
                f"subgraph {describe(scope.instance, scope.parent.path)}: {len(values)} widget values for "
                f"{len(names)} promoted widgets; the inner nodes' own values are used"
            )
            return {}
        return {name: _Value(value) for name, value in zip(names, values, strict=True)}


def _feeds_widget(scope: _Scope, link_id: Any) -> bool:
    link = scope.links.get(str(link_id))
    target = scope.nodes.get(str(link.target)) if link else None
    slots = _inputs(target) if target else []
    return bool(
        link and link.target_slot < len(slots) and isinstance(slots[link.target_slot].get("widget"), dict)
    )


def _bypass_slot(node: dict[str, Any], slot: int, want: Any) -> int | None:
    """Which input a bypassed node passes to output ``slot`` (ExecutableNodeDTO._getBypassSlotIndex)."""
    inputs = _inputs(node)
    outputs = node.get("outputs") or []
    if slot >= len(outputs) or not isinstance(outputs[slot], dict):
        return None
    out_type = outputs[slot].get("type")
    if want in ("*", "", None):
        return slot if len(inputs) > slot else (0 if inputs else None)
    same = inputs[slot] if slot < len(inputs) else None
    if same and _valid_connection(same.get("type"), out_type) and _valid_connection(same.get("type"), want):
        return slot
    for index, candidate in enumerate(inputs):
        if candidate.get("type") == want:
            return index
    for index, candidate in enumerate(inputs):
        if _valid_connection(candidate.get("type"), out_type) and _valid_connection(
            candidate.get("type"), want
        ):
            return index
    return None


def _group_bypass_slot(node: dict[str, Any], slot: int, want: Any) -> int | None:
    """A bypassed group node passes the first input of exactly the requested type, its own slot first
    (ExecutableGroupNodeDTO.resolveOutput)."""
    inputs = _inputs(node)
    order = (slot, *range(len(inputs)))
    return next((i for i in order if i < len(inputs) and inputs[i].get("type") == want), None)


def _align(specs: list[InputSpec], values: list[Any]) -> tuple[dict[str, Any], int]:
    """Map widgets_values onto widget names; returns the mapping and how many values were left over.

    After a widget with a control (seed-like) or an upload button the frontend stores one more value.
    When the count says whether those extras are present, trust it; otherwise look at each value.
    """
    extras = sum(s.control + s.upload for s in specs)
    if len(values) == len(specs) + extras:
        policy: bool | None = True
    elif len(values) == len(specs):
        policy = False
    else:
        policy = None
    mapped: dict[str, Any] = {}
    position = 0
    for spec in specs:
        if position >= len(values):
            break
        mapped[spec.name] = values[position]
        position += 1
        for has_extra, accepted in ((spec.control, CONTROL_VALUES), (spec.upload, UPLOAD_VALUES)):
            if not has_extra or position >= len(values):
                continue
            value = values[position]
            if policy or (policy is None and isinstance(value, str) and value in accepted):
                position += 1
    return mapped, len(values) - position


def _note_unknown(graph: Graph) -> None:
    unknown = Counter(node.class_type for node in graph.nodes.values() if lookup(node.class_type) is None)
    for kind, count in sorted(unknown.items()):
        graph.warnings.append(
            f"node type {kind} ({count}x) is unknown to {host_version()}: kept as an opaque node"
            + (
                ", assumed to be an output node"
                if any(graph.is_output(n.id) for n in graph.nodes.values() if n.class_type == kind)
                else ""
            )
        )


# ------------------------------------------------------------------------------------------- public


def parse_workflow(data: dict[str, Any]) -> Graph:
    """A Graph from an API prompt ({id: {class_type, inputs}}) or a UI workflow ({nodes, links, ...})."""
    if not isinstance(data, dict):
        raise WorkflowError(f"not a workflow: expected a JSON object, got {type(data).__name__}")
    if isinstance(data.get("nodes"), list):
        parser = _UiParser(data)
        try:
            return parser.parse()
        except WorkflowError:
            raise
        except (KeyError, TypeError, AttributeError, IndexError, ValueError, RecursionError) as exc:
            # A shape the parser does not expect (hand-edited or damaged JSON): say where it stopped.
            raise WorkflowError(f"malformed workflow near {parser.where}: {exc!r}") from exc
    if data and all(isinstance(v, dict) and "class_type" in v for v in data.values()):
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
