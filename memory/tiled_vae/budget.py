"""The ``vram_budget`` input and how much of it one tile's activations may use."""

from __future__ import annotations

from ..units import parse_vram_budget  # noqa: F401  (the node input, shared by our nodes)

GiB = 1 << 30
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
