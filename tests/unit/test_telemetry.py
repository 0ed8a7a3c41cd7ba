"""The telemetry core without a host: probes with and without each source, the sampler, per-node records,
plan-vs-actual and its JSON/CSV/text shapes."""

from __future__ import annotations

import csv
import io
import json
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from comfyui_headroom.memory.planning.records import PlannedNode, PlannedRun, prompt_key
from comfyui_headroom.memory.telemetry.hub import Telemetry
from comfyui_headroom.memory.telemetry.probe import MemoryProbe, PinnedLedger, Sample
from comfyui_headroom.memory.telemetry.report import plan_vs_actual, report_csv, report_json, text_report
from comfyui_headroom.memory.telemetry.runs import ResidencyEvent, RunRecord
from comfyui_headroom.memory.telemetry.sampler import Sampler

MiB = 2**20


class Clock:
    """A clock that moves only when told: node durations become exact numbers."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeCuda:
    """torch.cuda as the probe uses it, with memory the test sets."""

    def __init__(self) -> None:
        self.allocated, self.reserved, self.peak = 100 * MiB, 200 * MiB, 150 * MiB
        self.free, self.total = 6000 * MiB, 8000 * MiB
        self.resets = 0

    def memory_allocated(self, device: int) -> int:
        return self.allocated

    def memory_reserved(self, device: int) -> int:
        return self.reserved

    def mem_get_info(self, device: int) -> tuple[int, int]:
        return self.free, self.total

    def reset_peak_memory_stats(self, device: int) -> None:
        self.resets += 1
        self.peak = self.allocated

    def max_memory_allocated(self, device: int) -> int:
        return self.peak

    def get_device_properties(self, device: int) -> Any:
        return SimpleNamespace(uuid="abcd-1234")


class FakeNvml:
    def __init__(self, used: int = 7000 * MiB, total: int = 8000 * MiB) -> None:
        self.used, self.total, self.uuids = used, total, []

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802 (pynvml's names)
        self.uuids.append(uuid)
        return "handle"

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802
        return "by-index"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:  # noqa: N802
        return SimpleNamespace(used=self.used, total=self.total, free=self.total - self.used)

    NVML_TEMPERATURE_GPU = 0

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=63, memory=20)

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:  # noqa: N802
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 71


class FakePsutil:
    def __init__(self) -> None:
        self.rss, self.total, self.available = 500 * MiB, 16000 * MiB, 10000 * MiB

    def Process(self) -> Any:  # noqa: N802
        return SimpleNamespace(memory_info=lambda: SimpleNamespace(rss=self.rss))

    def virtual_memory(self) -> Any:
        return SimpleNamespace(total=self.total, available=self.available)


# ------------------------------------------------------------------------------------------------ probe


def test_probe_without_any_source_reports_only_what_it_knows() -> None:
    ledger = PinnedLedger()
    probe = MemoryProbe(pinned=ledger, clock=Clock(5.0))
    sample = probe.read()
    assert sample.as_dict() == {"t": 5.0, "pinned": 0}
    assert probe.sources() == {"cuda": False, "nvml": False, "psutil": False}
    assert probe.read_peak() is None
    probe.reset_peak()  # no device: nothing to reset, and no error


def test_probe_reads_every_source() -> None:
    cuda, nvml, ps, ledger = FakeCuda(), FakeNvml(), FakePsutil(), PinnedLedger()
    ledger.set("streamer", 64 * MiB)
    sample = MemoryProbe(cuda=cuda, nvml=nvml, psutil=ps, pinned=ledger, clock=Clock()).read()
    assert nvml.uuids == ["GPU-abcd-1234"]  # found by UUID, not by index (CUDA_VISIBLE_DEVICES renumbers)
    assert sample.device_used == 7000 * MiB  # NVML: every process on the device
    assert sample.allocated == 100 * MiB and sample.reserved == 200 * MiB
    assert sample.rss == 500 * MiB and sample.ram_used == 6000 * MiB and sample.ram_total == 16000 * MiB
    assert sample.pinned == 64 * MiB
    assert (sample.gpu_util, sample.gpu_temp) == (63, 71)  # the meter's load and temperature (NVML only)


def test_probe_falls_back_to_cuda_for_whole_device_use_without_nvml() -> None:
    sample = MemoryProbe(cuda=FakeCuda(), clock=Clock()).read()
    assert (sample.device_used, sample.device_total) == (2000 * MiB, 8000 * MiB)
    assert sample.rss is None


def test_a_failing_source_drops_only_its_fields() -> None:
    nvml = FakeNvml()
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: (_ for _ in ()).throw(RuntimeError("GPU is lost"))
    ps = FakePsutil()
    ps.virtual_memory = lambda: (_ for _ in ()).throw(OSError("no /proc"))
    nvml.nvmlDeviceGetTemperature = lambda handle, sensor: (_ for _ in ()).throw(RuntimeError("no sensor"))
    sample = MemoryProbe(cuda=FakeCuda(), nvml=nvml, psutil=ps, clock=Clock()).read()
    assert sample.device_used == 2000 * MiB  # NVML failed: CUDA's figure instead
    assert sample.gpu_util == 63 and sample.gpu_temp is None  # a board without a sensor: load only
    assert sample.allocated == 100 * MiB
    assert sample.rss == 500 * MiB and sample.ram_used is None  # the RSS reading came before the failure


def test_detect_on_this_machine_never_raises() -> None:
    sample = MemoryProbe.detect().read()
    assert sample.t > 0 and sample.pinned is not None
    if MemoryProbe.detect().sources()["psutil"]:
        assert sample.rss and sample.rss > 0


def test_pinned_ledger_tracks_owners() -> None:
    ledger = PinnedLedger()
    ledger.set("a", 10)
    ledger.set("b", 5)
    ledger.set("a", 3)
    assert ledger.total == 8
    ledger.release("a")
    assert ledger.total == 5
    with pytest.raises(ValueError, match="must be >= 0"):
        ledger.set("b", -1)


# ---------------------------------------------------------------------------------------------- sampler


def counter_probe(clock: Clock) -> Any:
    def read() -> Sample:
        clock.t += 1.0
        return Sample(t=clock.t, rss=int(clock.t))

    return read


def test_sampler_history_is_bounded_and_filtered() -> None:
    clock = Clock(0.0)
    sampler = Sampler(counter_probe(clock), period_s=0, history=5)
    for _ in range(8):
        sampler.tick()
    assert [s.t for s in sampler.history()] == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert [s.t for s in sampler.history(since=6.0)] == [7.0, 8.0]
    assert [s.t for s in sampler.history(limit=2)] == [7.0, 8.0]
    assert sampler.latest.t == 8.0
    assert sampler.peaks(5.0, 7.0) == {"rss": 7}


def test_sampler_period_is_validated_and_zero_is_off() -> None:
    sampler = Sampler(counter_probe(Clock()), period_s=0)
    assert sampler.ensure_running() is False and not sampler.running
    with pytest.raises(ValueError, match="0 \\(off\\) to 3600"):
        sampler.set_period(-1)


def test_sampler_thread_samples_while_wanted_and_stops_when_nobody_listens() -> None:
    wanted = threading.Event()
    wanted.set()
    got_three = threading.Event()
    seen: list[Sample] = []

    def on_sample(sample: Sample) -> None:
        seen.append(sample)
        if len(seen) >= 3:
            wanted.clear()  # the last listener leaves
            got_three.set()

    sampler = Sampler(counter_probe(Clock()), period_s=0.001, wanted=wanted.is_set, on_sample=on_sample)
    assert sampler.ensure_running()
    assert got_three.wait(10), "the sampler thread did not deliver samples"
    sampler._thread.join(10)
    assert not sampler.running  # ended by itself once nobody wanted samples
    assert len(seen) == 3
    assert sampler.ensure_running() is False  # and does not restart without demand


def test_a_broken_listener_does_not_stop_sampling() -> None:
    sampler = Sampler(counter_probe(Clock()), on_sample=lambda s: 1 / 0)
    sampler.tick()
    sampler.tick()
    assert sampler.ticks == 2


# ------------------------------------------------------------------------------------- per-node records


def make_telemetry(cuda: FakeCuda | None = None) -> tuple[Telemetry, Clock, list[tuple[str, dict]]]:
    clock = Clock()
    probe = MemoryProbe(cuda=cuda, psutil=FakePsutil(), pinned=PinnedLedger(), clock=clock)
    telemetry = Telemetry(probe, Sampler(probe.read, period_s=0), max_runs=3)
    events: list[tuple[str, dict]] = []
    telemetry.listeners.append(lambda event, payload: events.append((event, payload)))
    return telemetry, clock, events


PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {}},
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
}


def test_node_records_have_durations_and_peaks() -> None:
    cuda = FakeCuda()
    telemetry, clock, events = make_telemetry(cuda)
    telemetry.start_prompt("p1", PROMPT)
    telemetry.node_started("p1", "1")
    clock.t += 0.5
    cuda.peak = 900 * MiB  # a transient inside the node, seen by torch's peak counter
    telemetry.probe.psutil.rss = 800 * MiB
    telemetry.sampler.tick()  # a background sample mid-node
    telemetry.probe.psutil.rss = 600 * MiB
    clock.t += 0.25
    record = telemetry.node_finished("p1", "1")
    assert record is not None and record.class_type == "EmptyImage"
    assert record.duration_s == pytest.approx(0.75)
    assert record.device_peak == 900 * MiB and cuda.resets == 1
    assert record.peak["rss"] == 800 * MiB  # the mid-node sample, above both ends
    assert record.before["rss"] == 500 * MiB and record.after["rss"] == 600 * MiB
    assert events == [
        (
            "headroom.node",
            {
                "prompt_id": "p1", "workflow_id": None, "node": "1", "class_type": "EmptyImage",
                "status": "done", "duration_s": pytest.approx(0.75), "vram_peak": 900 * MiB,
                "rss_peak": 800 * MiB, "cached_from": None,
                "bounded_by": "compute-bound: 0.8 s of its 0.8 s (nothing read or uploaded)",
                "bound": "compute",
            },
        )
    ]  # fmt: skip


def test_cached_nodes_and_requeued_nodes() -> None:
    telemetry, clock, events = make_telemetry()
    telemetry.start_prompt("p1", PROMPT)
    cached = telemetry.node_finished("p1", "1")  # the host finishes a cached node without a start
    assert cached is not None and cached.status == "cached" and cached.computed is None
    first = telemetry.node_started("p1", "2")
    clock.t += 1
    assert telemetry.node_started("p1", "2") is first  # re-queued for lazy inputs: the first start counts
    clock.t += 1
    assert telemetry.node_finished("p1", "2").duration_s == pytest.approx(2.0)
    assert telemetry.node_finished("p1", "2") is None  # finished twice: one record
    assert [(e, p["node"], p["status"]) for e, p in events] == [
        ("headroom.node", "1", "cached"),
        ("headroom.node", "2", "done"),
    ]
    assert events[0][1]["duration_s"] is None  # no run that computed it is known


def test_a_cached_node_keeps_the_figures_of_the_run_that_computed_it() -> None:
    telemetry, clock, events = make_telemetry(FakeCuda())
    telemetry.start_prompt("p1", PROMPT, workflow_id="wf")
    telemetry.node_started("p1", "1")
    clock.t += 0.5
    telemetry.node_finished("p1", "1")
    computed = events[-1][1]
    telemetry.start_prompt("other", PROMPT, workflow_id="another workflow")
    telemetry.node_started("other", "1")
    clock.t += 3
    telemetry.node_finished("other", "1")  # the same node id in another workflow: not its source
    for prompt_id in ("p2", "p3"):  # cached twice in a row: still the first run's figures
        telemetry.start_prompt(prompt_id, PROMPT, workflow_id="wf")
        record = telemetry.node_finished(prompt_id, "1")
        assert record.status == "cached" and record.cached_from == "p1"
        badge = events[-1][1]
        assert badge["status"] == "cached" and badge["workflow_id"] == "wf"
        assert (badge["duration_s"], badge["vram_peak"], badge["rss_peak"]) == (
            computed["duration_s"], computed["vram_peak"], computed["rss_peak"],
        )  # fmt: skip
    telemetry.start_prompt("p4", {**PROMPT, "5": {"class_type": "X", "inputs": {}}}, workflow_id="wf")
    telemetry.nodes_cached("p4", ["1", "5", "not in the prompt"])  # the host's execution_cached list
    assert {n: r.status for n, r in telemetry.run("p4").nodes.items()} == {"1": "cached", "5": "cached"}
    assert telemetry.run("p4").nodes["1"].cached_from == "p1"
    assert telemetry.node_finished("p4", "1") is None  # its later finish (an output node) adds nothing
    assert [p["node"] for _, p in events[-2:]] == ["1", "5"]
    assert [r["prompt_id"] for r in telemetry.recent()] == ["p2", "p3", "p4"]  # max_runs=3
    assert telemetry.recent()[-1]["nodes"][0]["cached_from"] == "p1"  # p1 itself is gone, its figures kept
    assert telemetry.recent()[-1]["nodes"][0]["duration_s"] == computed["duration_s"]


def test_a_node_that_never_finished_is_an_error_when_the_next_prompt_starts() -> None:
    telemetry, _, _ = make_telemetry()
    telemetry.start_prompt("p1", PROMPT)
    telemetry.node_started("p1", "1")
    telemetry.start_prompt("p2", PROMPT)
    assert telemetry.run("p1").nodes["1"].status == "error"
    assert telemetry.current.prompt_id == "p2"


def test_runs_are_bounded_oldest_first() -> None:
    telemetry, _, _ = make_telemetry()
    for n in range(5):
        telemetry.start_prompt(f"p{n}", {})
    assert telemetry.prompt_ids() == ["p2", "p3", "p4"]
    assert telemetry.run("p0") is None


def test_residency_events_attach_to_their_node() -> None:
    telemetry, clock, events = make_telemetry()
    telemetry.start_prompt("p1", PROMPT)
    telemetry.node_started("p1", "1")
    event = ResidencyEvent(clock.t, "p1", "1", "flux [diffusion_model]", "disk", "gpu", 12 * 2**30, "load")
    telemetry.record_event(event)
    telemetry.record_event(ResidencyEvent(clock.t, "unknown-prompt", None, "x", "disk", "ram"))  # ignored
    assert telemetry.run("p1").nodes["1"].events == [event]
    assert telemetry.run("p1").events == [event]
    assert events[-1] == ("headroom.residency", event.as_dict())


def test_prompt_key_is_stable_and_order_independent() -> None:
    reordered = {"2": PROMPT["2"], "1": PROMPT["1"]}
    assert prompt_key(PROMPT) == prompt_key(reordered)
    assert prompt_key(PROMPT) != prompt_key({"1": PROMPT["1"]})


# ------------------------------------------------------------------------------------------ the reports


def planned() -> PlannedRun:
    return PlannedRun(
        fits=True,
        nodes=(
            PlannedNode("1", "EmptyImage", 1, 0, 0.0, {}),
            PlannedNode(
                "3",
                "VAEDecode",
                2,
                300 * MiB,
                0.5,
                {"ae [vae]": "gpu"},
                {"ae [vae]": "on GPU: used here, fits (0.29 GiB of 7.00 GiB)"},
            ),
        ),
        budget_vram=7 * 2**30,
        min_vram=300 * MiB,
    )


def finished_run(cuda: FakeCuda | None = None) -> tuple[Telemetry, RunRecord]:
    telemetry, clock, _ = make_telemetry(cuda)
    run = telemetry.start_prompt("p1", PROMPT)
    telemetry.attach_plan("p1", planned())
    for node_id in ("1", "2"):
        telemetry.node_started("p1", node_id)
        clock.t += 0.125
        telemetry.node_finished("p1", node_id)
    return telemetry, run


def test_a_cached_node_is_reported_cached_with_no_figures_or_planned_bars() -> None:
    telemetry, clock = make_telemetry(FakeCuda())[:2]
    for prompt_id in ("p1", "p2"):
        telemetry.start_prompt(prompt_id, {**PROMPT, "3": {"class_type": "VAEDecode", "inputs": {}}})
        telemetry.attach_plan(prompt_id, planned())
        if prompt_id == "p1":
            telemetry.node_started(prompt_id, "3")
            clock.t += 0.25
        telemetry.node_finished(prompt_id, "3")  # p2: served from the cache
    row = {r["node"]: r for r in plan_vs_actual(telemetry.run("p2"))}["3"]
    assert row["status"] == "cached" and row["cached_from"] == "p1"
    assert row["planned_order"] == 2 and row["planned_placements"] == {"ae [vae]": "gpu"}
    assert [row[k] for k in ("duration_s", "vram_peak", "planned_vram_peak", "planned_wall_s")] == [None] * 4
    table = list(csv.DictReader(io.StringIO(report_csv(telemetry.run("p2")))))
    assert table[0]["status"] == "cached" and table[0]["cached_from"] == "p1"
    assert "cached" in text_report(telemetry.run("p2"), telemetry.probe.read(), {})


def test_plan_vs_actual_rows() -> None:
    _, run = finished_run(FakeCuda())
    rows = plan_vs_actual(run)
    assert [(r["node"], r["status"], r["planned_order"]) for r in rows] == [
        ("1", "done", 1),
        ("2", "done", None),  # ran, not planned (the planner leaves out nodes it does not know)
        ("3", "not run", 2),  # planned, never ran (not reached)
    ]
    assert rows[0]["vram_delta"] == rows[0]["vram_peak"] - 0
    assert rows[2]["planned_placements"] == {"ae [vae]": "gpu"}
    assert rows[2]["planned_reasons"] == {"ae [vae]": "on GPU: used here, fits (0.29 GiB of 7.00 GiB)"}
    assert rows[0]["planned_reasons"] == {} and rows[1]["planned_reasons"] == {}


def test_report_json_and_csv_agree() -> None:
    telemetry, run = finished_run()
    report = report_json(run, telemetry)
    json.dumps(report)  # the route serves it as is
    assert report["plan"] == {"fits": True, "budget_vram": 7 * 2**30, "min_vram": 300 * MiB}
    assert report["peaks"]["rss"] == 500 * MiB
    table = list(csv.DictReader(io.StringIO(report_csv(run))))
    assert [row["node"] for row in table] == [r["node"] for r in report["nodes"]]
    assert table[0]["duration_s"] == "0.1250" and table[0]["vram_peak"] == ""  # no GPU: empty, not "None"
    assert table[2]["planned_placements"] == "ae [vae]=gpu"
    assert table[2]["planned_reasons"] == "ae [vae]: on GPU: used here, fits (0.29 GiB of 7.00 GiB)"


def test_text_report_names_memory_and_nodes() -> None:
    telemetry, run = finished_run()
    text = text_report(run, telemetry.probe.read(), telemetry.prompt_peaks(run), node_id="2")
    assert "at node 2" in text and "process RSS: 500 MiB" in text
    assert "no GPU telemetry" in text and "plan: fits" in text and "nodes so far: 2" in text
    cuda_text = text_report(
        None, Sample(t=0, allocated=3 * MiB, device_total=8 * 2**30), {"allocated": 5 * MiB}
    )
    assert "torch allocated: 3 MiB (peak this prompt 5 MiB)" in cuda_text and "no GPU" not in cuda_text
