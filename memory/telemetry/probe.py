"""Reading memory: one Sample of device and host memory from whatever sources this machine has, and the
ledger of pinned host bytes Headroom holds.

Every source is optional: torch.cuda (allocator figures), NVML through nvidia-ml-py (whole-device use,
other processes included) and psutil (process RSS, system RAM). A missing source leaves its fields out of
the samples; it never raises.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..optional import optional_module
from ..process_state import PROCESS
from .spill import Spill, SpillReader

log = logging.getLogger("headroom")

# Fields of a Sample, in the order reports and CSV columns use.
SAMPLE_FIELDS = (
    "device_used", "device_total", "allocated", "reserved", "rss", "ram_used", "ram_total", "pinned",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sample:
    """Memory at one instant, in bytes; a field is None when no source on this machine provides it."""

    t: float  # wall-clock seconds (time.time()), so the browser can put it on its own time axis
    device_used: int | None = None  # whole device, every process (NVML, else cudaMemGetInfo)
    device_total: int | None = None
    allocated: int | None = None  # torch tensors of this process on the device
    reserved: int | None = None  # torch's caching allocator (allocated + cached free blocks)
    rss: int | None = None  # this process's resident set
    ram_used: int | None = None  # whole system: total - available
    ram_total: int | None = None
    pinned: int | None = None  # page-locked host buffers Headroom holds
    # NVML only, for the top-bar meter (not memory, so not in SAMPLE_FIELDS): GPU load in percent, °C
    gpu_util: int | None = None
    gpu_temp: int | None = None

    def as_dict(self) -> dict[str, float | int]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class PinnedLedger:
    """Pinned host bytes Headroom holds, by owner: the block streamer adds and removes its buffers here."""

    def __init__(self) -> None:
        self._owners: dict[str, int] = {}
        self._lock = threading.Lock()

    def set(self, owner: str, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"pinned bytes for {owner} must be >= 0, got {nbytes}")
        with self._lock:
            if nbytes:
                self._owners[owner] = nbytes
            else:
                self._owners.pop(owner, None)

    def release(self, owner: str) -> None:
        self.set(owner, 0)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._owners.values())

    def clear(self) -> None:
        with self._lock:
            self._owners.clear()


PINNED: PinnedLedger = PROCESS.hold(
    "telemetry.probe: pinned ledger",
    PinnedLedger(),
    "the pinned host bytes Headroom's streamers hold, by owner, read by every sample",
    reset=lambda: PINNED.clear(),
)


class MemoryProbe:
    """Reads one Sample from whatever sources exist; each is optional and failures drop only its fields.

    ``cuda``: the ``torch.cuda`` module, or None; ``nvml``: an initialised ``pynvml`` module, or None;
    ``psutil``: the module, or None. ``detect()`` finds them on this machine.
    """

    def __init__(
        self,
        cuda: Any = None,
        nvml: Any = None,
        psutil: Any = None,
        device: int = 0,
        pinned: PinnedLedger = PINNED,
        clock: Callable[[], float] = time.time,
        spill: SpillReader | None = None,
    ) -> None:
        self.cuda, self.nvml, self.psutil, self.device = cuda, nvml, psutil, device
        self.pinned, self.clock = pinned, clock
        self.spill = spill if spill is not None else SpillReader(cuda, device)
        self._process = psutil.Process() if psutil is not None else None
        self._nvml_handle = self._find_nvml_handle() if nvml is not None else None

    @classmethod
    def detect(cls, device: int = 0) -> MemoryProbe:
        torch = optional_module("torch", "device memory telemetry")
        cuda = torch.cuda if torch is not None and torch.cuda.is_available() else None
        nvml = None
        if cuda is not None:  # NVML only matters next to a CUDA device; skip its driver probe otherwise
            nvml = optional_module("pynvml", "whole-device memory telemetry (other processes included)")
            if nvml is not None:
                try:
                    nvml.nvmlInit()
                except Exception as exc:  # no driver, or the library is a stub: NVML fields stay absent
                    log.info("Headroom: NVML unavailable (%s); whole-device use comes from CUDA", exc)
                    nvml = None
        psutil = optional_module("psutil", "RAM telemetry")
        return cls(cuda=cuda, nvml=nvml, psutil=psutil, device=device)

    def _find_nvml_handle(self) -> Any:
        """The NVML handle of our CUDA device: by UUID (CUDA_VISIBLE_DEVICES renumbers), else by index."""
        try:
            uuid = getattr(self.cuda.get_device_properties(self.device), "uuid", None)
            if uuid is not None:
                text = str(uuid)
                return self.nvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
        except Exception:
            pass
        try:
            return self.nvml.nvmlDeviceGetHandleByIndex(self.device)
        except Exception as exc:
            log.info("Headroom: no NVML handle for device %s (%s)", self.device, exc)
            return None

    def sources(self) -> dict[str, bool]:
        return {
            "cuda": self.cuda is not None,
            "nvml": self._nvml_handle is not None,
            "psutil": self.psutil is not None,
        }

    def read(self) -> Sample:
        values: dict[str, int] = {}
        if self.cuda is not None:
            try:
                values["allocated"] = int(self.cuda.memory_allocated(self.device))
                values["reserved"] = int(self.cuda.memory_reserved(self.device))
            except Exception:
                pass
        if self._nvml_handle is not None:
            try:
                info = self.nvml.nvmlDeviceGetMemoryInfo(self._nvml_handle)
                values["device_used"], values["device_total"] = int(info.used), int(info.total)
            except Exception:
                pass
            try:  # as Crystools shows them; each one fails alone (some boards report no temperature)
                values["gpu_util"] = int(self.nvml.nvmlDeviceGetUtilizationRates(self._nvml_handle).gpu)
            except Exception:
                pass
            try:
                temp = self.nvml.nvmlDeviceGetTemperature(self._nvml_handle, self.nvml.NVML_TEMPERATURE_GPU)
                values["gpu_temp"] = int(temp)
            except Exception:
                pass
        if "device_used" not in values and self.cuda is not None:
            try:
                free, total = self.cuda.mem_get_info(self.device)
                values["device_used"], values["device_total"] = int(total - free), int(total)
            except Exception:
                pass
        if self.psutil is not None and self._process is not None:
            try:
                values["rss"] = int(self._process.memory_info().rss)
                vm = self.psutil.virtual_memory()
                values["ram_used"], values["ram_total"] = int(vm.total - vm.available), int(vm.total)
            except Exception:
                pass
        values["pinned"] = self.pinned.total
        return Sample(t=self.clock(), **values)

    def io(self) -> dict[str, int]:
        """Disk reads so far: this process's bytes read (``proc_read``) and the system's bytes and busy
        milliseconds reading (``disk_read``, ``disk_read_ms``) where psutil reports them (bounds.py)."""
        out: dict[str, int] = {}
        if self.psutil is None or self._process is None:
            return out
        try:
            out["proc_read"] = int(self._process.io_counters().read_bytes)
        except Exception:  # not on macOS; AccessDenied in some containers
            pass
        try:
            disk = self.psutil.disk_io_counters()
            if disk is not None:
                out["disk_read"], out["disk_read_ms"] = int(disk.read_bytes), int(disk.read_time)
        except Exception:
            pass
        return out

    def shared(self) -> Spill:
        """This process's GPU memory in shared system memory, or None with the reason (spill.py)."""
        try:
            return self.spill.read()
        except Exception as exc:  # the reader fails open itself; a stand-in may not
            return Spill(None, f"not read ({exc})")

    def reset_peak(self) -> None:
        """Start a new device-peak window (torch's max_memory_allocated), if there is a device."""
        if self.cuda is not None:
            try:
                self.cuda.reset_peak_memory_stats(self.device)
            except Exception:
                pass

    def read_peak(self) -> int | None:
        if self.cuda is None:
            return None
        try:
            return int(self.cuda.max_memory_allocated(self.device))
        except Exception:
            return None
