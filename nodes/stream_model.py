"""Stream Model (VRAM offload): a MODEL whose diffusion model streams its blocks through VRAM whenever it is
sampled, by any sampler node that goes through the host's sampling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..memory.names import NODE_IDS
from .host import sampling
from .stream_node import StreamNode

if TYPE_CHECKING:
    from .host.host_types import ModelPatcher


class HeadroomStreamModel(StreamNode):
    NODE_ID = NODE_IDS["stream_model"]
    DISPLAY_NAME = "Stream Model (VRAM offload)"
    DESCRIPTION = (
        "Put between a model and any sampler (KSampler, KSamplerAdvanced, SamplerCustom, "
        "SamplerCustomAdvanced): while it samples, the blocks that do not fit your VRAM stream from "
        "pinned RAM while the previous ones compute. Same seed, same result; every byte is given back "
        "when sampling ends. On ComfyUI with DynamicVRAM (2026, NVIDIA) the host pages the model itself: "
        "this node then stands aside (the log says so) and Headroom orders the host's evictions instead; "
        "it streams on hosts that do not page: GGUF models, --disable-dynamic-vram, AMD before ROCm 7.14."
    )
    TARGET = (
        "model",
        "MODEL",
        "The diffusion model to stream, from any loader; LoRA and patch nodes may come before this node",
    )
    RETURN_TYPES = ("MODEL",)
    OUTPUT_TOOLTIPS = (
        "The same model, streaming its blocks whenever a sampler runs it: connect it to any sampler",
    )

    def stream(
        self,
        model: ModelPatcher,
        vram_budget: str = "auto",
        prefetch: int = -1,
        resident_blocks: int = -1,
        pin_memory: bool = True,
    ) -> dict[str, Any]:
        return self._streamed(
            sampling.stream_model, model, vram_budget, prefetch, resident_blocks, pin_memory
        )


NODE_CLASS = HeadroomStreamModel
