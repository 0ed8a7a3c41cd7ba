"""The RAM budget: its default from the machine's figures (Linux and Windows pinned caps, swap, low RAM),
the environment variable and the setting, and the OS readings it rests on."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from comfyui_headroom.memory.residency import ram_budget
from comfyui_headroom.memory.residency.ram_budget import (
    RAM_BUDGET_ENV,
    Machine,
    RamKnob,
    machine_budget,
    pinned_limit,
    read_machine,
    read_process,
    release_heap,
    reserve_for,
)
from comfyui_headroom.memory.units import GiB, MiB


def machine(
    total: float, available: float, own: float = 1, swap: float = 0, system: str = "linux"
) -> Machine:
    return Machine(int(total * GiB), int(available * GiB), int(swap * GiB), int(own * GiB), system)


@pytest.mark.parametrize(
    ("total", "swap", "system", "expected"),
    [
        (32, 0, "linux", 16),  # R + swap - 16 GiB binds
        (32, 32, "linux", 28),  # with swap: R - 4 GiB binds
        (128, 64, "linux", 115.2),  # 90% binds
        (8, 0, "linux", 3.2),  # the 40% floor
        (32, 0, "win32", 12.8),  # Windows: 40% whatever the swap
        (32, 64, "win32", 12.8),
    ],
)
def test_the_pinned_limit_is_the_hosts_per_os(
    total: float, swap: float, system: str, expected: float
) -> None:
    assert pinned_limit(int(total * GiB), int(swap * GiB), system) == pytest.approx(expected * GiB, abs=1)


def test_the_reserve_is_a_tenth_of_ram_within_one_and_four_gib() -> None:
    assert [reserve_for(n * GiB) / GiB for n in (4, 8, 32, 128)] == pytest.approx([1, 1, 3.2, 4])


def test_the_default_is_what_other_programs_leave_less_the_reserve() -> None:
    b = machine_budget(machine(32, available=20, own=2))  # other programs hold 10 GiB
    assert b.ram == pytest.approx((22 - 3.2) * GiB, abs=1)
    assert b.pinned == 16 * GiB  # Linux's cap for 32 GiB without swap
    assert b.source == "machine" and "other programs 10.00 GiB" in b.detail


def test_windows_caps_the_pinned_part_far_lower() -> None:
    linux = machine_budget(machine(64, available=60, own=0))
    windows = machine_budget(machine(64, available=60, own=0, system="win32"))
    assert linux.ram == windows.ram
    assert windows.pinned == pytest.approx(0.4 * 64 * GiB, abs=1)
    assert linux.pinned == 48 * GiB  # R + swap - 16 GiB


def test_swap_does_not_raise_the_budget_only_linuxs_pinned_cap() -> None:
    without, with_swap = machine_budget(machine(32, 20)), machine_budget(machine(32, 20, swap=32))
    assert with_swap.ram == without.ram  # swapping model weights is the slowdown the budget avoids
    assert with_swap.pinned > without.pinned


def test_a_low_ram_machine_gets_a_small_budget_never_a_negative_one() -> None:
    low = machine_budget(machine(8, available=1, own=0.5))
    assert low.ram == pytest.approx(0.5 * GiB, abs=1) and low.pinned == low.ram
    assert machine_budget(machine(8, available=0.2, own=0.1)).ram == 0


def test_what_this_process_holds_counts_as_ours() -> None:
    # holding a model does not shrink our own budget: available fell by what we took
    before, after = machine_budget(machine(32, 28, own=1)), machine_budget(machine(32, 18, own=11))
    assert before.ram == after.ram


def test_the_variable_beats_the_setting_which_beats_the_machine(caplog: pytest.LogCaptureFixture) -> None:
    env: dict[str, str] = {}
    knob = RamKnob(lambda: machine(32, 20, own=2), env)
    assert knob.resolve().source == "machine"
    knob.configure("12GB")
    assert (knob.resolve().ram, knob.resolve().source) == (12 * GiB, "setting")
    knob.configure(3 * GiB + 5)  # an int is bytes
    assert knob.resolve().ram == 3 * GiB + 5
    env[RAM_BUDGET_ENV] = "24 GiB"
    b = knob.resolve()
    assert (b.ram, b.pinned, b.source) == (24 * GiB, 16 * GiB, RAM_BUDGET_ENV)
    env[RAM_BUDGET_ENV] = "lots"
    assert knob.resolve().source == "setting"  # a bad variable is ignored, with a warning
    assert "HEADROOM_RAM_BUDGET='lots' is not a size" in caplog.text and "it is ignored" in caplog.text
    knob.configure("auto")
    assert knob.resolve().source == "machine"
    for bad in ("-1GB", -1, "plenty"):
        with pytest.raises(ValueError):
            knob.configure(bad)
    assert knob.resolve().source == "machine"  # a refused value changes nothing


def test_the_pinned_part_never_exceeds_the_budget() -> None:
    knob = RamKnob(lambda: machine(64, 60), {RAM_BUDGET_ENV: "2GB"})
    assert knob.resolve().pinned == 2 * GiB


def test_rssanon_comes_from_proc_status(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmRSS:\t  900000 kB\nRssAnon:\t  512000 kB\nRssFile:\t  388000 kB\n")
    reading = read_process(status, pinned=lambda: 7)
    assert (reading.anon, reading.pinned, reading.total, reading.how) == (
        512000 * 1024,
        7,
        512000 * 1024 + 7,
        "RssAnon",
    )


def test_elsewhere_psutil_gives_private_bytes_or_rss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    windows = SimpleNamespace(rss=900, private=600)
    fake = SimpleNamespace(Process=lambda: SimpleNamespace(memory_info=lambda: windows))
    monkeypatch.setattr(ram_budget, "optional_module", lambda name, feature: fake)
    missing = tmp_path / "no-proc"
    assert read_process(missing, pinned=lambda: 0).how == "private bytes"
    assert read_process(missing, pinned=lambda: 0).anon == 600
    windows = SimpleNamespace(rss=900)  # macOS: no private figure
    assert (read_process(missing, pinned=lambda: 0).anon, read_process(missing, pinned=lambda: 0).how) == (
        900,
        "RSS",
    )


def test_the_machine_figures_come_from_proc_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:  33554432 kB\nMemFree:  1000 kB\nMemAvailable:  20971520 kB\nSwapTotal:  0 kB\n"
    )
    m = read_machine(meminfo, reading=lambda: ram_budget.RamReading(GiB, 0), cgroup=tmp_path)
    assert (m.total, m.available, m.swap, m.own) == (32 * GiB, 20 * GiB, 0, GiB)


@pytest.mark.parametrize(
    ("limit", "expected"), [("max", (32 * GiB, 20 * GiB)), (str(8 * GiB), (8 * GiB, 2 * GiB))]
)
def test_a_containers_memory_limit_bounds_the_machine_figures(
    tmp_path: Path, limit: str, expected: tuple[int, int]
) -> None:
    """A cgroup v2 memory.max below the machine's RAM (a container): MemAvailable would promise RAM the
    kernel's OOM killer never lets us have."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  33554432 kB\nMemAvailable:  20971520 kB\nSwapTotal:  0 kB\n")
    (tmp_path / "memory.max").write_text(limit + "\n")
    (tmp_path / "memory.current").write_text(f"{6 * GiB}\n")
    m = read_machine(meminfo, reading=lambda: ram_budget.RamReading(GiB, 0), cgroup=tmp_path)
    assert (m.total, m.available) == expected


