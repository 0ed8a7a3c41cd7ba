"""Layer-Streaming DiT Sampler (Headroom): KSampler whose model streams its blocks through VRAM."""

from __future__ import annotations

from typing import Any

from ..memory.units import format_bytes
from . import host
from .common import CATEGORY, parse_vram_budget, vram_budget_input


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

    def sample(
        self,
        model: Any,
        seed: int,
        steps: int,
        cfg: float,
        sampler_name: str,
        scheduler: str,
        positive: Any,
        negative: Any,
        latent_image: dict,
        denoise: float = 1.0,
        vram_budget: str = "auto",
        prefetch: int = -1,
        resident_blocks: int = -1,
        pin_memory: bool = True,
    ) -> dict[str, Any]:
        budget = parse_vram_budget(vram_budget, self.DISPLAY_NAME)
        latent, run = host.streaming_ksample(
            model,
            (seed, steps, cfg, sampler_name, scheduler, positive, negative, latent_image, denoise),
            budget=budget,
            prefetch=None if prefetch < 0 else prefetch,
            resident_blocks=None if resident_blocks < 0 else resident_blocks,
            pin=pin_memory,
        )
        return {"ui": {"text": [describe_run(run.summary, run.note)]}, "result": (latent,)}


def describe_run(summary: dict[str, Any], note: str = "") -> str:
    """One line for the node: K, d, streamed GB, achieved step time against the bound."""
    if not summary or not summary.get("streamed_bytes"):
        return note or "nothing streamed: the model fits the budget"
    text = (
        f"{summary['family']}: {summary['resident_blocks']}/{summary['blocks']} blocks resident, "
        f"prefetch {summary['prefetch']}, {format_bytes(summary['streamed_bytes'])} streamed per step"
    )
    if summary.get("generic_layout"):
        text += " (blocks found by the generic rule)"
    if summary.get("shared_steps"):
        text += "; the host's separate cond/uncond calls share each upload"
    if summary.get("step_s") and summary.get("bound_s"):
        text += f"; {summary['step_s']:.3f} s/step vs bound {summary['bound_s']:.3f} s"
    return text


NODE_CLASS = HeadroomStreamingSampler
