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
size takes the closest one. Where bench/flops.py counted the family's FLOPs on the host's classes at the
released size (``MEASURED_FLOPS``: UNets, Flux, Wan, Qwen-Image, HunyuanVideo, SD3, LTX-V, HiDream), the
counted coefficients are used: a DiT's modulation layers run once per call, not per token, and a
double-stream block's text half meets only the text tokens, so 2 x parameters x tokens would overcount
Flux 1.7x and Qwen-Image 3x.

Time of one call, kernel class by kernel class, each at a share of the card's published peak (``gpus``:
``Efficiency``, every share at most 1): matmul FLOPs at the precision the weights compute in; attention
FLOPs at the bf16 peak, the share lowered for short sequences and small heads (``attention_reach``);
a VAE's convolutions at the bf16 peak; memory-bound ops (norms, activations, modulation, residual adds:
``MEMORY_PASSES`` reads or writes of the activation per layer) at the card's memory bandwidth; plus a
fixed overhead per model call. Never less than reading the call's weights once from device memory.
fp8 weights compute at the bf16 rate unless the host multiplies in fp8 (ComfyUI casts them to bf16
unless run with ``--fast fp8_matrix_mult`` or the weights carry its quantization config):
``fp8_matmul``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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
    "flux2": (  # Klein 4B, Klein 9B, dev; the host's latent is already patchified (16 px a cell)
        Arch(3072, 25, 3.9e9, patch=1, text=512),
        Arch(4096, 32, 9.1e9, patch=1, text=512),
        Arch(6144, 56, 32e9, patch=1, text=512),
    ),  # fmt: skip
    "sd3": (Arch(1536, 24, 2.2e9, text=333), Arch(2432, 38, 8.1e9, text=333)),
    "qwen_image": (Arch(3072, 60, 20.4e9, text=256),),
    "hidream": (Arch(2560, 48, 17.1e9, text=256),),  # 16 double + 32 single
    "hunyuan_video": (Arch(3072, 60, 12.8e9, text=256),),  # 20 double + 40 single
    "hunyuan_video15": (Arch(2048, 54, 8.3e9, patch=1, text=256),),
    "hunyuan_image": (Arch(3584, 60, 17e9, patch=1, text=256),),
    "lumina2": (Arch(2304, 26, 2.6e9, text=256), Arch(3840, 30, 6.2e9, text=256)),  # Lumina 2, Z-Image
    "z_image": (Arch(3840, 30, 6.2e9, text=256),),  # the family its header says (dim 3840)
    # Kandinsky 5 Lite video (32 x 1792) and image (50 x 2560): self-attention + cross-attention to text
    "kandinsky5": (Arch(1792, 32, 2.0e9, cross=256), Arch(2560, 50, 6.0e9, cross=256)),
    "minimax_h3": (Arch(5376, 50, 33e9, text=512),),  # comfy/ldm/minimax/model.py defaults (0.33)
    "omnigen2": (Arch(2520, 32, 4e9, text=256),),
    "pixart": (Arch(1152, 28, 0.6e9, cross=300),),
    "wan21": (Arch(1536, 30, 1.4e9, cross=512), Arch(5120, 40, 14.3e9, cross=512)),
    "wan22": (Arch(3072, 30, 5.0e9, cross=512), Arch(5120, 40, 14.3e9, cross=512)),
    "ltxv": (Arch(2048, 28, 1.9e9, patch=1, cross=128), Arch(4096, 48, 19e9, patch=1, cross=256)),
    "mochi": (Arch(3072, 48, 10e9, text=256),),
}
# Counted by bench/flops.py on the host's classes at the released sizes (bench/results/flops.md), per
# latent cell of one call: matmul = m1 x cells + m0, attention = a2 x cells^2 + a1 x cells + a0, and the
# parameters they were counted at. A file within MEASURED_RANGE of those parameters takes them; another
# size of the family takes the formula with the family's counted share of parameters that multiply each
# image token (modulation layers run once per call, a double-stream block's text half on text only).
MEASURED_FLOPS: dict[str, tuple[float, float, float, float, float, float]] = {
    # family: (m1, m0, a2, a1, a0, parameters)
    "flux": (3.228e9, 6.629e12, 4.378e4, 1.793e8, 1.836e11, 11.9e9),
    "wan21": (5.977e9, 2.196e12, 5.12e4, 1.049e8, 0.0, 14.3e9),
    "wan21_1.3b": (6.253e8, 1.538e11, 1.152e4, 2.36e7, 0.0, 1.42e9),  # 2 sizes: attention by the formula
    "wan22": (2.171e9, 6.025e11, 2.304e4, 4.719e7, 0.0, 5.0e9),
    "qwen_image": (3.398e9, 3.498e12, 4.608e4, 9.437e7, 4.832e10, 20.4e9),
    "hunyuan_video": (3.398e9, 3.608e12, 4.608e4, 9.437e7, 4.993e10, 12.8e9),
    "sd3": (1.349e9, 1.773e12, 2.31e4, 6.155e7, 4.099e10, 8.1e9),
    "sdxl": (3.616e8, 5.253e10, 2800.0, 1.971e6, 0.0, 2.57e9),
    "sd15": (1.646e8, 3.008e9, 7301.0, 8.686e5, 0.0, 0.86e9),
    "ltxv": (3.289e9, 6.341e10, 2.294e5, 2.936e7, 0.0, 1.9e9),
    "hidream": (3.838e9, 5.041e12, 3.072e4, 9.437e7, 7.248e10, 17.1e9),
}
MEASURED_ALIAS = {"chroma": "flux", "sd2": "sd15", "sdxl_refiner": "sdxl"}
MEASURED_RANGE = 1.25  # within this factor of the counted parameters, a file is the counted model
DEFAULT_TOKEN_SHARE = 0.75  # parameters multiplying each image token, for families not counted
# A decoder's FLOPs per output pixel, counted by bench/flops.py on the host's classes: the KL decoder of
# SD/Flux (1.0e13 for a 1024x1024 image), the Wan 2.1 causal video decoder (also Qwen-Image's) and the
# Wan 2.2 one. An encoder costs about half its decoder.
VAE_FLOPS_PER_PIXEL = {"kl": 1.0e7, "wan21": 8.6e6, "wan22": 1.86e7}


