"""Sizes and blocks of model files by name, for planning before (or without) the files being there.

``lookup`` answers, in this order:
1. the file's own safetensors header when it exists under ``models_dir`` (exact, source "header");
   a GGUF file's header when the gguf package is installed (models/gguf.py, source "header"); a
   .ckpt/.pt file (or GGUF without the package) is sized from the file system, never opened ("estimate");
2. the catalog of known files, memory/data/model_catalog.json (source "catalog"), built by
   scripts/build_model_catalog.py from the host's own model classes, or, for files no host class here
   builds, solved from the official templates' published sizes (scripts/solve_template_sizes.py; such
   an entry's ``note`` starts with "template sizes" and its blocks are assumed); each record keeps its
   ``source``. Checked against the published sizes by scripts/check_model_catalog.py; looked up first
   by exact file name, then by a normalised name (case, separators and extension ignored);
3. an estimate from the name's tokens - family ("wan", "flux"...), parameters ("14B"), dtype ("fp8"),
   LoRA rank ("rank64") - scaled from the closest catalog entry (source "estimate");
4. a conservative default for the kind (source "estimate"), said in ``note``.
"""

from __future__ import annotations

import functools
import gc
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypedDict

from ..units import GiB
from .components import describe_file
from .gguf import describe_gguf, gguf_reader_available
from .header import ComponentError
from .info import Block, ComponentInfo

CATALOG_PATH = Path(__file__).resolve().parents[1] / "data" / "model_catalog.json"

# The host's folder_paths names of the Offload Loader's file inputs, newest first: 2024 hosts call
# diffusion models "unet" and text encoders "clip"; current ones keep those names as aliases.
LOADER_FOLDERS: dict[str, tuple[str, ...]] = {
    "checkpoints": ("checkpoints",),
    "diffusion_models": ("diffusion_models", "unet"),
    "text_encoders": ("text_encoders", "clip"),
    "vae": ("vae",),
}
# ComfyUI's models/ sub-folders for each kind (folder_paths.folder_names_and_paths), searched first.
KIND_FOLDERS: dict[str, tuple[str, ...]] = {
    "checkpoint": LOADER_FOLDERS["checkpoints"],
    "diffusion_model": (*LOADER_FOLDERS["diffusion_models"], "checkpoints"),
    "text_encoder": LOADER_FOLDERS["text_encoders"],
    "vae": LOADER_FOLDERS["vae"],
    "lora": ("loras",),
    "controlnet": ("controlnet", "t2i_adapter"),
    "clip_vision": ("clip_vision",),
    "upscale_model": ("upscale_models",),
    "model_patch": ("model_patches",),
    "audio_encoder": ("audio_encoders",),
    "style_model": ("style_models",),
    # folders of newer hosts' auxiliary models (depth, matting, detection...): sized, never streamed
    "other": (
        "latent_upscale_models", "geometry_estimation", "background_removal", "embeddings",
        "frame_interpolation", "optical_flow", "detection",
    ),
}  # fmt: skip
ALL_FOLDERS: tuple[str, ...] = tuple(dict.fromkeys(f for folders in KIND_FOLDERS.values() for f in folders))
FOLDER_KINDS: dict[str, str] = {
    f: k for k, folders in KIND_FOLDERS.items() for f in folders if f != "checkpoints"
}
FOLDER_KINDS["checkpoints"] = "checkpoint"

TEMPLATE_SOURCE = "template sizes"  # entries solved from the templates' published sizes start so
# Unknown file, unknown name: assume big, so a plan errs towards streaming rather than an OOM.
DEFAULT_BYTES: dict[str, int] = {
    "checkpoint": 24 * GiB, "diffusion_model": 24 * GiB, "text_encoder": 10 * GiB, "vae": 1 * GiB,
    "lora": 2 * GiB, "controlnet": 4 * GiB, "clip_vision": 4 * GiB, "upscale_model": GiB // 4,
    "model_patch": 4 * GiB, "audio_encoder": 2 * GiB, "style_model": 1 * GiB, "other": 1 * GiB,
}  # fmt: skip
# what ComfyUI-GGUF loads from a GGUF file (UnetLoaderGGUF, CLIPLoaderGGUF and its Dual/Triple/Quad kin)
_GGUF_KINDS = frozenset({None, "diffusion_model", "text_encoder"})
_EXTENSIONS = (".safetensors", ".sft", ".ckpt", ".pt", ".pth", ".bin", ".gguf")


