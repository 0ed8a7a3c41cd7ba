"""Sampling with a streamed diffusion model: the stock ``common_ksampler`` on a patched clone.

The policy lives in ``memory.streaming``: the budget (``budget``), the resident set and ring
(``choose_streaming``), the streamer, and the record/replay that lets a step's model calls share each
upload (``shared_uploads``). This module attaches them to the host's model at the right moments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...memory.streaming.budget import activation_reserve, streaming_budget
from ...memory.streaming.shared_uploads import SharedUploads
from .lookups import host_module


@dataclass
class StreamingRun:
    """What one streamed sampling did, for the node's UI text."""

    summary: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # why nothing streamed, when nothing did


def streaming_ksample(
    model: Any,
    sampler_args: tuple[Any, ...],
    *,
    budget: int | None,
    prefetch: int | None,
    resident_blocks: int | None,
    pin: bool,
) -> tuple[dict, StreamingRun]:
    """The stock ``common_ksampler`` on a clone of ``model`` whose diffusion model streams its blocks.

    The streamer attaches at the model's first call, once the host has loaded it, through the
    sampler's ``model_function_wrapper`` (both hosts have it; one already set is chained), and
    detaches when sampling ends, however it ends (interrupt, OOM, error), returning every byte.
    On a CPU device the streamer places the blocks itself; on CUDA it first asks the host to offload
    what it loaded (``partially_unload``, so its accounting stays right) and then places rest,
    resident blocks and ring itself for the duration of the sampling.

    When the host splits one step into several model calls (cond and uncond, when its memory
    estimate says the batch does not fit), a ``calc_cond_batch`` wrapper (current hosts) makes them
    share each block's upload: see ``memory.streaming.shared_uploads``. The 2024 host has no such
    hook; there each call uploads the streamed blocks again.
    """
    import torch

    from ...memory.streaming import BlockStreamer, choose_streaming, discover_blocks
    from ...memory.streaming.discovery import module_bytes

    nodes = host_module("nodes")
    patched = model.clone()
    previous = patched.model_options.get("model_function_wrapper")
    run = StreamingRun()
    state: dict[str, Any] = {}

    def attach(args: dict[str, Any]) -> None:
        diffusion = patched.model.diffusion_model
        device = torch.device(patched.load_device)
        layout = discover_blocks(diffusion)
        sizes = layout.block_bytes()
        total = module_bytes(diffusion)
        on_gpu = device.type == "cuda"
        estimate = _activation_bytes(patched, args["input"].shape) if on_gpu else 0  # none asked on a CPU
        activation = activation_reserve(estimate, on_gpu=on_gpu)
        free = None
        if on_gpu:
            if not hasattr(patched, "partially_unload"):
                run.note = "this host has no partial unload; sampling without streaming"
                return
            patched.partially_unload(patched.offload_device, memory_to_free=patched.loaded_size())
            free = host_module("comfy.model_management").get_free_memory(device)
        choice = choose_streaming(
            sizes,
            total - sum(sizes),
            streaming_budget(budget, device_free=free, model_bytes=total, activation=activation),
            activation,
            depth=prefetch,
            resident_blocks=resident_blocks,
        )
        if not choice.streamed_bytes and device.type == "cpu":
            run.note = "everything fits the budget: nothing streamed"
        streamer = BlockStreamer(diffusion, layout, choice, device, pin=pin)
        state["streamer"] = streamer
        streamer.attach()

    def call_model(apply_model: Any, args: dict[str, Any]) -> Any:
        if previous is not None:
            return previous(apply_model, args)
        return apply_model(args["input"], args["timestep"], **args["c"])

    shared = SharedUploads(lambda: state.get("streamer"), call_model)

    def wrapper(apply_model: Any, args: dict[str, Any]) -> Any:
        if "attached" not in state:
            state["attached"] = True
            attach(args)
        return shared.model_call(apply_model, args)

    patched.set_model_unet_function_wrapper(wrapper)
    _install_shared_uploads(patched, shared)
    try:
        (latent,) = nodes.common_ksampler(patched, *sampler_args[:8], denoise=sampler_args[8])
        streamer = state.get("streamer")
        if streamer is not None:
            run.summary = {**streamer.summary(), **shared.counts()}
    finally:
        streamer = state.get("streamer")
        if streamer is not None:
            streamer.detach(release=True)
    return latent, run


def _install_shared_uploads(patcher: Any, shared: SharedUploads) -> bool:
    """Add the step wrapper where the host has the hook (ComfyUI with patcher wrappers, late 2024 on)."""
    try:
        wrappers_mp = host_module("comfy.patcher_extension").WrappersMP
    except ImportError:
        return False
    if not hasattr(wrappers_mp, "CALC_COND_BATCH") or not hasattr(patcher, "add_wrapper_with_key"):
        return False
    patcher.add_wrapper_with_key(wrappers_mp.CALC_COND_BATCH, shared.KEY, shared.calc_cond_batch)
    return True


def _activation_bytes(patcher: Any, shape: Any) -> int:
    """The host's own estimate of one model call's activations (0 where it has none)."""
    try:
        return int(patcher.model.memory_required(shape))
    except Exception:  # older or custom models: no estimate
        return 0
