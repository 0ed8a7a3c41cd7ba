"""memory/workflow/graph.py: group nodes (the legacy frontend extension) expanded into their inner nodes."""

from __future__ import annotations

from typing import Any

import pytest

from comfyui_headroom.memory.workflow.graph import Link, WorkflowError, load_workflow, parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order
from headroom_testing.graph_workflows import FIXTURES, fixture

# ---------------------------------------------------------------------------------- group nodes
# group_node_ui.json: instance 5 of group "Sampler" = [0 PrimitiveNode -> 3.steps, 1/2 CLIPTextEncode (1's
# text shown as an input), 3 KSampler (steps and denoise shown as inputs), 4 VAEDecode]; its outputs are
# 3's LATENT and 4's IMAGE.


def _group_instance(data: dict[str, Any]) -> dict[str, Any]:
    return next(n for n in data["nodes"] if n["id"] == 5)


def test_group_node_widgets_inputs_and_outputs_map_onto_the_inner_nodes() -> None:
    graph = load_workflow(FIXTURES / "group_node_ui.json")
    # Ids are "<instance>:<index>"; the PrimitiveNode (index 0) is virtual.
    assert list(graph.nodes) == ["1", "2", "3", "4", "5:1", "5:2", "5:3", "5:4"]
    sampler = graph.nodes["5:3"].inputs
    # The instance's values, not the inner nodes' own ("inner positive", seed 1, steps 10, denoise 1).
    assert graph.nodes["5:1"].inputs["text"] == "a photo of a cat"
    assert graph.nodes["5:2"].inputs["text"] == "blurry"
    assert (sampler["seed"], sampler["cfg"], sampler["scheduler"]) == (42, 6.5, "karras")
    assert sampler["steps"] == 25  # the inner PrimitiveNode's value, set on the instance
    # Widgets shown as inputs come after all the others, in inner-node order: 1's text, then denoise.
    assert sampler["denoise"] == 0.75
    # Unlinked inner sockets are the instance's inputs in order: clip, clip, model, latent_image, vae.
    assert graph.nodes["5:2"].inputs["clip"] == Link("1", 1)
    assert (sampler["model"], sampler["latent_image"]) == (Link("1", 0), Link("2", 0))
    assert graph.nodes["5:4"].inputs == {"samples": Link("5:3", 0), "vae": Link("1", 2)}
    # Output 0 is the KSampler's LATENT (linked inside but listed as external), output 1 the IMAGE.
    assert graph.nodes["4"].inputs["samples"] == Link("5:3", 0)
    assert graph.nodes["3"].inputs["images"] == Link("5:4", 0)
    assert predict_order(graph)[-1] == "3"


def test_group_instance_without_values_keeps_the_inner_values_and_v1_separator_works() -> None:
    data = fixture("group_node_ui.json")
    instance = _group_instance(data)
    del instance["widgets_values"]
    instance["type"] = "workflow/Sampler"  # the separator before frontend 1.2.63
    graph = parse_workflow(data)
    sampler = graph.nodes["5:3"].inputs
    assert (sampler["seed"], sampler["steps"], sampler["denoise"]) == (1, 10, 1)
    assert graph.nodes["5:1"].inputs["text"] == "inner positive"
    assert graph.warnings == []


def test_group_instance_input_linked_to_a_shown_widget() -> None:
    data = fixture("group_node_ui.json")
    data["nodes"].append(
        {
            "id": 6,
            "type": "PrimitiveNode",
            "mode": 0,
            "inputs": [],
            "outputs": [{"name": "FLOAT", "type": "FLOAT", "links": [8], "widget": {"name": "denoise"}}],
            "widgets_values": [0.3, "fixed"],
        }
    )
    data["links"].append([8, 6, 0, 5, 6, "FLOAT"])
    _group_instance(data)["inputs"][6]["link"] = 8
    assert parse_workflow(data).nodes["5:3"].inputs["denoise"] == 0.3


def test_group_widget_count_mismatch_warns() -> None:
    data = fixture("group_node_ui.json")
    _group_instance(data)["widgets_values"] = [25, "fixed", "only a few"]
    graph = parse_workflow(data)
    assert graph.nodes["5:2"].inputs["text"] == "only a few"  # mapped by position, as the frontend does
    assert graph.nodes["5:3"].inputs["seed"] == 1
    assert any("3 widget values for 8 group widgets" in w for w in graph.warnings)


def test_muted_group_instance_drops_its_inner_nodes() -> None:
    data = fixture("group_node_ui.json")
    _group_instance(data)["mode"] = 2
    graph = parse_workflow(data)
    assert list(graph.nodes) == ["1", "2", "3", "4"]
    assert graph.nodes["3"].inputs == {"filename_prefix": "ComfyUI"}
    assert "samples" not in graph.nodes["4"].inputs


def test_bypassed_group_instance_passes_the_first_input_of_the_type() -> None:
    data = fixture("group_node_ui.json")
    _group_instance(data)["mode"] = 4
    graph = parse_workflow(data)
    assert list(graph.nodes) == ["1", "2", "3", "4"]
    assert graph.nodes["4"].inputs["samples"] == Link("2", 0)  # latent_image, input 3 (input 0 is CLIP)
    assert "images" not in graph.nodes["3"].inputs  # no IMAGE input to pass
    # Unlike other nodes, a group passes only an exact type match: a "*" input of an opaque node reading
    # output 1 would get input 1 (CLIP) from the generic rule, and nothing from the group's.
    consumer = {"id": 6, "type": "AnyConsumer", "mode": 0, "inputs": [{"name": "x", "type": "*", "link": 8}]}
    data["nodes"].append(consumer | {"outputs": []})
    data["links"].append([8, 5, 1, 6, 0, "*"])
    assert parse_workflow(data).nodes["6"].inputs == {}


def test_inner_mode_of_a_group_node() -> None:
    data = fixture("group_node_ui.json")
    data["extra"]["groupNodes"]["Sampler"]["nodes"][4]["mode"] = 4  # VAEDecode bypassed inside the group
    graph = parse_workflow(data)
    assert "5:4" not in graph.nodes
    assert "images" not in graph.nodes["3"].inputs  # VAEDecode has no IMAGE input to pass on


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["extra"].pop("groupNodes"),
         r"node 5 \(workflow>Sampler 'Sample and decode'\) is a group node whose definition is missing "
         r"from extra.groupNodes"),
        (lambda d: d["extra"]["groupNodes"]["Sampler"].pop("nodes"),
         r"node 5 .*groupNodes\['Sampler'\] has no nodes list"),
        (lambda d: d["extra"]["groupNodes"]["Sampler"]["links"].append([0, 1]), r"node 5 .*malformed link"),
        (lambda d: d["extra"]["groupNodes"]["Sampler"]["nodes"][1].update(type="workflow>Other"),
         r"node 5 .*contains group node workflow>Other"),
    ],
)  # fmt: skip
def test_broken_or_nested_group_definitions_are_refused(change: Any, message: str) -> None:
    data = fixture("group_node_ui.json")
    change(data)
    with pytest.raises(WorkflowError, match=message):
        parse_workflow(data)


def test_a_group_node_inside_a_subgraph_is_refused() -> None:
    data = fixture("subgraph_ui.json")
    inner = data["definitions"]["subgraphs"][0]["nodes"][0]
    inner["type"] = "workflow>Sampler"
    data["extra"] = {"groupNodes": fixture("group_node_ui.json")["extra"]["groupNodes"]}
    with pytest.raises(WorkflowError, match=rf"node 2:{inner['id']} \(workflow>Sampler.*nested in node 2 "):
        parse_workflow(data)
