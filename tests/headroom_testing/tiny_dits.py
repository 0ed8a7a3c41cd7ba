"""Tiny DiTs (Flux, Qwen-Image, SD3, HunyuanVideo) from the host's own classes with an explicit config:
the stock detection fixes their width, so they are loaded with ``load_tiny_dit`` instead (current hosts
only).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from .tiny_common import _init_state_dict, _on_meta, _save, current_host_version


def tiny_dit_config(family: str) -> dict[str, Any]:
    """A tiny config of one of the host's DiT classes, for ``build_tiny_dit``/``load_tiny_dit``.

    These families cannot be made small through the stock loaders: model_detection.py fixes Flux's
    ``hidden_size=3072`` and Qwen-Image's width, SD3 ties its width to its depth and HunyuanVideo's
    head size to 128 (so one head of 128 here). The files are
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
        "hunyuan_video": {  # fields the host's HunyuanVideoParams lacks are dropped (older hosts)
            "image_model": "hunyuan_video", "in_channels": 16, "out_channels": 16, "patch_size": [1, 2, 2],
            "vec_in_dim": 32, "context_in_dim": 64, "hidden_size": 128, "mlp_ratio": 4.0, "num_heads": 1,
            "depth": 2, "depth_single_blocks": 3, "axes_dim": [16, 56, 56], "theta": 256, "qkv_bias": True,
            "guidance_embed": True, "byt5": False, "meanflow": False, "use_cond_type_embedding": False,
            "vision_in_dim": None, "meanflow_sum": False,
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
    import dataclasses

    import comfy.model_detection

    config = tiny_dit_config(family)
    if family == "flux":  # 0.18 added a required field (Flux 2 puts text ids on axes; Flux 1: none)
        try:
            from comfy.ldm.flux.model import FluxParams
        except ImportError:  # a host older than Flux: detection below says so
            FluxParams = None  # noqa: N806
        if FluxParams is not None and "txt_ids_dims" in {f.name for f in dataclasses.fields(FluxParams)}:
            config["txt_ids_dims"] = []
    if family == "hunyuan_video":
        try:
            from comfy.ldm.hunyuan_video.model import HunyuanVideoParams
        except ImportError:
            HunyuanVideoParams = None  # noqa: N806
        if HunyuanVideoParams is not None:
            fields = {f.name for f in dataclasses.fields(HunyuanVideoParams)} | {"image_model"}
            config = {key: value for key, value in config.items() if key in fields}
    model_config = comfy.model_detection.model_config_from_unet_config(config, state_dict)
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
    """The diffusion model of ``family`` ("flux", "qwen_image", "sd3", "hunyuan_video") at
    ``tiny_dit_config`` size, built from the host's own classes, in ``diffusion_models/``; load it with
    ``load_tiny_dit``."""
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
