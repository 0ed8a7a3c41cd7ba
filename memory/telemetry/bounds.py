"""What bounded a node, measured: its wall time split into disk reads, uploads and the rest (compute),
with the pinning failures and the loads the plan did not expect, as one line ("disk-bound: 13.4 GiB read
at 2.1 GB/s, 6.4 s of its 9.0 s").

The measurements: the node's wall time; disk reads from psutil (the process's bytes read; the time comes
from the system's read-busy milliseconds over the node, capped at the node's time, else from an assumed
rate, which the line then says); uploads from the residency log (the controller's loads and prefetches
with their bytes, at the bus rate given); pin failures and repeated loads from the same log. The parts
are counted as if they did not overlap, so "compute" is what is left: an upper bound on compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..units import format_bytes

UPLOADS = ("load", "prefetch")  # the controller's moves that copy weights to the GPU
DEFAULT_DISK_RATE = 3.0e9  # bytes/s, the plan's cold-NVMe figure (costmodel.Hardware.pcie)
DEFAULT_UPLOAD_RATE = 12.0e9  # bytes/s, the plan's pageable PCIe 4 figure
NOISE = 64 * 2**20  # reads below this are not a bound worth naming


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

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reloads": list(self.reloads)}


def _gbps(rate: float) -> str:
    return f"{rate / 1e9:.1f} GB/s"


def bounded_by(
    seconds: float,
    io: Mapping[str, int],
    events: Iterable[Any] = (),
    loaded_before: set[str] | None = None,
    upload_rate: float = DEFAULT_UPLOAD_RATE,
    disk_rate: float = DEFAULT_DISK_RATE,
) -> Bound:
    """The bound of one node from its wall time, its I/O deltas (``MemoryProbe.io`` at the end minus the
    start) and its residency events (``runs.ResidencyEvent``). ``loaded_before``: the components loaded
    earlier in the run and not evicted since; updated with this node's loads and evictions."""
    seconds = max(0.0, seconds)
    read = max(0, io.get("proc_read", 0))
    measured = "disk_read_ms" in io and io.get("disk_read", 0) > 0
    rate = None
    if read and measured:
        busy = min(seconds, max(0, io["disk_read_ms"]) / 1000)
        disk_s = busy * min(1.0, read / max(1, io["disk_read"]))  # this process's share of the busy time
        rate = read / disk_s if disk_s > 0 else None
    else:
        disk_s = min(seconds, read / disk_rate)
    uploads, fails, reloads = 0, 0, []
    held = loaded_before if loaded_before is not None else set()
    for e in events:
        action = getattr(e, "action", "")
        if action.startswith("pin") and ("failed" in action or "oom" in action):
            fails += 1
        if action in UPLOADS:
            uploads += int(getattr(e, "nbytes", 0) or 0)
            if e.component in held:
                reloads.append(e.component)
            held.add(e.component)
        elif action.startswith(("evict", "release", "unload")):
            held.discard(e.component)
    upload_s = min(max(0.0, seconds - disk_s), uploads / upload_rate)
    compute_s = max(0.0, seconds - disk_s - upload_s)
    parts = {"disk": disk_s if read >= NOISE else 0.0, "upload": upload_s, "compute": compute_s}
    kind = max(parts, key=lambda k: parts[k])
    if kind == "disk":
        at = f"at {_gbps(rate)}" if rate else f"at an assumed {_gbps(disk_rate)}"
        line = f"disk-bound: {format_bytes(read)} read {at}, {disk_s:.1f} s of its {seconds:.1f} s"
    elif kind == "upload":
        line = (
            f"upload-bound: {format_bytes(uploads)} uploaded at an assumed {_gbps(upload_rate)}, "
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
    return Bound(kind, line, seconds, read, disk_s, rate, uploads, upload_s, compute_s, fails, tuple(reloads))
