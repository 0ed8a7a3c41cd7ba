"""A LoRA file described as a patch on its base model: its bytes grouped by the base block they patch.

Keys follow ComfyUI's, kohya's (underscored) and diffusers' naming; diffusers' Flux block names are
mapped onto ComfyUI's so a LoRA's blocks line up with its base model's.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping

from .header import TensorEntry, dominant_dtype
from .info import Block, ComponentInfo

_LORA_MARKERS = (
    "lora_up",
    "lora_down",
    "lora_A",
    "lora_B",
    "lora.up",
    "lora.down",
    "lokr_w",
    "hada_w",
    "lora_mid",
)
_LORA_PREFIXES = (
    "diffusion_model.",
    "model.diffusion_model.",
    "transformer.",
    "base_model.model.",
    "unet.",
    "lora_unet_",
)
_BLOCK_NAMES = (
    "double_blocks", "single_blocks", "double_stream_blocks", "single_stream_blocks", "joint_blocks",
    "transformer_blocks", "single_transformer_blocks", "vace_blocks", "blocks", "input_blocks",
    "output_blocks", "layers", "noise_refiner", "context_refiner",
)  # fmt: skip
_LORA_BLOCK = re.compile(r"^(" + "|".join(_BLOCK_NAMES) + r")[._](\d+)[._]")
# diffusers' Flux names -> ComfyUI's, so a LoRA's blocks line up with its base model's
_DIFFUSERS_FLUX = {"transformer_blocks": "double_blocks", "single_transformer_blocks": "single_blocks"}
_LORA_FAMILY_ORDER = {
    "flux": ("double_blocks", "single_blocks"),
    "hunyuan_video": ("double_blocks", "single_blocks"),
    "hidream": ("double_stream_blocks", "single_stream_blocks"),
}


_LORA_RE = re.compile("|".join(re.escape(m) for m in _LORA_MARKERS))


def is_lora(tensors: Mapping[str, TensorEntry]) -> bool:
    """Whether any key carries a LoRA/LoKr/LoHa marker (``lora_up``, ``lora_A``, ``lokr_w``...)."""
    return _LORA_RE.search("\n".join(tensors)) is not None


def describe_lora(tensors: Mapping[str, TensorEntry], file: str | None, source: str) -> ComponentInfo:
    """A LoRA is a patch on a base model: its bytes are grouped by the base block they patch."""
    total = sum(t.nbytes for t in tensors.values())
    dtype, dtype_note = dominant_dtype(tensors)
    per_block: dict[str, int] = defaultdict(int)
    text_bytes = 0
    for key, spec in tensors.items():
        body = key
        for prefix in _LORA_PREFIXES:
            if body.startswith(prefix):
                body = body[len(prefix) :]
                break
        if body.startswith(("lora_te", "te_", "text_encoder", "text_encoders.")):
            text_bytes += spec.nbytes
            continue
        match = _LORA_BLOCK.match(body)
        if match:
            per_block[f"{match.group(1)}.{int(match.group(2))}"] += spec.nbytes
    family = _lora_family(tensors, per_block)
    if family == "flux":
        per_block = _rename_blocks(per_block, _DIFFUSERS_FLUX)
    order = _LORA_FAMILY_ORDER.get(family or "", ())
    rank = Counter(
        t.shape[0] for k, t in tensors.items() if ("lora_down" in k or "lora_A" in k) and len(t.shape) >= 2
    ).most_common(1)
    names = sorted(
        per_block, key=lambda n: (_order_index(n, order), n.rsplit(".", 1)[0], int(n.rsplit(".", 1)[1]))
    )
    notes = [f"rank {rank[0][0]}" if rank else "LoRA"]
    if text_bytes:
        notes.append(f"{text_bytes} B patch the text encoder")
    if dtype_note:
        notes.append(dtype_note)
    blocks = tuple(Block(n, per_block[n]) for n in names)
    return ComponentInfo("lora", file, family, dtype, total, blocks, source, "; ".join(notes))


def _order_index(name: str, order: tuple[str, ...]) -> int:
    head = name.rsplit(".", 1)[0]
    return order.index(head) if head in order else len(order)


def _rename_blocks(per_block: Mapping[str, int], mapping: Mapping[str, str]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for name, size in per_block.items():
        head, idx = name.rsplit(".", 1)
        out[f"{mapping.get(head, head)}.{idx}"] += size
    return out


def _lora_family(tensors: Mapping[str, TensorEntry], per_block: Mapping[str, int]) -> str | None:
    keys = " ".join(tensors)
    heads = {n.rsplit(".", 1)[0] for n in per_block}
    if "img_attn.qkv" in keys or "lora_unet_double_blocks" in keys or "single_transformer_blocks" in keys:
        return "flux"  # ComfyUI, kohya (underscored) and diffusers names of Flux's blocks
    if "img_attn_qkv" in keys:
        return "hunyuan_video"
    if {"double_stream_blocks", "single_stream_blocks"} & heads:
        return "hidream"
    if "joint_blocks" in heads:
        return "sd3"
    if "img_mlp" in keys or "img_mod" in keys:
        return "qwen_image"
    if "blocks" in heads and ("self_attn" in keys or "cross_attn" in keys):
        widths = Counter(
            max(t.shape)
            for k, t in tensors.items()
            if ".self_attn.q." in k and ("lora_down" in k or "lora_A" in k)
        )
        width = widths.most_common(1)[0][0] if widths else 0
        return "wan22" if width == 3072 else "wan21"
    if (
        {"input_blocks", "output_blocks"} & heads
        or "lora_unet_down_blocks" in keys
        or "lora_unet_input_blocks" in keys
    ):
        return "sdxl" if "lora_te2_" in keys or "conditioner" in keys else "sd"
    if "layers" in heads:
        return "lumina2"
    return None
