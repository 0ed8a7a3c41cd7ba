"""The RAM guard: the process's private RAM (RssAnon + pinned) stays within the RAM budget at every node
boundary, and the plan predicts it per node.

The planner's ``StepPlan.ram`` counts the host copies the plan places. What the process really holds is
more: its own baseline (Python, torch, the host, caches: measured at the prompt's start), what a loader
node builds in RAM before anything can move it (its components' bytes), what a component keeps after its
last use (the host leaves it where it is), activations when the model computes on the CPU, and the
file pages a component computing from its mapped file needs resident. ``predict`` adds them up per node,
with the guard's own moves, so the ledger can set prediction against the OS's figures.

At run time ``RamGuard.boundary`` reads the OS (``RamOps.read``) at each node's start and end. When the
reading plus what the starting node brings (``RamNeed.brings``, from the plan) exceeds the budget, it
first hands freed heap back to the OS, then moves idle components' host copies to their files (the disk
tier: mmap, page cache the kernel may drop), the one needed again farthest in the future first, until
the figures fit. A user's "ram"/"pinned_ram" choice is never overridden. After the prompt's last planned
node idle components go to disk, as the plan places them after their last use, until RssAnon is back
to the baseline (within 1%). Every move and every node's figures go to the residency log with one-line
reasons.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..names import OFFLOAD_LOADER
from ..planning.costmodel import CHOICE_HOST
from ..planning.planner import Plan, StepPlan
from ..planning.workload import Workload
from ..units import GiB, MiB, format_bytes
from .ram_budget import RamBudget, RamReading

KEEP_IN_RAM = frozenset({"ram", "pinned_ram"})  # residency choices the guard never overrides
MIN_MOVE = MiB  # less is buffers the file does not hold (sigmas, scales): not worth a move
RELEASE_SLACK = 0.01  # of the baseline: what idle copies may keep after a prompt (the target allows 2%)
# A note for the residency log: (kind, action, component id, label, bytes, detail), as Controller._event.
Note = tuple[str, str, str, str, int, str]
Managed = tuple[str, str, Any]  # (component id, label, handle) of a registered component


class RamOps(Protocol):
    """What the guard asks of the host (``nodes/host/residency.py``)."""

    def read(self) -> RamReading: ...  # the process's RssAnon and pinned bytes now
    def host_bytes(self, handle: Any) -> tuple[int, int]: ...  # its CPU copy: (pageable, pinned)
    def to_disk(self, handle: Any) -> str: ...  # its CPU copy to its file; a note ("" when all moved)
    def trim(self) -> bool: ...  # hand freed heap back to the OS
    def computes_on_cpu(self) -> bool: ...  # the host's compute device is the CPU


@dataclass(frozen=True)
class RamNeed:
    """The prediction for one node: at its end, RssAnon (``anon``) and ``pinned``; the file pages it reads
    from mapped weights and needs resident while it runs (``mapped``: page cache, outside the budget);
    what it allocates itself (``brings``: a loader's components, its activations on a CPU)."""

    anon: int
    pinned: int
    mapped: int
    brings: int

    @property
    def total(self) -> int:
        return self.anon + self.pinned


@dataclass(frozen=True)
class Held:
    """An idle component's CPU copy, a candidate for the disk tier."""

    component_id: str
    label: str
    pageable: int
    pinned: int
    next_use: int | None  # nodes until the next one that computes with it; None: not in this prompt
    handle: Any = None

    @property
    def nbytes(self) -> int:
        return self.pageable + self.pinned


def next_use(steps: Sequence[StepPlan], s: int, cid: str, after: Sequence[Sequence[str]] = ()) -> int | None:
    """Nodes from step ``s`` until the next one that computes with ``cid``: later steps of this prompt,
    then ``after`` (the uses of the nodes run after it); None: not needed again as far as is known."""
    for t in range(s + 1, len(steps)):
        if cid in steps[t].step.uses:
            return t - s
    for k, uses in enumerate(after):
        if cid in uses:
            return len(steps) - s + k
    return None


def needed_again(n: int | None) -> str:
    """ "needed again in N nodes", or that it is not (``n`` from ``next_use``)."""
    if n is None:
        return "not needed again in this prompt"
    return f"needed again in {n} node{'s' if n != 1 else ''}"


def to_disk_order(held: Iterable[Held]) -> list[Held]:
    """Never needed again first, then the one needed farthest ahead; the larger first among equals."""
    return sorted(held, key=lambda h: (h.next_use is not None, -(h.next_use or 0), -h.nbytes, h.component_id))


def choose(held: Iterable[Held], over: int, over_pinned: int = 0) -> list[Held]:
    """The components to move to disk, in ``to_disk_order``, until ``over`` bytes of private RAM and
    ``over_pinned`` bytes of pinned RAM are freed (all of them when that is not enough)."""
    chosen = []
    for h in to_disk_order(held):
        if over <= 0 and over_pinned <= 0:
            break
        if h.nbytes and (over > 0 or h.pinned):
            chosen.append(h)
            over -= h.nbytes
            over_pinned -= h.pinned
    return chosen


def size(n: float) -> str:
    """Bytes as the reasons write them, short: "24 GiB", "3.5 GiB", "310 MiB"."""
    if abs(n) >= GiB:
        return format_bytes(n, "GiB", 0 if abs(n) >= 10 * GiB else 1)
    return format_bytes(n, "MiB", 0)


def reason(h: Held, budget: int, left: int, after: str) -> str:
    """One line: why this component's copy goes to disk now."""
    again = needed_again(h.next_use)
    return f"on disk: RAM budget {size(budget)} leaves {size(max(left, 0))} after {after}; {again}"


def idle(sp: StepPlan, cid: str, pin: str, active: set[str]) -> bool:
    """Whether the guard may move this component's copy at this step: not computing (``active``), not kept
    in RAM by the user's choice, not streamed (the streamer holds that copy)."""
    placement = sp.placements.get(cid)
    streamed = placement is not None and placement.tier.gpu == "S"
    return cid not in active and pin not in KEEP_IN_RAM and not streamed


def _movable(workload: Workload, steps: Sequence[StepPlan], managed: Iterable[str]) -> set[str]:
    """Components the guard may move: registered ones, and those an Offload Loader of the plan builds."""
    loaders = {sp.step.node_id for sp in steps if sp.step.label == OFFLOAD_LOADER}
    return set(managed) | {c.id for c in workload.components if c.id.split(":", 1)[0] in loaders}


def predict(
    workload: Workload,
    steps: Sequence[StepPlan],
    baseline: int,
    budget: RamBudget,
    cpu: bool,
    initial: Mapping[str, str] | None = None,
    movable: Iterable[str] = (),
) -> list[RamNeed]:
    """Each step's RAM at its end (see ``RamNeed``), as the controller, the host and the guard leave it.

    ``initial``: the host part of each component already loaded ("R" pageable, "P" pinned, "D" mapped, "G"
    on the device with no host copy). At a node's start the controller applies the plan: a live component
    that does not compute takes its placement's host part; one that computes is on the device with no
    host copy on a GPU host, and stays where it is on a CPU host (the device is the RAM); the host's unload
    leaves a pageable copy. Then the guard makes room for what the node brings, and a loader node builds
    its components in RAM (the Offload Loader places them as their residency says; other loaders' stay
    in RAM off the device). The guard's policy (``choose``) is the one it applies at run time.
    """
    comps = {c.id: c for c in workload.components}
    movable = _movable(workload, steps, movable)
    host = {cid: h for cid, h in (initial or {}).items() if cid in comps}

    def sums(sp: StepPlan) -> tuple[int, int, int]:
        anon = pinned = mapped = 0
        for cid, h in host.items():
            c, p = comps[cid], sp.placements.get(cid)
            if p is not None and p.tier.gpu == "S" and cid in movable:  # the streamer's host copy
                # the whole copy as the plan places it (the streamer copies nothing back at detach);
                # from disk, the streamed blocks are read from the file's pages each step
                anon += p.pageable_bytes
                pinned += p.pinned_bytes
                mapped += p.streamed_bytes if p.tier.host == "D" else 0
            elif h in ("R", "P"):
                anon, pinned = (anon + c.bytes, pinned) if h == "R" else (anon, pinned + c.bytes)
            elif h == "D" and cid in sp.step.uses and cpu:
                mapped += c.bytes  # the CPU computes straight from the file's pages
        return baseline + anon, pinned, mapped

    def guard(s: int, sp: StepPlan, brings: int, active: set[str]) -> None:
        anon, pinned, _ = sums(sp)
        over, over_pinned = anon + pinned + brings - budget.ram, pinned - budget.pinned
        if over > 0 or over_pinned > 0:
            held = [
                Held(cid, "", c.bytes if host[cid] == "R" else 0, c.bytes if host[cid] == "P" else 0,
                     next_use(steps, s, cid))
                for cid, c in comps.items()
                if cid in movable and host.get(cid) in ("R", "P") and idle(sp, cid, c.pin, active)
            ]  # fmt: skip
            for h in choose(held, over, over_pinned):
                host[h.component_id] = "D"

    out = []
    for s, sp in enumerate(steps):
        step = sp.step
        for cid in list(host):  # the controller's moves at the node's start
            p, used = sp.placements.get(cid), cid in step.uses
            if cid not in movable:
                host[cid] = "G" if used and not cpu else "R"
            elif used and p is not None and p.tier.gpu == "G":
                host[cid] = host[cid] if cpu else "G"
            elif p is not None:
                host[cid] = p.tier.host
            elif host[cid] == "G":  # after its last use the plan evicts it: the unload makes a copy
                host[cid] = "R"
        built = [c for c in workload.components if c.id.split(":", 1)[0] == step.node_id]
        brings = sum(c.bytes for c in built) + (step.activation if cpu and step.uses else 0)
        guard(s, sp, brings, set(step.uses))  # room for what the node brings
        for c in built:
            host[c.id] = CHOICE_HOST.get(c.pin, "R") if c.id in movable else "R"
        guard(s, sp, 0, set())  # at its end (its activations are freed)
        out.append(RamNeed(*sums(sp), brings))
    return out


@dataclass
class _Prompt:
    budget: RamBudget
    baseline: int  # the process's private RAM at the prompt's start, less the managed components' copies
    cpu: bool
    plan: Plan | None = None  # the plan ``needs`` were predicted for (a re-plan replaces it)
    needs: list[RamNeed] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)  # the per-node ledger
    pending: list[Note] = field(default_factory=list)  # the guard's notes at the open step's start
    after: dict[str, Any] | None = None  # the release after the last planned node
    released: bool = False


