"""Stream CLIP (VRAM offload): a CLIP whose text encoders stream their transformer blocks through VRAM
whenever any encode node runs it (CLIPTextEncode, CLIPTextEncodeFlux, TextEncodeQwenImageEdit, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..memory.names import NODE_IDS
from .host import text_encoders

if TYPE_CHECKING:
    from .host.host_types import CLIP

from .stream_node import StreamNode


class HeadroomStreamCLIP(StreamNode):
    NODE_ID = NODE_IDS["stream_clip"]
    DISPLAY_NAME = "Stream CLIP (VRAM offload)"
    DESCRIPTION = (
        "Put between a CLIP loader and any text encode node: while it encodes, the text encoder's "
        "layers that do not fit your VRAM (T5-XXL, UMT5, CLIP-G, Llama, Qwen-VL) stream from pinned RAM "
        "while the previous ones compute. Same conditioning; every byte is given back after each encode."
    )
    TARGET = (
        "clip",
        "CLIP",
        "The text encoder(s) to stream, from any CLIP loader; LoRA nodes may come before this node",
    )
    RETURN_TYPES = ("CLIP",)
    PER = "encode"
    OUTPUT_TOOLTIPS = ("The same text encoder, streaming its layers whenever a node encodes with it",)

    def stream(
        self,
        clip: CLIP,
        vram_budget: str = "auto",
        prefetch: int = -1,
        resident_blocks: int = -1,
        pin_memory: bool = True,
    ) -> dict[str, Any]:
        return self._streamed(
            text_encoders.stream_clip, clip, vram_budget, prefetch, resident_blocks, pin_memory
        )


NODE_CLASS = HeadroomStreamCLIP
