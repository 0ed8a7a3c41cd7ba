"""memory/workflow/order.py: the host's ExecutionList, step by step (tests/host checks it against it)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comfyui_headroom.memory.workflow import order as order_module
from comfyui_headroom.memory.workflow.graph import Graph, Link, WorkflowError, parse_workflow, reachable
from comfyui_headroom.memory.workflow.node_types import InputSpec, NodeType, lookup
from comfyui_headroom.memory.workflow.order import predict_order, select_outputs


def image(color: int) -> dict[str, Any]:
    return {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": color}}


def invert(source: str) -> dict[str, Any]:
    return {"class_type": "ImageInvert", "inputs": {"image": [source, 0]}}


def blend(a: str, b: str, factor: float = 0.5) -> dict[str, Any]:
    inputs = {"image1": [a, 0], "image2": [b, 0], "blend_factor": factor, "blend_mode": "normal"}
    return {"class_type": "ImageBlend", "inputs": inputs}


def preview(source: str) -> dict[str, Any]:
    return {"class_type": "PreviewImage", "inputs": {"images": [source, 0]}}


def two_chains() -> Graph:
    return parse_workflow(
        {
            "1": image(1),
            "2": invert("1"),
            "3": preview("2"),
            "4": image(4),
            "5": invert("4"),
            "6": preview("5"),
        }
    )


def test_ready_nodes_near_an_output_go_first() -> None:
    graph = parse_workflow(
        {"1": image(1), "2": invert("1"), "3": preview("2"), "4": image(4), "5": preview("4")}
    )
    # 1 and 4 are ready; 4 feeds an output directly, so it runs first and its preview right after.
    assert predict_order(graph, outputs=["3", "5"]) == ["4", "5", "1", "2", "3"]
    assert predict_order(graph, outputs=["5", "3"]) == ["4", "5", "1", "2", "3"]


def test_the_order_of_outputs_breaks_ties() -> None:
    graph = two_chains()
    assert predict_order(graph, outputs=["3", "6"]) == ["1", "2", "3", "4", "5", "6"]
    assert predict_order(graph, outputs=["6", "3"]) == ["4", "5", "6", "1", "2", "3"]


def test_without_outputs_the_host_selection_is_used() -> None:
    graph = two_chains()
    outputs = select_outputs(graph)
    assert sorted(outputs) == ["3", "6"]
    assert predict_order(graph) == predict_order(graph, outputs=outputs)


def test_only_nodes_the_outputs_need_run() -> None:
    graph = parse_workflow({"1": image(1), "2": invert("1"), "3": preview("1"), "4": image(4)})
    assert predict_order(graph) == ["1", "3"]
    assert predict_order(graph, outputs=[]) == []


def test_diamond_runs_each_node_once() -> None:
    prompt = {
        "1": image(1),
        "2": invert("1"),
        "3": blend("1", "1", 0.3),
        "4": blend("2", "3"),
        "5": preview("4"),
    }
    assert predict_order(parse_workflow(prompt)) == ["1", "3", "2", "4", "5"]


def test_far_from_outputs_the_first_pending_node_wins() -> None:
    # add_node pushes image1 then image2 on a stack: "a1" becomes pending before "a0".
    prompt = {"a0": image(0), "a1": image(1), "b": blend("a0", "a1"), "c": invert("b"), "d": invert("c")}
    prompt["out"] = preview("d")
    assert predict_order(parse_workflow(prompt)) == ["a1", "a0", "b", "c", "d", "out"]


def test_cached_nodes_are_skipped_and_not_waited_for() -> None:
    graph = two_chains()
    assert predict_order(graph, frozenset({"1"}), ["3", "6"]) == ["2", "3", "4", "5", "6"]
    # A cached output is staged but does not run; its cached inputs are not added at all.
    assert predict_order(graph, frozenset({"1", "2", "3"}), ["3", "6"]) == ["4", "5", "6"]
    # Ids the graph does not hold are ignored.
    assert predict_order(graph, frozenset({"99"}), ["3", "6"]) == ["1", "2", "3", "4", "5", "6"]


def test_a_cached_output_still_runs_its_uncached_inputs() -> None:
    graph = two_chains()
    assert predict_order(graph, frozenset({"3"}), ["3"]) == ["1", "2"]


def test_nodes_with_equal_signatures_share_one_cache_entry() -> None:
    graph = parse_workflow({"1": image(0), "2": image(0), "3": preview("1"), "4": preview("2")})
    assert predict_order(graph, outputs=["3", "4"]) == ["1", "3"]
    # Once "1" is cached, its twin is too.
    assert predict_order(graph, frozenset({"1"}), ["4"]) == ["4"]


def test_equal_signatures_need_equal_ancestry_shapes() -> None:
    # 4 blends one image with itself; 5 blends two equal images: the host's signatures differ.
    prompt = {"1": image(0), "2": image(0), "4": blend("1", "1"), "5": blend("1", "2"), "6": preview("4")}
    prompt["7"] = preview("5")
    assert predict_order(parse_workflow(prompt), outputs=["6", "7"]) == ["1", "4", "6", "5", "7"]


def test_nodes_whose_signature_holds_their_id_are_never_shared() -> None:
    # 0.33's own classes have none (its V3 nodes list hidden inputs as tuples, which the host's
    # UNIQUE_ID check does not match): the pack's tiled decode has a hidden UNIQUE_ID.
    assert lookup("HeadroomTiledVAEDecode").unique_signature
    decode = {"class_type": "HeadroomTiledVAEDecode", "inputs": {"samples": ["1", 0], "vae": ["2", 0]}}
    prompt = {
        "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "2": {"class_type": "VAELoader", "inputs": {"vae_name": "vae.safetensors"}},
        "3": decode,
        "4": dict(decode),
        "5": preview("3"),
        "6": preview("4"),
    }
    order = predict_order(parse_workflow(prompt), outputs=["5", "6"])
    assert sorted(order) == ["1", "2", "3", "4", "5", "6"]


def test_unknown_classes_are_never_shared() -> None:
    prompt = {"1": {"class_type": "Mystery", "inputs": {}}, "2": {"class_type": "Mystery", "inputs": {}}}
    prompt |= {"3": preview("1"), "4": preview("2")}
    assert predict_order(parse_workflow(prompt), outputs=["3", "4"]) == ["1", "3", "2", "4"]


def test_lazy_inputs_are_all_assumed_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    switch = NodeType(
        "LazySwitch",
        (
            InputSpec("on_false", "*", lazy=True),
            InputSpec("on_true", "*", lazy=True),
            InputSpec("switch", "BOOLEAN"),
        ),
        ("*",),
    )
    monkeypatch.setattr(order_module, "lookup", lambda kind: switch if kind == "LazySwitch" else lookup(kind))
    prompt = {"1": image(1), "2": image(2), "9": image(9), "4": preview("3")}
    prompt["3"] = {
        "class_type": "LazySwitch",
        "inputs": {"on_false": ["1", 0], "on_true": ["2", 0], "switch": True},
    }
    prompt["5"] = {
        "class_type": "LazySwitch",
        "inputs": {"on_false": ["9", 0], "on_true": ["9", 0], "switch": True},
    }
    prompt["6"] = preview("5")
    graph = parse_workflow(prompt)
    result = predict_order(graph, outputs=["4"])
    # The switch is staged first (without its lazy inputs), asks for both, and runs once they have.
    assert sorted(result[:2]) == ["1", "2"] and result[2:] == ["3", "4"]
    assert predict_order(graph, frozenset({"1", "2"}), ["4"]) == ["3", "4"]
    assert predict_order(graph, outputs=["6"]) == ["9", "5", "6"]


def test_a_dependency_cycle_is_a_workflow_error() -> None:
    prompt = {"1": invert("2"), "2": invert("1"), "3": preview("2")}
    with pytest.raises(WorkflowError, match=r"cycle among nodes .*1 \(ImageInvert\)"):
        predict_order(parse_workflow(prompt))


def test_unknown_output_ids_are_a_workflow_error() -> None:
    with pytest.raises(WorkflowError, match=r"\['42'\]"):
        predict_order(two_chains(), outputs=["3", "42"])


def test_a_very_long_chain_needs_no_recursion() -> None:
    prompt = {"0": image(0)} | {str(i): blend(str(i - 1), str(i - 1), i / 10_000) for i in range(1, 3000)}
    prompt["out"] = preview("2999")
    result = predict_order(parse_workflow(prompt))
    assert result == [*map(str, range(3000)), "out"]


# ------------------------------------------------------------------------------------ properties


@st.composite
def prompts(draw: st.DrawFn) -> dict[str, dict[str, Any]]:
    """Random DAGs of stock image nodes; constants differ per node so no two share a signature."""
    size = draw(st.integers(1, 24))
    ids = draw(st.permutations([str(i) for i in range(1, size + 1)]))
    prompt: dict[str, dict[str, Any]] = {}
    producers: list[str] = []
    for index, node_id in enumerate(ids):
        kind = draw(st.sampled_from(["image", "invert", "blend", "preview"])) if producers else "image"
        if kind == "image":
            prompt[node_id] = image(index)
        elif kind == "invert":
            prompt[node_id] = blend(draw(st.sampled_from(producers)), draw(st.sampled_from(producers)), index)
            prompt[node_id]["inputs"] = {"image": prompt[node_id]["inputs"]["image1"], "tag": index}
            prompt[node_id]["class_type"] = "ImageInvert"
        elif kind == "blend":
            prompt[node_id] = blend(draw(st.sampled_from(producers)), draw(st.sampled_from(producers)), index)
        else:
            prompt[node_id] = preview(draw(st.sampled_from(producers)))
            prompt[node_id]["inputs"]["tag"] = index  # two previews of one image would share a signature
        if kind != "preview":
            producers.append(node_id)
    keys = draw(st.permutations(list(prompt)))
    return {key: prompt[key] for key in keys}


def expected_set(graph: Graph, cached: frozenset[str], outputs: list[str]) -> set[str]:
    """What add_node reaches: outputs, then uncached inputs, recursively; cached ones do not run."""
    found, stack = set(), list(outputs)
    while stack:
        node_id = stack.pop()
        if node_id in found:
            continue
        found.add(node_id)
        for value in graph.nodes[node_id].inputs.values():
            if isinstance(value, Link) and value.node not in cached:
                stack.append(value.node)
    return found - cached


@settings(max_examples=300, deadline=None)
@given(data=st.data(), prompt=prompts())
def test_order_is_topological_and_exactly_the_needed_nodes(data: st.DataObject, prompt: dict) -> None:
    graph = parse_workflow(prompt)
    cached = frozenset(data.draw(st.sets(st.sampled_from(sorted(graph.nodes)))))
    all_outputs = graph.output_nodes()
    outputs = data.draw(st.one_of(st.none(), st.permutations(all_outputs).flatmap(st.just)))
    result = predict_order(graph, cached, outputs)
    targets = select_outputs(graph) if outputs is None else outputs
    assert len(result) == len(set(result))
    assert set(result) == expected_set(graph, cached, targets)
    position = {node_id: i for i, node_id in enumerate(result)}
    for node_id in result:
        for value in graph.nodes[node_id].inputs.values():
            if isinstance(value, Link):
                assert value.node in cached or position[value.node] < position[node_id]
    if not cached:
        assert set(result) == reachable(graph, targets)


@settings(max_examples=100, deadline=None)
@given(prompt=prompts())
def test_outputs_run_as_soon_as_they_are_ready(prompt: dict) -> None:
    """ux_friendly_pick_node: an output node never waits once its inputs have run."""
    graph = parse_workflow(prompt)
    result = predict_order(graph)
    done: set[str] = set()
    for step, node_id in enumerate(result):
        ready_outputs = [
            n
            for n in result[step:]
            if graph.is_output(n)
            and all(v.node in done for v in graph.nodes[n].inputs.values() if isinstance(v, Link))
        ]
        if ready_outputs:
            assert graph.is_output(node_id)
        done.add(node_id)
