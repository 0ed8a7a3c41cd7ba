"""The residency planner: the exact optimum of the cost model over every component's tier at every step.

Decision space: at each step every live component (between its first and last use) has a tier (see
``costmodel.Tier``); a component that computes at that step is on the GPU, fully or streamed; before
its first use and after its last it is on disk. Cost: transfer seconds (``costmodel``) of every tier
change plus, for a streamed component, uploading its resident blocks and streaming the others once
per evaluation. Constraints per step: VRAM (weights, streaming ring, activations), RAM, pinned RAM.
Several components may stream in one step (a sampler's model and its ControlNet, a CLIP of four text
encoders): they run one after another, so they share one ring sized for the largest block, and the
VRAM left after every non-streamed byte goes to their resident blocks in component order.

The optimiser is a dynamic programme over steps whose state is the joint tier of the live
components. Costs between steps are a sum over components, so the min over previous states is taken
one component axis at a time (a separable min-plus product), which keeps it exact and fast for the
handful of components a workflow has. ``tests/unit/test_planner.py`` checks it against brute force.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..deadline import check_time
from ..units import format_bytes
from .bounded import POLICIES, bound, bounded_note, improve
from .costmodel import (
    IDLE_TIERS,
    USED_TIERS,
    Budget,
    Hardware,
    Tier,
    copy_source,
    pinned_tiers,
    stream_seconds,
    transition_parts,
    transition_seconds,
    upload_source,
)
from .reasons import placement_reasons
from .workload import Component, Step, Workload

INF = math.inf


@dataclass(frozen=True)
class Placement:
    """A component's tier during one step; for a streamed one, how many blocks stay resident.

    ``pinned_bytes`` and ``pageable_bytes`` are its host copy during the step. A streamed component
    keeps all of it in its host tier, the resident blocks and the rest included (the streamer copies
    nothing back at detach); a stream from pinned RAM pins as many streamed blocks as the pinned cap
    leaves, and the rest of its copy stays pageable.
    """

    tier: Tier
    resident_blocks: int = 0
    total_blocks: int = 0
    streamed_bytes: int = 0
    pinned_bytes: int = 0
    pageable_bytes: int = 0
    reason: str = ""  # why it is there, in one line from the plan's figures (``reasons.py``)

    @property
    def capped(self) -> bool:
        """A stream from pinned RAM whose pinned cap left some of its streamed blocks pageable."""
        return self.tier.host == "P" and self.tier.gpu == "S" and self.pinned_bytes < self.streamed_bytes

    @property
    def whole(self) -> bool:
        """A stream that keeps every block resident: nothing would stream, so it is a whole load (the
        controller applies it as one, the plan's reason says so), unless a Stream Model node asked."""
        return self.tier.gpu == "S" and 0 < self.total_blocks <= self.resident_blocks

    @property
    def label(self) -> str:
        """The tier's label, with "+ram" where the pinned cap left some streamed blocks pageable."""
        return self.tier.label + ("+ram" if self.capped else "")


@dataclass(frozen=True)
class Action:
    """One move of a component into or during a step, with the figures the plan priced it at.

    kind: "copy" (a new RAM copy of ``bytes`` from ``source`` to ``target``, keeping ``pinned_bytes``
    + ``pageable_bytes``), "load" (a full GPU upload from ``source``), "evict" (off the GPU, kept in
    ``target`` or freed when it is ""), "release" (a RAM copy in ``source`` dropped) or "stream"
    (``bytes`` per evaluation from ``source``, ``pinned_bytes`` of them pinned). ``seconds`` is the
    transfer time it adds to the step: a step's actions sum to its ``transfer_s``.
    """

    kind: str
    component: str
    bytes: int = 0
    seconds: float = 0.0
    source: str = ""
    target: str = ""
    pinned_bytes: int = 0
    pageable_bytes: int = 0
    resident_blocks: int = 0
    total_blocks: int = 0
    evaluations: int = 0
    prefetch_depth: int = 0


@dataclass(frozen=True)
class Prefetch:
    """A full GPU load moved into the node before the one that uses it, overlapping its compute."""

    component: str
    bytes: int
    seconds: float
    node: str  # the node that uses it


@dataclass
class StepPlan:
    step: Step
    placements: dict[str, Placement]  # live components only; the others are on disk
    vram_peak: int
    ram: int
    pinned: int
    transfer_s: float  # moves into this step plus streaming during it: the sum of its actions' seconds
    actions: list[Action] = field(default_factory=list)  # what happens before/while this step runs
    prefetched: list[Prefetch] = field(default_factory=list)  # uploads overlapped with this step's compute
    wall_s: float = 0.0

    @property
    def prefetch_ids(self) -> list[str]:
        """The components of the uploads overlapped with this step."""
        return [p.component for p in self.prefetched]


@dataclass
class Plan:
    feasible: bool
    steps: list[StepPlan]
    transfer_s: float
    wall_s: float
    min_vram: int
    bottleneck: str  # the step that sets min_vram, in words
    budget: Budget
    hardware: Hardware
    prefetch_depth: int  # d: blocks uploaded ahead of the one computing
    notes: tuple[str, ...] = ()  # what the plan itself assumed or cut short, one line each


def minimum_vram(workload: Workload, depth: int) -> tuple[int, str]:
    """The least VRAM any plan needs, and the step that needs it (closed form, no search).

    At each step the used components must be on the GPU. Streamed ones share one ring, so for a ring
    of size r it pays to stream every component whose ring fits in r (streaming never adds bytes
    beyond the ring); the least need is the best r, or streaming nothing.
    """
    worst, where = 0, "no step computes with a model"
    for step in workload.steps:
        used = [workload.component(c) for c in step.uses]
        need, streamed = sum(c.bytes for c in used), []
        for ring in sorted({c.ring(depth) for c in used if c.streamable}):
            chosen = [c for c in used if c.streamable and c.ring(depth) <= ring]
            candidate = sum(c.bytes for c in used) - sum(sum(c.blocks) for c in chosen) + ring
            if candidate < need:
                need, streamed = candidate, chosen
        weights = need
        need += step.activation_min  # with cfg the host runs cond alone when both do not fit
        if need > worst:
            how = f", streaming {', '.join(c.label for c in streamed)}" if streamed else ""
            split = (
                f": {format_bytes(weights, 'GiB')} of weights, "
                f"{format_bytes(step.activation_min, 'GiB')} of activations"
            )
            worst, where = need, f"node {step.node_id} ({step.label}){how}{split}"
    return worst, where


def _allowed(c: Component, used: bool) -> tuple[Tier, ...]:
    if not used:
        return pinned_tiers(c.pin, IDLE_TIERS)
    return pinned_tiers(c.pin, USED_TIERS if c.streamable else tuple(t for t in USED_TIERS if t.gpu == "G"))


class _Problem:
    """Precomputed per-component vectors and matrices shared by the optimiser and the reporting."""

    def __init__(self, workload: Workload, budget: Budget, hw: Hardware, depth: int) -> None:
        self.w, self.budget, self.hw, self.depth = workload, budget, hw, depth
        self.index = {c.id: i for i, c in enumerate(workload.components)}
        uses: list[list[int]] = [[] for _ in workload.components]  # one pass: linear in the prompt's size
        for s, step in enumerate(workload.steps):
            for u in dict.fromkeys(step.uses):
                if u in self.index:
                    uses[self.index[u]].append(s)
        # a component already off disk when the plan starts (a re-plan, a cached second run) is live from
        # the first step: keeping it where it is until its use may beat dropping and reloading it
        start = [0 if workload.initial_tier(c.id) != Tier.DISK else None for c in workload.components]
        self.live = [
            (s if s is not None else u[0], u[-1]) if u else None for u, s in zip(uses, start, strict=True)
        ]
        by_size: dict[int, np.ndarray] = {}  # copies of one model share their transition matrix
        for c in workload.components:
            if c.bytes not in by_size:
                by_size[c.bytes] = np.array(
                    [[transition_seconds(hw, c.bytes, a, b) for b in Tier] for a in Tier]
                )
        self.trans = [by_size[c.bytes] for c in workload.components]

        # per step: the live components, and which of them it uses (one pass, not a scan per call)
        self._alive: list[list[int]] = [[] for _ in workload.steps]
        for i, span in enumerate(self.live):
            for s in range(span[0], span[1] + 1) if span else ():
                self._alive[s].append(i)
        self._used = [
            frozenset(self.index[u] for u in step.uses if u in self.index) for step in workload.steps
        ]
        self._tiers = [(_allowed(c, False), _allowed(c, True)) for c in workload.components]
        # a Stream Model node streams its model wherever it is sampled: only the streamed tiers there
        self._streamed = [
            frozenset(self.index[c] for c, _ in step.streamed if c in self.index) for step in workload.steps
        ]
        self._stream_tiers = [tuple(t for t in used if t.gpu == "S") or used for _, used in self._tiers]
        # components held at one tier per use (see ``_bound``): index -> (idle order, used order)
        self.fixed: dict[int, tuple[tuple[Tier, ...], tuple[Tier, ...]]] = {}
        # components held at the tier a found plan gives them at each step (``_improve``)
        self.sequence: dict[int, dict[int, Tier]] = {}
        # Big workflows repeat the same step (a chain of samplers on one model): its cost array depends
        # only on what this key holds, so each distinct one is computed once.
        # Equal components (copies of one model in a big prompt) share a shape: what a step's cost and a
        # move depend on (bytes, blocks, the user's residency), numbered so keys stay cheap to hash.
        shapes: dict[tuple[int, tuple[int, ...], str], int] = {}
        self._shape = [
            shapes.setdefault((c.bytes, c.blocks, c.pin), len(shapes)) for c in workload.components
        ]
        # (activation_min, evaluations, per live component: (shape, used, streamed, allowed tiers))
        self._costs: dict[
            tuple[int, int, tuple[tuple[int, bool, bool, tuple[Tier, ...]], ...]], np.ndarray
        ] = {}
        self._moves: dict[tuple[int, tuple[Tier, ...], tuple[Tier, ...]], np.ndarray] = {}

    def alive(self, s: int) -> list[int]:
        return self._alive[s]

    def allowed(self, s: int, i: int) -> tuple[Tier, ...]:
        if i in self._streamed[s] and i in self._used[s]:
            tiers = self._stream_tiers[i]
        else:
            tiers = self._tiers[i][i in self._used[s]]
        sequence = self.sequence.get(i)
        if sequence is not None:
            return (sequence[s],)
        order = self.fixed.get(i)
        if order is None:
            return tiers
        return (next((t for t in order[i in self._used[s]] if t in tiers), tiers[0]),)

    def states(self, s: int) -> int:
        """Joint placements of the live components at step ``s``: the size of its cost array."""
        return math.prod(len(self.allowed(s, i)) for i in self._alive[s])

    def step_cost(self, s: int) -> np.ndarray:
        """Joint array over the live components' allowed tiers (shared between equal steps: read only)."""
        step = self.w.steps[s]
        shape = self._shape
        # the tiers each may take belong in the key: a held copy of a model has one, a free copy all
        modes = tuple(
            (shape[i], i in self._used[s], i in self._streamed[s], self.allowed(s, i)) for i in self._alive[s]
        )
        key = (step.activation_min, step.evaluations, modes)
        cost = self._costs.get(key)
        if cost is None:
            cost = self._costs[key] = self._step_cost(s)
            cost.flags.writeable = False
        return cost

    def _step_cost(self, s: int) -> np.ndarray:
        """Joint array over the live components' allowed tiers: streaming cost, inf where infeasible.

        A streamed component keeps its whole host copy in its host tier, the resident blocks too.
        Streaming "from pinned" pins as many streamed blocks as the pinned cap leaves and streams the
        rest from pageable RAM. Streamed components share one ring
        (the largest of theirs) and take resident blocks from the room left, in component order.
        """
        step, depth = self.w.steps[s], self.depth
        comps = self.alive(s)
        shape = [len(self.allowed(s, i)) for i in comps]
        # the host batches cond and uncond only with room for both, else runs them one by one
        vram = np.full(shape, float(step.activation_min))
        ring = np.zeros(shape)
        ram, pinned = np.zeros(shape), np.zeros(shape)
        for axis, i in enumerate(comps):
            c, tiers = self.w.components[i], self.allowed(s, i)
            view = [1] * len(comps)
            view[axis] = len(tiers)
            on_gpu = [c.bytes if t.gpu == "G" else c.rest if t.gpu == "S" else 0 for t in tiers]
            vram = vram + np.reshape(on_gpu, view)
            ring = np.maximum(ring, np.reshape([c.ring(depth) if t.gpu == "S" else 0 for t in tiers], view))
            ram = ram + np.reshape([c.bytes if t.host in "PR" else 0 for t in tiers], view)
            pinned = pinned + np.reshape(
                [c.bytes if t.host == "P" and t.gpu != "S" else 0 for t in tiers], view
            )
        vram = vram + ring
        cost = np.zeros(shape)
        room = self.budget.vram - vram  # what streamed components may keep resident, shared in order
        for axis, i in enumerate(comps):
            c, tiers = self.w.components[i], self.allowed(s, i)
            for k, t in enumerate(tiers):
                if t.gpu != "S":
                    continue
                index: list[slice | int] = [slice(None)] * len(comps)
                index[axis] = k
                at = tuple(index)
                resident = _resident_bytes(c, room[at])
                room[at] -= resident
                streamed = sum(c.blocks) - resident
                pinned_part: float | np.ndarray = 0.0
                if t.host == "P":  # pin what the cap allows; the rest streams from pageable RAM
                    pinned_part = np.clip(self.budget.pinned - pinned[at], 0, streamed)
                    pinned[at] += pinned_part
                once = c.rest + resident
                cost[at] += stream_seconds(self.hw, t.host, once, streamed, pinned_part, step.evaluations)
        feasible = (vram <= self.budget.vram) & (ram <= self.budget.ram) & (pinned <= self.budget.pinned)
        return np.where(feasible, cost, INF)

    def move(self, i: int, a: tuple[Tier, ...], b: tuple[Tier, ...]) -> np.ndarray:
        key = (self._shape[i], a, b)
        matrix = self._moves.get(key)
        if matrix is None:
            matrix = self._moves[key] = self.trans[i][np.ix_([int(t) for t in a], [int(t) for t in b])]
            matrix.flags.writeable = False
        return matrix


def _resident_bytes(c: Component, room: np.ndarray) -> np.ndarray:
    """``Component.resident_fit``'s bytes for every room of an array at once (a sorted search)."""
    prefix = np.asarray(c._resident_prefix, dtype=float)
    k = np.searchsorted(prefix, np.maximum(np.trunc(room), 0.0), side="right") - 1
    fit: np.ndarray = prefix[k]
    return fit


def _advance(problem: _Problem, cost: np.ndarray, s: int) -> np.ndarray:
    """Min over step ``s``'s joint states of cost + moves into step ``s + 1``'s joint states."""
    before, after = problem.alive(s), problem.alive(s + 1)
    axes = list(before)
    for i in before:
        axis = axes.index(i)
        if i not in after:  # dead from now on: dropping to disk is free
            cost = cost.min(axis=axis)
            axes.pop(axis)
            continue
        matrix = problem.move(i, problem.allowed(s, i), problem.allowed(s + 1, i))
        moved = np.moveaxis(cost, axis, -1)[..., :, None] + matrix
        cost = np.moveaxis(moved.min(axis=-2), -1, axis)
    for i in after:
        if i not in before:  # first use: it comes from disk
            cost = cost[..., None] + problem.move(i, (Tier.DISK,), problem.allowed(s + 1, i))[0]
            axes.append(i)
    order = [axes.index(i) for i in after]
    return np.transpose(cost, order) if order else cost


def _optimise(problem: _Problem) -> tuple[float, list[tuple[int, ...]]]:
    """The DP forward pass, then a backward pass recovering one optimal joint state per step."""
    steps = len(problem.w.steps)
    first = np.zeros(())
    for i in problem.alive(0):
        start = problem.w.initial_tier(problem.w.components[i].id)
        first = first[..., None] + problem.move(i, (start,), problem.allowed(0, i))[0]
    totals = [first + problem.step_cost(0)]
    for s in range(steps - 1):
        check_time()
        totals.append(_advance(problem, totals[-1], s) + problem.step_cost(s + 1))
    best = float(totals[-1].min())
    if not math.isfinite(best):
        return best, []
    states = [tuple(int(x) for x in np.unravel_index(int(np.argmin(totals[-1])), totals[-1].shape))]
    for s in range(steps - 1, 0, -1):
        chosen = dict(zip(problem.alive(s), states[0], strict=True))
        prev = problem.alive(s - 1)
        total = totals[s - 1]
        for axis, i in enumerate(prev):
            target = problem.allowed(s, i)[chosen[i]] if i in chosen else Tier.DISK
            vector = problem.move(i, problem.allowed(s - 1, i), (target,))[:, 0]
            view = [1] * len(prev)
            view[axis] = len(vector)
            total = total + vector.reshape(view)
        states.insert(0, tuple(int(x) for x in np.unravel_index(int(np.argmin(total)), total.shape)))
    return best, states


PREFETCH_DEPTHS = (1, 2, 3)
# Without prefetch (d = 0) one slot streams synchronously, as the host's per-op casting does: the last
# resort when no ring of two blocks fits. Its uploads do not overlap compute (see _schedule_prefetch).
SYNCHRONOUS_DEPTH = 0


def plan(workload: Workload, budget: Budget, hw: Hardware) -> Plan:
    """The transfer-optimal residency plan under ``budget`` (see the module docstring).

    The prefetch depth is the budget's, or, when it is None, the one of 1-3 that moves the fewest
    bytes (a deeper ring hides more latency but leaves less room for resident blocks; ties go deeper);
    only when none of those fits, synchronous streaming (d = 0). The minimum VRAM reported is the
    least of any depth the planner may use.
    """
    depths = (budget.prefetch_depth,) if budget.prefetch_depth is not None else PREFETCH_DEPTHS
    if budget.prefetch_depth is None and minimum_vram(workload, min(depths))[0] > budget.vram:
        depths = (SYNCHRONOUS_DEPTH,)
    allowed = depths if budget.prefetch_depth is not None else (SYNCHRONOUS_DEPTH,)
    min_vram, bottleneck = minimum_vram(workload, min(allowed))
    if not workload.steps:
        return Plan(True, [], 0.0, 0.0, min_vram, bottleneck, budget, hw, min(depths))
    best: tuple[float, int, _Problem, list[tuple[int, ...]]] | None = None
    held: list[int] = []
    if min_vram <= budget.vram:
        for depth in depths:
            for policy in POLICIES:
                problem = _Problem(workload, budget, hw, depth)
                fixed = bound(problem, policy)
                cost, states = _optimise(problem)
                if states and (
                    best is None or cost < best[0] - 1e-12 or (cost <= best[0] + 1e-12 and not fixed)
                ):
                    best, held = (cost, depth, problem, states), fixed
                if not fixed:  # exact: no other policy to try
                    break
    if best is None:
        return Plan(False, [], INF, INF, min_vram, bottleneck, budget, hw, min(depths))
    cost, depth, problem, states = best
    if held:
        cost, problem, states = improve(problem, cost, states, held, _optimise)
    steps = _describe(problem, states)
    _schedule_prefetch(problem, steps)
    # after the prefetches, so the peaks a reason quotes are the ones the plan reports
    for sp, reasons in zip(steps, placement_reasons(workload, budget, hw, depth, steps), strict=True):
        sp.placements = {cid: replace(p, reason=reasons[cid]) for cid, p in sp.placements.items()}
    notes = (bounded_note(problem, held),) if held else ()
    wall = sum(s.wall_s for s in steps)
    return Plan(True, steps, cost, wall, min_vram, bottleneck, budget, hw, depth, notes)


def tiers_of(problem: _Problem, s: int, state: tuple[int, ...]) -> dict[int, Tier]:
    return {i: problem.allowed(s, i)[k] for i, k in zip(problem.alive(s), state, strict=True)}


def _describe(problem: _Problem, states: list[tuple[int, ...]]) -> list[StepPlan]:
    """Turn the optimal joint states into per-step placements, memory figures and actions.

    Streamed components take resident blocks from the VRAM left, and streams from pinned RAM take the
    pinned room left, in component order: the order ``_Problem.step_cost`` priced them in.
    """
    w, hw, depth, budget = problem.w, problem.hw, problem.depth, problem.budget
    plans: list[StepPlan] = []
    previous = {i: w.initial_tier(c.id) for i, c in enumerate(w.components) if c.id in w.initial}
    for s, step in enumerate(w.steps):
        check_time()
        tiers = tiers_of(problem, s, states[s])
        vram = step.activation_min + sum(
            w.components[i].bytes if t.gpu == "G" else w.components[i].rest for i, t in tiers.items() if t.gpu
        )
        vram += max((w.components[i].ring(depth) for i, t in tiers.items() if t.gpu == "S"), default=0)
        pinned = sum(w.components[i].bytes for i, t in tiers.items() if t.host == "P" and t.gpu != "S")
        placements: dict[str, Placement] = {}
        streams: list[Action] = []
        for i, t in tiers.items():
            c = w.components[i]
            if t.gpu != "S":
                host = {"P": (c.bytes, 0), "R": (0, c.bytes)}.get(t.host, (0, 0))
                placements[c.id] = Placement(t, pinned_bytes=host[0], pageable_bytes=host[1])
                continue
            room = budget.vram - vram
            asked = dict(step.streamed).get(c.id)
            if asked is not None:  # the Stream Model node's own budget: weights, ring and activations
                room = min(room, asked - (step.activation_min or 0) - c.rest - c.ring(depth))
            k, resident = c.resident_fit(room)
            vram += resident
            streamed = sum(c.blocks) - resident
            fast = min(streamed, max(0, budget.pinned - pinned)) if t.host == "P" else 0
            pinned += fast
            slow = streamed - fast if t.host in "PR" else 0
            kept = c.bytes - fast if t.host in "PR" else 0
            placements[c.id] = Placement(t, k, len(c.blocks), streamed, fast, kept)
            seconds = float(stream_seconds(hw, t.host, c.rest + resident, streamed, fast, step.evaluations))
            streams.append(
                Action("stream", c.id, streamed, seconds, _HOST[t.host], "", fast, slow, k, len(c.blocks),
                       step.evaluations, depth)
            )  # fmt: skip
        if vram + step.activation - step.activation_min <= budget.vram:  # room: cond and uncond batched
            vram += step.activation - step.activation_min
        actions: list[Action] = []
        for i in sorted(set(previous) | set(tiers)):
            c = w.components[i]
            a, b = previous.get(i, Tier.DISK), tiers.get(i, Tier.DISK)
            actions += _actions(hw, c, a, b, placements.get(c.id))
        actions += streams
        ram = sum(p.pinned_bytes + p.pageable_bytes for p in placements.values())
        transfer = sum(a.seconds for a in actions)
        plans.append(StepPlan(step, placements, vram, ram, pinned, transfer, actions))
        previous = tiers
    return plans


_HOST = {"P": "pinned RAM", "R": "RAM", "D": "disk", "G": "GPU"}


def _actions(hw: Hardware, c: Component, a: Tier, b: Tier, placement: Placement | None) -> list[Action]:
    """The moves of ``c`` from tier ``a`` to ``b`` (``placement``: where it is after, None on disk)."""
    if a == b:
        return []
    out = []
    copy_s, upload_s = transition_parts(hw, c.bytes, a, b)
    if b.host in "PR" and a.host != b.host and placement is not None:
        source = _HOST[copy_source(hw, a)[0]]
        out.append(
            Action("copy", c.id, c.bytes, copy_s, source, _HOST[b.host], placement.pinned_bytes,
                   placement.pageable_bytes)
        )  # fmt: skip
    if b.gpu == "G" and a.gpu != "G":
        out.append(Action("load", c.id, c.bytes, upload_s, _HOST[upload_source(hw, a, b)], "GPU"))
    if a.gpu and not b.gpu:
        out.append(Action("evict", c.id, source="GPU", target=_HOST[b.host] if b.host in "PR" else ""))
    elif a.host in "PR" and b.host != a.host and not b.gpu:
        out.append(Action("release", c.id, source=_HOST[a.host]))
    return out


def _schedule_prefetch(problem: _Problem, steps: list[StepPlan]) -> None:
    """Move full-GPU loads one node earlier where VRAM allows, so they overlap that node's compute.

    Transfer seconds do not change (the same bytes move over the same link); wall time and the
    earlier node's VRAM peak do.
    """
    w = problem.w
    blocking = [0.0] * len(steps)
    overlapped = [0.0] * len(steps)
    for s, sp in enumerate(steps):
        stream = sum(a.seconds for a in sp.actions if a.kind == "stream")
        if problem.depth == SYNCHRONOUS_DEPTH:  # no prefetch: every upload waits, compute waits on it
            blocking[s] += sp.transfer_s
        else:
            overlapped[s] += stream
            blocking[s] += sp.transfer_s - stream
        if s == 0:
            continue
        before = steps[s - 1]
        for load in sp.actions:
            if load.kind != "load":
                continue
            prior = before.placements.get(load.component)
            if prior and prior.tier.gpu == "G":
                continue
            c = w.component(load.component)
            if before.vram_peak + c.bytes > problem.budget.vram:
                continue
            # its RAM copy, if the move makes one, is read ahead with it
            seconds = sum(a.seconds for a in sp.actions if a.component == c.id and a.kind in ("copy", "load"))
            before.vram_peak += c.bytes
            before.prefetched.append(Prefetch(c.id, c.bytes, seconds, sp.step.node_id))
            blocking[s] -= seconds
            overlapped[s - 1] += seconds
    for s, sp in enumerate(steps):
        sp.wall_s = max(blocking[s], 0.0) + max(sp.step.compute_s, overlapped[s])
