"""The 2026 families: detected from the file's own keys, sized from the 0.33 host's classes, planned as
the family they are (HuMo, Wan-Alpha's VAEs, a detector), and a whole-file checkpoint computing as the
part each node uses it for."""

from __future__ import annotations

from pathlib import Path

import pytest

from comfyui_headroom.memory.models.catalog import lookup
from comfyui_headroom.memory.models.components import describe_tensors
from comfyui_headroom.memory.models.header import TensorSpec
from comfyui_headroom.memory.models.info import Block, ComponentInfo
from comfyui_headroom.memory.planning.costmodel import Budget
from comfyui_headroom.memory.planning.loaders import as_role
from comfyui_headroom.memory.planning.pipeline import plan_workflow
from comfyui_headroom.memory.units import GiB

# --- family from the header's keys (tiny headers: shapes only) ----------------------------------------


def _specs(keys: dict[str, tuple[int, ...]], dtype: str = "BF16") -> dict[str, TensorSpec]:
    return {k: TensorSpec(dtype, shape) for k, shape in keys.items()}


def _flux_blocks(hidden: int) -> dict[str, tuple[int, ...]]:
    return {
        "double_blocks.0.img_attn.qkv.weight": (3 * hidden, hidden),
        "double_blocks.0.img_attn.norm.key_norm.scale": (128,),
        "single_blocks.0.linear1.weight": (4 * hidden, hidden),
        "img_in.weight": (hidden, 128),
    }


def test_flux2_from_its_shared_modulation() -> None:
    flux2 = _flux_blocks(64) | {"double_stream_modulation_img.lin.weight": (6 * 64, 64)}
    assert describe_tensors(_specs(flux2), kind="diffusion_model").family == "flux2"
    assert describe_tensors(_specs(_flux_blocks(64)), kind="diffusion_model").family == "flux"


def test_hunyuan_video_15_z_image_and_qwen3vl() -> None:
    hy = {
        "txt_in.individual_token_refiner.blocks.0.norm1.weight": (64,),
        "double_blocks.0.img_attn_qkv.weight": (192, 64),
        "img_in.proj.weight": (64, 65, 1, 1, 1),
        "byt5_in.fc1.weight": (64, 1472),
    }
    assert describe_tensors(_specs(hy), kind="diffusion_model").family == "hunyuan_image"  # 2.1 image
    hy15 = hy | {"cond_type_embedding.weight": (3, 64)}
    assert describe_tensors(_specs(hy15), kind="diffusion_model").family == "hunyuan_video15"
    lumina = {"cap_embedder.1.weight": (3840, 2560), "layers.0.attention.qkv.weight": (16, 16)}
    assert describe_tensors(_specs(lumina), kind="diffusion_model").family == "z_image"
    lumina["cap_embedder.1.weight"] = (2304, 2304)
    assert describe_tensors(_specs(lumina), kind="diffusion_model").family == "lumina2"
    llm = {"model.embed_tokens.weight": (151936, 4096), "model.layers.0.mlp.up_proj.weight": (8, 4096)}
    llm["model.norm.weight"] = (4096,)
    assert describe_tensors(_specs(llm), kind="text_encoder").family == "qwen3_8b"
    llm["visual.blocks.0.attn.qkv.weight"] = (8, 8)
    assert describe_tensors(_specs(llm), kind="text_encoder").family == "qwen3vl_8b"


def test_kandinsky5_and_the_hunyuan_video_15_vae() -> None:
    k5 = {
        "visual_transformer_blocks.0.cross_attention.key_norm.weight": (128,),
        "visual_embeddings.in_layer.bias": (1792,),
        "visual_transformer_blocks.0.feed_forward.in_layer.weight": (7168, 1792),
    }
    assert describe_tensors(_specs(k5), kind="diffusion_model").family == "kandinsky5"
    vae = {"decoder.conv_in.conv.weight": (1024, 32, 3, 3, 3)}
    assert describe_tensors(_specs(vae, "F16"), kind="vae").family == "hunyuan_video15_vae"
    vae["decoder.conv_in.conv.weight"] = (512, 16, 3, 3, 3)
    assert describe_tensors(_specs(vae, "F16"), kind="vae").family == "hunyuan_video_vae"
    # files released in a family's repackage, the same size as its layers: that family's class
    assert lookup("capybara_v0.1.safetensors", "diffusion_model").family == "hunyuan_video15"
    assert lookup("causal_forcing-framewise.safetensors", "diffusion_model").family == "wan21"
    assert lookup("hunyuanvideo15_vae_fp16.safetensors", "vae").family == "hunyuan_video15_vae"


