"""The controller's records and graph helpers: what it asks of the host (``HostOps``), one prompt's run
(``Run``) and its log (``Event``), and the small functions the controller and its tests share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..planning.costmodel import Tier
from ..planning.planner import Plan, StepPlan
from ..planning.workload import Workload
from ..workflow.graph_types import Graph, Link

HOST_ACTIONS = ("pin", "unpin", "map", "warm")  # host-side moves: logged, not part of the GPU plan


class HostOps(Protocol):
    """What the controller asks of the host; ``handle`` is whatever the loader registered."""

    def on_gpu(self, handle: Any) -> int: ...  # bytes of it on the device now (the host's accounting)
    def fully_loaded(self, handle: Any) -> bool: ...  # every weight on the device (no partial load)
    def room_for(self, handle: Any) -> bool: ...  # the host can load it without evicting anything
    def load(self, handle: Any) -> str: ...  # fully onto the device; "" or why it was not loaded
    def evict(self, handle: Any) -> None: ...  # off the device, through the host's unload
    def host_part(self, handle: Any) -> str: ...  # where its CPU copy is now: "P", "R" or "D"
    def set_host_tier(self, handle: Any, host: str) -> str: ...  # "P"/"R"/"D"; returns a note
    def warm(self, handle: Any) -> None: ...  # start reading its file pages (may do nothing)
    def device_bytes(self) -> int: ...  # every model's bytes on the device (the ledger)
    def is_oom(self, exc: BaseException) -> bool: ...
    def free_device(self) -> None: ...  # unload every model through the host
    # stream it whenever the running node samples it, its weights within ``budget`` device bytes (the
    # activations come on top); "" or why it cannot
    # source: the plan's host tier; pinned: the bytes of the streamed blocks it pins (None: all)
    def stream(self, handle: Any, budget: int, source: str = "P", pinned: int | None = None) -> str: ...
    def stream_ended(self, handle: Any) -> Streamed: ...  # undo ``stream``: what the node's sampling did


@dataclass(frozen=True)
class Streamed:
    """What a node's sampling did with a component the plan streams there, as the log records it."""

    kind: str  # "streamed" (by Headroom), "partial" (the host's partial load) or "none"
    nbytes: int = 0  # streamed bytes per step, or the bytes the host loaded
    detail: str = ""  # "streamed K/N blocks by Headroom, ...", "host partial load: ...", "not streamed: ..."


@dataclass(frozen=True)
class Event:
    t: float  # seconds since the prompt started
    node_id: str
    kind: str  # planned, applied, armed, skipped, replan, oom, failed, ledger, ram (RAM per node), note
    action: str = ""  # load, prefetch, evict, stream, pin, unpin, map, warm
    component: str = ""
    label: str = ""
    nbytes: int = 0
    detail: str = ""  # a planned move: the plan's reason for where the component is at that node

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Managed:
    component_id: str
    label: str
    handle: Any


@dataclass
class Run:
    prompt_id: str
    workload: Workload
    plan: Plan
    started: float
    graph: Graph | None = None
    position: int = 0  # index in plan.steps of the next expected node
    events: list[Event] = field(default_factory=list)
    ledger_peak: int = 0
    finished: set[str] = field(default_factory=set)
    managed_ids: frozenset[str] = frozenset()  # the components the planned log covers
    current: str | None = None  # the node that started and has not finished
    retried: set[str] = field(default_factory=set)  # nodes re-run once after an OOM
    failed: str | None = None  # the last node that finished with an error
    closed: bool = False
    lazy: dict[str, frozenset[str]] = field(default_factory=dict)  # node id -> its lazy input names
    # the running node's streamed components: id -> (the component, why it was not armed, or "")
    streams: dict[str, tuple[Managed, str]] = field(default_factory=dict)


def tier_of(on_gpu: bool, host: str) -> Tier:
    if on_gpu:
        return {"P": Tier.GPU_PINNED, "R": Tier.GPU_RAM, "D": Tier.GPU_ONLY}[host]
    return {"P": Tier.PINNED, "R": Tier.RAM, "D": Tier.DISK}[host]


def ancestors(graph: Graph, node_id: str, lazy: dict[str, frozenset[str]] | None = None) -> set[str]:
    """Every node whose output ``node_id`` needs before it can start, through any chain of links. A
    lazy input (``lazy``: node id -> its lazy input names) is not followed: the host starts a node with
    lazy inputs first and evaluates them, or not, when the node asks."""
    seen: set[str] = set()
    stack = [node_id]
    lazy = lazy or {}
    while stack:
        current = stack.pop()
        node = graph.nodes.get(current)
        # only the starting node's own lazy inputs may still be pending: a non-lazy ancestor has
        # finished, so what its lazy inputs asked for has run (and what they did not ask for never will)
        skip = lazy.get(current, frozenset()) if current == node_id else frozenset()
        for name, value in node.inputs.items() if node is not None else ():
            if isinstance(value, Link) and name not in skip and value.node not in seen:
                seen.add(value.node)
                stack.append(value.node)
    return seen


def target_tier(sp: StepPlan, component_id: str) -> Tier:
    placement = sp.placements.get(component_id)
    return placement.tier if placement is not None else Tier.DISK


def gpu_part(sp: StepPlan, component_id: str) -> str:
    """The GPU part the controller applies at the step: the plan's, except that a stream keeping every
    block resident is a whole load ("G"). Its streamer would stream nothing and the host would load the
    model whole and keep it, which the plan (a streamer gives its bytes back) never evicted. A Stream
    Model node's stream stays one: the user asked for it."""
    placement = sp.placements.get(component_id)
    if placement is None:
        return ""
    if placement.whole and component_id not in dict(sp.step.streamed):
        return "G"
    return placement.tier.gpu


def stream_budget(workload: Workload, sp: StepPlan, component_id: str, vram: int) -> int:
    """The device bytes the plan leaves a streamed component's weights at its step: the budget ``vram``
    less the step's least activations and what the others hold there (whole weights, a streamed one's
    non-block and resident bytes, what is prefetched for the next node)."""
    others = sum(p.bytes for p in sp.prefetched if p.component != component_id)
    for cid, placement in sp.placements.items():
        if cid == component_id or not placement.tier.gpu:
            continue
        c = workload.component(cid)
        others += c.bytes if placement.tier.gpu == "G" else c.bytes - placement.streamed_bytes
    return max(0, vram - (sp.step.activation_min or 0) - others)
