"""One graph level of a UI workflow as the UI parser (workflow_ui.py) reads it: a scope (the root, a
subgraph instance or a group node instance) with its nodes and links, the links' parsing, litegraph's
type match, and the tail calls the parser's resolvers return."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .graph_types import WorkflowError, describe
from .group_nodes import _GroupDef


class _Parser(Protocol):
    """What a scope asks of the UI parser (workflow_ui._UiParser) as it builds its children."""

    subgraphs: dict[str, dict[str, Any]]

    def promoted_values(self, scope: _Scope) -> dict[str, _Value]: ...

    def group_def(self, node: dict[str, Any], path: tuple[str, ...]) -> _GroupDef: ...

    def group_values(
        self, group: _GroupDef, node: dict[str, Any], path: tuple[str, ...]
    ) -> dict[str, dict[str, Any]]: ...


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


class _Then:
    """A tail call the resolvers return instead of making it: ``_UiParser.resolve`` runs them in a loop,
    so a chain of 100,000 reroutes or bypassed nodes takes no Python stack."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args


_Seen = tuple[tuple[str, ...], str, int]  # an output met while resolving: (scope path, node id, slot)


class _Scope:
    """One graph level: the root, or one instance of a subgraph definition."""

    def __init__(
        self,
        parser: _Parser,
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
    except (IndexError, KeyError, TypeError, ValueError, OverflowError):
        return None
    return None


def _valid_connection(a: Any, b: Any) -> bool:
    """litegraph's isValidConnection: "*"/"" match anything; comma-separated types match any member."""
    if a in ("*", "", None, 0) or b in ("*", "", None, 0) or a == b:
        return True
    x, y = str(a).lower(), str(b).lower()
    if "," not in x and "," not in y:
        return x == y
    return bool(set(x.split(",")) & set(y.split(",")))
