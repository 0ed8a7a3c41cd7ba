"""Tiny safetensors files whose keys follow released models' layouts, for the component tests.

A few blocks and tiny widths; only the shapes the detection reads are real-sized, and those are thin.
Shared by tests/unit/test_components.py and tests/unit/test_components_files.py.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from comfyui_headroom.memory.models.info import ComponentInfo

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def write(path: Path, layout: dict[str, tuple[int, ...]], dtype: torch.dtype = BF16) -> Path:
    tensors = {
        k: torch.randn(shape).to(dtype) if shape else torch.tensor(1.0).to(dtype)
        for k, shape in layout.items()
    }
    save_file(tensors, str(path))
    return path


def nbytes(layout: dict[str, tuple[int, ...]], prefix: str, size: int = 2) -> int:
    total = 0
    for key, shape in layout.items():
        if key.startswith(prefix):
            n = 1
            for d in shape:
                n *= d
            total += n * size
    return total


def one(info: ComponentInfo | list[ComponentInfo]) -> ComponentInfo:
    assert isinstance(info, ComponentInfo), info
    return info


# --- layouts (key names as released; dims tiny) ----------------------------------------------------


def flux_layout(double: int = 2, single: int = 3, in_ch: int = 64, guidance: bool = True) -> dict:
    h = 8
    lay: dict[str, tuple[int, ...]] = {
        "img_in.weight": (h, in_ch),
        "img_in.bias": (h,),
        "txt_in.weight": (h, 16),
        "time_in.in_layer.weight": (h, 4),
        "vector_in.in_layer.weight": (h, 4),
        "final_layer.linear.weight": (64, h),
    }
    if guidance:
        lay["guidance_in.in_layer.weight"] = (h, 4)
    for i in range(double):
        for side in ("img", "txt"):
            lay |= {
                f"double_blocks.{i}.{side}_attn.qkv.weight": (3 * h, h),
                f"double_blocks.{i}.{side}_mlp.0.weight": (4 * h, h),
            }
            lay[f"double_blocks.{i}.{side}_attn.norm.key_norm.scale"] = (h,)
    for i in range(single):
        lay |= {
            f"single_blocks.{i}.linear1.weight": (7 * h, h),
            f"single_blocks.{i}.linear2.weight": (h, 5 * h),
        }
    return lay


def wan_layout(
    blocks: int = 3, dim: int = 16, in_dim: int = 16, out_dim: int = 16, i2v: bool = False, vace: int = 0
) -> dict:
    lay: dict[str, tuple[int, ...]] = {
        "patch_embedding.weight": (dim, in_dim, 1, 2, 2),
        "head.modulation": (1, 2, dim),
        "head.head.weight": (out_dim * 4, dim),
        "text_embedding.0.weight": (dim, 8),
        "time_embedding.0.weight": (dim, 4),
    }
    if i2v:
        lay["img_emb.proj.0.bias"] = (4,)
    for prefix, n in (("blocks", blocks), ("vace_blocks", vace)):
        for i in range(n):
            for part in ("self_attn.q", "self_attn.k", "cross_attn.q", "ffn.0", "ffn.2"):
                lay[f"{prefix}.{i}.{part}.weight"] = (dim, dim)
            lay[f"{prefix}.{i}.modulation"] = (1, 6, dim)
    if vace:
        lay["vace_patch_embedding.weight"] = (dim, 96, 1, 2, 2)
    return lay


def t5_layout(d_model: int, vocab: int, layers: int = 2, umt5: bool = False) -> dict:
    lay: dict[str, tuple[int, ...]] = {"shared.weight": (vocab, 2), "encoder.final_layer_norm.weight": (8,)}
    for i in range(layers):
        lay[f"encoder.block.{i}.layer.0.SelfAttention.q.weight"] = (8, d_model)
        lay[f"encoder.block.{i}.layer.1.DenseReluDense.wi_0.weight"] = (8, 8)
        if i == 0 or umt5:
            lay[f"encoder.block.{i}.layer.0.SelfAttention.relative_attention_bias.weight"] = (32, 4)
    return lay


def clip_text_layout(width: int, layers: int = 2, positions: int = 77) -> dict:
    lay: dict[str, tuple[int, ...]] = {
        "text_model.embeddings.position_embedding.weight": (positions, 2),
        "text_model.final_layer_norm.weight": (4,),
    }
    for i in range(layers):
        lay[f"text_model.encoder.layers.{i}.self_attn.q_proj.weight"] = (width, 2)
        lay[f"text_model.encoder.layers.{i}.mlp.fc1.weight"] = (4, 4)
    return lay


def llm_layout(vocab: int, hidden: int, layers: int = 2, vision: int = 0) -> dict:
    lay: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab, 1),
        "model.norm.weight": (hidden,),
    }
    for i in range(layers):
        lay[f"model.layers.{i}.self_attn.q_proj.weight"] = (8, 8)
        lay[f"model.layers.{i}.mlp.gate_proj.weight"] = (16, 8)
    for i in range(vision):
        lay[f"visual.blocks.{i}.attn.qkv.weight"] = (12, 4)
    return lay


def unet_layout(context: int, inputs: int = 4, outputs: int = 4) -> dict:
    lay: dict[str, tuple[int, ...]] = {
        "input_blocks.0.0.weight": (8, 4, 3, 3),
        "time_embed.0.weight": (16, 8),
        "out.2.weight": (4, 8, 3, 3),
    }
    for i in range(1, inputs):
        lay[f"input_blocks.{i}.0.in_layers.0.weight"] = (8,)
        lay[f"input_blocks.{i}.1.transformer_blocks.0.attn2.to_k.weight"] = (8, context)
    lay |= {
        "middle_block.0.in_layers.0.weight": (8,),
        "middle_block.1.proj_in.weight": (8, 8),
        "middle_block.2.out_layers.3.weight": (8, 8),
    }
    for i in range(outputs):
        lay[f"output_blocks.{i}.0.in_layers.0.weight"] = (16,)
    return lay