def vae_flops_per_pixel(family: str) -> float:
    if "wan22" in family:
        return VAE_FLOPS_PER_PIXEL["wan22"]
    return VAE_FLOPS_PER_PIXEL["wan21" if "wan" in family or "qwen" in family else "kl"]


TEXT_TOKENS = 256  # a prompt, for encoders nothing says more of
UNKNOWN_ARCH = Arch(3072, 0, 0.0, text=256)  # layers from the parameters: 12 x hidden^2 per layer


@dataclass(frozen=True)
class Work:
    """FLOPs of one call by kernel class, the activation bytes its memory-bound ops move, and the weight
    bytes it reads. ``seq`` and ``head_dim``: the attention's sequence length and head size."""

    matmul: float = 0.0
    attention: float = 0.0
    weights: int = 0
    precision: str = "bf16"
    conv: float = 0.0
    memory: float = 0.0
    seq: int = 0
    head_dim: int = 128
    calls: int = 1


# Attention kernels (flash / memory-efficient SDPA) reach their peak share only at long sequences and
# large heads: the FlashAttention-2 paper's forward-pass figures (A100, causal off) give about half the
# long-sequence throughput near 512 tokens and about 0.85 of head dim 128's at head dim 64.
ATTENTION_HALF_SEQ = 512
ATTENTION_HALF_DIM = 24
# Memory-bound passes over a DiT block's activation (tokens x hidden, bf16) per layer: two norms and
# their modulation, q/k norms and RoPE, the gates and residual adds, and the MLP's activation on its
# 4x-wide hidden (each a read and a write): about 32 hidden-size passes. A VAE's GroupNorm and SiLU
# read and write every feature map: about 10 KB per output pixel (the KL decoder: 232 channels per
# output pixel over its four levels, three residual blocks of two norms each, bf16).
MEMORY_PASSES = 32
# Families whose residual stream the host keeps in fp32: Wan's modulation ``e`` is float32 and
# ``torch.addcmul(x, y, e)`` promotes ``x`` (comfy/ldm/wan/model.py), so its memory-bound passes move
# 4 bytes an element, not 2.
FP32_RESIDUAL = frozenset({"wan21", "wan22"})
VAE_MEMORY_BYTES_PER_PIXEL = 1.0e4
# Head size of the attention of each family (the host's classes): most DiTs use 128
HEAD_DIM = {"sdxl": 64, "sd15": 40, "sd2": 64, "sd3": 64, "ltxv": 64, "pixart": 72, "kandinsky5": 128}


def attention_reach(seq: int, head_dim: int) -> float:
    """The share of an attention kernel's long-sequence, head-dim-128 throughput at this shape, in (0, 1]."""
    if seq <= 0:
        return 1.0
    by_seq = seq / (seq + ATTENTION_HALF_SEQ)
    by_dim = (head_dim / (head_dim + ATTENTION_HALF_DIM)) / (128 / (128 + ATTENTION_HALF_DIM))
    return min(1.0, by_seq) * min(1.0, by_dim)


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


