"""Compute time of a node, for the predicted wall time (never the plan's objective, which is transfer).

One model call costs its matmuls and its attention, counted separately because they reach different
shares of the card's peak:

- matmuls: 2 x parameters x tokens (every weight multiplies every token once; convolutions alike);
- attention: 4 x tokens^2 x hidden x attention layers (scores and weighted sum; heads x head dim =
  hidden), over the joint image+text sequence where the model attends jointly (Flux, SD3, Qwen-Image,
  HunyuanVideo...), plus 4 x tokens x text tokens x hidden x layers of cross-attention (Wan, LTX-V).

Tokens: a DiT sees one token per ``spatial`` x ``spatial`` pixels (VAE factor x patch) and one latent
frame per ``temporal`` frames (the first alone), per sample of the batch; CFG evaluates cond and uncond
(batched or one after the other, the FLOPs are the same: twice). ``ARCH`` holds hidden size and attention
layers at the released sizes (the host's model classes, comfy/ldm/*; checked by ``bench/flops.py``, which
counts the FLOPs of those classes on the meta device, see bench/results/flops.md); a file of another
size takes the closest one. UNets (SD1.5/SDXL) take FLOPs per latent cell counted the same way.

Time of one call = matmul FLOPs / (peak at the precision the weights compute in x matmul share) +
attention FLOPs / (bf16 peak x attention share), and never less than reading its weights once from
device memory. fp8 weights compute at the bf16 rate unless the host multiplies in fp8 (ComfyUI casts
them to bf16 unless run with ``--fast fp8_matrix_mult`` or the weights carry its quantization config):
``fp8_matmul``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..models.gguf import BYTES_PER_PARAM as GGUF_BYTES_PER_PARAM
from ..models.info import ComponentInfo
from .activations import CLIP_VISION, DIFFUSION, TEXT_ENCODERS, UNKNOWN_DIFFUSION, latent_frames
from .gpus import Gpu

BYTES_PER_PARAM = {
    "fp8": 1, "fp8_e4m3fn": 1, "fp8_e5m2": 1, "fp16": 2, "bf16": 2, "fp32": 4, **GGUF_BYTES_PER_PARAM,
}  # fmt: skip


@dataclass(frozen=True)
class Arch:
    hidden: int
    layers: int  # blocks that attend over the whole sequence
    params: float  # at the released size, to pick the closest of a family's sizes
    patch: int = 2  # latent cells per token side
    text: int = 0  # text tokens in the joint sequence
    cross: int = 0  # text tokens attended by cross-attention


# family -> sizes, from the host's classes (comfy/ldm/*) at the released configurations
ARCH: dict[str, tuple[Arch, ...]] = {
    "flux": (Arch(3072, 57, 11.9e9, text=256),),  # 19 double + 38 single blocks
    "chroma": (Arch(3072, 57, 8.9e9, text=256),),
    "flux2": (  # Klein 4B, Klein 9B, dev
        Arch(3072, 25, 3.9e9, text=512),
        Arch(4096, 32, 9.1e9, text=512),
        Arch(6144, 56, 32e9, text=512),
    ),  # fmt: skip
    "sd3": (Arch(1536, 24, 2.2e9, text=333), Arch(2432, 38, 8.1e9, text=333)),
    "qwen_image": (Arch(3072, 60, 20.4e9, text=256),),
    "hidream": (Arch(2560, 48, 17.1e9, text=256),),  # 16 double + 32 single
    "hunyuan_video": (Arch(3072, 60, 12.8e9, text=256),),  # 20 double + 40 single
    "hunyuan_video15": (Arch(2048, 54, 8.3e9, patch=1, text=256),),
    "hunyuan_image": (Arch(3584, 60, 17e9, patch=1, text=256),),
    "lumina2": (Arch(2304, 26, 2.6e9, text=256), Arch(3840, 30, 6.2e9, text=256)),  # Lumina 2, Z-Image
    "z_image": (Arch(3840, 30, 6.2e9, text=256),),  # the family its header says (dim 3840)
    "omnigen2": (Arch(2520, 32, 4e9, text=256),),
    "pixart": (Arch(1152, 28, 0.6e9, cross=300),),
    "wan21": (Arch(1536, 30, 1.4e9, cross=512), Arch(5120, 40, 14.3e9, cross=512)),
    "wan22": (Arch(3072, 30, 5.0e9, cross=512), Arch(5120, 40, 14.3e9, cross=512)),
    "ltxv": (Arch(2048, 28, 1.9e9, patch=1, cross=128), Arch(4096, 48, 19e9, patch=1, cross=256)),
    "mochi": (Arch(3072, 48, 10e9, text=256),),
}
# UNets: matmul + convolution FLOPs per latent cell of one call, and attention FLOPs per cell squared
# (their self-attention runs at 1/2 and 1/4 of the latent's side), counted by bench/flops.py.
UNET_FLOPS: dict[str, tuple[float, float]] = {
    "sd15": (49.6e6, 1.1e4),
    "sd2": (49.6e6, 1.1e4),
    "sdxl_refiner": (90e6, 1.0e3),
    "sdxl": (180e6, 1.1e3),
}
# A decoder's FLOPs per output pixel (an SD-class KL decoder: ~2.5 TFLOP for a 1024x1024 frame); the
# encoder about half. Video VAEs decode per frame at about the same cost per pixel.
VAE_FLOPS_PER_PIXEL = 2.4e6
TEXT_TOKENS = 256  # a prompt, for encoders nothing says more of
UNKNOWN_ARCH = Arch(3072, 0, 0.0, text=256)  # layers from the parameters: 12 x hidden^2 per layer


@dataclass(frozen=True)
class Work:
    """FLOPs of one call, and the weight bytes it reads."""

    matmul: float = 0.0
    attention: float = 0.0
    weights: int = 0
    precision: str = "bf16"


def params_of(info: ComponentInfo) -> float:
    return info.bytes / BYTES_PER_PARAM.get(info.dtype.split("_scaled")[0], 2)


def precision_of(info: ComponentInfo, fp8_matmul: bool) -> str:
    """The precision a component's matmuls run at on the host: bf16, unless fp8 weights and fp8 matmuls."""
    return "fp8" if fp8_matmul and info.dtype.startswith("fp8") else "bf16"


