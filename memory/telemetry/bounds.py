"""What bounded a node, measured: its wall time split into disk reads, uploads and the rest (compute),
with the pinning failures, the loads the plan did not expect, the spill into shared memory and comfy-aimdo's
own VRAM figure, as one line ("disk-bound: 13.4 GiB read at 2.1 GB/s, 6.4 s of its 9.0 s").

The measurements: the node's wall time; disk reads from psutil (the process's bytes read; the time comes
from the system's read-busy milliseconds over the node, capped at the node's time, else from this machine's
disk rate measured on earlier runs (``links.LinkStore``), else an assumed rate; the line says which);
uploads from the residency log (the controller's loads and prefetches with their bytes, at the measured
host-to-device rate of their source, pinned or pageable, else the assumed one); pin failures and repeated
loads from the same log. The parts are counted as if they did not overlap, so "compute" is what is left: an
upper bound on compute.

Gauges read at the node's start and end (``gauges``): this process's shared GPU memory (``spill.Spill``)
less the page-locked bytes the host and Headroom hold, and comfy-aimdo's VRAM in use
(``comfy_aimdo.control.get_total_vram_usage``). comfy-aimdo 0.4.13 keeps no fault, eviction or upload
counters, so its figure is a level: the node's change in it is what DynamicVRAM paged in, net of what it
freed. comfy-aimdo 0.6 calls a VBAR's ``pageout_callback`` at each page-out: where it does, the node's
page-outs (ranges and bytes, ``nodes/host/aimdo_hooks.py``) join the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..units import format_bytes

UPLOADS = ("load", "prefetch")  # the controller's moves that copy weights to the GPU
# bytes/s the plan assumes where nothing was measured (costmodel.Hardware.pcie(4)): cold NVMe, and the
# PCIe 4 host-to-device rates from page-locked and from pageable memory
ASSUMED = {"disk": 3.0e9, "h2d_pinned": 25.0e9, "h2d_pageable": 12.0e9}
NOISE = 64 * 2**20  # reads (and spills) below this are not a bound worth naming


@dataclass(frozen=True)
class Bound:
    kind: str  # "compute", "disk" or "upload"
    line: str
    seconds: float  # the node's wall time
    disk_bytes: int = 0
    disk_s: float = 0.0
    disk_rate: float | None = None  # bytes/s, measured where the system reports its read time
    upload_bytes: int = 0
    upload_s: float = 0.0
    compute_s: float = 0.0
    pin_failures: int = 0
    reloads: tuple[str, ...] = ()  # components loaded again in this run with no eviction between
    # where the rates that priced the parts came from: "this node" (disk only), "measured" (this machine's
    # earlier runs), "assumed", "partly measured" (uploads from both kinds of source); "" when unused
    disk_rate_source: str = ""
    upload_rate: float | None = None  # bytes/s the uploads were priced at (their mean)
    upload_rate_source: str = ""
    shared_bytes: int | None = None  # shared GPU memory at the node's end, less page-locked bytes
    spilled: int | None = None  # its growth over the node (never negative); None: not read
    spill_note: str = ""  # why neither was read ("not reported by this OS: ...")
    aimdo_vram: int | None = None  # comfy-aimdo's VRAM in use at the node's end
    aimdo_paged: int | None = None  # its change over the node: paged in net of what was freed
    aimdo_note: str = ""
    aimdo_pageouts: int | None = None  # ranges comfy-aimdo paged out during the node (0.6+); None: not read
    aimdo_pageout_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reloads": list(self.reloads)}


def _gbps(rate: float) -> str:
    return f"{rate / 1e9:.1f} GB/s"


def _rate(link: str, measured: Mapping[str, float], given: float | None) -> tuple[float, str]:
    """A link's rate and where it came from: this machine's measurement, else the figure given, else the
    assumed one."""
    value = measured.get(link)
    if isinstance(value, (int, float)) and value > 0:
        return float(value), "measured"
    return (given if given else ASSUMED[link]), "assumed"


def _source(sources: set[str]) -> str:
    return sources.pop() if len(sources) == 1 else ("partly measured" if sources else "")


def _at(rate: float, source: str) -> str:
    if source == "this node":
        return f"at {_gbps(rate)}"
    if source == "measured":
        return f"at {_gbps(rate)} (measured on this machine's earlier runs)"
    if source == "partly measured":
        return f"at {_gbps(rate)} (partly measured, partly assumed)"
    return f"at an assumed {_gbps(rate)}"


def _level(gauges: tuple[Mapping[str, Any], Mapping[str, Any]] | None, name: str) -> tuple[int | None, ...]:
    if gauges is None:
        return None, None
    values = [g.get(name) for g in gauges]
    return tuple(int(v) if isinstance(v, (int, float)) else None for v in values)


def _delta(gauges: tuple[Mapping[str, Any], Mapping[str, Any]] | None, name: str) -> int | None:
    """A counter's growth over the node (end less start); None when either end was not read."""
    start, end = _level(gauges, name)
    return None if start is None or end is None else max(0, end - start)


def _spill(gauges: tuple[Mapping[str, Any], Mapping[str, Any]] | None) -> tuple[int | None, int | None, str]:
    """(shared at the end, its growth, the note): the process's shared GPU memory less the page-locked
    bytes known at the same instant (they live in shared memory too, and are no spill)."""
    if gauges is None:
        return None, None, ""
    start, end = _level(gauges, "shared")
    if end is None:
        return None, None, str(gauges[1].get("shared_note") or "not read")
    pin_start, pin_end = _level(gauges, "pinned")
    level = max(0, end - (pin_end or 0))
    before = max(0, start - (pin_start or 0)) if start is not None else level
    return level, max(0, level - before), ""