# --- the catalog -----------------------------------------------------------------------------------

# one block run of a record: (name, first index or None for a single block, count, bytes per block)
BlockRun = tuple[str, int | None, int, int]


class _Component(TypedDict):
    kind: str
    family: str
    dtype: str
    bytes: int
    blocks: list[BlockRun]


class CatalogRecord(_Component, total=False):
    """One component of a catalog entry (scripts/build_model_catalog.py writes them)."""

    note: str
    arch: str
    recipe: str
    source: str
    prefix: str


class CatalogEntry(TypedDict):
    """A file as released in one models/ folder, with its components."""

    directory: str
    components: list[CatalogRecord]


@functools.cache
def catalog() -> dict[str, list[CatalogEntry]]:
    """file name -> entries (one per models/ folder the name is released in), loaded once."""
    # the parse allocates ~30k small objects: without this, a full collection of the host's heap
    # (torch, ComfyUI) can run mid-parse and cost tens of ms on the first lookup
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with CATALOG_PATH.open(encoding="utf-8") as f:
            files: dict[str, list[CatalogEntry]] = json.load(f)["files"]
            return files
    finally:
        if gc_was_enabled:
            gc.enable()


def normalise_name(file_name: str) -> str:
    """``Wan2.1_T2V_14B_fp16.safetensors`` -> ``wan21t2v14bfp16``: case, separators, folder, extension."""
    name = file_name.replace("\\", "/").rsplit("/", 1)[-1].lower()
    for ext in _EXTENSIONS:
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return re.sub(r"[^a-z0-9]", "", name)


@functools.cache
def _normalised_index() -> dict[str, str]:
    return {normalise_name(name): name for name in catalog()}


def catalog_name(file_name: str) -> str | None:
    """The catalog's name for ``file_name`` (exact base name first, then normalised), or None."""
    base = file_name.replace("\\", "/").rsplit("/", 1)[-1]
    if base in catalog():
        return base
    return _normalised_index().get(normalise_name(base))


def _decode_blocks(runs: Iterable[BlockRun]) -> tuple[Block, ...]:
    blocks: list[Block] = []
    for name, first, count, size in runs:
        if first is None:
            blocks.append(Block(name, size))
        else:
            blocks += [Block(f"{name}.{first + i}", size) for i in range(count)]
    return tuple(blocks)


def _from_record(record: CatalogRecord, file: str, source: str = "catalog", note: str = "") -> ComponentInfo:
    return ComponentInfo(
        kind=record["kind"],
        file=file,
        family=record["family"],
        dtype=record["dtype"],
        bytes=record["bytes"],
        blocks=_decode_blocks(record["blocks"]),
        source=source,
        note="; ".join(p for p in (note, record.get("note", "")) if p),
    )


@functools.lru_cache(maxsize=1024)
def _catalog_components(name: str, kind: str | None) -> tuple[ComponentInfo, ...]:
    entries = catalog()[name]
    folders = KIND_FOLDERS.get(kind or "", ())
    # the release in the kind's folder, else one that holds that kind (a checkpoint's text encoder)
    entry = next((e for f in folders for e in entries if e["directory"] == f), None) or next(
        (e for e in entries if any(c["kind"] == kind for c in e["components"])), entries[0]
    )
    return tuple(_from_record(r, name) for r in entry["components"])


# --- lookup ----------------------------------------------------------------------------------------

# Where a loader's file name is, by the host's own rule: (file name, kind) -> the file, or None where the
# host would not open it. The host adapter's finder (nodes/host/lookups.HostModelFiles) answers only
# names the host lists, so a name from a client (an absolute path, "../") never reaches the disk.
ModelFinder = Callable[[str, str | None], Path | None]
# What the planner reads model files from: folders searched by name (the command line's --models-dir,
# chosen by the user who runs it), a host's finder, or nothing (the catalog and names only).
ModelsDir = Path | Sequence[Path] | ModelFinder | None


def lookup(file_name: str, kind: str | None = None, models_dir: ModelsDir = None) -> ComponentInfo:
    """Size, dtype, family and blocks of the model file ``file_name`` as loaded for ``kind``.

    A checkpoint looked up with ``kind`` None or "checkpoint" is summarised as one ComponentInfo of kind
    "checkpoint" (its parts: ``lookup_components``); with a kind, its part(s) of that kind are returned
    (several text encoders merged into one, as ComfyUI loads them as one CLIP).
    Raises ComponentError for a corrupt or truncated safetensors file found under ``models_dir``.
    """
    return _select(lookup_components(file_name, kind, models_dir), kind, file_name)


