"""The RAM budget: how much anonymous and pinned memory this process may hold, and what it holds now.

The budget bounds RssAnon + pinned (``read_process``), the private memory the OS cannot drop. Mapped
model files (the "disk" tier) are page cache: the kernel reads them back on demand and may drop them
under pressure, so they are outside it. Where the budget comes from, first match wins:

1. ``HEADROOM_RAM_BUDGET`` ("24GB", "24 GiB", "24576MB"; a bare number is GiB);
2. the setting (``RamKnob.configure``: the host's ``state.configure_ram_budget``);
3. the machine (``machine_budget``): what the OS could give us now (MemAvailable plus what this process
   already holds) less a reserve for the desktop and the next allocation spikes.

The pinned part is capped by what the OS lets one process page-lock (``pinned_limit``): ComfyUI pins at
most 40% of RAM on Windows, where the driver refuses more, and on Linux
``max(0.4R, min(0.9R, R - 4 GiB, R + swap - 16 GiB))`` (the host's ``comfy/model_management.py``).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..optional import optional_module
from ..process_state import PROCESS
from ..units import GiB, format_bytes, parse_size_setting

_log = logging.getLogger("headroom")
RAM_BUDGET_ENV = "HEADROOM_RAM_BUDGET"
MIN_RESERVE, MAX_RESERVE = 1 * GiB, 4 * GiB  # the reserve is 10% of RAM within these


@dataclass(frozen=True)
class Machine:
    """The figures the default budget is made of, in bytes."""

    total: int  # physical RAM
    available: int  # what the OS could hand out without swapping (MemAvailable: free + reclaimable)
    swap: int  # swap size
    own: int  # what this process holds now (RssAnon + pinned): ours to keep, not another program's
    system: str  # sys.platform: "linux", "win32", "darwin", ...


@dataclass(frozen=True)
class RamBudget:
    """RssAnon + pinned may reach ``ram``; pinned alone ``pinned``. ``source``: env, setting or machine."""

    ram: int
    pinned: int
    source: str
    detail: str  # how it was derived, in one line

    def as_dict(self) -> dict[str, Any]:
        return {"ram": self.ram, "pinned": self.pinned, "source": self.source, "detail": self.detail}


@dataclass(frozen=True)
class RamReading:
    """What this process holds now: private anonymous memory and page-locked host buffers."""

    anon: int
    pinned: int
    how: str = ""  # which OS figure ``anon`` is

    @property
    def total(self) -> int:
        return self.anon + self.pinned


def pinned_limit(total: int, swap: int, system: str) -> int:
    """The most one process can page-lock on this OS (the host's own caps; see the module docstring)."""
    if system.startswith("linux"):
        return int(max(0.4 * total, min(0.9 * total, total - 4 * GiB, total + swap - 16 * GiB)))
    return int(0.4 * total)  # Windows (the driver's limit); macOS and others have no CUDA to pin for


def reserve_for(total: int) -> int:
    """What the default leaves free for the rest of the machine: 10% of RAM, within 1..4 GiB."""
    return min(MAX_RESERVE, max(MIN_RESERVE, total // 10))


def machine_budget(m: Machine) -> RamBudget:
    """The default: what the other programs leave us (available + ours) less the reserve, at most the
    RAM less the reserve; its pinned part within the OS's limit."""
    reserve = reserve_for(m.total)
    ram = max(0, min(m.available + m.own, m.total) - reserve)
    pinned = min(ram, pinned_limit(m.total, m.swap, m.system))
    others = max(0, m.total - m.available - m.own)
    detail = (
        f"RAM {format_bytes(m.total)}, other programs {format_bytes(others)}, this process "
        f"{format_bytes(m.own)}, reserve {format_bytes(reserve)}; pinned at most {format_bytes(pinned)}"
    )
    return RamBudget(ram, pinned, "machine", detail)


def fixed_budget(ram: int, m: Machine, source: str) -> RamBudget:
    pinned = min(ram, pinned_limit(m.total, m.swap, m.system))
    return RamBudget(
        ram, pinned, source, f"{format_bytes(ram)} ({source}); pinned at most {format_bytes(pinned)}"
    )


class RamKnob:
    """The process's RAM budget: the environment variable, else the setting, else the machine's.

    The machine's figures are read again at most every ``refresh_s`` seconds: plans are cached by their
    budget, and one that changed with every reading of MemAvailable would never be found again."""

    def __init__(
        self,
        machine: Callable[[], Machine] | None = None,
        env: Mapping[str, str] | None = None,
        refresh_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.machine = machine or read_machine
        self.env = os.environ if env is None else env
        self.setting: int | None = None
        self.warned = ""
        self.refresh_s, self.clock = refresh_s, clock
        self.read_at: float = -math.inf
        self.last: Machine | None = None
        self.lock = threading.Lock()

    def _machine(self) -> Machine:
        with self.lock:
            now = self.clock()
            if self.last is None or now - self.read_at >= self.refresh_s:
                self.last, self.read_at = self.machine(), now
            return self.last

    def reset(self) -> None:
        """As made: no setting, nothing warned, the machine read again at the next use."""
        with self.lock:
            self.setting, self.warned, self.last, self.read_at = None, "", None, -math.inf

    def configure(self, value: int | str | None) -> None:
        """Set the budget (bytes, or a size such as "24GB"; None or "auto": the machine's). A bad size
        raises ValueError and changes nothing."""
        nbytes = None
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"a RAM budget cannot be negative: {value}")
            nbytes = value  # bytes, as every figure in the pack
        elif value is not None and not (isinstance(value, str) and value.strip().lower() in ("", "auto")):
            nbytes = parse_size_setting(value, "the RAM budget")  # a bare number is GiB
        with self.lock:
            self.setting = nbytes

    def resolve(self) -> RamBudget:
        m = self._machine()
        text = self.env.get(RAM_BUDGET_ENV, "")
        if text:
            try:
                return fixed_budget(parse_size_setting(text, RAM_BUDGET_ENV), m, RAM_BUDGET_ENV)
            except ValueError as exc:
                if self.warned != text:
                    _log.warning("Headroom: %s; it is ignored (the machine's budget is used)", exc)
                    self.warned = text
        with self.lock:
            setting = self.setting
        if setting is not None:
            return fixed_budget(setting, m, "setting")
        return machine_budget(m)


# -- reading the OS


def _status_fields(text: str, names: tuple[str, ...]) -> dict[str, int]:
    """``Name:  123 kB`` lines of /proc/self/status or /proc/meminfo, in bytes."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in names:
            parts = rest.split()
            out[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def cuda_pinned() -> int:
    """Bytes of torch's pinned host allocator (``torch.cuda.host_memory_stats``, torch >= 2.5); 0 without
    CUDA or before it is initialised (nothing is pinned then)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not hasattr(cuda, "host_memory_stats"):
        return 0
    try:
        if not cuda.is_initialized():
            return 0
        return int(cuda.host_memory_stats().get("allocated_bytes.current", 0))
    except Exception:  # a broken driver: nothing we could pin either
        return 0


def read_process(
    proc: Path = Path("/proc/self/status"), pinned: Callable[[], int] = cuda_pinned
) -> RamReading:
    """This process's private RAM now. Linux: RssAnon of /proc/self/status (anonymous pages only: mapped
    files and shared libraries are page cache). Windows: psutil's private bytes (the commit charge:
    anonymous memory, swapped-out pages included). Elsewhere: psutil's RSS, which also counts mapped
    file pages, so a disk-tier model there reads as held. Pinned: torch's pinned host allocator."""
    pinned_now = pinned()
    try:
        fields = _status_fields(proc.read_text(), ("RssAnon",))
        if "RssAnon" in fields:
            return RamReading(fields["RssAnon"], pinned_now, "RssAnon")
    except OSError:
        pass
    psutil = optional_module("psutil", "RAM readings outside Linux")
    if psutil is None:
        return RamReading(0, pinned_now, "none")
    info = psutil.Process().memory_info()
    if hasattr(info, "private"):
        return RamReading(int(info.private), pinned_now, "private bytes")
    return RamReading(int(info.rss), pinned_now, "RSS")


def _process_limits(cgroup: Path) -> tuple[int | None, int | None]:
    """(limit, room left) of this process's memory: its cgroup v2's memory.max (a container's limit) and
    the address-space rlimit (ulimit -v), whichever leaves less; (None, None) when neither is set."""
    limits: list[tuple[int, int]] = []
    try:
        text = (cgroup / "memory.max").read_text().strip()
        if text.isdigit():
            used = int((cgroup / "memory.current").read_text().strip() or 0)
            limits.append((int(text), max(0, int(text) - used)))
    except (OSError, ValueError):
        pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            mapped = _status_fields(Path("/proc/self/status").read_text(), ("VmSize",)).get("VmSize", 0)
            limits.append((soft, max(0, soft - mapped)))
    except (ImportError, OSError, ValueError):
        pass
    if not limits:
        return None, None
    return min(lim for lim, _ in limits), min(room for _, room in limits)


def read_machine(
    meminfo: Path = Path("/proc/meminfo"),
    reading: Callable[[], RamReading] = read_process,
    cgroup: Path = Path("/sys/fs/cgroup"),
) -> Machine:
    """Total, available and swap: /proc/meminfo on Linux, psutil elsewhere (32 GiB assumed without it);
    within the process's cgroup and address-space limits where they are lower (a container, ulimit -v)."""
    own = reading().total
    try:
        f = _status_fields(meminfo.read_text(), ("MemTotal", "MemAvailable", "SwapTotal"))
        if {"MemTotal", "MemAvailable"} <= set(f):
            total, available = f["MemTotal"], f["MemAvailable"]
            limit, room = _process_limits(cgroup)
            if limit is not None and room is not None:
                total, available = min(total, limit), min(available, room)
            return Machine(total, available, f.get("SwapTotal", 0), own, sys.platform)
    except OSError:
        pass
    psutil = optional_module("psutil", "RAM readings outside Linux")
    if psutil is None:
        return Machine(32 * GiB, 16 * GiB, 0, own, sys.platform)
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    return Machine(int(vm.total), int(vm.available), int(swap.total), own, sys.platform)


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def release_heap() -> bool:
    """Hand freed heap memory back to the OS. glibc keeps freed blocks below its mmap threshold in its
    arenas (RssAnon stays up after the weights are gone); malloc_trim(0) returns every free page. Other
    C libraries and OSes: nothing to do or no way to ask; returns whether anything was returned."""
    libc = _libc() if sys.platform.startswith("linux") else None
    trim = getattr(libc, "malloc_trim", None)  # musl has none
    if trim is None:
        return False
    try:
        return bool(trim(0))
    except Exception:
        return False


def release_pinned_cache() -> bool:
    """Hand torch's cached pinned blocks back to the driver: its pinned allocator keeps freed blocks (the
    pinned reading counts them), so unpinned weights would otherwise stay page-locked. Without CUDA, or
    before it is initialised, nothing is pinned."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    empty = getattr(getattr(torch, "_C", None), "_host_emptyCache", None)
    try:
        if cuda is None or empty is None or not cuda.is_initialized():
            return False
        empty()
        return True
    except Exception:  # a broken driver: nothing more to give back
        return False


RAM: RamKnob = PROCESS.hold(  # the process's knob (the host sets it through state.configure_ram_budget)
    "residency.ram_budget: RAM knob",
    RamKnob(),
    "the RAM budget the user set (Offload Loader, route), read at every node boundary",
    reset=lambda: RAM.reset(),
)
