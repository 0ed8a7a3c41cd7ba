"""memory/workflow/graph.py: API prompts and UI workflows into one Graph, as graphToPrompt would."""

from __future__ import annotations

import copy
import functools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comfyui_headroom.memory.workflow.graph import (
    Graph,
    Link,
    Node,
    WorkflowError,
    load_workflow,
    parse_workflow,
)
from comfyui_headroom.memory.workflow.node_types import host_version, known_types, lookup
from comfyui_headroom.memory.workflow.order import predict_order

FIXTURES = Path(__file__).parent / "fixtures" / "graph"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def signature(graph: Graph) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """What the executor sees of a graph: ids in order, classes, inputs in order."""
    return [(n.id, n.class_type, list(n.inputs.items())) for n in graph.nodes.values()]


class UI:
    """A small builder of UI workflows shaped like the frontend saves them (links as arrays)."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.links: list[list[Any]] = []

    def node(
        self,
        kind: str,
        inputs: tuple[tuple[str, str] | tuple[str, str, str], ...] = (),
        outputs: tuple[str, ...] = (),
        widgets: list[Any] | None = None,
        mode: int = 0,
        title: str | None = None,
    ) -> dict[str, Any]:
        """inputs: (name, type) sockets, or (name, type, "widget") for a widget shown as an input."""
        node: dict[str, Any] = {
            "id": len(self.nodes) + 1,
            "type": kind,
            "mode": mode,
            "inputs": [
                {"name": i[0], "type": i[1], "link": None}
                | ({"widget": {"name": i[0]}} if len(i) > 2 else {})
                for i in inputs
            ],
            "outputs": [{"name": t, "type": t, "links": []} for t in outputs],
            "properties": {},
        }
        if widgets is not None:
            node["widgets_values"] = widgets
        if title is not None:
            node["title"] = title
        self.nodes.append(node)
        return node

    def link(self, source: dict[str, Any], slot: int, target: dict[str, Any], name: str) -> None:
        link_id = len(self.links) + 1
        index = next(i for i, s in enumerate(target["inputs"]) if s["name"] == name)
        target["inputs"][index]["link"] = link_id
        source["outputs"][slot]["links"].append(link_id)
        kind = source["outputs"][slot]["type"]
        self.links.append([link_id, source["id"], slot, target["id"], index, kind])

    def data(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "links": self.links, "version": 0.4}


# ------------------------------------------------------------------------------------------ twins


@pytest.mark.parametrize("name", ["image_ops", "subgraph", "group_node"])
def test_api_and_ui_twins_give_the_same_graph(name: str) -> None:
    ui = load_workflow(FIXTURES / f"{name}_ui.json")
    api = load_workflow(FIXTURES / f"{name}_api.json")
    assert (ui.format, api.format) == ("ui", "api")
    assert signature(ui) == signature(api)
    assert ui.warnings == [] and api.warnings == []
    strip = lambda prompt: {k: (v["class_type"], v["inputs"]) for k, v in prompt.items()}  # noqa: E731
    assert strip(ui.to_prompt()) == strip(api.to_prompt()) == strip(json.loads(json.dumps(api.to_prompt())))


def test_the_image_ops_twin_resolves_every_frontend_construct() -> None:
    graph = load_workflow(FIXTURES / "image_ops_ui.json")
    assert "8" not in graph.nodes  # muted
    assert "4" not in graph.nodes  # bypassed: ImageBlend reads its input instead
    assert graph.nodes["5"].inputs["image1"] == Link("3", 0)
    assert graph.nodes["5"].inputs["image2"] == Link("1", 0)  # through the Reroute
    assert graph.nodes["5"].inputs["blend_factor"] == 0.25  # the PrimitiveNode's value, not 0.5
    assert graph.nodes["5"].title == "Blend them"
    assert {"2", "6", "9"}.isdisjoint(graph.nodes)  # Reroute, PrimitiveNode, MarkdownNote
    assert graph.output_nodes() == ["7", "12"]


def test_api_prompt_details() -> None:
    prompt = {
        "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0], "filename_prefix": "x"}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0.0], "vae": ["4", 2]}, "_meta": {}},
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "a.safetensors"}},
        "3": {"class_type": "ImageBatch", "inputs": {"sizes": {"__value__": [1, 2]}, "pair": ["x", 0, 1]}},
    }
    graph = parse_workflow(prompt)
    assert list(graph.nodes) == ["9", "8", "4", "3"]  # the prompt's own order
    assert graph.nodes["8"].inputs == {"samples": Link("3", 0), "vae": Link("4", 2)}
    assert graph.nodes["3"].inputs == {"sizes": [1, 2], "pair": ["x", 0, 1]}  # unwrapped; not a link
    assert graph.nodes["9"].title is None
    assert graph.to_prompt()["3"]["inputs"]["sizes"] == {"__value__": [1, 2]}


def test_api_link_to_a_missing_node_is_an_error_where_an_output_needs_it() -> None:
    with pytest.raises(WorkflowError, match=r"node 1 \(PreviewImage\) input 'images' links to node 7"):
        parse_workflow({"1": {"class_type": "PreviewImage", "inputs": {"images": ["7", 0]}}})
    # No output needs node 2, so the host never validates it.
    graph = parse_workflow(
        {
            "1": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
            "2": {"class_type": "ImageInvert", "inputs": {"image": ["7", 0]}},
            "3": {
                "class_type": "EmptyImage",
                "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0},
            },
        }
    )
    assert any("node 7" in w and "not in the prompt" in w for w in graph.warnings)
    assert predict_order(graph) == ["3", "1"]


# ------------------------------------------------------------------------- mute, bypass, virtual


def test_muted_node_drops_the_inputs_it_fed() -> None:
    ui = UI()
    image = ui.node("EmptyImage", outputs=("IMAGE",), widgets=[8, 8, 1, 0], mode=2)
    preview = ui.node("PreviewImage", inputs=(("images", "IMAGE"),))
    ui.link(image, 0, preview, "images")
    graph = parse_workflow(ui.data())
    assert list(graph.nodes) == ["2"]
    assert graph.nodes["2"].inputs == {}


def test_bypass_passes_the_input_of_the_requested_type() -> None:
    ui = UI()
    image = ui.node("EmptyImage", outputs=("IMAGE",), widgets=[8, 8, 1, 0])
    mask = ui.node("SolidMask", outputs=("MASK",), widgets=[1.0, 8, 8])
    # ImageCompositeMasked-like: a MASK input first, the IMAGE second; its IMAGE output is bypassed.
    bypassed = ui.node("Custom", inputs=(("mask", "MASK"), ("image", "IMAGE")), outputs=("IMAGE",), mode=4)
    ui.link(mask, 0, bypassed, "mask")
    ui.link(image, 0, bypassed, "image")
    preview = ui.node("PreviewImage", inputs=(("images", "IMAGE"),))
    ui.link(bypassed, 0, preview, "images")
    assert parse_workflow(ui.data()).nodes["4"].inputs == {"images": Link("1", 0)}


def test_bypass_keeps_the_same_slot_when_its_type_matches() -> None:
    ui = UI()
    a = ui.node("EmptyImage", outputs=("IMAGE",), widgets=[8, 8, 1, 0])
    b = ui.node("EmptyImage", outputs=("IMAGE",), widgets=[9, 9, 1, 0])
    blend = ui.node(
        "ImageBlend", inputs=(("image1", "IMAGE"), ("image2", "IMAGE")), outputs=("IMAGE",), mode=4
    )
    ui.link(a, 0, blend, "image1")
    ui.link(b, 0, blend, "image2")
    sink = ui.node("Sink", inputs=(("first", "IMAGE"),))
    ui.link(blend, 0, sink, "first")
    assert parse_workflow(ui.data()).nodes["4"].inputs == {"first": Link("1", 0)}


def test_bypass_without_a_matching_input_leaves_the_input_unconnected() -> None:
    ui = UI()
    mask = ui.node("SolidMask", outputs=("MASK",), widgets=[1.0, 8, 8])
    bypassed = ui.node("MaskToImage", inputs=(("mask", "MASK"),), outputs=("IMAGE",), mode=4)
    ui.link(mask, 0, bypassed, "mask")
    preview = ui.node("PreviewImage", inputs=(("images", "IMAGE"),))
    ui.link(bypassed, 0, preview, "images")
    graph = parse_workflow(ui.data())
    assert graph.nodes["3"].inputs == {}
    assert any("bypassed node 2 (MaskToImage)" in w and "IMAGE" in w for w in graph.warnings)


def test_chained_reroutes_and_a_bypass_behind_them() -> None:
    ui = UI()
    image = ui.node("EmptyImage", outputs=("IMAGE",), widgets=[8, 8, 1, 0])
    invert = ui.node("ImageInvert", inputs=(("image", "IMAGE"),), outputs=("IMAGE",), mode=4)
    first = ui.node("Reroute", inputs=(("", "*"),), outputs=("IMAGE",))
    second = ui.node("Reroute", inputs=(("", "*"),), outputs=("IMAGE",))
    preview = ui.node("PreviewImage", inputs=(("images", "IMAGE"),))
    ui.link(image, 0, invert, "image")
    ui.link(invert, 0, first, "")
    ui.link(first, 0, second, "")
    ui.link(second, 0, preview, "images")
    graph = parse_workflow(ui.data())
    assert list(graph.nodes) == ["1", "5"]
    assert graph.nodes["5"].inputs == {"images": Link("1", 0)}


def test_get_and_set_nodes_are_resolved() -> None:
    ui = UI()
    image = ui.node("EmptyImage", outputs=("IMAGE",), widgets=[8, 8, 1, 0])
    setter = ui.node("SetNode", inputs=(("IMAGE", "IMAGE"),), outputs=("*",), widgets=["picture"])
    getter = ui.node("GetNode", outputs=("IMAGE",), widgets=["picture"])
    preview = ui.node("PreviewImage", inputs=(("images", "IMAGE"),))
    ui.link(image, 0, setter, "IMAGE")
    ui.link(getter, 0, preview, "images")
    assert parse_workflow(ui.data()).nodes["4"].inputs == {"images": Link("1", 0)}


def test_a_loop_through_reroutes_is_refused() -> None:
    ui = UI()
    first = ui.node("Reroute", inputs=(("", "*"),), outputs=("IMAGE",))
    second = ui.node("Reroute", inputs=(("", "*"),), outputs=("IMAGE",))
    preview = ui.node("PreviewImage", inputs=(("images", "IMAGE"),))
    ui.link(first, 0, second, "")
    ui.link(second, 0, first, "")
    ui.link(second, 0, preview, "images")
    with pytest.raises(WorkflowError, match="loop"):
        parse_workflow(ui.data())


# ------------------------------------------------------------------------------------ widgets


def test_control_after_generate_value_is_skipped() -> None:
    ui = UI()
    ui.node("KSampler", widgets=[42, "randomize", 20, 7.5, "euler", "normal", 1.0])
    ui.node("KSampler", widgets=[43, 21, 7.0, "dpmpp_2m", "karras", 0.5])  # saved without the control
    graph = parse_workflow(ui.data())
    assert graph.nodes["1"].inputs == {
        "seed": 42, "steps": 20, "cfg": 7.5, "sampler_name": "euler", "scheduler": "normal", "denoise": 1.0,
    }  # fmt: skip
    assert list(graph.nodes["2"].inputs.values()) == [43, 21, 7.0, "dpmpp_2m", "karras", 0.5]
    assert graph.warnings == []


def test_upload_button_value_is_skipped() -> None:
    ui = UI()
    ui.node("LoadImage", outputs=("IMAGE", "MASK"), widgets=["cat.png", "image"])
    assert parse_workflow(ui.data()).nodes["1"].inputs == {"image": "cat.png"}


def test_widget_converted_to_input_takes_the_link() -> None:
    ui = UI()
    number = ui.node("PrimitiveInt", outputs=("INT",), widgets=[1234, "fixed"])
    sampler = ui.node(
        "KSampler",
        inputs=(("model", "MODEL"), ("seed", "INT", "widget")),
        outputs=("LATENT",),
        widgets=[42, "fixed", 20, 7.5, "euler", "normal", 1.0],
    )
    ui.link(number, 0, sampler, "seed")
    graph = parse_workflow(ui.data())
    assert graph.nodes["1"].inputs == {"value": 1234}
    inputs = graph.nodes["2"].inputs
    assert inputs["seed"] == Link("1", 0)
    assert list(inputs)[:2] == ["seed", "steps"]  # keeps its widget's place, as the frontend's does


def test_a_newer_version_of_a_known_class_maps_its_extra_widget() -> None:
    assert lookup("ModelSamplingAuraFlow") is not None
    assert [s.name for s in lookup("ModelSamplingAuraFlow").widgets] == ["shift"]
    ui = UI()
    ui.node(
        "ModelSamplingAuraFlow",
        inputs=(("model", "MODEL"), ("sampling", "COMBO", "w")),
        widgets=[3.1, "flow"],
    )
    assert parse_workflow(ui.data()).nodes["1"].inputs == {"shift": 3.1, "sampling": "flow"}


def test_too_many_widget_values_warn_and_map_by_position() -> None:
    ui = UI()
    ui.node("VAELoader", widgets=["ae.safetensors", "extra"])
    graph = parse_workflow(ui.data())
    assert graph.nodes["1"].inputs == {"vae_name": "ae.safetensors"}
    assert any("2 widget values" in w and host_version() in w for w in graph.warnings)


def test_widgets_values_saved_by_name() -> None:
    ui = UI()
    ui.node("SomePackLoader", outputs=("MODEL",), widgets={"path": "x.gguf", "dtype": "auto"})  # type: ignore
    assert parse_workflow(ui.data()).nodes["1"].inputs == {"path": "x.gguf", "dtype": "auto"}


# ----------------------------------------------------------------------------------- unknown types


def test_unknown_class_is_opaque_with_a_documented_output_guess() -> None:
    ui = UI()
    source = ui.node("FancyLoader", inputs=(("name", "COMBO", "w"), ("seed", "INT", "w")), outputs=("MODEL",))
    source["widgets_values"] = ["big.safetensors", 7, "increment"]
    sink = ui.node("FancySink", inputs=(("model", "MODEL"),))  # no outputs: must be an output node
    saver = ui.node("SaveSomethingNew", inputs=(("model", "MODEL"),), outputs=("STRING",))
    ui.link(source, 0, sink, "model")
    ui.link(source, 0, saver, "model")
    graph = parse_workflow(ui.data())
    assert graph.nodes["1"].inputs == {"name": "big.safetensors", "seed": 7}
    assert graph.nodes["1"].outputs == ("MODEL",)
    assert [graph.is_output(n) for n in "123"] == [False, True, True]
    assert sum("unknown to" in w for w in graph.warnings) == 3
    assert any("FancySink" in w and "output node" in w for w in graph.warnings)


def test_unknown_class_with_unnamed_widgets_keeps_none() -> None:
    ui = UI()
    ui.node("Mystery", outputs=("IMAGE",), widgets=[1, 2, 3])
    graph = parse_workflow(ui.data())
    assert graph.nodes["1"].inputs == {}
    assert any("not mapped" in w for w in graph.warnings)


# ------------------------------------------------------------------------------------ subgraphs


def test_subgraph_ids_promoted_widgets_and_passthrough() -> None:
    graph = load_workflow(FIXTURES / "subgraph_ui.json")
    assert list(graph.nodes) == ["1", "3", "4", "6", "2:1", "2:2:1"]
    assert graph.nodes["2:2:1"].inputs["blur_radius"] == 5  # the outer instance's value, not 1
    assert graph.nodes["4"].inputs == {"images": Link("1", 0)}  # input wired to an output
    assert graph.nodes["6"].inputs == {"images": Link("1", 0)}  # the bypassed instance passes it on


def test_muted_subgraph_instance_drops_everything_inside() -> None:
    data = fixture("subgraph_ui.json")
    data["nodes"][1]["mode"] = 2
    graph = parse_workflow(data)
    assert list(graph.nodes) == ["1", "3", "4", "6"]
    assert graph.nodes["3"].inputs == {} and graph.nodes["4"].inputs == {}


def test_instance_without_saved_values_uses_the_inner_widgets() -> None:
    data = fixture("subgraph_ui.json")
    del data["nodes"][1]["widgets_values"]
    data["nodes"][1]["properties"]["proxyWidgets"] = [["2", "blur_radius"]]
    assert parse_workflow(data).nodes["2:2:1"].inputs["blur_radius"] == 1


def test_inner_bypass_and_linked_outer_widget() -> None:
    data = fixture("subgraph_ui.json")
    blur = data["definitions"]["subgraphs"][1]["nodes"][0]
    blur["mode"] = 4  # bypassed inside the nested subgraph: the inverted image goes straight out
    graph = parse_workflow(data)
    assert "2:2:1" not in graph.nodes
    assert graph.nodes["3"].inputs == {"images": Link("2:1", 0)}


def test_a_subgraph_that_contains_itself_is_refused() -> None:
    data = fixture("subgraph_ui.json")
    inner = data["definitions"]["subgraphs"][1]
    inner["nodes"].append(dict(copy.deepcopy(data["nodes"][1]), id=9, inputs=[], outputs=[]))
    inner["nodes"][-1]["type"] = inner["id"]
    with pytest.raises(WorkflowError, match="contains itself"):
        parse_workflow(data)


def test_a_missing_subgraph_definition_is_refused() -> None:
    data = fixture("subgraph_ui.json")
    data["definitions"]["subgraphs"] = data["definitions"]["subgraphs"][:1]
    with pytest.raises(WorkflowError, match=r"node 2:2 \(bbbbbbbb-.*definition is missing"):
        parse_workflow(data)


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


# ------------------------------------------------------------------------------------ templates


def _templates() -> list[Path]:
    try:
        import comfyui_workflow_templates_json as package
    except ImportError:
        return []
    folder = Path(package.__file__).parent / "templates"
    return sorted(p for p in folder.glob("*.json") if not p.name.startswith("index"))


TEMPLATES = _templates()
needs_templates = pytest.mark.skipif(
    not TEMPLATES, reason="pip install comfyui-workflow-templates-json (the official workflow templates)"
)


@functools.cache
def _template_workflows() -> list[tuple[Path, dict]]:
    found = []
    for path in TEMPLATES:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("nodes"), list):
            found.append((path, data))
    return found


@needs_templates
def test_every_template_parses_or_names_what_it_cannot_handle() -> None:
    workflows = _template_workflows()
    assert len(workflows) > 500
    failures = []
    for path, data in workflows:
        try:
            graph = parse_workflow(data)
        except WorkflowError as exc:
            assert "node " in str(exc), f"{path.name}: {exc}"
            failures.append(f"{path.name}: {exc}")
            continue
        assert graph.nodes, path.name
        predict_order(graph)  # every template also orders
    rate = 1 - len(failures) / len(workflows)
    print(f"template parse rate {rate:.1%} of {len(workflows)}")
    assert rate >= 0.99, failures


@needs_templates
def test_template_subgraph_ids_and_round_trip() -> None:
    nested = 0
    for path, data in _template_workflows():
        graph = parse_workflow(data)
        again = parse_workflow(graph.to_prompt())
        assert [(n.id, n.class_type, n.inputs) for n in graph.nodes.values()] == [
            (n.id, n.class_type, n.inputs) for n in again.nodes.values()
        ], path.name
        nested += any(node_id.count(":") >= 2 for node_id in graph.nodes)
    assert nested >= 3  # templates with subgraphs inside subgraphs


def _named_values(data: dict) -> list[tuple[dict, dict]]:
    """(node, widgets_values_named) pairs: the template build's own mapping of widget values to names."""
    nodes = list(data["nodes"])
    for definition in (data.get("definitions") or {}).get("subgraphs") or []:
        nodes += definition["nodes"]
    return [(n, n["widgets_values_named"]) for n in nodes if isinstance(n.get("widgets_values_named"), dict)]


