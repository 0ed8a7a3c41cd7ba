"""What a model file holds: its components, their bytes, dtype, family and streamable blocks.

Only the safetensors header is read (8-byte little-endian length, then JSON), never the weights, and
nothing is ever unpickled: .ckpt/.pt/.pth/.bin files are refused with a message saying why.

Conventions (the planner and the block streamer rely on them):
- ``bytes`` is the sum of the tensor bytes (the file is a few KB larger: header and padding).
- ``blocks`` are the streamable blocks in forward order, named by their state-dict prefix relative to
  the component (``double_blocks.3``, ``blocks.17``, ``model.layers.5``), i.e. the prefix that ComfyUI
  strips when it loads the component. Everything else (embeddings, heads, norms, modulation, refiners
  that are not block lists) is the *rest*: ``ComponentInfo.rest_bytes``, weights that stay resident
  while the blocks stream. VAEs, upscalers and unknown small models have no blocks: they run whole.
- A single-file checkpoint yields one ComponentInfo per component (diffusion model, each text
  encoder, VAE, plus an ``other`` entry for weights ComfyUI never loads, e.g. EMA copies).
- Unknown layouts fall back to a generic rule (numbered module lists that hold the bytes), said in
  ``note``; family is then None.
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

KINDS = frozenset(
    {
        "checkpoint", "diffusion_model", "text_encoder", "vae", "controlnet", "clip_vision", "upscale_model",
        "lora", "model_patch", "audio_encoder", "style_model", "other", "unknown",
    }
)  # fmt: skip
SOURCES = frozenset({"header", "catalog", "estimate"})

# safetensors dtype code -> (our name, bits per element)
_DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("fp64", 64), "F32": ("fp32", 32), "F16": ("fp16", 16), "BF16": ("bf16", 16),
    "F8_E4M3": ("fp8_e4m3fn", 8), "F8_E5M2": ("fp8_e5m2", 8), "F8_E8M0": ("fp8_e8m0fnu", 8),
    "F6_E2M3": ("fp6_e2m3", 6), "F6_E3M2": ("fp6_e3m2", 6), "F4": ("fp4_e2m1", 4),
    "I64": ("int64", 64), "I32": ("int32", 32), "I16": ("int16", 16), "I8": ("int8", 8),
    "U64": ("uint64", 64), "U32": ("uint32", 32), "U16": ("uint16", 16), "U8": ("uint8", 8),
    "BOOL": ("bool", 8), "C64": ("complex64", 64),
}  # fmt: skip
_MAX_HEADER = 100_000_000  # the limit safetensors itself enforces
_PICKLE_SUFFIXES = {".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle"}


class ComponentError(ValueError):
    """A model file that cannot be described: corrupt, truncated, not safetensors, or pickle-based."""


@dataclass(frozen=True)
class Block:
    name: str
    bytes: int


@dataclass(frozen=True)
class ComponentInfo:
    kind: str
    file: str | None
    family: str | None
    dtype: str
    bytes: int
    blocks: tuple[Block, ...]
    source: str
    note: str = ""

    @property
    def rest_bytes(self) -> int:
        """Weights outside the streamable blocks (embeddings, heads, norms): resident while streaming."""
        return self.bytes - sum(b.bytes for b in self.blocks)

    @property
    def largest_block(self) -> int:
        return max((b.bytes for b in self.blocks), default=0)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One header entry: safetensors dtype code (``BF16``, ``F8_E4M3``...) and shape."""

    dtype: str
    shape: tuple[int, ...]
    start: int = field(default=0, repr=False, compare=False)  # byte offset in the data section
    nbytes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # computed once: a header has thousands of entries and every pass sums them
        object.__setattr__(self, "nbytes", (math.prod(self.shape) * _DTYPES[self.dtype][1] + 7) // 8)


def dtype_name(code: str) -> str:
    """safetensors dtype code -> the name used in ComponentInfo.dtype (``F8_E4M3`` -> ``fp8_e4m3fn``)."""
    return _DTYPES[code][0]


# --- reading the header ----------------------------------------------------------------------------


def read_header(path: Path) -> tuple[dict[str, TensorSpec], dict[str, str]]:
    """Tensors and ``__metadata__`` of a safetensors file, reading the header bytes only."""
    path = Path(path)
    if path.suffix.lower() in _PICKLE_SUFFIXES:
        raise ComponentError(
            f"{path}: {path.suffix} files are pickle-based and Headroom never unpickles a file "
            "(it can run code); use the .safetensors version of this model"
        )
    if path.suffix.lower() == ".gguf":
        raise ComponentError(f"{path}: GGUF files are not safetensors; their size is taken from the file")
    try:
        size = path.stat().st_size
        with path.open("rb", buffering=0) as f:
            return parse_header(f, size, str(path))
    except OSError as exc:
        raise ComponentError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def parse_header(f: BinaryIO, file_size: int, name: str) -> tuple[dict[str, TensorSpec], dict[str, str]]:
    """Parse and validate a safetensors header from ``f`` (positioned at 0); reads 8 + N bytes."""
    head = _read_exact(f, 8)
    if len(head) < 8:
        raise ComponentError(f"{name}: not a safetensors file: {file_size} bytes, too short for a header")
    (length,) = struct.unpack("<Q", head)
    if length > min(file_size - 8, _MAX_HEADER):
        if head[:2] == b"PK" or head[:1] == b"\x80":  # only now: a valid length may start with these bytes
            raise ComponentError(
                f"{name}: this is a pickle/zip torch checkpoint, not safetensors; "
                "Headroom never unpickles files"
            )
        raise ComponentError(
            f"{name}: bad header length {length} for a {file_size}-byte file (not safetensors, or truncated)"
        )
    raw = _read_exact(f, length)
    if len(raw) < length:
        raise ComponentError(f"{name}: truncated header ({len(raw)} of {length} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ComponentError(f"{name}: header is not JSON ({exc}); not a safetensors file?") from exc
    if not isinstance(header, dict):
        raise ComponentError(f"{name}: header is JSON but not an object")
    data_len = file_size - 8 - length
    metadata = header.pop("__metadata__", None) or {}
    tensors: dict[str, TensorSpec] = {}
    for key, entry in header.items():
        tensors[key] = _tensor_entry(name, key, entry, data_len)
    return tensors, {str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, dict) else {}


def _read_exact(f: BinaryIO, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = f.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _tensor_entry(name: str, key: str, entry: object, data_len: int) -> TensorSpec:
    try:
        dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]  # type: ignore[index]
        if dtype not in _DTYPES:
            raise ComponentError(f"{name}: tensor {key!r} has unknown dtype {dtype!r}")
        if not all(isinstance(d, int) and d >= 0 for d in shape) or not isinstance(start, int):
            raise TypeError
        spec = TensorSpec(dtype, tuple(shape), start)
    except ComponentError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ComponentError(f"{name}: malformed header entry for tensor {key!r}: {entry!r}") from exc
    if not (0 <= start <= end) or end - start != spec.nbytes:
        raise ComponentError(f"{name}: tensor {key!r}: offsets {start}..{end} do not match {dtype} {shape}")
    if end > data_len:
        raise ComponentError(
            f"{name}: tensor {key!r} ends at byte {end} of the data but the file holds only {data_len} "
            "(truncated download?)"
        )
    return spec


# --- describing ------------------------------------------------------------------------------------


def describe_file(path: Path, kind: str | None = None) -> ComponentInfo | list[ComponentInfo]:
    """Describe a safetensors model file from its header (source "header").

    Returns one ComponentInfo, or a list for a multi-component checkpoint. With ``kind`` given
    ("diffusion_model", "vae"...), a checkpoint yields its component(s) of that kind; ``kind="checkpoint"``
    always yields the list. Raises ComponentError for anything that is not a valid safetensors file.
    """
    tensors, metadata = read_header(Path(path))
    if not tensors:
        raise ComponentError(f"{path}: safetensors file holds no tensors")
    return describe_tensors(tensors, kind=kind, file=Path(path).name, source="header")


def describe_tensors(
    tensors: Mapping[str, TensorSpec],
    *,
    kind: str | None = None,
    file: str | None = None,
    source: str = "header",
) -> ComponentInfo | list[ComponentInfo]:
    """The analysis behind describe_file, on any key -> TensorSpec mapping (the catalog builder uses it)."""
    if kind == "lora" or (kind is None and _is_lora(tensors)):
        return _describe_lora(tensors, file, source)
    parts = _split_checkpoint(tensors)
    if len(parts) == 1 and kind != "checkpoint":
        prefix, hint, sub = parts[0]
        return _describe_part(sub, kind or hint, file, source, prefix)
    infos = [_describe_part(sub, hint, file, source, prefix) for prefix, hint, sub in parts]
    infos.sort(key=lambda i: _KIND_ORDER.get(i.kind, len(_KIND_ORDER)))  # stable: file order within a kind
    if kind in (None, "checkpoint"):
        return infos
    chosen = [i for i in infos if i.kind == kind]
    if not chosen:
        raise ComponentError(
            f"{file}: checkpoint has no {kind} (it holds {', '.join(i.kind for i in infos)})"
        )
    return chosen[0] if len(chosen) == 1 else chosen


# Checkpoint sections as ComfyUI saves/loads them (comfy/sd.py, supported_models*.py).
_SECTION_PREFIXES: tuple[tuple[str, str], ...] = (
    ("model.diffusion_model.", "diffusion_model"),
    ("first_stage_model.", "vae"),
    ("cond_stage_model.", "text_encoder"),
)
_INDEXED_SECTIONS = (("conditioner.embedders.", "text_encoder"), ("text_encoders.", "text_encoder"))
_KIND_ORDER = {"diffusion_model": 0, "text_encoder": 1, "clip_vision": 2, "vae": 3}
_CHECKPOINT_MARKERS = (
    "model.diffusion_model.",
    "first_stage_model.",
    "cond_stage_model.",
    "conditioner.embedders.",
)


def _split_checkpoint(
    tensors: Mapping[str, TensorSpec],
) -> list[tuple[str, str | None, dict[str, TensorSpec]]]:
    if not any(k.startswith(_CHECKPOINT_MARKERS) for k in tensors):
        return [("", None, dict(tensors))]
    sections: dict[str, tuple[str, dict[str, TensorSpec]]] = {}
    for key, spec in tensors.items():
        prefix, hint = _section_of(key)
        sections.setdefault(prefix, (hint, {}))[1][key[len(prefix) :]] = spec
    return [(p, h, sub) for p, (h, sub) in sections.items()]


def _section_of(key: str) -> tuple[str, str]:
    for prefix, hint in _SECTION_PREFIXES:
        if key.startswith(prefix):
            return prefix, hint
    for prefix, hint in _INDEXED_SECTIONS:  # one component per embedder / per named text encoder
        if key.startswith(prefix):
            name = key[len(prefix) :].split(".", 1)[0]
            return f"{prefix}{name}.", hint
    if key.startswith("vae."):  # LTXV and some all-in-one checkpoints
        return "vae.", "vae"
    return "", "other"  # EMA copies (model_ema.), schedule buffers: not loaded by ComfyUI


@dataclass(frozen=True)
class _Layout:
    kind: str
    family: str | None
    # In forward order: a numbered module list gives one block per index; "=name" is one whole module
    # streamed as a single block (the UNet's middle_block).
    lists: tuple[str, ...] = ()
    note: str = ""
    order: tuple[str, ...] | None = None  # explicit block order when lists interleave (Wan VACE)


def _describe_part(
    tensors: Mapping[str, TensorSpec], kind: str | None, file: str | None, source: str, prefix: str
) -> ComponentInfo:
    total = sum(t.nbytes for t in tensors.values())
    dtype, dtype_note = _dominant_dtype(tensors)
    notes = [f"keys under {prefix!r}"] if prefix else []
    if kind == "other":
        return ComponentInfo("other", file, None, dtype, total, (), source, "; ".join(notes + [_OTHER_NOTE]))
    keys, stripped = _strip_to_known(tensors, kind)
    layout = _detect(keys, stripped, kind)
    if layout is None:
        layout = _generic_layout(stripped, kind or "unknown")
    names = _block_names(stripped, layout)
    sizes = _block_sizes(stripped, [n for n in names if "." not in n])
    blocks = tuple(Block(n, sizes[n]) for n in names)
    if layout.note:
        notes.append(layout.note)
    if layout.kind not in ("vae", "upscale_model") and blocks:
        notes.append(f"{len(blocks)} blocks, largest {max(b.bytes for b in blocks)} B")
    if dtype_note:
        notes.append(dtype_note)
    return ComponentInfo(layout.kind, file, layout.family, dtype, total, blocks, source, "; ".join(notes))


_OTHER_NOTE = "weights ComfyUI does not load from a checkpoint (EMA copies, schedule buffers)"


def _strip_to_known(
    tensors: Mapping[str, TensorSpec], kind: str | None
) -> tuple[frozenset[str], Mapping[str, TensorSpec]]:
    """Drop wrapper prefixes (``transformer.``, ``model.``, ``diffusion_model.``) until a layout is known."""
    current: Mapping[str, TensorSpec] = tensors
    for _ in range(3):
        keys = frozenset(current)
        if _detect(keys, current, kind) is not None:
            return keys, current
        first = {k.split(".", 1)[0] for k in keys}
        if len(first) != 1 or not all("." in k for k in keys):
            break
        (head,) = first
        current = {k[len(head) + 1 :]: v for k, v in current.items()}
    return frozenset(tensors), tensors


def _dominant_dtype(tensors: Mapping[str, TensorSpec]) -> tuple[str, str]:
    by_dtype: Counter[str] = Counter()
    for t in tensors.values():
        by_dtype[dtype_name(t.dtype)] += t.nbytes
    if not by_dtype:
        return "unknown", ""
    total = sum(by_dtype.values()) or 1
    dominant = by_dtype.most_common(1)[0][0]
    notes = []
    # ComfyUI's "scaled fp8": a `scaled_fp8` marker tensor and a `.scale_weight` per quantised Linear.
    scaled = any(k == "scaled_fp8" or k.endswith((".scaled_fp8", ".scale_weight")) for k in tensors)
    if dominant.startswith("fp8") and scaled:
        dominant += "_scaled"
    if any(k.endswith(".comfy_quant") for k in tensors):
        notes.append("mixed precision (comfy_quant layers)")
    if by_dtype.most_common(1)[0][1] / total < 0.9:
        notes.append(
            "dtypes by bytes: " + ", ".join(f"{d} {100 * b / total:.0f}%" for d, b in by_dtype.most_common())
        )
    return dominant, "; ".join(notes)


@functools.lru_cache(maxsize=1 << 16)
def _split_numbered(key: str) -> tuple[str, int] | None:
    """``double_blocks.3.img_attn.qkv.weight`` -> (``double_blocks``, 3): the first numeric component."""
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.isdigit():
            return ".".join(parts[:i]), int(part)
    return None


def _block_sizes(tensors: Mapping[str, TensorSpec], whole: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = defaultdict(int)
    wanted = tuple(w + "." for w in whole)
    for key, spec in tensors.items():
        numbered = _split_numbered(key)
        if numbered is not None:
            sizes[f"{numbered[0]}.{numbered[1]}"] += spec.nbytes
        if wanted and key.startswith(wanted):
            sizes[key.split(".", 1)[0]] += spec.nbytes
    return sizes


@functools.lru_cache(maxsize=16)
def _list_indices(keys: frozenset[str]) -> dict[str, frozenset[int]]:
    """Numbered module lists and their indices; cached per key set (detectors ask many times)."""
    found: dict[str, set[int]] = defaultdict(set)
    for key in keys:
        numbered = _split_numbered(key)
        if numbered is not None:
            found[numbered[0]].add(numbered[1])
    return {name: frozenset(idx) for name, idx in found.items()}


def _block_names(tensors: Mapping[str, TensorSpec], layout: _Layout) -> list[str]:
    if layout.order is not None:
        return list(layout.order)
    indices = _list_indices(frozenset(tensors))
    names: list[str] = []
    for name in layout.lists:
        if name.startswith("="):
            if any(k.startswith(name[1:] + ".") for k in tensors):
                names.append(name[1:])
        else:
            names += [f"{name}.{i}" for i in sorted(indices.get(name, ()))]
    return names


def _generic_layout(tensors: Mapping[str, TensorSpec], kind: str) -> _Layout:
    """Unknown layout: numbered module lists holding >= 10% of the bytes each are the blocks."""
    total = sum(t.nbytes for t in tensors.values()) or 1
    per_list: Counter[str] = Counter()
    counts: dict[str, set[int]] = defaultdict(set)
    for key, spec in tensors.items():
        numbered = _split_numbered(key)
        if numbered is not None:
            per_list[numbered[0]] += spec.nbytes
            counts[numbered[0]].add(numbered[1])
    lists = sorted(n for n, b in per_list.items() if b >= 0.1 * total and len(counts[n]) >= 2)
    if kind in ("vae", "upscale_model"):
        lists = []
    desc = ", ".join(f"{n} x{len(counts[n])}" for n in lists) or "none"
    return _Layout(
        kind, None, tuple(lists), note=f"unknown layout; generic rule (numbered lists >=10% of bytes): {desc}"
    )


# --- family detectors ------------------------------------------------------------------------------
# Each looks at the key set (prefix stripped) and shapes, as comfy/model_detection.py does, and says
# which numbered lists are the blocks, in the order the model's forward() runs them.

Detector = Callable[[frozenset[str], Mapping[str, TensorSpec]], "_Layout | None"]


def _shape(t: Mapping[str, TensorSpec], key: str, dim: int) -> int | None:
    spec = t.get(key)
    return spec.shape[dim] if spec is not None and len(spec.shape) > dim else None


def _count(keys: frozenset[str], name: str) -> int:
    """How many entries the numbered list ``name`` has (``encoder.block`` -> 24)."""
    return len(_list_indices(keys).get(name, ()))


def _flux_like(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    if (
        "txt_in.individual_token_refiner.blocks.0.norm1.weight" in keys
        or "double_blocks.0.img_attn_qkv.weight" in keys
    ):
        # HunyuanVideo: released files say img_attn_qkv, ComfyUI's module img_attn.qkv; the lists match
        nd, ns = _count(keys, "double_blocks"), _count(keys, "single_blocks")
        hidden = _shape(t, "img_in.proj.weight", 0)
        fam = "hunyuan_image" if "byt5_in.fc1.weight" in keys else "hunyuan_video"
        note = f"{nd} double + {ns} single blocks, hidden {hidden}"
        return _Layout("diffusion_model", fam, ("double_blocks", "single_blocks"), note=note)
    if "latent_in.weight" in keys and "double_blocks.0.img_attn.qkv.weight" in keys:
        return _Layout("diffusion_model", "hunyuan3d2", ("double_blocks", "single_blocks"))
    if "double_blocks.0.img_attn.qkv.weight" in keys and "single_blocks.0.linear1.weight" in keys:
        nd, ns = _count(keys, "double_blocks"), _count(keys, "single_blocks")
        hidden = _shape(t, "double_blocks.0.img_attn.qkv.weight", 1)
        shape = f"{nd} double + {ns} single blocks, hidden {hidden}"
        if any(k.startswith("distilled_guidance_layer.") for k in keys):
            if any(k.startswith("nerf_blocks.") for k in keys):
                return _Layout(
                    "diffusion_model",
                    "chroma_radiance",
                    ("double_blocks", "single_blocks", "nerf_blocks"),
                    note=shape,
                )
            return _Layout("diffusion_model", "chroma", ("double_blocks", "single_blocks"), note=shape)
        in_ch = (_shape(t, "img_in.weight", 1) or 64) // 4
        variant = {16: "", 32: ", canny/depth (32 in-channels)", 96: ", fill/inpaint (96 in-channels)"}.get(
            in_ch, f", {in_ch} in-channels"
        )
        guidance = (
            "guidance-distilled (dev)"
            if "guidance_in.in_layer.weight" in keys
            else "no guidance embed (schnell)"
        )
        return _Layout(
            "diffusion_model",
            "flux",
            ("double_blocks", "single_blocks"),
            note=f"{shape}; {guidance}{variant}",
        )
    return None


_WAN_TYPES = (
    ("vace_patch_embedding.weight", "VACE"),
    ("control_adapter.conv.weight", "camera control"),
    ("casual_audio_encoder.encoder.final_linear.weight", "S2V"),
    ("audio_proj.audio_proj_glob_1.layer.bias", "HuMo"),
    ("face_adapter.fuser_blocks.0.k_norm.weight", "Animate"),
    ("img_emb.emb_pos", "FLF2V"),
    ("img_emb.proj.0.bias", "I2V (CLIP-vision image embedding)"),
)


def _wan(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    if "head.modulation" not in keys or "blocks.0.self_attn.q.weight" not in keys:
        return None
    dim = _shape(t, "blocks.0.self_attn.q.weight", 0)
    out_dim = (_shape(t, "head.head.weight", 0) or 64) // 4
    in_dim = _shape(t, "patch_embedding.weight", 1)
    ffn = _shape(t, "blocks.0.ffn.0.weight", 0)
    n = _count(keys, "blocks")
    model_type = next((label for key, label in _WAN_TYPES if key in keys), "T2V")
    # Wan 2.2 TI2V-5B is the only one on the 48-channel Wan 2.2 VAE latent; the A14B experts are 2.1-shaped.
    family = "wan22" if out_dim == 48 else "wan21"
    note = f"{model_type}; {n} blocks dim {dim} ffn {ffn}, in_dim {in_dim}"
    nv = _count(keys, "vace_blocks")
    if nv:
        step = max(1, n // nv)  # comfy/ldm/wan/model.py VaceWanModel: vace block k runs after block k*step
        order: list[str] = []
        for i in range(n):
            order.append(f"blocks.{i}")
            if i % step == 0 and i // step < nv:
                order.append(f"vace_blocks.{i // step}")
        return _Layout("diffusion_model", family, note=note + f", {nv} VACE blocks", order=tuple(order))
    return _Layout("diffusion_model", family, ("blocks",), note=note)


def _dit_families(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    if "joint_blocks.0.context_block.attn.qkv.weight" in keys:
        n = _count(keys, "joint_blocks")
        return _Layout("diffusion_model", "sd3", ("joint_blocks",), note=f"MMDiT, {n} joint blocks")
    if "txt_norm.weight" in keys and "img_in.weight" in keys:
        return _Layout(
            "diffusion_model",
            "qwen_image",
            ("transformer_blocks",),
            note=f"{_count(keys, 'transformer_blocks')} blocks",
        )
    if "adaln_single.emb.timestep_embedder.linear_1.bias" in keys:
        if "pos_embed.proj.bias" in keys:
            return _Layout("diffusion_model", "pixart", ("transformer_blocks",))
        return _Layout(
            "diffusion_model",
            "ltxv",
            ("transformer_blocks",),
            note=f"{_count(keys, 'transformer_blocks')} blocks",
        )
    if "caption_projection.0.linear.weight" in keys:
        return _Layout("diffusion_model", "hidream", ("double_stream_blocks", "single_stream_blocks"))
    if "cap_embedder.1.weight" in keys:
        return _Layout("diffusion_model", "lumina2", ("context_refiner", "noise_refiner", "layers"))
    if "time_caption_embed.timestep_embedder.linear_1.bias" in keys:
        return _Layout(
            "diffusion_model", "omnigen2", ("context_refiner", "noise_refiner", "ref_image_refiner", "layers")
        )
    if "t5_yproj.weight" in keys:
        return _Layout("diffusion_model", "mochi", ("blocks",))
    if "genre_embedder.weight" in keys:
        return _Layout("diffusion_model", "ace_step", ("transformer_blocks",))
    return None


_UNET_CONTEXT = {768: "sd15", 1024: "sd2", 2048: "sdxl", 1280: "sdxl_refiner"}


def _unet(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    if "input_blocks.0.0.weight" not in keys or not any(k.startswith("middle_block.") for k in keys):
        return None
    context = next(
        (
            t[k].shape[1]
            for k in sorted(keys)
            if k.startswith("input_blocks.") and k.endswith("attn2.to_k.weight")
        ),
        None,
    )
    family = _UNET_CONTEXT.get(context or 0, "unet")
    if any(".time_stack." in k for k in keys):
        family = "svd"
    note = f"UNet, cross-attention dim {context}"
    return _Layout("diffusion_model", family, ("input_blocks", "=middle_block", "output_blocks"), note=note)


def _controlnet(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    markers = ("controlnet_blocks.0.weight", "input_hint_block.0.weight", "controlnet_x_embedder.weight")
    if not any(m in keys for m in markers) and not any(k.startswith("controlnet_blocks.") for k in keys):
        return None
    bases = (d(keys, t) for d in (_flux_like, _dit_families, _unet, _wan))
    base = next((b for b in bases if b is not None), None)
    if base is None:
        generic = _generic_layout(t, "controlnet")
        family = "sd" if "input_hint_block.0.weight" in keys else None
        return _Layout("controlnet", family, generic.lists, note=generic.note.replace("unknown layout; ", ""))
    return _Layout("controlnet", base.family, base.lists, note=base.note, order=base.order)


_T5_SIZES = {4096: "xxl", 2048: "xl", 1024: "large", 768: "base", 512: "small", 1472: "byt5_small"}
_LLMS = {
    (152064, 3584): "qwen25_7b", (151936, 2048): "qwen25_3b", (151936, 2560): "qwen3_4b",
    (128256, 4096): "llama3_8b", (128320, 4096): "llama3_8b", (256000, 2304): "gemma2_2b",
    (262208, 2560): "gemma3_4b", (262208, 3840): "gemma3_12b",
}  # fmt: skip


def _text_encoders(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    if "encoder.block.0.layer.0.SelfAttention.q.weight" in keys:
        d_model = _shape(t, "encoder.block.0.layer.0.SelfAttention.q.weight", 1) or 0
        vocab = _shape(t, "shared.weight", 0)
        umt5 = "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight" in keys
        size = _T5_SIZES.get(d_model, str(d_model))
        family = size if size.startswith("byt5") else ("umt5" if umt5 else "t5") + size
        n = _count(keys, "encoder.block")
        return _Layout(
            "text_encoder", family, ("encoder.block",), note=f"{n} layers, d_model {d_model}, vocab {vocab}"
        )
    if "text_model.encoder.layers.0.self_attn.q_proj.weight" in keys:
        width = _shape(t, "text_model.encoder.layers.0.self_attn.q_proj.weight", 0)
        family = {768: "clip_l", 1024: "clip_h", 1280: "clip_g"}.get(width or 0, f"clip_{width}")
        positions = _shape(t, "text_model.embeddings.position_embedding.weight", 0)
        note = f"{_count(keys, 'text_model.encoder.layers')} layers, width {width}"
        if positions and positions != 77:
            note += f", long CLIP ({positions} positions)"
        return _Layout("text_encoder", family, ("text_model.encoder.layers",), note=note)
    if "transformer.resblocks.0.attn.in_proj_weight" in keys and "token_embedding.weight" in keys:
        width = _shape(t, "ln_final.weight", 0) or _shape(t, "token_embedding.weight", 1)
        family = {1024: "clip_h", 1280: "clip_g", 768: "clip_l"}.get(width or 0, f"clip_{width}")
        return _Layout(
            "text_encoder", family, ("transformer.resblocks",), note=f"OpenCLIP layout, width {width}"
        )
    if "model.embed_tokens.weight" in keys and any(k.startswith("model.layers.0.") for k in keys):
        vocab = _shape(t, "model.embed_tokens.weight", 0)
        hidden = _shape(t, "model.norm.weight", 0) or _shape(t, "model.embed_tokens.weight", 1)
        family = _LLMS.get((vocab or 0, hidden or 0), f"llm_{hidden}")
        vision = any(k.startswith("visual.blocks.") for k in keys)
        if vision and family.startswith("qwen25"):
            family = family.replace("qwen25", "qwen25_vl")
        note = f"{_count(keys, 'model.layers')} layers, hidden {hidden}, vocab {vocab}" + (
            ", with vision tower" if vision else ""
        )
        lists = ("visual.blocks", "model.layers") if vision else ("model.layers",)  # images are encoded first
        return _Layout("text_encoder", family, lists, note=note)
    return None


def _vaes(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    if "decoder.middle.0.residual.0.gamma" in keys:
        wan22 = "decoder.upsamples.0.upsamples.0.residual.2.weight" in keys
        return _Layout("vae", "wan22_vae" if wan22 else "wan21_vae", note="causal 3D VAE (Wan/Qwen-Image)")
    if "decoder.up_blocks.0.res_blocks.0.conv1.conv.weight" in keys:
        return _Layout("vae", "ltxv_vae")
    if "decoder.conv_in.conv.weight" in keys:
        z = _shape(t, "decoder.conv_in.conv.weight", 1)
        return _Layout("vae", "hunyuan_video_vae" if z == 16 else f"vae3d_{z}ch", note=f"{z} latent channels")
    for key in ("decoder.conv_in.weight", "decoder.conv_in.conv.weight"):
        if key in keys:
            z = _shape(t, key, 1)
            if "decoder.mid.block_1.mix_factor" in keys:
                return _Layout("vae", "svd_vae")
            family = {4: "sd_vae", 16: "flux_vae"}.get(z or 0, f"vae_{z}ch")
            return _Layout("vae", family, note=f"{z} latent channels")
    if "taesd_decoder.1.weight" in keys or "decoder.layers.1.layers.0.beta" in keys:
        return _Layout("vae", "taesd" if "taesd_decoder.1.weight" in keys else "oobleck_vae")
    return None


def _vision_and_others(keys: frozenset[str], t: Mapping[str, TensorSpec]) -> _Layout | None:
    if "vision_model.encoder.layers.0.self_attn.q_proj.weight" in keys:
        width = _shape(t, "vision_model.encoder.layers.0.self_attn.q_proj.weight", 0)
        if "vision_model.pre_layrnorm.weight" not in keys:
            family = "siglip_so400m" if width == 1152 else f"siglip_{width}"
        else:
            family = {1280: "clip_vision_h", 1024: "clip_vision_l", 1664: "clip_vision_g"}.get(
                width or 0, f"clip_vision_{width}"
            )
        return _Layout("clip_vision", family, ("vision_model.encoder.layers",), note=f"width {width}")
    if (
        "conv_first.weight" in keys and "body.0.rdb1.conv1.weight" in keys
    ) or "model.1.sub.0.RDB1.conv1.0.weight" in keys:
        return _Layout("upscale_model", "esrgan", note="RRDB (ESRGAN)")
    if "feature_extractor.conv_layers.0.conv.weight" in keys:
        return _Layout("audio_encoder", "wav2vec2", ("encoder.layers",))
    return None


# Order matters: the more specific layouts first.
_DETECTORS: tuple[Detector, ...] = (
    _controlnet, _flux_like, _wan, _dit_families, _unet, _text_encoders, _vaes, _vision_and_others,
)  # fmt: skip


def _detect(keys: frozenset[str], t: Mapping[str, TensorSpec], kind: str | None) -> _Layout | None:
    for detector in _DETECTORS:
        layout = detector(keys, t)
        if layout is not None:
            if kind and kind != layout.kind and kind != "checkpoint":
                # The caller's loader decides the kind (a model_patch may look like a controlnet).
                note = f"layout of a {layout.kind}" + (f"; {layout.note}" if layout.note else "")
                return _Layout(kind, layout.family, layout.lists, note, layout.order)
            return layout
    return None


# --- LoRA ------------------------------------------------------------------------------------------

_LORA_MARKERS = (
    "lora_up",
    "lora_down",
    "lora_A",
    "lora_B",
    "lora.up",
    "lora.down",
    "lokr_w",
    "hada_w",
    "lora_mid",
)
_LORA_PREFIXES = (
    "diffusion_model.",
    "model.diffusion_model.",
    "transformer.",
    "base_model.model.",
    "unet.",
    "lora_unet_",
)
_BLOCK_NAMES = (
    "double_blocks", "single_blocks", "double_stream_blocks", "single_stream_blocks", "joint_blocks",
    "transformer_blocks", "single_transformer_blocks", "vace_blocks", "blocks", "input_blocks",
    "output_blocks", "layers", "noise_refiner", "context_refiner",
)  # fmt: skip
_LORA_BLOCK = re.compile(r"^(" + "|".join(_BLOCK_NAMES) + r")[._](\d+)[._]")
# diffusers' Flux names -> ComfyUI's, so a LoRA's blocks line up with its base model's
_DIFFUSERS_FLUX = {"transformer_blocks": "double_blocks", "single_transformer_blocks": "single_blocks"}
_LORA_FAMILY_ORDER = {
    "flux": ("double_blocks", "single_blocks"),
    "hunyuan_video": ("double_blocks", "single_blocks"),
    "hidream": ("double_stream_blocks", "single_stream_blocks"),
}


_LORA_RE = re.compile("|".join(re.escape(m) for m in _LORA_MARKERS))


def _is_lora(tensors: Mapping[str, TensorSpec]) -> bool:
    return _LORA_RE.search("\n".join(tensors)) is not None


def _describe_lora(tensors: Mapping[str, TensorSpec], file: str | None, source: str) -> ComponentInfo:
    """A LoRA is a patch on a base model: its bytes are grouped by the base block they patch."""
    total = sum(t.nbytes for t in tensors.values())
    dtype, dtype_note = _dominant_dtype(tensors)
    per_block: dict[str, int] = defaultdict(int)
    text_bytes = 0
    for key, spec in tensors.items():
        body = key
        for prefix in _LORA_PREFIXES:
            if body.startswith(prefix):
                body = body[len(prefix) :]
                break
        if body.startswith(("lora_te", "te_", "text_encoder", "text_encoders.")):
            text_bytes += spec.nbytes
            continue
        match = _LORA_BLOCK.match(body)
        if match:
            per_block[f"{match.group(1)}.{int(match.group(2))}"] += spec.nbytes
    family = _lora_family(tensors, per_block)
    if family == "flux":
        per_block = _rename_blocks(per_block, _DIFFUSERS_FLUX)
    order = _LORA_FAMILY_ORDER.get(family or "", ())
    rank = Counter(
        t.shape[0] for k, t in tensors.items() if ("lora_down" in k or "lora_A" in k) and len(t.shape) >= 2
    ).most_common(1)
    names = sorted(
        per_block, key=lambda n: (_order_index(n, order), n.rsplit(".", 1)[0], int(n.rsplit(".", 1)[1]))
    )
    notes = [f"rank {rank[0][0]}" if rank else "LoRA"]
    if text_bytes:
        notes.append(f"{text_bytes} B patch the text encoder")
    if dtype_note:
        notes.append(dtype_note)
    blocks = tuple(Block(n, per_block[n]) for n in names)
    return ComponentInfo("lora", file, family, dtype, total, blocks, source, "; ".join(notes))


def _order_index(name: str, order: tuple[str, ...]) -> int:
    head = name.rsplit(".", 1)[0]
    return order.index(head) if head in order else len(order)


def _rename_blocks(per_block: Mapping[str, int], mapping: Mapping[str, str]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for name, size in per_block.items():
        head, idx = name.rsplit(".", 1)
        out[f"{mapping.get(head, head)}.{idx}"] += size
    return out


def _lora_family(tensors: Mapping[str, TensorSpec], per_block: Mapping[str, int]) -> str | None:
    keys = " ".join(tensors)
    heads = {n.rsplit(".", 1)[0] for n in per_block}
    if "img_attn.qkv" in keys or "lora_unet_double_blocks" in keys or "single_transformer_blocks" in keys:
        return "flux"  # ComfyUI, kohya (underscored) and diffusers names of Flux's blocks
    if "img_attn_qkv" in keys:
        return "hunyuan_video"
    if {"double_stream_blocks", "single_stream_blocks"} & heads:
        return "hidream"
    if "joint_blocks" in heads:
        return "sd3"
    if "img_mlp" in keys or "img_mod" in keys:
        return "qwen_image"
    if "blocks" in heads and ("self_attn" in keys or "cross_attn" in keys):
        widths = Counter(
            max(t.shape)
            for k, t in tensors.items()
            if ".self_attn.q." in k and ("lora_down" in k or "lora_A" in k)
        )
        width = widths.most_common(1)[0][0] if widths else 0
        return "wan22" if width == 3072 else "wan21"
    if (
        {"input_blocks", "output_blocks"} & heads
        or "lora_unet_down_blocks" in keys
        or "lora_unet_input_blocks" in keys
    ):
        return "sdxl" if "lora_te2_" in keys or "conditioner" in keys else "sd"
    if "layers" in heads:
        return "lumina2"
    return None
