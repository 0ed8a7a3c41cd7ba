"""The UI workflow parser: flattens a UI workflow into the Graph the executor would receive (see graph.py's
module docstring for the rules it follows)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .graph_types import (
    _JS_INDEX,
    _UUID,
    BYPASSED,
    GROUP_PREFIXES,
    MAX_NODES,
    MUTED,
    SUBGRAPH_INPUT_NODE,
    Graph,
    Link,
    Node,
    WorkflowError,
    _note_unknown,
    check_links,
    describe,
)
from .group_nodes import _align, _group_bypass_slot, _GroupDef, _inputs, _read_group
from .node_types import (
    VIRTUAL_TYPES,
    InputSpec,
    guess_output_node,
    is_control_widget,
    lookup,
    node_table_host,
)
from .ui_scope import _Scope, _Seen, _Then, _valid_connection, _Value


class _UiParser:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.warnings: list[str] = []
        definitions = data.get("definitions") or {}
        self.subgraphs: dict[str, dict[str, Any]] = {}
        subgraphs = definitions.get("subgraphs") if isinstance(definitions, dict) else None
        for definition in subgraphs if isinstance(subgraphs, list) else []:
            if isinstance(definition, dict) and isinstance(definition.get("id"), str):
                self.subgraphs[definition["id"]] = definition
        extra = data.get("extra") if isinstance(data.get("extra"), dict) else {}
        groups = extra.get("groupNodes") if isinstance(extra, dict) else None
        self.group_nodes: dict[str, Any] = groups if isinstance(groups, dict) else {}
        self.groups: dict[str, _GroupDef] = {}
        self.included: list[tuple[_Scope, dict[str, Any]]] = []
        self.where = "the top level"  # the node being read, for messages about malformed JSON
        self.dangling: list[str] = []  # links of the input being resolved that point nowhere
        self.broken: dict[str, list[str]] = {}  # required inputs fed by such links, by node id
        self.listed: dict[str, int] = {}  # how many outputs each node shows, by node id

    # -- walking

    def parse(self) -> Graph:
        root = _Scope(self, self.data["nodes"], self.data.get("links") or [])
        size = self.expanded_size(root.nodes.values(), {}, ())
        if size > MAX_NODES:
            raise WorkflowError(
                f"the workflow expands to {size:,} nodes once its subgraphs are expanded; the limit is "
                f"{MAX_NODES:,}"
            )
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
        check_links(graph, self.broken, self.listed)
        _note_unknown(graph)
        return graph

    def expanded_size(self, nodes: Any, sizes: dict[str, int], inside: tuple[str, ...]) -> int:
        """How many nodes _walk would include, counted before expanding anything: each subgraph
        instance counts its definition's size, so nesting multiplies."""
        total = 0
        for node in nodes:
            if not isinstance(node, dict) or node.get("mode", 0) in (MUTED, BYPASSED):
                continue
            kind = node.get("type")
            if isinstance(kind, str) and kind in VIRTUAL_TYPES:
                continue  # _walk leaves them out too: a chain of reroutes is resolved, not planned
            if kind in self.subgraphs:
                if kind in inside:
                    raise WorkflowError(f"subgraph {describe(node)} contains itself")
                if kind not in sizes:
                    definition = self.subgraphs[kind].get("nodes")
                    inner = definition if isinstance(definition, list) else []
                    sizes[kind] = self.expanded_size(inner, sizes, (*inside, kind))
                total += sizes[kind]
            elif isinstance(kind, str) and kind.startswith(GROUP_PREFIXES):
                group = self.group_nodes.get(kind[len(GROUP_PREFIXES[0]) :])
                members = group.get("nodes") if isinstance(group, dict) else None
                total += len(members) if isinstance(members, list) else 1
            else:
                total += 1
        return total

    def _walk(self, root: _Scope) -> None:
        # depth first, each subgraph's nodes where its instance stands; a stack, not recursion
        stack = [(root, iter(list(root.nodes.values())))]
        while stack:
            scope, nodes = stack[-1]
            node = next(nodes, None)
            if node is None:
                stack.pop()
                continue
            kind = node["type"]
            self.where = describe(node, scope.path)
            if node.get("mode", 0) in (MUTED, BYPASSED):
                continue  # a bypassed one is resolved through its own inputs, whatever it is
            if kind.startswith(GROUP_PREFIXES) or kind in self.subgraphs:
                inner = scope.group_child(node) if kind.startswith(GROUP_PREFIXES) else scope.child(node)
                stack.append((inner, iter(list(inner.nodes.values()))))
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

    def resolve_group_input(self, scope: _Scope, node: dict[str, Any], index: int, seen: set[_Seen]) -> Any:
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
            return _Then(self.resolve_input, scope.parent, scope.instance, outer, seen)
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
        return _Then(self.resolve_output, scope, source, origin[1], want, seen)

    def _group_output(self, inner: _Scope, slot: int, want: Any, seen: set[_Seen]) -> Any:
        assert inner.group is not None and inner.instance is not None and inner.parent is not None
        if slot >= len(inner.group.outputs):
            self.warnings.append(
                f"group node {describe(inner.instance, inner.parent.path)} has no output {slot}; the input "
                "it feeds is left unconnected"
            )
            return None
        index, inner_slot = inner.group.outputs[slot]
        return _Then(self.resolve_output, inner, inner.nodes[str(index)], inner_slot, want, seen)

    # -- one node

    def _build(self, scope: _Scope, node: dict[str, Any]) -> Node:
        self.where = describe(node, scope.path)
        inputs = self.widget_values(scope, node)
        inputs.update(scope.overrides.get(str(node["id"]), {}))
        for index, slot in enumerate(_inputs(node)):
            name = slot.get("name")
            if not isinstance(name, str):
                continue
            self.dangling = []
            resolved = self.resolve(self.resolve_input, scope, node, index, set())
            if isinstance(resolved, _Value):
                inputs[name] = resolved.value
            elif isinstance(resolved, Link):
                inputs[name] = resolved
            elif self.dangling and name not in inputs and _required(node["type"], name):
                # The frontend sends the input unconnected; the host refuses a missing required input.
                own = f"{describe(node, scope.path)} input {name!r}"
                why = (
                    self.dangling[0]
                    if self.dangling[0].startswith(own)
                    else f"{own} is fed by {self.dangling[0]}"
                )
                self.broken.setdefault(scope.exec_id(node), []).append(
                    f"{why}, and ComfyUI requires this input"
                )
        kind = node["type"]
        if isinstance(node.get("outputs"), list):
            self.listed[scope.exec_id(node)] = len(node["outputs"])
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
            table = _with_options(known.widgets, values)
            names = {spec.name for spec in known.inputs} | {spec.name for spec in table}
            candidates.append(table)
            newer = [spec for spec in listed if spec.name not in names]
            if newer:
                candidates.append(table + newer)
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
                f"{describe(node, scope.path)}: {len(values)} widget values where {node_table_host()} has "
                f"{len(specs)} widgets ({expected} values with their extras); mapped by position"
            )
        return mapped

    # -- link resolution, as the frontend's ExecutableNodeDTO does it

    @staticmethod
    def resolve(fn: Callable[..., Any], *args: Any) -> Any:
        """Run a resolver and the tail calls it returns (``_Then``) until one gives an answer."""
        result = fn(*args)
        while isinstance(result, _Then):
            result = result.fn(*result.args)
        return result

    def resolve_input(self, scope: _Scope, node: dict[str, Any], index: int, seen: set[_Seen]) -> Any:
        """What feeds input ``index`` of ``node``: a Link, a _Value, or None (unconnected)."""
        if scope.group is not None:
            return _Then(self.resolve_group_input, scope, node, index, seen)
        slots = _inputs(node)
        if index >= len(slots) or slots[index].get("link") is None:
            return None
        link = scope.links.get(str(slots[index]["link"]))
        if link is None:
            self.dangling.append(
                f"{describe(node, scope.path)} input {slots[index].get('name')!r}: link "
                f"{slots[index]['link']} does not exist; treated as unconnected"
            )
            self.warnings.append(self.dangling[-1])
            return None
        if link.origin == SUBGRAPH_INPUT_NODE and scope.instance is not None:
            return _Then(self.resolve_subgraph_input, scope, link.origin_slot, seen)
        origin = scope.nodes.get(str(link.origin))
        if origin is None:
            self.dangling.append(
                f"{describe(node, scope.path)} input {slots[index].get('name')!r}: linked node "
                f"{link.origin} does not exist; treated as unconnected"
            )
            self.warnings.append(self.dangling[-1])
            return None
        return _Then(self.resolve_output, scope, origin, link.origin_slot, slots[index].get("type"), seen)

    def resolve_subgraph_input(self, scope: _Scope, slot: int, seen: set[_Seen]) -> Any:
        """Input ``slot`` of a subgraph seen from inside: the instance's outer link, or its widget value."""
        assert scope.instance is not None and scope.parent is not None and scope.definition is not None
        inputs = scope.definition.get("inputs") or []
        if slot >= len(inputs):
            raise WorkflowError(f"subgraph {describe(scope.instance, scope.parent.path)} has no input {slot}")
        name = inputs[slot].get("name")
        outer = _inputs(scope.instance)
        index = next((i for i, s in enumerate(outer) if s.get("name") == name), None)
        if index is not None and outer[index].get("link") is not None:
            return _Then(self.resolve_input, scope.parent, scope.instance, index, seen)
        return scope.promoted.get(name)

    def resolve_output(
        self, scope: _Scope, node: dict[str, Any], slot: int, want: Any, seen: set[_Seen]
    ) -> Any:
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
            return _Then(self.resolve_input, scope, node, index, seen)
        if kind in self.subgraphs:
            return _Then(self._subgraph_output, scope.child(node), slot, want, seen)
        if kind.startswith(GROUP_PREFIXES):
            return _Then(self._group_output, scope.group_child(node), slot, want, seen)
        if kind == "Reroute":
            return _Then(self.resolve_input, scope, node, 0, seen)
        if kind == "PrimitiveNode":
            values = node.get("widgets_values")
            return _Value(values[0]) if isinstance(values, list) and values else None
        if kind == "GetNode":
            return _Then(self._get_node, scope, node, seen)
        if kind in VIRTUAL_TYPES:
            return None
        return Link(scope.exec_id(node), slot)

    def _subgraph_output(self, inner: _Scope, slot: int, want: Any, seen: set[_Seen]) -> Any:
        outputs = (inner.definition or {}).get("outputs") or []
        link_ids = outputs[slot].get("linkIds") if slot < len(outputs) else None
        if not link_ids:
            return None
        link = inner.links.get(str(link_ids[0]))
        outer = inner.parent.path if inner.parent else ()
        where = f"subgraph {describe(inner.instance or {}, outer)} output {slot}"
        if link is None:
            self.dangling.append(f"{where}: link {link_ids[0]} does not exist; treated as unconnected")
            self.warnings.append(self.dangling[-1])
            return None
        if link.origin == SUBGRAPH_INPUT_NODE:  # an input wired straight to an output
            return _Then(self.resolve_subgraph_input, inner, link.origin_slot, seen)
        origin = inner.nodes.get(str(link.origin))
        if origin is None:
            self.dangling.append(f"{where}: linked node {link.origin} does not exist; treated as unconnected")
            self.warnings.append(self.dangling[-1])
            return None
        return _Then(self.resolve_output, inner, origin, link.origin_slot, want, seen)

    def _get_node(self, scope: _Scope, node: dict[str, Any], seen: set[_Seen]) -> Any:
        """KJNodes' GetNode reads the input of the SetNode with the same name (widgets_values[0])."""
        name = (node.get("widgets_values") or [None])[0]
        for other in scope.nodes.values():
            if other["type"] == "SetNode" and (other.get("widgets_values") or [None])[0] == name:
                return _Then(self.resolve_input, scope, other, 0, seen)
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


def _required(class_type: str, name: str) -> bool:
    """Whether the host refuses to run ``class_type`` without input ``name`` (unknown classes: no)."""
    known = lookup(class_type)
    spec = known.input(name) if known is not None else None
    return spec is not None and not spec.optional


def _with_options(specs: Sequence[InputSpec], values: Sequence[Any]) -> list[InputSpec]:
    """``specs`` with each dynamic combo followed by the widgets of the option its value chose, as the
    frontend lays out widgets_values (nested combos likewise)."""
    out: list[InputSpec] = []
    pending = list(reversed(specs))
    position = 0
    while pending:
        spec = pending.pop()
        out.append(spec)
        value = values[position] if position < len(values) else None
        position += 1 + spec.control + spec.upload
        if spec.options and isinstance(value, str):
            pending.extend(reversed([n for n in spec.nested(value) if n.widget]))
    return out
