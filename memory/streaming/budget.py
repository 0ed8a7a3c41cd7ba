"""The device bytes a streamed sampling may place: the budget ``choose_streaming`` is given.

On a GPU the host first offloads the model it loaded (its own ``partially_unload``, so its accounting
stays right); the streamer may then place what the host reports free, less nothing else, capped by the
user's ``vram_budget``. The host's own estimate of one model call's activations is kept free inside it.

On a CPU there is no VRAM: the budget caps the placed weights only, which is what a CPU run can exercise
(the tests). With no budget asked for, everything fits and nothing streams; there is no activation
reserve, since activations do not share a device with the weights there.
"""

from __future__ import annotations


def activation_reserve(estimate: int, *, on_gpu: bool) -> int:
    """The activation bytes kept free for the model's calls: the host's estimate on a GPU, 0 on a CPU."""
    return int(estimate) if on_gpu else 0


def streaming_budget(
    requested: int | None, *, device_free: int | None, model_bytes: int, activation: int
) -> int:
    """The bytes the streamer may place, activations included.

    ``requested``: the node's ``vram_budget`` in bytes (None = auto). ``device_free``: what the GPU has
    free once the host offloaded the model (None on a CPU). ``model_bytes``: the diffusion model's
    weights; ``activation``: the reserve from ``activation_reserve``.
    """
    if device_free is None:
        return model_bytes + activation if requested is None else requested
    return device_free if requested is None else min(requested, device_free)
