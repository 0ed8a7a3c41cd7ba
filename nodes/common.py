"""What the node adapters share: choice lists, the any-type and the budget input."""

from __future__ import annotations

from ..memory.units import parse_vram_budget as parse_gb

CATEGORY = "Headroom"

# Where a component may live; "auto" lets the planner decide.
RESIDENCY_CHOICES = ["auto", "gpu", "pinned_ram", "ram", "disk"]
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
        {"default": "auto", "tooltip": 'VRAM this node may use: "auto" (the plan decides) or GB, e.g. 6'},
    )


def parse_vram_budget(text: str, node: str) -> int | None:
    """The ``vram_budget`` input in bytes: None for "auto", else GB ("6", "5.5", "6GB")."""
    try:
        gb = parse_gb(text)
    except ValueError as exc:
        raise ValueError(f"{node}: input vram_budget: {exc}") from None
    return None if gb is None else int(gb * 2**30)
