"""memory/workflow/graph.py: API prompts and UI workflows into one Graph, as graphToPrompt would.

Twins, mute and bypass, widgets, unknown types and subgraphs here; group nodes, refusals and the
official templates in test_graph_group_nodes.py, test_graph_refusals.py and test_graph_templates.py.
"""

from __future__ import annotations

import copy
import json

import pytest

from comfyui_headroom.memory.workflow.graph import Link, WorkflowError, load_workflow, parse_workflow
from comfyui_headroom.memory.workflow.node_types import lookup, node_table_host
from comfyui_headroom.memory.workflow.order import predict_order
from headroom_testing.graph_workflows import FIXTURES, UI, fixture, signature, to_prompt

# ------------------------------------------------------------------------------------------ twins


@pytest.mark.parametrize("name", ["image_ops", "subgraph", "group_node"])
def test_api_and_ui_twins_give_the_same_graph(name: str) -> None:
    ui = load_workflow(FIXTURES / f"{name}_ui.json")
    api = load_workflow(FIXTURES / f"{name}_api.json")
    assert (ui.format, api.format) == ("ui", "api")
    assert signature(ui) == signature(api)
    assert ui.warnings == [] and api.warnings == []
    strip = lambda prompt: {k: (v["class_type"], v["inputs"]) for k, v in prompt.items()}  # noqa: E731
    assert strip(to_prompt(ui)) == strip(to_prompt(api)) == strip(json.loads(json.dumps(to_prompt(api))))


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
        "3": {"class_type": "LatentBatch", "inputs": {"sizes": {"__value__": [1, 2]}, "pair": ["x", 0, 1]}},
    }
    graph = parse_workflow(prompt)
    assert list(graph.nodes) == ["9", "8", "4", "3"]  # the prompt's own order
    assert graph.nodes["8"].inputs == {"samples": Link("3", 0), "vae": Link("4", 2)}
    assert graph.nodes["3"].inputs == {"sizes": [1, 2], "pair": ["x", 0, 1]}  # unwrapped; not a link
    assert graph.nodes["9"].title is None
    assert to_prompt(graph)["3"]["inputs"]["sizes"] == {"__value__": [1, 2]}


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
    assert any("2 widget values" in w and node_table_host() in w for w in graph.warnings)


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