def bounded_by(
    seconds: float,
    io: Mapping[str, int],
    events: Iterable[Any] = (),
    loaded_before: set[str] | None = None,
    upload_rate: float | None = None,
    disk_rate: float | None = None,
    measured: Mapping[str, float] | None = None,
    gauges: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> Bound:
    """The bound of one node from its wall time, its I/O deltas (``MemoryProbe.io`` at the end minus the
    start) and its residency events (``runs.ResidencyEvent``). ``loaded_before``: the components loaded
    earlier in the run and not evicted since; updated with this node's loads and evictions.

    ``measured``: this machine's link rates (``LinkStore.measured``: "disk", "h2d_pinned",
    "h2d_pageable"); a link it lacks is priced at ``upload_rate``/``disk_rate`` when given, else the assumed
    figure. ``gauges``: (start, end) readings of "shared" (bytes or None, with "shared_note"), "pinned",
    "aimdo_vram" (bytes or None, with "aimdo_note"), "aimdo_pageouts" and "aimdo_pageout_bytes" (comfy-aimdo
    0.6's page-outs so far, or None)."""
    measured = measured or {}
    seconds = max(0.0, seconds)
    read = max(0, io.get("proc_read", 0))
    from_busy = "disk_read_ms" in io and io.get("disk_read", 0) > 0
    rate, disk_source = None, ""
    if read and from_busy:
        busy = min(seconds, max(0, io["disk_read_ms"]) / 1000)
        disk_s = busy * min(1.0, read / max(1, io["disk_read"]))  # this process's share of the busy time
        rate = read / disk_s if disk_s > 0 else None
        disk_source = "this node"
    else:
        assumed_disk, disk_source = _rate("disk", measured, disk_rate)
        disk_s = min(seconds, read / assumed_disk)
        rate = assumed_disk if read else None
        disk_source = disk_source if read else ""
    uploads, upload_raw_s, fails, reloads, sources = 0, 0.0, 0, [], set()
    held = loaded_before if loaded_before is not None else set()
    for e in events:
        action = getattr(e, "action", "")
        if action.startswith("pin") and ("failed" in action or "oom" in action):
            fails += 1
        if action in UPLOADS:
            nbytes = int(getattr(e, "nbytes", 0) or 0)
            link = "h2d_pinned" if "pinned" in str(getattr(e, "tier_from", "")) else "h2d_pageable"
            link_rate, source = _rate(link, measured, upload_rate)
            uploads += nbytes
            upload_raw_s += nbytes / link_rate
            if nbytes:
                sources.add(source)
            if e.component in held:
                reloads.append(e.component)
            held.add(e.component)
        elif action.startswith(("evict", "release", "unload")):
            held.discard(e.component)
    upload_s = min(max(0.0, seconds - disk_s), upload_raw_s)
    mean_rate = uploads / upload_raw_s if upload_raw_s > 0 else None
    upload_source = _source(sources)
    compute_s = max(0.0, seconds - disk_s - upload_s)
    parts = {"disk": disk_s if read >= NOISE else 0.0, "upload": upload_s, "compute": compute_s}
    kind = max(parts, key=lambda k: parts[k])
    if kind == "disk":
        line = f"disk-bound: {format_bytes(read)} read {_at(rate or 0.0, disk_source)}, "
        line += f"{disk_s:.1f} s of its {seconds:.1f} s"
    elif kind == "upload":
        line = (
            f"upload-bound: {format_bytes(uploads)} uploaded {_at(mean_rate or 0.0, upload_source)}, "
            f"{upload_s:.1f} s of its {seconds:.1f} s"
        )
    else:
        line = f"compute-bound: {compute_s:.1f} s of its {seconds:.1f} s"
        extra = [f"{format_bytes(read)} read"] if read else []
        extra += [f"{format_bytes(uploads)} uploaded"] if uploads else []
        line += f" ({', '.join(extra)})" if extra else " (nothing read or uploaded)"
    if fails:
        line += f"; {fails} pinning failure{'s' if fails > 1 else ''}"
    if reloads:
        line += f"; loaded again though the plan kept it: {', '.join(reloads)}"
    shared, spilled, spill_note = _spill(gauges)
    if spilled is not None and spilled >= NOISE:
        line += f"; spilled {format_bytes(spilled)} into shared memory"
    elif shared is not None and shared >= NOISE:
        line += f"; ran with {format_bytes(shared)} in shared memory"
    aimdo_start, aimdo_end = _level(gauges, "aimdo_vram")
    paged = None
    if aimdo_end is not None and aimdo_start is not None:
        paged = aimdo_end - aimdo_start
        if abs(paged) >= NOISE:
            verb = "paged in" if paged > 0 else "freed"
            line += f"; comfy-aimdo {verb} {format_bytes(abs(paged))} (VRAM in use {format_bytes(aimdo_end)})"
    aimdo_note = "" if aimdo_end is not None else str((gauges[1].get("aimdo_note") if gauges else "") or "")
    outs, out_bytes = _delta(gauges, "aimdo_pageouts"), _delta(gauges, "aimdo_pageout_bytes")
    if outs:
        line += f"; comfy-aimdo paged out {format_bytes(out_bytes or 0)} of weights for room ({outs} ranges)"
    return Bound(
        kind, line, seconds, read, disk_s, rate if disk_source == "this node" else None, uploads, upload_s,
        compute_s, fails, tuple(reloads), disk_source, mean_rate, upload_source, shared, spilled, spill_note,
        aimdo_end, paged, aimdo_note, outs, out_bytes,
    )  # fmt: skip
