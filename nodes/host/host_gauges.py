"""The host's own figures at a node boundary, for the node's "bounded by" line (memory/telemetry/bounds.py):
the page-locked bytes the host holds (they sit in shared GPU memory and are no spill) and comfy-aimdo's
VRAM in use.

comfy-aimdo 0.4.13 and 0.5.5 keep no counters of faults, evictions or bytes uploaded (0.6.0's page-out
callback is counted by ``aimdo_hooks``, read here as "aimdo_pageouts"; read in 0.4.13, the 0.33 host's: its
Python modules ``control``, ``model_vbar``, ``host_buffer``, ``vram_buffer``, ``model_mmap``, ``torch`` and
the symbols its native library exports). What it does expose is levels: ``control.get_total_vram_usage()``
(the VRAM it holds on its devices), per model ``ModelVBAR.loaded_size()``, ``get_nr_pages()``,
``get_residency()`` and ``get_watermark()``, and ``model_vbar.vbars_analyze()`` (what it could free, which
the host adds to its free memory). The total is read here, by name, failing open: a node's change in it is
what DynamicVRAM paged in, net of what it freed.
"""

from __future__ import annotations

import sys
from typing import Any

from .aimdo_hooks import pageout_gauges
from .lookups import dynamic_vram_active


def host_pinned() -> int | None:
    """The host's page-locked bytes (``comfy.model_management.TOTAL_PINNED_MEMORY``, 0.3.68 and later)."""
    value = getattr(sys.modules.get("comfy.model_management"), "TOTAL_PINNED_MEMORY", None)
    return int(value) if isinstance(value, (int, float)) else None


def aimdo_vram() -> tuple[int | None, str]:
    """comfy-aimdo's VRAM in use on its devices, or None and why it was not read."""
    if not dynamic_vram_active():
        return None, "DynamicVRAM is off: comfy-aimdo pages nothing here"
    control = sys.modules.get("comfy_aimdo.control")
    if control is None or getattr(control, "lib", None) is None:
        return None, "comfy-aimdo's library is not loaded"
    read = getattr(control, "get_total_vram_usage", None)
    if not callable(read):
        return None, "this comfy-aimdo has no get_total_vram_usage"
    try:
        return int(read()), ""
    except Exception as exc:
        return None, f"comfy-aimdo's get_total_vram_usage failed ({exc})"


def gauges() -> dict[str, Any]:
    """What ``Telemetry.host_gauges`` reads at each node's start and end."""
    vram, note = aimdo_vram()
    return {"host_pinned": host_pinned() or 0, "aimdo_vram": vram, "aimdo_note": note, **pageout_gauges()}
