"""Why each component is where the plan puts it: one line per component per step, from the plan's own figures.

Every figure in a reason is one the optimiser weighed: the budget, the step's VRAM (its peak as the table
shows it, or the least the other components need there), RAM and pinned bytes, the next use, and the
transfer seconds of the cost model. A cost comparison changes this component's host part only (the GPU
part, and so every other component's room, stays), so "X s vs Y s" is the price of that one alternative:
around a used step, or over the whole stretch an idle component spends in one tier. Where the plan's
figures do not show why (another component's room, a tie), the reason says where and stops there.

This module sits below ``planner`` (which calls ``placement_reasons``): it reads plans through the
protocols below and imports nothing of it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Protocol

from ..deadline import check_time
from ..names import OFFLOAD_RESIDENCY_INPUTS
from ..units import format_bytes
from .costmodel import Budget, Hardware, Tier, pinned_tiers, stream_seconds, transition_seconds
from .workload import Component, Step, Workload


class _Placement(Protocol):
    @property
    def tier(self) -> Tier: ...
    @property
    def resident_blocks(self) -> int: ...
    @property
    def total_blocks(self) -> int: ...
    @property
    def streamed_bytes(self) -> int: ...
    @property
    def pinned_bytes(self) -> int: ...
    @property
    def pageable_bytes(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def capped(self) -> bool: ...
    @property
    def whole(self) -> bool: ...


class _Prefetch(Protocol):
    @property
    def component(self) -> str: ...
    @property
    def bytes(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def node(self) -> str: ...


class _StepPlan(Protocol):
    @property
    def step(self) -> Step: ...
    @property
    def placements(self) -> Mapping[str, _Placement]: ...
    @property
    def vram_peak(self) -> int: ...
    @property
    def ram(self) -> int: ...
    @property
    def pinned(self) -> int: ...
    @property
    def prefetched(self) -> Sequence[_Prefetch]: ...


WHERE = {
    Tier.GPU_ONLY: "on GPU",
    Tier.GPU_PINNED: "on GPU, copy in pinned RAM",
    Tier.GPU_RAM: "on GPU, copy in RAM",
    Tier.STREAM_PINNED: "streamed from pinned RAM",
    Tier.STREAM_RAM: "streamed from RAM",
    Tier.STREAM_DISK: "streamed from disk",
    Tier.PINNED: "in pinned RAM",
    Tier.RAM: "in RAM",
    Tier.DISK: "on disk",
}
# the alternative a cost comparison names, by its host part (used) or its tier (idle)
_WITH = {"P": "with a pinned RAM copy", "R": "with a pageable RAM copy", "D": "without a RAM copy"}
_PARKED = {Tier.PINNED: "parked in pinned RAM", Tier.RAM: "parked in RAM", Tier.DISK: "dropped to disk"}
_CHOICE = {
    "gpu": "on GPU while live",
    "pinned_ram": "pinned",
    "ram": "kept in pageable RAM",
    "disk": "no RAM copy (read from its file)",
}


def _versus(actual: float, best: tuple[float, str]) -> str:
    """The plan's transfer seconds against the cheapest alternative's, as the cost model prices both."""
    if f"{actual:.2f}" == f"{best[0]:.2f}":  # a tie: the plan's choice saves nothing, and says so
        return f"; the same {actual:.2f} s of transfer {best[1]}"
    return f"; {actual:.2f} s of transfer vs {best[0]:.2f} s {best[1]}"


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


class _Explainer:
    def __init__(
        self, w: Workload, budget: Budget, hw: Hardware, depth: int, steps: Sequence[_StepPlan]
    ) -> None:
        self.w, self.budget, self.hw, self.depth, self.steps = w, budget, hw, depth, steps
        self.components = {c.id: c for c in w.components}
        self._spans: dict[tuple[str, int], tuple[str, str, tuple[int, int] | None]] = {}
        self.uses: dict[str, list[int]] = {c.id: [] for c in w.components}
        for s, sp in enumerate(steps):
            for cid in sp.step.uses:
                self.uses[cid].append(s)

    # -- the plan's figures
    def tier(self, cid: str, s: int) -> Tier:
        if s < 0:
            return self.w.initial_tier(cid)
        if s >= len(self.steps):
            return Tier.DISK
        p = self.steps[s].placements.get(cid)
        return p.tier if p is not None else Tier.DISK

    def next_use(self, cid: str, s: int) -> int | None:
        uses = self.uses[cid]
        k = bisect.bisect_right(uses, s)
        return uses[k] if k < len(uses) else None

    def others_vram(self, s: int, cid: str) -> int:
        """The least VRAM step ``s`` needs without ``cid``: activations at the smallest batch, the other
        components' full weights, and the non-block bytes and shared ring of those that stream."""
        sp = self.steps[s]
        need, ring = sp.step.activation_min, 0
        for other, p in sp.placements.items():
            c = self.components[other]
            if other == cid or not p.tier.gpu:
                continue
            if p.tier.gpu == "G":
                need += c.bytes
            else:
                need += c.rest
                ring = max(ring, c.ring(self.depth))
        return need + ring

    def blocked(self, s: int, cid: str, host: str, nbytes: int) -> str:
        """Why ``nbytes`` of ``cid`` cannot sit in RAM of kind ``host`` at step ``s`` ("" when they can)."""
        sp, p = self.steps[s], self.steps[s].placements.get(cid)
        own_ram = p.pinned_bytes + p.pageable_bytes if p is not None else 0
        left = self.budget.ram - (sp.ram - own_ram)
        if host in "PR" and nbytes > left:
            return (
                f"RAM budget {format_bytes(self.budget.ram, 'GiB')} leaves {format_bytes(left, 'GiB')} "
                f"after the other components"
            )
        own_pinned = p.pinned_bytes if p is not None else 0
        pinned_left = self.budget.pinned - (sp.pinned - own_pinned)
        if host == "P" and nbytes > pinned_left:
            return (
                f"pinned cap {format_bytes(self.budget.pinned, 'GiB')} leaves "
                f"{format_bytes(pinned_left, 'GiB')}"
            )
        return ""

    def move(self, c: Component, a: Tier, b: Tier) -> float:
        return transition_seconds(self.hw, c.bytes, a, b)

    # -- one placement
    def reason(self, s: int, cid: str) -> str:
        sp, c = self.steps[s], self.components[cid]
        p = sp.placements[cid]
        text = self._used(s, c, p) if cid in sp.step.uses else self._idle(s, c, p)
        if c.pin:
            name = OFFLOAD_RESIDENCY_INPUTS.get(c.kind, "residency")
            text += f"; {_CHOICE[c.pin]} by your choice ({name} = {c.pin})"
        prefetch = self._prefetch(s, cid)
        return text + (f"; {prefetch}" if prefetch else "")

    def _again(self, s: int, cid: str) -> str:
        n = self.next_use(cid, s)
        if n is None:
            return ""
        word = "needed again" if self.uses[cid] and self.uses[cid][0] <= s else "first needed"
        return f"{word} in {_nodes(n - s)} (node {self.steps[n].step.node_id})"

    def _used(self, s: int, c: Component, p: _Placement) -> str:
        sp, t = self.steps[s], p.tier
        if t.gpu == "G":
            text = (
                f"{WHERE[t]}: used here, fits ({format_bytes(sp.vram_peak, 'GiB')} of "
                f"{format_bytes(self.budget.vram, 'GiB')})"
            )
        else:
            others = self.others_vram(s, c.id)
            act, weights = sp.step.activation_min, others - sp.step.activation_min
            streamed = dict(sp.step.streamed)
            if c.id in streamed:
                asked = streamed[c.id]
                text = f"{WHERE[t]}: streamed by the Stream Model node" + (
                    f" within its {format_bytes(asked, 'GiB')} vram_budget" if asked is not None else ""
                )
            elif c.bytes + others > self.budget.vram:
                beside = f"{format_bytes(act, 'GiB')} of activations" + (
                    f" and {format_bytes(weights, 'GiB')} of other weights" if weights else ""
                )
                budget = format_bytes(self.budget.vram, "GiB")
                text = (
                    f"{WHERE[t]}: {format_bytes(c.bytes, 'GiB')} does not fit the {budget} budget beside "
                    f"{beside}"
                )
            else:
                text = f"{WHERE[t]}: in the room the other components of this node leave"
            text += f"; {p.resident_blocks} of {p.total_blocks} blocks resident"
            if c.id not in streamed and p.whole:
                # the controller loads it whole (run_log.gpu_part): say that, not "streamed"
                text = (
                    f"on GPU whole: all {p.total_blocks} blocks fit in the room the other components of "
                    "this node leave, so nothing would stream"
                )
            if p.pinned_bytes and p.capped:
                text += (
                    f"; pinned cap {format_bytes(self.budget.pinned, 'GiB')}: "
                    f"{format_bytes(p.pinned_bytes, 'GiB')} of its streamed blocks "
                    f"pinned, {format_bytes(p.streamed_bytes - p.pinned_bytes, 'GiB')} pageable"
                )
        again = self._again(s, c.id)
        if again and t.host in "PR":
            text += f"; RAM copy kept: {again}"
        elif again:
            text += f"; {again}"
        return text + self._host_choice(s, c, p)

    def _used_cost(self, s: int, c: Component, p: _Placement, t: Tier) -> float:
        """Transfer seconds of ``c`` into, during and out of step ``s`` in tier ``t`` (same GPU part)."""
        cost = self.move(c, self.tier(c.id, s - 1), t) + self.move(c, t, self.tier(c.id, s + 1))
        if t.gpu == "S":
            sp = self.steps[s]
            streamed = p.streamed_bytes
            fast = p.pinned_bytes if t == p.tier else 0
            if t.host == "P" and t != p.tier:  # the pinned room it would find, the rest of the step unchanged
                fast = min(streamed, max(0, self.budget.pinned - (sp.pinned - p.pinned_bytes)))
            once = c.bytes - streamed
            cost += float(stream_seconds(self.hw, t.host, once, streamed, fast, sp.step.evaluations))
        return cost

    def _host_choice(self, s: int, c: Component, p: _Placement) -> str:
        """The host part of a used component against the other host parts with the same GPU part."""
        t = p.tier
        same = tuple(a for a in Tier if a.gpu == t.gpu and a != t)
        actual = self._used_cost(s, c, p, t)
        best: tuple[float, str] | None = None
        blocked = ""
        for a in pinned_tiers(c.pin, same):
            need = c.bytes if a.host in "PR" else 0  # a streamed one keeps its whole copy there too
            # a stream from pinned RAM pins what the cap leaves: only the RAM budget can block it
            why = self.blocked(s, c.id, "R" if t.gpu == "S" else a.host, need)
            if why:
                blocked = blocked or why
                continue
            cost = self._used_cost(s, c, p, a)
            if best is None or cost < best[0]:
                best = (cost, _WITH[a.host])
        if t.host == "D" and t.gpu == "G" and not self._again(s, c.id):
            return ""  # loaded once from its file: nothing to weigh about a RAM copy
        text = ""
        if best is not None:
            text += _versus(actual, best)
        if blocked and t.host != "P":
            text += f"; {'no RAM copy' if t.host == 'D' else 'not pinned'}: {blocked}"
        return text

    def _stretch(self, s: int, cid: str) -> tuple[int, int]:
        """The idle steps around ``s`` the component spends in the same tier."""
        t, a, b = self.tier(cid, s), s, s
        while a > 0 and self.tier(cid, a - 1) == t and cid not in self.steps[a - 1].step.uses:
            a -= 1
        while (
            b + 1 < len(self.steps) and self.tier(cid, b + 1) == t and cid not in self.steps[b + 1].step.uses
        ):
            b += 1
        return a, b

    def _idle(self, s: int, c: Component, p: _Placement) -> str:
        t = p.tier
        span = self._spans.get((c.id, s))
        if span is None:  # one analysis per stretch, shared by its steps
            a, b = self._stretch(s, c.id)
            span = self._span(c, t, a, b)
            self._spans.update({(c.id, k): span for k in range(a, b + 1)})
        again, sp = self._again(s, c.id), self.steps[s]
        text = f"{WHERE[t]}: {again}" if again else WHERE[t]
        if t.gpu:
            text += f", fits ({format_bytes(sp.vram_peak, 'GiB')} of {format_bytes(self.budget.vram, 'GiB')})"
        cost, blocked, gpu_full = span
        text += cost + (f"; {'not pinned: ' if t.host == 'R' else ''}{blocked}" if blocked else "")
        if gpu_full is not None:
            k, others = gpu_full
            where = "this node" if k == s else f"node {self.steps[k].step.node_id}"
            text += (
                f"; off the GPU: {format_bytes(c.bytes, 'GiB')} does not fit beside the "
                f"{format_bytes(others, 'GiB')} {where} needs of "
                f"{format_bytes(self.budget.vram, 'GiB')}"
            )
        return text

    def _span(self, c: Component, t: Tier, a: int, b: int) -> tuple[str, str, tuple[int, int] | None]:
        """For an idle stretch ``a``..``b`` in tier ``t``: the cost comparison with parking it elsewhere over
        the whole stretch, why a RAM tier could not hold it, and the first step where the GPU could not."""
        before, after = self.tier(c.id, a - 1), self.tier(c.id, b + 1)
        gpu_full = None
        if not t.gpu:
            for k in range(a, b + 1):
                others = self.others_vram(k, c.id)
                if c.bytes + others > self.budget.vram:
                    gpu_full = (k, others)
                    break
        # parking it elsewhere would give a streamed component more room: that is not priced here
        if t.gpu and any(
            q.tier.gpu == "S" for k in range(a, b + 1) for q in self.steps[k].placements.values()
        ):
            return "", "", gpu_full
        actual = self.move(c, before, t) + self.move(c, t, after)
        best: tuple[float, str] | None = None
        blocked = ""
        for alt in pinned_tiers(c.pin, (Tier.PINNED, Tier.RAM, Tier.DISK)):
            if alt == t:
                continue
            need = c.bytes if alt.host in "PR" else 0
            why = next((w for k in range(a, b + 1) if (w := self.blocked(k, c.id, alt.host, need))), "")
            if why:
                blocked = blocked or why
                continue
            cost = self.move(c, before, alt) + self.move(c, alt, after)
            if best is None or cost < best[0]:
                best = (cost, _PARKED[alt])
        text = _versus(actual, best) if best is not None else ""
        # a RAM tier that could not hold it explains a copy elsewhere, not a model kept on the GPU
        return text, blocked if not t.gpu and t.host != "P" else "", gpu_full

    def _prefetch(self, s: int, cid: str) -> str:
        sp = self.steps[s]
        for f in sp.prefetched:
            if f.component == cid:
                return (
                    f"prefetched during this node for node {f.node} ({format_bytes(f.bytes, 'GiB')}, "
                    f"{f.seconds:.2f} s beside its compute; "
                    f"peak with it {format_bytes(sp.vram_peak, 'GiB')} of "
                    f"{format_bytes(self.budget.vram, 'GiB')})"
                )
        return ""

    def absent(self, s: int, cid: str) -> str:
        """A component the plan leaves on disk at step ``s`` (before its first use or after its last)."""
        prefetch = self._prefetch(s, cid)
        if prefetch:
            return f"on disk until {prefetch}"
        n = self.next_use(cid, s)
        if n is not None:
            return f"on disk: {self._again(s, cid)}; nothing is loaded before its first use"
        uses = [u for u in self.uses[cid] if u < s]
        if uses:
            return f"dropped: not used again (last used at node {self.steps[uses[-1]].step.node_id})"
        return "on disk: no node of this plan uses it"


