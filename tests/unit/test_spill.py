"""Spill into shared memory where the OS says so (memory/telemetry/spill.py): the PDH counter's instances
decoded through ctypes from a stand-in of pdh.dll, torch's evidence, and the reason when neither answers."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

from comfyui_headroom.memory.telemetry.probe import MemoryProbe, PinnedLedger
from comfyui_headroom.memory.telemetry.spill import (
    NO_FALLBACK,
    PDH_MORE_DATA,
    SpillReader,
    _FmtItem,
    process_shared_usage,
    torch_evidence,
)

GiB = 2**30

PDH_NO_DATA = 0x800007D5  # PDH's warning that the wildcard matches no instance (yet)


def test_the_process_instances_are_summed_over_its_adapters_and_no_other_pid_counts() -> None:
    items = [
        ("pid_1234_luid_0x00000000_0x0000C5D3_phys_0", 1.0 * GiB),
        ("pid_1234_luid_0x00000000_0x0000D111_phys_0", 0.5 * GiB),
        ("pid_12345_luid_0x00000000_0x0000C5D3_phys_0", 7.0 * GiB),  # another process, same prefix
        ("pid_99_luid_0x00000000_0x0000C5D3_phys_0", 3.0 * GiB),
    ]
    assert process_shared_usage(items, 1234) == int(1.5 * GiB)
    assert process_shared_usage(items, 4321) is None  # no GPU context in that process


def cuda(reserved: int, total: int) -> SimpleNamespace:
    return SimpleNamespace(
        memory_reserved=lambda device: reserved,
        get_device_properties=lambda device: SimpleNamespace(total_memory=total),
    )


def test_torch_reserving_beyond_the_device_is_the_spill_it_proves() -> None:
    assert torch_evidence(cuda(10 * GiB, 8 * GiB)) == 2 * GiB
    assert torch_evidence(cuda(6 * GiB, 8 * GiB)) is None  # proves nothing either way
    assert torch_evidence(None) is None
    assert torch_evidence(SimpleNamespace()) is None  # a cuda without the calls fails open


def test_linux_says_it_is_not_reported_and_why_unless_torch_shows_it() -> None:
    spill = SpillReader(platform="linux").read()
    assert spill.nbytes is None and spill.reason == NO_FALLBACK
    assert spill.reason.startswith("not reported by this OS")
    seen = SpillReader(cuda(9 * GiB, 8 * GiB), platform="linux").read()
    assert (seen.nbytes, seen.source) == (GiB, "torch")


class FakePdh:
    """pdh.dll's four calls as ctypes would make them: handles and sizes through byref, the items written
    into the caller's buffer."""

    def __init__(self, instances: list[tuple[str, int]], fail: str = "") -> None:
        self.instances, self.fail = instances, fail
        self.paths: list[str] = []
        self.collects = 0
        self.keep: Any = None

    def PdhOpenQueryW(self, source: None, user: int, query: Any) -> int:  # noqa: N802
        if self.fail == "open":
            return 0xC0000BB8 - 2**32  # PDH_CSTATUS_NO_MACHINE as a signed LONG
        query._obj.value = 1
        return 0

    def PdhAddEnglishCounterW(self, query: Any, path: str, user: int, counter: Any) -> int:  # noqa: N802
        self.paths.append(path)
        counter._obj.value = 2
        return 0

    def PdhCollectQueryData(self, query: Any) -> int:  # noqa: N802
        self.collects += 1
        return PDH_NO_DATA - 2**32 if not self.instances else 0  # a warning, as PDH gives it

    def PdhGetFormattedCounterArrayW(self, counter: Any, fmt: int, size: Any, count: Any, buf: Any) -> int:  # noqa: N802
        n = len(self.instances)
        if buf is None:
            size._obj.value, count._obj.value = n * ctypes.sizeof(_FmtItem), n
            return PDH_MORE_DATA - 2**32
        items = (_FmtItem * n).from_buffer(buf)
        for item, (name, value) in zip(items, self.instances, strict=True):
            item.szName, item.FmtValue.CStatus = name, 0
            item.FmtValue.value.largeValue = value
        self.keep = items  # the names' memory, while the reader decodes them
        count._obj.value = n
        return 0


def test_windows_reads_the_process_counter_through_pdh() -> None:
    pdh = FakePdh([("pid_42_luid_0x0_0x1_phys_0", 3 * GiB // 2), ("pid_7_luid_0x0_0x1_phys_0", GiB)])
    reader = SpillReader(cuda(9 * GiB, 8 * GiB), platform="win32", pdh=lambda: pdh, pid=42)
    first, second = reader.read(), reader.read()
    assert (first.nbytes, first.source) == (3 * GiB // 2, "pdh")  # the counter first, not torch's bound
    assert second.nbytes == first.nbytes and pdh.paths == [r"\GPU Process Memory(pid_42_*)\Shared Usage"]
    assert pdh.collects == 2  # one query, collected at each read


def test_windows_without_the_counter_falls_back_to_torch_then_says_why() -> None:
    loads: list[int] = []

    def broken() -> FakePdh:
        loads.append(1)
        return FakePdh([], fail="open")

    reader = SpillReader(cuda(4 * GiB, 8 * GiB), platform="win32", pdh=broken, pid=42)
    spill = reader.read()
    assert spill.nbytes is None and spill.reason.startswith("not reported by this OS: the GPU Process Memory")
    assert "0xC0000BB8" in spill.reason
    reader.cuda = cuda(9 * GiB, 8 * GiB)
    assert reader.read().source == "torch" and loads == [1]  # the failed counter is not opened again
    empty = FakePdh([])
    later = SpillReader(platform="win32", pdh=lambda: empty, pid=42)
    none_yet = later.read()
    assert none_yet.nbytes is None and "no GPU Process Memory instance" in none_yet.reason
    empty.instances.append(("pid_42_luid_0x0_0x1_phys_0", GiB))  # the process made its CUDA context
    assert later.read().nbytes == GiB and empty.collects == 2  # a warning does not turn the counter off


def test_the_probe_reads_it_and_a_failing_reader_fails_open() -> None:
    probe = MemoryProbe(pinned=PinnedLedger(), spill=SpillReader(platform="linux"))
    assert probe.shared().reason == NO_FALLBACK
    probe.spill = SimpleNamespace(read=lambda: 1 / 0)  # type: ignore[assignment]
    assert probe.shared().nbytes is None and "division by zero" in probe.shared().reason


def test_the_item_layout_is_pdh_fmt_countervalue_item_w_on_64_bit() -> None:
    # {LPWSTR szName; {DWORD CStatus; union {LONG; double; LONGLONG; LPCWSTR}}}: the union is 8-aligned
    assert _FmtItem.FmtValue.offset == ctypes.sizeof(ctypes.c_void_p)
    assert type(_FmtItem().FmtValue).value.offset == 8
    assert ctypes.sizeof(_FmtItem) == ctypes.sizeof(ctypes.c_void_p) + 16
