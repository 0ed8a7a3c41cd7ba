"""Random workloads and budgets for property tests of the planner and its reports."""

from __future__ import annotations

from hypothesis import strategies as st

from comfyui_headroom.memory.planning.costmodel import IDLE_TIERS, Budget
from comfyui_headroom.memory.planning.workload import Component, Step, Workload

sizes = st.integers(min_value=1, max_value=12).map(lambda g: g * 2**29)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Workload, Budget]:
    n = draw(st.integers(1, 3))
    comps = []
    for i in range(n):
        nbytes = draw(sizes)
        nblocks = draw(st.sampled_from([0, 2, 3, 5]))
        block = nbytes // (nblocks + 1) if nblocks else 0
        pin = draw(st.sampled_from(["", "", "", "gpu", "pinned_ram", "ram", "disk"]))  # mostly auto
        comps.append(Component(f"c{i}", f"c{i}", nbytes, (block,) * nblocks if block else (), pin=pin))
    steps = []
    for s in range(draw(st.integers(1, 4))):
        uses = draw(st.lists(st.sampled_from([c.id for c in comps]), max_size=2, unique=True))
        activation = draw(st.integers(0, 3)) * 2**29
        steps.append(
            Step(
                str(s),
                "N",
                tuple(uses),
                evaluations=draw(st.integers(1, 30)),
                activation=activation,
                activation_min=draw(st.integers(0, activation // 2**29)) * 2**29,  # cfg: cond alone
            )
        )
    ram = draw(st.integers(0, 24)) * 2**29
    # VRAM around the biggest component's size, where the interesting choices (stream or not) live
    vram = int(max(c.bytes for c in comps) * draw(st.sampled_from([0.3, 0.5, 0.7, 0.9, 1.2, 2.0, 4.0])))
    budget = Budget(vram=vram, ram=ram, pinned=draw(st.integers(0, ram // 2**29)) * 2**29)
    # a re-plan mid-prompt starts from where the components are, not from disk
    initial = {c.id: draw(st.sampled_from(IDLE_TIERS)) for c in comps if draw(st.booleans())}
    return Workload(tuple(comps), tuple(steps), initial=initial), budget
