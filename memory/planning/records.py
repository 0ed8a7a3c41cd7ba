"""What a plan leaves for the run it was made for: the predicted figures per node, and the key that finds
the plan made when the prompt was queued again when it runs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class PlannedNode:
    """What the plan predicted for one node of the predicted order."""

    node_id: str
    class_type: str
    order: int
    vram_peak: int
    wall_s: float
    placements: dict[str, str]  # component label -> tier label (with resident/total blocks when streamed)
    reasons: dict[str, str] = field(default_factory=dict)  # component label -> why it is there (one line)


@dataclass(frozen=True)
class PlannedRun:
    """The plan of one prompt, reduced to what plan-vs-actual compares, plus its full JSON for the route."""

    fits: bool | None
    nodes: tuple[PlannedNode, ...]
    budget_vram: int | None
    min_vram: int | None
    plan: dict[str, Any] = field(default_factory=dict, compare=False)  # report.plan_json, for /plan
    preflight: dict[str, Any] = field(default_factory=dict, compare=False)

    def node(self, node_id: str) -> PlannedNode | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)


def prompt_key(prompt: dict[str, Any] | None) -> str:
    """A stable digest of an API prompt, so a plan made at queue time is found again at run time."""
    text = json.dumps(prompt or {}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:16]
