"""Offload Loader (Headroom): loads a checkpoint or separate files and places each component."""

from __future__ import annotations

from typing import Any

from ..memory.names import OFFLOAD_RESIDENCY_INPUTS
from .common import CATEGORY, NONE_CHOICE, RESIDENCY_CHOICES
from .host import loading, lookups


def _files(kind: str) -> list[str]:
    return [NONE_CHOICE, *lookups.model_files(kind)]


def _residency(what: str) -> tuple[list[str], dict]:
    return (
        RESIDENCY_CHOICES,
        {
            "default": "auto",
            "tooltip": f"Where the {what} lives between uses: auto lets the planner decide; gpu keeps "
            "it on the GPU; pinned_ram / ram keep a copy in (pinned) RAM; disk reads it from its file "
            "with no RAM copy",
        },
    )


# What each residency input's tooltip calls its component.
RESIDENCY_LABELS = (("diffusion_model", "diffusion model"), ("text_encoder", "text encoders"), ("vae", "VAE"))


class HeadroomOffloadLoader:
    NODE_ID = "HeadroomOffloadLoader"
    DISPLAY_NAME = "Offload Loader (Headroom)"
    CATEGORY = f"{CATEGORY}/loaders"
    DESCRIPTION = (
        "Loads a checkpoint, or a diffusion model, text encoders and a VAE from separate files, and keeps "
        "each one where the plan (or your choice) says: GPU, pinned RAM, RAM or memory-mapped from disk."
    )
    RETURN_TYPES = ("MODEL", "CLIP", "VAE")
    RETURN_NAMES = ("model", "clip", "vae")
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        encoder_tip = "A text encoder file (models/text_encoders), or none; overrides the checkpoint's"
        return {
            "required": {
                "checkpoint": (_files("checkpoints"), {"tooltip": "A single-file checkpoint, or none"}),
                "diffusion_model": (_files("diffusion_models"), {"tooltip": "Overrides the checkpoint's"}),
                "weight_dtype": (lookups.weight_dtype_choices(),),
                "text_encoder_1": (_files("text_encoders"), {"tooltip": encoder_tip}),
                "text_encoder_2": (_files("text_encoders"), {"tooltip": encoder_tip}),
                "text_encoder_3": (_files("text_encoders"), {"tooltip": encoder_tip}),
                "clip_type": (lookups.clip_type_choices(),),
                "vae": (_files("vae"), {"tooltip": "Overrides the checkpoint's VAE"}),
                **{OFFLOAD_RESIDENCY_INPUTS[kind]: _residency(what) for kind, what in RESIDENCY_LABELS},
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    def load(self, unique_id: str | None = None, **inputs: Any) -> tuple[Any, Any, Any]:
        return loading.offload_load(str(unique_id), inputs)


NODE_CLASS = HeadroomOffloadLoader
