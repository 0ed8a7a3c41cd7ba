"""The Memory Monitor inside the host: a sampler, the recent runs with their plans, the preflight of queued
prompts, and the server it pushes ``headroom.*`` events to.

It subscribes to the executor's events (``events.EventSource``) and knows nothing of the residency
controller: each gets the same events, and ``state`` wires the one to the other where they meet (the
controller's budget comes from ``Monitor.budget``; its moves go into the monitor's telemetry).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...memory.deadline import HOST_PLAN_LIMIT_S
from ...memory.names import EVENTS
from ...memory.planning.costmodel import Budget, Hardware
from ...memory.planning.gpus import Gpu
from ...memory.planning.preflight import PlanCache, Preflight, plan_prompt
from ...memory.planning.records import PlannedRun
from ...memory.planning.remedies import Remedy, prompt_remedies
from ...memory.residency.ram_budget import RAM
from ...memory.telemetry.hub import Telemetry
from ...memory.telemetry.memory_history import MemoryHistory, cuda_memory
from ...memory.telemetry.probe import MemoryProbe, Sample
from ...memory.telemetry.sampler import Sampler
from ...memory.units import GiB, parse_size_setting
from . import recording
from .events import Subscriber
from .host_flags import running_host_settings
from .host_gauges import gauges
from .links import hardware_for, measured_links, record_disk
from .lookups import HOST_MODEL_FILES, host_module, output_nodes
from .media_sizes import media_sizes
from .preflight_queue import PreflightQueue
from .refusals import host_refuses
from .vae_plan import tiled_decode_figures

_log = logging.getLogger("headroom")
RATE_ENV, ASSUME_VRAM_ENV, DISABLE_ENV = "HEADROOM_MONITOR_HZ", "HEADROOM_ASSUME_VRAM", "HEADROOM_MONITOR"
DEFAULT_RATE_HZ = 1.0


def monitor_enabled() -> bool:
    """False when the user turned the Memory Monitor off (``HEADROOM_MONITOR=0``); the executor hooks
    have their own switch (``events.HOOKS_ENV``)."""
    return os.environ.get(DISABLE_ENV) != "0"


DEMAND_S = 15.0  # after the last /headroom/status read or node boundary, keep sampling this long


MIN_RATE_HZ, MAX_RATE_HZ = 1 / 3600, 100.0  # one sample an hour (the sampler's longest period) to 100 Hz


def _env_rate() -> float:
    """HEADROOM_MONITOR_HZ: 0 (off), or a rate from one an hour to 100 Hz; anything else is said, naming
    the variable and the range, and the default is used (the pack still imports)."""
    text = os.environ.get(RATE_ENV, "")
    try:
        rate = float(text) if text else DEFAULT_RATE_HZ
        if rate == 0 or MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
            return rate
    except ValueError:
        pass
    _log.warning(
        "Headroom: %s=%r is not a sampling rate: use 0 (off) or %.6f to %g Hz (one sample an hour to 100 a "
        "second); using %s Hz",
        RATE_ENV,
        text[:40],
        MIN_RATE_HZ,
        MAX_RATE_HZ,
        DEFAULT_RATE_HZ,
    )
    return DEFAULT_RATE_HZ


def _env_vram() -> int | None:
    text = os.environ.get(ASSUME_VRAM_ENV, "")
    try:
        return parse_size_setting(text, ASSUME_VRAM_ENV) if text else None
    except ValueError as exc:
        _log.warning("Headroom: %s; it is ignored (no card is assumed)", exc)
        return None


def _history_folder() -> Path:
    """Where memory-history snapshots go: the host's temp folder (it empties it at start), else the OS's."""
    try:
        return Path(host_module("folder_paths").get_temp_directory()) / "headroom"
    except Exception:
        return Path(tempfile.gettempdir()) / "headroom"


def json_safe(value: object) -> object:
    """``value`` with every float JSON cannot write (inf, nan) as None: the host writes its messages with
    json.dumps, which writes Infinity, and a browser's JSON.parse refuses the whole message for it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


@dataclass
class MonitorSnapshot:
    text: str
    chart: Any  # numpy [H, W, 3] float32 in 0..1, or None (not asked for, or no matplotlib)
    summary: dict[str, Any]


