"""The planner's bounded search: what it holds when a node has more joint placements than it can search.

``planner._Problem`` is the problem these functions take (passed in as a ``Problem``, so this module
needs no import of the planner); ``improve`` takes the planner's optimiser. See docs/architecture.md,
"A bounded search".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from ..deadline import check_time
from .costmodel import Budget, Hardware, Tier
from .workload import Workload

States = list[tuple[int, ...]]  # per step, the index of each live component's tier in its allowed tiers


class Problem(Protocol):
    """What the bounded search reads and sets of the planner's problem (``planner._Problem``)."""

    w: Workload
    budget: Budget
    hw: Hardware
    depth: int
    live: list[tuple[int, int] | None]  # per component, its first and last step, or None: never live
    fixed: dict[int, tuple[tuple[Tier, ...], tuple[Tier, ...]]]  # held: (idle order, used order)
    sequence: dict[int, dict[int, Tier]]  # held at a found plan's tier per step

    def __init__(self, workload: Workload, budget: Budget, hw: Hardware, depth: int) -> None: ...
    def states(self, s: int) -> int: ...
    def alive(self, s: int) -> list[int]: ...
    def allowed(self, s: int, i: int) -> tuple[Tier, ...]: ...


P = TypeVar("P", bound=Problem)
Optimise = Callable[[P], "tuple[float, States]"]

# The optimiser's state at a step is the joint tier of every live component: its arrays have the product
# of their tier counts as size, 6 per component that computes. Up to EXACT_STATES at every step the search
# is exact (the brute-force test compares every case it can enumerate, all within this). Past it, the
# components that matter least - the fewest byte-steps (bytes x steps live): the small ones and those
# live at one node - are held at one tier per use, one at a time, until every step is within it, and the
# rest is searched exactly; then one sweep frees the held ones in groups, the others held where that plan
# put them (``improve``). The work is at most EXACT_STATES per step and search, whatever the number of
# models, with one search per policy and prefetch depth and at most one more per held component.
EXACT_STATES = 1 << 16
_G, _S = (
    (Tier.GPU_RAM, Tier.GPU_PINNED, Tier.GPU_ONLY),
    (Tier.STREAM_RAM, Tier.STREAM_PINNED, Tier.STREAM_DISK),
)
# Preference orders of a held component, (idle, used), each the first its allowed tiers contain: "keep"
# holds a RAM copy and the whole model on the GPU where it computes; "frugal" streams where it computes
# and keeps nothing in RAM between uses (a tight node); "no_ram" never copies it to RAM (a tight RAM
# budget). All three are searched; the cheapest plan wins.
POLICIES = {
    "keep": ((Tier.RAM, Tier.PINNED, Tier.DISK, *_G), (*_G, *_S)),
    "frugal": ((Tier.DISK, Tier.RAM, Tier.PINNED, *_G), (*_S, Tier.GPU_ONLY, Tier.GPU_RAM, Tier.GPU_PINNED)),
    "no_ram": ((Tier.DISK, *_G, Tier.RAM, Tier.PINNED), (Tier.GPU_ONLY, Tier.STREAM_DISK, *_G, *_S)),
}
_ONCE = (Tier.GPU_ONLY, Tier.STREAM_RAM, Tier.STREAM_DISK, *_G, *_S)  # live at one node: no RAM copy


def bound(problem: Problem, policy: str) -> list[int]:
    """Hold components at one tier per use (``POLICIES[policy]``), fewest byte-steps first, until no step
    has more than EXACT_STATES joint placements; the components held, in that order."""
    w = problem.w
    states = [problem.states(s) for s in range(len(w.steps))]
    if max(states, default=1) <= EXACT_STATES:
        return []
    spans = {i: span for i, span in enumerate(problem.live) if span is not None}
    order = sorted(spans, key=lambda i: (w.components[i].bytes * (spans[i][1] - spans[i][0] + 1), i))
    idle, used = POLICIES[policy]
    held: list[int] = []
    while True:
        worst = max(range(len(states)), key=states.__getitem__)
        if states[worst] <= EXACT_STATES:
            break
        alive = set(problem.alive(worst))  # hold only what counts at the node that is too big
        i = next(i for i in order if i in alive and i not in problem.fixed)
        first, last = spans[i]
        problem.fixed[i] = (idle, _ONCE if first == last and policy == "keep" else used)
        held.append(i)
        for s in range(first, last + 1):
            states[s] = problem.states(s)
    return held


def bounded_note(problem: Problem, held: list[int]) -> str:
    w = problem.w
    names = ", ".join(dict.fromkeys(w.components[i].label for i in held))
    return (
        f"{len(held)} of {len(w.components)} model components held at one tier per use ({names}): "
        f"with them free some node would have more than {EXACT_STATES:,} joint placements to search; "
        "the plan is the best over the others, not proven optimal"
    )


def improve(
    problem: P, cost: float, states: States, held: list[int], optimise: Optimise[P]
) -> tuple[float, P, States]:
    """One sweep of block coordinate descent over the held components: every other component is held at
    the tier the plan gives it at each step, and the held ones are freed in groups as large as keep every
    step within EXACT_STATES, each group searched exactly. The plan found is in every group's search, so
    the cost never rises; the work is at most one more search per held component."""
    w, steps = problem.w, range(len(problem.w.steps))
    free = type(problem)(w, problem.budget, problem.hw, problem.depth)  # no component held: the full counts
    groups: list[list[int]] = []
    load: list[int] = []
    for i in held:
        span = problem.live[i]
        if span is None:  # never: only live components are held
            continue
        first, last = span
        counts = {s: len(free.allowed(s, i)) for s in range(first, last + 1)}
        if not groups or any(load[s] * n > EXACT_STATES for s, n in counts.items()):
            groups.append([])
            load = [1] * len(w.steps)
        groups[-1].append(i)
        for s, n in counts.items():
            load[s] *= n
    for group in groups:
        check_time()
        tiers = [
            {i: problem.allowed(s, i)[k] for i, k in zip(problem.alive(s), states[s], strict=True)}
            for s in steps
        ]
        trial = type(problem)(w, problem.budget, problem.hw, problem.depth)
        trial.sequence = {
            i: {s: tiers[s][i] for s in range(span[0], span[1] + 1)}
            for i, span in enumerate(problem.live)
            if span is not None and i not in group
        }
        found, found_states = optimise(trial)
        if found_states and found < cost - 1e-12:
            cost, problem, states = found, trial, found_states
    return cost, problem, states