def _arch(family: str, params: float) -> Arch:
    sizes = ARCH.get(family)
    if not sizes:
        return UNKNOWN_ARCH
    return min(sizes, key=lambda a: abs(math.log(max(params, 1.0) / a.params)))


def diffusion_work(family: str, params: float, *, width: int, height: int, frames: int, samples: int) -> Work:
    """FLOPs of one call of a diffusion model on ``samples`` latents (batch x 2 with CFG)."""
    spec = DIFFUSION.get(family, UNKNOWN_DIFFUSION)
    cells = math.ceil(width / spec.spatial) * math.ceil(height / spec.spatial)
    cells *= latent_frames(frames, spec.temporal)
    if family in UNET_FLOPS:
        per_cell, per_square = UNET_FLOPS[family]
        return Work(samples * per_cell * cells, samples * per_square * cells * cells)
    arch = _arch(family, params)
    tokens = max(1, cells // (arch.patch * arch.patch))
    layers = arch.layers or max(1, round(params / (12 * arch.hidden**2)))
    seq = tokens + arch.text
    matmul = 2 * params * seq
    attention = 4 * seq * seq * arch.hidden * layers + 4 * tokens * arch.cross * arch.hidden * layers
    return Work(samples * matmul, samples * attention)


def call_work(
    info: ComponentInfo,
    *,
    width: int,
    height: int,
    frames: int,
    batch: int,
    cfg: bool,
    encode: bool = False,
    fp8_matmul: bool = False,
) -> Work:
    """FLOPs of one call of ``info`` at a node whose latent is ``width`` x ``height`` x ``frames``."""
    params = params_of(info)
    precision = precision_of(info, fp8_matmul)
    family = info.family or ""
    if info.kind == "vae":
        pixels = width * height * frames * batch
        work = Work(VAE_FLOPS_PER_PIXEL * pixels * (0.5 if encode else 1.0))
    elif info.kind in ("diffusion_model", "checkpoint", "controlnet"):
        samples = batch * (2 if cfg else 1)
        work = diffusion_work(family, params, width=width, height=height, frames=frames, samples=samples)
    elif info.kind == "text_encoder":
        tokens = TEXT_ENCODERS.get(family, (None, 0, TEXT_TOKENS))[2]
        work = Work(2 * params * tokens)
    elif info.kind == "clip_vision":
        hidden, patch, size = CLIP_VISION.get(family, (1280, 14, 224))
        work = Work(2 * params * ((size // patch) ** 2 + 1) * batch)
    elif info.kind == "upscale_model":  # a convolutional upscaler runs at the input's resolution
        work = Work(2 * params * width * height * batch)
    else:  # a LoRA or a patch computes inside the model it patches
        return Work()
    return Work(work.matmul, work.attention, info.bytes, precision)


def seconds(work: Work, gpu: Gpu) -> float:
    """Time of one call on ``gpu``: matmuls and attention at their shares of the peak, at least the time
    to read the weights once from device memory."""
    if not work.matmul and not work.attention:
        return 0.0
    eff = gpu.efficiency
    t = work.matmul / (gpu.tflops(work.precision) * 1e12 * eff.matmul)
    t += work.attention / (gpu.tflops("bf16") * 1e12 * eff.attention)
    return max(t, work.weights / (gpu.memory_gbs * 1e9))