def lookup_components(
    file_name: str, kind: str | None = None, models_dir: ModelsDir = None
) -> list[ComponentInfo]:
    """Every component of ``file_name`` (one, or several for a single-file checkpoint)."""
    if callable(models_dir):
        found = models_dir(file_name, kind)
        if found is not None:
            return _from_file(found, kind)
    for root in model_roots(models_dir):
        path = find_model_file(file_name, kind, root)
        if path is not None:
            return _from_file(path, kind)
    name = catalog_name(file_name)
    if name is not None:
        return list(_catalog_components(name, kind))
    return [estimate_from_name(file_name, kind)]


def model_roots(models_dir: ModelsDir) -> list[Path]:
    """The models folders to search: one, several, or none (a finder searches by its own rule)."""
    if models_dir is None or callable(models_dir):
        return []
    if isinstance(models_dir, (str, Path)):
        return [Path(models_dir)]
    return [Path(p) for p in models_dir]


def find_model_file(file_name: str, kind: str | None, models_dir: Path) -> Path | None:
    """``models_dir/<folder>/<file_name>`` for the kind's folders first, then every other folder."""
    folders = KIND_FOLDERS.get(kind or "", ())
    for folder in folders + tuple(f for f in ALL_FOLDERS if f not in folders):
        path = models_dir / folder / file_name
        if path.is_file():
            return path
    return None


