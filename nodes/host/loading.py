"""Loading: the Offload Loader's work. It builds the host's own MODEL/CLIP/VAE objects with the host's own
loading functions (so every stock node and other pack works with them), after refusing any file that is
not a safetensors file of the expected kind; then it places each component's CPU copy where its
residency says and registers it with the residency controller."""

from __future__ import annotations

import inspect
import logging
import sys
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...memory.models.catalog import LOADER_FOLDERS
from ...memory.models.components import describe_file
from ...memory.models.header import ComponentError
from ...memory.names import OFFLOAD_CHECKPOINT_INPUT, OFFLOAD_RESIDENCY_INPUTS
from ...memory.planning.workload import component_id
from ...memory.residency import MappedFile, file_version, open_mapped
from ..input_checks import OffloadError, check_checkpoint_parts, check_pairing, loading
from . import legacy_2024
from .lookups import host_module

if TYPE_CHECKING:
    from .host_types import ModelPatcher

from .patches import REGISTRY
from .residency import place_host_copy
from .state import residency

_log = logging.getLogger("headroom")

_DTYPE_OPTIONS: dict[str, dict[str, Any]] = {  # the stock UNETLoader's weight_dtype -> model_options
    "fp8_e4m3fn": {"dtype": "float8_e4m3fn"},
    "fp8_e4m3fn_fast": {"dtype": "float8_e4m3fn", "fp8_optimizations": True},
    "fp8_e5m2": {"dtype": "float8_e5m2"},
}


CLONE_WATCH = "ModelPatcher.callbacks[ON_CLONE]"  # our clone watch on a loaded patcher, in the registry


@dataclass
class ComponentHandle:
    """One component the loader built: the host's patcher and module, and the files it came from.

    The patcher and module are held weakly: the host's objects (the loader's outputs in its cache) own
    the weights, so when the host drops them (a new node id, a changed input, a closed workflow, /free,
    the RAM-pressure cache) they go as a stock loader's do; the handle is then ``gone`` and the
    controller drops its registration, and with it the file mappings (held only here)."""

    component_id: str
    label: str
    kind: str
    patcher_ref: Any  # the patcher, or a weakref to it (made weak in __post_init__)
    module_ref: Any
    paths: list[Path]
    residency: str
    files: list[MappedFile] | None = None
    mapped_names: dict[str, str] = field(default_factory=dict)
    clones: list[Any] = field(default_factory=list)  # weakrefs to the patcher's clones (LoRA loaders)

    def __post_init__(self) -> None:
        for name in ("patcher_ref", "module_ref"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, weakref.ref):
                setattr(self, name, weakref.ref(value))

    @property
    def patcher(self) -> Any:
        return self.patcher_ref() if self.patcher_ref is not None else None

    @property
    def module(self) -> Any:
        return self.module_ref() if self.module_ref is not None else None

    def release(self) -> None:
        """Let go of the file mappings (the controller calls it once the handle is ``gone``), whoever
        still holds the handle itself (a finished run's record)."""
        self.files = None
        self.mapped_names.clear()

    @property
    def gone(self) -> bool:
        """The host no longer holds this component's objects: nothing can compute with it."""
        return self.patcher is None or self.module is None

    def live_clones(self) -> list[Any]:
        alive = [c() for c in self.clones]
        return [c for c in alive if c is not None]

    def watch_clones(self) -> None:
        """Hosts with patcher callbacks tell us about clones (a LoRA loader's): the node computes with
        the clone, so loading the base ahead of it would only be undone."""
        patcher_extension = sys.modules.get("comfy.patcher_extension")
        callbacks = getattr(patcher_extension, "CallbacksMP", None)
        if callbacks is None or not hasattr(self.patcher, "add_callback"):
            return
        clones = self.clones

        def on_clone(original: ModelPatcher, clone: ModelPatcher) -> None:
            clones.append(weakref.ref(clone))

        self.patcher.add_callback(callbacks.ON_CLONE, on_clone)
        ref = weakref.ref(self.patcher)  # the registry must not keep the host's model alive

        def undo() -> None:  # (by identity: the host keeps callbacks in lists per key)
            patcher = ref()
            for listed in getattr(patcher, "callbacks", {}).get(callbacks.ON_CLONE, {}).values():
                if any(c is on_clone for c in listed):
                    listed[:] = [c for c in listed if c is not on_clone]

        patch = REGISTRY.record(CLONE_WATCH, undo)
        weakref.finalize(self.patcher, REGISTRY.forget, patch)

    def mapped(self) -> list[MappedFile]:
        if self.files is None:
            self.files = open_mapped(self.paths)
        return self.files


def _full_path(kind: str, name: str, input_name: str) -> Path:
    folder_paths = host_module("folder_paths")
    for folder in LOADER_FOLDERS[kind]:
        if folder in folder_paths.folder_names_and_paths:
            found = folder_paths.get_full_path(folder, name)
            if found:
                return Path(found)
    folder = LOADER_FOLDERS[kind][0]
    raise OffloadError(f"Offload Loader: input {input_name}: no file {name!r} in the models/{folder} folder")


