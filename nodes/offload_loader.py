"""Offload Loader (low VRAM): loads a checkpoint or separate files and places each component."""

from __future__ import annotations

from typing import Any

from ..memory.names import NODE_IDS, OFFLOAD_CHECKPOINT_INPUT, OFFLOAD_RESIDENCY_INPUTS
from .common import CATEGORY, NONE_CHOICE, RESIDENCY_CHOICES
from .host import loading, lookups


def _files(kind: str) -> list[str]:
    return [NONE_CHOICE, *lookups.model_files(kind)]


def _residency(what: str, verb: str) -> tuple[list[str], dict[str, Any]]:
    return (
        RESIDENCY_CHOICES,
        {
            "default": "auto",
            "tooltip": f"Where the {what} {verb} between uses. auto (default): the planner decides from "
            "your VRAM and RAM; gpu: always on the GPU; pinned_ram: a copy in pinned RAM (fastest "
            "upload); ram: a copy in ordinary RAM; disk: no RAM copy, read from its file when needed",
        },
    )


# What each residency input's tooltip calls its component, and its verb.
RESIDENCY_LABELS = (
    ("diffusion_model", "diffusion model", "lives"),
    ("text_encoder", "text encoders", "live"),
    ("vae", "VAE", "lives"),
)
WEIGHT_DTYPE_TIP = (
    "The type the diffusion model's weights are kept in (from the checkpoint or diffusion_model). "
    "default (default): as stored in the file; an fp8 type halves a 16-bit model's bytes, so less VRAM "
    "and less to move, at a small cost in quality"
)
CLIP_TYPE_TIP = (
    "The model family the text encoder files are for, as the stock CLIPLoader's type (flux for "
    "clip_l + t5xxl, wan for umt5xxl, ...). Used only with text_encoder_1-3. Default: stable_diffusion"
)
ENCODER_TIP = (
    "A text encoder file from models/text_encoders, or none (default). Any file chosen here replaces the "
    "checkpoint's text encoders; set clip_type to match"
)


class HeadroomOffloadLoader:
    NODE_ID = NODE_IDS["offload_loader"]
    DISPLAY_NAME = "Offload Loader (low VRAM)"
    CATEGORY = f"{CATEGORY}/loaders"
    DESCRIPTION = (
        "Loads a checkpoint, or a diffusion model, text encoders and a VAE from separate files, and keeps "
        "each one where the plan (or your choice) says: GPU, pinned RAM, RAM or memory-mapped from disk, "
        "so models bigger than your VRAM (or RAM) still run. Offloads what does not fit."
    )
    RETURN_TYPES = ("MODEL", "CLIP", "VAE")
    RETURN_NAMES = ("model", "clip", "vae")
    OUTPUT_TOOLTIPS = (
        "The diffusion model, placed as model_residency says: connect it to a sampler (Streaming KSampler "
        "streams what does not fit in VRAM)",
        "The text encoders, placed as text_encoder_residency says: connect it to CLIP Text Encode",
        "The VAE, placed as vae_residency says: connect it to VAE Decode or Tiled VAE Decode",
    )
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        checkpoint_tip = (
            "A single-file checkpoint from models/checkpoints (diffusion model, text encoders and VAE in "
            "one file), or none (default) to load each part from the inputs below"
        )
        model_tip = (
            "A diffusion model file from models/diffusion_models (unet), or none (default). When chosen, "
            "it replaces the checkpoint's diffusion model"
        )
        vae_tip = (
            "A VAE file from models/vae, or none (default). When chosen, it replaces the checkpoint's VAE"
        )
        return {
            "required": {
                OFFLOAD_CHECKPOINT_INPUT: (_files("checkpoints"), {"tooltip": checkpoint_tip}),
                "diffusion_model": (_files("diffusion_models"), {"tooltip": model_tip}),
                "weight_dtype": (lookups.weight_dtype_choices(), {"tooltip": WEIGHT_DTYPE_TIP}),
                "text_encoder_1": (_files("text_encoders"), {"tooltip": ENCODER_TIP}),
                "text_encoder_2": (_files("text_encoders"), {"tooltip": ENCODER_TIP}),
                "text_encoder_3": (_files("text_encoders"), {"tooltip": ENCODER_TIP}),
                "clip_type": (lookups.clip_type_choices(), {"tooltip": CLIP_TYPE_TIP}),
                "vae": (_files("vae"), {"tooltip": vae_tip}),
                **{
                    OFFLOAD_RESIDENCY_INPUTS[kind]: _residency(what, verb)
                    for kind, what, verb in RESIDENCY_LABELS
                },
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    @classmethod
    def IS_CHANGED(cls, **inputs: Any) -> str:
        """The named files' identities: a file overwritten or truncated between runs is loaded again."""
        try:
            return loading.file_versions(inputs)
        except Exception:  # noqa: BLE001 - never fail the prompt here; the load reports the problem
            return ""

    def load(self, unique_id: str | None = None, **inputs: Any) -> tuple[Any, Any, Any]:
        return loading.offload_load(str(unique_id), inputs)


NODE_CLASS = HeadroomOffloadLoader
