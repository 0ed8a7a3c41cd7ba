"""Peak activation memory of the node that computes with a component, per model family.

What each estimate covers and where its coefficient comes from (file:line in ComfyUI v0.3.64):

- diffusion_model (one model call): measured by ``bench/activations.py`` (results and command in
  ``bench/results/activations.md``): the host's own model class at its released configuration (full
  width and depth) on torch's meta device under a live-storage meter, torch SDPA attention as CUDA runs
  it (no score matrix), batch 1, fitted as ``peak = a * cells + b`` per compute dtype (``MEASURED``; exact
  to <0.1% over 3-4 sizes). The prediction is that times ``1 + MARGIN``. Families not measured keep
  ComfyUI's own formula (conservative).
  The host's *reservation* is a different figure: ``BaseModel.memory_required`` (comfy/model_base.py:354-378,
  the branch CUDA takes), ``area * dtype_bytes * 0.01 * memory_usage_factor`` MiB with ``area`` the batch
  times the latent cells, summed over reference latents; ``host_reservation`` computes it and decides
  how much the host keeps free when it loads (sampler_helpers.py:121-122).
  cfg: the host batches cond and uncond into one call only while ``memory_required(batch) * 1.5`` is
  below the free memory (samplers.py:263-274), else runs them one by one. So a step's peak is the
  two-cond batch where there is room (``activation_bytes(..., cfg=True)``) and the cond alone where there
  is not (``split=True``): the minimum VRAM is set by the cond alone.
- vae (decode, or encode with ``encode=True``): ComfyUI's ``VAE.memory_used_decode/_encode`` lambdas
  (comfy/sd.py, lines in ``VAES``), for one sample: ComfyUI splits a batch into as many samples as fit
  (sd.py:681-684), so one sample is what must fit. The causal video VAEs (Wan) decode chunk by chunk,
  so their figure does not grow with frames.
- text_encoder (encode one prompt): measured the same way on the full released T5-XXL, UMT5-XXL,
  CLIP-L/G, Llama-3-8B and Qwen2.5-VL-7B (``TEXT_MEASURED``: ``a * tokens + c * tokens**2``, the square
  being T5's relative-position bias), + ``MARGIN``; other encoders scale a measured one of their kind by
  hidden size. ComfyUI has no formula here; it keeps its generic reserve (``minimum_inference_memory``,
  comfy/model_management.py:553-567), which the budget, not this module, accounts for.
- clip_vision: the CLIP-L per-token figure scaled by hidden size, on the image tokens (same block).
- upscale_model: ComfyUI's ImageUpscaleWithModel reserve for a 512x512 tile
  (comfy_extras/nodes_upscale_model.py:70): ``512*512*3 * element_size * scale * 384``.
- lora, controlnet, model_patch: 0 - they compute inside the sampler step, whose estimate ComfyUI does
  not raise for them either (sampler_helpers.py:121 uses the model's formula only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..units import MiB

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
    # ComfyUI 0.33 (comfy/supported_models.py of 0.33.0)
    "flux2": DiffusionSpec(
        3.1 * 4, "0.33 supported_models.py:795-815 (x hidden / 2604)", 16, scales_with="hidden"
    ),
    "hunyuan_video15": DiffusionSpec(4.0, "0.33 supported_models.py:2088-2098", 16, 4),
    "z_image": DiffusionSpec(2.8, "0.33 supported_models.py:1202-1204"),
    "kandinsky5": DiffusionSpec(1.25, "0.33 supported_models.py:2137-2149", temporal=4),
    "minimax_h3": DiffusionSpec(0.114, "0.33 supported_models.py:960-973", 16, 4),
    # Stable Video Diffusion: the frames are the batch of one call (one latent per frame)
    "svd": DiffusionSpec(2.0, "0.33 supported_models_base.py:49 (SVD_img2vid keeps the default)", temporal=1),
    "hidream_o1": DiffusionSpec(0.033, "0.33 supported_models.py:1679-1690 (pixel space)", spatial=1),
}
# Measured peak of one call at batch 1: bytes = a * latent cells + b, per compute dtype ("bf16" also for
# fp16 and fp8 weights, which compute in bf16/fp16). Source: bench/activations.py (see the results file).
MEASURED: dict[str, dict[str, tuple[float, float]]] = {
    # Flux-dev, 19+38 blocks x 3072, 512 T5 tokens
    "flux": {"fp32": (61830.0, 141097992), "bf16": (31043.0, 70811140)},
    # Wan 2.1/2.2 14B t2v, 40 x 5120, 512 text tokens
    "wan21": {"fp32": (43392.0, 19140612), "bf16": (25921.0, 9570306)},
    # Wan 2.1 1.3B, 30 x 1536
    "wan21_1.3b": {"fp32": (22912.0, 11614212), "bf16": (11584.0, 5807106)},
    # Wan 2.2 TI2V-5B, 30 x 3072, 16x latent
    "wan22": {"fp32": (38528.0, 14839812), "bf16": (19392.0, 7419906)},
    # Qwen-Image, 60 x 3072, 256 text tokens
    "qwen_image": {"fp32": (46400.0, 19820548), "bf16": (23200.0, 9910274)},
    # HunyuanVideo, 20+40 x 3072, 256 text tokens
    "hunyuan_video": {"fp32": (61766.0, 70575112), "bf16": (31011.0, 35418628)},
    # SD3.5 Large, 38 x 2432, 333 text tokens
    "sd3": {"fp32": (51136.0, 44473348), "bf16": (25568.0, 22236674)},
    # SDXL UNet, 77 tokens
    "sdxl": {"fp32": (20176.0, 648452), "bf16": (10088.0, 324226)},
    # SD1.5 UNet, 77 tokens
    "sd15": {"fp32": (33296.0, 242948), "bf16": (16648.0, 121474)},
    # LTXV 2B, 28 x 2048, 32x latent, 128 text tokens
    "ltxv": {"fp32": (98876.0, 3252228), "bf16": (53568.0, 1626114)},
    # HiDream-I1, 16+32 x 2560, 128 T5 + 48 x 128 Llama tokens; MoE routed to its worst case (every
    # token to the same 2 experts), so an upper bound over routings
    "hidream": {"fp32": (44108.0, 209047556), "bf16": (22187.0, 104728066)},
    # ComfyUI 0.33's classes (bench/activations.py --only flux2_3072 ... on the 0.33 host, 2026-11-25):
    # Flux.2 by hidden size (Klein 4B 3072, Klein 9B 4096, dev 6144), 16x latent, 512 text tokens
    "flux2_3072": {"fp32": (210976.0, 129564676), "bf16": (106112.0, 65101826)},
    "flux2_4096": {"fp32": (280608.0, 176766980), "bf16": (140960.0, 88719362)},
    "flux2_6144": {"fp32": (419872.0, 258588680), "bf16": (210656.0, 129662980)},
    # HunyuanVideo 1.5 8.3B, 54 x 2048, 16x latent, 256 Qwen2.5-VL + 256 ByT5 tokens
    "hunyuan_video15": {"fp32": (91420.0, 18409476), "bf16": (46272.93, 8703514)},
    # Z-Image 6B, 30 x 3840, 256 text tokens
    "z_image": {"fp32": (59616.14, 42827100), "bf16": (30093.41, 20995235)},
    # LTX-2 19B audio-video (LTXAV, 48 x 4096), 32x/8x latent, 5 s of audio latents in the intercept
    "ltxv_4096": {"fp32": (229936.0, 20709364), "bf16": (114992.0, 10355186)},
    # Kandinsky 5 Lite: video 32 x 1792 (HunyuanVideo latent), image 50 x 2560; 256 Qwen2.5-VL tokens
    "kandinsky5_1792": {"fp32": (12369.64, 187497038), "bf16": (9184.47, 25144064)},
    "kandinsky5_2560": {"fp32": (28544.0, 6650884), "bf16": (14400.0, 3456514)},
    # 0.33's classes, #26 (bench/activation_models_av.py): MiniMax H3 curve form (50 x 5376), the video
    # latent at the host's frame rule, audio of the same duration, 256 Qwen3-VL-32B tokens; cells as the
    # planner counts them (16x, one per 4 frames): -14% at 512x320x49 (audio and text weigh more there),
    # within 4% at 832x480x97 and 1344x768x121
    "minimax_h3": {"fp32": (67658.19, 137726966), "bf16": (33883.37, 69294301)},
    # HiDream-O1 8B, pixel space (cells are pixels, 32-pixel patches), a 128-token prompt
    "hidream_o1": {"fp32": (249.31, 63867276), "bf16": (124.56, 31922572)},
    # SVD-XT UNet, one latent per frame (the frames are the batch), CLIP-H image token
    "svd": {"fp32": (34592.93, 163336), "bf16": (17296.46, 81729)},
}
# Families not measured here whose blocks are of a measured kind: (measured key, scale per latent cell,
# why). Empty since #26 measured MiniMax H3 (it was scaled from Flux.2 dev by width: 36% over).
SCALED: dict[str, tuple[str, float, str]] = {}
# Families measured per width, like Wan: the widest when the size is not known
BY_WIDTH: dict[str, dict[int, str]] = {
    "flux2": {3072: "flux2_3072", 4096: "flux2_4096", 6144: "flux2_6144"},
    "kandinsky5": {1792: "kandinsky5_1792", 2560: "kandinsky5_2560"},
    "ltxv": {2048: "ltxv", 4096: "ltxv_4096"},  # LTX-Video 2B (0.9.x), LTX-2/2.3
}
# Families with the same blocks as a measured one (same width and layout): chroma = Flux without vec.
MEASURED_ALIAS = {"chroma": "flux", "sd2": "sd15"}
# Wan by hidden size: the 14B (5120) is "wan21" above; the 5B and 1.3B are measured separately.
WAN_BY_DIM: dict[int, str] = {1536: "wan21_1.3b", 3072: "wan22", 5120: "wan21"}
# Over the measured peak: CUDA allocator rounding and kernel workspaces (checked by bench/activations_gpu.py)
MARGIN = 0.10
# An unknown family: the largest image factor ComfyUI uses, on an 8x latent, frames every 4.
UNKNOWN_DIFFUSION = DiffusionSpec(8.0, "conservative default", temporal=4)
# Wan: the 14B's dim, so a Wan model of unknown size is not under-estimated.
DEFAULT_SCALE = {"dim": 5120, "cross_attention_dim": 2048, "hidden": 6144}  # Flux.2: dev's width
SCALE_REFERENCE = {"dim": 1, "cross_attention_dim": 2048, "hidden": 2604}
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
    "hunyuan_video15_vae": VaeSpec(16, 4, "hunyuan_video15", "0.33 sd.py:774-775"),
}

# Text encoders, measured by bench/activations.py on the full released model (77/256/512 tokens; CLIP
# at 77): peak bytes = a * tokens + c * tokens**2 (c: T5's tokens x tokens relative-position bias).
TEXT_MEASURED: dict[str, dict[str, tuple[float, float]]] = {
    "t5xxl": {"fp32": (131607.32, 430.1667), "bf16": (62432.79, 229.6208)},
    "umt5xxl": {"fp32": (131607.32, 686.1667), "bf16": (62432.79, 357.6208)},
    "clip_l": {"fp32": (43324.0, 0.0), "bf16": (43324.0, 0.0)},
    "clip_g": {"fp32": (51516.0, 0.0), "bf16": (51516.0, 0.0)},
    "llama3_8b": {"fp32": (222224.0, 4.0), "bf16": (111632.0, 2.0)},
    "qwen25_vl_7b": {"fp32": (271376.0, 4.0), "bf16": (136208.0, 2.0)},
}
# name: (the measured model it scales from by hidden size, hidden size, default tokens)
TEXT_ENCODERS: dict[str, tuple[str, int, int]] = {
    "t5xxl": ("t5xxl", 4096, 512), "umt5xxl": ("umt5xxl", 4096, 512), "t5base": ("t5xxl", 768, 512),
    "umt5base": ("umt5xxl", 768, 512), "t5xl": ("t5xxl", 2048, 512), "byt5_small": ("t5xxl", 1472, 512),
    "clip_l": ("clip_l", 768, 77), "clip_g": ("clip_g", 1280, 77), "clip_h": ("clip_g", 1024, 77),
    "llama3_8b": ("llama3_8b", 4096, 512), "qwen25_vl_7b": ("qwen25_vl_7b", 3584, 512),
    "qwen25_7b": ("qwen25_vl_7b", 3584, 512), "qwen25_vl_3b": ("qwen25_vl_7b", 2048, 512),
    "qwen25_3b": ("qwen25_vl_7b", 2048, 512), "gemma2_2b": ("qwen25_vl_7b", 2304, 512),
    "qwen3_4b": ("qwen25_vl_7b", 2560, 512), "gemma3_4b": ("qwen25_vl_7b", 2560, 512),
    "gemma3_12b": ("qwen25_vl_7b", 3840, 512),
    # the 0.33 host's LLM encoders (Flux.2, Z-Image, Qwen-Image 2.1, Krea 2, MiniMax H3): by hidden size
    "qwen3_8b": ("qwen25_vl_7b", 4096, 512), "qwen3_32b": ("qwen25_vl_7b", 5120, 512),
    "qwen3vl_4b": ("qwen25_vl_7b", 2560, 512), "qwen3vl_8b": ("qwen25_vl_7b", 4096, 512),
    "qwen3vl_32b": ("qwen25_vl_7b", 5120, 512), "mistral3_24b": ("qwen25_vl_7b", 5120, 512),
}  # fmt: skip
TEXT_HIDDEN = {
    "t5xxl": 4096,
    "umt5xxl": 4096,
    "clip_l": 768,
    "clip_g": 1280,
    "llama3_8b": 4096,
    "qwen25_vl_7b": 3584,
}
UNKNOWN_TEXT_ENCODER = ("umt5xxl", 4096, 512)  # the largest measured at 512 tokens
CLIP_VISION = {
    "clip_vision_h": (1280, 14, 224),
    "clip_vision_l": (1024, 14, 224),
    "clip_vision_g": (1664, 14, 224),
}
CLIP_VISION |= {"siglip_so400m": (1152, 14, 384)}


def dtype_bytes(dtype: str) -> int:
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
    split: bool = False,
) -> int:
    """Peak activation bytes of the node computing with a ``kind`` component of ``family``.

    ``width``/``height``/``frames`` are in pixels of the image or video produced. Extra keywords refine
    the estimate where ComfyUI's own formula needs them: ``dim`` (Wan hidden size, LTXV cross-attention
    dim), ``vace`` (Wan VACE), ``reference_images`` (Kontext/Qwen-Image-Edit/OmniGen2 reference latents of
    the same size), ``tokens`` (text encoders), ``encode`` (VAE encode instead of decode), ``scale``
    (upscale models). Unknown families get a conservative default. For a diffusion model ``cfg`` runs cond
    and uncond in one batch; ``split`` is the host's fallback without room for that: the cond alone.
    """
    if width <= 0 or height <= 0 or frames <= 0 or batch <= 0:
        raise ValueError(
            f"width, height, frames and batch must be positive: {width}x{height}x{frames}, {batch}"
        )
    size = dtype_bytes(dtype)
    if kind in ("diffusion_model", "checkpoint"):
        calls = batch * (2 if cfg and not split else 1)
        return predicted_peak(family, width, height, frames, calls, dtype, dim, vace, reference_images)
    if kind == "vae":
        return _vae_bytes(family, width, height, frames, size, encode)
    if kind == "text_encoder":
        return text_encoder_bytes(family, tokens, dtype)
    if kind == "clip_vision":
        hidden, patch, side = CLIP_VISION.get(family, (1664, 14, 384))
        per_token = (
            TEXT_MEASURED["clip_l"]["fp32" if size == 4 else "bf16"][0] * hidden / TEXT_HIDDEN["clip_l"]
        )
        return math.ceil(per_token * ((side // patch) ** 2 + 1) * batch * (1 + MARGIN))
    if kind == "upscale_model":
        return math.ceil(512 * 512 * 3 * size * max(scale, 1) * 384.0)
    if kind in ("lora", "controlnet", "model_patch", "style_model", "detector"):
        return 0  # a detector (RT-DETR) runs on a 640x640 image: megabytes, not a diffusion latent
    raise ValueError(f"no activation estimate for kind {kind!r}")


def text_encoder_bytes(family: str, tokens: int | None = None, dtype: str = "bf16") -> int:
    """Peak of encoding one prompt: the measured model's coefficients (scaled by hidden size for the
    models of its kind not measured) plus ``MARGIN``."""
    basis, hidden, default_tokens = TEXT_ENCODERS.get(family, UNKNOWN_TEXT_ENCODER)
    a, c = TEXT_MEASURED[basis]["fp32" if dtype_bytes(dtype) == 4 else "bf16"]
    t = tokens or default_tokens
    return math.ceil((a * t + c * t * t) * hidden / TEXT_HIDDEN[basis] * (1 + MARGIN))


def host_reservation(
    family: str,
    *,
    width: int,
    height: int,
    frames: int = 1,
    batch: int = 1,
    cfg: bool = False,
    dtype: str = "bf16",
    dim: int | None = None,
    vace: bool = False,
    reference_images: int = 0,
) -> int:
    """ComfyUI's own ``memory_required`` for a diffusion call on ``batch`` latents, doubled with ``cfg`` as
    the sampler asks it (sampler_helpers.py:121). A conservative formula, not a measurement."""
    calls = batch * (2 if cfg else 1)
    return _diffusion_bytes(
        family, width, height, frames, calls, dtype_bytes(dtype), dim, vace, reference_images
    )


def measured_coefficients(family: str, dtype: str, dim: int | None = None) -> tuple[float, float] | None:
    """(bytes per latent cell, bytes per call) measured for ``family`` at ``dtype``, or None."""
    key = MEASURED_ALIAS.get(family, family)
    if family in ("wan21", "wan22"):
        dims = sorted(WAN_BY_DIM)
        want = dim or (3072 if family == "wan22" else DEFAULT_SCALE["dim"])
        key = WAN_BY_DIM[next((d for d in dims if d >= want), dims[-1])]
        if want > dims[-1]:  # wider than any measured Wan: scale with the width
            a, b = MEASURED[key]["fp32" if dtype_bytes(dtype) == 4 else "bf16"]
            return a * want / dims[-1], b * want / dims[-1]
    if family in SCALED:
        base, scale, _ = SCALED[family]
        a, b = MEASURED[base]["fp32" if dtype_bytes(dtype) == 4 else "bf16"]
        return a * scale, b
    if family in BY_WIDTH:
        widths = sorted(BY_WIDTH[family])
        want = dim or widths[-1]
        key = BY_WIDTH[family][next((d for d in widths if d >= want), widths[-1])]
    if key not in MEASURED:
        return None
    a, b = MEASURED[key]["fp32" if dtype_bytes(dtype) == 4 else "bf16"]
    if key == "ltxv" and dim and dim > 2048:  # measured: the 2B (cross-attention dim 2048)
        return a * dim / 2048, b * dim / 2048
    return a, b


def predicted_peak(
    family: str,
    width: int,
    height: int,
    frames: int = 1,
    batch: int = 1,
    dtype: str = "bf16",
    dim: int | None = None,
    vace: bool = False,
    refs: int = 0,
) -> int:
    """The real peak of one diffusion call on ``batch`` latents: measured coefficients plus ``MARGIN``;
    ComfyUI's formula where the family was not measured."""
    coef = measured_coefficients(family, dtype, dim)
    if coef is None:
        return _diffusion_bytes(family, width, height, frames, batch, dtype_bytes(dtype), dim, vace, refs)
    spec = DIFFUSION.get(family, UNKNOWN_DIFFUSION)
    cells = math.ceil(height / spec.spatial) * math.ceil(width / spec.spatial)
    cells *= latent_frames(frames, spec.temporal) * (1 + refs)  # reference latents join the tokens
    a, b = coef
    per_call = (a * cells + b) * (VACE_FACTOR if vace else 1.0)
    return math.ceil(batch * per_call * (1 + MARGIN))


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
    return math.ceil(area * size * 0.01 * factor * MiB)


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
    elif spec.decode == "hunyuan_video15":  # decodes in temporal chunks: no frames factor
        n = 1400 * 9 * height * width if encode else 3600 * 4 * h * w * 16 * 16
    else:  # hunyuan_image
        n = 700 * height * width if encode else 700 * h * w * 32 * 32
    return math.ceil(n * size * frames_factor)
