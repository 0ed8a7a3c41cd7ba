"""Describing a GGUF model file (city96/ComfyUI-GGUF's format) from its header: tensors, shapes, quant types.

The header is parsed here (``_parse``) with the ``gguf`` package's types and block sizes; the tensor
data is never read. Tensor names are mapped as the ComfyUI-GGUF loaders map them
(diffusion models: the safetensors names, ``model.diffusion_model.`` stripped; llama.cpp text encoders:
``enc.blk.N.attn_q`` -> ``encoder.block.N.layer.0.SelfAttention.q``...), so the same layout detection
as for safetensors (layouts.py) finds the family and the blocks. ``bytes`` are what the loader holds:
the quantized bytes as they are (it dequantizes in each layer's forward), except a text encoder's
large token embedding, which it dequantizes to fp16 at load.

Without the ``gguf`` package (an optional dependency: ``pip install gguf``) GGUF files are sized from
the file system, as before; ``read_gguf`` raises ComponentError saying so.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..optional import optional_module
from .components import describe_tensors
from .header import ComponentError
from .info import ComponentInfo

# ComfyUI-GGUF's loader.py: the architectures it loads as image models and as text encoders
IMAGE_ARCHS = frozenset(
    {
        "flux",
        "sd1",
        "sdxl",
        "sd3",
        "aura",
        "hidream",
        "cosmos",
        "ltxv",
        "hyvid",
        "wan",
        "lumina2",
        "qwen_image",
    }
)
TEXT_ARCHS = frozenset({"t5", "t5encoder", "llama", "qwen2vl", "qwen3", "qwen3vl"})
_DIFFUSION_PREFIX = "model.diffusion_model."
# llama.cpp tensor names -> the names ComfyUI's text encoder classes use (loader.py T5_SD_MAP/LLAMA_SD_MAP)
_T5_NAMES = (
    ("enc.", "encoder."), (".blk.", ".block."), ("token_embd", "shared"), ("output_norm", "final_layer_norm"),
    ("attn_q", "layer.0.SelfAttention.q"), ("attn_k", "layer.0.SelfAttention.k"),
    ("attn_v", "layer.0.SelfAttention.v"), ("attn_o", "layer.0.SelfAttention.o"),
    ("attn_norm", "layer.0.layer_norm"), ("attn_rel_b", "layer.0.SelfAttention.relative_attention_bias"),
    ("ffn_up", "layer.1.DenseReluDense.wi_1"), ("ffn_down", "layer.1.DenseReluDense.wo"),
    ("ffn_gate", "layer.1.DenseReluDense.wi_0"), ("ffn_norm", "layer.1.layer_norm"),
)  # fmt: skip
_LLAMA_NAMES = (
    ("blk.", "model.layers."), ("attn_norm", "input_layernorm"), ("attn_q_norm.", "self_attn.q_norm."),
    ("attn_k_norm.", "self_attn.k_norm."), ("attn_v_norm.", "self_attn.v_norm."),
    ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"), ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj"),
    ("ffn_gate", "mlp.gate_proj"), ("ffn_norm", "post_attention_layernorm"),
    ("token_embd", "model.embed_tokens"), ("output_norm", "model.norm"), ("output.weight", "lm_head.weight"),
)  # fmt: skip
_FLOAT_NAMES = {"F32": "fp32", "F16": "fp16", "BF16": "bf16", "F64": "fp64"}
_FEATURE = "reading GGUF headers (GGUF files are sized from the disk instead)"
_LARGE_VOCAB = 64 * 1024  # loader.py dequantizes a text encoder's token embedding at least this long


# bytes per parameter of the GGML types (gguf's GGML_QUANT_SIZES: block bytes / block values), by the
# ComponentInfo.dtype names; the catalog's name estimates ("gguf_q4"...) too. For a parameter count.
_GGML_SIZES = {
    "q4_0": (18, 32), "q4_1": (20, 32), "q5_0": (22, 32), "q5_1": (24, 32), "q8_0": (34, 32),
    "q2_k": (84, 256), "q3_k": (110, 256), "q4_k": (144, 256), "q5_k": (176, 256), "q6_k": (210, 256),
    "q4": (18, 32), "q5": (22, 32), "q6": (210, 256), "q8": (34, 32),
}  # fmt: skip
BYTES_PER_PARAM: dict[str, float] = {f"gguf_{k}": b / n for k, (b, n) in _GGML_SIZES.items()}


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One GGUF tensor as the planner sees it: the same fields as header.TensorSpec."""

    dtype: str  # "gguf_q8_0", "fp16"... (the name ComponentInfo.dtype uses)
    shape: tuple[int, ...]  # torch order, the original shape where the file records one
    nbytes: int  # bytes the loader holds (quantized as stored)
    start: int = field(default=0, repr=False, compare=False)  # absolute byte offset in the file
    qtype: str = field(default="", compare=False)  # the GGML type name ("Q8_0", "Q4_K", "F32"...)