def _rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's (Linux)")
def test_release_heap_really_returns_freed_heap_to_the_os() -> None:
    """Small blocks come from glibc's heap; with a few kept alive among them, free() cannot shrink it and
    RssAnon stays up until malloc_trim(0) hands the free pages back."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 (musl has none)
    except (OSError, AttributeError):
        pytest.skip("no glibc here: malloc_trim does not exist")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    release_heap()
    blocks = []
    for _ in range(8192):  # 8192 x 16 KiB = 128 MiB, below the mmap threshold: heap memory
        block = libc.malloc(16 * 1024)
        libc.memset(block, 1, 16 * 1024)  # touched: resident
        blocks.append(block)
    for i, block in enumerate(blocks):
        if i % 64:  # keep one in 64 alive: the heap cannot shrink from its top
            libc.free(block)
    held = _rss_anon()
    assert release_heap()
    freed = held - _rss_anon()
    for block in blocks[::64]:
        libc.free(block)
    assert freed > 64 * MiB, f"malloc_trim returned only {freed / MiB:.0f} MiB"


def fake_torch(initialized: bool, calls: list[str]) -> SimpleNamespace:
    cuda = SimpleNamespace(
        is_initialized=lambda: initialized,
        host_memory_stats=lambda: {"allocated_bytes.current": 3 * GiB, "active_bytes.current": GiB},
    )
    return SimpleNamespace(cuda=cuda, _C=SimpleNamespace(_host_emptyCache=lambda: calls.append("empty")))


def test_pinned_bytes_and_their_release_go_through_torchs_host_allocator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "torch", fake_torch(True, calls))
    assert ram_budget.cuda_pinned() == 3 * GiB  # cached blocks are page-locked too
    assert ram_budget.release_pinned_cache() and calls == ["empty"]
    monkeypatch.setitem(sys.modules, "torch", fake_torch(False, calls))
    assert ram_budget.cuda_pinned() == 0 and not ram_budget.release_pinned_cache()
    assert calls == ["empty"]  # CUDA never started: nothing pinned, nothing to release


def test_the_machines_figures_are_read_again_at_most_every_refresh() -> None:
    """Plans are cached by their budget: one that moved with every reading would never be found again."""
    readings = iter([machine(32, 20), machine(32, 10), machine(32, 10)])
    now = [0.0]
    knob = RamKnob(lambda: next(readings), {}, refresh_s=30, clock=lambda: now[0])
    first = knob.resolve()
    now[0] = 29
    assert knob.resolve() == first
    now[0] = 30
    assert knob.resolve().ram == first.ram - 10 * GiB
