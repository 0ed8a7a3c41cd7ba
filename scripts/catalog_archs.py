"""The architectures of the catalog: ComfyUI's own classes, built on the meta device (no weights).

Each ``ARCHS`` entry takes the host's folder and returns the module ComfyUI builds for that released
file, with the configs comfy/model_detection.py derives for it. ``comfy`` is imported inside the
builders, once scripts/build_model_catalog.py has put the host on ``sys.path``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch


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
    "txt_ids_dims": [],  # 0.33: Flux.1 has no text position ids (model_detection.py)
}
CHROMA = {
    **{k: v for k, v in FLUX.items() if k not in ("guidance_embed",)},
    "vec_in_dim": None,
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
    "use_cond_type_embedding": False,  # 0.33's HunyuanVideo 1.5 switches, off for 1.0
    "vision_in_dim": None,
    "meanflow_sum": False,
}


def flux2(hidden: int, depth: int, single: int, context: int) -> dict:
    """Flux.2 as comfy/model_detection.py configures it (0.33): heads = hidden / 128, 128-channel latent,
    patch 1; depth, width and text width are the released files' (BFL's dev, Klein 4B and 9B)."""
    return {
        "image_model": "flux2", "axes_dim": [32, 32, 32, 32], "num_heads": hidden // 128, "mlp_ratio": 3.0,
        "theta": 2000, "out_channels": 128, "global_modulation": True, "mlp_silu_act": True,
        "qkv_bias": False, "ops_bias": False, "default_ref_method": "index", "ref_index_scale": 10.0,
        "txt_ids_dims": [3], "patch_size": 1, "in_channels": 128, "hidden_size": hidden,
        "context_in_dim": context, "vec_in_dim": None, "depth": depth, "depth_single_blocks": single,
        "guidance_embed": hidden == 6144,  # dev is guidance-distilled; Klein is not
    }  # fmt: skip


HUNYUAN_VIDEO_15 = {
    **HUNYUAN_VIDEO,
    "in_channels": 65,  # 32 noise + 32 image condition + 1 mask (model_base.HunyuanVideo15.concat_cond)
    "patch_size": [1, 1, 1],
    "out_channels": 32,
    "vec_in_dim": None,
    "context_in_dim": 3584,  # Qwen2.5-VL 7B
    "hidden_size": 2048,
    "num_heads": 16,
    "depth": 54,
    "depth_single_blocks": 0,
    "byt5": True,
    "guidance_embed": False,
    "use_cond_type_embedding": True,
    "vision_in_dim": 1152,  # SigLIP image tokens (supported_models.HunyuanVideo15)
    "meanflow_sum": True,
}
Z_IMAGE = {
    "image_model": "lumina2", "patch_size": 2, "in_channels": 16, "dim": 3840, "cap_feat_dim": 2560,
    "n_layers": 30, "qk_norm": True, "n_heads": 30, "n_kv_heads": 30, "axes_dims": [32, 48, 48],
    "axes_lens": [1536, 512, 512], "rope_theta": 256.0, "ffn_dim_multiplier": 8.0 / 3.0,
    "z_image_modulation": True, "time_scale": 1000.0, "pad_tokens_multiple": 32,
}  # fmt: skip
# Kandinsky 5 Lite (model_detection.py reads these shapes): the image model's parameters give the
# released file's size exactly; the video model's (2.0B) are 12% under the released 5s files' size
KANDINSKY5_IMAGE = {
    "image_model": "kandinsky5", "model_dim": 2560, "ff_dim": 10240, "time_dim": 512, "visual_embed_dim": 64,
    "num_text_blocks": 2, "num_visual_blocks": 50, "axes_dims": (32, 48, 48),
    "rope_scale_factor": (1.0, 1.0, 1.0),
}  # fmt: skip
KANDINSKY5_VIDEO = {
    "image_model": "kandinsky5", "model_dim": 1792, "ff_dim": 7168, "time_dim": 512, "visual_embed_dim": 132,
    "num_text_blocks": 2, "num_visual_blocks": 32, "axes_dims": (16, 24, 24),
}  # fmt: skip
LTXAV_19B = {"image_model": "ltxav"}  # comfy/ldm/lightricks/av_model.py LTXAVModel's defaults: 48 x 4096
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
            if name == "hunyuan_video15":  # comfy/sd.py (0.33): the 32-channel, 16x/4x causal VAE
                cfg = {
                    "block_out_channels": [128, 256, 512, 1024, 1024], "in_channels": 3, "out_channels": 3,
                    "num_res_blocks": 2, "ffactor_spatial": 16, "ffactor_temporal": 4, "z_channels": 32,
                    "downsample_match_channel": True, "upsample_match_channel": True,
                }  # fmt: skip
                refiner = "comfy.ldm.hunyuan_video.vae_refiner"
                return AutoencodingEngine(
                    regularizer_config={"target": "comfy.ldm.models.autoencoder.EmptyRegularizer"},
                    encoder_config={"target": f"{refiner}.Encoder", "params": cfg},
                    decoder_config={"target": f"{refiner}.Decoder", "params": cfg},
                )
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


def qwen3vl(model_type: str) -> Callable[[Path], torch.nn.Module]:
    def build(host: Path) -> torch.nn.Module:
        from comfy.text_encoders import qwen3vl as qwen3vl_te

        cls = type(f"Qwen3VL_{model_type}", (qwen3vl_te.Qwen3VL,), {"model_type": model_type})
        return cls({}, dtype=torch.float16, device="meta", operations=_ops())

    return build


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
    "vae_hunyuan_video15": vae("hunyuan_video15"),
    "clip_vision_h": clip_vision("clip_vision_config_h.json"),
    "clip_vision_g": clip_vision("clip_vision_config_g.json"),
    "clip_vision_l": clip_vision("clip_vision_config_vitl.json"),
    "siglip_384": clip_vision("clip_vision_siglip_384.json"),
    "esrgan_x4": esrgan,
    # the 2026 families (ComfyUI 0.33's classes)
    "flux2_dev": dit(flux2(6144, 8, 48, 15360)),
    "flux2_klein_4b": dit(flux2(3072, 5, 20, 7680)),
    "flux2_klein_9b": dit(flux2(4096, 8, 24, 12288)),
    "hunyuan_video_15": dit(HUNYUAN_VIDEO_15),
    "z_image": dit(Z_IMAGE),
    "ltxav_19b": dit(LTXAV_19B),
    "wan21_humo_14b": dit(wan(*WAN_14B, in_dim=36, model_type="humo")),
    "wan22_animate_14b": dit(wan(*WAN_14B, in_dim=36, model_type="animate")),
    "wan_animate2_14b": dit(wan(*WAN_14B, in_dim=36, model_type="animate2")),
    "rt_detr_v4": dit({"image_model": "RT_DETR_v4", "enc_h": 384}),  # the X model: encoder width 384
    "kandinsky5_image_lite": dit(KANDINSKY5_IMAGE),
    # HiDream-O1: model_detection.py gives no config, the class's defaults are the release's (8.06B)
    "hidream_o1": dit({"image_model": "hidream_o1"}),
    "qwen3_4b": llm("Qwen3_4B"),
    "qwen3_8b": llm("Qwen3_8B"),
    "qwen3vl_4b": qwen3vl("qwen3vl_4b"),
    "qwen3vl_8b": qwen3vl("qwen3vl_8b"),
    "qwen3vl_32b": qwen3vl("qwen3vl_32b"),
    "gemma3_12b": llm("Gemma3_12B"),
    "mistral3_small_24b": llm("Mistral3Small24B"),
    # Flux.2's release drops the layers past 30 (text_encoders/flux.py flux2_te(pruned=True))
    "mistral3_small_24b_pruned": llm("Mistral3Small24B", num_hidden_layers=30),
}


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


# --- the 2026 families added for #26: built at the release's dtype, so parameters the host class pins
# in fp32 (MiniMax H3's patch projections, time tables and curve-form adaln) stay fp32 in the file ---


def native(config: dict) -> Callable[[Path], torch.nn.Module]:
    """A diffusion model built like ``dit`` but in bf16: a parameter still fp32 is one the host's class
    creates in fp32 on purpose (scripts/build_model_catalog.py keeps it fp32 and unquantised)."""

    def build(host: Path) -> torch.nn.Module:
        import comfy.model_detection

        model_config = comfy.model_detection.model_config_from_unet_config(dict(config))
        if model_config is None:
            raise ValueError(f"the host matches no model to {config}")
        model_config.set_inference_dtype(torch.bfloat16, None)
        return model_config.get_model({}, device="meta").diffusion_model

    build.native = True  # type: ignore[attr-defined]
    return build


def te_class(module: str, name: str, **config) -> Callable[[Path], torch.nn.Module]:
    """A text encoder class of the host (comfy.text_encoders.MODULE.NAME) with its own default config,
    which is the released model's (the host detects no dims for these)."""

    def build(host: Path) -> torch.nn.Module:
        import importlib

        cls = getattr(importlib.import_module(f"comfy.text_encoders.{module}"), name)
        return cls(config, torch.bfloat16, "meta", _ops())

    build.native = True  # type: ignore[attr-defined]
    return build


