"""How a weight's storage moves when the weight is not one plain tensor.

Quantized weights are tensor subclasses. The 2026 host's ``QuantizedTensor`` (comfy-kitchen) wraps fp8
``qdata`` and a float32 scale behind the dtype and shape of the float weight it stands for: it has no
storage of its own, copying a plain tensor into it is refused, and setting a parameter's ``.data`` to
another one keeps the old inner tensors. So the streamer moves such a weight as it is: each of its inner
plain tensors goes into the host buffer and a ring slot, and the wrapper is rebuilt around those copies
(the original object goes back at detach). The real bytes are the inner tensors' bytes, not
``numel * element_size`` of the logical dtype.

Subclasses are recognised by duck typing, never by importing the host: torch's protocol for traceable
subclasses (``__tensor_flatten__`` / ``__tensor_unflatten__``, which ``QuantizedTensor`` implements) by
default; a format without it registers an adapter (``register``) that says how it is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..process_state import PROCESS


@dataclass(frozen=True)
class Packed:
    """A tensor as its plain inner tensors and how to rebuild it around copies of them (same dtypes
    and shapes, on any device)."""

    inner: tuple[torch.Tensor, ...]
    rebuild: Callable[[Sequence[torch.Tensor]], torch.Tensor]


Adapter = Callable[[torch.Tensor], "Packed | None"]
_ADAPTERS: list[Adapter] = PROCESS.hold(
    "streaming.storage: tensor adapters",
    [],
    "the quantised-tensor formats registered at import (GGUF); a reset would forget them until a re-import",
)
_PLAIN = (torch.Tensor, nn.Parameter)


def register(adapter: Adapter) -> None:
    """Add ``adapter`` (tensor -> Packed, or None when it is not its format); asked before the generic
    protocol, the latest first. Registering the same function again does nothing."""
    if adapter not in _ADAPTERS:
        _ADAPTERS.insert(0, adapter)


def packed(tensor: torch.Tensor) -> Packed | None:
    """How ``tensor`` is stored when it is a subclass the streamer must rebuild; None for a plain tensor
    (and for a subclass with real storage of its own and no adapter: it moves like a plain one)."""
    if type(tensor) in _PLAIN:
        return None
    for adapter in _ADAPTERS:
        found = adapter(tensor)
        if found is not None:
            return found
    return _flattened(tensor)


def storage_bytes(tensor: torch.Tensor) -> int:
    """The bytes ``tensor`` really holds (its inner tensors' for a subclass)."""
    if type(tensor) in _PLAIN:
        return tensor.numel() * tensor.element_size()
    found = packed(tensor)
    if found is None:
        return tensor.numel() * tensor.element_size()
    return sum(t.numel() * t.element_size() for t in found.inner)


def as_parameter(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a module parameter without copying it. For a subclass this is what ``nn.Parameter``
    does minus its ``detach``, which some subclasses implement by cloning their scales."""
    if isinstance(tensor, nn.Parameter):
        return tensor
    if type(tensor) is torch.Tensor:
        return nn.Parameter(tensor, requires_grad=False)
    tensor._is_param = True  # torch's own mark (see nn.Parameter.__new__)
    return tensor


def _flattened(tensor: torch.Tensor) -> Packed | None:
    """torch's traceable-subclass protocol; inner tensors that are subclasses themselves are flattened
    in turn, so ``inner`` is only plain tensors."""
    flatten = getattr(tensor, "__tensor_flatten__", None)
    unflatten = getattr(type(tensor), "__tensor_unflatten__", None)
    if flatten is None or unflatten is None:
        return None
    names, ctx = flatten()
    subs = [packed(getattr(tensor, name)) for name in names]
    leaves = tuple(
        leaf
        for name, sub in zip(names, subs, strict=True)
        for leaf in (sub.inner if sub is not None else (getattr(tensor, name),))
    )
    size, stride = tensor.size(), tensor.stride()

    def rebuild(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        it = iter(tensors)
        inner = {
            name: next(it) if sub is None else sub.rebuild([next(it) for _ in sub.inner])
            for name, sub in zip(names, subs, strict=True)
        }
        rebuilt: torch.Tensor = unflatten(inner, ctx, size, stride)
        return rebuilt

    return Packed(leaves, rebuild)
