"""Build memory/data/model_catalog.json: bytes, dtype and blocks of the model files ComfyUI templates use.

Nothing is downloaded and no weights exist anywhere: every architecture is instantiated on the ``meta``
device with the host ComfyUI's own classes (comfy.ldm.*, comfy.text_encoders.*, comfy.clip_model) and
the configs comfy/model_detection.py derives for the released checkpoints. The state dict's shapes,
with the file's dtype recipe applied, are then fed to ``memory.components.describe_tensors`` - the
same analysis that describes a real file from its header - so the catalog and the header path agree
on families and block names.

Dtype recipes: a file is "all one dtype" (fp32/fp16/bf16), or "fp8": the weights of Linear layers in
float8_e4m3fn and everything else (embeddings, norms, biases, convs) in the base dtype, which is what
ComfyUI's fp8 files hold; "scaled" adds ComfyUI's per-layer ``scale_weight`` and the ``scaled_fp8``
marker. Every component records its ``source`` ("parameters x dtype (host class ...)").

The templates' files no host class here can build (newer architectures, LoRAs of unknown rank) are then
solved from the templates' published sizes by scripts/solve_template_sizes.py (source "template sizes
(linear system, ...)"; the solve's equations are kept under ``template_solve``). Sizes are checked
against the published sizes by scripts/check_model_catalog.py (and tests/unit/test_catalog.py).

Usage (needs a ComfyUI checkout; v0.3.64 produced the committed JSON):
    COMFYUI_ROOT=/path/to/ComfyUI python scripts/build_model_catalog.py [--out memory/data/model_catalog.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # solve_template_sizes, check_model_catalog
DEFAULT_OUT = ROOT / "memory" / "data" / "model_catalog.json"


def _host() -> Path:
    root = Path(os.environ.get("COMFYUI_ROOT", "/work/comfyui")).resolve()
    if not (root / "comfy" / "model_detection.py").is_file():
        sys.exit(f"COMFYUI_ROOT={root} is not a ComfyUI checkout (set COMFYUI_ROOT)")
    sys.path.insert(0, str(root))
    import comfy.cli_args

    comfy.cli_args.args.cpu = True  # model_management must not look for a GPU at import
    return root


# --- architectures (ComfyUI's classes on the meta device) -------------------------------------------


def diffusion(unet_config: dict) -> torch.nn.Module:
    """Build a diffusion model the way ComfyUI does after detecting ``unet_config`` from a file."""
    import comfy.model_detection

    model_config = comfy.model_detection.model_config_from_unet_config(dict(unet_config))
    if model_config is None:
        raise ValueError(f"the host matches no model to {unet_config}")
    return model_config.get_model({}, device="meta").diffusion_model


FLUX = {
    "image_model": "flux",
    "in_channels": 16,
    "patch_size": 2,
    "out_channels": 16,
    "vec_in_dim": 768,
    "context_in_dim": 4096,
    "hidden_size": 3072,
    "mlp_ratio": 4.0,
    "num_heads": 24,
    "depth": 19,
    "depth_single_blocks": 38,
    "axes_dim": [16, 56, 56],
    "theta": 10000,
    "qkv_bias": True,
    "guidance_embed": True,
}
CHROMA = {
    **{k: v for k, v in FLUX.items() if k not in ("guidance_embed", "vec_in_dim")},
    "image_model": "chroma",
    "in_channels": 64,
    "out_channels": 64,
    "in_dim": 64,
    "out_dim": 3072,
    "hidden_dim": 5120,
    "n_layers": 5,
}


def wan(
    dim: int, ffn: int, layers: int, in_dim: int = 16, out_dim: int = 16, model_type: str = "t2v", **extra
) -> dict:
    return {
        "image_model": "wan2.1",
        "dim": dim,
        "out_dim": out_dim,
        "num_heads": dim // 128,
        "ffn_dim": ffn,
        "num_layers": layers,
        "patch_size": (1, 2, 2),
        "freq_dim": 256,
        "window_size": (-1, -1),
        "qk_norm": True,
        "cross_attn_norm": True,
        "eps": 1e-6,
        "in_dim": in_dim,
        "model_type": model_type,
        **extra,
    }


WAN_1_3B, WAN_14B, WAN_5B = (1536, 8960, 30), (5120, 13824, 40), (3072, 14336, 30)
HUNYUAN_VIDEO = {
    "image_model": "hunyuan_video",
    "in_channels": 16,
    "patch_size": [1, 2, 2],
    "out_channels": 16,
    "vec_in_dim": 768,
    "axes_dim": [16, 56, 56],
    "meanflow": False,
    "context_in_dim": 4096,
    "hidden_size": 3072,
    "mlp_ratio": 4.0,
    "num_heads": 24,
    "depth": 20,
    "depth_single_blocks": 40,
    "theta": 256,
    "qkv_bias": True,
    "byt5": False,
    "guidance_embed": True,
}
SD35_LARGE = {
    "in_channels": 16,
    "patch_size": 2,
    "out_channels": 16,
    "depth": 38,
    "input_size": None,
    "adm_in_channels": 2048,
    "context_embedder_config": {
        "target": "torch.nn.Linear",
        "params": {"in_features": 4096, "out_features": 2432},
    },
    "num_patches": 36864,
    "pos_embed_max_size": 192,
    "qk_norm": "rms",
    "pos_embed_scaling_factor": None,
    "x_block_self_attn_layers": [],
}
HIDREAM = {
    "image_model": "hidream",
    "attention_head_dim": 128,
    "axes_dims_rope": [64, 32, 32],
    "caption_channels": [4096, 4096],
    "max_resolution": [128, 128],
    "in_channels": 16,
    "llama_layers": list(range(32)) + [31] * 16,
    "num_attention_heads": 20,
    "num_routed_experts": 4,
    "num_activated_experts": 2,
    "num_layers": 16,
    "num_single_layers": 32,
    "out_channels": 16,
    "patch_size": 2,
    "text_emb_dim": 2048,
}
LTXV_2B = {"image_model": "ltxv", "num_layers": 28, "attention_head_dim": 64, "cross_attention_dim": 2048}
LUMINA2 = {
    "image_model": "lumina2",
    "patch_size": 2,
    "in_channels": 16,
    "dim": 2304,
    "cap_feat_dim": 2304,
    "n_layers": 26,
    "n_heads": 24,
    "n_kv_heads": 8,
    "qk_norm": True,
    "axes_dims": [32, 32, 32],
    "axes_lens": [300, 512, 512],
}
OMNIGEN2 = {
    "image_model": "omnigen2",
    "axes_dim_rope": [40, 40, 40],
    "axes_lens": [1024, 1664, 1664],
    "ffn_dim_multiplier": None,
    "hidden_size": 2520,
    "in_channels": 16,
    "multiple_of": 256,
    "norm_eps": 1e-05,
    "num_attention_heads": 21,
    "num_kv_heads": 7,
    "num_layers": 32,
    "num_refiner_layers": 2,
    "out_channels": None,
    "patch_size": 2,
    "text_feat_dim": 2048,
    "timestep_scale": 1000.0,
}
_UNET_BASE = {
    "use_checkpoint": False,
    "image_size": 32,
    "out_channels": 4,
    "use_spatial_transformer": True,
    "legacy": False,
}
SD15 = {
    **_UNET_BASE,
    "adm_in_channels": None,
    "in_channels": 4,
    "model_channels": 320,
    "num_res_blocks": [2, 2, 2, 2],
    "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0],
    "channel_mult": [1, 2, 4, 4],
    "transformer_depth_middle": 1,
    "use_linear_in_transformer": False,
    "context_dim": 768,
    "num_heads": 8,
    "transformer_depth_output": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
    "use_temporal_attention": False,
    "use_temporal_resblock": False,
}
SDXL = {
    **_UNET_BASE,
    "num_classes": "sequential",
    "adm_in_channels": 2816,
    "in_channels": 4,
    "model_channels": 320,
    "num_res_blocks": [2, 2, 2],
    "transformer_depth": [0, 0, 2, 2, 10, 10],
    "channel_mult": [1, 2, 4],
    "transformer_depth_middle": 10,
    "use_linear_in_transformer": True,
    "context_dim": 2048,
    "num_head_channels": 64,
    "transformer_depth_output": [0, 0, 0, 2, 2, 2, 10, 10, 10],
    "use_temporal_attention": False,
    "use_temporal_resblock": False,
}
SDXL_REFINER = {
    **_UNET_BASE,
    "num_classes": "sequential",
    "adm_in_channels": 2560,
    "in_channels": 4,
    "model_channels": 384,
    "num_res_blocks": [2, 2, 2, 2],
    "transformer_depth": [0, 0, 4, 4, 4, 4, 0, 0],
    "channel_mult": [1, 2, 4, 4],
    "transformer_depth_middle": 4,
    "use_linear_in_transformer": True,
    "context_dim": 1280,
    "num_head_channels": 64,
    "transformer_depth_output": [0, 0, 0, 4, 4, 4, 4, 4, 4, 0, 0, 0],
    "use_temporal_attention": False,
    "use_temporal_resblock": False,
}


def _config(host: Path, name: str) -> dict:
    for folder in ("comfy", "comfy/text_encoders"):
        path = host / folder / name
        if path.is_file():
            return json.loads(path.read_text())
    raise FileNotFoundError(name)


def _ops():
    import comfy.ops

    return comfy.ops.manual_cast


def t5(config_name: str) -> Callable[[Path], torch.nn.Module]:
    def build(host: Path) -> torch.nn.Module:
        from comfy.text_encoders.t5 import T5

        return T5(_config(host, config_name), torch.float16, "meta", _ops())

    return build


def clip_text(config_name: str, **override) -> Callable[[Path], torch.nn.Module]:
    def build(host: Path) -> torch.nn.Module:
        from comfy.clip_model import CLIPTextModel

        return CLIPTextModel({**_config(host, config_name), **override}, torch.float16, "meta", _ops())

    return build


def clip_vision(config_name: str) -> Callable[[Path], torch.nn.Module]:
    def build(host: Path) -> torch.nn.Module:
        from comfy.clip_model import CLIPVisionModelProjection

        return CLIPVisionModelProjection(_config(host, config_name), torch.float16, "meta", _ops())

    return build


def llm(class_name: str, **config) -> Callable[[Path], torch.nn.Module]:
    def build(host: Path) -> torch.nn.Module:
        import comfy.text_encoders.llama as llama

        return getattr(llama, class_name)(config, dtype=torch.float16, device="meta", operations=_ops())

    return build


def vae(name: str) -> Callable[[Path], torch.nn.Module]:
    """The first_stage_model comfy/sd.py VAE.__init__ builds for each VAE layout."""

    def build(host: Path) -> torch.nn.Module:
        from comfy.ldm.models.autoencoder import AutoencoderKL, AutoencodingEngine

        sd_cfg = {
            "double_z": True,
            "z_channels": 4,
            "resolution": 256,
            "in_channels": 3,
            "out_ch": 3,
            "ch": 128,
            "ch_mult": [1, 2, 4, 4],
            "num_res_blocks": 2,
            "attn_resolutions": [],
            "dropout": 0.0,
        }
        with torch.device("meta"):
            if name == "sd":
                return AutoencoderKL(ddconfig=sd_cfg, embed_dim=4)
            if name == "flux":
                cfg = {**sd_cfg, "z_channels": 16}
                reg = {"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"}
                enc = {"target": "comfy.ldm.modules.diffusionmodules.model.Encoder", "params": cfg}
                dec = {"target": "comfy.ldm.modules.diffusionmodules.model.Decoder", "params": cfg}
                return AutoencodingEngine(regularizer_config=reg, encoder_config=enc, decoder_config=dec)
            if name == "hunyuan_video":
                cfg = {**sd_cfg, "z_channels": 16, "conv3d": True, "time_compress": 4}
                return AutoencoderKL(ddconfig=cfg, embed_dim=16)
            if name in ("wan21", "wan22"):
                import comfy.ldm.wan.vae
                import comfy.ldm.wan.vae2_2

                common = {"dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [], "dropout": 0.0}
                common["temperal_downsample"] = [False, True, True]
                if name == "wan21":
                    return comfy.ldm.wan.vae.WanVAE(dim=96, z_dim=16, **common)
                return comfy.ldm.wan.vae2_2.WanVAE(dim=160, z_dim=48, **common)
            if name.startswith("ltxv"):
                from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

                return VideoVAE(version=int(name[-1]))
        raise ValueError(name)

    return build


def esrgan(host: Path) -> torch.nn.Module:
    import importlib

    # spandrel is what ComfyUI's upscale loader uses; its RRDB module sits in a private package
    rrdb = importlib.import_module("spandrel.architectures.ESRGAN.__arch.RRDB")
    with torch.device("meta"):
        return rrdb.RRDBNet(in_nc=3, out_nc=3, num_filters=64, num_blocks=23, scale=4)


def dit(config: dict) -> Callable[[Path], torch.nn.Module]:
    return lambda host: diffusion(config)


def qwen25_vl_3b(host: Path) -> torch.nn.Module:
    """Qwen2.5-VL-3B as released (OmniGen2's encoder): the host's 3B LM plus its Qwen2-VL vision tower."""
    from comfy.text_encoders import qwen_vl

    module = llm("Qwen25_3B")(host)
    module.visual = qwen_vl.Qwen2VLVisionTransformer(
        hidden_size=1280, output_hidden_size=2048, device="meta", dtype=torch.float16, ops=_ops()
    )
    return module


ARCHS: dict[str, Callable[[Path], torch.nn.Module]] = {
    "flux_dev": dit(FLUX),
    "flux_schnell": dit({**FLUX, "guidance_embed": False}),
    "flux_fill": dit({**FLUX, "in_channels": 96}),
    "flux_canny": dit({**FLUX, "in_channels": 32}),
    "chroma": dit(CHROMA),
    "wan21_t2v_1.3b": dit(wan(*WAN_1_3B)),
    "wan21_t2v_14b": dit(wan(*WAN_14B)),
    "wan21_i2v_14b": dit(wan(*WAN_14B, in_dim=36, model_type="i2v")),
    "wan21_flf2v_14b": dit(wan(*WAN_14B, in_dim=36, model_type="i2v", flf_pos_embed_token_number=514)),
    "wan21_vace_14b": dit(wan(*WAN_14B, model_type="vace", vace_layers=8, vace_in_dim=96)),
    "wan21_vace_1.3b": dit(wan(*WAN_1_3B, model_type="vace", vace_layers=15, vace_in_dim=96)),
    "wan21_fun_control_1.3b": dit(wan(*WAN_1_3B, in_dim=48, model_type="i2v")),
    "wan21_fun_inp_1.3b": dit(wan(*WAN_1_3B, in_dim=36, model_type="i2v")),
    "wan22_i2v_14b": dit(wan(*WAN_14B, in_dim=36)),
    "wan22_ti2v_5b": dit(wan(*WAN_5B, in_dim=48, out_dim=48)),
    # Fun 5B: noise + condition latents + mask; in_dim only sizes the patch embedding (<0.1% of the bytes)
    "wan22_fun_5b": dit(wan(*WAN_5B, in_dim=100, out_dim=48)),
    "wan21_camera_14b": dit(wan(*WAN_14B, in_dim=32, model_type="camera")),
    "wan21_camera_1.3b": dit(wan(*WAN_1_3B, in_dim=32, model_type="camera")),
    "qwen_image": dit({"image_model": "qwen_image", "in_channels": 64, "num_layers": 60}),
    "hunyuan_video_t2v": dit(HUNYUAN_VIDEO),
    "hunyuan_video_i2v": dit({**HUNYUAN_VIDEO, "in_channels": 33}),
    "sd35_large": dit(SD35_LARGE),
    "hidream_i1": dit(HIDREAM),
    "ltxv_2b": dit(LTXV_2B),
    "lumina2": dit(LUMINA2),
    "omnigen2": dit(OMNIGEN2),
    "sd15_unet": dit(SD15),
    "sdxl_unet": dit(SDXL),
    "sdxl_refiner_unet": dit(SDXL_REFINER),
    "t5xxl": t5("t5_config_xxl.json"),
    "umt5xxl": t5("umt5_config_xxl.json"),
    "t5_base": t5("t5_config_base.json"),
    "byt5_small_glyph": t5("byt5_config_small_glyph.json"),
    "clip_l": clip_text("sd1_clip_config.json"),
    "clip_l_long": clip_text("sd1_clip_config.json", max_position_embeddings=248),
    "clip_g": clip_text("clip_config_bigg.json"),
    "clip_g_long": clip_text("clip_config_bigg.json", max_position_embeddings=218),
    "qwen25_vl_7b": llm("Qwen25_7BVLI"),
    "qwen25_vl_3b": qwen25_vl_3b,
    "llama3_8b": llm("Llama2", vocab_size=128256),
    "llava_llama3_8b": llm("Llama2"),
    "gemma2_2b": llm("Gemma2_2B"),
    "vae_sd": vae("sd"),
    "vae_flux": vae("flux"),
    "vae_hunyuan_video": vae("hunyuan_video"),
    "vae_wan21": vae("wan21"),
    "vae_wan22": vae("wan22"),
    "vae_ltxv0": vae("ltxv0"),
    "vae_ltxv2": vae("ltxv2"),
    "clip_vision_h": clip_vision("clip_vision_config_h.json"),
    "clip_vision_g": clip_vision("clip_vision_config_g.json"),
    "clip_vision_l": clip_vision("clip_vision_config_vitl.json"),
    "siglip_384": clip_vision("clip_vision_siglip_384.json"),
    "esrgan_x4": esrgan,
}


# --- dtype recipes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    base: str  # safetensors dtype code of everything not quantised
    fp8: bool = False  # Linear weights in F8_E4M3
    scaled: bool = False  # ComfyUI scaled fp8: + scale_weight per Linear, + scaled_fp8 marker


FP32, FP16, BF16 = Recipe("F32"), Recipe("F16"), Recipe("BF16")
FP8, FP8_SCALED = Recipe("BF16", fp8=True), Recipe("BF16", fp8=True, scaled=True)
FP8_FP16_SCALED = Recipe("F16", fp8=True, scaled=True)


# Tensors the released files hold beyond ComfyUI's module, which ComfyUI ignores when it loads them
# (still bytes on disk and in the header): the untied lm_head of LLMs whose configs say
# tie_word_embeddings=false (left in the base dtype by ComfyUI's fp8 conversion), and T5's
# encoder.embed_tokens, a saved copy of `shared` in the standalone flux_text_encoders releases.
EXTRAS: dict[str, dict[str, tuple[int, ...]]] = {
    "t5xxl+embed_tokens": {"encoder.embed_tokens.weight": (32128, 4096)},
    "llama3_8b+lm_head": {"lm_head.weight": (128256, 4096)},
    "llava_llama3_8b+lm_head": {"lm_head.weight": (128320, 4096)},
    "qwen25_vl_7b+lm_head": {"lm_head.weight": (152064, 3584)},
}


@functools.cache
def shapes(arch: str, host: Path) -> tuple[dict[str, tuple[tuple[int, ...], bool]], str]:
    """key -> (shape, is a Linear weight) for an architecture, and the module class for the record."""
    base, _, extra = arch.partition("+")
    module = ARCHS[base](host)
    linear = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
    out = {k: (tuple(v.shape), k in linear) for k, v in module.state_dict().items() if v.is_floating_point()}
    out |= {k: (shape, False) for k, shape in EXTRAS.get(arch, {}).items()}
    return out, type(module).__module__ + "." + type(module).__qualname__ + (f" + {extra}" if extra else "")


def tensor_specs(arch: str, recipe: Recipe, prefix: str, host: Path):
    from comfyui_headroom.memory.models.components import TensorSpec

    specs: dict[str, TensorSpec] = {}
    table, _ = shapes(arch, host)
    for key, (shape, is_linear) in table.items():
        quantised = recipe.fp8 and is_linear and len(shape) == 2
        specs[prefix + key] = TensorSpec("F8_E4M3" if quantised else recipe.base, shape)
        if quantised and recipe.scaled:
            specs[prefix + key[: -len("weight")] + "scale_weight"] = TensorSpec("F32", ())
    if recipe.scaled:
        specs[prefix + "scaled_fp8"] = TensorSpec("F8_E4M3", (0,))
    return specs


def lora_specs(arch: str, rank: int, recipe: Recipe, host: Path, block_list: str = "blocks."):
    """A LoRA of ``rank`` on every Linear inside the base model's blocks (down, up, alpha per layer)."""
    from comfyui_headroom.memory.models.components import TensorSpec

    specs: dict[str, TensorSpec] = {}
    table, _ = shapes(arch, host)
    for key, (shape, is_linear) in table.items():
        if is_linear and key.startswith(block_list) and len(shape) == 2:
            base = "diffusion_model." + key[: -len(".weight")]
            specs[base + ".lora_down.weight"] = TensorSpec(recipe.base, (rank, shape[1]))
            specs[base + ".lora_up.weight"] = TensorSpec(recipe.base, (shape[0], rank))
            specs[base + ".alpha"] = TensorSpec("F32", ())
    return specs


# --- the files -------------------------------------------------------------------------------------
# (file name, ComfyUI models/ folder, [(key prefix inside the file, architecture, recipe)]). A checkpoint
# lists its sections under the prefixes ComfyUI's CheckpointSave writes (supported_models*.py).

Part = tuple[str, str, Recipe]
DM, TE, CK = "diffusion_models", "text_encoders", "checkpoints"


def single(arch: str, recipe: Recipe) -> list[Part]:
    return [("", arch, recipe)]


def flux_checkpoint(arch: str) -> list[Part]:
    return [
        ("model.diffusion_model.", arch, FP8),
        ("text_encoders.clip_l.transformer.", "clip_l", FP16),
        ("text_encoders.t5xxl.transformer.", "t5xxl", FP8),
        ("vae.", "vae_flux", BF16),
    ]


def sdxl_checkpoint(recipe: Recipe, vae_recipe: Recipe) -> list[Part]:
    return [
        ("model.diffusion_model.", "sdxl_unet", recipe),
        ("conditioner.embedders.0.transformer.", "clip_l", recipe),
        ("conditioner.embedders.1.model.", "clip_g", recipe),
        ("first_stage_model.", "vae_sd", vae_recipe),
    ]


def sd15_checkpoint(recipe: Recipe) -> list[Part]:
    return [
        ("model.diffusion_model.", "sd15_unet", recipe),
        ("cond_stage_model.transformer.", "clip_l", recipe),
        ("first_stage_model.", "vae_sd", recipe),
    ]


FILES: list[tuple[str, str, list[Part]]] = [
    # Flux family (Black Forest Labs releases and Comfy-Org repackages)
    ("flux1-dev.safetensors", DM, single("flux_dev", BF16)),
    ("flux1-dev-fp8.safetensors", DM, single("flux_dev", Recipe("BF16", fp8=True))),
    ("flux1-dev-fp8.safetensors", CK, flux_checkpoint("flux_dev")),
    ("flux1-schnell.safetensors", DM, single("flux_schnell", BF16)),
    ("flux1-schnell-fp8.safetensors", DM, single("flux_schnell", FP8)),
    ("flux1-schnell-fp8.safetensors", CK, flux_checkpoint("flux_schnell")),
    ("flux1-kontext-dev.safetensors", DM, single("flux_dev", BF16)),
    ("flux1-dev-kontext_fp8_scaled.safetensors", DM, single("flux_dev", FP8_SCALED)),
    ("flux1-krea-dev.safetensors", DM, single("flux_dev", BF16)),
    ("flux1-krea-dev_fp8_scaled.safetensors", DM, single("flux_dev", FP8_SCALED)),
    ("flux1-fill-dev.safetensors", DM, single("flux_fill", BF16)),
    ("flux1-canny-dev.safetensors", DM, single("flux_canny", BF16)),
    ("flux1-depth-dev.safetensors", DM, single("flux_canny", BF16)),
    ("Chroma1-HD.safetensors", DM, single("chroma", BF16)),
    ("Chroma1-Base.safetensors", DM, single("chroma", BF16)),
    # Wan 2.1 / 2.2 (Comfy-Org/Wan_2.1_ComfyUI_repackaged, Wan_2.2_ComfyUI_Repackaged)
    ("wan2.1_t2v_1.3B_fp16.safetensors", DM, single("wan21_t2v_1.3b", FP16)),
    ("wan2.1_t2v_1.3B_bf16.safetensors", DM, single("wan21_t2v_1.3b", BF16)),
    ("wan2.1_t2v_14B_fp16.safetensors", DM, single("wan21_t2v_14b", FP16)),
    ("wan2.1_t2v_14B_bf16.safetensors", DM, single("wan21_t2v_14b", BF16)),
    ("wan2.1_t2v_14B_fp8_e4m3fn.safetensors", DM, single("wan21_t2v_14b", FP8)),
    ("wan2.1_t2v_14B_fp8_scaled.safetensors", DM, single("wan21_t2v_14b", FP8_SCALED)),
    *[
        (f"wan2.1_i2v_{res}_14B_{dt}.safetensors", DM, single("wan21_i2v_14b", recipe))
        for res in ("480p", "720p")
        for dt, recipe in (("fp16", FP16), ("bf16", BF16), ("fp8_e4m3fn", FP8), ("fp8_scaled", FP8_SCALED))
    ],
    ("wan2.1_flf2v_720p_14B_fp16.safetensors", DM, single("wan21_flf2v_14b", FP16)),
    # ChronoEdit-14B: a fine-tune of Wan2.1-I2V-14B-720P, same layers (nvidia/ChronoEdit-14B-Diffusers)
    ("chrono_edit_14B_fp16.safetensors", DM, single("wan21_i2v_14b", FP16)),
    ("wan2.1_flf2v_720p_14B_fp8_e4m3fn.safetensors", DM, single("wan21_flf2v_14b", FP8)),
    ("wan2.1_vace_14B_fp16.safetensors", DM, single("wan21_vace_14b", FP16)),
    ("wan2.1_vace_1.3B_fp16.safetensors", DM, single("wan21_vace_1.3b", FP16)),
    ("wan2.1_fun_control_1.3B_bf16.safetensors", DM, single("wan21_fun_control_1.3b", BF16)),
    ("wan2.1_fun_inp_1.3B_bf16.safetensors", DM, single("wan21_fun_inp_1.3b", BF16)),
    ("wan2.2_ti2v_5B_fp16.safetensors", DM, single("wan22_ti2v_5b", FP16)),
    ("wan2.2_fun_control_5B_bf16.safetensors", DM, single("wan22_fun_5b", BF16)),
    ("wan2.2_fun_inpaint_5B_bf16.safetensors", DM, single("wan22_fun_5b", BF16)),
    ("wan2.1_fun_camera_v1.1_14B_bf16.safetensors", DM, single("wan21_camera_14b", BF16)),
    ("wan2.1_fun_camera_v1.1_1.3B_bf16.safetensors", DM, single("wan21_camera_1.3b", BF16)),
    *[
        (f"wan2.2_{task}_{noise}_noise_14B_{dt}.safetensors", DM, single(arch, recipe))
        for task, arch in (("t2v", "wan21_t2v_14b"), ("i2v", "wan22_i2v_14b"))
        for noise in ("high", "low")
        for dt, recipe in (("fp16", FP16), ("fp8_scaled", FP8_SCALED))
    ],
    *[
        (
            f"wan2.2_fun_inpaint_{noise}_noise_14B_fp8_scaled.safetensors",
            DM,
            single("wan22_i2v_14b", FP8_SCALED),
        )
        for noise in ("high", "low")
    ],
    # Qwen-Image (Comfy-Org/Qwen-Image_ComfyUI): the edit releases share the 20B architecture
    *[
        (f"{name}_{dt}.safetensors", DM, single("qwen_image", recipe))
        for name in (
            "qwen_image",
            "qwen_image_edit",
            "qwen_image_edit_2509",
            "qwen_image_2512",
            "qwen_image_edit_2511",
        )
        for dt, recipe in (("fp8_e4m3fn", FP8), ("bf16", BF16))
    ],
    # HunyuanVideo, HiDream, LTXV, Lumina 2, OmniGen2, SD3.5, SDXL, SD1.5
    ("hunyuan_video_t2v_720p_bf16.safetensors", DM, single("hunyuan_video_t2v", BF16)),
    ("hunyuan_video_image_to_video_720p_bf16.safetensors", DM, single("hunyuan_video_i2v", BF16)),
    ("hidream_i1_full_fp16.safetensors", DM, single("hidream_i1", FP16)),
    ("hidream_i1_full_fp8.safetensors", DM, single("hidream_i1", FP8)),
    ("hidream_i1_dev_fp8.safetensors", DM, single("hidream_i1", FP8)),
    ("hidream_i1_fast_fp8.safetensors", DM, single("hidream_i1", FP8)),
    ("hidream_i1_dev_bf16.safetensors", DM, single("hidream_i1", BF16)),
    ("hidream_i1_fast_bf16.safetensors", DM, single("hidream_i1", BF16)),
    ("hidream_e1_full_bf16.safetensors", DM, single("hidream_i1", BF16)),
    ("hidream_e1_1_bf16.safetensors", DM, single("hidream_i1", BF16)),
    (
        "ltx-video-2b-v0.9.safetensors",
        CK,
        [("model.diffusion_model.", "ltxv_2b", FP32), ("vae.", "vae_ltxv0", FP32)],  # released in fp32
    ),
    (
        "ltx-video-2b-v0.9.5.safetensors",
        CK,
        [("model.diffusion_model.", "ltxv_2b", BF16), ("vae.", "vae_ltxv2", BF16)],
    ),
    ("lumina_2_model_bf16.safetensors", DM, single("lumina2", BF16)),
    (
        "lumina_2.safetensors",
        CK,
        [
            ("model.diffusion_model.", "lumina2", BF16),
            ("text_encoders.gemma2_2b.transformer.", "gemma2_2b", BF16),
            ("vae.", "vae_flux", BF16),
        ],
    ),
    (
        "NetaYumev35_pretrained_all_in_one.safetensors",
        CK,
        [
            ("model.diffusion_model.", "lumina2", BF16),
            ("text_encoders.gemma2_2b.transformer.", "gemma2_2b", BF16),
            ("vae.", "vae_flux", BF16),
        ],
    ),
    ("omnigen2_fp16.safetensors", DM, single("omnigen2", FP16)),
    ("sd3.5_large.safetensors", CK, [("model.diffusion_model.", "sd35_large", BF16)]),
    (
        "sd3.5_large_fp8_scaled.safetensors",
        CK,
        [
            ("model.diffusion_model.", "sd35_large", FP8_FP16_SCALED),
            ("text_encoders.clip_l.transformer.", "clip_l", FP16),
            ("text_encoders.clip_g.transformer.", "clip_g", FP16),
            ("text_encoders.t5xxl.transformer.", "t5xxl", FP8_FP16_SCALED),
            ("first_stage_model.", "vae_flux", FP16),
        ],
    ),
    ("sd_xl_base_1.0.safetensors", CK, sdxl_checkpoint(FP16, FP16)),
    ("sd_xl_turbo_1.0_fp16.safetensors", CK, sdxl_checkpoint(FP16, FP16)),
    (
        "sd_xl_refiner_1.0.safetensors",
        CK,
        [
            ("model.diffusion_model.", "sdxl_refiner_unet", FP16),
            ("conditioner.embedders.0.model.", "clip_g", FP16),
            ("first_stage_model.", "vae_sd", FP16),
        ],
    ),
    ("v1-5-pruned-emaonly.safetensors", CK, sd15_checkpoint(FP32)),
    ("v1-5-pruned-emaonly-fp16.safetensors", CK, sd15_checkpoint(FP16)),
    # text encoders (comfyanonymous/flux_text_encoders, Comfy-Org repackages)
    ("clip_l.safetensors", TE, single("clip_l", FP16)),
    ("clip_g.safetensors", TE, single("clip_g", FP16)),
    ("clip_l_hidream.safetensors", TE, single("clip_l_long", FP16)),
    ("clip_g_hidream.safetensors", TE, single("clip_g_long", FP16)),
    ("t5xxl_fp16.safetensors", TE, single("t5xxl+embed_tokens", FP16)),
    ("t5xxl_fp8_e4m3fn.safetensors", TE, single("t5xxl+embed_tokens", Recipe("F16", fp8=True))),
    ("t5xxl_fp8_e4m3fn_scaled.safetensors", TE, single("t5xxl+embed_tokens", FP8_FP16_SCALED)),
    ("umt5_xxl_fp16.safetensors", TE, single("umt5xxl", FP16)),
    ("umt5_xxl_fp8_e4m3fn_scaled.safetensors", TE, single("umt5xxl", FP8_FP16_SCALED)),
    ("t5-base.safetensors", TE, single("t5_base", FP16)),
    ("byt5_small_glyphxl_fp16.safetensors", TE, single("byt5_small_glyph", FP16)),
    ("qwen_2.5_vl_7b.safetensors", TE, single("qwen25_vl_7b+lm_head", BF16)),
    ("qwen_2.5_vl_7b_fp8_scaled.safetensors", TE, single("qwen25_vl_7b+lm_head", FP8_SCALED)),
    ("qwen_2.5_vl_fp16.safetensors", TE, single("qwen25_vl_3b", FP16)),
    ("llava_llama3_fp16.safetensors", TE, single("llava_llama3_8b+lm_head", FP16)),
    ("llava_llama3_fp8_scaled.safetensors", TE, single("llava_llama3_8b+lm_head", FP8_FP16_SCALED)),
    ("llama_3.1_8b_instruct_fp8_scaled.safetensors", TE, single("llama3_8b+lm_head", FP8_SCALED)),
    ("gemma_2_2b_fp16.safetensors", TE, single("gemma2_2b", FP16)),
    # VAEs
    ("ae.safetensors", "vae", single("vae_flux", FP32)),
    ("wan_2.1_vae.safetensors", "vae", single("vae_wan21", BF16)),
    ("Wan2_1_VAE_bf16.safetensors", "vae", single("vae_wan21", BF16)),
    ("wan2.2_vae.safetensors", "vae", single("vae_wan22", FP16)),
    ("qwen_image_vae.safetensors", "vae", single("vae_wan21", BF16)),
    ("hunyuan_video_vae_bf16.safetensors", "vae", single("vae_hunyuan_video", BF16)),
    ("vae-ft-mse-840000-ema-pruned.safetensors", "vae", single("vae_sd", FP32)),
    ("sdxl_vae.safetensors", "vae", single("vae_sd", FP32)),
    # vision encoders, upscalers
    ("clip_vision_h.safetensors", "clip_vision", single("clip_vision_h", FP16)),
    ("clip_vision_g.safetensors", "clip_vision", single("clip_vision_g", FP16)),
    ("clip_vision_l.safetensors", "clip_vision", single("clip_vision_l", FP16)),
    ("sigclip_vision_patch14_384.safetensors", "clip_vision", single("siglip_384", FP16)),
    ("RealESRGAN_x4plus.safetensors", "upscale_models", single("esrgan_x4", FP32)),
    ("RealESRGAN_x4plus.pth", "upscale_models", single("esrgan_x4", FP32)),
    ("4x-UltraSharp.pth", "upscale_models", single("esrgan_x4", FP32)),
]

# LoRAs whose rank is in their name: (file, base architecture, rank, recipe)
LORAS: list[tuple[str, str, int, Recipe]] = [
    ("lightx2v_I2V_14B_480p_cfg_step_distill_rank64_bf16.safetensors", "wan21_i2v_14b", 64, BF16),
    ("lightx2v_T2V_14B_cfg_step_distill_v2_lora_rank64_bf16.safetensors", "wan21_t2v_14b", 64, BF16),
    ("Wan21_CausVid_14B_T2V_lora_rank32.safetensors", "wan21_t2v_14b", 32, BF16),
    ("Wan21_CausVid_bidirect2_T2V_1_3B_lora_rank32.safetensors", "wan21_t2v_1.3b", 32, BF16),
]


# --- output ----------------------------------------------------------------------------------------


def encode_blocks(blocks) -> list[list]:
    """Runs of consecutive same-size blocks of one list: [list name, first index, count, bytes each]."""
    runs: list[list] = []
    for block in blocks:
        head, _, idx = block.name.rpartition(".")
        if not idx.isdigit():
            runs.append([block.name, None, 1, block.bytes])
            continue
        last = runs[-1] if runs else None
        if (
            last
            and last[0] == head
            and last[1] is not None
            and last[1] + last[2] == int(idx)
            and last[3] == block.bytes
        ):
            last[2] += 1
        else:
            runs.append([head, int(idx), 1, block.bytes])
    return runs


def component_record(info, arch: str, recipe: Recipe, module: str) -> dict:
    return {
        "kind": info.kind,
        "family": info.family,
        "dtype": info.dtype,
        "bytes": info.bytes,
        "blocks": encode_blocks(info.blocks),
        "note": info.note,
        "arch": f"{arch} ({module})",
        "recipe": recipe.base
        + (" + fp8 Linear" if recipe.fp8 else "")
        + (" scaled" if recipe.scaled else ""),
        "source": f"parameters x dtype (host class {module})",
    }


def build(host: Path, only: set[str] | None = None) -> dict:
    from comfyui_headroom.memory.models.components import describe_tensors

    kinds = {"diffusion_models": "diffusion_model", "text_encoders": "text_encoder", "vae": "vae"}
    kinds |= {"clip_vision": "clip_vision", "upscale_models": "upscale_model", "loras": "lora"}
    files: dict[str, list[dict]] = {}
    for name, folder, parts in FILES:
        if only is not None and name not in only:
            continue
        components = []
        for prefix, arch, recipe in parts:
            specs = tensor_specs(arch, recipe, "", host)
            kind = kinds.get(folder) if len(parts) == 1 else _section_kind(prefix)
            info = describe_tensors(specs, kind=kind, file=name, source="catalog")
            assert not isinstance(info, list), (name, prefix)
            components.append(
                component_record(info, arch, recipe, shapes(arch, host)[1]) | {"prefix": prefix}
            )
        if len(parts) > 1:  # the header path must split the whole file into the same components
            whole = {
                p + k: v for p, arch, recipe in parts for k, v in tensor_specs(arch, recipe, "", host).items()
            }
            split = describe_tensors(whole, kind="checkpoint", file=name)
            assert sorted(i.bytes for i in split) == sorted(c["bytes"] for c in components), name
        files.setdefault(name, []).append({"directory": folder, "components": components})
    for name, arch, rank, recipe in LORAS:
        if only is not None and name not in only:
            continue
        info = describe_tensors(
            lora_specs(arch, rank, recipe, host), kind="lora", file=name, source="catalog"
        )
        record = component_record(info, arch, recipe, shapes(arch, host)[1]) | {"prefix": "diffusion_model."}
        record["note"] = f"rank {rank} on every Linear of the blocks; " + info.note
        record["source"] = f"rank-{rank} LoRA parameters x dtype (host class {shapes(arch, host)[1]})"
        files.setdefault(name, []).append({"directory": "loras", "components": [record]})
    import comfyui_version  # type: ignore[import-not-found]

    result = {
        "schema": 2,
        "generated_by": "scripts/build_model_catalog.py",
        "host": f"ComfyUI {comfyui_version.__version__}",
        "files": files,
    }
    if only is None:  # the templates' other files, solved from their published sizes
        from solve_template_sizes import template_entries

        solved, record = template_entries(files)
        files.update({k: v for k, v in solved.items() if k not in files})
        result["template_solve"] = record
    return result


def _section_kind(prefix: str) -> str:
    if prefix.startswith("model.diffusion_model."):
        return "diffusion_model"
    if prefix.startswith(("vae.", "first_stage_model.")):
        return "vae"
    return "text_encoder"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="+", help="build just these file names (to check the committed JSON)")
    parser.add_argument(
        "--measure-text-encoders", action="store_true", help="print the activation coefficients instead"
    )
    args = parser.parse_args(argv)
    host = _host()
    if args.measure_text_encoders:
        for tokens in (77, 256, 512):
            print(tokens, measure_text_encoder_activations(host, tokens))
        return 0
    catalog = build(host, set(args.only) if args.only else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(catalog, indent=1, sort_keys=False) + "\n")
    n = sum(len(v) for v in catalog["files"].values())
    print(f"wrote {args.out} ({n} file entries, {len(catalog['files'])} names, {catalog['host']})")
    return 0


