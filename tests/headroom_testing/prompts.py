"""API-prompt pieces the tests and benchmarks share."""

from __future__ import annotations

from typing import Any

# HeadroomOffloadLoader with nothing chosen: every file "none", every residency "auto".
OFFLOAD_DEFAULTS: dict[str, Any] = {
    "checkpoint": "none", "diffusion_model": "none", "weight_dtype": "default", "text_encoder_1": "none",
    "text_encoder_2": "none", "text_encoder_3": "none", "clip_type": "stable_diffusion", "vae": "none",
    "model_residency": "auto", "text_encoder_residency": "auto", "vae_residency": "auto",
}  # fmt: skip


def offload_loader(**inputs: Any) -> dict[str, Any]:
    """An Offload Loader node of an API prompt: the defaults with ``inputs`` over them."""
    return {"class_type": "HeadroomOffloadLoader", "inputs": OFFLOAD_DEFAULTS | inputs}


def offload_t2i(seed: int = 1, **loader: Any) -> dict[str, Any]:
    """Text to image at 1024x1024, 20 steps, every model from one Offload Loader (node "1")."""
    sampler = {
        "model": ["1", 0], "positive": ["2", 0], "negative": ["2", 0], "latent_image": ["3", 0], "seed": seed,
        "steps": 20, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0,
    }  # fmt: skip
    return {
        "1": offload_loader(**loader),
        "2": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 1], "text": "a red fox"}},
        "3": {"class_type": "EmptyLatentImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 1}},
        "4": {"class_type": "KSampler", "inputs": sampler},
        "5": {"class_type": "VAEDecode", "inputs": {"samples": ["4", 0], "vae": ["1", 2]}},
        "6": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "x"}},
    }
