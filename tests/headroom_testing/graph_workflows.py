"""Workflow builders for the graph tests: the saved fixtures and a small UI-workflow builder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from comfyui_headroom.memory.workflow.graph import Graph, Link

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "graph"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def signature(graph: Graph) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """What the executor sees of a graph: ids in order, classes, inputs in order."""
    return [(n.id, n.class_type, list(n.inputs.items())) for n in graph.nodes.values()]


def to_prompt(graph: Graph) -> dict[str, dict[str, Any]]:
    """``graph`` as an API prompt (what POST /prompt takes); lists wrapped as the frontend wraps them."""

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
        for node in graph.nodes.values()
    }


class UI:
    """A small builder of UI workflows shaped like the frontend saves them (links as arrays)."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.links: list[list[Any]] = []

    def node(
        self,
        kind: str,
        inputs: tuple[tuple[str, str] | tuple[str, str, str], ...] = (),
        outputs: tuple[str, ...] = (),
        widgets: list[Any] | None = None,
        mode: int = 0,
        title: str | None = None,
    ) -> dict[str, Any]:
        """inputs: (name, type) sockets, or (name, type, "widget") for a widget shown as an input."""
        node: dict[str, Any] = {
            "id": len(self.nodes) + 1,
            "type": kind,
            "mode": mode,
            "inputs": [
                {"name": i[0], "type": i[1], "link": None}
                | ({"widget": {"name": i[0]}} if len(i) > 2 else {})
                for i in inputs
            ],
            "outputs": [{"name": t, "type": t, "links": []} for t in outputs],
            "properties": {},
        }
        if widgets is not None:
            node["widgets_values"] = widgets
        if title is not None:
            node["title"] = title
        self.nodes.append(node)
        return node

    def link(self, source: dict[str, Any], slot: int, target: dict[str, Any], name: str) -> None:
        link_id = len(self.links) + 1
        index = next(i for i, s in enumerate(target["inputs"]) if s["name"] == name)
        target["inputs"][index]["link"] = link_id
        source["outputs"][slot]["links"].append(link_id)
        kind = source["outputs"][slot]["type"]
        self.links.append([link_id, source["id"], slot, target["id"], index, kind])

    def data(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "links": self.links, "version": 0.4}
