"""comfy-aimdo's calls that changed between its releases, as the GPU benchmarks and tests need them."""

from __future__ import annotations

from typing import Any


def set_vram_headroom(control: Any, nbytes: int) -> None:
    """Keep ``nbytes`` of the device free of DynamicVRAM's pages (the host's ``--reserve-vram``).

    comfy-aimdo 0.4.10+ takes it as ``control.init(simple_vram_headroom=...)`` (init again once loaded
    sets it: the host's main.py does this); earlier releases had ``control.set_simple_vram_headroom``."""
    setter = getattr(control, "set_simple_vram_headroom", None)
    if setter is not None:
        setter(int(nbytes))
    elif not control.init(simple_vram_headroom=int(nbytes)):
        raise RuntimeError("comfy-aimdo did not take the VRAM headroom (its library is not loaded)")
