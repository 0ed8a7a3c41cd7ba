"""Issue #26: never refused. Past EXACT_STATES joint placements at a node, the planner holds the components
that matter least at one tier per use and searches the rest exactly: the work per node is bounded whatever
the number of models (counted, not timed), and the plan stays a valid plan no better than the optimum."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings

from comfyui_headroom.memory.planning import bounded, planner
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware, Tier, pinned_tiers
from comfyui_headroom.memory.planning.pipeline import plan_workflow
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.units import GB, GiB
from headroom_testing.bruteforce import brute_force, search_space
from headroom_testing.strategies import workloads

HW = Hardware.pcie(4)


def _needed_again(models: int) -> Workload:
    """``models`` distinct models, each used by its own node, all used again by a last node (a workflow
    that keeps every model for a second pass): all live between."""
    comps = tuple(
        Component(f"m{i}", f"model{i}", (1 + i % 4) * GB, blocks=((1 + i % 4) * GB // 8,) * 8)
        for i in range(models)
    )
    steps = tuple(Step(str(i), "KSampler", (c.id,), evaluations=4) for i, c in enumerate(comps))
    return Workload(comps, (*steps, Step("last", "KSampler", tuple(c.id for c in comps[:2]), evaluations=4),
                            Step("again", "VAEDecode", tuple(c.id for c in comps))))  # fmt: skip


def _count_work(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every cost array the optimiser builds (what its time and memory are made of)."""
    sizes: list[int] = []
    original = planner._Problem._step_cost

    def counted(self: Any, s: int) -> np.ndarray:
        cost = original(self, s)
        sizes.append(int(cost.size))
        return cost

    monkeypatch.setattr(planner._Problem, "_step_cost", counted)
    return sizes


@pytest.mark.parametrize("models", [7, 8, 9, 12, 16])
def test_any_number_of_models_needed_again_plans_in_bounded_work(
    models: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = _needed_again(models)
    sizes = _count_work(monkeypatch)
    p = planner.plan(w, Budget.from_card(8 * GiB, 64 * GiB), HW)
    assert p.feasible
    # every node's array within the bound; at most one array per distinct step, depth and policy
    assert max(sizes) <= bounded.EXACT_STATES
    held = int(p.notes[0].split(" of ")[0])
    searches = len(planner.PREFETCH_DEPTHS) * len(bounded.POLICIES) + held  # + the improving sweep
    assert sum(sizes) <= len(w.steps) * searches * bounded.EXACT_STATES
    unbounded = 6**models  # the joint placements at the last node without holding any component
    assert unbounded > bounded.EXACT_STATES and len(p.notes) == 1
    for s in p.steps:
        assert s.vram_peak <= p.budget.vram and s.ram <= p.budget.ram and s.pinned <= p.budget.pinned


def test_the_work_does_not_grow_with_the_number_of_models(monkeypatch: pytest.MonkeyPatch) -> None:
    per_step = []
    for models in (8, 16):
        sizes = _count_work(monkeypatch)
        w = _needed_again(models)
        assert planner.plan(w, Budget.from_card(8 * GiB, 64 * GiB), HW).feasible
        per_step.append(max(sizes))
        monkeypatch.undo()
    assert per_step[1] <= bounded.EXACT_STATES and per_step[0] <= bounded.EXACT_STATES


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=workloads())
def test_a_bounded_plan_is_valid_and_never_better_than_brute_force(
    case: tuple[Workload, Budget], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the bound lowered so most cases are cut down, the plan is still a valid plan (its budget
    holds at every node, every residency choice honoured) whose cost is at least the exact optimum."""
    w, budget = case
    assume(search_space(w) <= 60_000)
    optimum = brute_force(w, budget, HW)
    monkeypatch.setattr(bounded, "EXACT_STATES", 3)
    p = planner.plan(w, budget, HW)
    event("held" if p.notes else "exact")
    if not math.isfinite(optimum):
        assert not p.feasible
        return
    if not p.feasible:
        event("bounded search found no plan")
        return
    event("optimal" if p.transfer_s <= optimum * (1 + 1e-9) + 1e-12 else "above the optimum")
    assert p.transfer_s >= optimum * (1 - 1e-9) - 1e-12
    assert sum(s.transfer_s for s in p.steps) == pytest.approx(p.transfer_s, rel=1e-9, abs=1e-12)
    for s in p.steps:
        assert s.ram <= budget.ram and s.pinned <= budget.pinned
        for cid, pl in s.placements.items():
            assert pl.tier in pinned_tiers(w.component(cid).pin, tuple(Tier))


def test_every_case_the_brute_force_test_enumerates_is_within_the_exact_bound() -> None:
    """test_planner's brute-force comparison takes cases of up to 60,000 tier sequences: a node of such a
    case has at most that many joint placements, so the planner is exact on every one of them."""
    assert bounded.EXACT_STATES >= 60_000


def test_the_template_with_nine_subgraph_copies_plans_at_every_budget() -> None:
    """templates-1_click_multiple_character_angles-v1.0 keeps 9 VAEs (one per copy of its subgraph) live
    across the text encodes: 6**9 placements. It was refused at every budget; it plans, with a note."""
    package = pytest.importorskip("comfyui_workflow_templates_json")

    path = (
        Path(package.__file__).parent / "templates" / "templates-1_click_multiple_character_angles-v1.0.json"
    )
    planned = plan_workflow(path, None, HW)
    for card in (8, 24):
        p = planner.plan(planned.workload, Budget.from_card(card * GiB, 32 * GiB), HW)
        assert p.feasible and len(p.notes) == 1 and "qwen_image_vae.safetensors [vae]" in p.notes[0]


def test_a_held_copy_and_a_free_copy_of_one_model_do_not_share_a_cost_array(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Equal copies of a model share step costs (a big prompt's repeats), but a held copy has one tier
    and a free copy all of theirs: the held one's array must not serve the free one (it would let the
    free copy sit whole on a GPU it does not fit)."""
    monkeypatch.setattr(bounded, "EXACT_STATES", 6)
    half = GB // 2
    a0, a1 = (Component(f"a{i}", f"copy{i}", 4 * GB, blocks=(half,) * 8) for i in range(2))
    big = Component("b", "big", 10 * GB, blocks=(GB,) * 10)
    steps = (
        Step("0", "Encode", ("a0", "b")),  # 6 x 6 placements: a0 (fewest byte-steps) is held
        Step("1", "Encode", ("a0",), evaluations=4),
        Step("2", "Other"),
        Step("3", "Decode", ("a1",), evaluations=4),  # a1 alone: free, 6 placements
        Step("4", "Decode", ("a1",), evaluations=4),
    )
    budget = Budget(vram=3 * GB, ram=64 * GB, pinned=32 * GB)
    w = Workload((a0, a1, big), steps)
    problem = planner._Problem(w, budget, HW, 1)
    assert bounded.bound(problem, "frugal") == [0]
    assert problem.step_cost(1).shape == (1,) and problem.step_cost(3).shape == (6,)
    p = planner.plan(w, budget, HW)
    assert p.feasible and p.notes and "copy0" in p.notes[0] and "copy1" not in p.notes[0]
    assert all(s.vram_peak <= budget.vram for s in p.steps)
    assert p.steps[3].placements["a1"].tier.gpu == "S"
