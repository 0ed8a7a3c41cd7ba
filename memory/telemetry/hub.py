"""Memory telemetry: samples of device and host memory, per-node records, residency events, plan-vs-actual.

Nothing here imports ComfyUI. The host module feeds it (prompt start, node start/finish) and serves what it
builds; the residency controller will feed ``ResidencyEvent`` records through ``Telemetry.record_event``.
Every source is optional: torch.cuda (allocator figures), NVML through nvidia-ml-py (whole-device use,
other processes included) and psutil (process RSS, system RAM). A missing source leaves its fields out of
the samples; it never raises.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..optional import optional_module
from ..planning.records import PlannedNode, PlannedRun, prompt_key  # noqa: F401  (a run holds its plan)

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


PINNED = PinnedLedger()


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
    ) -> None:
        self.cuda, self.nvml, self.psutil, self.device = cuda, nvml, psutil, device
        self.pinned, self.clock = pinned, clock
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
        if "device_used" not in values and self.cuda is not None:
            try:
                free, total = self.cuda.mem_get_info(self.device)
                values["device_used"], values["device_total"] = int(total - free), int(total)
            except Exception:
                pass
        if self.psutil is not None:
            try:
                values["rss"] = int(self._process.memory_info().rss)
                vm = self.psutil.virtual_memory()
                values["ram_used"], values["ram_total"] = int(vm.total - vm.available), int(vm.total)
            except Exception:
                pass
        values["pinned"] = self.pinned.total
        return Sample(t=self.clock(), **values)

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


class Sampler:
    """Samples ``probe`` every ``period_s`` on a daemon thread while ``wanted()`` holds, into a history.

    ``period_s`` 0 means off. The thread ends by itself as soon as ``wanted()`` is false (nobody listens and
    nothing runs); ``ensure_running()`` starts it again when demand returns. ``tick()`` takes one sample
    now (node boundaries use it too, so per-node figures exist even with the thread off).
    """

    def __init__(
        self,
        probe: Callable[[], Sample],
        period_s: float = 1.0,
        history: int = 3600,
        wanted: Callable[[], bool] = lambda: True,
        on_sample: Callable[[Sample], None] | None = None,
    ) -> None:
        self.probe, self.wanted, self.on_sample = probe, wanted, on_sample
        self.period_s = 0.0
        self.set_period(period_s)
        self._samples: deque[Sample] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0

    def set_period(self, period_s: float) -> None:
        if not 0 <= period_s <= 3600:
            raise ValueError(f"sampling period must be 0 (off) to 3600 s, got {period_s}")
        self.period_s = float(period_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def tick(self, notify: bool = True) -> Sample:
        sample = self.probe()
        with self._lock:
            self._samples.append(sample)
            self.ticks += 1
        if notify and self.on_sample is not None:
            try:
                self.on_sample(sample)
            except Exception:  # a broken listener must not stop sampling
                log.exception("Headroom: a telemetry listener failed")
        return sample

    def ensure_running(self) -> bool:
        """Start the thread if sampling is on, wanted and not running; True if it runs afterwards."""
        if self.period_s <= 0 or not self.wanted():
            return self.running
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._wake.clear()
                self._thread = threading.Thread(target=self._loop, name="headroom-sampler", daemon=True)
                self._thread.start()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout)

    def _loop(self) -> None:
        while self.period_s > 0 and self.wanted():
            self.tick()
            if self._wake.wait(self.period_s):
                break

    @property
    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def history(self, since: float | None = None, limit: int | None = None) -> list[Sample]:
        """Samples newer than ``since`` (all when None), oldest first, at most the last ``limit``."""
        with self._lock:
            if since is None:
                samples = list(self._samples)
            else:  # walk back from the newest: a node's window is short, the history long
                samples = list(itertools.takewhile(lambda s: s.t > since, reversed(self._samples)))[::-1]
        return samples[-limit:] if limit else samples

    def peaks(self, start: float, end: float) -> dict[str, int]:
        """The largest value of every field over samples taken in [start, end]."""
        return peaks(s for s in self.history() if start <= s.t <= end)


def peaks(samples: Iterable[Sample]) -> dict[str, int]:
    out: dict[str, int] = {}
    for sample in samples:
        for name in SAMPLE_FIELDS:
            value = getattr(sample, name)
            if value is not None and value > out.get(name, -1):
                out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class ResidencyEvent:
    """One move of a model component between tiers, as the residency controller reports it.

    ``tier_from``/``tier_to`` use the planner's tier labels (costmodel.Tier.label: "gpu", "stream<-pinned",
    "pinned", "ram", "disk"...); ``node_id`` is the node during (or before) which the move happened.
    """

    t: float
    prompt_id: str
    node_id: str | None
    component: str
    tier_from: str
    tier_to: str
    nbytes: int = 0
    action: str = ""  # load, evict, prefetch, stream, pin, release
    seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class NodeRecord:
    """What one node did: wall time and memory at its start, end and peak."""

    node_id: str
    class_type: str
    started: float
    finished: float | None = None
    status: str = "running"  # running, done, error (no finish: failed or interrupted)
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)  # per sample field, over the node's samples
    device_peak: int | None = None  # torch.cuda.max_memory_allocated over the node (exact, not sampled)
    events: list[ResidencyEvent] = field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        return None if self.finished is None else self.finished - self.started

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node_id,
            "class_type": self.class_type,
            "status": self.status,
            "started": self.started,
            "duration_s": self.duration_s,
            "device_peak": self.device_peak,
            "peak": self.peak,
            "before": self.before,
            "after": self.after,
            "events": [e.as_dict() for e in self.events],
        }


@dataclass
class Run:
    """One prompt's telemetry: its nodes in the order they started, residency events, and its plan."""

    prompt_id: str
    key: str  # prompt_key of the prompt, to find a plan made when it was queued
    started: float
    class_types: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    events: list[ResidencyEvent] = field(default_factory=list)
    planned: PlannedRun | None = None
    plan_note: str = ""  # why there is no plan, when there is none


