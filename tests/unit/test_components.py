"""memory.models.components: families and blocks of each architecture, read from safetensors headers.

Every test writes a tiny real safetensors file whose keys follow the released model's layout (a few
blocks, tiny widths; only the shapes detection reads are real-sized, and those are thin). Checkpoints,
LoRAs, dtypes and bad files are in test_components_files.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from comfyui_headroom.memory.models.components import describe_file
from headroom_testing.component_layouts import (
    F16,
    F32,
    clip_text_layout,
    flux_layout,
    llm_layout,
    nbytes,
    one,
    t5_layout,
    unet_layout,
    wan_layout,
    write,
)

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


def test_an_sd_checkpoints_clip_is_known_beside_its_logit_scale(tmp_path: Path) -> None:
    """Issue #43: an SD checkpoint whose cond_stage_model. holds logit_scale beside transformer.text_model
    read as an unknown text encoder (family None), so the Offload Loader's pairing check let a Wan DiT
    take its CLIP, and the sampler failed with a raw matmul shape error."""
    lay = {f"model.diffusion_model.{k}": v for k, v in unet_layout(768).items()}
    lay |= {f"cond_stage_model.transformer.{k}": v for k, v in clip_text_layout(768).items()}
    lay["cond_stage_model.logit_scale"] = ()
    parts = describe_file(write(tmp_path / "sd15.safetensors", lay), "checkpoint")
    assert isinstance(parts, list)
    assert [(p.kind, p.family) for p in parts if p.kind == "text_encoder"] == [("text_encoder", "clip_l")]


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