def gguf_dtype(qtype: str) -> str:
    """GGML type name -> ComponentInfo.dtype: ``Q4_K`` -> ``gguf_q4_k``, ``F16`` -> ``fp16``."""
    return _FLOAT_NAMES.get(qtype, f"gguf_{qtype.lower()}")


def gguf_reader_available() -> bool:
    """Whether the gguf package imports (else GGUF files are sized from the disk; logged once)."""
    return optional_module("gguf", _FEATURE) is not None


def read_gguf(path: Path) -> tuple[dict[str, GGUFTensor], dict[str, Any]]:
    """Tensors (names as the ComfyUI-GGUF loaders give them) and metadata of a GGUF file; header only.

    Metadata holds ``general.architecture`` (None when the file has none) and every string field.
    """
    gguf = optional_module("gguf", _FEATURE)
    if gguf is None:
        raise ComponentError(f"{path}: reading a GGUF header needs the gguf package (pip install gguf)")
    try:
        size = Path(path).stat().st_size
        with Path(path).open("rb") as f:
            metadata, tensors = _parse(f, size, gguf)
    except ComponentError as exc:
        raise ComponentError(f"{path}: {exc}") from None
    except OSError as exc:
        raise ComponentError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (struct.error, ValueError, UnicodeDecodeError) as exc:  # a bad enum value, a short read
        raise ComponentError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})") from exc
    arch = metadata.get("general.architecture")
    if arch in TEXT_ARCHS:
        tensors = _text_encoder_names(tensors, arch)
    elif any(k.startswith(_DIFFUSION_PREFIX) for k in tensors):  # loader.py keeps only these
        tensors = {
            k[len(_DIFFUSION_PREFIX) :]: v for k, v in tensors.items() if k.startswith(_DIFFUSION_PREFIX)
        }
    return tensors, {**metadata, "general.architecture": arch}


def describe_gguf(path: Path, kind: str | None = None) -> ComponentInfo:
    """A GGUF diffusion model or text encoder as a ComponentInfo (source "header"): family and blocks
    from the tensor names, bytes as the ComfyUI-GGUF loaders hold them."""
    tensors, metadata = read_gguf(Path(path))
    if not tensors:
        raise ComponentError(f"{path}: GGUF file holds no tensors")
    arch = metadata["general.architecture"]
    if kind is None:
        kind = "text_encoder" if arch in TEXT_ARCHS else "diffusion_model"
    info = describe_tensors(tensors, kind=kind, file=Path(path).name, source="header")
    if isinstance(info, list):  # a GGUF file is one model; a checkpoint split cannot happen here
        info = info[0]
    quants = Counter[str]()
    for t in tensors.values():
        quants[t.qtype] += t.nbytes
    if arch is not None and arch not in IMAGE_ARCHS | TEXT_ARCHS:
        arch += " (an architecture ComfyUI-GGUF does not load)"
    note = f"GGUF {arch or 'without an architecture key'}; bytes by type: " + ", ".join(
        f"{q} {b}" for q, b in quants.most_common()
    )
    dtype = gguf_dtype(quants.most_common(1)[0][0])
    return ComponentInfo(
        info.kind, info.file, info.family, dtype, info.bytes, info.blocks, "header",
        "; ".join(p for p in (note, info.note) if p),
    )  # fmt: skip


# --- the header ------------------------------------------------------------------------------------
# Parsed here rather than with gguf.GGUFReader, which builds every metadata array element by element:
# a text encoder's tokenizer (256k strings) takes it tens of seconds. The layout is GGUF v2/v3's
# (github.com/ggml-org/ggml docs/gguf.md); the types and block sizes are the gguf package's.
_MAGIC = b"GGUF"
_LIMIT = 1 << 24  # more tensors, fields or dims than any model has: a corrupt count
_ORIG_SHAPE = "comfy.gguf.orig_shape."


