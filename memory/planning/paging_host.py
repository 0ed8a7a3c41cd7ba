"""The 2026 host as a baseline: what ComfyUI 0.33 with DynamicVRAM and the RAM-pressure cache does with a
workload, node by node, over a first and a repeat run. Built from its source (comfy/model_management.py,
comfy/model_patcher.py and comfy-aimdo 0.4 as ComfyUI 0.33 ships them):

- **VRAM** (comfy-aimdo VBARs): a model's load puts its VBAR on top of the priority list; a layer takes a
  page when it first computes; a fault that finds no room frees pages of the lowest-priority VBAR first
  (recency). What does not fit beside the node's activations is copied per layer at every evaluation.
- **Where an upload comes from** (``comfy/ops.py`` cast path): the layer's pin in the model's host
  buffer if it has one (pinned up to the pinned cap, the rest of the buffer unregistered: pageable);
  without one the layer is pinned on the way (read from the file into the buffer) while
  ``ensure_pin_budget`` finds RAM, else copied from the file. With ``--fast-disk`` a layer is read from
  the file straight to its VRAM page and never pinned; ``--high-ram`` pins without a budget.
- **RAM**: the host buffers. A new pin that would leave less than ``pin_margin`` available frees other
  models' pins first: models outside the current prompt, then those in it, most recently loaded first
  (``free_model_pins`` walks ``current_loaded_models`` from its head: MRU). With the RAM-pressure cache,
  after every node whose end leaves less than its active headroom available, pins are freed the same way
  (``execution.py``: ``free_pins(shortfall + 512 MiB)``).
- **Between runs**: the loader nodes' outputs stay in the cache for the same workflow, and so do the
  models' VRAM pages and whatever pins survived; the nodes whose inputs did not change are served from
  the cache (the caller passes which nodes run again). A model whose pins were freed is read from its
  file again: the *reload* the plan reports.

``headroom=True`` prices the same host with Headroom's lever (``dynamic_policy.RELEASE``, applied by
``nodes/host/dynamic_vram.py``): a model not needed again, in this run nor in the next run of the same
workflow, gives its pins back at the next node boundary (``partially_unload_ram``); the host's own
release order is unchanged. Not modelled: the OS page cache (a file read again may come from RAM,
faster than the disk figure), the Comfy Compiler, partial pins within a layer.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from ..units import MiB
from .baselines import Outcome
from .costmodel import Budget, Hardware
from .host_settings import HostSettings
from .workload import Component, Step, Workload

RELEASE_SLACK = 512 * MiB  # execution.py frees ``shortfall + 512 MiB`` of pins after a node
PIN_HYSTERESIS = 256 * MiB  # ensure_pin_budget frees ``shortfall + PIN_PRESSURE_HYSTERESIS``
SOURCES = ("pinned", "pageable", "disk")


@dataclass
class HostNode:
    """What the host does at one node of one run."""

    run: int  # 1 or 2
    node_id: str
    label: str
    uploads: dict[str, int] = field(default_factory=dict)  # source ("pinned"/"pageable"/"disk") -> bytes
    disk_read: int = 0  # bytes read from the model files (into RAM, or straight to the GPU)
    reloaded: dict[str, int] = field(default_factory=dict)  # component label -> bytes read again (run 2)
    ram: int = 0  # host buffers held when the node ends
    ram_peak: int = 0
    pinned: int = 0
    vram_weights: int = 0  # weight pages on the device while it computes
    streamed: int = 0  # bytes copied at every evaluation (did not fit beside the activations)
    freed_ram: dict[str, int] = field(default_factory=dict)  # label -> host-buffer bytes freed at this node
    seconds: float = 0.0  # transfer seconds (disk reads + uploads)
    oom: bool = False
    disk_read_direct: int = field(default=0, repr=False)  # the "disk" uploads already in ``disk_read``


@dataclass
class HostOutcome(Outcome):
    """``transfer_s``/``wall_s`` are the first run's (comparable with the other baselines)."""

    settings: HostSettings = field(default_factory=HostSettings)
    nodes: list[HostNode] = field(default_factory=list)
    runs_s: list[float] = field(default_factory=list)  # transfer seconds of each run
    headroom: bool = False

    def run(self, n: int) -> list[HostNode]:
        return [node for node in self.nodes if node.run == n]

    @property
    def reloads(self) -> dict[str, int]:
        """Bytes each component reads from its file again in the repeat run."""
        out: dict[str, int] = {}
        for node in self.run(2):
            for label, nbytes in node.reloaded.items():
                out[label] = out.get(label, 0) + nbytes
        return out


