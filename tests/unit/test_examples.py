"""The example workflows: each UI workflow parses to exactly its API twin, and both plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.extract import workload_from_graph
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.units import GiB
from comfyui_headroom.memory.workflow.graph import load_workflow
from comfyui_headroom.memory.workflow.order import predict_order

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
EXAMPLES = sorted(p.stem for p in (WORKFLOWS / "api").glob("*.json"))


def test_there_are_examples() -> None:
    assert {"flux_dev_t2i", "wan22_14b_t2v"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_ui_workflow_is_its_api_twin(name: str) -> None:
    ui, api = load_workflow(WORKFLOWS / f"{name}.json"), load_workflow(WORKFLOWS / "api" / f"{name}.json")
    assert ui.format == "ui" and api.format == "api"
    assert {k: (n.class_type, n.inputs) for k, n in ui.nodes.items()} == {
        k: (n.class_type, n.inputs) for k, n in api.nodes.items()
    }


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_fit_a_12gb_card_with_streaming(name: str) -> None:
    graph = load_workflow(WORKFLOWS / f"{name}.json")
    workload = workload_from_graph(graph, predict_order(graph))
    assert all(c.source == "catalog" for c in workload.components), "every model file is catalogued"
    result = plan(workload, Budget.from_card(16 * GiB, 64 * GiB), Hardware.pcie(4))
    assert result.feasible
    assert any(p.tier.gpu == "S" for s in result.steps for p in s.placements.values())
