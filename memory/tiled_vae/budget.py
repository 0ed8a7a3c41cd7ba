"""The ``vram_budget`` input and how much of it one tile's activations may use."""

from __future__ import annotations

from collections.abc import Callable

from ..units import GiB, format_bytes

# With "auto" on a CPU there is no VRAM to size against: tiles this large keep the halo overhead small
# while the parked activations (which a CPU decode holds anyway) dominate RAM.
CPU_AUTO_ACTIVATION_BYTES = 2 * GiB
# With "auto" on a GPU: the share of the free memory (after the VAE is loaded) one tile may use; the rest
# absorbs the allocator's fragmentation and cuDNN workspaces.
GPU_AUTO_SHARE = 0.8
# The parked full-size activations may take this share of the RAM available when a decode starts; past
# it they are memory-mapped files (parks.py).
PARK_RAM_SHARE = 0.5


def activation_budget(
    budget_gb: float | None, weight_bytes: int, free_bytes: int | None, on_gpu: bool
) -> int:
    """Bytes one tile's activations may take: the user's budget minus the VAE's weights, or with "auto"
    a share of the memory free once the VAE is loaded (a fixed size on a CPU)."""
    if budget_gb is not None:
        return int(budget_gb * GiB) - weight_bytes
    if not on_gpu or free_bytes is None:
        return CPU_AUTO_ACTIVATION_BYTES
    return int(free_bytes * GPU_AUTO_SHARE)


def park_ram_allowance(available_bytes: int | None = None) -> int | None:
    """RAM the parks of one decode may take: a share of the RAM available now (psutil), or None (no
    limit) where psutil cannot say."""
    if available_bytes is None:
        try:
            import psutil
        except ImportError:
            return None
        available_bytes = int(psutil.virtual_memory().available)
    return int(available_bytes * PARK_RAM_SHARE)


# On a CPU the decode's activations and its output share the RAM available when it starts; this share of
# it, so that the host, the parks' page cache and the rest of the machine keep some.
CPU_RAM_SHARE = 0.8


def cpu_activation_limit(available_bytes: int, output_bytes: int) -> int:
    """Bytes the activations of a decode on the CPU may take: a share of the RAM available, less the
    output image it must also hold."""
    return int(available_bytes * CPU_RAM_SHARE) - output_bytes


def _most_that_fits(fits: Callable[[int], bool], most: int) -> int:
    """The largest n in 1..``most`` with ``fits(n)`` (0 when none does), by bisection: a decode's need
    grows with its size, so ``fits`` holds up to some n and not beyond."""
    low, high = 0, most  # fits(low) holds (or low == 0), fits(high + 1) does not
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def largest_latent(
    latent_shape: tuple[int, ...], need: Callable[[tuple[int, ...]], int], limit: int
) -> tuple[int, int] | None:
    """The largest (height, width) of ``latent_shape``'s aspect whose decode ``need``s at most ``limit``
    bytes, or None when not even 1 pixel high does."""
    height, width = latent_shape[-2], latent_shape[-1]

    def shape(h: int) -> tuple[int, ...]:
        return (*latent_shape[:-2], h, max(1, round(width * h / height)))

    low = _most_that_fits(lambda h: need(shape(h)) <= limit, height)
    return None if low == 0 else (low, shape(low)[-1])


def largest_clip(
    latent_shape: tuple[int, ...], need: Callable[[tuple[int, ...]], int], limit: int
) -> int | None:
    """The most latent frames of a video latent of ``latent_shape``'s size whose decode ``need``s at most
    ``limit`` bytes (None for an image latent, or when not even one frame fits)."""
    if len(latent_shape) != 5:
        return None

    def shape(frames: int) -> tuple[int, ...]:
        return (*latent_shape[:2], frames, *latent_shape[3:])

    return _most_that_fits(lambda frames: need(shape(frames)) <= limit, latent_shape[2]) or None


def too_large_message(
    node: str,
    latent_shape: tuple[int, ...],
    need: int,
    head: int,
    limit: int,
    source: str,
    largest: tuple[int, int] | None,
    pixel_scale: int | None,
    clip: tuple[int, int | None] | None = None,
) -> str:
    """Why a decode is refused before it starts, and what to change: the resolution, or the memory."""
    h, w = latent_shape[-2], latent_shape[-1]

    def size(hw: tuple[int, int]) -> str:
        px = f" ({hw[1] * pixel_scale}x{hw[0] * pixel_scale} px)" if pixel_scale else ""
        return f"{hw[1]}x{hw[0]}{px}"

    part = (
        f", {format_bytes(head, 'GiB')} of it for the mid block, which attends across the whole latent at "
        f"once "
        "and cannot be tiled"
        if head * 2 > need
        else ""
    )
    fits = f"decode at most {size(largest)} latents here" if largest else "no size of this shape fits"
    if clip is not None:  # (latent frames, output frames) that fit at this size
        frames = f" ({clip[1]} frames)" if clip[1] else ""
        fits += f", or at most {clip[0]} latent frames{frames} of this size"
    return (
        f"{node}: a {size((h, w))} latent needs {format_bytes(need, 'GiB')} for the VAE's activations at the "
        f"least{part}; {source} leaves {format_bytes(max(limit, 0), 'GiB')}. Either {fits} (decode smaller "
        f"and "
        f"upscale the image), or give the decode {format_bytes(max(need - limit, 0), 'GiB')} more."
    )
