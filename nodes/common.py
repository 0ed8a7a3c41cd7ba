"""What the node adapters share: choice lists, the any-type and the budget input."""

from __future__ import annotations

from typing import Any

from ..memory.planning.costmodel import RESIDENCY_CHOICES as _CHOICES
from ..memory.units import VRAM_BUDGET_FORMS, parse_vram_budget_bytes

CATEGORY = "Headroom"

# Where a component may live; "auto" lets the planner decide (a list: the host's combo input type).
RESIDENCY_CHOICES = list(_CHOICES)
NONE_CHOICE = "none"


class AnyType(str):
    """A type name that matches every other: the host compares socket types with ``!=``."""

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


ANY = AnyType("*")


def vram_budget_input() -> tuple[str, dict]:
    return (
        "STRING",
        {"default": "auto", "tooltip": f"VRAM this node may use: {VRAM_BUDGET_FORMS} (a bare number is GB)"},
    )


def vram_budget_error(text: Any, node: str) -> str | None:
    """Why ``text`` is not a valid ``vram_budget`` for ``node``, or None when it is (a linked input,
    not known at queue time, is None too)."""
    if text is None:
        return None
    try:
        parse_vram_budget_bytes(text)
    except ValueError as exc:
        return f"{node}: input vram_budget: {exc}."
    return None


def validate_vram_budget(text: Any, node: str) -> bool | str:
    """For a node's ``VALIDATE_INPUTS``: True, or the message the host shows at queue time."""
    return vram_budget_error(text, node) or True


def parse_vram_budget(text: str, node: str) -> int | None:
    """The ``vram_budget`` input in bytes: None for "auto", else a size ("6" is GB, "6GB", "6144MB")."""
    error = vram_budget_error(text, node)
    if error:
        raise ValueError(error)
    return parse_vram_budget_bytes(text)