def test_a_detector_is_its_own_kind_whatever_loader_reads_it() -> None:
    """ComfyUI 0.33 loads RT-DETR through UNETLoader: the file's keys say it is a detector."""
    detr = {"encoder.pan_blocks.1.cv4.conv.weight": (256, 64, 1, 1), "decoder.dec_bbox_head.0.weight": (4, 8)}
    info = describe_tensors(_specs(detr, "F16"), kind="diffusion_model")
    assert (info.kind, info.family) == ("detector", "rt_detr")
    assert lookup("rt_detr_v4-x-hgnet_fp16.safetensors", "diffusion_model").kind == "detector"


def test_int8_and_nvfp4_files_count_their_bytes() -> None:
    """comfy-kitchen's int8 (1 B per weight + a scale per row) and NVFP4 (half a byte + an fp8 scale per
    16): the catalog entries of the 0.33 host's classes (a fact per file), near half and a quarter of bf16."""
    bf16 = lookup("z_image_bf16.safetensors", "diffusion_model")
    int8 = lookup("z_image_int8_convrot.safetensors", "diffusion_model")
    assert int8.dtype == "int8" and 0.45 < int8.bytes / bf16.bytes < 0.55
    nvfp4 = lookup("qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors", "text_encoder")
    assert nvfp4.dtype == "nvfp4" and nvfp4.family == "qwen3vl_32b"
    header = {
        "blocks.0.a.weight": TensorSpec("U8", (64, 32)),
        "blocks.0.a.weight_scale": TensorSpec("F8_E4M3", (64, 4)),
    }
    header["blocks.0.a.weight_scale_2"] = TensorSpec("F32", ())
    assert describe_tensors(header, kind="diffusion_model").dtype == "nvfp4"


# --- the templates the issue names -------------------------------------------------------------------


def _template(name: str) -> Path:
    package = pytest.importorskip("comfyui_workflow_templates_json")
    return Path(package.__file__).parent / "templates" / f"{name}.json"


@pytest.mark.parametrize(
    ("template", "card_gb", "vae_family"),
    [("video_humo", 24, "wan21_vae"), ("video_wan2.1_alpha_t2v_14B", 16, "wan21_vae")]
    + [("video_capybara_v0_1_video_edit", 12, "hunyuan_video15_vae")]
    + [("video_kandinsky5_t2v", 12, "hunyuan_video_vae"), ("video_hunyuan_video_1.5_720p_t2v", 8, None)],
)
def test_the_named_templates_plan_as_their_family(
    template: str, card_gb: int, vae_family: str | None
) -> None:
    """HuMo is Wan 2.1 14B with audio layers (its activations are Wan's, ~4 GiB, not an unknown
    family's 25 GiB); Wan-Alpha's VAEs are Wan 2.1 VAEs (a causal decode, not a per-frame KL); Capybara
    is HunyuanVideo 1.5 (its measured activations, its VAE's formula, not an unknown family's 70 GiB);
    Kandinsky 5 Lite is its own family; a video VAE's minimum is the host's fallback tile (256 px)."""
    planned = plan_workflow(_template(template), Budget.from_card(card_gb * GiB, 32 * GiB))
    assert planned.plan is not None and planned.plan.feasible, planned.plan.bottleneck
    infos = planned.workload.components
    vaes = [c for c in infos if c.kind == "vae"]
    assert vaes and all(vae_family in (None, lookup(c.label.split(" [")[0], "vae").family) for c in vaes)
    models = {c.id for c in infos if c.kind == "diffusion_model"}
    samplers = [s for s in planned.workload.steps if models & set(s.uses)]
    assert samplers and max(s.activation for s in samplers) < 6 * GiB


# --- a checkpoint nobody split computes as the part each node uses -------------------------------------


def _checkpoint(family: str = "ltxv") -> ComponentInfo:
    blocks = tuple(Block(f"block.{i}", 1 << 30) for i in range(32))
    return ComponentInfo("checkpoint", "x.safetensors", family, "bf16", 40 << 30, blocks, "catalog")


def test_a_whole_checkpoint_takes_the_role_of_its_input() -> None:
    ckpt = _checkpoint()
    assert as_role(ckpt, "diffusion_model").kind == "diffusion_model"
    vae = as_role(ckpt, "vae")
    assert (vae.kind, vae.family) == ("vae", "ltxv_vae")
    assert as_role(ckpt, "text_encoder").kind == "text_encoder"
    assert as_role(ckpt, None).kind == "diffusion_model"
    split = ComponentInfo("vae", "y.safetensors", "wan21_vae", "bf16", 1, (), "catalog")
    assert as_role(split, "diffusion_model") is split  # a part keeps its own kind


LTX2 = "ltx-2-19b-distilled.safetensors"


