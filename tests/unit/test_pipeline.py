"""The one planning pipeline (parse → order → extract → plan) and the rule that its callers use it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from comfyui_headroom.memory.deadline import PlanTimeout, time_limit
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.extract import workload_from_graph
from comfyui_headroom.memory.planning.pipeline import Planned, plan_workflow
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.units import GiB
from comfyui_headroom.memory.workflow.graph import Graph, WorkflowError, load_workflow
from comfyui_headroom.memory.workflow.order import predict_order

ROOT = Path(__file__).resolve().parents[2]
FLUX = ROOT / "example_workflows" / "api" / "Flux Dev text to image.json"
FLUX_UI = ROOT / "example_workflows" / "Flux Dev text to image.json"
BUDGET = Budget.from_card(8 * GiB, 32 * GiB)
HW = Hardware.pcie(4)


def by_hand(graph: Graph, budget: Budget, hw: Hardware, cached: frozenset[str] = frozenset()) -> Planned:
    order = predict_order(graph, cached=cached)
    workload = workload_from_graph(graph, order, tflops=hw.tflops)
    return Planned(graph, order, workload, plan(workload, budget, hw), hw, cached)


@pytest.mark.parametrize("path", [FLUX, FLUX_UI], ids=["api", "ui"])
def test_the_pipeline_is_the_four_stages_in_a_row(path: Path) -> None:
    expected = by_hand(load_workflow(path), BUDGET, HW)
    for workflow in (path, json.loads(path.read_text(encoding="utf-8"))):
        planned = plan_workflow(workflow, BUDGET, HW)
        assert planned.order == expected.order and len(planned.order) == 10
        assert planned.workload == expected.workload
        assert planned.plan == expected.plan and planned.plan is not None and planned.plan.feasible
        assert planned.cached == frozenset() and planned.hardware == HW
        assert list(planned.seconds) == ["parse", "order", "extract", "plan"] and all(
            t >= 0 for t in planned.seconds.values()
        )


def test_default_hardware_is_pcie4_and_another_one_changes_the_plan() -> None:
    assert plan_workflow(FLUX, BUDGET).hardware == Hardware.pcie(4)
    slow = plan_workflow(FLUX, BUDGET, Hardware.pcie(3))
    assert slow.plan is not None and slow.plan.hardware == Hardware.pcie(3)
    assert slow.plan.transfer_s > plan_workflow(FLUX, BUDGET).plan.transfer_s


def test_without_a_budget_it_stops_after_extraction() -> None:
    planned = plan_workflow(FLUX, None, HW)
    assert planned.plan is None and "plan" not in planned.seconds
    assert planned.workload == by_hand(load_workflow(FLUX), BUDGET, HW).workload


def test_cached_ids_leave_the_order_given_as_a_set_or_predicted_from_the_graph() -> None:
    cached = frozenset({"11", "6", "26", "33"})  # the text encoding served from the host's cache
    expected = by_hand(load_workflow(FLUX), BUDGET, HW, cached)
    assert plan_workflow(FLUX, BUDGET, HW, cached=cached) == expected
    seen: list[Graph] = []

    def predict(graph: Graph) -> frozenset[str]:
        seen.append(graph)
        return cached

    planned = plan_workflow(FLUX, BUDGET, HW, cached=predict)
    assert planned == expected and seen == [planned.graph]
    assert not cached & set(planned.order) and "CLIPTextEncode" not in {
        s.label for s in planned.workload.steps
    }


def test_outputs_and_the_ordering_stage_are_the_callers() -> None:
    calls: list[tuple[frozenset[str], list[str] | None]] = []

    def order_by(graph: Graph, cached: frozenset[str], outputs: list[str] | None) -> list[str]:
        calls.append((cached, outputs))
        return predict_order(graph, cached, outputs)

    planned = plan_workflow(FLUX, BUDGET, HW, outputs=["9"], order_by=order_by)
    assert calls == [(frozenset(), ["9"])] and planned.order[-1] == "9"
    with pytest.raises(WorkflowError, match="not in the graph"):
        plan_workflow(FLUX, BUDGET, HW, outputs=["404"])


def test_errors_are_the_stages_own() -> None:
    with pytest.raises(WorkflowError, match="expected a JSON object"):
        plan_workflow([1, 2], BUDGET)  # type: ignore[arg-type]  # a host may hand over anything
    with pytest.raises(WorkflowError, match="missing.json"):  # a path: the file is named
        plan_workflow(ROOT / "missing.json", BUDGET)
    with pytest.raises(WorkflowError, match="got str"):  # a posted string is never opened as a file
        plan_workflow(str(FLUX), BUDGET)  # type: ignore[arg-type]


def test_a_time_limit_stops_it_and_none_means_no_limit() -> None:
    with pytest.raises(PlanTimeout, match="limit of 0 s"):
        plan_workflow(FLUX, BUDGET, HW, time_limit_s=0)
    with time_limit(0):  # None is no limit, even inside a limited block (as time_limit(None) is)
        assert plan_workflow(FLUX, BUDGET, HW).plan is not None


CALLERS = [
    ROOT / "cli.py",
    ROOT / "memory" / "planning" / "preflight.py",
    ROOT / "memory" / "residency" / "controller.py",
    ROOT / "bench" / "planner.py",
    ROOT / "bench" / "planner_scaling.py",
]


def called_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
    }


@pytest.mark.parametrize("path", CALLERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_callers_go_through_the_pipeline(path: Path) -> None:
    """No caller writes the stages out again: parsing, ordering and extraction happen in plan_workflow."""
    names = called_names(path)
    assert "plan_workflow" in names
    assert not {"parse_workflow", "load_workflow", "predict_order", "workload_from_graph"} & names


def test_no_other_module_extracts_a_workload() -> None:
    """workload_from_graph is called in pipeline.py alone, across the pack and the benches."""
    files = [*ROOT.glob("*.py"), *(ROOT / "memory").rglob("*.py"), *(ROOT / "nodes").rglob("*.py")]
    files += (ROOT / "bench").glob("*.py")
    calling = sorted(str(p.relative_to(ROOT)) for p in files if "workload_from_graph" in called_names(p))
    assert calling == ["memory/planning/pipeline.py"]