class Monitor(Subscriber):
    """The process's telemetry: one sampler, the recent runs, the plans, and the server it talks to."""

    def __init__(self) -> None:
        self.probe = MemoryProbe.detect()
        rate = _env_rate()
        self.sampler = Sampler(
            self.probe.read,
            1 / rate if rate else 0,
            wanted=self._wanted,
            on_sample=self._push_sample,
            paused=lambda: recording.skip("the memory monitor's sample"),
        )
        self.telemetry = Telemetry(self.probe, self.sampler)
        self.telemetry.on_disk_rate = record_disk  # the next plans of this machine read at this rate
        self.telemetry.links = measured_links  # a node's reads and uploads priced at this machine's rates
        self.telemetry.host_gauges = gauges  # the host's pins and comfy-aimdo's VRAM, for "bounded by"
        self.telemetry.listeners.append(self.push)
        self.plans = PlanCache(self._plan)
        self.queued: OrderedDict[str, str] = OrderedDict()  # prompt id -> plan key, queued but not run yet
        self.workflows: OrderedDict[str, str] = OrderedDict()  # prompt id -> the frontend's workflow id
        self.pool = PreflightQueue()  # the one planning thread; bounded (preflight_queue.py)
        # prompts POSTed whose validation has not been reported: id(prompt) -> [prompt, prompt id, valid]
        self.posting: OrderedDict[int, list[Any]] = OrderedDict()
        self.unplanned: OrderedDict[str, str] = OrderedDict()  # prompt id -> why its preflight was not made
        self.assume_vram = _env_vram()
        self.server: Any = None
        self.hooks: dict[str, str] = {}  # hook -> "on", or why it is off
        self.demand_until = 0.0
        self.lock = threading.Lock()
        self.validating = 0  # host validations under way (see events._hook_validation)
        self.validated = threading.Event()  # set while none is
        self.validated.set()
        self.local = threading.local()  # per thread: the deadline of the preflight it runs
        self.history = MemoryHistory(*cuda_memory(), folder=_history_folder())

    def close(self) -> None:
        """Stop its threads (the sampler, the planning worker, a memory recording): the process's state is
        made new (``reset_process_state``)."""
        self.sampler.stop()
        self.pool.close()
        self.history.stop()

    # -- sampling and events
    def clients(self) -> int:
        return len(getattr(self.server, "sockets", None) or ())

    def _wanted(self) -> bool:
        return self.clients() > 0 or time.monotonic() < max(
            self.demand_until, self.telemetry.last_activity + DEMAND_S
        )

    def push(self, event: str, payload: dict[str, Any], sid: str | None = None) -> None:
        server = self.server
        if server is None or not self.clients():
            return
        try:
            server.send_sync(event, json_safe(payload), sid)
        except Exception as exc:  # a closed loop at shutdown, say: telemetry must never break a run
            _log.debug("Headroom: could not send %s: %s", event, exc)

    def _push_sample(self, sample: Sample) -> None:
        self.push(EVENTS["sample"], sample.as_dict())

    # -- planning
    def budget(self) -> Budget | None:
        """The card's budget: the assumed VRAM, else the CUDA device's; None with neither."""
        vram = self.assume_vram
        if vram is None and self.probe.cuda is not None:
            try:
                vram = int(self.probe.cuda.get_device_properties(self.probe.device).total_memory)
            except Exception:
                vram = None
        if vram is None:
            return None
        ram = RAM.resolve()  # the RAM budget: HEADROOM_RAM_BUDGET, the setting, else the machine's
        return replace(Budget.from_card(vram, max(ram.ram, 1)), pinned=ram.pinned)

    def chosen(self, gpu: Gpu) -> tuple[Budget, Hardware, str]:
        """The budget, hardware and name for a card chosen in the sidebar (M6: a server with no GPU, or a
        check for another card): its VRAM from the card table, this machine's RAM budget."""
        ram = RAM.resolve()
        budget = replace(Budget.from_card(int(gpu.vram_gib * GiB), max(ram.ram, 1)), pinned=ram.pinned)
        # "named": the time is for the card chosen, not this server's (M5: it said "this server's card")
        hardware = replace(hardware_for(gpu.name), gpu_source="named")
        return budget, hardware, f"{gpu.name} (chosen in the sidebar)"

    def _plan(
        self, prompt: dict[str, Any], card: tuple[Budget, Hardware, str] | None = None
    ) -> tuple[PlannedRun | None, Preflight]:
        budget = self.budget() if card is None else card[0]
        if budget is None:
            reason = (
                f"no CUDA device to plan for (set {ASSUME_VRAM_ENV}=8GB to check a workflow against a card)"
            )
            return None, Preflight(None, "skipped", reason)
        refused = host_refuses(prompt)
        if refused:  # the host refuses the prompt at validation: nothing of it runs, so nothing is planned
            return None, Preflight(None, "skipped", f"not planned: {refused}", budget_vram=budget.vram)
        deadline = getattr(self.local, "deadline", None)  # set by a preflight on this thread
        left = HOST_PLAN_LIMIT_S if deadline is None else max(1.0, deadline - time.monotonic())
        outputs = output_nodes(prompt)
        name = self.card_name() if card is None else card[2]
        hardware = hardware_for(None if self.assume_vram is not None else name) if card is None else card[1]
        return plan_prompt(
            prompt,
            budget,
            hardware,
            HOST_MODEL_FILES,
            outputs=outputs,
            time_limit_s=left,
            card=name,
            host=running_host_settings(),
            tiled_decode=tiled_decode_figures,
            media=media_sizes,
        )

    def remedies_for(self, prompt: dict[str, Any], gpu: Gpu | None = None) -> list[Remedy]:
        """What would make ``prompt`` fit on this card, or ``gpu`` (remedies.py), each planned again; []
        with no card."""
        budget: Budget | None
        if gpu is not None:
            budget, hardware, _ = self.chosen(gpu)
        else:
            budget = self.budget()
            hardware = hardware_for(None if self.assume_vram is not None else self.card_name())
        if budget is None:
            return []
        return prompt_remedies(
            prompt,
            budget,
            hardware,
            models_dir=HOST_MODEL_FILES,
            outputs=output_nodes(prompt),
            tiled_decode=tiled_decode_figures,
            time_limit_s=HOST_PLAN_LIMIT_S,
            media=media_sizes,
        )

    def card_name(self) -> str:
        """What the plan is for, for the timeline's header: the assumed card, else the device's name."""
        if self.assume_vram is not None:
            return f"assumed card ({ASSUME_VRAM_ENV})"
        try:
            return str(self.probe.cuda.get_device_name(self.probe.device))
        except Exception:
            return "CUDA device"

    def plan_for(self, prompt: dict[str, Any], gpu: Gpu | None = None) -> tuple[PlannedRun | None, Preflight]:
        """The plan under today's budget (a changed assumed VRAM is another plan), cached; for a card
        chosen in the sidebar, planned for it (not cached: no run follows it)."""
        if gpu is not None:
            return self._plan(prompt, self.chosen(gpu))
        return self.plans.get(prompt, self.budget())

    def preflight(
        self, prompt: dict[str, Any], prompt_id: str | None, client_id: str | None
    ) -> dict[str, Any]:
        # One limit for waiting and planning together: the host's validation first (both would hold the
        # GIL by turns), then planning with what is left of HOST_PLAN_LIMIT_S (at least a second).
        self.local.deadline = time.monotonic() + HOST_PLAN_LIMIT_S
        try:
            self.validated.wait(HOST_PLAN_LIMIT_S)
            if self.pool.cancelled():  # the host refused it while this waited: nothing of it runs
                return {"prompt_id": prompt_id, "fits": None, "level": "skipped", "message": "refused"}
            planned, verdict = self.plan_for(prompt)
        finally:
            self.local.deadline = None
        payload = {"prompt_id": prompt_id, **verdict.as_dict()}
        self.push(EVENTS["preflight"], payload, client_id if isinstance(client_id, str) else None)
        return payload

    # -- the executor's events (events.Subscriber)
    def validation_started(self) -> None:
        with self.lock:
            self.validating += 1
            self.validated.clear()

    def validation_finished(self, prompt: Any = None, valid: bool | None = None) -> None:
        """The host validated ``prompt``: a refused one is not planned, its waiting preflight is dropped and
        its id forgotten (set before the waiting preflights are let go, so none plans it)."""
        try:
            if valid is False and isinstance(prompt, dict):
                self._refused(prompt)
        finally:
            with self.lock:
                self.validating = max(0, self.validating - 1)
                if not self.validating:
                    self.validated.set()

    def posted(self, prompt: dict[str, Any], prompt_id: str | None) -> None:
        """A prompt POSTed to /prompt, before the host validates it (bounded: a flood forgets the oldest)."""
        with self.lock:
            self.posting[id(prompt)] = [prompt, prompt_id, None]
            while len(self.posting) > 16:
                self.posting.popitem(last=False)

    def was_refused(self, prompt: dict[str, Any]) -> bool:
        """Whether the host refused ``prompt`` (that object) already; forgets the posting either way."""
        with self.lock:
            entry = self.posting.pop(id(prompt), None)
        return entry is not None and entry[0] is prompt and entry[2] is False

    def _refused(self, prompt: dict[str, Any]) -> None:
        with self.lock:
            entry = self.posting.get(id(prompt))
            ids: list[str] = []
            if entry is not None and entry[0] is prompt:
                entry[2] = False
                ids += [entry[1]] if entry[1] else []
        ids += [t for t in self.pool.drop(prompt) if isinstance(t, str)]
        with self.lock:
            for prompt_id in ids:
                self.queued.pop(prompt_id, None)
                self.workflows.pop(prompt_id, None)

    def not_planned(self, prompt_id: str | None, why: str) -> None:
        """A posted prompt whose preflight is not made (the queue was full): GET /headroom/plan says why."""
        with self.lock:
            if prompt_id is None:
                return
            self.queued.pop(prompt_id, None)
            self.unplanned[prompt_id] = why
            while len(self.unplanned) > 1024:
                self.unplanned.popitem(last=False)

    def queued_prompt(self, prompt_id: str, key: str, workflow_id: str | None) -> None:
        """A prompt POSTed to /prompt: its plan key, and the workflow it came from (its runs are shown on
        that workflow's nodes only)."""
        with self.lock:
            self.queued[prompt_id] = key
            if workflow_id is not None:
                self.workflows[prompt_id] = workflow_id
            for queue in (self.queued, self.workflows):
                while len(queue) > 1024:  # a long queue (batch count 100) keeps every id; entries are tiny
                    queue.popitem(last=False)

    def prompt_started(self, prompt_id: str, prompt: dict[str, Any] | None) -> None:
        with self.lock:
            self.queued.pop(prompt_id, None)
            workflow_id = self.workflows.pop(prompt_id, None)
        self.history.prompt_started(prompt_id, prompt)  # ends the last recording, starts one if armed
        self.telemetry.start_prompt(prompt_id, prompt, workflow_id)
        if prompt is not None:
            try:
                planned, verdict = self.plan_for(prompt)
                self.telemetry.attach_plan(prompt_id, planned, "" if planned else verdict.message)
            except Exception as exc:
                _log.warning("Headroom: could not plan prompt %s: %s", prompt_id, exc)
                self.telemetry.attach_plan(prompt_id, None, f"planning failed: {exc}")
        self.sampler.ensure_running()

    def prompt_finished(self, prompt_id: str) -> None:
        self.history.stop()

    def node_started(self, prompt_id: str | None, node_id: str) -> None:
        self.history.node_started()
        self.telemetry.node_started(prompt_id, node_id)
        self.sampler.ensure_running()

    def node_finished(self, prompt_id: str | None, node_id: str, ok: bool = True) -> None:
        self.telemetry.node_finished(prompt_id, node_id, ok)
        self.history.node_finished()

    def nodes_cached(self, prompt_id: str, node_ids: list[str]) -> None:
        self.telemetry.nodes_cached(prompt_id, node_ids)

    # -- the Memory Monitor node
    def configure(self, rate_hz: float | None = None, assume_vram: int | None | str = "keep") -> None:
        """Change the sampling rate (Hz, 0 = off) and/or the VRAM preflight assumes (bytes; None = the
        device)."""
        if rate_hz is not None:
            self.sampler.set_period(1 / rate_hz if rate_hz else 0)
        if assume_vram != "keep":
            self.assume_vram = assume_vram  # type: ignore[assignment]

    def snapshot(
        self, node_id: str | None, chart: bool = False, titles: dict[str, str] | None = None
    ) -> MonitorSnapshot:
        """What the Memory Monitor node reports from inside a run: memory now, the prompt's peaks and its
        plan-vs-actual so far, and optionally the timeline picture."""
        now = self.sampler.tick(notify=False)
        snap = self.telemetry.snapshot(now, node_id, titles)
        image = None
        if chart:
            from ...memory.telemetry.chart import timeline_image

            image = timeline_image(snap.samples, snap.nodes, snap.planned)
        summary = {"now": now.as_dict(), "peaks": snap.peaks, "prompt_id": snap.prompt_id}
        return MonitorSnapshot(snap.text, image, summary)
