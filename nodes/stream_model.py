"""Stream Model (VRAM offload): a MODEL whose diffusion model streams its blocks through VRAM whenever it is
sampled, by any sampler node that goes through the host's sampling."""

from __future__ import annotations

from typing import Any

from ..memory.streaming import BudgetExceeded
from .common import CATEGORY, parse_vram_budget, streaming_inputs, validate_vram_budget
from .host import sampling


class HeadroomStreamModel:
    NODE_ID = "HeadroomStreamModel"
    DISPLAY_NAME = "Stream Model (VRAM offload)"
    CATEGORY = f"{CATEGORY}/sampling"
    DESCRIPTION = (
        "Put between a model and any sampler (KSampler, KSamplerAdvanced, SamplerCustom, "
        "SamplerCustomAdvanced): while it samples, the blocks that do not fit your VRAM stream from "
        "pinned RAM while the previous ones compute. Same seed, same result; every byte is given back "
        "when sampling ends."
    )
    RETURN_TYPES = ("MODEL",)
    OUTPUT_TOOLTIPS = (
        "The same model, streaming its blocks whenever a sampler runs it: connect it to any sampler",
    )
    FUNCTION = "stream"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {
                "model": (
                    "MODEL",
                    {
                        "tooltip": "The diffusion model to stream, from any loader; LoRA and patch nodes "
                        "may come before this node"
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
        model: Any,
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
            streamed, _ = sampling.stream_model(model, settings)
        except BudgetExceeded as exc:
            raise ValueError(
                f"{self.DISPLAY_NAME}: input vram_budget {vram_budget!r}: {exc}. Raise vram_budget, use "
                "auto, or lower prefetch."
            ) from None
        except ValueError as exc:
            raise ValueError(f"{self.DISPLAY_NAME}: input model: {exc}") from None
        return (streamed,)


NODE_CLASS = HeadroomStreamModel