def _measured(family: str, params: float) -> tuple[float, ...] | None:
    key = MEASURED_ALIAS.get(family, family)
    if key == "wan21" and params < 4e9:
        key = "wan21_1.3b"
    coeffs = MEASURED_FLOPS.get(key)
    return coeffs


def hidden_of(info: ComponentInfo) -> int | None:
    """The hidden size of a diffusion model's released size closest to its parameters (``ARCH``), or None
    for a family without one: what sizes its activations (Wan's dim, LTX-V's cross-attention width,
    Flux.2's hidden)."""
    family = info.family or ""
    return _arch(family, params_of(info)).hidden if family in ARCH else None


def diffusion_work(family: str, params: float, *, width: int, height: int, frames: int, samples: int) -> Work:
    """FLOPs of one call of a diffusion model on ``samples`` latents (batch x 2 with CFG), the bytes its
    memory-bound ops move, and its attention's sequence length and head size."""
    spec = DIFFUSION.get(family, UNKNOWN_DIFFUSION)
    cells = math.ceil(width / spec.spatial) * math.ceil(height / spec.spatial)
    cells *= latent_frames(frames, spec.temporal)
    head_dim = HEAD_DIM.get(MEASURED_ALIAS.get(family, family), 128)
    arch = _arch(family, params)
    tokens = max(1, cells // (arch.patch * arch.patch))
    layers = arch.layers or max(1, round(params / (12 * arch.hidden**2)))
    seq = tokens + arch.text
    # a UNet (no ARCH entry) attends over its latent cells; its elementwise work is not counted
    element = 4 if family in FP32_RESIDUAL else 2
    memory = samples * MEMORY_PASSES * seq * arch.hidden * layers * element if family in ARCH else 0.0
    attn_seq = seq if family in ARCH else cells
    measured = _measured(family, params)
    if measured is not None:
        m1, m0, a2, a1, a0, counted = measured
        if 1 / MEASURED_RANGE <= params / counted <= MEASURED_RANGE or family not in ARCH:
            scale = params / counted  # a pruned or extended file of the counted architecture
            matmul = samples * scale * (m1 * cells + m0)
            attention = samples * (a2 * cells * cells + a1 * cells + a0)
            return Work(matmul, attention, memory=memory, seq=attn_seq, head_dim=head_dim)
    share = DEFAULT_TOKEN_SHARE
    if measured is not None:  # the counted share of parameters each image token meets
        share = min(1.0, measured[0] * arch.patch * arch.patch / 2 / measured[5])
    matmul = 2 * params * share * seq
    attention = 4 * seq * seq * arch.hidden * layers + 4 * tokens * arch.cross * arch.hidden * layers
    return Work(samples * matmul, samples * attention, memory=memory, seq=seq, head_dim=head_dim)


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
    """The work of one call of ``info`` at a node whose latent is ``width`` x ``height`` x ``frames``."""
    params = params_of(info)
    precision = precision_of(info, fp8_matmul)
    family = info.family or ""
    if info.kind == "vae":  # convolutions, and GroupNorm/SiLU over every feature map
        pixels = width * height * frames * batch
        half = 0.5 if encode else 1.0
        work = Work(
            conv=vae_flops_per_pixel(family) * pixels * half,
            memory=VAE_MEMORY_BYTES_PER_PIXEL * pixels * half,
        )
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
        work = Work(conv=2 * params * width * height * batch)
    else:  # a LoRA or a patch computes inside the model it patches
        return Work(calls=0)
    return replace(work, weights=info.bytes, precision=precision)


def breakdown(work: Work, gpu: Gpu) -> dict[str, float]:
    """Seconds of one call per kernel class at the whole of each peak (every share 1), and its calls:
    the time at shares ``eff`` is the sum of each class over its share, plus the calls' overhead."""
    return {
        "matmul": work.matmul / (gpu.tflops(work.precision) * 1e12),
        "attention": work.attention / (gpu.tflops("bf16") * 1e12 * attention_reach(work.seq, work.head_dim)),
        "conv": work.conv / (gpu.tflops("bf16") * 1e12),
        "memory": work.memory / (gpu.memory_gbs * 1e9),
        "calls": float(work.calls),
    }


def seconds(work: Work, gpu: Gpu) -> float:
    """Time of one call on ``gpu``: each kernel class at its share of the card's peak, plus the fixed
    overhead of a call, and at least the time to read the weights once from device memory."""
    if not (work.matmul or work.attention or work.conv):
        return 0.0
    eff = gpu.shares
    parts = breakdown(work, gpu)
    t = parts["matmul"] / eff.matmul + parts["attention"] / eff.attention + parts["conv"] / eff.conv
    t += parts["memory"] / eff.memory + parts["calls"] * eff.overhead_s
    return max(t, work.weights / (gpu.memory_gbs * 1e9))