def _checkpoint_prompt(n: int) -> dict:
    """An API prompt: LTX-2 from CheckpointLoaderSimple, a 768x512 latent of ``n`` frames."""
    ckpt = ["1", 0]
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": LTX2}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["1", 1]}},
        "3": {"class_type": "EmptyLTXVLatentVideo", "inputs": {"width": 768, "height": 512, "length": n}},
        "4": {
            "class_type": "KSampler",
            "inputs": {
                "model": ckpt, "positive": ["2", 0], "negative": ["2", 0], "latent_image": ["3", 0],
                "seed": 1, "steps": 8, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple",
            },
        },
        "5": {"class_type": "VAEDecode", "inputs": {"samples": ["4", 0], "vae": ["1", 2]}},
        "6": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "x"}},
    }  # fmt: skip


def test_checkpoint_loaded_ltx2_computes_and_grows_with_frames() -> None:
    """LTX-2 comes out of CheckpointLoaderSimple (one whole-file component): the sampler computes with it
    as a diffusion model, more frames cost more, and the prompt's encode is not priced as a sampler call."""
    computes = []
    for frames in (49, 121):
        planned = plan_workflow(_checkpoint_prompt(frames), None)
        steps = {s.node_id: s for s in planned.workload.steps}
        assert [c.kind for c in planned.workload.components] == ["checkpoint"]
        sampler, encode = steps["4"], steps["2"]
        assert sampler.evaluations == 8 and sampler.compute_s > 0 and sampler.activation > 0
        computes.append(sampler.compute_s)
        assert 0 < encode.compute_s < sampler.compute_s / sampler.evaluations
    assert computes[1] > 2 * computes[0]  # 16 latent frames against 7


def test_a_vae_decodes_in_the_hosts_fallback_tile_at_the_least() -> None:
    prompt = {
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": "hunyuan_video_vae_bf16.safetensors"}},
        "2": {"class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 960, "height": 720, "length": 65}},
        "3": {"class_type": "VAEDecode", "inputs": {"samples": ["2", 0], "vae": ["1", 0]}},
        "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "x"}},
    }  # fmt: skip
    (step,) = [s for s in plan_workflow(prompt, None).workload.steps if s.uses]
    assert step.activation_min is not None and 0 < step.activation_min <= step.activation / 3


def test_minimax_h3_plans_as_its_family() -> None:
    """The pruned (curve-form) H3 files: built from 0.33's class, the family their catalog entry
    states, activations measured on the host's class (activations.MEASURED), so H3 plans on 12 GB as
    ComfyUI runs it."""
    info = lookup("minimax_h3_fl2va_pruned_int8_convrot.safetensors", "diffusion_model")
    assert info.family == "minimax_h3" and "MiniMax H3" in info.note
    planned = plan_workflow(_template("video_minimax_h3_t2v"), Budget.from_card(12 * GiB, 64 * GiB))
    assert planned.plan is not None and planned.plan.feasible


def test_hidream_o1_is_built_and_streams() -> None:
    """HiDream-O1 (a CheckpointLoaderSimple file holding the model alone): the 0.33 class's size, its
    family from its keys, and blocks (its vision tower and language-model layers) so it can stream."""
    info = lookup("hidream_o1_image_bf16.safetensors", "checkpoint")
    assert (info.kind, info.family) == ("diffusion_model", "hidream_o1")
    assert info.bytes == pytest.approx(15.02 * GiB, rel=0.01) and len(info.blocks) > 30
    keys = {
        "t_embedder1.mlp.0.weight": (8, 8),
        "x_embedder.proj1.weight": (8, 8),
        "language_model.layers.0.a.weight": (8, 8),
    }
    assert describe_tensors(_specs(keys), kind="checkpoint")[0].family == "hidream_o1"


def test_boogu_and_wandancer_stream_all_their_layers() -> None:
    """Boogu's double/single-stream layers and WanDancer's music injectors are blocks (0.33's classes):
    built from the host's class, neither is one unstreamable lump that no 8 GB or 16 GB card could hold."""
    boogu = lookup("boogu_image_edit_fp8_scaled.safetensors", "diffusion_model")
    assert boogu.family == "omnigen2" and len(boogu.blocks) == 46  # 2+2+2 refiners, 8 double, 32 single
    assert max(b.bytes for b in boogu.blocks) < 0.05 * boogu.bytes
    dancer = lookup("wan2.2_dancer_14b_global_fp8_scaled.safetensors", "diffusion_model")
    assert len(dancer.blocks) == 48 and dancer.bytes - sum(b.bytes for b in dancer.blocks) < 0.3 * GiB
    keys = {
        "head.modulation": (1, 6, 64), "head.head.weight": (64, 64),
        "patch_embedding.weight": (64, 36, 1, 2, 2), "blocks.0.self_attn.q.weight": (64, 64),
        "blocks.0.ffn.0.weight": (128, 64),
        "music_injector.injector.0.q.weight": (64, 64),
    }  # fmt: skip
    info = describe_tensors(_specs(keys), kind="diffusion_model")
    assert [b.name for b in info.blocks] == ["blocks.0", "music_injector.injector.0"]
