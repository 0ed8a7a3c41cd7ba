"""Prefetch on a side stream: the policy that uploads the next node's component while the current one
computes, and lands it in the host's accounting at the next boundary.

The plan moves a full GPU load one node earlier where VRAM allows (``planner._schedule_prefetch``): the
earlier step's ``vram_peak`` includes the component and its ``prefetched`` list says which one, for
which node, and how many bytes it reserved. At that step's start the controller asks ``begin``:
- when the plan reserved at least the component's real size (``PrefetchOps.size``) and the host can
  make its accounting right (``PrefetchOps.why_sync`` is ""), the host part allocates the device copies
  and queues the copies on a side stream (``PrefetchOps.start``); the host's accounting is untouched;
- otherwise the controller loads it synchronously, as before, and the log says why in one line.

At the next boundaries (``boundary``):
- the node it was uploaded for starts: wait for the copies (a stream wait, not a host sync) and land
  them through the host's own load path (``PrefetchOps.land``), so the node's ``load_models_gpu`` finds
  the model loaded and moves nothing;
- the current node ends well and the copies have landed already: land them now;
- another planned node starts (a deviation or a re-plan), the node fails (OOM, interrupt), the controller
  frees the device after an OOM, or the prompt ends: cancel (``PrefetchOps.cancel``): the copies are
  freed after the side stream is done with them, the host's accounting never saw them.

Nothing here imports torch: the host part (``nodes/host/prefetch.py``) implements ``PrefetchOps`` over a
``Stream``; tests give it a fake stream whose event fires when the test says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..planning.planner import StepPlan
from ..units import format_bytes

SLACK = 1.02  # the host's size may count a few buffers the plan's header figure does not


class CopyDone(Protocol):
    """Fires when a side stream's copies have landed on the device."""

    def query(self) -> bool: ...  # landed (never blocks)
    def wait(self) -> None: ...  # later compute sees the landed copies (a stream wait where it can)


class Stream(Protocol):
    """A side stream: queue copies behind the compute stream's work so far; returns their event."""

    def copy(self, pairs: Sequence[tuple[Any, Any]]) -> CopyDone: ...  # (destination, source) tensors


class Upload(Protocol):
    """One component's copies in flight (``PrefetchOps.start``)."""

    event: CopyDone
    nbytes: int


class PrefetchOps(Protocol):
    """What the prefetcher asks of the host; ``handle`` is what the loader registered."""

    def why_sync(self, handle: Any) -> str: ...  # "" when an upload can land in the host's accounting
    def size(self, handle: Any) -> int: ...  # the bytes an upload allocates on the device
    def start(self, handle: Any) -> Upload: ...  # allocate + queue the copies; raises (OOM) holding none
    def land(self, handle: Any, upload: Upload) -> None: ...  # the host's load path, weights in place
    def cancel(self, upload: Upload) -> None: ...  # free the copies once the stream is done with them
    def is_oom(self, exc: BaseException) -> bool: ...


# A note for the controller's log: (node_id, kind, action, component, label, nbytes, detail)
Note = tuple[str, str, str, str, str, int, str]


@dataclass
class InFlight:
    prompt_id: str
    component_id: str
    label: str
    handle: Any
    during: str  # the node it uploads during (the plan's "prefetch" step)
    for_node: str  # the node that uses it
    upload: Upload
    started: float


def reservation(sp: StepPlan, component_id: str) -> tuple[int, str]:
    """The bytes the plan reserved in step ``sp`` for prefetching the component, and the node it is
    for; (0, "") when the plan prefetches nothing of it there."""
    for p in sp.prefetched:
        if p.component == component_id:
            return p.bytes, p.node
    return 0, ""


def fits(size: int, reserved: int) -> bool:
    return 0 < size <= reserved * SLACK


