"""Peak activation memory of the node that computes with a component, per model family.

What each estimate covers and where its coefficient comes from (file:line in ComfyUI v0.3.64):

- diffusion_model (one sampler step): ComfyUI's own ``BaseModel.memory_required``
  (comfy/model_base.py:354-378, the xformers/flash-attention branch that CUDA takes):
  ``area * dtype_size * 0.01 * memory_usage_factor`` MiB, where ``area`` is the batch times the product
  of the latent's spatial/temporal sizes, summed over reference latents (``memory_usage_factor_conds``).
  The sampler estimates it with the batch doubled for cond+uncond (comfy/sampler_helpers.py:121), and
  with the plain batch as its minimum (line 122): ``cfg`` picks which. ``memory_usage_factor`` per family
  is in ``DIFFUSION`` with its line in comfy/supported_models.py.
- vae (decode, or encode with ``encode=True``): ComfyUI's ``VAE.memory_used_decode/_encode`` lambdas
  (comfy/sd.py, lines in ``VAES``), for one sample: ComfyUI splits a batch into as many samples as fit
  (sd.py:681-684), so one sample is what must fit. The causal video VAEs (Wan) decode chunk by chunk,
  so their figure does not grow with frames.
- text_encoder (encode one prompt): measured by us, not ComfyUI (it has no formula; it only keeps its
  generic reserve, ``minimum_inference_memory`` = 0.8 GiB + 0.4 GiB, comfy/model_management.py:553-567,
  which the budget, not this module, accounts for). ``scripts/build_model_catalog.py
  --measure-text-encoders`` runs the host's own T5, CLIP and Llama classes on CPU at reduced width with
  the released ffn/hidden ratio and head size, and tracks the peak bytes of live op outputs with a
  TorchDispatchMode; peak = k * tokens * hidden * dtype_size, k the largest seen over 77/256/512 tokens
  (T5 28.3, CLIP 33.8, Llama 33.9, Qwen 49.4; T5's grows with tokens through its relative-position bias).
- clip_vision: the CLIP text coefficient applied to the image tokens (same transformer block).
- upscale_model: ComfyUI's ImageUpscaleWithModel reserve for a 512x512 tile
  (comfy_extras/nodes_upscale_model.py:70): ``512*512*3 * element_size * scale * 384``.
- lora, controlnet, model_patch: 0 - they compute inside the sampler step, whose estimate ComfyUI does
  not raise for them either (sampler_helpers.py:121 uses the model's formula only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIB = 1 << 20
DTYPE_SIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp8_e4m3fn": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class DiffusionSpec:
    factor: float  # ComfyUI's memory_usage_factor
    source: str  # where the factor is defined
    spatial: int = 8  # pixels per latent cell
    temporal: int = 0  # pixel frames per latent frame (first frame alone); 0 for image models
    scales_with: str = ""  # "dim" (Wan) or "cross_attention_dim" (LTXV): factor * value / reference


DIFFUSION: dict[str, DiffusionSpec] = {
    "sd15": DiffusionSpec(1.0, "supported_models.py:45"),
    "sd2": DiffusionSpec(1.0, "supported_models.py:92"),
    "sdxl_refiner": DiffusionSpec(1.0, "supported_models.py:156"),
    "sdxl": DiffusionSpec(0.8, "supported_models.py:195"),
    "sd3": DiffusionSpec(1.2, "supported_models.py:542"),
    "pixart": DiffusionSpec(0.5, "supported_models.py:634"),
    "flux": DiffusionSpec(3.1, "supported_models.py:704"),
    "mochi": DiffusionSpec(2.0, "supported_models.py:757", temporal=6),
    "ltxv": DiffusionSpec(5.5, "supported_models.py:785,794", 32, 8, scales_with="cross_attention_dim"),
    "hunyuan_video": DiffusionSpec(1.8, "supported_models.py:817", temporal=4),
    "lumina2": DiffusionSpec(1.2, "supported_models.py:966"),
    "wan21": DiffusionSpec(
        1.0 / 2222, "supported_models.py:1007 (dim / 2222)", temporal=4, scales_with="dim"
    ),
    "wan22": DiffusionSpec(1.0 / 2222, "supported_models.py:1007 (dim / 2222)", 16, 4, scales_with="dim"),
    "hidream": DiffusionSpec(2.0, "supported_models_base.py:48 (HiDream keeps the default)"),
    "chroma": DiffusionSpec(3.2, "supported_models.py:1217"),
    "chroma_radiance": DiffusionSpec(0.038, "supported_models.py:1239", spatial=1),
    "omnigen2": DiffusionSpec(1.65, "supported_models.py:1282"),
    "qwen_image": DiffusionSpec(1.8, "supported_models.py:1316"),
    "hunyuan_image": DiffusionSpec(7.7, "supported_models.py:1347", spatial=32),
}
# An unknown family: the largest image factor ComfyUI uses, on an 8x latent, frames every 4.
UNKNOWN_DIFFUSION = DiffusionSpec(8.0, "conservative default", temporal=4)
# Wan: the 14B's dim, so a Wan model of unknown size is not under-estimated.
DEFAULT_SCALE = {"dim": 5120, "cross_attention_dim": 2048}
SCALE_REFERENCE = {"dim": 1, "cross_attention_dim": 2048}
VACE_FACTOR = 1.2  # supported_models.py:1070


@dataclass(frozen=True)
class VaeSpec:
    spatial: int
    temporal: int  # 0 for image VAEs
    decode: str  # which formula; see _vae_bytes
    source: str


VAES: dict[str, VaeSpec] = {
    "sd_vae": VaeSpec(8, 0, "kl", "sd.py:279-280"),
    "flux_vae": VaeSpec(8, 0, "kl", "sd.py:279-280"),
    "svd_vae": VaeSpec(8, 0, "kl", "sd.py:279-280"),
    "wan21_vae": VaeSpec(8, 4, "wan21", "sd.py:499-500"),
    "wan22_vae": VaeSpec(16, 4, "wan22", "sd.py:487-488"),
    "hunyuan_video_vae": VaeSpec(8, 4, "hunyuan_video", "sd.py:460-461"),
    "ltxv_vae": VaeSpec(32, 8, "ltxv", "sd.py:425-426"),
    "hunyuan_image_vae": VaeSpec(32, 0, "hunyuan_image", "sd.py:348-349"),
}

# text encoders: (measured coefficient k, hidden size, default tokens)
TEXT_ENCODERS: dict[str, tuple[float, int, int]] = {
    "t5xxl": (28.3, 4096, 512), "umt5xxl": (28.3, 4096, 512), "t5base": (28.3, 768, 512),
    "umt5base": (28.3, 768, 512), "t5xl": (28.3, 2048, 512), "byt5_small": (28.3, 1472, 512),
    "clip_l": (33.8, 768, 77), "clip_g": (33.8, 1280, 77), "clip_h": (33.8, 1024, 77),
    "llama3_8b": (33.9, 4096, 512), "qwen25_vl_7b": (49.4, 3584, 512), "qwen25_7b": (49.4, 3584, 512),
    "qwen25_vl_3b": (49.4, 2048, 512), "qwen25_3b": (49.4, 2048, 512), "gemma2_2b": (49.4, 2304, 512),
    "qwen3_4b": (49.4, 2560, 512), "gemma3_4b": (49.4, 2560, 512), "gemma3_12b": (49.4, 3840, 512),
}  # fmt: skip
UNKNOWN_TEXT_ENCODER = (49.4, 4096, 512)
CLIP_VISION = {
    "clip_vision_h": (1280, 14, 224),
    "clip_vision_l": (1024, 14, 224),
    "clip_vision_g": (1664, 14, 224),
}
CLIP_VISION |= {"siglip_so400m": (1152, 14, 384)}


def dtype_size(dtype: str) -> int:
    """Bytes per element of a compute dtype name (the scaled/fp8 storage dtypes compute in bf16)."""
    name = dtype.removesuffix("_scaled")
    if name not in DTYPE_SIZE:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_SIZE)}")
    return DTYPE_SIZE[name]


def latent_frames(frames: int, temporal: int) -> int:
    """Latent frames of a causal video VAE: the first frame alone, then one per ``temporal`` frames."""
    return 1 if temporal <= 0 or frames <= 1 else (frames - 1) // temporal + 1


def activation_bytes(
    family: str,
    kind: str,
    *,
    width: int,
    height: int,
    frames: int = 1,
    batch: int = 1,
    cfg: bool = True,
    dtype: str = "bf16",
    dim: int | None = None,
    vace: bool = False,
    reference_images: int = 0,
    tokens: int | None = None,
    encode: bool = False,
    scale: int = 4,
) -> int:
    """Peak activation bytes of the node computing with a ``kind`` component of ``family``.

    ``width``/``height``/``frames`` are in pixels of the image or video produced. Extra keywords refine
    the estimate where ComfyUI's own formula needs them: ``dim`` (Wan hidden size, LTXV cross-attention
    dim), ``vace`` (Wan VACE), ``reference_images`` (Kontext/Qwen-Image-Edit/OmniGen2 reference latents of
    the same size), ``tokens`` (text encoders), ``encode`` (VAE encode instead of decode), ``scale``
    (upscale models). Unknown families get a conservative default.
    """
    if width <= 0 or height <= 0 or frames <= 0 or batch <= 0:
        raise ValueError(
            f"width, height, frames and batch must be positive: {width}x{height}x{frames}, {batch}"
        )
    size = dtype_size(dtype)
    if kind in ("diffusion_model", "checkpoint"):
        return _diffusion_bytes(
            family, width, height, frames, batch * (2 if cfg else 1), size, dim, vace, reference_images
        )
    if kind == "vae":
        return _vae_bytes(family, width, height, frames, size, encode)
    if kind == "text_encoder":
        k, hidden, default_tokens = TEXT_ENCODERS.get(family, UNKNOWN_TEXT_ENCODER)
        return math.ceil(k * (tokens or default_tokens) * hidden * size)
    if kind == "clip_vision":
        hidden, patch, side = CLIP_VISION.get(family, (1664, 14, 384))
        return math.ceil(TEXT_ENCODERS["clip_l"][0] * ((side // patch) ** 2 + 1) * hidden * size * batch)
    if kind == "upscale_model":
        return math.ceil(512 * 512 * 3 * size * max(scale, 1) * 384.0)
    if kind in ("lora", "controlnet", "model_patch", "style_model"):
        return 0
    raise ValueError(f"no activation estimate for kind {kind!r}")


def _diffusion_bytes(
    family: str,
    width: int,
    height: int,
    frames: int,
    batch: int,
    size: int,
    dim: int | None,
    vace: bool,
    refs: int,
) -> int:
    spec = DIFFUSION.get(family, UNKNOWN_DIFFUSION)
    factor = spec.factor
    if spec.scales_with:
        value = dim or DEFAULT_SCALE[spec.scales_with]
        factor *= value / SCALE_REFERENCE[spec.scales_with]
    if vace:
        factor *= VACE_FACTOR
    cells = math.ceil(height / spec.spatial) * math.ceil(width / spec.spatial)
    area = batch * latent_frames(frames, spec.temporal) * cells * (1 + refs)
    return math.ceil(area * size * 0.01 * factor * MIB)


def _vae_bytes(family: str, width: int, height: int, frames: int, size: int, encode: bool) -> int:
    spec = VAES.get(family)
    if spec is None:  # unknown VAE: the image KL formula per frame, the most common layout
        spec = VaeSpec(8, 0, "kl", "sd.py:279-280")
        frames_factor = frames
    else:
        frames_factor = 1
    h, w = math.ceil(height / spec.spatial), math.ceil(width / spec.spatial)
    t = latent_frames(frames, spec.temporal)
    if spec.decode == "kl":
        n = 1767 * height * width if encode else 2178 * h * w * 64
    elif spec.decode == "wan21":
        n = 6000 * height * width if encode else 7000 * h * w * 8 * 8
    elif spec.decode == "wan22":
        n = 3300 * height * width if encode else 8000 * h * w * 16 * 16
    elif spec.decode == "hunyuan_video":
        n = 900 * max(frames, 2) * height * width if encode else 1500 * t * h * w * 4 * 8 * 8
    elif spec.decode == "ltxv":
        n = 70 * max(frames, 7) * height * width if encode else 900 * t * h * w * 8 * 8 * 8
    else:  # hunyuan_image
        n = 700 * height * width if encode else 700 * h * w * 32 * 32
    return math.ceil(n * size * frames_factor)
