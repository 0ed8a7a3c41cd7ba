"""Values that reach a node through links (memory/workflow/values.py), and what the order, the workload and
the plan make of them: primitives, the lazy If/Else switch, math expressions, against the official 2026
templates too."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.memory.planning.extract import DEFAULT_STEPS, _Extractor, workload_from_graph
from comfyui_headroom.memory.planning.gpus import MODEL
from comfyui_headroom.memory.planning.latents import Shape
from comfyui_headroom.memory.planning.loaders import node_io
from comfyui_headroom.memory.workflow.graph import Link, parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order
from comfyui_headroom.memory.workflow.values import MATH_FUNCTIONS, Evaluator, Value, math_expression
from headroom_testing.official_templates import official_template

ROOT = Path(__file__).resolve().parents[2]


def _api(**nodes: tuple[str, dict[str, Any]]) -> dict:
    """An API prompt from id=(class_type, inputs); ids are the keyword names without their "n"."""
    return {k.removeprefix("n"): {"class_type": c, "inputs": i} for k, (c, i) in nodes.items()}


def _eval(data: dict, node: str, output: int = 0) -> Value:
    return Evaluator(parse_workflow(data)).output(Link(node, output))


# ------------------------------------------------------------------------------------ evaluators


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("PrimitiveInt", 20),
        ("PrimitiveFloat", 3.5),
        ("PrimitiveBoolean", False),
        ("PrimitiveString", "a cat"),
        ("PrimitiveStringMultiline", "two\nlines"),
    ],
)
def test_a_primitive_passes_its_value_through_links(kind: str, value: Any) -> None:
    data = _api(n1=(kind, {"value": value}), n2=(kind, {"value": ["1", 0]}))
    assert _eval(data, "2") == Value((value,))


def test_a_switch_passes_the_chosen_branch_and_none_when_it_is_unconnected() -> None:
    nodes = {
        "n1": ("PrimitiveInt", {"value": 20}),
        "n2": ("PrimitiveInt", {"value": 4}),
        "n3": ("PrimitiveBoolean", {"value": True}),
    }
    on = _api(
        **nodes, n4=("ComfySwitchNode", {"switch": ["3", 0], "on_false": ["1", 0], "on_true": ["2", 0]})
    )
    assert _eval(on, "4") == Value((4,))
    on["3"]["inputs"]["value"] = False
    assert _eval(on, "4") == Value((20,))
    # A constant condition; the chosen input unconnected: the host's node outputs None.
    half = _api(**nodes, n4=("ComfySwitchNode", {"switch": True, "on_false": ["1", 0]}))
    assert _eval(half, "4") == Value((None,))
    # Python truthiness, as `if switch` in the host: 0 is false.
    zero = _api(**nodes, n4=("ComfySwitchNode", {"switch": 0, "on_false": ["1", 0], "on_true": ["2", 0]}))
    assert _eval(zero, "4").value == 20


def test_a_switch_with_an_unknown_condition_may_give_either_branch_and_says_why() -> None:
    data = _api(
        n1=("PrimitiveInt", {"value": 20}),
        n2=("PrimitiveInt", {"value": 4}),
        n3=("SomeCustomToggle", {}),
        n4=("ComfySwitchNode", {"switch": ["3", 0], "on_false": ["1", 0], "on_true": ["2", 0]}),
    )
    got = _eval(data, "4")
    assert not got.exact and got.value is None
    assert got.candidates == (20, 4)
    assert "node 3 (SomeCustomToggle)" in got.unknown
    # Lists (unhashable) as branch values; equal candidates once.
    data["1"]["inputs"]["value"] = data["2"]["inputs"]["value"] = [1, 2]
    assert _eval(data, "4").candidates == ([1, 2],)
    # An unknown branch leaves nothing known.
    data["2"] = {"class_type": "SomeCustomInt", "inputs": {}}
    assert _eval(data, "4").candidates == ()


def test_live_inputs_leave_out_the_branch_the_switch_does_not_take() -> None:
    data = _api(
        n1=("PrimitiveInt", {"value": 1}),
        n2=("PrimitiveInt", {"value": 2}),
        n4=("ComfySwitchNode", {"switch": False, "on_false": ["1", 0], "on_true": ["2", 0]}),
    )
    values = Evaluator(parse_workflow(data))
    assert values.switch_taken("4") == "on_false"
    assert set(values.live_inputs("4")) == {"switch", "on_false"}
    assert values.switch_taken("1") is None and set(values.live_inputs("1")) == {"value"}


def test_the_math_expression_is_the_hosts_simpleeval_with_its_functions() -> None:
    data = _api(
        n1=("PrimitiveFloat", {"value": 5}),
        n2=("PrimitiveFloat", {"value": 16}),
        n3=(
            "ComfyMathExpression",
            {"expression": "floor(a * b) + 1", "values.a": ["1", 0], "values.b": ["2", 0]},
        ),
    )
    assert [_eval(data, "3", i).value for i in range(3)] == [81.0, 81, True]
    assert math_expression("a / 2", {"a": 1080}) == (540.0, 540, True)
    assert math_expression("sum(values) - max(a, b)", {"a": 2, "b": 3}) == (2.0, 2, True)
    assert math_expression("a - a", {"a": 2})[2] is False
    assert math_expression("2 ** 10", {}) == (1024.0, 1024, True)
    assert math_expression("int(7 / 2)", {})[1] == 3
    assert set(MATH_FUNCTIONS) == {
        *("sum", "min", "max", "abs", "round", "pow", "sqrt", "ceil", "floor", "log", "log2", "log10"),
        *("sin", "cos", "tan", "int", "float"),
    }


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("c + 1", "fails"),  # an unconnected name: simpleeval's NameNotDefined
        ("pow(a, 5000)", "Exponent"),  # the host's cap on pow()
        ("   ", "empty"),
        ("a > 1", ""),  # a bool is a number here (the host checks int/float, and bool is an int)
        ("'text'", "number"),
        ("__import__('os')", "fails"),  # simpleeval refuses it
    ],
)
def test_a_math_expression_the_host_would_fail_on_is_unknown(expression: str, error: str) -> None:
    data = _api(
        n1=("PrimitiveFloat", {"value": 5}),
        n3=("ComfyMathExpression", {"expression": expression, "values.a": ["1", 0]}),
    )
    got = _eval(data, "3", 1)
    if not error:
        assert got == Value((1,))
        return
    assert not got.exact and got.candidates == ()
    assert "node 3 (ComfyMathExpression)" in got.unknown and error in got.unknown


def test_a_math_input_that_is_not_known_makes_the_result_unknown_and_names_the_node() -> None:
    data = _api(
        n1=("GetImageSize", {"image": ["9", 0]}),
        n3=("ComfyMathExpression", {"expression": "a / 2", "values.a": ["1", 0]}),
    )
    got = _eval(data, "3", 1)
    assert got.candidates == () and "node 1 (GetImageSize) output 0" in got.unknown


def test_not_and_cycles() -> None:
    data = _api(n1=("PrimitiveBoolean", {"value": False}), n2=("ComfyNotNode", {"value": ["1", 0]}))
    assert _eval(data, "2") == Value((True,))
    loop = _api(n1=("PrimitiveInt", {"value": ["2", 0]}), n2=("PrimitiveInt", {"value": ["1", 0]}))
    got = _eval(loop, "1")
    assert not got.exact and "cycle" in got.unknown


# ------------------------------------------------------------------------------------------ order


def _switched_prompt(condition: Any) -> dict:
    """Two UNET files behind a switch, a sampler on the switch's output."""
    return _api(
        n1=("UNETLoader", {"unet_name": "a.safetensors", "weight_dtype": "default"}),
        n2=("UNETLoader", {"unet_name": "b.safetensors", "weight_dtype": "default"}),
        n3=("PrimitiveBoolean", {"value": condition}) if not isinstance(condition, str) else (condition, {}),
        n4=("ComfySwitchNode", {"switch": ["3", 0], "on_false": ["1", 0], "on_true": ["2", 0]}),
        n5=("ModelSamplingSD3", {"model": ["4", 0], "shift": 5.0}),
        n6=("SaveModel", {"model": ["5", 0], "filename_prefix": "x"}),
    )


