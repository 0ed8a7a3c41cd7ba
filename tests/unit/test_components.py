"""memory.components: families, blocks and bytes from safetensors headers, and the errors for bad files.

Every test writes a tiny real safetensors file whose keys follow the released model's layout (a few
blocks, tiny widths; only the shapes detection reads are real-sized, and those are thin).
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from comfyui_headroom.memory.models import components
from comfyui_headroom.memory.models.components import (
    ComponentError,
    ComponentInfo,
    TensorSpec,
    describe_file,
    describe_tensors,
    read_header,
)

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


# --- diffusion models ------------------------------------------------------------------------------


def test_flux_dev_blocks_in_forward_order_with_exact_bytes(tmp_path: Path) -> None:
    lay = flux_layout()
    info = one(describe_file(write(tmp_path / "flux1-dev.safetensors", lay)))
    assert (info.kind, info.family, info.dtype, info.source) == ("diffusion_model", "flux", "bf16", "header")
    assert [b.name for b in info.blocks] == [
        "double_blocks.0",
        "double_blocks.1",
        "single_blocks.0",
        "single_blocks.1",
        "single_blocks.2",
    ]
    assert info.bytes == nbytes(lay, "")
    assert info.blocks[0].bytes == nbytes(lay, "double_blocks.0.")
    assert info.blocks[4].bytes == nbytes(lay, "single_blocks.2.")
    assert info.rest_bytes == nbytes(lay, "img_in.") + nbytes(lay, "txt_in.") + nbytes(
        lay, "time_in."
    ) + nbytes(lay, "vector_in.") + nbytes(lay, "final_layer.") + nbytes(lay, "guidance_in.")
    assert "guidance-distilled" in info.note and info.file == "flux1-dev.safetensors"


def test_flux_variants_are_told_apart(tmp_path: Path) -> None:
    schnell = one(describe_file(write(tmp_path / "s.safetensors", flux_layout(guidance=False))))
    fill = one(describe_file(write(tmp_path / "f.safetensors", flux_layout(in_ch=384))))
    assert "schnell" in schnell.note and "fill" in fill.note and schnell.family == fill.family == "flux"
    chroma = flux_layout() | {"distilled_guidance_layer.in_proj.weight": (8, 4)}
    assert one(describe_file(write(tmp_path / "c.safetensors", chroma))).family == "chroma"


def test_checkpoint_prefix_is_stripped_for_a_lone_diffusion_model(tmp_path: Path) -> None:
    lay = {f"model.diffusion_model.{k}": v for k, v in flux_layout().items()}
    info = one(describe_file(write(tmp_path / "prefixed.safetensors", lay)))
    assert info.family == "flux" and info.blocks[0].name == "double_blocks.0"
    assert "model.diffusion_model." in info.note


def test_hunyuan_video_is_not_flux(tmp_path: Path) -> None:
    lay = {
        "img_in.proj.weight": (8, 16, 1, 2, 2),
        "txt_in.individual_token_refiner.blocks.0.norm1.weight": (8,),
        "double_blocks.0.img_attn_qkv.weight": (24, 8),
        "double_blocks.1.img_attn_qkv.weight": (24, 8),
        "single_blocks.0.linear1.weight": (40, 8),
    }
    info = one(describe_file(write(tmp_path / "hv.safetensors", lay)))
    assert info.family == "hunyuan_video"
    assert [b.name for b in info.blocks] == ["double_blocks.0", "double_blocks.1", "single_blocks.0"]


@pytest.mark.parametrize(
    ("layout", "family", "marker"),
    [
        (wan_layout(), "wan21", "T2V"),
        (wan_layout(in_dim=36, i2v=True), "wan21", "I2V"),
        (wan_layout(dim=24, in_dim=48, out_dim=48), "wan22", "T2V"),
    ],
)
def test_wan_families(tmp_path: Path, layout: dict, family: str, marker: str) -> None:
    info = one(describe_file(write(tmp_path / "wan.safetensors", layout, F16)))
    assert (info.family, info.dtype) == (family, "fp16")
    assert marker in info.note
    assert [b.name for b in info.blocks] == ["blocks.0", "blocks.1", "blocks.2"]
    assert all(b.bytes == nbytes(layout, f"{b.name}.") for b in info.blocks)


def test_wan_vace_blocks_interleave_as_forward_runs_them(tmp_path: Path) -> None:
    info = one(describe_file(write(tmp_path / "vace.safetensors", wan_layout(blocks=6, vace=3))))
    # comfy/ldm/wan/model.py VaceWanModel: vace block k runs right after main block k * (6 // 3)
    assert [b.name for b in info.blocks] == [
        "blocks.0",
        "vace_blocks.0",
        "blocks.1",
        "blocks.2",
        "vace_blocks.1",
        "blocks.3",
        "blocks.4",
        "vace_blocks.2",
        "blocks.5",
    ]
    assert "VACE" in info.note


@pytest.mark.parametrize(
    ("layout", "family", "first_block"),
    [
        (
            {
                "joint_blocks.0.context_block.attn.qkv.weight": (24, 8),
                "joint_blocks.1.x_block.attn.qkv.weight": (24, 8),
                "x_embedder.proj.weight": (8, 16, 2, 2),
            },
            "sd3",
            "joint_blocks.0",
        ),
        (
            {
                "txt_norm.weight": (8,),
                "img_in.weight": (8, 64),
                "transformer_blocks.0.img_mod.1.weight": (48, 8),
                "transformer_blocks.1.attn.to_q.weight": (8, 8),
            },
            "qwen_image",
            "transformer_blocks.0",
        ),
        (
            {
                "adaln_single.emb.timestep_embedder.linear_1.bias": (8,),
                "transformer_blocks.0.attn1.to_q.weight": (8, 8),
                "transformer_blocks.1.attn1.to_q.weight": (8, 8),
            },
            "ltxv",
            "transformer_blocks.0",
        ),
        (
            {
                "caption_projection.0.linear.weight": (8, 8),
                "double_stream_blocks.0.block.attn1.to_q.weight": (8, 8),
                "single_stream_blocks.0.block.attn1.to_q.weight": (8, 8),
            },
            "hidream",
            "double_stream_blocks.0",
        ),
        (
            {
                "cap_embedder.1.weight": (8, 8),
                "context_refiner.0.attention.qkv.weight": (8, 8),
                "noise_refiner.0.attention.qkv.weight": (8, 8),
                "layers.0.attention.qkv.weight": (24, 8),
                "layers.1.attention.qkv.weight": (24, 8),
            },
            "lumina2",
            "context_refiner.0",
        ),
    ],
)
def test_dit_families(tmp_path: Path, layout: dict, family: str, first_block: str) -> None:
    info = one(describe_file(write(tmp_path / "dit.safetensors", layout)))
    assert info.family == family and info.blocks[0].name == first_block
    assert sum(b.bytes for b in info.blocks) + info.rest_bytes == info.bytes


def test_lumina2_runs_context_then_noise_refiner_then_layers(tmp_path: Path) -> None:
    lay = {
        "cap_embedder.1.weight": (8, 8),
        "layers.0.a.weight": (4,),
        "noise_refiner.0.a.weight": (4,),
        "context_refiner.0.a.weight": (4,),
    }
    info = one(describe_file(write(tmp_path / "l.safetensors", lay)))
    assert [b.name for b in info.blocks] == ["context_refiner.0", "noise_refiner.0", "layers.0"]


@pytest.mark.parametrize(
    ("context", "family"), [(768, "sd15"), (1024, "sd2"), (2048, "sdxl"), (1280, "sdxl_refiner")]
)
def test_unets_by_cross_attention_width(tmp_path: Path, context: int, family: str) -> None:
    lay = unet_layout(context)
    info = one(describe_file(write(tmp_path / "unet.safetensors", lay, F16)))
    assert info.family == family
    names = [b.name for b in info.blocks]
    assert names == [f"input_blocks.{i}" for i in range(4)] + ["middle_block"] + [
        f"output_blocks.{i}" for i in range(4)
    ]
    assert info.blocks[4].bytes == nbytes(lay, "middle_block.")


# --- text encoders, VAEs, vision, upscalers, audio ---------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "family", "n_blocks"),
    [
        (t5_layout(4096, 32128), "t5xxl", 2),
        (t5_layout(4096, 256384, umt5=True), "umt5xxl", 2),
        (t5_layout(768, 32128), "t5base", 2),
        (t5_layout(1472, 1510), "byt5_small", 2),
        (clip_text_layout(768), "clip_l", 2),
        (clip_text_layout(1280, layers=3), "clip_g", 3),
        (llm_layout(152064, 3584, vision=2), "qwen25_vl_7b", 4),
        (llm_layout(128256, 4096), "llama3_8b", 2),
        (llm_layout(256000, 2304), "gemma2_2b", 2),
        (llm_layout(1000, 96), "llm_96", 2),
    ],
)
def test_text_encoders(tmp_path: Path, layout: dict, family: str, n_blocks: int) -> None:
    info = one(describe_file(write(tmp_path / "te.safetensors", layout, F16)))
    assert (info.kind, info.family, len(info.blocks)) == ("text_encoder", family, n_blocks)


def test_qwen_vl_encodes_the_image_before_the_language_layers(tmp_path: Path) -> None:
    info = one(describe_file(write(tmp_path / "q.safetensors", llm_layout(152064, 3584, layers=2, vision=2))))
    assert [b.name for b in info.blocks] == [
        "visual.blocks.0",
        "visual.blocks.1",
        "model.layers.0",
        "model.layers.1",
    ]


def test_long_clip_is_noted(tmp_path: Path) -> None:
    info = one(
        describe_file(write(tmp_path / "clip_l_hidream.safetensors", clip_text_layout(768, positions=248)))
    )
    assert info.family == "clip_l" and "248 positions" in info.note


@pytest.mark.parametrize(
    ("layout", "family"),
    [
        ({"decoder.middle.0.residual.0.gamma": (8,), "encoder.conv1.weight": (8, 3, 3, 3, 3)}, "wan21_vae"),
        (
            {
                "decoder.middle.0.residual.0.gamma": (8,),
                "decoder.upsamples.0.upsamples.0.residual.2.weight": (8,),
            },
            "wan22_vae",
        ),
        (
            {"decoder.conv_in.weight": (8, 16, 3, 3), "encoder.down.0.block.0.conv1.weight": (8, 8, 3, 3)},
            "flux_vae",
        ),
        ({"decoder.conv_in.weight": (8, 4, 3, 3), "post_quant_conv.weight": (4, 4, 1, 1)}, "sd_vae"),
        ({"decoder.conv_in.conv.weight": (8, 16, 3, 3, 3)}, "hunyuan_video_vae"),
        ({"decoder.up_blocks.0.res_blocks.0.conv1.conv.weight": (8, 8, 3, 3, 3)}, "ltxv_vae"),
    ],
)
def test_vaes_have_no_streamed_blocks(tmp_path: Path, layout: dict, family: str) -> None:
    info = one(describe_file(write(tmp_path / "vae.safetensors", layout, F32)))
    assert (info.kind, info.family, info.dtype, info.blocks) == ("vae", family, "fp32", ())
    assert info.rest_bytes == info.bytes


def test_vision_upscaler_and_audio_encoders(tmp_path: Path) -> None:
    clip_h = {"vision_model.pre_layrnorm.weight": (4,)} | {
        f"vision_model.encoder.layers.{i}.self_attn.q_proj.weight": (1280, 2) for i in range(3)
    }
    siglip = {f"vision_model.encoder.layers.{i}.self_attn.q_proj.weight": (1152, 2) for i in range(2)}
    esrgan = {
        "conv_first.weight": (8, 3, 3, 3),
        "body.0.rdb1.conv1.weight": (8, 8, 3, 3),
        "body.1.rdb1.conv1.weight": (8, 8, 3, 3),
    }
    wav2vec = {
        "feature_extractor.conv_layers.0.conv.weight": (8, 1, 3),
        "encoder.layers.0.attention.k_proj.weight": (8, 8),
    }
    got = [
        one(describe_file(write(tmp_path / f"{i}.safetensors", lay)))
        for i, lay in enumerate((clip_h, siglip, esrgan, wav2vec))
    ]
    assert [(g.kind, g.family, len(g.blocks)) for g in got] == [
        ("clip_vision", "clip_vision_h", 3),
        ("clip_vision", "siglip_so400m", 2),
        ("upscale_model", "esrgan", 0),
        ("audio_encoder", "wav2vec2", 1),
    ]


# --- checkpoints, LoRAs, controlnets, unknown layouts ------------------------------------------------


def sdxl_checkpoint() -> dict:
    lay = {f"model.diffusion_model.{k}": v for k, v in unet_layout(2048).items()}
    lay |= {f"conditioner.embedders.0.transformer.{k}": v for k, v in clip_text_layout(768).items()}
    lay |= {
        "conditioner.embedders.1.model.token_embedding.weight": (16, 2),
        "conditioner.embedders.1.model.ln_final.weight": (1280,),
        "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight": (6, 2),
        "conditioner.embedders.1.model.transformer.resblocks.1.attn.in_proj_weight": (6, 2),
        "first_stage_model.decoder.conv_in.weight": (8, 4, 3, 3),
        "first_stage_model.post_quant_conv.weight": (4, 4, 1, 1),
    }
    return lay


def test_single_file_checkpoint_yields_each_component(tmp_path: Path) -> None:
    lay = sdxl_checkpoint() | {"model_ema.decay": (), "alphas_cumprod": (4,)}
    infos = describe_file(write(tmp_path / "sd_xl_base_1.0.safetensors", lay, F16))
    assert isinstance(infos, list)
    assert [(i.kind, i.family) for i in infos] == [
        ("diffusion_model", "sdxl"),
        ("text_encoder", "clip_l"),
        ("text_encoder", "clip_g"),
        ("vae", "sd_vae"),
        ("other", None),
    ]
    assert sum(i.bytes for i in infos) == nbytes(lay, "")
    assert infos[2].blocks[0].name == "transformer.resblocks.0"  # OpenCLIP naming, as the file has it
    assert one(describe_file(tmp_path / "sd_xl_base_1.0.safetensors", kind="vae")).family == "sd_vae"
    both = describe_file(tmp_path / "sd_xl_base_1.0.safetensors", kind="text_encoder")
    assert isinstance(both, list) and len(both) == 2
    with pytest.raises(ComponentError, match="has no clip_vision"):
        describe_file(tmp_path / "sd_xl_base_1.0.safetensors", kind="clip_vision")


def test_flux_style_checkpoint_with_named_text_encoders(tmp_path: Path) -> None:
    lay = {f"model.diffusion_model.{k}": v for k, v in flux_layout().items()}
    lay |= {f"text_encoders.clip_l.transformer.{k}": v for k, v in clip_text_layout(768).items()}
    lay |= {f"text_encoders.t5xxl.transformer.{k}": v for k, v in t5_layout(4096, 32128).items()}
    lay |= {"vae.decoder.conv_in.weight": (8, 16, 3, 3)}
    infos = describe_file(write(tmp_path / "flux1-dev-fp8.safetensors", lay), kind="checkpoint")
    assert [i.family for i in infos] == ["flux", "clip_l", "t5xxl", "flux_vae"]


def test_loras_are_grouped_by_the_base_block_they_patch(tmp_path: Path) -> None:
    wan = {}
    for i in (0, 1, 10):
        for part in ("self_attn.q", "cross_attn.k"):
            wan[f"diffusion_model.blocks.{i}.{part}.lora_down.weight"] = (64, 5120)
            wan[f"diffusion_model.blocks.{i}.{part}.lora_up.weight"] = (5120, 64)
    info = one(describe_file(write(tmp_path / "lightx2v.safetensors", wan)))
    assert (info.kind, info.family, info.note) == ("lora", "wan21", "rank 64")
    assert [b.name for b in info.blocks] == ["blocks.0", "blocks.1", "blocks.10"]
    flux = {
        "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": (16, 8),
        "lora_unet_double_blocks_0_img_attn_qkv.alpha": (),
        "lora_unet_single_blocks_3_linear1.lora_up.weight": (8, 16),
        "lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_up.weight": (8, 16),
    }
    info = one(describe_file(write(tmp_path / "flux_lora.safetensors", flux)))
    assert info.family == "flux" and [b.name for b in info.blocks] == ["double_blocks.0", "single_blocks.3"]
    assert "text encoder" in info.note


def test_controlnet_and_the_generic_rule(tmp_path: Path) -> None:
    cn = {"input_hint_block.0.weight": (8, 3, 3, 3)} | {
        f"zero_convs.{i}.0.weight": (8, 8, 1, 1) for i in range(3)
    }
    info = one(describe_file(write(tmp_path / "cn.safetensors", cn)))
    assert (info.kind, info.family) == ("controlnet", "sd")
    unknown = (
        {"embed.weight": (4, 4)}
        | {f"trunk.stages.{i}.w": (64,) for i in range(4)}
        | {f"tiny.{i}.w": (1,) for i in range(3)}
    )
    info = one(describe_file(write(tmp_path / "mystery.safetensors", unknown), kind="model_patch"))
    assert (info.kind, info.family) == ("model_patch", None)
    assert [b.name for b in info.blocks] == [f"trunk.stages.{i}" for i in range(4)]
    assert "generic rule" in info.note and "trunk.stages x4" in info.note


def test_caller_kind_wins_but_the_layout_is_noted(tmp_path: Path) -> None:
    info = one(describe_file(write(tmp_path / "p.safetensors", wan_layout()), kind="model_patch"))
    assert (info.kind, info.family) == ("model_patch", "wan21") and "layout of a diffusion_model" in info.note


# --- dtypes --------------------------------------------------------------------------------------------


def test_scaled_fp8_and_mixed_dtypes(tmp_path: Path) -> None:
    lay = wan_layout()
    tensors = {k: torch.randn(v).to(torch.float8_e4m3fn if len(v) == 2 else BF16) for k, v in lay.items()}
    tensors |= {
        "scaled_fp8": torch.zeros(0, dtype=torch.float8_e4m3fn),
        "blocks.0.ffn.0.scale_weight": torch.tensor(1.0),
    }
    save_file(tensors, str(tmp_path / "scaled.safetensors"))
    info = one(describe_file(tmp_path / "scaled.safetensors"))
    assert info.dtype == "fp8_e4m3fn_scaled" and "dtypes by bytes" in info.note
    save_file(
        {k: v.to(torch.float8_e5m2) for k, v in tensors.items() if "scale" not in k},
        str(tmp_path / "e5m2.safetensors"),
    )
    assert one(describe_file(tmp_path / "e5m2.safetensors")).dtype == "fp8_e5m2"


def test_tensor_spec_bytes_cover_sub_byte_dtypes() -> None:
    assert TensorSpec("F4", (3, 5)).nbytes == 8 and TensorSpec("BF16", (2, 3)).nbytes == 12
    assert TensorSpec("F8_E4M3", ()).nbytes == 1


def test_describe_tensors_without_a_file_matches_the_header_path(tmp_path: Path) -> None:
    lay = flux_layout()
    from_file = one(describe_file(write(tmp_path / "x.safetensors", lay)))
    specs = {k: TensorSpec("BF16", v) for k, v in lay.items()}
    assert one(describe_tensors(specs, file="x.safetensors")) == from_file


# --- reading only the header, and bad files ------------------------------------------------------------


def test_header_parse_agrees_with_safetensors(tmp_path: Path) -> None:
    path = write(tmp_path / "m.safetensors", flux_layout() | {"x.scale": ()})
    tensors, _ = read_header(path)
    with safe_open(str(path), "pt") as f:
        expected = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert {k: t.shape for k, t in tensors.items()} == expected
    assert {k: t.dtype for k, t in tensors.items()} == dtypes


def header_file(path: Path, header: object, data: bytes = b"", length: int | None = None) -> Path:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def test_only_the_header_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = 1 << 30  # a 1 GiB tensor, left sparse on disk
    path = header_file(
        tmp_path / "big.safetensors", {"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}
    )
    header_len = path.stat().st_size - 8
    with path.open("r+b") as f:
        f.truncate(8 + header_len + size)
    read = []
    real_open = Path.open

    class Counting(io.RawIOBase):
        def __init__(self, inner: io.RawIOBase) -> None:
            self.inner = inner

        def read(self, n: int = -1) -> bytes:
            chunk = self.inner.read(n)
            read.append(len(chunk))
            return chunk

        def close(self) -> None:
            self.inner.close()

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: Counting(real_open(self, *a, **k)))
    tensors, _ = read_header(path)
    assert tensors["w"].nbytes == size
    assert sum(read) == 8 + header_len


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "too short"),
        (b"\x01\x02\x03", "too short"),
        (struct.pack("<Q", 10**12) + b"{}", "bad header length"),
        (struct.pack("<Q", 5) + b"{not", "bad header length"),
        (struct.pack("<Q", 6) + b"{oops}", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not an object"),
        (b"PK\x03\x04" + b"\0" * 20, "pickle/zip"),
        (b"\x80\x02" + b"\0" * 20, "pickle/zip"),
    ],
)
def test_corrupt_files_raise_a_component_error_naming_the_file(
    tmp_path: Path, content: bytes, match: str
) -> None:
    path = tmp_path / "broken.safetensors"
    path.write_bytes(content)
    with pytest.raises(ComponentError, match=match) as err:
        describe_file(path)
    assert "broken.safetensors" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_truncated_download_and_bad_entries(tmp_path: Path) -> None:
    good = write(tmp_path / "full.safetensors", flux_layout())
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(ComponentError, match="truncated download"):
        describe_file(cut)
    entry = {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}
    with pytest.raises(ComponentError, match="offsets 0..6 do not match"):
        describe_file(
            header_file(tmp_path / "a.safetensors", {"w": entry | {"data_offsets": [0, 6]}}, b"\0" * 8)
        )
    with pytest.raises(ComponentError, match="unknown dtype"):
        describe_file(header_file(tmp_path / "b.safetensors", {"w": entry | {"dtype": "Q4"}}, b"\0" * 8))
    with pytest.raises(ComponentError, match="malformed header entry"):
        describe_file(header_file(tmp_path / "c.safetensors", {"w": {"dtype": "F16"}}, b"\0" * 8))
    with pytest.raises(ComponentError, match="holds no tensors"):
        describe_file(header_file(tmp_path / "d.safetensors", {"__metadata__": {"a": "b"}}))


@pytest.mark.parametrize("suffix", [".ckpt", ".pt", ".pth", ".bin"])
def test_pickle_files_are_refused_unopened(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"model{suffix}"
    path.write_bytes(b"\x80\x04anything")
    monkeypatch.setattr(Path, "open", lambda *a, **k: pytest.fail("a pickle file was opened"))
    with pytest.raises(ComponentError, match="never unpickles"):
        describe_file(path)


def test_missing_file_is_a_component_error(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match="cannot read"):
        describe_file(tmp_path / "absent.safetensors")


def test_kinds_and_sources_are_documented() -> None:
    assert {"diffusion_model", "text_encoder", "vae", "lora", "controlnet", "clip_vision"} <= components.KINDS
    assert components.SOURCES == {"header", "catalog", "estimate"}
