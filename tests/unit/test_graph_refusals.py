"""memory/workflow/graph.py: bad input is a WorkflowError naming the problem, never a KeyError/TypeError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comfyui_headroom.memory.workflow.graph import WorkflowError, load_workflow, parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order
from headroom_testing.graph_workflows import fixture

# ------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object, got list"),
        ({}, "empty"),
        ({"last_node_id": 3}, "keys \\['last_node_id'\\]"),
        ({"1": {"class_type": "X", "inputs": []}}, "inputs is not an object"),
        ({"1": {"inputs": {}}, "2": {"class_type": "X"}}, "not a workflow"),
        ({"nodes": [{"id": 1}]}, "no id or type"),
        ({"nodes": [{"id": 1, "type": "A"}, {"id": 1, "type": "B"}]}, "share the id 1"),
        ({"nodes": [], "links": [[1, 2]]}, "malformed link"),
        ({"nodes": [{"id": 1, "type": "A"}], "links": [[1, 5, "a", 1, 0]]}, "malformed link"),
    ],
)  # fmt: skip
def test_bad_input_is_a_workflow_error(data: Any, message: str) -> None:
    with pytest.raises(WorkflowError, match=message):
        parse_workflow(data)


def test_load_workflow_reports_json_errors_with_their_position(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "nodes": [\n    {"id": 1,,}\n  ]\n}\n', encoding="utf-8")
    with pytest.raises(WorkflowError, match=r"broken.json is not valid JSON: .* line 3, column 14"):
        load_workflow(path)
    with pytest.raises(WorkflowError, match="cannot read workflow"):
        load_workflow(tmp_path / "absent.json")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(WorkflowError, match=r"list.json: not a workflow"):
        load_workflow(tmp_path / "list.json")


def _mutations() -> st.SearchStrategy:
    junk = st.one_of(
        st.none(), st.integers(-20, 20), st.text(max_size=3), st.lists(st.integers(), max_size=3)
    )
    return st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000), junk), min_size=1, max_size=4)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=_mutations(),
    name=st.sampled_from(["image_ops_ui.json", "subgraph_ui.json", "group_node_ui.json"]),
)
def test_damaged_workflows_parse_or_raise_workflow_error(mutations: list, name: str) -> None:
    """Replace or delete random parts of a real workflow: never a KeyError/TypeError escapes."""
    data = fixture(name)
    for pick, action, junk in mutations:
        paths = [p for p in _paths(data) if p]
        path = paths[pick % len(paths)]
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if action % 3 == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = junk
    try:
        graph = parse_workflow(data)
    except WorkflowError:
        return
    try:
        predict_order(graph)
    except WorkflowError:
        pass
