"""What one prompt did, as telemetry records it: its nodes (time and memory at start, end and peak), the
residency moves the controller reported, and the plan made for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..planning.records import PlannedRun
from .probe import Sample


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
    status: str = "running"  # running, done, error (no finish: failed or interrupted), cached
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)  # per sample field, over the node's samples
    device_peak: int | None = None  # torch.cuda.max_memory_allocated over the node (exact, not sampled)
    events: list[ResidencyEvent] = field(default_factory=list)
    # status "cached": the host served the node's output from its cache; the record of the earlier run that
    # computed it (None when that run is gone), and that run's prompt id
    computed: NodeRecord | None = None
    cached_from: str | None = None
    io: dict[str, int] = field(default_factory=dict)  # disk-read counters at the start, deltas once done
    gauges: dict[str, Any] = field(default_factory=dict)  # shared memory, pins, aimdo VRAM at the start
    bound: dict[str, Any] | None = None  # what bounded it (bounds.Bound.as_dict), once done

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
            "cached_from": self.cached_from,
            "io": self.io,
            "bounded_by": self.bound,
        }


@dataclass
class RunRecord:
    """One prompt's telemetry: its nodes in the order they started, residency events, and its plan."""

    prompt_id: str
    key: str  # prompt_key of the prompt, to find a plan made when it was queued
    started: float
    class_types: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    events: list[ResidencyEvent] = field(default_factory=list)
    planned: PlannedRun | None = None
    plan_note: str = ""  # why there is no plan, when there is none
    workflow_id: str | None = None  # the frontend's graph id (extra_pnginfo.workflow.id), when it sent one
    loaded: set[str] = field(default_factory=set)  # components loaded and not evicted since (bounds)


@dataclass
class Snapshot:
    text: str
    prompt_id: str | None
    peaks: dict[str, int]
    samples: list[Sample]
    nodes: list[NodeRecord]
    planned: PlannedRun | None