def placement_reasons(
    w: Workload, budget: Budget, hw: Hardware, depth: int, steps: Sequence[_StepPlan]
) -> list[dict[str, str]]:
    """Per step, component id -> the reason for its placement (live components only)."""
    ex = _Explainer(w, budget, hw, depth, steps)
    out = []
    for s, sp in enumerate(steps):
        check_time()
        out.append({cid: ex.reason(s, cid) for cid in sp.placements})
    return out


def step_reasons(w: Workload, plan: _PlanLike) -> list[dict[str, str]]:
    """Per step of ``plan``, every component id -> its reason: the placement's for a live component, else
    where the plan leaves it (on disk before its first use or being prefetched, dropped after its last)."""
    ex = _Explainer(w, plan.budget, plan.hardware, plan.prefetch_depth, plan.steps)
    out = []
    for s, sp in enumerate(plan.steps):
        row = {}
        for c in w.components:
            p = sp.placements.get(c.id)
            row[c.id] = (p.reason or ex.reason(s, c.id)) if p is not None else ex.absent(s, c.id)
        out.append(row)
    return out


class _PlanLike(Protocol):
    @property
    def steps(self) -> Sequence[_StepPlan]: ...
    @property
    def budget(self) -> Budget: ...
    @property
    def hardware(self) -> Hardware: ...
    @property
    def prefetch_depth(self) -> int: ...