def _parse(f: BinaryIO, size: int, gguf: Any) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
    if f.read(4) != _MAGIC:
        raise ComponentError("not a GGUF file (no GGUF magic)")
    (version,) = _unpack(f, "<I")
    if version not in (2, 3):
        raise ComponentError(f"GGUF version {version} is not supported (2 and 3 are)")
    n_tensors, n_fields = _unpack(f, "<QQ")
    if n_tensors > _LIMIT or n_fields > _LIMIT:
        raise ComponentError(f"corrupt header: {n_tensors} tensors, {n_fields} fields")
    kinds = gguf.GGUFValueType
    scalars = {t: struct.Struct("<" + c) for t, c in zip(
        (kinds.UINT8, kinds.INT8, kinds.UINT16, kinds.INT16, kinds.UINT32, kinds.INT32, kinds.FLOAT32,
         kinds.BOOL, kinds.UINT64, kinds.INT64, kinds.FLOAT64), "BbHhIif?Qqd", strict=True)}  # fmt: skip
    metadata: dict[str, Any] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for _ in range(n_fields):
        key = _string(f)
        kind = kinds(_unpack(f, "<I")[0])
        if kind == kinds.STRING:
            metadata[key] = _string(f)
        elif kind in scalars:
            metadata[key] = _unpack(f, scalars[kind].format)[0]
        elif kind == kinds.ARRAY:
            item, count = kinds(_unpack(f, "<I")[0]), _unpack(f, "<Q")[0]
            if item == kinds.STRING:
                for _ in range(count):
                    f.seek(_unpack(f, "<Q")[0], 1)
            elif item in scalars and key.startswith(_ORIG_SHAPE) and count <= 8:
                shapes[key[len(_ORIG_SHAPE) :]] = _unpack(f, f"<{count}{scalars[item].format[1:]}")
            elif item in scalars:
                f.seek(count * scalars[item].size, 1)
            else:
                raise ComponentError(f"field {key!r}: arrays of {item.name} are not supported")
        else:
            raise ComponentError(f"field {key!r} has type {kind.name}")
    infos = []
    for _ in range(n_tensors):
        name = _string(f)
        (n_dims,) = _unpack(f, "<I")
        if n_dims > 8:
            raise ComponentError(f"tensor {name!r} has {n_dims} dimensions")
        dims = _unpack(f, f"<{n_dims}Q")
        qtype = gguf.GGMLQuantizationType(_unpack(f, "<I")[0])
        infos.append((name, dims, qtype, _unpack(f, "<Q")[0]))
    align = int(metadata.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)) or 1
    data_start = -(-f.tell() // align) * align
    tensors = {}
    for name, dims, qtype, offset in infos:
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = math.prod(dims) // block * type_size
        if data_start + offset + nbytes > size:
            raise ComponentError(
                f"tensor {name!r} ends at byte {data_start + offset + nbytes} of a {size}-byte file "
                "(truncated download?)"
            )
        shape = tuple(int(d) for d in shapes.get(name, ())) or tuple(int(d) for d in reversed(dims))
        tensors[name] = GGUFTensor(gguf_dtype(qtype.name), shape, nbytes, data_start + offset, qtype.name)
    return {k: v for k, v in metadata.items() if isinstance(v, str)}, tensors


def _unpack(f: BinaryIO, fmt: str) -> tuple[Any, ...]:
    size = struct.calcsize(fmt)
    raw = f.read(size)
    if len(raw) < size:
        raise ComponentError("truncated header")
    return struct.unpack(fmt, raw)


def _string(f: BinaryIO) -> str:
    (n,) = _unpack(f, "<Q")
    if n > _LIMIT:
        raise ComponentError(f"corrupt header: a {n}-byte string")
    raw = f.read(n)
    if len(raw) < n:
        raise ComponentError("truncated header")
    return raw.decode("utf-8", errors="replace")


def _text_encoder_names(tensors: Mapping[str, GGUFTensor], arch: str) -> dict[str, GGUFTensor]:
    names = _T5_NAMES if arch in ("t5", "t5encoder") else _LLAMA_NAMES
    out = {}
    for key, spec in tensors.items():
        new = key
        for a, b in names:
            new = new.replace(a, b)
        if key == "token_embd.weight" and _dequantized_at_load(spec, arch):
            spec = GGUFTensor("fp16", spec.shape, 2 * math.prod(spec.shape), spec.start, spec.qtype)
        out[new] = spec
    return out


def _dequantized_at_load(spec: GGUFTensor, arch: str) -> bool:
    if spec.qtype in ("F32", "F16"):
        return False
    if arch in ("t5", "t5encoder"):
        return spec.shape == (256384, 4096)  # umt5-xxl's vocabulary
    return bool(spec.shape) and spec.shape[0] >= _LARGE_VOCAB
