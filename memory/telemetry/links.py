"""The link bandwidths a run measured, kept per machine so the next plan of that machine uses them.

A run measures the host-to-device rate of its streamed uploads (``BlockStreamer.summary``: pinned or
pageable) and the disk read rate of its nodes (``bounds.Bound.disk_rate``). ``LinkStore`` keeps the last
few of each per machine identity (host name and GPU) in a small JSON file under the user's cache dir;
``measured_hardware`` puts their medians into the plan's ``Hardware`` and names them in
``Hardware.measured``, so the plan says which figures were measured and which it assumed.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import sys
import threading
from dataclasses import replace
from pathlib import Path

from ..planning.costmodel import Hardware

_log = logging.getLogger("headroom")
LINKS = ("h2d_pinned", "h2d_pageable", "disk")  # the Hardware fields a run can measure
KEEP = 8  # samples kept per link: the median of the last few runs, not one noisy one
MIN_RATE, MAX_RATE = 1e6, 1e12  # bytes/s: anything outside is a timing artefact, not a link
CACHE_ENV = "HEADROOM_CACHE_DIR"


def cache_dir() -> Path:
    """``$HEADROOM_CACHE_DIR``, else the user's cache dir (XDG, ``%LOCALAPPDATA%``, ``~/Library/Caches``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "comfyui-headroom"


def machine_identity(device: str | None) -> str:
    """This machine as the store keys it: its host name and the GPU the plan is for."""
    return f"{platform.node() or 'unknown host'} / {device or 'no GPU'}"


class LinkStore:
    """Measured rates per machine and link, in ``path`` (``cache_dir()/links.json`` by default)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else cache_dir() / "links.json"
        self._lock = threading.Lock()

    def _read(self) -> dict[str, dict[str, list[float]]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        machines = data.get("machines") if isinstance(data, dict) else None
        return machines if isinstance(machines, dict) else {}

    def record(self, machine: str, link: str, rate: float | None) -> bool:
        """Add one measured rate (bytes/s); False (and nothing written) when it is not a plausible rate
        or the file cannot be written (the run goes on; the next plan assumes the figure instead)."""
        if link not in LINKS or rate is None or not (MIN_RATE <= rate <= MAX_RATE):
            return False
        with self._lock:
            machines = self._read()
            samples = machines.setdefault(machine, {}).setdefault(link, [])
            samples[:] = [*samples, float(rate)][-KEEP:]
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"machines": machines}, indent=1), encoding="utf-8")
                tmp.replace(self.path)
            except OSError as exc:
                _log.info("Headroom: the measured %s rate was not kept (%s)", link, exc)
                return False
        return True

    def measured(self, machine: str) -> dict[str, float]:
        """The median of each link's kept samples for ``machine`` (only the links it measured)."""
        entry = self._read().get(machine, {})
        out = {}
        for link in LINKS:
            values = [
                v for v in entry.get(link, []) if isinstance(v, (int, float)) and MIN_RATE <= v <= MAX_RATE
            ]
            if values:
                out[link] = float(statistics.median(values))
        return out


def measured_hardware(hw: Hardware, rates: dict[str, float]) -> Hardware:
    """``hw`` with the measured ``rates`` in place of its assumed figures, named in ``measured``."""
    known = {k: v for k, v in rates.items() if k in LINKS}
    if not known:
        return hw
    return replace(
        hw,
        h2d_pinned=known.get("h2d_pinned", hw.h2d_pinned),
        h2d_pageable=known.get("h2d_pageable", hw.h2d_pageable),
        disk=known.get("disk", hw.disk),
        measured=tuple(k for k in LINKS if k in known),
    )
