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

The builders live by concern and are all importable from here: tiny_common.py (models folders, host
version, deterministic init and save), tiny_stock.py (SD1.5 and Wan 2.1 through the stock loaders),
tiny_dits.py (Flux, Qwen-Image, SD3 with an explicit config) and tiny_video_vaes.py (the video VAEs).
"""

from __future__ import annotations

from .tiny_common import (
    LEGACY_HOST_VERSION,
    MODEL_FOLDERS,
    WEIGHT_STD,
    _host_has_wan,
    _init_state_dict,
    _on_meta,
    _save,
    current_host_version,
    register_models_dir,
)
from .tiny_dits import build_tiny_dit, load_tiny_dit, tiny_dit_config
from .tiny_stock import (
    SD_VAE_DDCONFIG,
    TINY_SD15_UNET,
    TINY_WAN21,
    WAN21_TEXT_DIM,
    WAN21_VAE_CONFIG,
    build_clip_l,
    build_tiny_sd15_unet,
    build_tiny_sd_checkpoint,
    build_tiny_vae,
    build_tiny_wan,
    build_tiny_wan_blocks,
    build_wan21_vae,
    flux_vae_state_dict,
    tiny_wan_conditioning,
)
from .tiny_video_vaes import (
    HUNYUAN_VIDEO_VAE_DDCONFIG,
    LTXV_TINY_CONFIGS,
    WAN22_VAE_CONFIG,
    host_video_vaes,
    hunyuan_video_vae_state_dict,
    ltxv_sized_by_config,
    ltxv_vae,
    small_wan_vae,
    wan22_vae_state_dict,
)

__all__ = [
    "HUNYUAN_VIDEO_VAE_DDCONFIG", "LEGACY_HOST_VERSION", "LTXV_TINY_CONFIGS", "MODEL_FOLDERS",
    "SD_VAE_DDCONFIG", "TINY_SD15_UNET", "TINY_WAN21", "WAN21_TEXT_DIM", "WAN21_VAE_CONFIG",
    "WAN22_VAE_CONFIG", "WEIGHT_STD", "_init_state_dict", "_on_meta", "_save", "build_clip_l",
    "build_tiny_dit", "build_tiny_sd15_unet", "build_tiny_sd_checkpoint", "build_tiny_vae",
    "build_tiny_wan", "build_tiny_wan_blocks", "build_wan21_vae", "current_host_version",
    "flux_vae_state_dict", "host_video_vaes", "hunyuan_video_vae_state_dict", "load_tiny_dit",
    "ltxv_sized_by_config", "ltxv_vae", "register_models_dir", "small_wan_vae", "supported_builders",
    "tiny_dit_config", "tiny_wan_conditioning", "wan22_vae_state_dict",
]  # fmt: skip


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
