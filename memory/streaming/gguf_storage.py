"""ComfyUI-GGUF's weights (``GGMLTensor``) move as they are: their quantized bytes, never dequantized.

city96/ComfyUI-GGUF keeps each weight as a ``torch.Tensor`` subclass whose storage is the GGUF file's
bytes (uint8 rows of quant blocks, or fp16/fp32 values) and whose ``tensor_type``, ``tensor_shape`` and
``patches`` (LoRA) attributes say how its layers dequantize it in forward. Its ``shape`` is the logical
(dequantized) shape, not the storage's, and its ``clone``/``detach`` return itself; so a generic copy
would take the wrong size. This adapter tells ``storage`` how it is stored: one plain tensor, the raw
storage (``as_subclass(torch.Tensor)``: same bytes, the storage's own shape), and a rebuild that wraps
a copy of it in the same class with the same attributes. Duck typed: the pack is never imported.
Registered with ``storage`` when ``memory.streaming`` is imported.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .storage import Packed, register

_ATTRS = ("tensor_type", "tensor_shape")  # what GGMLTensor sets in __init__ (patches is optional)


def is_ggml(tensor: torch.Tensor) -> bool:
    """A ComfyUI-GGUF weight: a tensor subclass carrying the GGML type and the logical shape."""
    return type(tensor) not in (torch.Tensor, torch.nn.Parameter) and all(
        a in getattr(tensor, "__dict__", {}) for a in _ATTRS
    )


def ggml_packed(tensor: torch.Tensor) -> Packed | None:
    """``storage`` adapter: a GGMLTensor as its raw storage and a rebuild around a copy of it."""
    if not is_ggml(tensor):
        return None
    raw = tensor.as_subclass(torch.Tensor)  # the stored bytes with their own shape; no copy
    cls, attrs = type(tensor), dict(tensor.__dict__)

    def rebuild(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        (data,) = tensors
        new = data.as_subclass(cls)  # no __init__: the same attributes, set as the original has them
        new.__dict__.update(attrs)
        if isinstance(attrs.get("patches"), list):  # GGMLTensor.to copies it too: each object its own
            new.patches = list(attrs["patches"])  # type: ignore[attr-defined]
        return new

    return Packed((raw,), rebuild)


register(ggml_packed)
