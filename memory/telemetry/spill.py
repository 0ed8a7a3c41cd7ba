"""Spill into shared memory, where the OS says so: the bytes of this process's GPU memory that live in
system RAM instead of VRAM, or None with the reason nothing could be read.

Where it happens: the Windows driver's sysmem fallback (NVIDIA 536.40 and later, the default) lets a CUDA
allocation that finds no VRAM take WDDM shared memory; the run goes on at PCIe speed instead of failing.
Linux drivers have no such fallback (the allocation fails), so there is nothing to read there.

The sources, first that answers:
- Windows: the ``\\GPU Process Memory(pid_<PID>_*)\\Shared Usage`` performance counter through PDH
  (``pdh.dll`` by ctypes), this process's shared bytes summed over its adapters. It counts every shared
  allocation of the process, page-locked host buffers included, so a node's *growth* is what it spilled.
- torch's evidence, on any OS: a caching allocator holding more than the device has
  (``memory_reserved > total_memory``) holds the excess outside VRAM; a lower bound.
NVML reports no shared memory (its memory info and per-process figures are dedicated VRAM only).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

_log = logging.getLogger("headroom")

COUNTER = r"\GPU Process Memory(pid_{pid}_*)\Shared Usage"
PDH_FMT_LARGE = 0x00000400
PDH_MORE_DATA = 0x800007D2
NOT_REPORTED = "not reported by this OS"
NO_FALLBACK = (
    f"{NOT_REPORTED}: the driver's sysmem fallback into shared memory is a Windows feature; "
    "on this OS an allocation beyond VRAM fails instead of spilling"
)


@dataclass(frozen=True)
class Spill:
    """This process's GPU memory in shared system memory: ``nbytes`` (None: not read, ``reason`` says
    why) and where the figure came from (``source``: "pdh", "torch" or "")."""

    nbytes: int | None
    reason: str = ""
    source: str = ""


def process_shared_usage(items: Iterable[tuple[str, float]], pid: int) -> int | None:
    """The sum of ``pid``'s instances of the "GPU Process Memory" counter set (instance names
    ``pid_<PID>_luid_0x…_0x…_phys_<N>``, one per adapter and physical segment); None when the process
    has none (no GPU context yet)."""
    pattern = re.compile(rf"^pid_{pid}_", re.IGNORECASE)
    values = [int(v) for name, v in items if pattern.match(name or "")]
    return sum(values) if values else None


def torch_evidence(cuda: Any, device: int = 0) -> int | None:
    """Bytes torch reserved beyond the device's total memory (a lower bound of the spill), None when
    torch holds no more than the device or cannot say."""
    if cuda is None:
        return None
    try:
        reserved = int(cuda.memory_reserved(device))
        total = int(cuda.get_device_properties(device).total_memory)
    except Exception:
        return None
    return reserved - total if reserved > total else None


class _FmtValue(ctypes.Structure):
    class _Union(ctypes.Union):
        _fields_ = [("longValue", ctypes.c_long), ("doubleValue", ctypes.c_double),
                    ("largeValue", ctypes.c_longlong), ("wide", ctypes.c_wchar_p)]  # fmt: skip

    _fields_ = [("CStatus", ctypes.c_uint32), ("value", _Union)]


class _FmtItem(ctypes.Structure):  # PDH_FMT_COUNTERVALUE_ITEM_W
    _fields_ = [("szName", ctypes.c_wchar_p), ("FmtValue", _FmtValue)]


class PdhCounter:
    """One wildcard PDH counter, opened once and read on demand (``pdh``: ``ctypes.WinDLL("pdh")``, or a
    stand-in with the same four functions)."""

    def __init__(self, pdh: Any, path: str) -> None:
        self.pdh = pdh
        self.query, self.counter = ctypes.c_void_p(), ctypes.c_void_p()
        _check(pdh.PdhOpenQueryW(None, 0, ctypes.byref(self.query)), "PdhOpenQueryW")
        _check(pdh.PdhAddEnglishCounterW(self.query, path, 0, ctypes.byref(self.counter)), "PdhAddCounter")

    def read(self) -> list[tuple[str, float]]:
        """Each instance's value: (instance name, bytes); none while the process has no GPU instance
        (PDH answers with a warning status then: no data, no instance)."""
        if _check(self.pdh.PdhCollectQueryData(self.query), "PdhCollectQueryData"):
            return []
        size, count = ctypes.c_uint32(0), ctypes.c_uint32(0)
        status = self.pdh.PdhGetFormattedCounterArrayW(
            self.counter, PDH_FMT_LARGE, ctypes.byref(size), ctypes.byref(count), None
        )
        if status & 0xFFFFFFFF != PDH_MORE_DATA:
            _check(status, "PdhGetFormattedCounterArrayW")
            return []  # no instance
        buffer = (ctypes.c_byte * size.value)()
        _check(
            self.pdh.PdhGetFormattedCounterArrayW(
                self.counter, PDH_FMT_LARGE, ctypes.byref(size), ctypes.byref(count), buffer
            ),
            "PdhGetFormattedCounterArrayW",
        )
        items = ctypes.cast(buffer, ctypes.POINTER(_FmtItem))
        return [
            (items[i].szName or "", float(items[i].FmtValue.value.largeValue))
            for i in range(count.value)
            if items[i].FmtValue.CStatus in (0, 1)  # PDH_CSTATUS_VALID_DATA, PDH_CSTATUS_NEW_DATA
        ]


def _check(status: int, call: str) -> bool:
    """Raises on a PDH error (severity 0xC...); True on a warning (0x8...: no data, no instance yet)."""
    code = status & 0xFFFFFFFF
    if code & 0xC0000000 == 0xC0000000 or (code and not code & 0x80000000):
        raise OSError(f"{call} returned 0x{code:08X}")
    return bool(code)


class SpillReader:
    """Reads ``Spill`` from the sources this machine has (see the module's docstring); never raises.

    ``platform``: ``sys.platform``; ``pdh``: a loader of the PDH library (``ctypes.WinDLL``'s ``"pdh"``
    by default, only on Windows); ``cuda``/``device``: torch.cuda and the device, for torch's evidence.
    """

    def __init__(
        self,
        cuda: Any = None,
        device: int = 0,
        platform: str = sys.platform,
        pdh: Callable[[], Any] | None = None,
        pid: int | None = None,
    ) -> None:
        self.cuda, self.device, self.platform = cuda, device, platform
        self.pid = os.getpid() if pid is None else pid
        self._load_pdh = pdh if pdh is not None else _windll_pdh
        self._counter: PdhCounter | None = None
        self._pdh_error = ""

    def _pdh(self) -> int | None:
        if self._pdh_error:
            return None
        try:
            if self._counter is None:
                self._counter = PdhCounter(self._load_pdh(), COUNTER.format(pid=self.pid))
            return process_shared_usage(self._counter.read(), self.pid)
        except Exception as exc:  # no pdh.dll, counters disabled (lodctr), an old Windows: not again
            self._pdh_error = f"the GPU Process Memory counter could not be read ({exc})"
            _log.info("Headroom: %s; spill into shared memory comes from torch's figures", self._pdh_error)
            return None

    def read(self) -> Spill:
        if self.platform == "win32":
            shared = self._pdh()
            if shared is not None:
                return Spill(shared, "", "pdh")
        beyond = torch_evidence(self.cuda, self.device)
        if beyond is not None:
            return Spill(beyond, "torch reserved more than the device holds", "torch")
        if self.platform != "win32":
            return Spill(None, NO_FALLBACK)
        why = self._pdh_error or "this process has no GPU Process Memory instance (no GPU context yet)"
        return Spill(None, f"{NOT_REPORTED}: {why}")


def _windll_pdh() -> Any:
    return ctypes.WinDLL("pdh")  # type: ignore[attr-defined]  # Windows only; the reader never calls it elsewhere
