"""What bounded each node (memory/telemetry/bounds.py), measured, and where it shows: the node badge (the
timeline's data), the plan-vs-actual report, the VRAM Stats text and the log."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from comfyui_headroom.memory.telemetry.bounds import bounded_by
from comfyui_headroom.memory.telemetry.hub import Telemetry
from comfyui_headroom.memory.telemetry.probe import MemoryProbe, PinnedLedger
from comfyui_headroom.memory.telemetry.report import report_csv, report_json, text_report
from comfyui_headroom.memory.telemetry.runs import ResidencyEvent
from comfyui_headroom.memory.telemetry.sampler import Sampler
from comfyui_headroom.memory.telemetry.spill import NO_FALLBACK, Spill, SpillReader

GiB, MiB = 2**30, 2**20


def event(action: str, component: str = "unet", nbytes: int = 0) -> ResidencyEvent:
    return ResidencyEvent(0.0, "p", "1", component, "disk", "gpu", nbytes, action)


def test_disk_bound_with_the_measured_rate() -> None:
    b = bounded_by(9.0, {"proc_read": int(13.4 * GiB), "disk_read": int(13.4 * GiB), "disk_read_ms": 6400})
    assert b.kind == "disk" and b.disk_s == pytest.approx(6.4)
    assert b.line == "disk-bound: 13.40 GiB read at 2.2 GB/s, 6.4 s of its 9.0 s"


def test_without_the_systems_read_time_the_rate_is_assumed_and_said() -> None:
    b = bounded_by(2.0, {"proc_read": 3 * 10**9})
    assert b.kind == "disk" and b.disk_s == pytest.approx(1.0) and "assumed 3.0 GB/s" in b.line


def test_upload_bound_pin_failures_and_a_load_the_plan_kept() -> None:
    held: set[str] = set()
    first = bounded_by(1.0, {}, [event("load", nbytes=11 * 10**9)], held)
    assert first.kind == "upload" and first.reloads == () and held == {"unet"}
    again = bounded_by(1.0, {}, [event("pin failed"), event("load", nbytes=10**9)], held)
    assert again.pin_failures == 1 and again.reloads == ("unet",)
    assert "1 pinning failure" in again.line and "loaded again though the plan kept it: unet" in again.line
    evicted = bounded_by(1.0, {}, [event("evict"), event("load", nbytes=10**9)], held)
    assert evicted.reloads == ()


def test_compute_bound_when_nothing_is_read_or_uploaded() -> None:
    b = bounded_by(0.5, {"proc_read": 4096})
    assert b.kind == "compute" and b.line.startswith("compute-bound: 0.5 s of its 0.5 s")


def test_a_cpu_run_shows_bounded_by_in_the_badge_the_report_the_stats_text_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = MemoryProbe.detect()  # this machine: psutil, no CUDA
    telemetry = Telemetry(probe, Sampler(probe.read, period_s=0), max_runs=2)
    badges: list[dict] = []
    telemetry.listeners.append(lambda name, payload: badges.append(payload) if "node" in payload else None)
    telemetry.start_prompt("p", {"1": {"class_type": "KSampler", "inputs": {}}})
    telemetry.node_started("p", "1")
    deadline = time.perf_counter() + 0.05
    x = 0
    while time.perf_counter() < deadline:  # some compute; the test counts no time, it reads the kind
        x += sum(range(1000))
    with caplog.at_level(logging.INFO, logger="headroom"):
        record = telemetry.node_finished("p", "1")
    assert record is not None and record.bound is not None
    assert record.bound["kind"] in ("compute", "disk")
    assert badges[-1]["bounded_by"] == record.bound["line"]
    assert f"node 1 KSampler was {record.bound['line']}" in caplog.text
    report = report_json(telemetry.run("p"))
    assert report["nodes"][0]["bounded_by"]["line"] == record.bound["line"]
    assert record.bound["line"] in report_csv(telemetry.run("p"))
    assert record.bound["line"] in text_report(telemetry.run("p"), probe.read(), {})
    assert telemetry.recent()[-1]["nodes"][0]["bound"] == record.bound["kind"]


def test_io_deltas_come_from_the_probe() -> None:
    class Psutil:
        def __init__(self) -> None:
            self.read = 0

        def Process(self) -> SimpleNamespace:  # noqa: N802
            return SimpleNamespace(
                memory_info=lambda: SimpleNamespace(rss=1),
                io_counters=lambda: SimpleNamespace(read_bytes=self.read),
            )

        def virtual_memory(self) -> SimpleNamespace:
            return SimpleNamespace(total=8 * GiB, available=4 * GiB)

        def disk_io_counters(self) -> SimpleNamespace:
            return SimpleNamespace(read_bytes=self.read, read_time=self.read // (2 * 10**6))  # 2 GB/s

    psutil = Psutil()
    clock = SimpleNamespace(t=0.0)
    probe = MemoryProbe(psutil=psutil, pinned=PinnedLedger(), clock=lambda: clock.t)
    telemetry = Telemetry(probe, Sampler(probe.read, period_s=0))
    telemetry.start_prompt("p", {"1": {"class_type": "UNETLoader", "inputs": {}}})
    telemetry.node_started("p", "1")
    psutil.read, clock.t = 8 * 10**9, 5.0
    record = telemetry.node_finished("p", "1")
    assert record is not None and record.io == {
        "proc_read": 8 * 10**9,
        "disk_read": 8 * 10**9,
        "disk_read_ms": 4000,
    }
    assert (
        record.bound is not None
        and record.bound["line"] == "disk-bound: 7.45 GiB read at 2.0 GB/s, 4.0 s of its 5.0 s"
    )


def test_reads_and_uploads_are_priced_at_this_machines_measured_rates_and_say_so() -> None:
    read = {"proc_read": 6 * 10**9}  # no busy time from the system
    stored = bounded_by(4.0, read, measured={"disk": 2.0e9})
    assert stored.disk_s == pytest.approx(3.0) and stored.disk_rate_source == "measured"
    assert "read at 2.0 GB/s (measured on this machine's earlier runs), 3.0 s of its 4.0 s" in stored.line
    assert stored.disk_rate is None  # not this node's measurement: it is not stored again
    assumed = bounded_by(4.0, read)
    assert assumed.disk_s == pytest.approx(2.0) and "assumed 3.0 GB/s" in assumed.line
    pinned = ResidencyEvent(0.0, "p", "1", "unet", "pinned", "gpu", 10 * 10**9, "load")
    pageable = ResidencyEvent(0.0, "p", "1", "clip", "ram", "gpu", 10 * 10**9, "load")
    both = {"h2d_pinned": 20e9, "h2d_pageable": 5e9}
    up = bounded_by(3.0, {}, [pinned, pageable], measured=both)
    assert up.upload_s == pytest.approx(2.5) and up.upload_rate_source == "measured"  # 0.5 s + 2.0 s
    assert "20.00 GB uploaded" not in up.line and "at 8.0 GB/s (measured" in up.line
    part = bounded_by(3.0, {}, [pinned, pageable], measured={"h2d_pageable": 5e9})
    assert part.upload_s == pytest.approx(10e9 / 25e9 + 2.0) and "partly measured" in part.line
    none = bounded_by(1.0, {}, [pageable])
    assert none.upload_s == pytest.approx(10 / 12) and "at an assumed 12.0 GB/s" in none.line


def gauge(shared: int | None = None, pinned: int = 0, aimdo: int | None = None, **notes: str) -> dict:
    return {"shared": shared, "pinned": pinned, "aimdo_vram": aimdo, **notes}


def test_spill_is_the_shared_memory_a_node_added_beyond_its_pins() -> None:
    spilled = bounded_by(1.0, {}, gauges=(gauge(3 * GiB, 2 * GiB), gauge(5 * GiB, 3 * GiB)))
    assert (spilled.spilled, spilled.shared_bytes) == (GiB, 2 * GiB)
    assert spilled.line.endswith("; spilled 1.00 GiB into shared memory")
    stayed = bounded_by(1.0, {}, gauges=(gauge(4 * GiB, GiB), gauge(4 * GiB, GiB)))
    assert stayed.spilled == 0 and stayed.line.endswith("; ran with 3.00 GiB in shared memory")
    pins_only = bounded_by(1.0, {}, gauges=(gauge(0, 0), gauge(6 * GiB, 6 * GiB)))
    assert pins_only.spilled == 0 and "shared memory" not in pins_only.line
    note = "not reported by this OS: no fallback"
    linux = bounded_by(1.0, {}, gauges=(gauge(shared_note=note), gauge(shared_note=note)))
    assert linux.spilled is None and linux.spill_note == note and "shared" not in linux.line


def test_comfy_aimdos_vram_change_is_what_it_paged_in_or_freed() -> None:
    paged = bounded_by(1.0, {}, gauges=(gauge(aimdo=GiB), gauge(aimdo=7 * GiB)))
    assert (
        paged.aimdo_paged == 6 * GiB
        and "; comfy-aimdo paged in 6.00 GiB (VRAM in use 7.00 GiB)" in paged.line
    )
    freed = bounded_by(1.0, {}, gauges=(gauge(aimdo=7 * GiB), gauge(aimdo=2 * GiB)))
    assert freed.aimdo_paged == -5 * GiB and "comfy-aimdo freed 5.00 GiB" in freed.line
    off = bounded_by(
        1.0, {}, gauges=(gauge(aimdo_note="DynamicVRAM is off"), gauge(aimdo_note="DynamicVRAM is off"))
    )
    assert off.aimdo_vram is None and off.aimdo_note == "DynamicVRAM is off" and "aimdo" not in off.line


def test_the_hub_prices_with_the_stored_links_and_reads_the_gauges_at_both_ends() -> None:
    clock = SimpleNamespace(t=0.0)
    ledger = PinnedLedger()
    readings = iter([1 * GiB, 4 * GiB])  # shared usage at the node's start and end
    spill = SimpleNamespace(read=lambda: Spill(next(readings), "", "pdh"))
    probe = MemoryProbe(pinned=ledger, clock=lambda: clock.t, spill=spill)  # type: ignore[arg-type]
    telemetry = Telemetry(probe, Sampler(probe.read, period_s=0))
    host = iter([{"host_pinned": GiB, "aimdo_vram": 0}, {"host_pinned": GiB, "aimdo_vram": 3 * GiB}])
    telemetry.host_gauges = lambda: next(host)
    telemetry.links = lambda: {"h2d_pageable": 6e9}
    telemetry.start_prompt("p", {"1": {"class_type": "KSampler", "inputs": {}}})
    telemetry.node_started("p", "1")
    ledger.set("streamer", GiB)  # Headroom pinned a gigabyte during the node: no spill
    telemetry.record_event(ResidencyEvent(0.0, "p", "1", "unet", "ram", "gpu", 12 * 10**9, "load"))
    clock.t = 3.0
    record = telemetry.node_finished("p", "1")
    assert record is not None and record.bound is not None
    b = record.bound
    assert (b["upload_s"], b["upload_rate_source"]) == (2.0, "measured")
    assert (b["spilled"], b["shared_bytes"], b["aimdo_paged"]) == (2 * GiB, 2 * GiB, 3 * GiB)
    assert b["line"].startswith("upload-bound: 11.18 GiB uploaded at 6.0 GB/s (measured")
    assert "spilled 2.00 GiB into shared memory" in b["line"] and "comfy-aimdo paged in 3.00 GiB" in b["line"]
    failing = Telemetry(MemoryProbe(pinned=PinnedLedger()), Sampler(probe.read, period_s=0))
    failing.links = lambda: 1 / 0  # type: ignore[assignment,return-value]
    failing.host_gauges = lambda: 1 / 0  # type: ignore[assignment,return-value]
    failing.start_prompt("q", {"1": {"class_type": "KSampler", "inputs": {}}})
    failing.node_started("q", "1")
    done = failing.node_finished("q", "1")
    assert done is not None and done.bound is not None and "division by zero" in done.bound["aimdo_note"]


def test_the_stats_text_says_once_why_spill_was_not_read() -> None:
    probe = MemoryProbe(pinned=PinnedLedger(), spill=SpillReader(platform="linux"))
    telemetry = Telemetry(probe, Sampler(probe.read, period_s=0))
    telemetry.start_prompt(
        "p", {"1": {"class_type": "A", "inputs": {}}, "2": {"class_type": "B", "inputs": {}}}
    )
    for node in ("1", "2"):
        telemetry.node_started("p", node)
        telemetry.node_finished("p", node)
    text = text_report(telemetry.run("p"), probe.read(), {})
    assert text.count("spill into shared memory: not reported by this OS") == 1
    assert report_json(telemetry.run("p"))["nodes"][0]["bounded_by"]["spill_note"] == NO_FALLBACK
