"""Group nodes (the pre-subgraph ``extra.groupNodes``): each definition read the way the frontend's
GroupNodeConfig reads it, for the UI workflow parser (workflow_ui.py); and how widgets_values map
onto widget names, which group nodes and plain nodes share."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .graph_types import GROUP_PREFIXES, UPLOAD_VALUES, WorkflowError
from .node_types import CONTROL_VALUES, VIRTUAL_TYPES, WIDGET_TYPES, InputSpec, lookup, node_table_host


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
    raw_config = data.get("config")
    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}

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
        f"group node {group.name!r}: inner node {index} ({kind}) is unknown to {node_table_host()}; its "
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