@needs_templates
def test_widget_mapping_agrees_with_the_templates_own_names() -> None:
    """The templates carry `widgets_values_named`; for classes we know, our mapping must agree.

    A few templates' names are stale (their values were edited later), so a small disagreement rate is
    allowed; a systematic error (control values, upload buttons, widget order) would exceed it.
    """
    from comfyui_headroom.memory.workflow.workflow_ui import _Scope, _UiParser

    checked = agreed = 0
    for _, data in _template_workflows():
        parser = _UiParser(data)
        root = _Scope(parser, data["nodes"], data["links"])
        for node, named in _named_values(data):
            known = lookup(node["type"])
            if known is None:
                continue
            mapped = parser.widget_values(root, node)
            expected = {k: v for k, v in named.items() if k in {s.name for s in known.widgets}}
            checked += 1
            agreed += all(mapped.get(k) == v for k, v in expected.items())
    assert checked > 1000
    assert agreed / checked >= 0.97, (agreed, checked)


@needs_templates
def test_promoted_subgraph_values_agree_with_the_templates_own_names() -> None:
    from comfyui_headroom.memory.workflow.workflow_ui import _Scope, _UiParser

    checked = 0
    for _, data in _template_workflows():
        parser = _UiParser(data)
        root = _Scope(parser, data["nodes"], data["links"])
        for node in data["nodes"]:
            if (
                node["type"] in parser.subgraphs
                and node.get("widgets_values")
                and node.get("widgets_values_named")
            ):
                promoted = {k: v.value for k, v in root.child(node).promoted.items()}
                assert promoted == node["widgets_values_named"], node["id"]
                checked += 1
    assert checked >= 50


