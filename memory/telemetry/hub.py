"""The telemetry hub: a probe, a sampler and the last prompts' runs, fed by the host and read by the monitor.

Nothing here imports ComfyUI. The host module feeds it (prompt start, node start/finish) and serves what it
builds; the residency controller feeds ``ResidencyEvent`` records through ``Telemetry.record_event``. The
parts: probe.py (Sample, MemoryProbe, the pinned ledger), sampler.py (Sampler, peaks), runs.py (NodeRecord,
RunRecord, ResidencyEvent), report.py (plan versus actual).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ..names import EVENTS
from ..planning.records import PlannedRun, prompt_key
from .bounds import bounded_by
from .compare import compare_runs, previous_run
from .probe import SAMPLE_FIELDS, MemoryProbe, Sample
from .report import report_csv, report_json, text_report
from .runs import NodeRecord, ResidencyEvent, RunRecord, Snapshot
from .sampler import Sampler, peaks

log = logging.getLogger("headroom")


class Telemetry:
    """The hub: a sampler, the last ``max_runs`` prompts' runs, and the events the host feeds it.

    Thread-safe: the executor thread feeds it while the server's event loop reads it.
    """

    def __init__(self, probe: MemoryProbe, sampler: Sampler, max_runs: int = 32) -> None:
        self.probe, self.sampler, self.max_runs = probe, sampler, max_runs
        self._runs: OrderedDict[str, RunRecord] = OrderedDict()
        self._lock = threading.RLock()
        self.current: RunRecord | None = None
        self.last_activity = 0.0  # monotonic time of the last node start/finish
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []  # (event, payload)
        # a node's measured disk read (bytes/s, bytes read): the host keeps it for the next plans
        self.on_disk_rate: Callable[[float, int], None] | None = None
        # this machine's measured link rates (links.LinkStore.measured), which price a node's reads and
        # uploads in its "bounded by" line; None: the assumed figures
        self.links: Callable[[], Mapping[str, float]] | None = None
        # the host's gauges at a node boundary: "host_pinned" (its page-locked bytes), "aimdo_vram" and
        # "aimdo_note" (comfy-aimdo's VRAM in use, or why not read)
        self.host_gauges: Callable[[], dict[str, Any]] | None = None

    def _emit(self, event: str, payload: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            try:
                listener(event, payload)
            except Exception:
                log.exception("Headroom: a telemetry listener failed on %s", event)

    def start_prompt(
        self, prompt_id: str, prompt: dict[str, Any] | None = None, workflow_id: str | None = None
    ) -> RunRecord:
        with self._lock:
            if self.current is not None:
                self._close_open(self.current)
            run = RunRecord(str(prompt_id), prompt_key(prompt), self.probe.clock(), workflow_id=workflow_id)
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

    def _close_open(self, run: RunRecord) -> None:
        for record in run.nodes.values():
            if record.status == "running":
                record.status = "error"

    def attach_plan(self, prompt_id: str, planned: PlannedRun | None, note: str = "") -> None:
        with self._lock:
            run = self._runs.get(prompt_id)
            if run is not None:
                run.planned, run.plan_note = planned, note

    def run(self, prompt_id: str) -> RunRecord | None:
        with self._lock:
            return self._runs.get(prompt_id)

    def prompt_ids(self) -> list[str]:
        with self._lock:
            return list(self._runs)

    def _run_for(self, prompt_id: str | None) -> RunRecord:
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
            record.io = self._io()
            record.gauges = self._gauges()
            run.nodes[node_id] = record
            return record

    def node_finished(self, prompt_id: str | None, node_id: str, ok: bool = True) -> NodeRecord | None:
        self.last_activity = time.monotonic()
        device_peak = self.probe.read_peak()
        sample = self.sampler.tick(notify=False)
        with self._lock:
            run = self._run_for(prompt_id)
            record = run.nodes.get(node_id)
            if record is None:  # finished without starting: the host served it from its cache
                record = self._cached(run, node_id, sample.t)
            elif record.status != "running":
                return None  # reported cached already, or finished twice
            else:
                record.finished, record.status = sample.t, "done" if ok else "error"
                record.after = _fields(sample)
                samples = [s for s in self.sampler.history(since=record.started) if s.t <= sample.t]
                record.peak = peaks([*samples, sample])
                for name, value in record.before.items():
                    record.peak[name] = max(record.peak.get(name, value), value)
                record.device_peak = device_peak
                self._bound(run, record)
            payload = {"prompt_id": run.prompt_id, "workflow_id": run.workflow_id, **_badge(record)}
        self._emit(EVENTS["node"], payload)
        return record

    def _io(self) -> dict[str, int]:
        read = getattr(self.probe, "io", None)  # a probe without disk counters measures no disk reads
        try:
            return read() if callable(read) else {}
        except Exception:
            return {}

    def _gauges(self) -> dict[str, Any]:
        """Shared GPU memory (spill.py), every page-locked byte known, and the host's gauges; each fails
        alone and leaves its figure out (bounds.py then says it was not read)."""
        out: dict[str, Any] = {}
        shared = getattr(self.probe, "shared", None)
        if callable(shared):
            spill = shared()
            out["shared"], out["shared_note"] = spill.nbytes, spill.reason
        ledger = getattr(self.probe, "pinned", None)
        pinned = int(getattr(ledger, "total", 0) or 0)
        if self.host_gauges is not None:
            try:
                extra = dict(self.host_gauges())
            except Exception as exc:
                extra = {"aimdo_note": f"not read ({exc})"}
            pinned += int(extra.pop("host_pinned", 0) or 0)
            out.update(extra)
        out["pinned"] = pinned
        return out

    def _measured_links(self) -> Mapping[str, float]:
        try:
            return self.links() if self.links is not None else {}
        except Exception:  # an unreadable store: the line says the rates were assumed
            return {}

    def _bound(self, run: RunRecord, record: NodeRecord) -> None:
        """What bounded the node, measured (bounds.py), on the record and in the log."""
        end = self._io()
        record.io = {k: v - record.io[k] for k, v in end.items() if k in record.io}
        gauges = (record.gauges, self._gauges())
        bound = bounded_by(
            record.duration_s or 0.0,
            record.io,
            record.events,
            run.loaded,
            measured=self._measured_links(),
            gauges=gauges,
        )
        record.bound = bound.as_dict()
        if self.on_disk_rate is not None and bound.disk_rate:
            self.on_disk_rate(bound.disk_rate, bound.disk_bytes)
        log.info("Headroom: node %s %s was %s", record.node_id, record.class_type, bound.line)

    def nodes_cached(self, prompt_id: str, node_ids: list[str]) -> None:
        """The host's list of the prompt's nodes it serves from its cache (execution_cached)."""
        t = self.probe.clock()
        payloads = []
        with self._lock:
            run = self._run_for(prompt_id)
            for node_id in node_ids:
                if node_id in run.class_types and node_id not in run.nodes:  # of this prompt, not run yet
                    record = self._cached(run, node_id, t)
                    payloads.append(
                        {"prompt_id": run.prompt_id, "workflow_id": run.workflow_id, **_badge(record)}
                    )
        for payload in payloads:
            self._emit(EVENTS["node"], payload)

    def _cached(self, run: RunRecord, node_id: str, t: float) -> NodeRecord:
        """A cached node's record, linked to the record of the latest earlier run (of the same workflow,
        when both are known) that computed it: its badge keeps that run's time and memory."""
        class_type = run.class_types.get(node_id, "")
        record = NodeRecord(node_id, class_type, t, finished=t, status="cached")
        for earlier in reversed(self._runs.values()):
            if earlier is run or (run.workflow_id and earlier.workflow_id not in (None, run.workflow_id)):
                continue
            found = earlier.nodes.get(node_id)
            if found is not None and found.class_type == class_type:
                if found.status == "cached" and found.computed is not None:
                    record.computed, record.cached_from = found.computed, found.cached_from
                    break
                if found.status == "done":
                    record.computed, record.cached_from = found, earlier.prompt_id
                    break
        run.nodes[node_id] = record
        return record

    def recent(self) -> list[dict[str, Any]]:
        """The kept runs, oldest first, each with its workflow and its nodes' badges (what a reloaded page
        restores)."""
        with self._lock:
            return [
                {
                    "prompt_id": run.prompt_id,
                    "workflow_id": run.workflow_id,
                    "started": run.started,
                    "nodes": [_badge(r) for r in run.nodes.values() if r.status != "running"],
                }
                for run in self._runs.values()
            ]

    def record_event(self, event: ResidencyEvent) -> None:
        """A residency move from the controller; attached to its node when that node is known."""
        with self._lock:
            run = self._runs.get(event.prompt_id)
            if run is None:
                return
            run.events.append(event)
            if event.node_id is not None and event.node_id in run.nodes:
                run.nodes[event.node_id].events.append(event)
        self._emit(EVENTS["residency"], event.as_dict())

    def report(self, prompt_id: str, fmt: str = "json") -> dict[str, Any] | str | None:
        """report_json (fmt "json") or report_csv ("csv") of a run, built under the lock (the executor
        thread may be adding nodes meanwhile); None for an unknown prompt."""
        if fmt not in ("json", "csv"):
            raise ValueError(f"unknown report format {fmt!r}; use json or csv")
        with self._lock:
            run = self._runs.get(prompt_id)
            if run is None:
                return None
            previous = previous_run(self._runs.values(), run)
            return report_json(run, self, previous) if fmt == "json" else report_csv(run)

    def snapshot(
        self, now: Sample, node_id: str | None = None, titles: dict[str, str] | None = None
    ) -> Snapshot:
        """The current prompt as the Memory Monitor node reports it, copied under the lock (``titles``:
        the prompt's node titles, to name nodes as the canvas does)."""
        with self._lock:
            run = self.current
            peaks_now = self.prompt_peaks(run) if run else {}
            return Snapshot(
                text=text_report(run, now, peaks_now, node_id, titles, self._compared(run)),
                prompt_id=run.prompt_id if run else None,
                peaks=peaks_now,
                samples=[*self.sampler.history(since=run.started - 1e-9), now] if run else [now],
                nodes=list(run.nodes.values()) if run else [],
                planned=run.planned if run else None,
            )

    def _compared(self, run: RunRecord | None) -> list[str] | None:
        """The run against its workflow's previous one, in lines (VRAM Stats); None for no run."""
        if run is None:
            return None
        return list(compare_runs(previous_run(self._runs.values(), run), run)["lines"])

    def prompt_peaks(self, run: RunRecord) -> dict[str, int]:
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
    """What the frontend shows on a node after it ran; a cached node shows the run that computed it."""
    source = record.computed or record
    vram = source.device_peak if source.device_peak is not None else source.peak.get("allocated")
    return {
        "node": record.node_id,
        "class_type": record.class_type,
        "status": record.status,
        "duration_s": None if source.status == "cached" else source.duration_s,  # no computing run known
        "vram_peak": vram,
        "rss_peak": source.peak.get("rss"),
        "cached_from": record.cached_from,
        "bounded_by": None if source.bound is None else source.bound["line"],
        "bound": None if source.bound is None else source.bound["kind"],
    }