class Prefetcher:
    """The uploads in flight (one device per process, so at most one prompt's) and their outcome."""

    def __init__(self, ops: PrefetchOps) -> None:
        self.ops = ops
        self.inflight: dict[str, InFlight] = {}

    def begin(
        self, prompt_id: str, sp: StepPlan, component_id: str, label: str, handle: Any
    ) -> tuple[bool, Note]:
        """Start the component's upload on the side stream if the plan's reservation and the host
        allow; (False, note): the controller loads it synchronously (the note says why) or, after an
        OOM ("oom" note), not at all."""
        node = sp.step.node_id
        if component_id in self.inflight:  # a step applied again (after an OOM recovery): one upload
            return True, (node, "note", "prefetch", component_id, label, 0, "already uploading")
        reserved, for_node = reservation(sp, component_id)
        why = self.ops.why_sync(handle)
        size = 0
        if not why:
            size = self.ops.size(handle)
            if not fits(size, reserved):
                why = f"it needs {_mib(size)}, the plan reserved {_mib(reserved)} for it during this node"
        if why:
            return False, (node, "note", "prefetch", component_id, label, size, f"stays synchronous: {why}")
        try:
            upload = self.ops.start(handle)
        except Exception as exc:
            if self.ops.is_oom(exc):  # never take memory the running node needs: skip, it loads later
                return False, (node, "oom", "prefetch", component_id, label, size, "skipped")
            return False, (node, "note", "prefetch", component_id, label, size, f"stays synchronous: {exc!r}")
        self.inflight[component_id] = InFlight(
            prompt_id, component_id, label, handle, node, for_node, upload, time.monotonic()
        )
        detail = f"uploading on a side stream for node {for_node} (reserved {_mib(reserved)})"
        return True, (node, "note", "prefetch", component_id, label, upload.nbytes, detail)

    def boundary(self, prompt_id: str, node_id: str, phase: str, planned: bool = True) -> list[Note]:
        """phase: "start" (``node_id`` starts), "end" (it finished well), "failed" (it raised), "oom"
        (the device is about to be freed) or "closed" (the prompt ended). ``planned``: whether the plan
        knows the node starting; one it does not (an expanded helper) leaves the upload in flight."""
        notes: list[Note] = []
        for f in list(self.inflight.values()):
            if f.prompt_id != prompt_id:
                notes += self._cancel(f, "another prompt started")
            elif phase == "start" and node_id == f.for_node:
                notes += self._land(f, wait=True)
            elif phase == "start" and planned:
                notes += self._cancel(f, f"node {node_id} started, not node {f.for_node}")
            elif phase == "end" and f.upload.event.query():
                notes += self._land(f, wait=False)
            elif phase in ("failed", "oom", "closed"):
                why = {"failed": "the node failed", "oom": "out of memory", "closed": "the prompt ended"}
                notes += self._cancel(f, why[phase])
        return notes

    def _land(self, f: InFlight, wait: bool) -> list[Note]:
        del self.inflight[f.component_id]
        try:
            if wait:  # the node that needs it starts: its compute waits for the copies
                f.upload.event.wait()
            self.ops.land(f.handle, f.upload)
        except Exception as exc:  # land() put the weights back: the node loads it as usual
            self.ops.cancel(f.upload)
            kind = "oom" if self.ops.is_oom(exc) else "failed"
            return [(f.during, kind, "prefetch", f.component_id, f.label, f.upload.nbytes, repr(exc))]
        seconds = time.monotonic() - f.started
        detail = f"uploaded on a side stream; landed {seconds:.3f} s after it started"
        return [(f.during, "applied", "prefetch", f.component_id, f.label, f.upload.nbytes, detail)]

    def _cancel(self, f: InFlight, why: str) -> list[Note]:
        del self.inflight[f.component_id]
        try:
            self.ops.cancel(f.upload)
        except Exception as exc:  # the copies' memory goes with the last reference anyway
            why += f"; cancel: {exc!r}"
        detail = f"cancelled: {why}"
        return [(f.during, "skipped", "prefetch", f.component_id, f.label, f.upload.nbytes, detail)]


def _mib(n: int) -> str:
    return format_bytes(n, "MiB", 1)