def _from_file(path: Path, kind: str | None) -> list[ComponentInfo]:
    stat = path.stat()
    return list(_describe_cached(str(path), kind, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=256)
def _describe_cached(path: str, kind: str | None, mtime_ns: int, size: int) -> tuple[ComponentInfo, ...]:
    file = Path(path)
    if file.suffix.lower() == ".gguf" and kind in _GGUF_KINDS and gguf_reader_available():
        return (describe_gguf(file, kind),)  # the GGUF header: ComfyUI-GGUF's loaders, quantized sizes
    if file.suffix.lower() not in (".safetensors", ".sft"):
        guess = estimate_from_name(file.name, kind)
        note = f"size of the {file.suffix} file on disk (pickle files are never opened)"
        if file.suffix.lower() == ".gguf":
            note = (
                "size of the .gguf file on disk (its header is read with the gguf package: pip install gguf)"
            )
        return (ComponentInfo(guess.kind, file.name, guess.family, guess.dtype, size, (), "estimate", note),)
    info = describe_file(file, None if kind == "checkpoint" else kind)
    return tuple(info) if isinstance(info, list) else (info,)


def _select(parts: list[ComponentInfo], kind: str | None, file_name: str) -> ComponentInfo:
    if len(parts) == 1:
        return parts[0]
    if kind in (None, "checkpoint"):
        main = next((p for p in parts if p.kind == "diffusion_model"), parts[0])
        listing = ", ".join(f"{p.kind} {p.family} {p.bytes} B" for p in parts)
        return ComponentInfo(
            "checkpoint", parts[0].file, main.family, main.dtype, sum(p.bytes for p in parts), (),
            parts[0].source, f"checkpoint: {listing}",
        )  # fmt: skip
    chosen = [p for p in parts if p.kind == kind]
    if not chosen:
        raise ComponentError(f"{file_name}: has no {kind} (it holds {', '.join(p.kind for p in parts)})")
    return merge_parts(chosen)


def merge_parts(chosen: list[ComponentInfo]) -> ComponentInfo:
    """Parts the host loads as one object (SDXL/SD3/Flux text encoders: one CLIP) as one component."""
    if len(chosen) == 1:
        return chosen[0]
    kind = chosen[0].kind
    blocks = tuple(Block(f"{p.family}.{b.name}", b.bytes) for p in chosen for b in p.blocks)
    family = "+".join(str(p.family) for p in chosen)
    note = "text encoders loaded together: " + ", ".join(f"{p.family} {p.bytes} B" for p in chosen)
    return ComponentInfo(
        kind,
        chosen[0].file,
        family,
        chosen[0].dtype,
        sum(p.bytes for p in chosen),
        blocks,
        chosen[0].source,
        note,
    )


# --- estimates from the name -----------------------------------------------------------------------

# name token -> catalog family it stands for; the first match wins, so specific before generic
_FAMILY_TOKENS: tuple[tuple[str, str], ...] = (
    ("wan2.2_ti2v", "wan22"), ("wan22_ti2v", "wan22"), ("ti2v_5b", "wan22"), ("wan2.2_vae", "wan22_vae"),
    ("wan_2.1_vae", "wan21_vae"), ("wan2_1_vae", "wan21_vae"), ("wan", "wan21"), ("chroma", "chroma"),
    ("flux", "flux"), ("qwen_image", "qwen_image"), ("qwen-image", "qwen_image"),
    ("hunyuan_video", "hunyuan_video"), ("hunyuanvideo", "hunyuan_video"), ("hidream", "hidream"),
    ("ltx", "ltxv"), ("lumina", "lumina2"), ("neta", "lumina2"), ("omnigen2", "omnigen2"), ("sd3", "sd3"),
    ("sd_xl", "sdxl"), ("sdxl", "sdxl"), ("v1-5", "sd15"), ("sd15", "sd15"), ("umt5", "umt5xxl"),
    ("t5xxl", "t5xxl"), ("clip_l", "clip_l"), ("clip_g", "clip_g"), ("qwen_2.5_vl", "qwen25_vl_7b"),
    ("qwen2.5", "qwen25_vl_7b"), ("llama", "llama3_8b"), ("gemma_2_2b", "gemma2_2b"),
    ("clip_vision", "clip_vision_h"), ("esrgan", "esrgan"), ("4x", "esrgan"),
)  # fmt: skip
# dtype token -> (ComponentInfo.dtype, bytes per parameter)
_DTYPE_TOKENS: tuple[tuple[str, str, float], ...] = (
    ("nvfp4", "fp4", 0.5), ("fp4", "fp4", 0.5), ("int4", "int4", 0.5), ("q4", "gguf_q4", 0.5625),
    ("q5", "gguf_q5", 0.6875), ("q6", "gguf_q6", 0.8125), ("q8", "gguf_q8", 1.0625), ("int8", "int8", 1.0),
    ("e5m2", "fp8_e5m2", 1.0), ("fp8", "fp8_e4m3fn", 1.0), ("e4m3", "fp8_e4m3fn", 1.0), ("bf16", "bf16", 2.0),
    ("fp16", "fp16", 2.0), ("fp32", "fp32", 4.0),
)  # fmt: skip
_BYTES_PER: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3fn": 1, "fp8_e5m2": 1}
# "14B", "1.3B", "llama_3.1_8b" (8B, not 1.8B), "gemma_3_12B" (12B, not 3.12B)
_PARAMS = re.compile(r"(?<![a-z0-9.])(\d+)(?:\.(\d+))?b(?![a-z])")
_RANK = re.compile(r"(?:rank|lora)[_-]?(\d+)(?![\d.]*b(?![a-z]))")  # "rank32", "lora-384"


def _name_dtype(name: str) -> tuple[str, float] | None:
    for token, dtype, per in _DTYPE_TOKENS:
        if token in name:
            return (dtype + "_scaled" if dtype.startswith("fp8") and "scaled" in name else dtype), per
    return None


def _name_params(name: str) -> float | None:
    match = _PARAMS.search(name)
    if match is None:
        return None
    whole, frac = match.groups()
    return float(f"{whole}.{frac}" if frac else whole) * 1e9


def _entry_params(info: ComponentInfo) -> float:
    return info.bytes / _BYTES_PER.get(info.dtype.removesuffix("_scaled"), 2)


def estimate_from_name(file_name: str, kind: str | None = None) -> ComponentInfo:
    """Estimate a file nobody catalogued from its name; always source "estimate", reasons in ``note``."""
    base = file_name.replace("\\", "/").rsplit("/", 1)[-1]
    name = base.lower()
    family = next((fam for token, fam in _FAMILY_TOKENS if token in name), None)
    dtype = _name_dtype(name)
    params = _name_params(name)
    if kind is None and ("lora" in name or _RANK.search(name)):
        kind = "lora"
    candidates = _catalog_by_family(family, kind) if family else []
    if candidates:
        ref = min(candidates, key=lambda c: abs(_entry_params(c) - params) if params else -c.bytes)
        scale = 1.0
        notes = [f"estimated from the name, scaled from catalog entry {ref.file}"]
        if dtype is not None:
            scale = dtype[1] / _BYTES_PER.get(ref.dtype.removesuffix("_scaled"), 2)
        own_rank = _RANK.search(name)
        ref_rank = _RANK.search((ref.file or "").lower())
        if ref.kind == "lora" and own_rank and ref_rank:
            scale *= int(own_rank.group(1)) / int(ref_rank.group(1))
        if params and abs(_entry_params(ref) - params) > 0.25 * params:
            scale *= params / _entry_params(ref)
            notes.append(f"rescaled to {params / 1e9:g}B parameters")
        blocks = tuple(Block(b.name, int(b.bytes * scale)) for b in ref.blocks)
        return ComponentInfo(
            ref.kind if kind is None else kind, base, ref.family, dtype[0] if dtype else ref.dtype,
            int(ref.bytes * scale), blocks, "estimate", "; ".join(notes),
        )  # fmt: skip
    if params is not None and kind == "lora":  # the name gives the base model's size, not the LoRA's
        per = dtype[1] if dtype else 2.0
        rank_match = _RANK.search(name)
        rank = int(rank_match.group(1)) if rank_match else LORA_DEFAULT_RANK
        share = min(1.0, 2 * rank / LORA_TYPICAL_WIDTH)
        size = int(params * share * per)
        note = (
            f"estimated from the name: a rank-{rank} LoRA of a {params / 1e9:g}B model, "
            f"2 x {rank}/{LORA_TYPICAL_WIDTH} of its weights x {per:g} B"
        )
    elif params is not None:
        per = dtype[1] if dtype else 2.0
        size = int(params * per)
        note = f"estimated from the name: {params / 1e9:g}B parameters x {per:g} B"
    else:
        size = DEFAULT_BYTES.get(kind or "", 24 * GiB)
        note = f"unknown file: conservative default for a {kind or 'model'} ({size / GiB:g} GiB)"
    blocks = _assumed_blocks(size, kind)
    if blocks:
        note += f"; assumed {len(blocks)} equal blocks"
    return ComponentInfo(
        kind or "unknown", base, family, dtype[0] if dtype else "bf16", size, blocks, "estimate", note
    )


# A rank-r LoRA of a d_in x d_out layer holds r (d_in + d_out) values, ~2r/width of the layer's.
LORA_TYPICAL_WIDTH = 3072  # hidden size of the common DiTs (Flux, SD3.5, Wan 14B is 5120, LTX 4096)
LORA_DEFAULT_RANK = 64
ASSUMED_BLOCKS = 32  # transformer stacks of unknown models: typical depth, ~95% of the weights
_LAYERED_KINDS = frozenset({"diffusion_model", "text_encoder", "controlnet", "checkpoint", "lora"})


def _assumed_blocks(size: int, kind: str | None) -> tuple[Block, ...]:
    """Equal blocks for an unknown transformer-like file, so the plan can stream it, as hosts can."""
    if kind not in _LAYERED_KINDS:
        return ()
    each = int(size * 0.95) // ASSUMED_BLOCKS
    return tuple(Block(f"block.{i}", each) for i in range(ASSUMED_BLOCKS)) if each else ()


@functools.lru_cache(maxsize=128)
def _catalog_by_family_cached(family: str, kind: str | None) -> tuple[ComponentInfo, ...]:
    found = []
    for name, entries in catalog().items():
        for entry in entries:
            for record in entry["components"]:
                if record["family"] == family and (kind is None or record["kind"] == kind):
                    found.append(_from_record(record, name))
    return tuple(found)


def _catalog_by_family(family: str, kind: str | None) -> list[ComponentInfo]:
    found = _catalog_by_family_cached(family, kind)
    if not found and kind not in (None, "lora"):  # e.g. a diffusion model named after a checkpoint family
        found = _catalog_by_family_cached(family, None)
    found = tuple(
        c for c in found if (c.kind == "lora") == (kind == "lora") and (kind is None or c.kind == kind)
    )
    # scale from a file built with the host's classes (real blocks, rank known) before a solved one
    built = [c for c in found if not c.note.startswith(TEMPLATE_SOURCE)]
    return built or list(found)


def folder_kind(folder: str) -> str | None:
    """The kind a ComfyUI models/ sub-folder holds (``diffusion_models`` -> ``diffusion_model``)."""
    return FOLDER_KINDS.get(folder)


__all__ = [
    "CATALOG_PATH", "KIND_FOLDERS", "ModelFinder", "ModelsDir", "catalog", "catalog_name",
    "estimate_from_name", "find_model_file", "folder_kind", "lookup", "lookup_components", "normalise_name",
]  # fmt: skip
