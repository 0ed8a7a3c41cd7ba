"""The links this machine measured, for the host's plans: the streamer's host-to-device rate and the
nodes' disk read rate go into the store (``memory.telemetry.links``), and every plan the host makes (the
preflight's, the residency controller's) starts from them instead of the assumed figures."""

from __future__ import annotations

import sys
from typing import Any

from ...memory.planning.costmodel import Hardware
from ...memory.process_state import PROCESS
from ...memory.telemetry.links import LinkStore, machine_identity, measured_hardware

STORE = PROCESS.hold(  # tests point it elsewhere (HEADROOM_CACHE_DIR, or a LinkStore of their own)
    "host.links: measured links",
    LinkStore(),
    "this machine's measured disk and host-to-device rates; its state is its file under HEADROOM_CACHE_DIR, "
    "so there is nothing in memory to reset",
)
MIN_DISK_BYTES = 256 * 2**20  # a smaller read times the page cache and the seek, not the disk


def device_name() -> str | None:
    """The CUDA device's name, or None without one (the store then keys the machine alone)."""
    torch = sys.modules.get("torch")
    try:
        return str(torch.cuda.get_device_name()) if torch is not None and torch.cuda.is_available() else None
    except Exception:
        return None


def hardware_for(card: str | None, device: str | None = None) -> Hardware:
    """The plan's hardware for ``card`` (a name the GPU table knows, or None), with this machine's
    measured links in place of the assumed ones (``device``: the GPU the store keys; default this one)."""
    hardware = Hardware.for_device(card)
    return measured_hardware(hardware, STORE.measured(machine_identity(device or device_name())))


def measured_links() -> dict[str, float]:
    """This machine's measured link rates (the medians the store keeps), for a node's "bounded by" line."""
    return STORE.measured(machine_identity(device_name()))


def record_stream(summary: dict[str, Any]) -> None:
    """A streamed sampling's or encode's measured host-to-device rate (on CUDA only: a CPU's copies
    are not a PCIe link)."""
    if summary.get("cuda"):
        link = "h2d_pinned" if summary.get("pinned") else "h2d_pageable"
        STORE.record(machine_identity(device_name()), link, summary.get("h2d_bytes_per_s"))


def record_disk(rate: float | None, nbytes: int) -> None:
    """A node's measured disk read rate, when it read enough for the rate to be the disk's."""
    if rate and nbytes >= MIN_DISK_BYTES:
        STORE.record(machine_identity(device_name()), "disk", rate)