@dataclass
class Snapshot:
    text: str
    prompt_id: str | None
    peaks: dict[str, int]
    samples: list[Sample]
    nodes: list[NodeRecord]
    planned: PlannedRun | None


class Telemetry:
    """The hub: a sampler, the last ``max_runs`` prompts' runs, and the events the host feeds it.

    Thread-safe: the executor thread feeds it while the server's event loop reads it.
    """

    def __init__(self, probe: MemoryProbe, sampler: Sampler, max_runs: int = 32) -> None:
        self.probe, self.sampler, self.max_runs = probe, sampler, max_runs
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.RLock()
        self.current: Run | None = None
        self.last_activity = 0.0  # monotonic time of the last node start/finish
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []  # (event, payload)

    def _emit(self, event: str, payload: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            try:
                listener(event, payload)
            except Exception:
                log.exception("Headroom: a telemetry listener failed on %s", event)

    def start_prompt(self, prompt_id: str, prompt: dict[str, Any] | None = None) -> Run:
        with self._lock:
            if self.current is not None:
                self._close_open(self.current)
            run = Run(str(prompt_id), prompt_key(prompt), self.probe.clock())
            for node_id, node in (prompt or {}).items():
                if isinstance(node, dict):
                    run.class_types[str(node_id)] = str(node.get("class_type", ""))
            self._runs[run.prompt_id] = run
            self._runs.move_to_end(run.prompt_id)
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
            self.current = run
        self.last_activity = time.monotonic()
        return run

    def _close_open(self, run: Run) -> None:
        for record in run.nodes.values():
            if record.status == "running":
                record.status = "error"

    def attach_plan(self, prompt_id: str, planned: PlannedRun | None, note: str = "") -> None:
        with self._lock:
            run = self._runs.get(prompt_id)
            if run is not None:
                run.planned, run.plan_note = planned, note

    def run(self, prompt_id: str) -> Run | None:
        with self._lock:
            return self._runs.get(prompt_id)

    def prompt_ids(self) -> list[str]:
        with self._lock:
            return list(self._runs)

    def _run_for(self, prompt_id: str | None) -> Run:
        run = self._runs.get(prompt_id) if prompt_id is not None else self.current
        if run is None:  # a node outside any prompt we saw start (hooks installed mid-run)
            run = self.start_prompt(prompt_id or "unknown")
        return run

    def node_started(self, prompt_id: str | None, node_id: str, class_type: str | None = None) -> NodeRecord:
        self.last_activity = time.monotonic()
        self.probe.reset_peak()
        sample = self.sampler.tick(notify=False)
        with self._lock:
            run = self._run_for(prompt_id)
            existing = run.nodes.get(node_id)
            if existing is not None and existing.status == "running":
                return existing  # re-queued for its lazy inputs: keep the first start
            record = NodeRecord(node_id, class_type or run.class_types.get(node_id, ""), sample.t)
            record.before = _fields(sample)
            run.nodes[node_id] = record
            return record

    def node_finished(self, prompt_id: str | None, node_id: str, ok: bool = True) -> NodeRecord | None:
        self.last_activity = time.monotonic()
        device_peak = self.probe.read_peak()
        sample = self.sampler.tick(notify=False)
        with self._lock:
            run = self._run_for(prompt_id)
            record = run.nodes.get(node_id)
            if record is None or record.status != "running":
                return None  # a cached node: finished without starting
            record.finished, record.status = sample.t, "done" if ok else "error"
            record.after = _fields(sample)
            samples = [s for s in self.sampler.history(since=record.started) if s.t <= sample.t]
            record.peak = peaks([*samples, sample])
            for name, value in record.before.items():
                record.peak[name] = max(record.peak.get(name, value), value)
            record.device_peak = device_peak
            payload = {"prompt_id": run.prompt_id, **_badge(record)}
        self._emit("headroom.node", payload)
        return record

    def record_event(self, event: ResidencyEvent) -> None:
        """A residency move from the controller; attached to its node when that node is known."""
        with self._lock:
            run = self._runs.get(event.prompt_id)
            if run is None:
                return
            run.events.append(event)
            if event.node_id is not None and event.node_id in run.nodes:
                run.nodes[event.node_id].events.append(event)
        self._emit("headroom.residency", event.as_dict())

    def report(self, prompt_id: str, fmt: str = "json") -> dict[str, Any] | str | None:
        """report_json (fmt "json") or report_csv ("csv") of a run, built under the lock (the executor
        thread may be adding nodes meanwhile); None for an unknown prompt."""
        if fmt not in ("json", "csv"):
            raise ValueError(f"unknown report format {fmt!r}; use json or csv")
        with self._lock:
            run = self._runs.get(prompt_id)
            if run is None:
                return None
            return report_json(run, self) if fmt == "json" else report_csv(run)

    def snapshot(self, now: Sample, node_id: str | None = None) -> Snapshot:
        """The current prompt as the Memory Monitor node reports it, copied under the lock."""
        with self._lock:
            run = self.current
            peaks_now = self.prompt_peaks(run) if run else {}
            return Snapshot(
                text=text_report(run, now, peaks_now, node_id),
                prompt_id=run.prompt_id if run else None,
                peaks=peaks_now,
                samples=[*self.sampler.history(since=run.started - 1e-9), now] if run else [now],
                nodes=list(run.nodes.values()) if run else [],
                planned=run.planned if run else None,
            )

    def prompt_peaks(self, run: Run) -> dict[str, int]:
        """Peaks over the prompt so far: node windows and every sample since it started."""
        with self._lock:
            records = list(run.nodes.values())
        out = peaks(self.sampler.history(since=run.started - 1e-9))
        for record in records:
            for name, value in record.peak.items():
                out[name] = max(out.get(name, value), value)
            if record.device_peak is not None:
                out["device_peak"] = max(out.get("device_peak", 0), record.device_peak)
        return out


def _fields(sample: Sample) -> dict[str, int]:
    return {name: getattr(sample, name) for name in SAMPLE_FIELDS if getattr(sample, name) is not None}


def _badge(record: NodeRecord) -> dict[str, Any]:
    """What the frontend shows on a node after it ran."""
    vram = record.device_peak if record.device_peak is not None else record.peak.get("allocated")
    return {
        "node": record.node_id,
        "class_type": record.class_type,
        "status": record.status,
        "duration_s": record.duration_s,
        "vram_peak": vram,
        "rss_peak": record.peak.get("rss"),
    }


# --------------------------------------------------------------------------------------- plan vs actual

REPORT_COLUMNS = (
    "order", "node", "class_type", "status", "planned_order", "duration_s", "planned_wall_s",
    "vram_peak", "planned_vram_peak", "vram_delta", "rss_peak", "ram_peak", "planned_placements",
    "residency_events",
)  # fmt: skip


def plan_vs_actual(run: Run) -> list[dict[str, Any]]:
    """One row per node that ran or was planned, in the order they ran, then planned nodes that did not run.

    A planned node that did not run was cached or skipped (status "not run"); a node that ran but was not
    planned is a frontend-only or unknown node the planner left out (planned fields empty).
    """
    planned = run.planned
    rows: list[dict[str, Any]] = []
    for order, record in enumerate(list(run.nodes.values()), 1):
        p = planned.node(record.node_id) if planned else None
        vram = record.device_peak if record.device_peak is not None else record.peak.get("allocated")
        rows.append(
            {
                "order": order,
                "node": record.node_id,
                "class_type": record.class_type,
                "status": record.status,
                "planned_order": p.order if p else None,
                "duration_s": record.duration_s,
                "planned_wall_s": p.wall_s if p else None,
                "vram_peak": vram,
                "planned_vram_peak": p.vram_peak if p else None,
                "vram_delta": vram - p.vram_peak if p and vram is not None else None,
                "rss_peak": record.peak.get("rss"),
                "ram_peak": record.peak.get("ram_used"),
                "planned_placements": dict(p.placements) if p else {},
                "residency_events": [e.as_dict() for e in record.events],
            }
        )
    ran = set(run.nodes)
    for p in planned.nodes if planned else ():
        if p.node_id not in ran:
            rows.append(
                {
                    **dict.fromkeys(REPORT_COLUMNS),
                    "node": p.node_id,
                    "class_type": p.class_type,
                    "status": "not run",
                    "planned_order": p.order,
                    "planned_wall_s": p.wall_s,
                    "planned_vram_peak": p.vram_peak,
                    "planned_placements": dict(p.placements),
                    "residency_events": [],
                }
            )
    return rows


def report_json(run: Run, telemetry: Telemetry | None = None) -> dict[str, Any]:
    planned = run.planned
    return {
        "prompt_id": run.prompt_id,
        "started": run.started,
        "plan": None
        if planned is None
        else {"fits": planned.fits, "budget_vram": planned.budget_vram, "min_vram": planned.min_vram},
        "plan_note": run.plan_note,
        "preflight": planned.preflight if planned else None,
        "peaks": telemetry.prompt_peaks(run) if telemetry else {},
        "nodes": plan_vs_actual(run),
        "events": [e.as_dict() for e in run.events],
    }


def report_csv(run: Run) -> str:
    """plan_vs_actual as CSV: one row per node; placements and events as compact text cells."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in plan_vs_actual(run):
        cells = dict(row)
        cells["planned_placements"] = "; ".join(f"{k}={v}" for k, v in row["planned_placements"].items())
        cells["residency_events"] = "; ".join(
            f"{e['component']}:{e['tier_from']}->{e['tier_to']}" for e in row["residency_events"]
        )
        for key in ("duration_s", "planned_wall_s"):
            if isinstance(cells[key], float):
                cells[key] = f"{cells[key]:.4f}"
        writer.writerow({k: "" if v is None else v for k, v in cells.items()})
    return out.getvalue()


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def text_report(
    run: Run | None, now: Sample, prompt_peaks: dict[str, int], node_id: str | None = None
) -> str:
    """What the Memory Monitor node prints: memory now, the prompt's peaks, and plan-vs-actual so far."""
    where = f"at node {node_id}" if node_id else "now"
    lines = [f"Headroom memory {where}:"]
    labels = {
        "device_used": "device used (all processes)", "allocated": "torch allocated",
        "reserved": "torch reserved", "rss": "process RSS", "ram_used": "system RAM used",
        "pinned": "pinned by Headroom",
    }  # fmt: skip
    for name, label in labels.items():
        value = getattr(now, name)
        if value is not None:
            peak = prompt_peaks.get(name)
            tail = f" (peak this prompt {_mib(peak)})" if peak is not None else ""
            lines.append(f"  {label}: {_mib(value)}{tail}")
    if now.device_total is None:
        lines.append("  no GPU telemetry on this machine (CPU only, or no CUDA device)")
    if run is None:
        return "\n".join(lines)
    rows = [r for r in plan_vs_actual(run) if r["status"] != "not run"]
    if run.planned is None:
        lines.append(f"plan: none ({run.plan_note or 'not planned'})")
    else:
        fits = {True: "fits", False: "does NOT fit", None: "not checked"}[run.planned.fits]
        lines.append(
            f"plan: {fits}; budget {_mib(run.planned.budget_vram)}, minimum {_mib(run.planned.min_vram)}"
        )
    lines.append(f"nodes so far: {len(rows)}")
    for r in rows:
        duration = r["status"] if r["duration_s"] is None else f"{r['duration_s']:.3f} s"
        planned = f" (planned {_mib(r['planned_vram_peak'])})" if r["planned_vram_peak"] is not None else ""
        lines.append(
            f"  {r['node']:>6} {r['class_type'][:28]:<28} {duration:>10}"
            f"  VRAM {_mib(r['vram_peak'])}{planned}  RSS {_mib(r['rss_peak'])}"
        )
    return "\n".join(lines)
