"""What is not planned before planning starts: a prompt the host refuses for a node class it does not
have (nothing of it runs), and an input the planner cannot read (a number past 64 bits, a value nested
past 64 levels), named by node and input. A model name the host does not list is planned by its name
alone (lookups.HostModelFiles never looks it up on disk), as for a workflow whose files are not there
yet; POSTed to /prompt, the host refuses it and its preflight is dropped (monitor.validation_finished)."""

from __future__ import annotations

import math
from typing import Any

from .lookups import host_module


def host_refuses(prompt: dict[str, Any]) -> str:
    """Why the host refuses ``prompt`` ("" when nothing here says it would)."""
    try:
        known = host_module("nodes").NODE_CLASS_MAPPINGS
    except Exception:  # no host nodes module (a test without one): leave the verdict to the planner
        return ""
    for node_id, node in prompt.items():
        kind = node.get("class_type") if isinstance(node, dict) else None
        if isinstance(kind, str) and kind not in known:
            return f"node {node_id} ({kind}) is not a node class of this ComfyUI; the host refuses the prompt"
    return ""


MAX_DEPTH = 64  # no input of a node class nests deeper; past it a value is refused before planning
MAX_BITS = 64  # the widest integer an input takes (a seed); past it a number cannot be planned with


def unreadable_value(prompt: dict[str, Any]) -> str:
    """The first input the planner cannot read ("" when none): a number that is not finite or wider than
    64 bits (``steps: 10**400``), or a value nested past 64 levels; named by node and input, never
    repeated. Iterative: a deep value costs no recursion."""
    for node_id, node in prompt.items():
        inputs = node.get("inputs") if isinstance(node, dict) else None
        if not isinstance(inputs, dict):
            continue
        for name, value in inputs.items():
            why = _unreadable(value)
            if why:
                kind = node.get("class_type")
                kind = kind[:64] if isinstance(kind, str) else "?"
                return f"node {str(node_id)[:64]} ({kind}) input {str(name)[:64]}: {why}"
    return ""


def _unreadable(value: Any) -> str:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"the value is nested deeper than {MAX_DEPTH} levels"
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and item.bit_length() > MAX_BITS:
            return f"the number is too large to plan with ({item.bit_length()} bits; at most {MAX_BITS})"
        if isinstance(item, float) and not math.isfinite(item):
            return "the number is not finite"
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return ""
