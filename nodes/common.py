"""What the node adapters share: choice lists, the any-type and the budget input."""

from __future__ import annotations

from typing import Any

from ..memory.planning.costmodel import RESIDENCY_CHOICES as _CHOICES
from ..memory.units import VRAM_BUDGET_FORMS, parse_vram_budget

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


def vram_budget_input() -> tuple[str, dict[str, Any]]:
    return (
        "STRING",
        {
            "default": "auto",
            "tooltip": f"The most VRAM this node may use: {VRAM_BUDGET_FORMS} (a bare number is GB). "
            "auto (default): what the GPU has free. Checked when you queue the prompt",
        },
    )


def streaming_inputs() -> dict[str, tuple[str, dict[str, Any]]]:
    """The optional inputs of every node that streams a model's blocks (the sampler, Stream Model)."""
    return {
        "vram_budget": vram_budget_input(),
        "prefetch": (
            "INT",
            {
                "default": -1,
                "min": -1,
                "max": 16,
                "tooltip": "Blocks uploaded ahead of the one computing (0-16); each takes one "
                "block's VRAM. -1 (default): auto, the planner's choice",
            },
        ),
        "resident_blocks": (
            "INT",
            {
                "default": -1,
                "min": -1,
                "max": 4096,
                "tooltip": "Blocks kept in VRAM for the whole run instead of streamed each step "
                "(0-4096). -1 (default): auto, as many as vram_budget leaves room for",
            },
        ),
        "pin_memory": (
            "BOOLEAN",
            {
                "default": True,
                "tooltip": "On (default): stream from a pinned RAM copy of the streamed blocks, about "
                "twice as fast, kept for the next run; off: no copy, each weight streams from where it "
                "is (its RAM, or its file for a model kept on disk), for machines short of RAM",
            },
        ),
    }


def vram_budget_error(text: Any, node: str) -> str | None:
    """Why ``text`` is not a valid ``vram_budget`` for ``node``, or None when it is (a linked input,
    not known at queue time, is None too)."""
    if text is None:
        return None
    try:
        parse_vram_budget(text)
    except ValueError as exc:
        return f"{node}: input vram_budget: {exc}."
    return None


def validate_vram_budget(text: Any, node: str) -> bool | str:
    """For a node's ``VALIDATE_INPUTS``: True, or the message the host shows at queue time."""
    return vram_budget_error(text, node) or True


def node_vram_budget(text: str, node: str) -> int | None:
    """The ``vram_budget`` input in bytes: None for "auto", else a size ("6" is GB, "6GB", "6144MB")."""
    error = vram_budget_error(text, node)
    if error:
        raise ValueError(error)
    return parse_vram_budget(text)