def _check_file(input_name: str, path: Path, expected: str) -> list[Any]:
    """Refuse what is not a safetensors file of the expected kind, before anything is loaded; returns
    what the file holds (memory.components infos)."""
    try:
        info = describe_file(path)
    except ComponentError as exc:
        raise OffloadError(f"Offload Loader: input {input_name}: {exc}") from None
    infos = info if isinstance(info, list) else [info]
    kinds = {i.kind for i in infos}
    if expected == "checkpoint":
        if "diffusion_model" not in kinds:
            raise OffloadError(
                f"Offload Loader: input {input_name}: {path.name} holds no diffusion model "
                f"(it looks like: {', '.join(sorted(kinds))}); a checkpoint holds a model, encoders and a VAE"
            )
        return infos
    known = kinds - {"unknown", "other"}
    if known and expected not in known:
        raise OffloadError(
            f"Offload Loader: input {input_name}: {path.name} looks like a {'/'.join(sorted(known))} file, "
            f"not a {expected.replace('_', ' ')}; choose it in the matching input"
        )
    return infos


def _model_options(weight_dtype: str) -> dict[str, Any]:
    import torch

    options = dict(_DTYPE_OPTIONS.get(weight_dtype, {}))
    if "dtype" in options:
        options["dtype"] = getattr(torch, options["dtype"])
    return options


def _load_checkpoint(
    path: Path, want_model: bool, want_clip: bool, want_vae: bool, weight_dtype: str
) -> tuple[Any, Any, Any]:
    """The parts of a checkpoint that no separate file replaces, as CheckpointLoaderSimple loads them."""
    sd = host_module("comfy.sd")
    kwargs: dict[str, Any] = {
        "output_model": want_model,
        "output_vae": want_vae,
        "output_clip": want_clip,
        "embedding_directory": host_module("folder_paths").get_folder_paths("embeddings"),
    }
    if weight_dtype != "default":
        if "model_options" not in inspect.signature(sd.load_checkpoint_guess_config).parameters:
            raise OffloadError(f"Offload Loader: weight_dtype {weight_dtype} needs a newer ComfyUI")
        kwargs["model_options"] = _model_options(weight_dtype)
    out = sd.load_checkpoint_guess_config(str(path), **kwargs)
    return out[0], out[1], out[2]


def _load_diffusion_model(path: Path, weight_dtype: str) -> Any:
    sd = host_module("comfy.sd")
    legacy = legacy_2024.load_diffusion_model(path, weight_dtype, OffloadError)
    if legacy is not None:
        return legacy
    return sd.load_diffusion_model(str(path), model_options=_model_options(weight_dtype))


def _load_clip(paths: list[Path], clip_type: str) -> Any:
    """As the stock CLIPLoader / DualCLIPLoader / TripleCLIPLoader: the host's load_clip on the files."""
    sd = host_module("comfy.sd")
    kwargs: dict[str, Any] = {
        "embedding_directory": host_module("folder_paths").get_folder_paths("embeddings")
    }
    clip_types = getattr(sd, "CLIPType", None)
    if clip_types is not None and len(paths) < 3:  # the stock triple loader takes no type
        kwargs["clip_type"] = getattr(clip_types, clip_type.upper(), clip_types.STABLE_DIFFUSION)
    return sd.load_clip(ckpt_paths=[str(p) for p in paths], **kwargs)


def _load_vae(name: str) -> Any:
    return host_module("nodes").VAELoader().load_vae(name)[0]


_FILE_INPUTS = (
    ("checkpoint", "checkpoints"), ("diffusion_model", "diffusion_models"),
    *((f"text_encoder_{i}", "text_encoders") for i in (1, 2, 3)), ("vae", "vae"),
)  # fmt: skip


def file_versions(inputs: dict[str, Any]) -> str:
    """The version (size, modification and change times, inode, and a hash of the header and of sampled
    blocks: ``mapped.file_version``) of every file the inputs name: the Offload Loader's IS_CHANGED, so the
    host loads it again, from the new bytes, when a file is overwritten or truncated between runs, also
    with its modification time put back (rsync --inplace -t), instead of computing with a mapping of a
    file that changed. A file that cannot be found
    reads as "" (the load itself says what is wrong)."""
    versions = []
    for input_name, kind in _FILE_INPUTS:
        name = inputs.get(input_name)
        if name in ("", "none", None):
            continue
        try:
            versions.append(f"{input_name}={file_version(_full_path(kind, str(name), input_name))}")
        except (OffloadError, OSError):
            versions.append(f"{input_name}=?")
    return ";".join(versions)


def _chosen(inputs: dict[str, Any], name: str) -> str | None:
    """A file input's choice, or None where it is left out ("", "none")."""
    value = inputs.get(name)
    return None if value in ("", "none", None) else str(value)


