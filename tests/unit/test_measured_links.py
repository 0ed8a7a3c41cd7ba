"""Measured links feed the next plan of the same machine (memory/telemetry/links.py, nodes/host/links.py):
a run's node that read from the disk at a measured rate is kept under the machine's identity, and the
next plan of that machine prices the disk at that rate and says which figures are measured."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from comfyui_headroom.memory.planning.baselines import BASELINES
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.planning.report import plan_text
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.telemetry.hub import Telemetry
from comfyui_headroom.memory.telemetry.links import LinkStore, machine_identity, measured_hardware
from comfyui_headroom.memory.telemetry.probe import MemoryProbe, PinnedLedger
from comfyui_headroom.memory.telemetry.sampler import Sampler
from comfyui_headroom.memory.units import GB
from comfyui_headroom.nodes.host import links as host_links


def test_the_store_keeps_the_median_of_the_last_runs_per_machine_and_link(tmp_path: Path) -> None:
    store = LinkStore(tmp_path / "links.json")
    for rate in (20e9, 24e9, 1e15, 22e9):  # 1e15 B/s is no PCIe link: refused, not kept
        store.record("a / GPU", "h2d_pinned", rate)
    assert not store.record("a / GPU", "tflops", 1e9) and not store.record("a / GPU", "disk", None)
    store.record("b / GPU", "disk", 1e9)
    assert store.measured("a / GPU") == {"h2d_pinned": 22e9}
    assert store.measured("b / GPU") == {"disk": 1e9} and store.measured("c") == {}
    (tmp_path / "links.json").write_text("not json")
    assert store.measured("a / GPU") == {}  # a damaged file: assumed figures, no error


def test_measured_figures_replace_the_assumed_ones_and_are_named() -> None:
    hw = measured_hardware(Hardware.pcie(4), {"disk": 1.5e9})
    assert hw.disk == 1.5e9 and hw.h2d_pinned == Hardware.pcie(4).h2d_pinned and hw.measured == ("disk",)
    assert "disk read 1.5 GB/s (measured)" in hw.links_line()
    assert "upload pinned 25.0 GB/s (assumed)" in hw.links_line()
    assert measured_hardware(Hardware.pcie(4), {}) == Hardware.pcie(4)


def _disk_workload() -> Workload:
    """A 12 GB model read from the disk once, then sampled on a card that holds it."""
    dit = Component("dit", "DiT", 12 * GB, blocks=(1 * GB,) * 12, kind="diffusion_model")
    return Workload((dit,), (Step("sample", "KSampler", ("dit",), evaluations=4, activation=GB),))


class _Psutil:
    def __init__(self) -> None:
        self.read = 0

    def Process(self) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(
            memory_info=lambda: SimpleNamespace(rss=1),
            io_counters=lambda: SimpleNamespace(read_bytes=self.read),
        )

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(total=64 * GB, available=32 * GB)

    def disk_io_counters(self) -> SimpleNamespace:
        return SimpleNamespace(read_bytes=self.read, read_time=self.read // 800_000)  # ms: 0.8 GB/s


def test_a_runs_measured_disk_rate_is_used_by_the_next_plan_of_that_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_links, "STORE", LinkStore(tmp_path / "links.json"))
    budget = Budget.from_card(24 * GB, 64 * GB)
    before = host_links.hardware_for(None)
    assert before.measured == () and before.disk == Hardware.pcie(4).disk

    # the run: a loader reads 8 GB in 10 s of disk time (the OS's read counters), so 0.8 GB/s
    psutil, clock = _Psutil(), SimpleNamespace(t=0.0)
    probe = MemoryProbe(psutil=psutil, pinned=PinnedLedger(), clock=lambda: clock.t)
    telemetry = Telemetry(probe, Sampler(probe.read, period_s=0))
    telemetry.on_disk_rate = host_links.record_disk  # as the host's monitor wires it
    telemetry.start_prompt("p", {"1": {"class_type": "UNETLoader", "inputs": {}}})
    telemetry.node_started("p", "1")
    psutil.read, clock.t = 8 * 10**9, 12.0
    telemetry.node_finished("p", "1")
    kept = json.loads((tmp_path / "links.json").read_text())["machines"]
    assert kept == {machine_identity(host_links.device_name()): {"disk": [pytest.approx(0.8e9)]}}

    # the next plan of this machine: the disk at the measured rate, and the text says so
    after = host_links.hardware_for(None)
    assert after.disk == pytest.approx(0.8e9) and after.measured == ("disk",)
    w = _disk_workload()
    first, second = plan(w, budget, before), plan(w, budget, after)
    assert second.transfer_s > first.transfer_s  # 12 GB from the disk at 0.8 GB/s instead of 3 GB/s
    text = plan_text(second, w, {name: policy(w, budget, after) for name, policy in BASELINES.items()})
    assert "links: upload pinned 25.0 GB/s (assumed), upload pageable 12.0 GB/s (assumed), " in text
    assert "disk read 0.8 GB/s (measured)" in text
    assert "measured" not in plan_text(first, w, {})


def test_a_streamed_runs_upload_rate_is_kept_only_from_a_cuda_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_links, "STORE", LinkStore(tmp_path / "links.json"))
    host_links.record_stream({"cuda": False, "pinned": True, "h2d_bytes_per_s": 9e9})  # RAM copies on a CPU
    assert host_links.hardware_for(None).measured == ()
    host_links.record_stream({"cuda": True, "pinned": False, "h2d_bytes_per_s": 9e9})
    hw = host_links.hardware_for(None)
    assert hw.h2d_pageable == 9e9 and hw.measured == ("h2d_pageable",)
    assert "upload pageable 9.0 GB/s (measured)" in hw.links_line()
