"""The runtime residency controller: applies a prompt's plan at node boundaries and re-plans on deviation.

Policy only; the host module does the moves through the host's own model management (``HostOps``).
The controller manages the components a Headroom loader registered (``register``); the plan still
accounts for every other component, which the host loads and evicts as usual.

At each node start it looks the node up in the plan:
- the next planned node: apply that step's placements (evict what the plan moves off the GPU, then
  load what computes fully there, then change host tiers), load what the plan prefetches for the next
  node, and start warming the file pages of what the next node uploads;
- a later node (the ones between were cached, or a lazy branch was skipped): re-plan the rest of the
  prompt from where every component is now, then apply;
- a node the plan does not know (an expanded helper): nothing.
A component the plan streams at a node is armed there (``HostOps.stream``: the host's streamer attaches
when the node samples it, within what the plan leaves its weights) and disarmed when the node ends; the
log then says what happened (streamed by Headroom, the host's partial load, or not streamed and why).
State is read back from the host (``HostOps.on_gpu``) at every boundary, so an OOM after which the host
unloaded everything is recovered at the next one. An OOM inside one of the controller's own loads frees
the device through the host and retries once. Every planned and applied action goes to the prompt's log.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any

from ..deadline import PlanTimeout, time_limit
from ..models.catalog import ModelsDir
from ..planning.costmodel import CHOICE_HOST, Budget, Hardware, Tier
from ..planning.latents import MediaSizes
from ..planning.pipeline import plan_workflow
from ..planning.planner import Plan, StepPlan, plan
from ..planning.reasons import step_reasons
from ..planning.tiled_decode import TiledDecodeFigures
from ..planning.workload import Workload
from ..units import format_bytes
from ..workflow.order import output_signatures, predict_cached
from . import run_log
from .prefetch import Prefetcher
from .ram_guard import RamGuard
from .run_log import HOST_ACTIONS, Event, HostOps, Managed, Run, ancestors, gpu_part, target_tier, tier_of

_log = logging.getLogger("headroom")
# where the streamer uploads from for the plan's stream<-pinned, stream<-RAM and stream<-disk
_STREAM_SOURCES = {
    "P": "a pinned copy of its streamed blocks",
    "R": "its own RAM, no copy",
    "D": "its file's pages, no copy",
}


class Controller:
    """One per process; runs are kept by prompt id (the last ``keep`` of them)."""

    def __init__(self, ops: HostOps, keep: int = 16, time_limit_s: float | None = None) -> None:
        self.ops = ops
        # planning at a prompt's start runs on the host's executor thread: past this, the host loads alone
        self.time_limit_s = time_limit_s
        self.managed: dict[str, Managed] = {}
        self.unreachable: set[tuple[str, str]] = set()  # (component, host tier) that could not be set
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self.keep = keep
        self.held: set[Hashable] = set()  # cache signatures of the outputs the host holds
        self.listeners: list[Callable[[str, Event], None]] = []
        self.ram_guard: RamGuard | None = None  # the host's: RssAnon + pinned within the RAM budget
        self.prefetcher: Prefetcher | None = None  # the host's: prefetch uploads on a side stream
        self.tiled_decode: TiledDecodeFigures | None = None  # the host's Tiled VAE Decode figures
        self.media: MediaSizes | None = None  # the host's reader of a loaded image's or video's size
        self.lock = threading.RLock()

    # -- registration (the loader node)
    def register(self, component_id: str, label: str, handle: Any) -> None:
        with self.lock:
            self.managed[component_id] = Managed(component_id, label, handle)
            self.unreachable = {u for u in self.unreachable if u[0] != component_id}

    def reap(self) -> list[str]:
        """Drop the registrations whose objects the host let go (``handle.gone``: it dropped the loader's
        outputs), so nothing of theirs outlives them here; returns their ids."""
        with self.lock:
            dead = [cid for cid, m in self.managed.items() if getattr(m.handle, "gone", False)]
            for cid in dead:
                release = getattr(self.managed.pop(cid).handle, "release", None)
                if release is not None:
                    release()  # its mappings go now, whatever still holds the handle
        return dead

    def forget(self, prefix: str) -> None:
        """Drop every registration of one loader node (its id prefix), before it registers anew; what the
        old objects still hold on the device goes, through the host (nobody computes with them now)."""
        self.reap()
        with self.lock:
            for cid in [c for c in self.managed if c.startswith(prefix)]:
                old = self.managed.pop(cid)
                try:
                    if self.ops.on_gpu(old.handle):
                        self.ops.evict(old.handle)
                except Exception:  # fail open: the host evicts it when it needs the room
                    _log.debug("Headroom: could not evict a replaced component", exc_info=True)

    # -- prompt boundaries
    def prompt_started(
        self,
        prompt_id: str,
        prompt: dict[str, Any],
        budget: Budget,
        hardware: Hardware,
        models_dir: ModelsDir = None,
        outputs: list[str] | None = None,
        lazy_inputs: Callable[[str], frozenset[str]] | None = None,
    ) -> Run | None:
        """Plan the prompt around the nodes the host serves from its cache; None if it cannot be planned.
        ``lazy_inputs(class_type)``: the inputs of that node class the host evaluates only on request."""
        self.reap()  # loaders whose outputs the host dropped since the last prompt
        deadline = None if self.time_limit_s is None else time.monotonic() + self.time_limit_s
        try:  # no budget: the plan starts from where the components are, read under the lock below
            planned = plan_workflow(
                prompt,
                None,
                hardware,
                models_dir=models_dir,
                outputs=outputs,
                cached=lambda graph: predict_cached(graph, self.held),
                time_limit_s=self.time_limit_s,
                tiled_decode=self.tiled_decode,
                media=self.media,
            )
        except (ValueError, KeyError, TypeError, PlanTimeout) as exc:
            _log.info("Headroom: prompt %s is not planned (%s); the host manages its models", prompt_id, exc)
            return None
        graph, cached, workload = planned.graph, planned.cached, planned.workload
        with self.lock:
            workload = replace(workload, initial=self._actual_tiers(workload))
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                with time_limit(left):
                    result, note = self._plan(workload, budget, hardware)
            except (PlanTimeout, ValueError) as exc:  # past the time limit, or too many models live at once
                _log.info("Headroom: prompt %s not planned (%s); the host loads its models", prompt_id, exc)
                return None
            run = Run(prompt_id, workload, result, time.monotonic(), graph)
            if lazy_inputs is not None:
                run.lazy = {n: lazy_inputs(node.class_type) for n, node in graph.nodes.items()}
            self.runs[prompt_id] = run
            while len(self.runs) > self.keep:
                self.runs.popitem(last=False)
            if cached:
                self._event(
                    run, "", "note", detail=f"served from the host's cache, not planned: {sorted(cached)}"
                )
            if note:
                self._event(run, "", "note", detail=note)
            self._log_planned(run)
            return run

    def _plan(self, workload: Workload, budget: Budget, hardware: Hardware) -> tuple[Plan, str]:
        result = plan(workload, budget, hardware)
        if result.feasible:
            return result, ""
        if any(c.pin for c in workload.components):
            free = replace(workload, components=tuple(replace(c, pin="") for c in workload.components))
            freed = plan(free, budget, hardware)
            if freed.feasible:
                return (
                    freed,
                    "the residency choices do not fit this budget; the planner placed those components",
                )
        return result, f"no plan fits; the host manages the models ({result.bottleneck})"

    def prompt_finished(self, prompt_id: str) -> None:
        """Close a run: log a node that started and never finished (current hosts report no finish for a
        node that raised), and remember which outputs the host now holds, to predict cache hits."""
        with self.lock:
            run = self.runs.get(prompt_id)
            if run is None or run.closed:
                return
            run.closed = True
            self._prefetch_boundary(run, "", "closed")
            if run.current is not None:
                self._streams_ended(run, run.current)
                off = [m.label for m in self._managed(run) if not self.ops.on_gpu(m.handle)]
                detail = f"the node did not finish; off the device: {off}"
                self._event(run, run.current, "failed", detail=detail)
            if run.graph is not None:
                self.held = output_signatures(run.graph, run.finished | self._cached_ids(run))

    @staticmethod
    def _cached_ids(run: Run) -> set[str]:
        planned = {sp.step.node_id for sp in run.plan.steps} | run.finished
        return set(run.graph.nodes) - planned if run.graph is not None else set()

    # -- node boundaries
    def node_started(self, prompt_id: str, node_id: str) -> None:
        with self.lock:
            run = self.runs.get(prompt_id)
            if run is None:
                return
            run.current = node_id
            self._prefetch_boundary(run, node_id, "start")  # land or cancel first
            if not run.plan.feasible:
                return
            steps = [sp.step.node_id for sp in run.plan.steps]
            if node_id not in steps[run.position :]:
                self._event(run, node_id, "note", detail="not in the plan (an expanded or unplanned node)")
                return
            s = steps.index(node_id, run.position)
            if s != run.position:
                self._reorder(run, s)
                s = 0
                if not run.plan.feasible:
                    return
            elif {m.component_id for m in self._managed(run)} != run.managed_ids:
                # A loader of this prompt registered its components. The plan made at the prompt's start
                # has them off the GPU until their first use, but the host may have loaded one already
                # (a text encoder goes to the GPU when it fits): that plan would evict it here and load
                # it straight back (#16), so plan the rest again from where they are.
                if self._loaded_unplanned(run, s):
                    self._replan(run, run.plan.steps[s:], "a loader put components on the GPU")
                    s = 0
                    if not run.plan.feasible:
                        return
                else:  # their moves join the log from here
                    self._supersede(run, s)
                    self._log_planned(run, s)
            self._apply(run, s)
            self._ram(run, s, "start", node_id)
            run.position = s + 1
            self._ledger(run, node_id)

    def node_finished(self, prompt_id: str, node_id: str, ok: bool = True) -> None:
        with self.lock:
            run = self.runs.get(prompt_id)
            if run is None:
                return
            run.current = None
            self._prefetch_boundary(run, node_id, "end" if ok else "failed")
            self._streams_ended(run, node_id)
            if ok:
                run.finished.add(node_id)
            else:
                run.failed = (
                    node_id  # the host may have unloaded everything (an OOM): the next boundary reads it back
                )
                off = [m.label for m in self._managed(run) if not self.ops.on_gpu(m.handle)]
                self._event(run, node_id, "failed", detail=f"the node failed; off the device now: {off}")
            self._ledger(run, node_id)
            self._ram(run, run.position - 1, "end" if ok else "failed", node_id)

    def recover(self, prompt_id: str) -> bool:
        """After an OOM inside the running node: free the device through the host, put back what the
        node needs, and say whether it may run once more (once per node; never outside a plan)."""
        with self.lock:
            run = self.runs.get(prompt_id)
            if run is None or run.closed or not run.plan.feasible:  # a finished prompt's plan is not ours
                return False
            node_id = run.current or run.failed  # hosts differ in whether a failed node "finishes"
            if node_id is None or node_id in run.retried:
                return False
            run.retried.add(node_id)
            self._event(
                run, node_id, "oom", detail="the node ran out of memory: freeing the device, retrying it"
            )
            self._prefetch_boundary(run, node_id, "oom")
            try:
                self.ops.free_device()
                steps = [sp.step.node_id for sp in run.plan.steps]
                if node_id in steps:
                    self._apply(run, steps.index(node_id))
            except Exception as exc:  # fail open: the host handles the error as usual
                self._event(run, node_id, "failed", detail=f"recovery failed: {exc!r}")
                return False
            self._ledger(run, node_id)
            return True

    # -- planning bookkeeping
    def _managed(self, run: Run) -> list[Managed]:
        """The registered components of this prompt, less those whose loader is still to run here: it
        will build new objects, and moving the old ones would only fill the device."""
        ids = {c.id for c in run.workload.components}
        pending = {sp.step.node_id for sp in run.plan.steps[run.position :]}
        return [m for cid, m in self.managed.items() if cid in ids and cid.split(":", 1)[0] not in pending]

    def _loaded_unplanned(self, run: Run, s: int) -> bool:
        """Whether a newly registered component is on the GPU where the plan, before step ``s``, has it
        off (it then plans a move out at ``s`` and, if it is used soon, one straight back)."""
        before = run.plan.steps[s - 1] if s > 0 else None
        for m in self._managed(run):
            if m.component_id in run.managed_ids or not self.ops.on_gpu(m.handle):
                continue
            cid = m.component_id
            planned = target_tier(before, cid) if before else run.workload.initial_tier(cid)
            if not planned.gpu:
                return True
        return False

    def _actual_tiers(self, workload: Workload) -> dict[str, Tier]:
        out = {}
        for c in workload.components:
            m = self.managed.get(c.id)
            if m is not None:
                out[c.id] = tier_of(self.ops.on_gpu(m.handle) > 0, self.ops.host_part(m.handle))
        return out

    def _reorder(self, run: Run, s: int) -> None:
        """Node ``s`` started before the plan's next ones. Those among its ancestors must have run or been
        served from cache: they leave the plan. The others are still to come (the host orders independent
        branches its own way, and runs a node's lazy inputs after the node starts): they follow node
        ``s``. Then re-plan from where everything is."""
        skipped = run.plan.steps[run.position : s]
        started = run.plan.steps[s].step.node_id
        done = ancestors(run.graph, started, run.lazy) if run.graph is not None else set()
        gone = [sp for sp in skipped if sp.step.node_id in done]
        later = [sp for sp in skipped if sp.step.node_id not in done]
        why = f"node {started} started first"
        if gone:
            why += f"; {[sp.step.node_id for sp in gone]} did not run (cached)"
        if later:
            why += f"; {[sp.step.node_id for sp in later]} still to come"
        self._replan(run, [run.plan.steps[s], *later, *run.plan.steps[s + 1 :]], why)

    def _replan(self, run: Run, rest: list[StepPlan], why: str) -> None:
        self._supersede(run, run.position)
        workload = Workload(
            run.workload.components,
            tuple(sp.step for sp in rest),
            run.workload.notes,
            initial=self._actual_tiers(run.workload),
        )
        result, note = self._plan(workload, run.plan.budget, run.plan.hardware)
        self._event(run, rest[0].step.node_id, "replan", detail=why + (f"; {note}" if note else ""))
        run.workload, run.plan, run.position = workload, result, 0
        self._log_planned(run)

    def _log_planned(self, run: Run, start: int = 0) -> None:
        """The GPU actions the plan implies for the managed components from step ``start`` on, simulated
        from where they are (the initial tiers at the first step, the host's accounting later)."""
        managed = sorted(m.component_id for m in self._managed(run))
        run.managed_ids = frozenset(managed)
        if start == 0:
            on = {cid: run.workload.initial_tier(cid).gpu != "" for cid in managed}
        else:
            on = {cid: self.ops.on_gpu(self.managed[cid].handle) > 0 for cid in managed}
        reasons = step_reasons(run.workload, run.plan) if managed else []  # each planned move says why
        for s, sp in enumerate(run.plan.steps[start:], start):
            for cid in managed:
                gpu = gpu_part(sp, cid)
                action = (
                    "load" if gpu == "G" and not on[cid] else
                    "stream" if gpu == "S" else
                    "evict" if not gpu and on[cid] else ""
                )  # fmt: skip
                on[cid] = gpu == "G"  # a streamer gives every byte back when the sampling ends
                if action:
                    self._planned(run, sp, cid, action, reasons[s][cid])
            for cid in sp.prefetch_ids:
                if cid in on and not on[cid]:
                    on[cid] = True
                    self._planned(run, sp, cid, "prefetch", reasons[s][cid])

    def _supersede(self, run: Run, start: int) -> None:
        """Mark the planned actions of steps ``start``.. as replaced (a re-plan or new registrations)."""
        pending = {sp.step.node_id for sp in run.plan.steps[start:]}
        run.events = [
            replace(e, kind="superseded") if e.kind == "planned" and e.node_id in pending else e
            for e in run.events
        ]

    def _planned(self, run: Run, sp: StepPlan, cid: str, action: str, why: str) -> None:
        c = run.workload.component(cid)
        self._event(run, sp.step.node_id, "planned", action, cid, c.label, c.bytes, why)

    # -- applying a step
    def _apply(self, run: Run, s: int) -> None:
        sp = run.plan.steps[s]
        node_id = sp.step.node_id
        managed = self._managed(run)
        for m in managed:  # evictions first: the loads that follow need their room
            if not target_tier(sp, m.component_id).gpu and self.ops.on_gpu(m.handle):
                nbytes = self.ops.on_gpu(m.handle)
                self._do(run, node_id, m, "evict", nbytes, functools.partial(self.ops.evict, m.handle))
        for m in managed:
            tier, gpu = target_tier(sp, m.component_id), gpu_part(sp, m.component_id)
            if gpu == "G" and not self.ops.fully_loaded(m.handle):
                self._load(run, node_id, m, "load")
            elif gpu == "S":
                if tier.host in "RD" and not self.ops.on_gpu(m.handle):  # it streams from where it is
                    self._host_tier(run, node_id, m, tier.host)
                self._stream(run, sp, m)
            # A host copy exists only off the device (the host moves weights, it keeps none behind). It moves
            # where the plan places a live component, and to the user's choice after its last use; an auto
            # one then stays where it is (the next prompt may want it). A streamed one streams from RAM or
            # its file in place (moved there above) or from the streamer's pinned copy.
            if gpu == "S" or self.ops.on_gpu(m.handle):
                continue
            pin = run.workload.component(m.component_id).pin
            if m.component_id in sp.placements:
                self._host_tier(run, node_id, m, tier.host)
            elif pin in CHOICE_HOST:
                self._host_tier(run, node_id, m, CHOICE_HOST[pin])
        by_id = {m.component_id: m for m in managed}
        for cid in sp.prefetch_ids:
            ahead = by_id.get(cid)
            if ahead is None or self.ops.fully_loaded(ahead.handle):
                continue
            if self.ops.room_for(ahead.handle):
                if not self._side_prefetch(run, sp, ahead):
                    self._load(run, node_id, ahead, "prefetch")
            else:  # the node that needs it loads it; the host would evict to make room now
                c = run.workload.component(cid)
                self._event(
                    run, node_id, "skipped", "prefetch", cid, ahead.label, c.bytes, "no free room yet"
                )
        if s + 1 < len(run.plan.steps):
            nxt = run.plan.steps[s + 1]
            for m in managed:
                if target_tier(nxt, m.component_id).gpu and not self.ops.on_gpu(m.handle):
                    self._do(run, node_id, m, "warm", 0, functools.partial(self.ops.warm, m.handle))

    def _stream(self, run: Run, sp: StepPlan, m: Managed) -> None:
        """Arm the streaming of ``m`` for this node's sampling, within what the plan leaves its weights;
        what really happened is logged when the node finishes (``_streams_ended``)."""
        cid, node_id = m.component_id, sp.step.node_id
        if cid in run.streams:  # armed already (a retry after an OOM applies the step again)
            return
        budget = run_log.stream_budget(run.workload, sp, cid, run.plan.budget.vram)
        source = target_tier(sp, cid).host  # the plan's stream<-pinned ("P") or from RAM/disk
        placement = sp.placements.get(cid)
        pinned = placement.pinned_bytes if placement is not None and source == "P" else None
        try:
            why = self.ops.stream(m.handle, budget, source, pinned)
        except Exception as exc:  # fail open: the host loads it as it would without Headroom
            why = repr(exc)
        run.streams[cid] = (m, why)
        if why:
            self._event(run, node_id, "note", "stream", cid, m.label, detail=f"not armed: {why}")
        else:
            detail = (
                f"streams when the node samples it, its weights within {format_bytes(budget)}, "
                f"from {_STREAM_SOURCES.get(source, 'its host copy')}"
            )
            self._event(run, node_id, "armed", "stream", cid, m.label, budget, detail)

    def _streams_ended(self, run: Run, node_id: str) -> None:
        """Disarm the node's streams and log what its sampling did: applied only if Headroom streamed."""
        streams, run.streams = run.streams, {}
        for cid, (m, why) in streams.items():
            try:
                out = self.ops.stream_ended(m.handle)
            except Exception as exc:  # the sampling is over either way; say so
                out = run_log.Streamed("none", 0, f"not streamed: {exc!r}")
            detail = f"not streamed: {why}" if why and out.kind == "none" else out.detail
            kind = "applied" if out.kind == "streamed" else "skipped"
            self._event(run, node_id, kind, "stream", cid, m.label, out.nbytes, detail)

    def _side_prefetch(self, run: Run, sp: StepPlan, m: Managed) -> bool:
        """Start the upload on a side stream (``prefetch.py``); False: load it synchronously here."""
        if self.prefetcher is None:
            return False
        started, note = self.prefetcher.begin(run.prompt_id, sp, m.component_id, m.label, m.handle)
        self._event(run, *note)
        return started or note[1] == "oom"  # an OOM: the node that needs it loads it

    def _prefetch_boundary(self, run: Run, node_id: str, phase: str) -> None:
        """Land the side stream's uploads for the node starting, or cancel them (``Prefetcher.boundary``)."""
        if self.prefetcher is not None:
            planned = any(sp.step.node_id == node_id for sp in run.plan.steps)
            for note in self.prefetcher.boundary(run.prompt_id, node_id, phase, planned):
                self._event(run, *note)

    def _host_tier(self, run: Run, node_id: str, m: Managed, host: str) -> None:
        """Move the host copy to ``host`` when it is elsewhere (read back from the host: its own unloads
        leave fresh pageable memory behind); log what really happened."""
        key = (m.component_id, host)
        if key in self.unreachable or self.ops.host_part(m.handle) == host:
            return
        action = {"P": "pin", "R": "unpin", "D": "map"}[host]
        try:
            note = self.ops.set_host_tier(m.handle, host)
        except Exception as exc:  # fail open: the weights stay where they are
            note = repr(exc)
        reached = self.ops.host_part(m.handle) == host
        if not reached:
            self.unreachable.add(key)  # not retried every node (no CUDA to pin, converted weights)
        kind = "applied" if reached else "skipped"
        self._event(run, node_id, kind, action, m.component_id, m.label, 0, note)

    def _load(self, run: Run, node_id: str, m: Managed, action: str) -> None:
        nbytes = run.workload.component(m.component_id).bytes
        oom = False
        try:
            why = self.ops.load(m.handle)
        except Exception as exc:
            if not self.ops.is_oom(exc):
                self._event(run, node_id, "failed", action, m.component_id, m.label, nbytes, repr(exc))
                return
            oom, why = True, ""
        if oom:  # outside the except block, so the failed attempt's tensors are already freed
            if action == "prefetch":  # never unload the running node's models for a prefetch
                self._event(run, node_id, "oom", action, m.component_id, m.label, nbytes, "skipped")
                return
            self._event(run, node_id, "oom", action, m.component_id, m.label, nbytes, "freeing, retrying")
            try:
                self.ops.free_device()
                why = self.ops.load(m.handle)
            except Exception as again:  # the node loads it itself, as it would without Headroom
                self._event(run, node_id, "failed", action, m.component_id, m.label, nbytes, repr(again))
                return
        if why:
            self._event(run, node_id, "skipped", action, m.component_id, m.label, nbytes, why)
        elif not self.ops.on_gpu(m.handle):
            self._event(
                run, node_id, "failed", action, m.component_id, m.label, nbytes, "the host did not load it"
            )
        else:
            self._event(run, node_id, "applied", action, m.component_id, m.label, nbytes)

    def _do(
        self, run: Run, node_id: str, m: Managed, action: str, nbytes: int, fn: Callable[[], Any],
        notes: list[str] | None = None,
    ) -> bool:  # fmt: skip
        try:
            fn()
        except Exception as exc:  # a move that fails leaves the component where it was: fail open
            self._event(run, node_id, "failed", action, m.component_id, m.label, nbytes, repr(exc))
            return False
        detail = "; ".join(n for n in notes or () if n)
        self._event(run, node_id, "applied", action, m.component_id, m.label, nbytes, detail)
        return True

    def _ram(self, run: Run, s: int, phase: str, node_id: str) -> None:
        """The RAM guard at a planned node's start or end (``ram_guard.RamGuard.boundary``); fails open."""
        if self.ram_guard is None or not run.plan.feasible:
            return
        held = [(m.component_id, m.label, m.handle) for m in self._managed(run)]
        try:
            notes = self.ram_guard.boundary(run.prompt_id, run.workload, run.plan, s, phase, held, node_id)
        except Exception as exc:  # the node runs as it would without the guard
            notes = [("failed", "", "", "", 0, f"RAM guard: {exc!r}")]
        for note in notes:
            self._event(run, node_id, *note)

    def _ledger(self, run: Run, node_id: str) -> None:
        used = self.ops.device_bytes()
        run.ledger_peak = max(run.ledger_peak, used)
        detail = "over budget" if used > run.plan.budget.vram else ""
        self._event(run, node_id, "ledger", nbytes=used, detail=detail)

    def _event(
        self, run: Run, node_id: str, kind: str, action: str = "", component: str = "", label: str = "",
        nbytes: int = 0, detail: str = "",
    ) -> None:  # fmt: skip
        t = round(time.monotonic() - run.started, 6)
        event = Event(t, node_id, kind, action, component, label, nbytes, detail)
        run.events.append(event)
        for listener in self.listeners:
            try:
                listener(run.prompt_id, event)
            except Exception:  # telemetry must never break a run
                _log.debug("Headroom: a residency listener failed", exc_info=True)

    # -- reading
    def log(self, prompt_id: str) -> list[Event]:
        with self.lock:
            run = self.runs.get(prompt_id)
            return list(run.events) if run else []

    def summary(self, prompt_id: str) -> dict[str, Any] | None:
        """Planned vs applied GPU actions, the ledger's peak against the budget, and every event."""
        with self.lock:
            run = self.runs.get(prompt_id)
            if run is None:
                return None
            moves = [e for e in run.events if e.action and e.action not in HOST_ACTIONS]
            return {
                "prompt_id": prompt_id,
                "feasible": run.plan.feasible,
                "budget_vram": run.plan.budget.vram,
                "ledger_peak": run.ledger_peak,
                "planned": sorted((e.node_id, e.action, e.component) for e in moves if e.kind == "planned"),
                "applied": sorted((e.node_id, e.action, e.component) for e in moves if e.kind == "applied"),
                "replans": sum(e.kind == "replan" for e in run.events),
                "over_budget": sum(e.detail == "over budget" for e in run.events),
                "wall_s": run.plan.wall_s if math.isfinite(run.plan.wall_s) else None,
                "events": [e.as_dict() for e in run.events],
            }
