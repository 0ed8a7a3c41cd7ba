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