@needs_templates
def test_parsing_and_ordering_a_template_takes_milliseconds() -> None:
    workflows = _template_workflows()
    parse_workflow(workflows[0][1])  # loads the node-type table once
    times = []
    for _, data in workflows:
        start = time.perf_counter()
        predict_order(parse_workflow(data))
        times.append(time.perf_counter() - start)
    # Measured ~1 ms median, ~20 ms for the largest (193 nodes) on a 2-core CI box: 10x headroom.
    assert statistics.median(times) < 0.010
    assert max(times) < 0.250


def test_node_type_table_is_the_current_host() -> None:
    types = known_types()
    assert host_version().startswith("ComfyUI 0.3.")
    assert len(types) > 300
    sampler = lookup("KSampler")
    assert sampler is not None and not sampler.output_node
    assert [s.name for s in sampler.widgets] == [
        "seed",
        "steps",
        "cfg",
        "sampler_name",
        "scheduler",
        "denoise",
    ]
    assert sampler.input("seed").control and not sampler.input("steps").control
    assert lookup("SaveImage").output_node and lookup("PreviewImage").output_node
    assert lookup("LoadImage").input("image").upload
    assert lookup("GetImageSize").unique_signature
    assert lookup("NoSuchNode") is None


def test_node_dataclasses() -> None:
    node = Node("1", "X", {"a": Link("2", 0)})
    assert node.title is None and node.output_node is None
    with pytest.raises(AttributeError):
        Link("1", 0).node = "2"  # type: ignore[misc]


