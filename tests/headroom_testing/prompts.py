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


def hostile_prompt(chain: int, expression: bool = True) -> dict[str, Any]:
    """Issue #31's 1 KB prompt (an expression whose value is a 26-million-digit integer, wired into a
    latent's width; ``expression``: the host has ComfyMathExpression) beside a chain of ``chain`` image
    nodes."""
    prompt: dict[str, Any] = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}}
    }
    for i in range(chain):
        prompt[str(10 + i)] = {"class_type": "ImageInvert", "inputs": {"image": [str(9 + i if i else 1), 0]}}
    prompt["2"] = {"class_type": "PreviewImage", "inputs": {"images": [str(9 + chain), 0]}}
    if expression:
        inputs = {"expression": "4000000**4000000", "values.a": 512}
        prompt["3"] = {"class_type": "ComfyMathExpression", "inputs": inputs}
        latent = {"width": ["3", 1], "height": 64, "batch_size": 1}
        prompt["4"] = {"class_type": "EmptyLatentImage", "inputs": latent}
        prompt["5"] = {"class_type": "PreviewAny", "inputs": {"source": ["4", 0]}}
    return prompt
