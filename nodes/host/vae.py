"""The tiled VAE decode's host calls: model management (load with a per-tile reservation, free memory,
cache, interrupt), its OOM error type, its progress bar and its decoder nonlinearity. The 2024-03 host's
ProgressBar takes no node id and its nonlinearity is x*sigmoid(x), not F.silu."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .lookups import host_module

if TYPE_CHECKING:
    import torch

    from .host_types import VAE


def vae_nonlinearity() -> Callable[[Any], Any]:
    """The activation the host's KL decoder applies before conv_out (it differs between hosts)."""
    nonlinearity: Callable[[Any], Any] = host_module("comfy.ldm.modules.diffusionmodules.model").nonlinearity
    return nonlinearity


def vae_oom_errors() -> tuple[type[BaseException], ...]:
    """What the host raises when the device runs out of memory; on CPU the host says ``Exception``,
    which would also catch interrupts and bugs, so only real out-of-memory errors count there."""
    import torch

    oom = host_module("comfy.model_management").OOM_EXCEPTION
    return (torch.OutOfMemoryError, MemoryError) if oom is Exception else (oom,)


def vae_load(vae: VAE, memory_required: int) -> None:
    """Load the VAE through the host's model management, reserving ``memory_required`` bytes of
    activations (one tile's, not the full frame's) so its accounting stays right."""
    mm = host_module("comfy.model_management")
    kwargs = {}
    if "force_full_load" in inspect.signature(mm.load_models_gpu).parameters:
        kwargs["force_full_load"] = bool(getattr(vae, "disable_offload", False))
    mm.load_models_gpu([vae.patcher], memory_required=int(memory_required), **kwargs)


def vae_weight_bytes(vae: VAE) -> int:
    return int(vae.patcher.model_size())


def device_free_bytes(device: torch.device) -> int:
    """Free memory on ``device`` as the host counts it (device free + torch's reusable cache)."""
    return int(host_module("comfy.model_management").get_free_memory(device))


def device_total_bytes(device: torch.device) -> int:
    return int(host_module("comfy.model_management").get_total_memory(device))


def vae_output_size(vae: VAE, latent_shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(output pixels per latent pixel, output frames) of a decode of ``latent_shape``, from the host's
    ``upscale_ratio`` (an int, or (frames function, height, width) for video); None where unknown."""
    ratio = getattr(vae, "upscale_ratio", None)
    frames = latent_shape[2] if len(latent_shape) == 5 else 1
    if isinstance(ratio, int):
        return ratio, frames
    if isinstance(ratio, tuple) and len(ratio) == 3 and isinstance(ratio[1], int):
        time = ratio[0]
        return ratio[1], int(time(frames) if callable(time) else time * frames)
    return None


def device_empty_cache() -> None:
    host_module("comfy.model_management").soft_empty_cache()


def check_interrupted() -> None:
    """Raise the host's interrupt exception if the user pressed Cancel."""
    host_module("comfy.model_management").throw_exception_if_processing_interrupted()


def progress_callback(total: int, node_id: str | None = None) -> Callable[[int, int], None]:
    """An ``update(done, total)`` for the host's progress bar (node id only where the host takes one)."""
    progress_bar = host_module("comfy.utils").ProgressBar
    if "node_id" in inspect.signature(progress_bar).parameters:
        bar = progress_bar(total, node_id=node_id)
    else:
        bar = progress_bar(total)
    return lambda done, new_total: bar.update_absolute(done, new_total)


def planned_activation_room(node_id: Any) -> int | None:
    """VRAM the running prompt's plan leaves node ``node_id`` for its activations (its budget less the
    weights it keeps on the device there); None without a plan for that node. Fails open: None."""
    if node_id is None:
        return None
    try:
        from ...memory.residency.plan_room import activation_room
        from .state import residency

        controller = residency().controller
        with controller.lock:
            return activation_room(list(controller.runs.values()), str(node_id))
    except Exception:  # no residency controller in this process: the free memory alone sizes the tiles
        return None
