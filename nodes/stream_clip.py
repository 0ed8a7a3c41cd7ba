"""Stream CLIP (VRAM offload): a CLIP whose text encoders stream their transformer blocks through VRAM
whenever any encode node runs it (CLIPTextEncode, CLIPTextEncodeFlux, TextEncodeQwenImageEdit, ...)."""

from __future__ import annotations

from typing import Any

from ..memory.streaming import BudgetExceeded
from .common import CATEGORY, parse_vram_budget, streaming_inputs, validate_vram_budget
from .host import sampling, text_encoders


class HeadroomStreamCLIP:
    NODE_ID = "HeadroomStreamCLIP"
    DISPLAY_NAME = "Stream CLIP (VRAM offload)"
    CATEGORY = f"{CATEGORY}/sampling"
    DESCRIPTION = (
        "Put between a CLIP loader and any text encode node: while it encodes, the text encoder's "
        "layers that do not fit your VRAM (T5-XXL, UMT5, CLIP-G, Llama, Qwen-VL) stream from pinned RAM "
        "while the previous ones compute. Same conditioning; every byte is given back after each encode."
    )
    RETURN_TYPES = ("CLIP",)
    OUTPUT_TOOLTIPS = ("The same text encoder, streaming its layers whenever a node encodes with it",)
    FUNCTION = "stream"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {
                "clip": (
                    "CLIP",
                    {
                        "tooltip": "The text encoder(s) to stream, from any CLIP loader; LoRA nodes may "
                        "come before this node"
                    },
                )
            },
            "optional": streaming_inputs(),
        }

    @classmethod
    def VALIDATE_INPUTS(cls, vram_budget: Any = "auto") -> bool | str:
        """A bad vram_budget fails when the prompt is queued, before any node runs."""
        return validate_vram_budget(vram_budget, cls.DISPLAY_NAME)

    def stream(
        self,
        clip: Any,
        vram_budget: str = "auto",
        prefetch: int = -1,
        resident_blocks: int = -1,
        pin_memory: bool = True,
    ) -> tuple[Any]:
        settings = sampling.StreamSettings(
            parse_vram_budget(vram_budget, self.DISPLAY_NAME),
            None if prefetch < 0 else prefetch,
            None if resident_blocks < 0 else resident_blocks,
            pin_memory,
        )
        try:
            streamed, _ = text_encoders.stream_clip(clip, settings)
        except BudgetExceeded as exc:
            raise ValueError(
                f"{self.DISPLAY_NAME}: input vram_budget {vram_budget!r}: {exc}. Raise vram_budget, use "
                "auto, or lower prefetch."
            ) from None
        except ValueError as exc:
            raise ValueError(f"{self.DISPLAY_NAME}: input clip: {exc}") from None
        return (streamed,)


NODE_CLASS = HeadroomStreamCLIP
