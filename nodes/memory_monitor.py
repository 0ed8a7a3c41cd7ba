"""VRAM Stats (the Memory Monitor): sits on any wire and reports memory at that point of the graph."""

from __future__ import annotations

from typing import Any

import torch

from ..memory.names import NODE_IDS
from ..memory.telemetry.report import prompt_titles
from .common import ANY, CATEGORY
from .host import state

CHART_OUTPUT = 2  # index of "chart" in RETURN_TYPES


def output_used(prompt: Any, node_id: Any, index: int) -> bool:
    """Whether any node of the prompt takes output ``index`` of ``node_id`` (drawing the chart costs
    a matplotlib render; skip it when nothing consumes it). Unknown prompt: assume used."""
    if not isinstance(prompt, dict) or node_id is None:
        return True
    for node in prompt.values():
        inputs = node.get("inputs", {}) if isinstance(node, dict) else {}
        for value in inputs.values():
            if (
                isinstance(value, list)
                and len(value) == 2
                and str(value[0]) == str(node_id)
                and value[1] == index
            ):
                return True
    return False


class HeadroomMemoryMonitor:
    NODE_ID = NODE_IDS["memory_monitor"]
    DISPLAY_NAME = "VRAM Stats"
    CATEGORY = f"{CATEGORY}/utils"
    DESCRIPTION = (
        "Memory monitor: passes its input through unchanged and reports current and peak VRAM/RAM at "
        "this point of the graph, with the plan versus what actually happened so far."
    )
    RETURN_TYPES = (ANY, "STRING", "IMAGE")
    RETURN_NAMES = ("value", "report", "chart")
    OUTPUT_TOOLTIPS = (
        "The input, unchanged",
        "Memory now, this prompt's peaks and plan-vs-actual so far, as text",
        "The memory timeline of this prompt so far, as an image (needs matplotlib)",
    )
    FUNCTION = "monitor"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        # "required" must exist even when empty: 2024 hosts index it unconditionally when validating.
        value = (
            ANY,
            {
                "tooltip": "Any value (optional), passed through unchanged: where it is wired sets the "
                "point of the graph where memory is read"
            },
        )
        # Hidden inputs are filled by the host and never saved in workflows: they do not change the node's id
        # or its inputs.
        hidden = {"unique_id": "UNIQUE_ID", "prompt": "PROMPT"}
        return {"required": {}, "optional": {"value": value}, "hidden": hidden}

    @classmethod
    def IS_CHANGED(cls, **inputs: Any) -> float:
        return float("nan")  # memory changes between runs even when the inputs do not

    def monitor(self, value: Any = None, unique_id: Any = None, prompt: Any = None) -> dict[str, Any]:
        node_id = None if unique_id is None else str(unique_id)
        drawn = output_used(prompt, unique_id, CHART_OUTPUT)
        snapshot = state.monitor().snapshot(node_id, chart=drawn, titles=prompt_titles(prompt))
        if snapshot.chart is not None:
            chart = torch.from_numpy(snapshot.chart).unsqueeze(0)  # IMAGE is [B, H, W, C]
        else:  # not consumed, or no matplotlib: a small blank image keeps the output's type
            chart = torch.zeros((1, 64, 64, 3), dtype=torch.float32)
        return {"ui": {"text": [snapshot.text]}, "result": (value, snapshot.text, chart)}


NODE_CLASS = HeadroomMemoryMonitor
