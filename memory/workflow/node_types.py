"""What we know about ComfyUI node classes without a host: inputs, outputs, output-node and async flags.

The table (data/node_types.json) is dumped from ComfyUI 0.33 (its built-in and API nodes, plus the few
classes of 0.3.64 it no longer has) by scripts/dump_node_types.py: the same
attributes the executor reads (``OUTPUT_NODE``, a coroutine ``FUNCTION``, ``"lazy"`` inputs) and what the
frontend needs to map ``widgets_values`` onto input names (widget inputs in definition order, and the
extra values it stores after some widgets).

Classes the table does not know (custom nodes, nodes of newer hosts) are *opaque*: the graph parser
builds their inputs from what the UI workflow itself records, and :func:`guess_output_node` decides
whether the executor would treat them as an output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "node_types.json"
# Headroom's own nodes in the same format (scripts/dump_node_types.py --pack); checked against the live
# classes by tests/host/test_node_table.py.
PACK_FILE = Path(__file__).resolve().parents[1] / "data" / "headroom_nodes.json"
# Classes of newer hosts that decide which values and branches a graph runs (the lazy If/Else switch,
# the math expression), written by hand from their source: the 2026 host's comfy_extras/nodes_logic.py
# and nodes_math.py. Their dynamic inputs ("values.a", ...) come from the workflow itself.
NEWER_FILE = Path(__file__).resolve().parents[1] / "data" / "newer_nodes.json"

# Values of the frontend's "control_after_generate" combo, saved after seed-like widgets.
CONTROL_VALUES = frozenset({"fixed", "increment", "decrement", "randomize", "increment-wrap"})
# Types the frontend draws as widgets rather than sockets (the rest of its widget types are previews).
WIDGET_TYPES = frozenset({"INT", "FLOAT", "BOOLEAN", "STRING", "COMBO"})
# Nodes that exist only in the frontend: never sent to the server.
VIRTUAL_TYPES = frozenset({"Reroute", "PrimitiveNode", "Note", "MarkdownNote", "GetNode", "SetNode"})
_OUTPUT_PREFIXES = ("Save", "Preview")


@dataclass(frozen=True, slots=True)
class InputSpec:
    name: str
    type: str  # "COMBO" for list-valued inputs
    widget: bool = False  # drawn as a widget: has a slot in widgets_values
    lazy: bool = False
    optional: bool = False
    control: bool = False  # a control_after_generate value follows it in widgets_values
    upload: bool = False  # an upload-button value follows it in widgets_values
    # A dynamic combo (V3 DynamicCombo): option key -> the inputs that option adds, named
    # "<this name>.<input>", whose widget values follow this one's in widgets_values.
    options: tuple[tuple[str, tuple[InputSpec, ...]], ...] = ()

    def nested(self, value: object) -> tuple[InputSpec, ...]:
        """The inputs the option ``value`` of a dynamic combo adds (none for any other input)."""
        return next((specs for key, specs in self.options if key == value), ())


@dataclass(frozen=True, slots=True)
class NodeType:
    name: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    output_node: bool = False
    is_async: bool = False
    # Its cache signature holds the node id (NOT_IDEMPOTENT or a hidden UNIQUE_ID): never deduplicated.
    unique_signature: bool = False
    # It has IS_CHANGED/fingerprint_inputs. In 0.3.64 these all hash the file their inputs name, so
    # equal inputs give equal fingerprints.
    fingerprint: bool = False

    def input(self, name: str) -> InputSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    @property
    def widgets(self) -> tuple[InputSpec, ...]:
        return tuple(spec for spec in self.inputs if spec.widget)

    @property
    def lazy_inputs(self) -> frozenset[str]:
        return frozenset(spec.name for spec in self.inputs if spec.lazy)


def _input(row: list[Any], prefix: str = "") -> InputSpec:
    flags = row[2] if len(row) > 2 else ""
    name = prefix + row[0]
    options = row[3] if len(row) > 3 and isinstance(row[3], dict) else {}
    return InputSpec(
        name=name,
        type=row[1],
        widget="w" in flags,
        lazy="l" in flags,
        optional="o" in flags,
        control="c" in flags,
        upload="u" in flags,
        options=tuple((key, tuple(_input(r, f"{name}.") for r in rows)) for key, rows in options.items()),
    )


@cache
def _table() -> tuple[str, dict[str, NodeType]]:
    try:
        data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
        ours = json.loads(PACK_FILE.read_text(encoding="utf-8"))
        newer = json.loads(NEWER_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # a broken install; say which file and how to rebuild it
        raise RuntimeError(f"the node table is unreadable ({exc}); run scripts/dump_node_types.py") from exc
    data["types"] = {**newer["types"], **data["types"], **ours["types"]}
    types = {
        name: NodeType(
            name=name,
            inputs=tuple(_input(row) for row in entry["i"]),
            outputs=tuple(entry["r"]),
            output_node=bool(entry.get("out")),
            is_async=bool(entry.get("async")),
            unique_signature=bool(entry.get("uid")),
            fingerprint=bool(entry.get("chg")),
        )
        for name, entry in data["types"].items()
    }
    return data["host"], types


def node_table_host() -> str:
    """The host the table was dumped from, e.g. "ComfyUI 0.3.64"."""
    return _table()[0]


def lookup(class_type: str) -> NodeType | None:
    return _table()[1].get(class_type)


def guess_output_node(class_type: str, n_outputs: int | None = None) -> bool:
    """Whether an unknown class is an output node (the executor only runs what output nodes need).

    Heuristic: ComfyUI's own output nodes are named Save*/Preview*, and a node with no outputs at all
    (``n_outputs == 0``, known from a UI workflow) can only do something if it is an output node.
    """
    return class_type.startswith(_OUTPUT_PREFIXES) or n_outputs == 0


def is_output_node(class_type: str, n_outputs: int | None = None) -> bool:
    known = lookup(class_type)
    return known.output_node if known is not None else guess_output_node(class_type, n_outputs)


def is_control_widget(name: str, type_name: str) -> bool:
    """The frontend's default for a widget it knows nothing else about: seed-like INTs get a control."""
    return type_name == "INT" and name in ("seed", "noise_seed")
