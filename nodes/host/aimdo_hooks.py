"""comfy-aimdo's two hooks for a custom node: its page-outs counted per node (0.6), and (opt-in) its VRAM
headroom set from the plan (0.5.5 and later).

- **Page-outs.** ``model_vbar.ModelVBAR(size, device, pageout_callback=None)`` (0.6.0) calls the callback
  with (offset, size) each time aimdo pages a range of that model's VBAR out of VRAM to make room. Core
  (0.33 pins aimdo 0.4.13, whose ModelVBAR takes no callback; 0.38 pins 0.5.5, the same) passes none, so
  Headroom wraps ``ModelVBAR.__init__`` through the registry: the host's own callback, where it passes
  one, still runs first; Headroom's adds to a counter and returns (aimdo asks the callback not to call
  back into VBAR APIs, and it does not). The counter is read at each node boundary with the other host
  gauges, and a node's page-outs go into what bounded it (``memory/telemetry/bounds.py``).
- **VRAM headroom.** ``control.set_simple_vram_headroom(bytes)`` (in 0.5.5 and 0.6.0, not 0.4.13) sets
  at run time how much VRAM aimdo keeps free of weight pages (the larger of it and a compiled-in 256 MiB).
  With
  ``HEADROOM_AIMDO_HEADROOM=1`` (default off) the residency controller sets it at each planned node of
  a DynamicVRAM prompt to what the plan reserves for that node's activations
  (``dynamic_policy.vram_headroom``), logging each change with its reason, and puts the host's value back
  when the prompt ends (a registry patch with that undo).

Where the installed aimdo lacks one (0.33 pins 0.4.13: neither; 0.38 pins 0.5.5: no callback), it says
so and does nothing. No GPU here: both are tested with stand-ins that keep aimdo 0.6.0's signatures (the
host-API records read its wheel); the real run is a step of ``scripts/gpu-check``.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable

from ...memory.process_state import PROCESS
from ...memory.residency.dynamic_policy import vram_headroom
from ...memory.units import format_bytes
from .patches import REGISTRY

_log = logging.getLogger("headroom")

HEADROOM_ENV = "HEADROOM_AIMDO_HEADROOM"
PAGEOUT_PATCH = "aimdo.ModelVBAR.__init__"
Callback = Callable[[int, int], object]  # (offset, size) of a range aimdo pages out
HEADROOM_PATCH = "aimdo.simple_vram_headroom"


class PageOuts:
    """Page-outs aimdo reported through the callbacks Headroom gave its VBARs: ranges and bytes."""

    def __init__(self) -> None:
        self.count = 0
        self.nbytes = 0
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.count += 1
            self.nbytes += max(0, int(nbytes))

    def reading(self) -> tuple[int, int]:
        with self._lock:
            return self.count, self.nbytes

    def clear(self) -> None:
        with self._lock:
            self.count = self.nbytes = 0


PAGE_OUTS: PageOuts = PROCESS.hold(
    "host.aimdo_hooks: page-outs",
    PageOuts(),
    "what comfy-aimdo paged out of VRAM since the pack loaded; nodes read it at their start and end",
    reset=lambda: PAGE_OUTS.clear(),
)


def _vbar_class() -> type | None:
    model_vbar = sys.modules.get("comfy_aimdo.model_vbar")
    cls = getattr(model_vbar, "ModelVBAR", None)
    return cls if isinstance(cls, type) else None


def _takes_callback(cls: type) -> bool:
    try:
        return "pageout_callback" in inspect.signature(vars(cls).get("__init__", cls)).parameters
    except (TypeError, ValueError):
        return False


def count_pageouts() -> str:
    """Wrap ``ModelVBAR.__init__`` so that each new VBAR reports its page-outs (idempotent); returns "on",
    or "off: why"."""
    cls = _vbar_class()
    if cls is None:
        return "off: comfy-aimdo's model_vbar is not loaded (DynamicVRAM runs on NVIDIA only)"
    if not _takes_callback(cls):
        return "off: this comfy-aimdo's ModelVBAR takes no pageout_callback (0.6.0 and later do)"
    if REGISTRY.find(PAGEOUT_PATCH, cls) is not None:
        return "on"

    def make(inner: Callable[..., object]) -> Callable[..., object]:
        def init(
            self: object,
            size: int,
            device: int,
            pageout_callback: Callback | None = None,
            *a: object,
            **kw: object,
        ) -> object:
            theirs = pageout_callback

            def counted(offset: int, nbytes: int) -> None:
                if theirs is not None:
                    theirs(offset, nbytes)  # the host's writeback first: aimdo waits for it
                PAGE_OUTS.add(nbytes)

            return inner(self, size, device, counted, *a, **kw)

        return init

    try:
        REGISTRY.wrap(PAGEOUT_PATCH, cls, "__init__", make)
    except Exception as exc:  # fail open: the host's VBARs are made as before
        _log.warning("Headroom: could not count comfy-aimdo's page-outs: %r", exc)
        return f"off: {exc!r}"
    return "on"


def pageout_gauges() -> dict[str, int | None]:
    """The page-out counter for a node boundary: None where aimdo cannot report page-outs."""
    cls = _vbar_class()
    if cls is None or REGISTRY.find(PAGEOUT_PATCH, cls) is None:
        return {"aimdo_pageouts": None, "aimdo_pageout_bytes": None}
    count, nbytes = PAGE_OUTS.reading()
    return {"aimdo_pageouts": count, "aimdo_pageout_bytes": nbytes}


def headroom_opted_in() -> bool:
    return os.environ.get(HEADROOM_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class HeadroomSetter:
    """Sets aimdo's simple VRAM headroom from the plan at each planned node (opt-in); the host's value
    goes back at the prompt's end through the registry's undo."""

    def __init__(self) -> None:
        self.told = ""

    def _say_once(self, why: str) -> None:
        if self.told != why:
            self.told = why
            _log.info("Headroom: %s=1 but %s; comfy-aimdo's VRAM headroom stays as it is", HEADROOM_ENV, why)

    def node_started(self, reservation: int, total: int | None, node: str) -> int | None:
        """Set the headroom for ``node`` (its planned activation reservation); returns what was set, or None
        when nothing changed (off, unsupported, or already that)."""
        if not headroom_opted_in():
            return None
        control = sys.modules.get("comfy_aimdo.control")
        set_headroom = getattr(control, "set_simple_vram_headroom", None)
        get_headroom = getattr(control, "get_simple_vram_headroom", None)
        if not callable(set_headroom) or not callable(get_headroom):
            self._say_once("this comfy-aimdo has no set_simple_vram_headroom (0.5.5 and later do)")
            return None
        wanted, why = vram_headroom(reservation, total)
        try:
            before = int(get_headroom())
            if wanted == before:
                return None
            if REGISTRY.find(HEADROOM_PATCH) is None:  # the host's own value, put back at the prompt's end
                REGISTRY.record(HEADROOM_PATCH, lambda: _restore(set_headroom, before))
            set_headroom(wanted)
        except Exception as exc:  # fail open: aimdo keeps its headroom
            self._say_once(f"setting it failed ({exc!r})")
            return None
        _log.info(
            "Headroom: comfy-aimdo's VRAM headroom %s for %s (was %s): %s (%s=1)",
            format_bytes(wanted), node, format_bytes(before), why, HEADROOM_ENV,
        )  # fmt: skip
        return wanted

    def prompt_finished(self) -> int:
        """Put the host's headroom back (the registry's undo); returns how many changes were undone."""
        return REGISTRY.uninstall(prefix=HEADROOM_PATCH)


def _restore(set_headroom: Callable[[int], object], value: int) -> None:
    set_headroom(value)
    _log.info("Headroom: comfy-aimdo's VRAM headroom back to the host's %s", format_bytes(value))
