"""Tiny GGUF files as city96/ComfyUI-GGUF's tools/convert.py writes them, for its UnetLoaderGGUF.

``write_gguf`` follows convert.py's rules: the ``general.architecture`` key, tensor names as in the
safetensors file, 1-D, small (<= 1024 values) and ``.modulation`` tensors in F32, tensors of more
than 4 dims (Wan's patch embedding) in F16 with their shape in ``comfy.gguf.orig_shape.<name>``, the
rest quantized, stored as rows of one quant block (and that metadata) where their rows do not fit it.
Q8_0 is quantized by ``gguf.quants``; Q4_K, which that package only dequantizes, by ``quantize_q4_k``
below (ggml's block layout, simple min/max scales; the round trip is checked against
``gguf.quants.dequantize``).

``build_tiny_wan_gguf`` builds the tiny Wan 2.1 DiT of tiny_stock.py with the host's own WanModel and
writes it quantized into ``diffusion_models/`` (current hosts only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .tiny_common import MODEL_FOLDERS, _clear_filename_cache, _init_state_dict, _on_meta, _require_wan

MAX_DIMS = 4  # what the GGUF format and convert.py store; more is reshaped (comfy.gguf.orig_shape)
SMALL = 1024  # convert.py's QUANTIZATION_THRESHOLD: tensors this small stay F32
QK_K = 256  # the K-quants' super-block


def quantize_q4_k(values: np.ndarray) -> np.ndarray:
    """float32 ``[..., n]`` (n a multiple of 256) -> ggml ``block_q4_K`` bytes ``[..., n / 256 * 144]``.

    Each super-block of 256 holds fp16 ``d`` and ``dmin``, 8 six-bit (scale, min) pairs packed in 12
    bytes, and 256 four-bit codes: value = d * scale * q - dmin * min, one pair per 32 values."""
    x = np.asarray(values, dtype=np.float32)
    lead, n = x.shape[:-1], x.shape[-1]
    assert n % QK_K == 0, f"Q4_K needs rows of a multiple of {QK_K} values, not {n}"
    sub = x.reshape(-1, 8, 32)
    low = np.minimum(sub.min(-1), 0.0)
    scale = (sub.max(-1) - low) / 15.0
    mins = -low
    d = (scale.max(-1) / 63.0).astype(np.float16)
    dmin = (mins.max(-1) / 63.0).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.where(df > 0, np.rint(scale / df), 0).clip(0, 63).astype(np.uint8)
        lm = np.where(dminf > 0, np.rint(mins / dminf), 0).clip(0, 63).astype(np.uint8)
        eff_d = (df * ls)[..., None]
        eff_m = (dminf * lm)[..., None]
        q = np.where(eff_d > 0, np.rint((sub + eff_m) / eff_d), 0).clip(0, 15).astype(np.uint8)
    scales = np.zeros((sub.shape[0], 12), dtype=np.uint8)
    scales[:, 0:4] = (ls[:, :4] & 63) | ((ls[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (lm[:, :4] & 63) | ((lm[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)  # chunk c: sub-blocks 2c, 2c+1
    blocks = np.concatenate(
        [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales, qs], axis=1
    )
    return blocks.reshape(*lead, n // QK_K * 144)


def _quantize(gguf: object, data: np.ndarray, qtype: str) -> np.ndarray:
    if qtype == "Q4_K":
        return quantize_q4_k(data)
    return gguf.quants.quantize(data, gguf.GGMLQuantizationType[qtype])  # type: ignore[attr-defined]


def write_gguf(
    path: Path, state_dict: Mapping[str, torch.Tensor | np.ndarray], arch: str, qtype: str = "Q8_0"
) -> Path:
    """Write ``state_dict`` as ComfyUI-GGUF's convert.py would with ``qtype`` ("Q8_0", "Q4_K", "F16")."""
    import gguf

    block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]][0]
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path=None, arch=arch)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, value in state_dict.items():
        data = value.float().numpy() if isinstance(value, torch.Tensor) else np.asarray(value, np.float32)
        shape, n = data.shape, math.prod(data.shape)
        if len(shape) == 1 or n <= SMALL or ".modulation" in key:
            kind = "F32"
        elif len(shape) > MAX_DIMS:  # convert.py restores these unquantized (fix_5d_tensors.py)
            kind = "F16"
        elif n % block == 0:
            kind = qtype
        else:
            kind = "F16"
        rows = shape[-1] % block == 0 and len(shape) <= MAX_DIMS
        if kind not in ("F32", "F16") and not rows:
            data = data.reshape(n // block, block)
        elif len(shape) > MAX_DIMS:
            data = data.reshape(*shape[:2], -1, shape[-1])
        if data.shape != shape:
            writer.add_array(f"comfy.gguf.orig_shape.{key}", [int(d) for d in shape])
        if kind == "F32":
            writer.add_tensor(key, data.astype(np.float32))
        elif kind == "F16":
            writer.add_tensor(key, data.astype(np.float16))
        else:
            writer.add_tensor(key, _quantize(gguf, data, kind), raw_dtype=gguf.GGMLQuantizationType[kind])
    writer.write_header_to_file(path=str(path))
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build_tiny_wan_gguf(
    models_dir: Path,
    qtype: str = "Q8_0",
    name: str | None = None,
    seed: int = 0,
    num_layers: int = 4,
    dim: int = 256,
) -> Path:
    """The tiny Wan 2.1 DiT (tiny_stock.TINY_WAN21 with ``num_layers`` blocks of width ``dim``, one
    head per 128 as the host's detection reads it) quantized to ``qtype`` in ``diffusion_models/`` for
    ComfyUI-GGUF's UnetLoaderGGUF (current hosts only). 256 wide by default: at Q4_K a 128-wide one is
    under Stream Model's smallest budget (1 MiB)."""
    _require_wan()
    import comfy.ops
    from comfy.ldm.wan.model import WanModel

    from .tiny_stock import TINY_WAN21

    config = {**TINY_WAN21, "num_layers": num_layers, "dim": dim, "ffn_dim": 2 * dim, "num_heads": dim // 128}
    model = _on_meta(lambda: WanModel(**config, operations=comfy.ops.disable_weight_init))
    state_dict = _init_state_dict(model, seed, torch.float32)
    name = name or f"tiny_wan21_{qtype.lower()}.gguf"
    path = write_gguf(models_dir / MODEL_FOLDERS["diffusion_models"] / name, state_dict, "wan", qtype)
    _clear_filename_cache()
    return path