def ace_step15(host: Path) -> torch.nn.Module:
    """ACE-Step 1.5 (2B DiT, the class's defaults are the turbo/base release: 24 layers x 2048). Its FSQ
    tokenizer calls ``.item()`` while it is built, which a meta tensor cannot answer: the FSQ (levels and
    two tiny projections) is built on the CPU, everything else on the meta device."""
    import comfy.ldm.ace.ace_step15 as ace

    original = ace.FSQ

    class CpuFSQ(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, device=None, **kwargs):
            super().__init__(*args, device="cpu", **kwargs)

    ace.FSQ = CpuFSQ
    try:
        return native({"audio_model": "ace1.5"})(host)
    finally:
        ace.FSQ = original


def stable_audio_open(host: Path) -> torch.nn.Module:
    """Stable Audio Open 1.0's DiT: AudioDiffusionTransformer with the dims comfy/model_detection.py
    reads from that file (global cond 1536, embed 1536, cond tokens not projected); the seconds
    embedders model_base adds are two NumberConditioner(768)."""
    import comfy.ldm.audio.dit as dit_mod
    import comfy.ldm.audio.embedders as emb
    import comfy.ops

    with torch.device("meta"):
        model = torch.nn.Module()
        model.model = dit_mod.AudioDiffusionTransformer(
            global_cond_dim=1536, project_cond_tokens=False, embed_dim=1536,
            dtype=torch.float32, device="meta", operations=comfy.ops.disable_weight_init,
        )  # fmt: skip
        model.seconds_start = emb.NumberConditioner(768, min_val=0, max_val=512)
        model.seconds_total = emb.NumberConditioner(768, min_val=0, max_val=512)
    return model


