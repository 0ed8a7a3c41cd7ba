"""Memory Monitor (Headroom): sits on any wire and reports memory at that point of the graph."""

from __future__ import annotations

from typing import Any

from .common import ANY, CATEGORY, not_available


class HeadroomMemoryMonitor:
    NODE_ID = "HeadroomMemoryMonitor"
    DISPLAY_NAME = "Memory Monitor (Headroom)"
    CATEGORY = f"{CATEGORY}/utils"
    DESCRIPTION = (
        "Passes its input through unchanged and reports current and peak VRAM/RAM at this point of the "
        "graph, with the plan versus what actually happened so far."
    )
    RETURN_TYPES = (ANY, "STRING", "IMAGE")
    RETURN_NAMES = ("value", "report", "chart")
    FUNCTION = "monitor"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        # "required" must exist even when empty: 2024 hosts index it unconditionally when validating.
        value = (ANY, {"tooltip": "Any value; passed through unchanged"})
        return {"required": {}, "optional": {"value": value}}

    @classmethod
    def IS_CHANGED(cls, **inputs: Any) -> float:
        return float("nan")  # memory changes between runs even when the inputs do not

    def monitor(self, value: Any = None) -> tuple[Any, str, Any]:
        not_available(self.DISPLAY_NAME, 7, "ComfyUI's own system stats")


NODE_CLASS = HeadroomMemoryMonitor
