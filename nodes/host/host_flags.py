"""The running host's memory settings, read from it: its version, ``comfy.cli_args.args`` (the flags it was
started with), whether DynamicVRAM is on now and whether the Comfy Compiler runs (its flag on the host,
DynamicVRAM on and comfy-aimdo's recorder present); the plan then predicts and advises this host."""

from __future__ import annotations

import logging
import sys

from ...memory.planning.host_settings import HostSettings, settings_from_args
from .lookups import dynamic_vram_active, host_version

_log = logging.getLogger("headroom")


def _at_least(version: str, least: tuple[int, int]) -> bool:
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= least


def _is_2026(version: str) -> bool:
    """A host with DynamicVRAM code (0.18 and later; "0.3.x" and the 2024 copy are the reactive loader)."""
    return _at_least(version, (0, 18))


def _aimdo_records() -> bool:
    """Whether the host's comfy-aimdo has the Comfy Compiler's recorder (``control.record``: 0.5 on)."""
    control = sys.modules.get("comfy_aimdo.control")
    return getattr(control, "record", None) is not None


def running_host_settings() -> HostSettings | None:
    """This host's settings, or None where they cannot be read (the plan then states its defaults)."""
    cli = sys.modules.get("comfy.cli_args")
    args = getattr(cli, "args", None)
    if args is None:
        return None
    version = host_version()
    try:
        settings = settings_from_args(args, host="2026" if _is_2026(version) else "0.3")
        # enables_dynamic_vram() says what the flags ask; aimdo_enabled whether it runs (NVIDIA, CUDA 12.8+)
        paging = dynamic_vram_active()
        auto = _at_least(version, (0, 37)) and not getattr(args, "disable_fast_disk", False)
        off_by = settings.dynamic_off_by
        if settings.dynamic_vram and not paging:  # asked for, but comfy-aimdo does not run here
            off_by = "no NVIDIA card with CUDA 12.8+"
        compiler = settings.comfy_compiler
        if compiler and not (paging and _aimdo_records()):  # the flag, but nothing here that compiles
            compiler = None
        return settings.with_(
            version=version,
            dynamic_vram=settings.dynamic_vram and paging,
            fast_disk_auto=auto,
            dynamic_off_by=off_by,
            comfy_compiler=compiler,
        )
    except (ValueError, TypeError) as exc:  # a flag this version spells differently: plan with defaults
        _log.info(
            "Headroom: the host's memory flags could not be read (%s); the plan assumes its defaults", exc
        )
        return None