def audio_vae(name: str) -> Callable[[Path], torch.nn.Module]:
    """The audio VAEs comfy/sd.py builds: Oobleck (Stable Audio 44.1 kHz; ACE-Step 1.5's 48 kHz
    strides [2, 4, 4, 6, 10]) and MiniMax H3's stereo DAC/BigVGAN VAE."""

    def build(host: Path) -> torch.nn.Module:
        with torch.device("meta"):
            if name == "oobleck":
                from comfy.ldm.audio.autoencoder import AudioOobleckVAE

                return AudioOobleckVAE()
            if name == "oobleck_48k":
                from comfy.ldm.audio.autoencoder import AudioOobleckVAE

                return AudioOobleckVAE(strides=[2, 4, 4, 6, 10])
            if name == "minimax_h3_audio":
                from comfy.ldm.minimax.audio_vae import MiniMaxH3AudioVAE

                return MiniMaxH3AudioVAE()
            if name == "minimax_h3_video":
                import comfy.ops
                from comfy.ldm.minimax.vae import MiniMaxH3VideoVAE

                return MiniMaxH3VideoVAE(operations=comfy.ops.disable_weight_init)
        raise ValueError(name)

    return build


# MiniMax H3's released DiTs are "curve form" (comfy/ldm/minimax/model.py: adaln over a small shared
# basis of the time-embedding curve, no time embedder; model_detection.py reads the basis width and grid
# from ``adaln_t_table``). The class's other defaults are the release's (33.1B full form). The basis
# width is not published: 64 is assumed (each unit of width is 4.85M fp32 parameters, 0.3% of the file).
MINIMAX_H3_CURVE = {"image_model": "minimax_h3", "adaln_curve_grid": 1000, "time_embed_dim": 64}

