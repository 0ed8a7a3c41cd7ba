"""Tiny models the host's stock loaders accept: SD1.5 (checkpoint, UNet, CLIP-L, KL VAE) and Wan 2.1
(DiT and VAE), written as .safetensors into the models folders (how small each can be: tiny_models.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from .tiny_common import _init_state_dict, _on_meta, _require_wan, _save

# The SD1.5 UNet as detect_unet_config reads it back: one level of 320 channels with a cross-attention
# block, a full middle block and two output blocks. model_channels=320, context_dim=768 and conv (not
# linear) proj_in are what supported_models.SD15 matches on; num_heads=8 is its unet_extra_config.
TINY_SD15_UNET: dict[str, Any] = {
    "use_checkpoint": False,
    "image_size": 32,
    "use_spatial_transformer": True,
    "legacy": False,
    "adm_in_channels": None,
    "in_channels": 4,
    "out_channels": 4,
    "model_channels": 320,
    "num_res_blocks": [1],
    "channel_mult": [1],
    "transformer_depth": [1],
    "transformer_depth_output": [1, 1],
    "transformer_depth_middle": 1,
    "use_linear_in_transformer": False,
    "context_dim": 768,
    "use_temporal_resblock": False,
    "use_temporal_attention": False,
    "num_heads": 8,
    "num_head_channels": -1,
}

# What comfy/sd.py VAE.__init__ builds for any SD-style KL state dict (the sizes are not read from it).
SD_VAE_DDCONFIG: dict[str, Any] = {
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

# Wan 2.1 t2v: num_heads = dim // 128 in model_detection, so dim=128 is one head; text_dim 4096 is
# WanModel's default and is not read from the state dict.
TINY_WAN21: dict[str, Any] = {
    "model_type": "t2v",
    "dim": 128,
    "ffn_dim": 256,
    "num_heads": 1,
    "num_layers": 2,
}
WAN21_TEXT_DIM = 4096
# comfy/sd.py builds this for any Wan 2.1 VAE state dict.
WAN21_VAE_CONFIG: dict[str, Any] = {
    "dim": 96,
    "z_dim": 16,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
    "dropout": 0.0,
}


def _sd_vae() -> torch.nn.Module:
    from comfy.ldm.models.autoencoder import AutoencoderKL

    return _on_meta(lambda: AutoencoderKL(ddconfig=dict(SD_VAE_DDCONFIG), embed_dim=4))


def flux_vae_state_dict(seed: int = 1, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """A 16-channel KL VAE in the Flux/SD3 layout (no quant convs), for ``comfy.sd.VAE(sd=...)`` on
    current hosts, which detect it from the state dict (the 2024 host only detects 4-channel VAEs).
    Full size, like every KL VAE the hosts build."""
    from comfy.ldm.models.autoencoder import AutoencodingEngine

    config = {**SD_VAE_DDCONFIG, "z_channels": 16}
    target = "comfy.ldm.modules.diffusionmodules.model."
    model = _on_meta(
        lambda: AutoencodingEngine(
            regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
            encoder_config={"target": target + "Encoder", "params": config},
            decoder_config={"target": target + "Decoder", "params": config},
        )
    )
    return _init_state_dict(model, seed, dtype)


def build_tiny_vae(
    models_dir: Path,
    name: str = "tiny_kl_vae.safetensors",
    seed: int = 0,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """The SD1.x KL VAE (4 latent channels, 8x) in ``vae/``, for the stock VAELoader on both hosts.

    Not shrinkable: both hosts' VAE.__init__ hard-code ``ch=128, ch_mult=[1, 2, 4, 4],
    num_res_blocks=2`` and only read the latent channels and ``post_quant_conv`` from the file, so this
    is the full-size architecture (83.7M parameters; fp16 on disk, the loader casts). It has the
    ``quant_conv``/``post_quant_conv`` pair the 2024 host requires (it always builds AutoencoderKL).
    """
    return _save(_init_state_dict(_sd_vae(), seed, dtype), models_dir, "vae", name, "sd_kl_vae")


def _tiny_sd15_unet() -> torch.nn.Module:
    from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel

    return _on_meta(lambda: UNetModel(**copy.deepcopy(TINY_SD15_UNET)))


def _sd1_clip() -> torch.nn.Module:
    from comfy.sd1_clip import SDClipModel

    # device="meta": the 2024 SDClipModel defaults to device="cpu", which beats the device context.
    return _on_meta(lambda: SDClipModel(device="meta"))


def build_tiny_sd_checkpoint(
    models_dir: Path,
    name: str = "tiny_sd15.safetensors",
    seed: int = 0,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """A single-file SD1.5 checkpoint in ``checkpoints/`` for the stock CheckpointLoaderSimple.

    Keys follow the original LDM layout (``model.diffusion_model.``, ``cond_stage_model.transformer.``,
    ``first_stage_model.``), detected as ``supported_models.SD15`` by both hosts from the state dict
    alone. The UNet is TINY_SD15_UNET (~26M parameters); the CLIP-L text encoder (123M) and the KL VAE
    (84M) cannot be smaller because both hosts build them from fixed configs. Stored fp16 (~465 MB).
    Any latent size works (the UNet has a single level); a 64x64 image is an 8x8 latent.

    No ``text_projection`` (as in real SD1.x checkpoints): SD15.process_clip_state_dict would move it to
    a dead ``...text_model.text_projection`` key anyway. The 2024 host sets it to identity itself; the
    current one leaves it as torch.empty, which only reaches the pooled output that SD1.x ignores.
    """
    state_dict = _init_state_dict(_tiny_sd15_unet(), seed, dtype, "model.diffusion_model.")
    clip = _init_state_dict(_sd1_clip(), seed, dtype, "cond_stage_model.")
    clip.pop("cond_stage_model.transformer.text_projection.weight")
    state_dict.update(clip)
    state_dict.update(_init_state_dict(_sd_vae(), seed, dtype, "first_stage_model."))
    return _save(state_dict, models_dir, "checkpoints", name, "sd15_checkpoint")


def build_tiny_sd15_unet(
    models_dir: Path,
    name: str = "tiny_sd15_unet.safetensors",
    seed: int = 0,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """The checkpoint's tiny SD1.5 UNet alone, in ``diffusion_models/`` for the stock UNETLoader (both
    hosts detect it as SD15 from the bare ``input_blocks.0.0.weight`` layout). Pairs with
    ``build_clip_l`` (CLIPLoader, type "stable_diffusion") and ``build_tiny_vae``."""
    state_dict = _init_state_dict(_tiny_sd15_unet(), seed, dtype)
    return _save(state_dict, models_dir, "diffusion_models", name, "sd15_unet")


def build_clip_l(
    models_dir: Path,
    name: str = "clip_l.safetensors",
    seed: int = 0,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """A CLIP-L text encoder file (HF ``text_model.*`` layout) in ``text_encoders/`` for the stock
    CLIPLoader on both hosts. Full size (123M parameters, 246 MB fp16): both hosts build it from
    ``sd1_clip_config.json`` whatever the file holds."""
    clip = _sd1_clip()
    return _save(_init_state_dict(clip.transformer, seed, dtype), models_dir, "text_encoders", name, "clip_l")


def build_tiny_wan(
    models_dir: Path,
    name: str = "tiny_wan21_t2v.safetensors",
    seed: int = 0,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """A Wan 2.1 text-to-video DiT (TINY_WAN21: dim 128, 2 blocks, 1.1M parameters) in
    ``diffusion_models/`` for the stock UNETLoader; current hosts only (NotImplementedError on 2024).

    Pairs with a 16-channel Wan 2.1 latent (EmptyHunyuanLatentVideo), ``build_wan21_vae`` and a
    ``[batch, tokens, 4096]`` conditioning (``tiny_wan_conditioning``): its real text encoder, umt5-xxl
    (CLIPLoader type "wan"), has a fixed ~5.7B config, so no tiny one can be loaded by the stock nodes.
    """
    _require_wan()
    import comfy.ops
    from comfy.ldm.wan.model import WanModel

    model = _on_meta(lambda: WanModel(**TINY_WAN21, operations=comfy.ops.disable_weight_init))
    return _save(_init_state_dict(model, seed, dtype), models_dir, "diffusion_models", name, "wan21_t2v")


def build_wan21_vae(
    models_dir: Path,
    name: str = "wan21_vae.safetensors",
    seed: int = 0,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """The Wan 2.1 video VAE (16 channels, 8x spatial, 4x temporal) in ``vae/`` for the stock VAELoader.

    Full size (127M parameters, 254 MB fp16): comfy/sd.py builds it with a fixed ``dim=96`` for any
    state dict that has ``decoder.middle.0.residual.0.gamma``. Current hosts only.
    """
    _require_wan()
    from comfy.ldm.wan.vae import WanVAE

    model = _on_meta(lambda: WanVAE(**WAN21_VAE_CONFIG))
    return _save(_init_state_dict(model, seed, dtype), models_dir, "vae", name, "wan21_vae")


def tiny_wan_conditioning(batch: int = 1, tokens: int = 8, seed: int = 0) -> list:
    """A CONDITIONING value ``[[tensor, {}]]`` of the shape umt5-xxl would give the tiny Wan model."""
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(batch, tokens, WAN21_TEXT_DIM, generator=gen), {}]]


def build_tiny_wan_blocks(
    models_dir: Path,
    name: str = "tiny_wan21_blocks.safetensors",
    seed: int = 0,
    num_layers: int = 4,
    scaled_fp8: bool = False,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """``build_tiny_wan`` with ``num_layers`` blocks, for the stock UNETLoader (current hosts), its
    tensors in ``dtype`` (fp32: on CPU the loaded weights can stay views of the file).

    ``scaled_fp8``: the host's scaled-fp8 format, as ComfyUI saves it: every Linear weight in
    float8_e4m3fn with its fp32 ``scale_weight`` (absmax / 448) and a ``scaled_fp8`` marker tensor,
    which makes the loader build ``comfy.ops.scaled_fp8_ops``; the other tensors stay fp16.
    """
    _require_wan()
    import comfy.ops
    from comfy.ldm.wan.model import WanModel

    config = {**TINY_WAN21, "num_layers": num_layers}
    model = _on_meta(lambda: WanModel(**config, operations=comfy.ops.disable_weight_init))
    state_dict = _init_state_dict(model, seed, torch.float32)
    linears = {n for n, m in model.named_modules() if type(m).__name__ == "Linear"}
    for key in list(state_dict):
        module, _, leaf = key.rpartition(".")
        value = state_dict[key]
        if scaled_fp8 and module in linears and leaf == "weight":
            scale = value.abs().max().clamp(min=1e-12) / 448.0
            state_dict[key] = (value / scale).to(torch.float8_e4m3fn)
            state_dict[f"{module}.scale_weight"] = scale.reshape(()).float()
        else:
            state_dict[key] = value.to(torch.float16 if scaled_fp8 else dtype)
    if scaled_fp8:
        state_dict["scaled_fp8"] = torch.tensor([], dtype=torch.float8_e4m3fn)
    kind = "wan21_t2v_scaled_fp8" if scaled_fp8 else "wan21_t2v"
    return _save(state_dict, models_dir, "diffusion_models", name, kind)


def build_lora(models_dir: Path, name: str = "tiny_lora.safetensors") -> str:
    """A kohya-style LoRA on one attention projection of the tiny UNet, strong enough to matter."""
    gen = torch.Generator().manual_seed(7)
    base = "lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_q"
    tensors = {
        f"{base}.lora_down.weight": torch.randn(4, 320, generator=gen) * 0.5,
        f"{base}.lora_up.weight": torch.randn(320, 4, generator=gen) * 0.5,
        f"{base}.alpha": torch.tensor(4.0),
    }
    path = models_dir / "loras" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
    return name
