"""The video VAEs of the tiled VAE decode (issue #5): Wan 2.1/2.2, HunyuanVideo and LTXV, as the host
builds them (current hosts only; ``host_video_vaes`` says which this host has).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from .tiny_common import _init_state_dict, _on_meta, _require_wan, current_host_version
from .tiny_stock import SD_VAE_DDCONFIG, WAN21_VAE_CONFIG

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
    # LTX-2 / 2.3 (the 0.18+ core builds them with the same class): no timestep conditioning and no
    # noise, zero padding in space, time and space upsampled by separate depth-to-space blocks that halve
    # the channels, residual depth-to-space in all three dimensions.
    "2": {**_LTXV_COMMON, "timestep_conditioning": False, "spatial_padding_mode": "zeros",
          "decoder_base_channels": 32,
          "decoder_blocks": [
        ["res_x", {"num_layers": 1}],
        ["compress_all", {"residual": True, "multiplier": 2}],
        ["res_x", {"num_layers": 1}],
        ["compress_time", {"multiplier": 2}],
        ["res_x", {"num_layers": 2}],
        ["compress_space", {"multiplier": 2}],
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


def ltxv_sized_by_config() -> bool:
    """Whether the host's LTXV VideoVAE reads ``decoder_base_channels`` (0.18+, LTX-2's hosts)."""
    import inspect

    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    return "decoder_base_channels" in inspect.getsource(VideoVAE.__init__)


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


def hunyuan15_missing() -> str | None:
    """Why this host has no HunyuanVideo 1.5 VAE as the tiled decode follows it (None: it has one)."""
    import importlib
    import importlib.util

    try:
        found = importlib.util.find_spec("comfy.ldm.hunyuan_video.vae_refiner") is not None
    except ModuleNotFoundError:  # the host has no comfy.ldm.hunyuan_video at all
        found = False
    if not found:
        return "no HunyuanVideo 1.5 VAE"
    if not hasattr(importlib.import_module("comfy.ldm.hunyuan_video.vae_refiner"), "conv_carry_causal_3d"):
        return "decodes HunyuanVideo 1.5 whole-clip (no causal carry)"
    return None


def hunyuan15_autoencoder(config: dict[str, Any], seed: int) -> torch.nn.Module:
    """HunyuanVideo 1.5's VAE (the host's ``comfy.ldm.hunyuan_video.vae_refiner`` classes) at ``config``'s
    widths, random weights, in eval mode. ``comfy.sd.VAE`` builds only the full-width config, so the
    tests and the speed bench make their smaller ones here."""
    from comfy.ldm.models.autoencoder import AutoencodingEngine

    module = "comfy.ldm.hunyuan_video.vae_refiner"  # the host imports it from the target's name
    model = _on_meta(
        lambda: AutoencodingEngine(
            regularizer_config={"target": "comfy.ldm.models.autoencoder.EmptyRegularizer"},
            encoder_config={"target": f"{module}.Encoder", "params": dict(config)},
            decoder_config={"target": f"{module}.Decoder", "params": dict(config)},
        )
    )
    model.load_state_dict(_init_state_dict(model, seed, torch.float32), assign=True)
    return model.eval()


# HunyuanVideo 1.5's VAE (comfy/sd.py's config) at a quarter of its widths: 5 levels, 16x in space, 4x
# in time, 32 latent channels. The full widths (128-1024) take minutes per decode on a CPU.
HUNYUAN15_QUARTER_CONFIG = {
    "block_out_channels": [32, 64, 128, 256, 256], "in_channels": 3, "out_channels": 3, "num_res_blocks": 2,
    "ffactor_spatial": 16, "ffactor_temporal": 4, "downsample_match_channel": True,
    "upsample_match_channel": True, "z_channels": 32,
}  # fmt: skip


def hunyuan15_vae(seed: int) -> Any:
    """What the benchmarks use as a host VAE object (``first_stage_model``, ``process_output``) for
    HunyuanVideo 1.5: the host's classes at ``HUNYUAN15_QUARTER_CONFIG``, random weights. It has no
    ``decode_tiled``: the host's own tiled decode is not measured on it."""
    model = hunyuan15_autoencoder(HUNYUAN15_QUARTER_CONFIG, seed)
    return SimpleNamespace(
        first_stage_model=model, process_output=lambda x: torch.clamp((x + 1.0) / 2.0, 0.0, 1.0)
    )