def test_newer_hosts_value_nodes_are_in_the_table() -> None:
    # Hand-written from the 2026 host's nodes_logic.py / nodes_math.py (memory/data/newer_nodes.json).
    switch = lookup("ComfySwitchNode")
    assert switch is not None and switch.lazy_inputs == {"on_false", "on_true"}
    assert [s.name for s in switch.widgets] == ["switch"]
    math = lookup("ComfyMathExpression")
    assert math is not None and math.outputs == ("FLOAT", "INT", "BOOLEAN")
    # The table dumped from 0.3.64 wins where it knows a class.
    assert lookup("PrimitiveInt").input("value").control


def test_a_math_expression_node_gets_its_expression_and_its_autogrow_links() -> None:
    data = {
        "nodes": [
            {"id": 1, "type": "PrimitiveFloat", "mode": 0, "inputs": [], "widgets_values": [5],
             "outputs": [{"name": "FLOAT", "type": "FLOAT", "links": [1]}]},
            {"id": 2, "type": "ComfyMathExpression", "mode": 0, "widgets_values": ["floor(a * 16) + 1"],
             "inputs": [{"name": "values.a", "type": "FLOAT,INT,BOOLEAN", "link": 1},
                        {"name": "values.b", "type": "FLOAT,INT,BOOLEAN", "link": None}],
             "outputs": [{"name": "INT", "type": "INT", "links": []}]},
        ],
        "links": [[1, 1, 0, 2, 0, "FLOAT"]],
    }  # fmt: skip
    graph = parse_workflow(data)
    assert graph.nodes["2"].inputs == {"expression": "floor(a * 16) + 1", "values.a": Link("1", 0)}
    assert graph.warnings == []
