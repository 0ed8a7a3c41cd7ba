"""Reading a safetensors header: tensor dtypes, shapes and offsets, never the weights.

The header is an 8-byte little-endian length, then JSON. Nothing is ever unpickled: .ckpt/.pt/.pth/.bin
files are refused with a message saying why, and so are GGUF files (gguf.py reads their header).
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

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


class TensorEntry(Protocol):
    """What the analyses read of one tensor, whichever header it came from (TensorSpec here, GGUFTensor
    in gguf.py): its dtype name, torch-order shape and the bytes a loader holds."""

    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def nbytes(self) -> int: ...


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
    """safetensors dtype code -> the name used in ComponentInfo.dtype (``F8_E4M3`` -> ``fp8_e4m3fn``);
    a GGUF tensor's dtype (gguf.py: ``gguf_q4_k``, ``fp16``) is that name already."""
    return _DTYPES[code][0] if code in _DTYPES else code


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
        raise ComponentError(f"{path}: GGUF files are not safetensors; memory/models/gguf.py reads them")
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


def dominant_dtype(tensors: Mapping[str, TensorEntry]) -> tuple[str, str]:
    """The dtype holding most bytes (``_scaled`` for ComfyUI's scaled fp8), and a note on any mix."""
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
    if dominant == "uint8" and any(k.endswith(".weight_scale_2") for k in tensors):
        dominant = "nvfp4"  # comfy-kitchen NVFP4: two 4-bit values per byte, fp8 block scales
    if any(k.endswith(".comfy_quant") for k in tensors):
        notes.append("mixed precision (comfy_quant layers)")
    if by_dtype.most_common(1)[0][1] / total < 0.9:
        notes.append(
            "dtypes by bytes: " + ", ".join(f"{d} {100 * b / total:.0f}%" for d, b in by_dtype.most_common())
        )
    return dominant, "; ".join(notes)