ARCHS |= {
    "krea2": native({"image_model": "krea2"}),  # 12.8B: SingleStreamDiT's defaults (28 x 6144)
    "minimax_h3_curve": native(MINIMAX_H3_CURVE),
    "minimax_music3": native({"audio_model": "minimax_music3"}),
    "ace_step15": ace_step15,
    "stable_audio_open_dit": stable_audio_open,
    "ideogram4": native({"image_model": "ideogram4"}),
    "ernie_image": native({"image_model": "ernie"}),
    "lens": native({"image_model": "lens"}),
    "mage_flow": native({"image_model": "mage_flow"}),
    "boogu": native({"image_model": "boogu"}),
    "pixeldit_t2i": native({"image_model": "pixeldit_t2i"}),
    "triposplat": native({"image_model": "triposplat"}),
    "pid_flux1": native({"image_model": "pid"}),
    "qwen_image_layered": native(
        {"image_model": "qwen_image", "in_channels": 64, "num_layers": 60, "use_additional_t_cond": True}
    ),
    "gemma4_e4b": te_class("gemma4", "Gemma4_E4B"),
    "gemma4_e2b": te_class("gemma4", "Gemma4_E2B"),
    "qwen3_06b": te_class("llama", "Qwen3_06B"),
    "qwen3_06b_ace15": te_class("llama", "Qwen3_06B_ACE15"),
    "qwen3_2b_ace15_lm": te_class("llama", "Qwen3_2B_ACE15_lm"),
    "qwen3_4b_ace15_lm": te_class("llama", "Qwen3_4B_ACE15_lm"),
    "gemma3_4b": te_class("llama", "Gemma3_4B"),
    "ministral3_3b": te_class("llama", "Ministral3_3B"),
    "vae_oobleck": audio_vae("oobleck"),
    "vae_oobleck_48k": audio_vae("oobleck_48k"),
    "vae_minimax_h3_audio": audio_vae("minimax_h3_audio"),
    "vae_minimax_h3_video": audio_vae("minimax_h3_video"),
}


def qwen35(model_type: str) -> Callable[[Path], torch.nn.Module]:
    """Qwen3.5 (comfy/text_encoders/qwen35.py): the class reads its sizes from ``model_type``."""

    def build(host: Path) -> torch.nn.Module:
        from comfy.text_encoders import qwen35 as qwen35_te

        cls = type(f"Qwen35_{model_type}", (qwen35_te.Qwen35,), {"model_type": model_type})
        return cls({}, torch.bfloat16, "meta", _ops())

    build.native = True  # type: ignore[attr-defined]
    return build


