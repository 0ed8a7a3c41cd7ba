"""The host copies a model the streamer takes over: keep them across the host's own load.

On a GPU the host loads the model before the streamer can attach (``load_models_gpu`` inside the
sampling, ``load_model`` inside an encode), and the streamer then hands the loaded part back through the
host's ``partially_unload``, which copies it to fresh pageable RAM (``Module.to``). For a component the
plan keeps on disk (views of its file's pages) or in pinned RAM, that copy is not where the plan put it,
and it is RAM the plan did not count. So the host tensors are captured before the host loads
(``capture``: references only) and, just before ``partially_unload``, every tensor the host put on the
device unchanged is pointed back at its original (``give_back``): the unload then moves nothing (``to``
the CPU of a CPU tensor is that tensor) and its accounting stays the host's. A weight the host patched
(a LoRA) is left to the host, which restores its own backup.

Better still, the host need not load at all: ``hold_back`` makes its load of a patcher that is about to
stream load nothing, so the streamer's uploads are the only ones.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...memory.streaming.host_buffer import direct, held, in_host_memory, set_weight, swap
from ...memory.streaming.storage import packed, storage_bytes
from .patches import REGISTRY

if TYPE_CHECKING:
    from .host_types import ModelPatcher

Captured = dict[str, torch.Tensor]  # "module.path.name" (the patcher's keys) -> host tensor


def capture(model: nn.Module) -> Captured:
    """``model``'s tensors that are in host memory now, by the keys the host patches them by."""
    out: Captured = {}
    for path, module in model.named_modules():
        for _, name, is_param, tensor in direct(module):
            inner = packed(tensor)
            if in_host_memory(tensor, inner):  # a parameter's data: the object stays, moved
                key = f"{path}.{name}" if path else name
                out[key] = held(tensor, inner, is_param)
    return out


def give_back(
    model: nn.Module,
    captured: Captured,
    patches: dict[str, list[Any]] | None = None,
    loaded: Callable[[torch.Tensor], bool] = lambda t: t.device.type != "cpu",
) -> int:
    """Point each of ``model``'s tensors the host has ``loaded`` (on a device) and left unchanged (same
    type, dtype and shape, no patch in ``patches``, the patcher's dict) back at its captured host
    original; returns the bytes."""
    patched = set(patches or ())
    moved = 0
    for path, module in model.named_modules():
        for sub, name, is_param, tensor in direct(module):
            key = f"{path}.{name}" if path else name
            original = captured.get(key)
            if original is None or key in patched or not loaded(tensor):
                continue
            inner = packed(original)
            now = held(tensor, inner, is_param)
            if type(original) is not type(now) or (original.dtype, original.shape) != (now.dtype, now.shape):
                continue
            (set_weight if inner is None else swap)(sub, name, is_param, original)
            moved += storage_bytes(original)
    return moved


def hold_back(patcher: ModelPatcher) -> Callable[[], None] | None:
    """Make the host's own load of ``patcher`` load nothing until the returned undo is called: its
    ``load`` runs with a 1-byte budget, so every weight stays where it is, in the host's low-VRAM mode
    (the state its ``partially_unload`` of everything would leave; LoRA patches then apply per operation)
    and the streamer, which attaches right after, is the only upload. None where the patcher's class has
    no ``load(device_to, lowvram_model_memory, force_patch_weights, full_load)`` (the 2024 host) or its
    ``load`` is overridden on the instance already."""
    load = getattr(type(patcher), "load", None)
    if load is None or "load" in vars(patcher):
        return None
    try:
        names = inspect.signature(load).parameters
    except (TypeError, ValueError):
        return None
    if "lowvram_model_memory" not in names or "full_load" not in names:
        return None

    @functools.wraps(load)
    def nothing(device_to: Any = None, lowvram_model_memory: int = 0, *args: Any, **kwargs: Any) -> Any:
        patch.fire()
        kwargs["full_load"] = False
        return load(patcher, device_to, 1, *args[:1], **kwargs)  # args[:1]: force_patch_weights

    patch = REGISTRY.replace("ModelPatcher.load[hold_back]", patcher, "load", nothing)

    def undo() -> None:
        REGISTRY.uninstall(patch)

    return undo


def before_host_load(patcher: ModelPatcher) -> tuple[Captured, Callable[[], None] | None]:
    """What a streaming session does before the host loads ``patcher`` on a GPU: capture its host copies
    and hold the host's load back (``capture``, ``hold_back``); nothing on a CPU or for a DynamicVRAM
    patcher (the host pages that one itself)."""
    if not str(getattr(patcher, "load_device", "cpu")).startswith("cuda"):
        return {}, None
    if getattr(patcher, "is_dynamic", lambda: False)():
        return {}, None
    return capture(patcher.model), hold_back(patcher)