# --- text-encoder activation coefficients (memory/planning/activations.py) ----------------------------------


def measure_text_encoder_activations(host: Path, tokens: int = 256) -> dict[str, float]:
    """Peak live activation bytes of the host's text encoders, per token x hidden x dtype byte.

    Runs each host class on CPU in fp32 at a reduced width (same ffn/hidden ratio and head size as the
    released model) under a TorchDispatchMode that tracks the storage of every tensor an op returns
    and when it is freed, so the peak excludes weights and counts exactly what forward() keeps alive.
    """
    import comfy.cli_args
    from torch.utils._pytree import tree_flatten

    from comfyui_headroom.memory.tiled_vae.measure import PeakLiveBytes

    comfy.cli_args.args.use_pytorch_cross_attention = True

    class PeakLive(PeakLiveBytes):
        """Every storage an op returns, views and in-place outputs included (the coefficients in
        memory/planning/activations.py were measured this way), on any device."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                    self.count(t)
            return out

    import comfy.ops
    from comfy.clip_model import CLIPTextModel
    from comfy.text_encoders import llama
    from comfy.text_encoders.t5 import T5

    hidden = 512
    ops = comfy.ops.disable_weight_init
    models = {
        # T5-XXL: d_ff/d_model = 10240/4096, head 64 (umT5-XXL is the same shape)
        "t5": T5(
            {"d_ff": 1280, "d_kv": 64, "d_model": hidden, "num_heads": 8, "num_layers": 2, "vocab_size": 1000,
             "dense_act_fn": "gelu_pytorch_tanh", "is_gated_act": True, "model_type": "t5"},
            torch.float32, "cpu", ops,
        ),
        # CLIP-L/G: intermediate 4x, head 64
        "clip": CLIPTextModel(
            {"num_hidden_layers": 2, "hidden_size": hidden, "num_attention_heads": 8,
             "intermediate_size": 2048, "hidden_act": "quick_gelu", "projection_dim": hidden,
             "vocab_size": 1000, "max_position_embeddings": tokens, "eos_token_id": 2},
            torch.float32, "cpu", ops,
        ),
        # Llama-3-8B (ffn 3.5x) and Qwen2.5-7B (ffn 5.3x): head 128, GQA
        "llama": llama.Llama2(
            {"vocab_size": 1000, "hidden_size": hidden, "intermediate_size": 1792, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 1},
            torch.float32, "cpu", ops,
        ),
        "qwen": llama.Llama2(
            {"vocab_size": 1000, "hidden_size": hidden, "intermediate_size": 2706, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 1},
            torch.float32, "cpu", ops,
        ),
    }  # fmt: skip
    result = {}
    for name, model in models.items():
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.02)  # disable_weight_init leaves them uninitialised
        ids = torch.randint(0, 1000, (1, tokens))
        mode = PeakLive()
        with torch.no_grad(), mode:
            model(ids, None)  # no padding mask, as ComfyUI calls them for one prompt
        result[name] = round(mode.peak / (tokens * hidden * 4), 2)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
