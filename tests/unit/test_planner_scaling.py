"""Issue #18 R77: planning scales with the prompt (equal steps share their cost array), and a time limit
stops it so the preflight of a queued prompt answers in bounded time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.memory.deadline import PlanTimeout, check_time, time_limit
from comfyui_headroom.memory.planning import planner
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.extract import workload_from_graph
from comfyui_headroom.memory.planning.preflight import plan_prompt
from comfyui_headroom.memory.units import GiB
from comfyui_headroom.memory.workflow.graph import parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from planner_scaling import big_prompt  # noqa: E402

BUDGET = Budget.from_card(8 * GiB, 32 * GiB)


def test_equal_steps_share_one_cost_array(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 sampler chains on one checkpoint: a handful of distinct steps, not one cost per step."""
    graph = parse_workflow(big_prompt(300, 0))
    workload = workload_from_graph(graph, predict_order(graph))
    assert len(workload.steps) >= 900
    computed: list[int] = []
    original = planner._Problem._step_cost

    def counted(self: Any, s: int) -> Any:
        computed.append(s)
        return original(self, s)

    monkeypatch.setattr(planner._Problem, "_step_cost", counted)
    result = planner.plan(workload, BUDGET, Hardware.pcie(4))
    assert result.feasible and len(result.steps) == len(workload.steps)
    assert len(computed) <= 3 * 12  # per prefetch depth: a few kinds of step, however many chains


def test_a_time_limit_stops_planning_and_the_preflight_says_so() -> None:
    prompt = big_prompt(100, 100)
    planned, verdict = plan_prompt(prompt, BUDGET, time_limit_s=0)
    assert planned is None and verdict.level == "skipped" and verdict.fits is None
    assert "took longer than its limit of 0 s" in verdict.message
    assert f"({len(prompt)} nodes)" in verdict.message
    planned, verdict = plan_prompt(prompt, BUDGET, time_limit_s=600)
    assert planned is not None and verdict.level != "skipped"


def test_the_time_limit_holds_only_inside_its_block() -> None:
    check_time()  # no limit: the command line plans as long as it takes
    with time_limit(0):
        with pytest.raises(PlanTimeout):
            check_time()
        with time_limit(None):
            check_time()  # an inner block without a limit
        with pytest.raises(PlanTimeout):
            check_time()
    check_time()