def offload_load(node_id: str, inputs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The Offload Loader's work: validate every file, load with the host's functions, place, register.

    Nothing is kept when anything fails: the components built so far are dropped with the exception.
    """
    checkpoint, unet, vae_name = (
        _chosen(inputs, OFFLOAD_CHECKPOINT_INPUT),
        _chosen(inputs, "diffusion_model"),
        _chosen(inputs, "vae"),
    )
    encoders = [e for e in (_chosen(inputs, f"text_encoder_{i}") for i in (1, 2, 3)) if e is not None]
    if checkpoint is None and unet is None:
        raise OffloadError("Offload Loader: choose a checkpoint or a diffusion_model (both are none)")
    weight_dtype = str(inputs.get("weight_dtype") or "default")
    files: dict[str, tuple[str, Path]] = {}  # input -> (kind, path)
    if checkpoint is not None:
        files["checkpoint"] = ("checkpoint", _full_path("checkpoints", checkpoint, "checkpoint"))
    if unet is not None:
        path = _full_path("diffusion_models", unet, "diffusion_model")
        files["diffusion_model"] = ("diffusion_model", path)
    for i in (1, 2, 3):
        name = _chosen(inputs, f"text_encoder_{i}")
        if name is not None:
            path = _full_path("text_encoders", name, f"text_encoder_{i}")
            files[f"text_encoder_{i}"] = ("text_encoder", path)
    if vae_name is not None:
        files["vae"] = ("vae", _full_path("vae", vae_name, "vae"))
    infos = {input_name: _check_file(input_name, path, kind) for input_name, (kind, path) in files.items()}
    if "checkpoint" in files:
        need_clip, need_vae = not encoders, vae_name is None
        check_checkpoint_parts(files["checkpoint"][1], infos["checkpoint"], need_clip, need_vae)
    clip_type = str(inputs.get("clip_type"))
    check_pairing(files, infos, clip_type)

    model = clip = vae = None
    if "checkpoint" in files:
        with loading("checkpoint", files["checkpoint"][1], infos["checkpoint"]):
            model, clip, vae = _load_checkpoint(
                files["checkpoint"][1], want_model=unet is None, want_clip=not encoders,
                want_vae=vae_name is None, weight_dtype=weight_dtype if unet is None else "default",
            )  # fmt: skip
    if unet is not None:
        with loading("diffusion_model", files["diffusion_model"][1], infos["diffusion_model"]):
            model = _load_diffusion_model(files["diffusion_model"][1], weight_dtype)
    if encoders:
        names = [n for n, (k, _) in files.items() if k == "text_encoder"]
        with loading(" / ".join(names), files[names[0]][1], [i for n in names for i in infos[n]]):
            clip = _load_clip([files[n][1] for n in names], clip_type)
    if vae_name is not None:
        with loading("vae", files["vae"][1], infos["vae"]):
            vae = _load_vae(vae_name)

    handles = _handles(node_id, inputs, files, model, clip, vae)
    control = residency()
    for h in handles:
        try:  # a DynamicVRAM model: the host's own unpin/unmap for "disk", a note for the others
            note = place_host_copy(h)
        except Exception as exc:  # fail open: the models loaded fine, they just stay in pageable RAM
            note = f"could not place it as {h.residency} ({exc!r}); it stays in RAM"
        if note:
            _log.info("Headroom: %s: %s", h.label, note)
    control.controller.forget(f"{node_id}:")
    for h in handles:
        h.watch_clones()
        control.controller.register(h.component_id, h.label, h)
    return model, clip, vae


def _handles(
    node_id: str, inputs: dict[str, Any], files: dict[str, tuple[str, Path]], model: Any, clip: Any, vae: Any
) -> list[ComponentHandle]:
    """One handle per component, with the id the planner gives it (memory.extract: node:input:kind)."""
    out = []

    def source(kind: str) -> tuple[str, list[Path]]:
        own = [n for n, (k, _) in files.items() if k == kind]
        if own:
            return own[0], [files[n][1] for n in own]
        return "checkpoint", [files["checkpoint"][1]]

    for kind, obj in (("diffusion_model", model), ("text_encoder", clip), ("vae", vae)):
        residency_input = OFFLOAD_RESIDENCY_INPUTS[kind]
        if obj is None:
            continue
        input_name, paths = source(kind)
        patcher = obj if kind == "diffusion_model" else getattr(obj, "patcher", None)
        if getattr(patcher, "model", None) is None:  # the host built an empty shell from no weights
            raise OffloadError(
                f"Offload Loader: input {input_name}: the host found no {kind.replace('_', ' ')} weights in "
                f"{', '.join(p.name for p in paths)}; choose a file that holds one"
            )
        module = getattr(patcher, "model", None)
        label = " + ".join(p.name for p in paths) + f" [{kind}]"
        choice = str(inputs.get(residency_input) or "auto")
        cid = component_id(node_id, input_name, kind)
        out.append(ComponentHandle(cid, label, kind, patcher, module, paths, choice))
    return out
