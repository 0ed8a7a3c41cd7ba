"""Layer-Streaming DiT Sampler (Headroom): KSampler whose model streams its blocks through VRAM."""

from __future__ import annotations

from typing import Any

from . import host
from .common import CATEGORY, not_available, vram_budget_input


class HeadroomStreamingSampler:
    NODE_ID = "HeadroomStreamingSampler"
    DISPLAY_NAME = "Layer-Streaming DiT Sampler (Headroom)"
    CATEGORY = f"{CATEGORY}/sampling"
    DESCRIPTION = (
        "The stock KSampler, same seed and same result, for diffusion models bigger than your VRAM: "
        "the blocks that do not fit are streamed from pinned RAM while the previous ones compute."
    )
    RETURN_TYPES = ("LATENT",)
    FUNCTION = "sample"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": host.ksampler_required_inputs(),
            "optional": {
                "vram_budget": vram_budget_input(),
                "prefetch": (
                    "INT",
                    {"default": -1, "min": -1, "max": 16, "tooltip": "Blocks uploaded ahead; -1 = auto"},
                ),
                "resident_blocks": (
                    "INT",
                    {"default": -1, "min": -1, "max": 4096, "tooltip": "Blocks kept in VRAM; -1 = auto"},
                ),
                "pin_memory": (
                    "BOOLEAN",
                    {"default": True, "tooltip": "Stream from pinned RAM (fast); off = pageable RAM"},
                ),
            },
        }

    def sample(self, **inputs: Any) -> tuple[dict]:
        not_available(self.DISPLAY_NAME, 4, "the stock KSampler")


NODE_CLASS = HeadroomStreamingSampler
