"""Tiled VAE Decode (Headroom): bounded-VRAM decode, identical to a full decode."""

from __future__ import annotations

from typing import Any

from .common import CATEGORY, not_available, vram_budget_input


class HeadroomTiledVAEDecode:
    NODE_ID = "HeadroomTiledVAEDecode"
    DISPLAY_NAME = "Tiled VAE Decode (Headroom)"
    CATEGORY = f"{CATEGORY}/latent"
    DESCRIPTION = (
        "Decodes images and videos of any size in tiles that fit your VRAM, with the same pixels as a "
        "full decode: no seams, no colour shift, no flicker between video chunks."
    )
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "decode"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {"samples": ("LATENT",), "vae": ("VAE",)},
            "optional": {
                "vram_budget": vram_budget_input(),
                "mode": (
                    ["exact", "fast"],
                    {"default": "exact", "tooltip": "exact = identical to a full decode; fast = approximate"},
                ),
            },
        }

    def decode(self, **inputs: Any) -> tuple[Any]:
        not_available(self.DISPLAY_NAME, 5, "the stock VAE Decode (Tiled)")


NODE_CLASS = HeadroomTiledVAEDecode
