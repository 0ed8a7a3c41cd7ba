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

The pieces: header.py reads the safetensors header, layouts.py detects the architecture and its block
lists, lora.py describes LoRAs, info.py holds the ComponentInfo this module returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .header import ComponentError, TensorEntry, dominant_dtype, read_header
from .info import Block, ComponentInfo
from .layouts import block_names, block_sizes, detect, generic_layout
from .lora import describe_lora, is_lora


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
    tensors: Mapping[str, TensorEntry],
    *,
    kind: str | None = None,
    file: str | None = None,
    source: str = "header",
) -> ComponentInfo | list[ComponentInfo]:
    """The analysis behind describe_file, on any key -> TensorEntry mapping (the catalog builder uses it)."""
    if kind == "lora" or (kind is None and is_lora(tensors)):
        return describe_lora(tensors, file, source)
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
    tensors: Mapping[str, TensorEntry],
) -> list[tuple[str, str | None, dict[str, TensorEntry]]]:
    if not any(k.startswith(_CHECKPOINT_MARKERS) for k in tensors):
        return [("", None, dict(tensors))]
    sections: dict[str, tuple[str, dict[str, TensorEntry]]] = {}
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


def _describe_part(
    tensors: Mapping[str, TensorEntry], kind: str | None, file: str | None, source: str, prefix: str
) -> ComponentInfo:
    total = sum(t.nbytes for t in tensors.values())
    dtype, dtype_note = dominant_dtype(tensors)
    notes = [f"keys under {prefix!r}"] if prefix else []
    if kind == "other":
        return ComponentInfo("other", file, None, dtype, total, (), source, "; ".join(notes + [_OTHER_NOTE]))
    keys, stripped = _strip_to_known(tensors, kind)
    layout = detect(keys, stripped, kind)
    if layout is None:
        layout = generic_layout(stripped, kind or "unknown")
    names = block_names(stripped, layout)
    sizes = block_sizes(stripped, [n for n in names if "." not in n])
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
    tensors: Mapping[str, TensorEntry], kind: str | None
) -> tuple[frozenset[str], Mapping[str, TensorEntry]]:
    """Drop wrapper prefixes (``transformer.``, ``model.``, ``diffusion_model.``) until a layout is known."""
    current: Mapping[str, TensorEntry] = tensors
    for _ in range(3):
        keys = frozenset(current)
        if detect(keys, current, kind) is not None:
            return keys, current
        # a stray scalar beside the wrapper (an SD checkpoint's cond_stage_model.logit_scale) stays as it is
        first = {k.split(".", 1)[0] for k in keys if "." in k}
        if len(first) != 1:
            break
        (head,) = first
        inner = {(k[len(head) + 1 :] if "." in k else k): v for k, v in current.items()}
        if len(inner) != len(current):  # a scalar of the same name as an inner key: leave it
            break
        current = inner
    return frozenset(tensors), tensors