class RamGuard:
    """One per process, beside the controller; prompts are kept by id (the last ``keep``)."""

    def __init__(self, ops: RamOps, budget: Callable[[], RamBudget], keep: int = 16) -> None:
        self.ops, self.budget, self.keep = ops, budget, keep
        self.prompts: OrderedDict[str, _Prompt] = OrderedDict()
        self.stuck: dict[str, int] = {}  # component id -> id(handle) whose copy could not be mapped
        self.lock = threading.RLock()

    def begin(self, prompt_id: str, handles: Iterable[Any]) -> _Prompt:
        """Measure the process's own RAM at a prompt's start (``handles``: the registered components)."""
        with self.lock:
            reading = self.ops.read()
            held = sum(sum(self.ops.host_bytes(h)) for h in handles)
            p = _Prompt(self.budget(), max(0, reading.total - held), self.ops.computes_on_cpu())
            self.prompts[prompt_id] = p
            while len(self.prompts) > self.keep:
                self.prompts.popitem(last=False)
            return p

    def records(self, prompt_id: str) -> list[dict[str, Any]]:
        """The per-node ledger: predicted against actual RssAnon and pinned, with the budget."""
        with self.lock:
            p = self.prompts.get(prompt_id)
            return [dict(r) for r in p.records] if p else []

    def summary(self, prompt_id: str) -> dict[str, Any] | None:
        """What the Monitor shows (GET /headroom/ram/{prompt_id}): the budget, the baseline, the per-node
        ledger with what the guard did there, and the release after the prompt; None: an unknown prompt."""
        with self.lock:
            p = self.prompts.get(prompt_id)
            if p is None:
                return None
            return {
                "prompt_id": prompt_id, "budget": p.budget.as_dict(), "baseline": p.baseline, "cpu": p.cpu,
                "planned": p.plan is not None, "nodes": [dict(r) for r in p.records],
                "after": dict(p.after) if p.after else None,
            }  # fmt: skip

    def boundary(
        self, prompt_id: str, workload: Workload, plan: Plan, s: int, phase: str, managed: Sequence[Managed],
        node_id: str | None = None,
    ) -> list[Note]:  # fmt: skip
        """Act at step ``s``'s ``phase``: "start" (make room for what it brings), "end" or "failed" (hold
        the budget, record the ledger; at the last step "end" is "done") or "done" (the prompt's last
        planned node: also release every idle copy). ``node_id``: the node at that boundary; a node that
        is not step ``s`` is not the plan's, and nothing is done."""
        steps = plan.steps
        if not 0 <= s < len(steps) or (node_id is not None and steps[s].step.node_id != node_id):
            return []
        if phase == "end" and s == len(steps) - 1:
            phase = "done"
        with self.lock:
            p = self.prompts.get(prompt_id) or self.begin(prompt_id, [h for _, _, h in managed])
            if p.plan is not plan:
                initial = {cid: self._letter(h, p.cpu) for cid, _, h in managed}
                ids = [cid for cid, _, _ in managed]
                p.needs = predict(workload, plan.steps, p.baseline, p.budget, p.cpu, initial, ids)
                p.plan = plan
            sp, need = plan.steps[s], p.needs[s]
            brings = need.brings if phase == "start" else 0
            notes: list[Note] = []
            reading = self.ops.read()
            if reading.total + brings > p.budget.ram or reading.pinned > p.budget.pinned:
                self.ops.trim()  # freed heap first: it costs nothing to give back
                reading = self.ops.read()
            if reading.total + brings > p.budget.ram or reading.pinned > p.budget.pinned:
                notes += self._make_room(p, workload, plan, s, phase, managed, reading, brings)
                reading = self.ops.read()
            if phase == "start":
                p.pending = list(notes)
                return notes
            notes.append(self._ledger(p, sp, need, reading, phase, p.pending + notes))
            p.pending = []
            if phase == "done" and not p.released:
                p.released = True
                notes += self._release(p, workload, managed)
        return notes

    # -- moves
    def _held(
        self, workload: Workload, plan: Plan, s: int, managed: Sequence[Managed], active: set[str]
    ) -> list[Held]:
        sp, out = plan.steps[s], []
        for cid, label, handle in managed:
            if not idle(sp, cid, workload.component(cid).pin, active) or self.stuck.get(cid) == id(handle):
                continue
            pageable, pinned = self.ops.host_bytes(handle)
            if pageable + pinned >= MIN_MOVE:
                out.append(Held(cid, label, pageable, pinned, next_use(plan.steps, s, cid), handle))
        return out

    def _make_room(
        self, p: _Prompt, workload: Workload, plan: Plan, s: int, phase: str, managed: Sequence[Managed],
        reading: RamReading, brings: int,
    ) -> list[Note]:  # fmt: skip
        step = plan.steps[s].step
        active = set(step.uses) if phase == "start" else set()
        held = self._held(workload, plan, s, managed, active)
        over = reading.total + brings - p.budget.ram
        chosen = choose(held, over, reading.pinned - p.budget.pinned)
        left = p.budget.ram - (reading.total + brings - sum(h.nbytes for h in held))
        labels = [label for cid, label, _ in managed if cid in active]
        node = f"node {step.node_id} ({step.label})"
        after = " and ".join(labels) if labels else f"what {node} brings" if brings else node
        notes = [self._move(h, reason(h, p.budget.ram, left, after)) for h in chosen]
        freed = sum(n[4] for n in notes if n[0] == "applied")
        if freed < over:
            short = f"over the RAM budget by {size(over - freed)}: nothing idle is left to move to disk"
            notes.append(("note", "", "", "", over - freed, short))
        self.ops.trim()
        return notes

    def _move(self, h: Held, why: str) -> Note:
        try:
            note = self.ops.to_disk(h.handle)
        except Exception as exc:  # fail open: the copy stays in RAM
            self.stuck[h.component_id] = id(h.handle)
            return ("failed", "map", h.component_id, h.label, h.nbytes, f"{why}; {exc!r}")
        left = sum(self.ops.host_bytes(h.handle))
        if left >= h.nbytes:  # nothing moved (weights the loader converted): not retried every node
            self.stuck[h.component_id] = id(h.handle)
            return ("skipped", "map", h.component_id, h.label, h.nbytes, f"{why}; {note or 'nothing moved'}")
        return (
            "applied",
            "map",
            h.component_id,
            h.label,
            h.nbytes - left,
            why + (f"; {note}" if note else ""),
        )

    def _release(self, p: _Prompt, workload: Workload, managed: Sequence[Managed]) -> list[Note]:
        """After the last planned node: idle copies to disk (the plan's tier after a last use) until the
        private RAM is back to the prompt's baseline (within ``RELEASE_SLACK``) and within the budget, and
        no further: each move reads the whole file (``mapped.bind`` compares every byte), seconds on a
        large model. The same workflow is the likeliest next prompt, so the copy it needs last goes first
        (its first use in this plan is the latest)."""
        assert p.plan is not None
        start = time.perf_counter()
        steps = p.plan.steps
        held = self._held(workload, p.plan, len(steps) - 1, managed, set())
        first = {h.component_id: next_use(steps, -1, h.component_id) for h in held}  # 1-based first use
        held = [replace(h, next_use=first[h.component_id]) for h in held]
        why = (
            "on disk: the prompt is done; its RAM goes back to the system (the file stays in the page cache)"
        )
        target = min(p.budget.ram, p.baseline + int(RELEASE_SLACK * p.baseline))
        self.ops.trim()
        reading = self.ops.read()
        notes: list[Note] = []
        for h in to_disk_order(held):
            if reading.total <= target and reading.pinned <= p.budget.pinned:
                break
            notes.append(self._move(h, why))
            self.ops.trim()
            reading = self.ops.read()
        moved = sum(n[4] for n in notes if n[0] == "applied")
        kept = sum(h.nbytes for h in held) - moved
        seconds = time.perf_counter() - start
        p.after = {
            "anon": reading.anon, "pinned": reading.pinned, "baseline": p.baseline, "target": target,
            "moved": moved, "kept": kept, "moves": len(notes), "idle": len(held), "seconds": seconds,
        }  # fmt: skip
        detail = (
            f"after the prompt: RssAnon {size(reading.anon)}, baseline {size(p.baseline)}; {len(notes)} of "
            f"{len(held)} idle copies to disk ({size(moved)}) in {seconds:.2f} s, {size(kept)} stay in RAM"
        )
        notes.append(("ram", "", "", "", reading.total, detail))
        return notes

    def _letter(self, handle: Any, cpu: bool) -> str:
        pageable, pinned = self.ops.host_bytes(handle)
        return "R" if pageable >= pinned and pageable else "P" if pinned else "D" if cpu else "G"

    # -- the ledger
    def _ledger(
        self, p: _Prompt, sp: StepPlan, need: RamNeed, reading: RamReading, phase: str, notes: list[Note]
    ) -> Note:
        over = " over budget" if reading.total > p.budget.ram else ""
        record = {
            "node": sp.step.node_id, "class_type": sp.step.label, "phase": phase,
            "predicted_anon": need.anon, "predicted_pinned": need.pinned, "predicted_mapped": need.mapped,
            "anon": reading.anon, "pinned": reading.pinned, "budget": p.budget.ram,
            "pinned_budget": p.budget.pinned, "over": bool(over), "how": reading.how,
            "actions": [_action(n) for n in notes],  # what the guard did at this node's start and end
        }  # fmt: skip
        p.records.append(record)
        detail = (
            f"RssAnon {size(reading.anon)} (predicted {size(need.anon)}), pinned {size(reading.pinned)} "
            f"(predicted {size(need.pinned)}), mapped {size(need.mapped)} predicted; budget "
            f"{size(p.budget.ram)}{over}"
        )
        return ("ram", "", "", "", reading.total, detail)


def _action(note: Note) -> dict[str, Any]:
    kind, action, component, label, nbytes, detail = note
    return {"kind": kind, "action": action, "component": component, "label": label, "nbytes": nbytes,
            "detail": detail}  # fmt: skip