class _State:
    def __init__(self, w: Workload, settings: HostSettings, budget: Budget) -> None:
        self.w = w
        self.settings = settings
        card = budget.vram + budget.reserve
        self.usable = settings.usable_vram(card)
        self.ram = budget.ram
        self.cap = settings.pinned_cap(budget.ram)
        self.margin = settings.pin_margin(budget.ram)
        self.headroom_ram = settings.ram_headroom(budget.ram)
        self.vram: dict[str, int] = {}
        self.pinned: dict[str, int] = {}  # registered part of each host buffer
        self.pageable: dict[str, int] = {}  # unregistered part
        self.pinned_total = self.pageable_total = 0  # their sums (add_host keeps them)
        self.vbar_order: list[str] = []  # highest priority first (the last loaded)
        self.loaded_order: list[str] = []  # current_loaded_models: the last loaded first
        self.in_prompt: set[str] = set()  # the models the current prompt uses (its "current prompt" flag)

    def host(self, cid: str) -> int:
        return self.pinned.get(cid, 0) + self.pageable.get(cid, 0)

    def held(self) -> int:
        return self.pinned_total + self.pageable_total

    def add_host(self, cid: str, pinned: int, pageable: int) -> None:
        """Grow (or shrink, negative) ``cid``'s host buffer; the totals are kept as they change, since the
        model asks for them at every node (a sum over thousands of components made it quadratic)."""
        self.pinned[cid] = self.pinned.get(cid, 0) + pinned
        self.pageable[cid] = self.pageable.get(cid, 0) + pageable
        self.pinned_total += pinned
        self.pageable_total += pageable

    def free_host(self, cid: str, nbytes: int) -> int:
        """Drop up to ``nbytes`` of a host buffer (the unregistered part first); returns the bytes freed."""
        take = min(nbytes, self.host(cid))
        soft = min(take, self.pageable.get(cid, 0))
        self.add_host(cid, -(take - soft), -soft)
        self.prune(cid)
        return take

    def prune(self, cid: str) -> None:
        """Forget what ``cid`` no longer holds, so every per-node scan covers only the components holding
        memory (prompts hold thousands): zero entries go, a component without VRAM leaves the VBAR order
        and one holding nothing the loaded order (its next load puts it on top again, as the host's does)."""
        for held in (self.vram, self.pinned, self.pageable):
            if held.get(cid, 1) == 0:
                del held[cid]
        if cid not in self.vram and cid in self.vbar_order:  # the fault path only frees pages it holds
            self.vbar_order.remove(cid)
        if cid not in self.vram and not self.host(cid) and cid in self.loaded_order:
            self.loaded_order.remove(cid)


def paging_host(
    w: Workload,
    budget: Budget,
    hw: Hardware,
    settings: HostSettings | None = None,
    *,
    rerun: Collection[str] | None = None,
    headroom: bool = False,
) -> HostOutcome:
    """Two runs of ``w`` on the 2026 paging host. ``rerun``: the node ids the repeat run executes again
    (``None``: every node from the first multi-evaluation step on, as when only the seed changes)."""
    settings = settings or HostSettings()
    if rerun is None:
        first = next((i for i, s in enumerate(w.steps) if s.evaluations > 1), 0)
        rerun = {s.node_id for s in w.steps[first:]}
    runs = [list(w.steps), [s for s in w.steps if s.node_id in rerun]]
    name = "comfyui_2026" + ("+headroom" if headroom else "")
    out = HostOutcome(name, 0.0, 0.0, settings=settings, headroom=headroom)
    state = _State(w, settings, budget)
    for number, steps in enumerate(runs, 1):
        total = 0.0
        state.in_prompt = {cid for step in steps for cid in step.uses}
        last = {cid: index for index, step in enumerate(steps) for cid in step.uses}
        again = frozenset(cid for step in runs[1] for cid in step.uses)
        for index, step in enumerate(steps):
            later = _Later(last, index, again)
            node = _node(state, hw, step, number, later, headroom)
            if node.oom and out.oom_step is None:
                out.oom_step = f"node {step.node_id} ({step.label})"
            out.nodes.append(node)
            out.ram_peak = max(out.ram_peak, node.ram_peak)
            total += node.seconds
            if number == 1:
                out.per_step_s.append(node.seconds)
                out.wall_s += node.seconds + step.compute_s  # a fault waits for its copy: little overlap
        out.runs_s.append(total)
    out.transfer_s = out.runs_s[0]
    return out


class _Later:
    """The components a later node of this run, or the repeat run, uses: ``cid in later`` in O(1) (a list
    of the later steps' uses made planning quadratic in the prompt's length)."""

    def __init__(self, last: dict[str, int], index: int, again: frozenset[str]) -> None:
        self.last, self.index, self.again = last, index, again

    def __contains__(self, cid: object) -> bool:
        return cid in self.again or self.last.get(cid, -1) > self.index  # type: ignore[call-overload]