def te_module(module: str, name: str) -> Callable[[Path], torch.nn.Module]:
    """A text model class taking (config, dtype, device, operations) with its released defaults."""

    def build(host: Path) -> torch.nn.Module:
        import importlib

        cls = getattr(importlib.import_module(f"comfy.text_encoders.{module}"), name)
        return cls({}, torch.bfloat16, "meta", _ops())

    build.native = True  # type: ignore[attr-defined]
    return build


def vae_flux2(host: Path) -> torch.nn.Module:
    """Flux.2's VAE as comfy/sd.py builds it: the SD/Flux KL layout with 32 latent channels and a batch
    norm over the patchified latent (``bn.running_mean``), quant convs in AutoencoderKL."""
    from comfy.ldm.models.autoencoder import AutoencoderKL

    cfg = {
        "double_z": True, "z_channels": 32, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 128,
        "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_resolutions": [], "dropout": 0.0,
        "batch_norm_latent": True,
    }  # fmt: skip
    with torch.device("meta"):
        return AutoencoderKL(ddconfig=cfg, embed_dim=32)


ARCHS |= {
    # Wan 14B variants: the model types comfy/model_detection.py tells apart by their keys (in_dim only
    # sizes the patch embedding, < 0.1% of the bytes)
    "wan22_camera_14b": dit(wan(*WAN_14B, in_dim=36, model_type="camera_2.2")),
    "wan22_fun_control_14b": dit(wan(*WAN_14B, in_dim=52)),
    "wan22_s2v_14b": dit(wan(*WAN_14B, model_type="s2v")),
    "wan21_scail2_14b": dit(wan(*WAN_14B, in_dim=36, model_type="scail2")),
    "wan22_dancer_14b": dit(wan(*WAN_14B, in_dim=36, model_type="wandancer")),
    "qwen35_2b": qwen35("qwen35_2b"),
    "qwen35_4b": qwen35("qwen35_4b"),
    "qwen35_9b": qwen35("qwen35_9b"),
    "jina_clip_v2": te_module("jina_clip_2", "XLMRobertaModel"),
    "t5gemma_b": te_module("sa3", "T5GemmaModel"),
    "vae_flux2": vae_flux2,
}


def chroma_radiance(host: Path) -> torch.nn.Module:
    """Chroma Radiance (pixel space): Chroma's blocks with the NeRF head comfy/model_detection.py
    configures (16-pixel patches, conv final head, x0 prediction as the released x0 file)."""
    config = {
        **CHROMA, "image_model": "chroma_radiance", "in_channels": 3, "out_channels": 3, "patch_size": 16,
        "nerf_hidden_size": 64, "nerf_mlp_ratio": 4, "nerf_depth": 4, "nerf_max_freqs": 8,
        "nerf_tile_size": 512, "nerf_final_head_type": "conv", "nerf_embedder_dtype": torch.float32,
        "use_x0": True, "use_sequential_txt_ids": False,
    }  # fmt: skip
    return diffusion(config)


# SeedVR2 as comfy/model_detection.py:686-725 configures it: the 3B, and the 7B whose blocks keep separate
# video/text modules in all 36 blocks (the layout of the released 7B; the shared "all.*" layout would be
# 5.3B parameters)
SEEDVR2_3B = {
    "image_model": "seedvr2", "vid_dim": 2560, "heads": 20, "num_layers": 32, "norm_eps": 1e-05,
    "mlp_type": "swiglu", "vid_out_norm": True,
}  # fmt: skip
SEEDVR2_7B = {
    "image_model": "seedvr2", "vid_dim": 3072, "heads": 24, "num_layers": 36, "mm_layers": 36,
    "norm_eps": 1e-5, "rope_type": "rope3d", "rope_dim": 64, "mlp_type": "normal",
}  # fmt: skip

ARCHS |= {
    "chroma_radiance": chroma_radiance,
    "seedvr2_3b": native(SEEDVR2_3B),
    "seedvr2_7b": native(SEEDVR2_7B),
    "kandinsky5_video_lite": dit(KANDINSKY5_VIDEO),
}