def test_the_order_runs_only_the_branch_the_switch_chooses() -> None:
    assert predict_order(parse_workflow(_switched_prompt(False))) == ["3", "1", "4", "5", "6"]
    assert predict_order(parse_workflow(_switched_prompt(True))) == ["3", "2", "4", "5", "6"]
    # Unknown condition: both branches, as before (conservative).
    both = predict_order(parse_workflow(_switched_prompt("SomeCustomToggle")))
    assert {"1", "2"} <= set(both) and both.index("4") > max(both.index("1"), both.index("2"))


def test_an_untaken_branch_still_runs_when_something_else_needs_it() -> None:
    data = _switched_prompt(False)
    data["7"] = {"class_type": "SaveModel", "inputs": {"model": ["2", 0], "filename_prefix": "y"}}
    assert "2" in predict_order(parse_workflow(data))


# --------------------------------------------------------------------------------------- workload


def _sampler_prompt(**sampler: Any) -> dict:
    inputs = {
        "model": ["1", 0],
        "positive": ["3", 0],
        "negative": ["3", 0],
        "latent_image": ["4", 0],
        "add_noise": "enable",
        "noise_seed": 1,
        "steps": 20,
        "cfg": 3.5,
        "sampler_name": "euler",
        "scheduler": "simple",
        "start_at_step": 0,
        "end_at_step": 10000,
        "return_with_leftover_noise": "disable",
    } | sampler
    return _api(
        n1=(
            "UNETLoader",
            {"unet_name": "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors", "weight_dtype": "default"},
        ),
        n2=("CLIPLoader", {"clip_name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "type": "wan"}),
        n3=("CLIPTextEncode", {"clip": ["2", 0], "text": "x"}),
        n4=("EmptyHunyuanLatentVideo", {"width": 640, "height": 480, "length": ["11", 1], "batch_size": 2}),
        n5=("KSamplerAdvanced", inputs),
        n6=("SaveLatent", {"samples": ["5", 0], "filename_prefix": "x"}),
        n10=("PrimitiveFloat", {"value": 5}),
        n11=("ComfyMathExpression", {"expression": "floor(a * 16) + 1", "values.a": ["10", 0]}),
        n12=("PrimitiveInt", {"value": 8}),
        n13=("PrimitiveInt", {"value": 3}),
        n14=("PrimitiveFloat", {"value": 1.0}),
        n15=("SomeCustomInt", {}),
    )


def _extract(data: dict) -> tuple[_Extractor, Any]:
    graph = parse_workflow(data)
    extractor = _Extractor(graph, predict_order(graph), node_io, None)
    return extractor, workload_from_graph(graph, predict_order(graph))


def _sampler_step(workload: Any) -> Any:
    return next(s for s in workload.steps if s.node_id == "5")


def test_steps_range_cfg_and_shape_are_read_through_links() -> None:
    data = _sampler_prompt(steps=["12", 0], start_at_step=["13", 0], cfg=["14", 0])
    extractor, workload = _extract(data)
    assert _sampler_step(workload).evaluations == 8 - 3
    assert extractor._cfg_on("5") is False
    assert extractor.latents.step_shape("5").value == Shape(640, 480, frames=81, batch=2)
    assert workload.notes == ()
    # cfg 1 costs half the compute of cfg 3.5 at the same steps (one batch instead of cond + uncond),
    # but for the fixed overhead of each model call, which batching cond and uncond does not double
    _, with_cfg = _extract(_sampler_prompt(steps=["12", 0], start_at_step=["13", 0]))
    fixed = _sampler_step(workload).evaluations * MODEL.kernels.overhead_s
    assert _sampler_step(with_cfg).compute_s - fixed == pytest.approx(
        2 * (_sampler_step(workload).compute_s - fixed)
    )


def test_values_not_known_before_the_run_take_stated_conservative_values() -> None:
    data = _sampler_prompt(steps=["15", 0], cfg=["15", 0])
    _, workload = _extract(data)
    assert _sampler_step(workload).evaluations == DEFAULT_STEPS
    notes = "\n".join(workload.notes)
    assert "node 5 (KSamplerAdvanced) input 'steps' is not known before the run" in notes
    assert f"{DEFAULT_STEPS} assumed" in notes and "node 15 (SomeCustomInt)" in notes
    assert "input 'cfg'" in notes and "cfg != 1 (cond + uncond) assumed" in notes
    # A switch on an unknown condition: the most steps of any branch.
    data["16"] = {
        "class_type": "ComfySwitchNode",
        "inputs": {"switch": ["15", 0], "on_false": ["12", 0], "on_true": 30},
    }
    data["5"]["inputs"]["steps"] = ["16", 0]
    _, workload = _extract(data)
    assert _sampler_step(workload).evaluations == 30
    assert any("30 assumed (of [8, 30])" in n for n in workload.notes)


def test_a_size_not_known_before_the_run_is_named() -> None:
    data = _sampler_prompt()
    data["4"]["inputs"] |= {"width": ["15", 0], "length": 33}
    extractor, workload = _extract(data)
    assert any(
        "node 4 (EmptyHunyuanLatentVideo) input 'width' is not known before the run (node 15 (SomeCustomInt)"
        in note
        for note in workload.notes
    )
    assert extractor.latents.step_shape("5").value is None  # the default size then applies, with a note
    assert any("1024x1024, 1 frame assumed" in note for note in workload.notes)


# -------------------------------------------------------------------------------------- templates


_template = official_template


def _lightning(data: dict, on: bool) -> dict:
    """Flip the template's "Enable Lightning LoRA" switch (the PrimitiveBoolean inside its subgraph)."""
    data = copy.deepcopy(data)
    (subgraph,) = data["definitions"]["subgraphs"]
    (toggle,) = [n for n in subgraph["nodes"] if n["type"] == "PrimitiveBoolean"]
    toggle["widgets_values"] = [on]
    return data


@pytest.mark.parametrize(("lightning", "steps", "split", "cfg"), [(False, 20, 10, 3.5), (True, 4, 2, 1.0)])
def test_wan22_t2v_template_plans_the_path_its_switch_selects(
    lightning: bool, steps: int, split: int, cfg: float
) -> None:
    graph = parse_workflow(_lightning(_template("video_wan2_2_14B_t2v"), lightning))
    order = predict_order(graph)
    values = Evaluator(graph)
    high, low = "128:81", "128:78"  # the high-noise and low-noise experts' KSamplerAdvanced
    assert values.input(high, "steps") == values.input(low, "steps") == Value((steps,))
    assert values.input(high, "end_at_step") == values.input(low, "start_at_step") == Value((split,))
    assert values.input(high, "cfg") == Value((cfg,))
    loras = {"128:83", "128:85"}  # LoraLoaderModelOnly, on the switches' on_true branches
    assert (loras <= set(order)) is lightning and bool(loras & set(order)) is lightning
    workload = workload_from_graph(graph, order)
    by_node = {s.node_id: s for s in workload.steps}
    assert by_node[high].evaluations == split and by_node[low].evaluations == steps - split
    kinds = {c.kind for c in workload.components}
    assert ("lora" in kinds) is lightning
    for node in (high, low):
        used = {c.kind for c in workload.components if c.id in by_node[node].uses}
        assert used == ({"diffusion_model", "lora"} if lightning else {"diffusion_model"})
    assert not any("not known before the run" in n for n in workload.notes)
    extractor = _Extractor(graph, order, node_io, None)
    assert extractor._cfg_on(high) is (cfg != 1.0)
    assert extractor.latents.step_shape(high).value.frames == 81  # floor(5 * 16) + 1


def test_wan22_t2v_template_lightning_costs_a_fraction_of_the_default_compute() -> None:
    data = _template("video_wan2_2_14B_t2v")
    seconds = []
    for on in (False, True):
        graph = parse_workflow(_lightning(data, on))
        workload = workload_from_graph(graph, predict_order(graph))
        seconds.append(sum(s.compute_s for s in workload.steps if s.label == "KSamplerAdvanced"))
    # 20 steps with cond + uncond against 4 steps at cfg 1: 10x the sampler compute (the LoRAs' own
    # few FLOPs aside).
    assert seconds[0] == pytest.approx(10 * seconds[1], rel=0.01)


def test_the_shipped_wan22_workflow_is_planned_with_its_real_steps_and_cfg() -> None:
    path = ROOT / "example_workflows" / "Wan 2.2 14B text to video.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    graph = parse_workflow(data)
    order = predict_order(graph)
    workload = workload_from_graph(graph, order)
    extractor = _Extractor(graph, order, node_io, None)
    samplers = [s for s in workload.steps if s.label == "KSamplerAdvanced"]
    assert [s.evaluations for s in samplers] == [10, 10]
    assert all(extractor._cfg_on(s.node_id) for s in samplers)
    assert extractor.latents.step_shape(samplers[0].node_id).value == Shape(640, 640, frames=81, batch=1)