def _node(state: _State, hw: Hardware, step: Step, run: int, later: _Later, headroom: bool) -> HostNode:
    w = state.w
    node = HostNode(run, step.node_id, step.label)
    used = [w.component(cid) for cid in step.uses]
    room = state.usable - step.activation
    need = sum(c.bytes for c in used)
    largest_block = max((max(c.blocks) if c.blocks else c.bytes for c in used), default=0)
    node.oom = bool(used) and state.usable < step.activation_min + min(largest_block, need)
    # the fault path frees the lowest-priority VBAR's pages first, as much as the node's weights need
    for cid in step.uses:  # the load puts the node's VBARs on top
        for order in (state.vbar_order, state.loaded_order):
            if cid in order:
                order.remove(cid)
            order.insert(0, cid)
    wanted = min(need, max(0, room))
    short = sum(state.vram.values()) + (wanted - sum(state.vram.get(c.id, 0) for c in used)) - max(0, room)
    for victim in reversed(list(state.vbar_order)):  # pruned as it goes
        if short <= 0:
            break
        if victim in step.uses or not state.vram.get(victim):
            continue
        take = min(state.vram[victim], short)
        state.vram[victim] -= take
        short -= take
        state.prune(victim)
    left = max(0, room) - sum(v for k, v in state.vram.items() if k not in step.uses)
    seconds = 0.0
    for c in used:
        resident = max(0, min(c.bytes, left))
        left -= resident
        before = min(state.vram.get(c.id, 0), resident)
        streamed = c.bytes - resident
        first = c.bytes - before  # the first pass faults in everything not already on the device
        later_bytes = max(0, step.evaluations - 1) * streamed
        seconds += _upload(state, hw, node, c, step, first, later_bytes, run, later, headroom)
        state.vram[c.id] = resident
        node.vram_weights += resident
        node.streamed += streamed
    node.seconds = seconds
    _after_node(state, node, step, later, headroom)
    for cid in step.uses:
        state.prune(cid)
    node.ram = state.held()
    node.pinned = state.pinned_total
    node.ram_peak = max(node.ram_peak, node.ram)
    return node


def _upload(
    state: _State, hw: Hardware, node: HostNode, c: Component, step: Step, first: int, again: int,
    run: int, later: _Later, headroom: bool,
) -> float:  # fmt: skip
    """Seconds of the node's reads and uploads of ``c``: ``first`` bytes on the first pass, ``again`` on
    the others. A byte missing from the host buffer is pinned on the way (read from the file once) where
    the budget allows; what stays unpinned is copied from the file at every pass."""
    s = state.settings
    missing = max(0, c.bytes - state.host(c.id))
    new = 0
    if missing and s.pinned_memory and (s.high_ram or not s.fast_disk):
        room = state.ram - state.held() - state.margin
        if room < missing and not s.high_ram:
            _make_room(state, node, missing - room + PIN_HYSTERESIS, keep=set(step.uses))
            room = state.ram - state.held() - state.margin
        new = missing if s.high_ram else max(0, min(missing, room))
        registered = max(0, min(new, state.cap - state.pinned_total))
        state.add_host(c.id, registered, new - registered)
    # every pass reads each byte from where it lives: the pin, the unregistered buffer, or the file
    share = {
        "pinned": state.pinned.get(c.id, 0) / max(1, c.bytes),
        "pageable": state.pageable.get(c.id, 0) / max(1, c.bytes),
    }
    share["disk"] = max(0.0, 1.0 - share["pinned"] - share["pageable"])
    rate = {"pinned": hw.h2d_pinned, "pageable": hw.h2d_pageable, "disk": min(hw.disk, hw.h2d_pinned)}
    seconds = new / hw.disk  # the layers pinned on the way were read from the file first
    for source in SOURCES:
        nbytes = int((first + again) * share[source])
        if nbytes:
            node.uploads[source] = node.uploads.get(source, 0) + nbytes
            seconds += nbytes / rate[source]
    from_file = new + node.uploads.get("disk", 0) - node.disk_read_direct
    node.disk_read_direct = node.uploads.get("disk", 0)
    node.disk_read += from_file
    if run > 1 and from_file:
        node.reloaded[c.label] = node.reloaded.get(c.label, 0) + from_file
    return seconds


def _victims(state: _State, keep: set[str]) -> list[str]:
    """The order the host frees host buffers in: models outside the current prompt first, then the others,
    each tier the most recently loaded first (``free_model_pins`` walks ``current_loaded_models`` from its
    head). Headroom cannot reorder it; it only releases what the graph is done with (``_after_node``)."""
    held = [cid for cid in state.loaded_order if cid not in keep and state.host(cid)]
    return [c for c in held if c not in state.in_prompt] + [c for c in held if c in state.in_prompt]


def _make_room(state: _State, node: HostNode, nbytes: int, keep: set[str]) -> None:
    for cid in _victims(state, keep):
        if nbytes <= 0:
            return
        freed = state.free_host(cid, nbytes)
        if freed:
            label = state.w.component(cid).label
            node.freed_ram[label] = node.freed_ram.get(label, 0) + freed
            nbytes -= freed


def _after_node(state: _State, node: HostNode, step: Step, later: _Later, headroom: bool) -> None:
    if headroom:  # Headroom's lever: a model no later node (nor the next run) needs gives its pins back
        for cid in list(state.loaded_order):
            if state.host(cid) and cid not in later:
                label = state.w.component(cid).label
                node.freed_ram[label] = node.freed_ram.get(label, 0) + state.free_host(cid, state.host(cid))
    node.ram_peak = state.held()
    if state.settings.cache != "ram":
        return
    short = state.headroom_ram - (state.ram - state.held())
    if short > 0:  # the RAM-pressure cache after the node: pins of idle models, the host's tiers
        _make_room(state, node, short + RELEASE_SLACK, keep=set())
