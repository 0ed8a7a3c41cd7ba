"""Hostile input to the planner, round 3 (issue #31): nothing stalls it, nothing recurses with the prompt's
length, and nothing the host refuses is planned as "fits"."""

from __future__ import annotations

import copy
import inspect
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.cli import main
from comfyui_headroom.memory.planning import planner, report
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.extract import workload_from_graph
from comfyui_headroom.memory.planning.pipeline import plan_workflow
from comfyui_headroom.memory.units import GiB
from comfyui_headroom.memory.workflow.graph import Link, WorkflowError, parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order
from comfyui_headroom.memory.workflow.values import MAX_RESULT_BITS, Evaluator, math_expression

FLUX = Path(__file__).resolve().parents[2] / "example_workflows" / "api" / "Flux Dev text to image.json"
BUDGET = Budget.from_card(8 * GiB, 32 * GiB)


def sd(width: Any = 512, **extra: dict[str, Any]) -> dict[str, Any]:
    prompt = {
        "1": {
            "class_type": "CheckpointLoaderSimple",
            "inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"},
        },
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["1", 1]}},
        "3": {"class_type": "EmptyLatentImage", "inputs": {"width": width, "height": 512, "batch_size": 1}},
        "4": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["1", 0],
                "seed": 1,
                "steps": 20,
                "cfg": 7.0,
                "sampler_name": "euler",
                "scheduler": "normal",
                "denoise": 1.0,
                "positive": ["2", 0],
                "negative": ["2", 0],
                "latent_image": ["3", 0],
            },
        },  # fmt: skip
        "5": {"class_type": "VAEDecode", "inputs": {"samples": ["4", 0], "vae": ["1", 2]}},
        "6": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "x"}},
    }
    prompt.update(extra)
    return prompt


def run(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    code = main(["plan", str(path), "--vram", "8GB", "--ram", "32GB"])
    out = capsys.readouterr()
    return code, out.out, out.err


@contextmanager
def shallow_stack(spare: int = 200) -> Iterator[None]:
    """Planning under a recursion limit ``spare`` frames above the current depth: any walk that recurses
    once per node of a chain of thousands fails here."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + spare)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def test_a_long_chain_plans_without_recursion() -> None:
    """2,000 math nodes carry the width and 2,000 latent nodes follow the sampler: every walk (values,
    carried models, streaming, order) is iterative, so the depth does not grow with the chain."""
    extra: dict[str, Any] = {"m0": {"class_type": "PrimitiveInt", "inputs": {"value": 768}}}
    for i in range(1, 2000):
        source = [f"m{i - 1}", 1 if i > 1 else 0]
        extra[f"m{i}"] = {
            "class_type": "ComfyMathExpression",
            "inputs": {"expression": "a", "values.a": source},
        }
    prompt = sd(["m1999", 1], **extra)
    previous = ["4", 0]
    for i in range(2000):
        prompt[f"u{i}"] = {
            "class_type": "LatentUpscaleBy",
            "inputs": {"samples": previous, "upscale_method": "nearest-exact", "scale_by": 1.0},
        }
        previous = [f"u{i}", 0]
    prompt["5"]["inputs"]["samples"] = previous
    with shallow_stack():
        planned = plan_workflow(prompt, BUDGET)
    assert planned.plan is not None and planned.plan.feasible
    assert Evaluator(planned.graph).input("3", "width").value == 768
    assert len(planned.order) == 6 + 4000


def test_a_value_cycle_reads_as_unknown_naming_the_node() -> None:
    graph = parse_workflow(
        {
            "a": {"class_type": "ComfyMathExpression", "inputs": {"expression": "a", "values.a": ["b", 1]}},
            "b": {"class_type": "ComfyMathExpression", "inputs": {"expression": "a", "values.a": ["a", 1]}},
        }
    )
    got = Evaluator(graph).output(Link("a", 1))
    assert not got.exact and "a dependency cycle" in got.unknown


@pytest.mark.parametrize(
    "expression",
    [
        "4000000**4000000",
        "(9**4000)**4000",
        "pow(pow(9, 4000), 4000)",
        "round(5, -4000000)",
        "(1 << 4000) * (1 << 4000)",
    ],
)
def test_an_expression_that_would_build_a_huge_integer_is_not_computed(expression: str) -> None:
    """The host caps exponents, not cost: 1 KB of JSON froze every route for 80 s. Refused before the
    operation, by the size of its result."""
    with pytest.raises(ValueError, match="too large to evaluate before the run"):
        math_expression(expression, {"a": 512})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [("2**10", 1024), ("a * b", 512 * 3), ("round(1234, -2)", 1200), ("1 << 12", 4096), ("pow(3, 4)", 81)],
)
def test_ordinary_expressions_keep_the_hosts_results(expression: str, expected: int) -> None:
    assert math_expression(expression, {"a": 512, "b": 3})[1] == expected


def test_the_bound_is_far_above_any_size() -> None:
    assert math_expression(f"2**{MAX_RESULT_BITS - 1} > 1", {})[2] is True


def test_the_hostile_expression_in_a_prompt_is_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = {
        "class_type": "ComfyMathExpression",
        "inputs": {"expression": "4000000**4000000", "values.a": 512},
    }
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(sd(["h", 1], h=hostile)))
    code, out, _ = run(capsys, path)
    assert code == 0
    assert "node 3 (EmptyLatentImage) input 'width' is not known before the run" in out
    assert "too large to evaluate before the run" in out


def _switched(on_false: str, on_true: str) -> dict[str, Any]:
    prompt = sd(
        c={"class_type": "StringCompare", "inputs": {"string_a": "a", "string_b": "b", "mode": "Starts With",
                                                     "case_sensitive": True}},
        big={"class_type": "EmptyLatentImage", "inputs": {"width": 4096, "height": 4096, "batch_size": 1}},
        s={"class_type": "ComfySwitchNode", "inputs": {"switch": ["c", 0], "on_false": [on_false, 0],
                                                        "on_true": [on_true, 0]}},
    )  # fmt: skip
    prompt["4"]["inputs"]["latent_image"] = ["s", 0]
    return prompt


def test_a_run_time_switch_plans_the_larger_branch_either_way_round() -> None:
    peaks = []
    for branches in (("3", "big"), ("big", "3")):
        planned = plan_workflow(_switched(*branches), BUDGET)
        notes = planned.workload.notes
        assert any(
            "node s (ComfySwitchNode) input 'switch' is not known" in n and "both branches" in n
            for n in notes
        )
        assert any("the largest branch (4096 x 4096)" in n for n in notes)
        peaks.append(
            planned.workload.steps[[s.node_id for s in planned.workload.steps].index("4")].activation
        )
    assert peaks[0] == peaks[1]
    small = plan_workflow(sd(), BUDGET).workload
    assert peaks[0] > 10 * max(s.activation for s in small.steps if s.node_id == "4")


def _link(prompt: dict[str, Any], source: str, slot: int, **node: dict[str, Any]) -> dict[str, Any]:
    prompt = copy.deepcopy(prompt) | node
    prompt["4"]["inputs"]["model"] = [source, slot]
    return prompt


UNET = {
    "class_type": "UNETLoader",
    "inputs": {"unet_name": "flux1-dev.safetensors", "weight_dtype": "default"},
}
VAE = {"class_type": "VAELoader", "inputs": {"vae_name": "ae.safetensors"}}
SWITCH = {
    "class_type": "ComfySwitchNode",
    "inputs": {"switch": True, "on_true": ["1", 0], "on_false": ["1", 0]},
}


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        (_link(sd(), "u", 1, u=UNET), "output slot 1 of node u (UNETLoader), which has 1 output(s)"),
        (_link(sd(), "u", 4, u=UNET), "output slot 4 of node u (UNETLoader)"),
        (_link(sd(), "v", 0, v=VAE), "takes MODEL but links to output 0 of node v (VAELoader), a VAE"),
        (_link(sd(), "s", 3, s=SWITCH), "output slot 3 of node s (ComfySwitchNode)"),
        (
            sd(st={"class_type": "HeadroomStreamModel", "inputs": {"model": ["1", 0], "vram_budget": "lots"}})
            | {"4": _link(sd(), "st", 0)["4"]},
            "node st (HeadroomStreamModel) input 'vram_budget'",
        ),
    ],
)
def test_a_prompt_the_host_refuses_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prompt: dict[str, Any], message: str
) -> None:
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(prompt))
    code, out, err = run(capsys, path)
    assert code == 2 and not out
    assert message in err and "ComfyUI rejects this prompt" in err


def test_a_model_file_the_plan_cannot_read_is_never_fits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt = {
        "1": {"class_type": "LoadMysteryModel", "inputs": {"model_name": "mystery_fp16.safetensors"}},
        "2": {"class_type": "RunMystery", "inputs": {"model": ["1", 0]}},
        "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "x"}},
    }
    path = tmp_path / "mystery.json"
    path.write_text(json.dumps(prompt))
    code, out, _ = run(capsys, path)
    assert "fits: yes" not in out
    assert "fits: not known: 1 model file(s) not counted" in out
    assert "input 'model_name' names mystery_fp16.safetensors, a model this plan does not count" in out


def _template(name: str) -> Path:
    package = pytest.importorskip("comfyui_workflow_templates_json")
    path = Path(package.__file__).parent / "templates" / name
    if not path.is_file():
        pytest.skip(f"{name} is not in this version of the templates package")
    return path


def test_a_subgraph_output_linked_to_nothing_is_refused_naming_the_input(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The official video_ltx2_i2v_lora's subgraph output points at a link that does not exist: the
    frontend sends SaveVideo without its video and the host refuses it; the plan used to say "fits, 0 B"."""
    code, out, err = run(capsys, _template("video_ltx2_i2v_lora.json"))
    assert code == 2 and not out
    assert "node 75 (SaveVideo) input 'video' is fed by subgraph node 92" in err
    assert "link 265 does not exist" in err


def test_copies_of_one_model_share_their_step_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Flux template 60 times (a loader per copy): the cost arrays depend on what the components
    are, not which copy, so their number does not grow with the copies (planning stays linear)."""
    base = json.loads(FLUX.read_text())

    def copies(n: int) -> dict[str, Any]:
        prompt: dict[str, Any] = {}
        for i in range(n):
            for node_id, node in copy.deepcopy(base).items():
                for name, value in node["inputs"].items():
                    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
                        node["inputs"][name] = [f"{i}_{value[0]}", value[1]]
                    if name in ("seed", "noise_seed"):
                        node["inputs"][name] = i
                prompt[f"{i}_{node_id}"] = node
        return prompt

    counts = []
    original = planner._Problem._step_cost
    for n in (20, 60):
        computed: list[int] = []

        def counted(self: Any, s: int, computed: list[int] = computed) -> Any:
            computed.append(s)
            return original(self, s)

        monkeypatch.setattr(planner._Problem, "_step_cost", counted)
        graph = parse_workflow(copies(n))
        workload = workload_from_graph(graph, predict_order(graph))
        assert planner.plan(workload, BUDGET, Hardware.pcie(4)).feasible
        counts.append(len(computed))
    assert counts[1] == counts[0]


def test_a_link_the_host_accepts_is_not_refused() -> None:
    """The checks follow the host's validate_node_input: "*" takes anything, and a few output slots past
    the table's stay allowed for inputs that are not models (classes gain outputs in newer hosts)."""
    prompt = sd(
        s={
            "class_type": "ComfySwitchNode",
            "inputs": {"switch": True, "on_true": ["1", 0], "on_false": ["1", 0]},
        }
    )
    prompt["4"]["inputs"]["model"] = ["s", 0]
    prompt["p"] = {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}}
    prompt["g"] = {"class_type": "GetImageSize", "inputs": {"image": ["p", 0]}}
    prompt["n"] = {"class_type": "PreviewAny", "inputs": {"source": ["g", 0]}}
    try:
        parse_workflow(prompt)
    except WorkflowError as exc:  # pragma: no cover - the assertion below says what failed
        pytest.fail(str(exc))


def test_a_long_plan_draws_only_the_nodes_that_use_models_or_says_why_not() -> None:
    """--png on a 20,001-node chain was killed at 4.9 GB: the timeline draws the nodes computing with a
    model when all of them would not fit, and refuses with a line past that."""
    prompt = sd()
    previous = ["4", 0]
    for i in range(report.MAX_TIMELINE_STEPS + 50):
        prompt[f"u{i}"] = {
            "class_type": "LatentUpscaleBy",
            "inputs": {"samples": previous, "upscale_method": "nearest-exact", "scale_by": 1.0},
        }
        previous = [f"u{i}", 0]
    prompt["5"]["inputs"]["samples"] = previous
    planned = plan_workflow(prompt, BUDGET)
    steps, comps = report._drawn_steps(planned.plan, planned.workload)
    assert [sp.step.label for sp in steps] == ["CLIPTextEncode", "KSampler", "VAEDecode"]
    assert len(comps) == 3
    many = {}
    for i in range(report.MAX_TIMELINE_COMPONENTS + 1):  # a checkpoint per copy, each its own seed
        copy_i = json.loads(json.dumps(sd()).replace('["', f'["{i}_'))
        copy_i["4"]["inputs"]["seed"] = i
        copy_i["1"]["inputs"]["ckpt_name"] = f"model_{i}.safetensors"
        many |= {f"{i}_{n}": node for n, node in copy_i.items()}
    planned = plan_workflow(many, BUDGET)
    with pytest.raises(report.TimelineTooLarge, match="a timeline is drawn for up to"):
        report._drawn_steps(planned.plan, planned.workload)


@pytest.mark.parametrize("stored", [[1], {"seed": 1}])
def test_a_sampler_without_its_steps_value_plans_the_frontends_default(stored: Any) -> None:
    """A UI workflow whose KSampler stores fewer widget values (or a dict): the frontend fills the defaults
    (20 steps); the plan used 1 step and said nothing."""
    ui = {
        "nodes": [
            {
                "id": 1,
                "type": "CheckpointLoaderSimple",
                "inputs": [],
                "outputs": [
                    {"name": "MODEL", "type": "MODEL", "links": [1]},
                    {"name": "CLIP", "type": "CLIP", "links": [2, 3]},
                    {"name": "VAE", "type": "VAE", "links": [6]},
                ],
                "widgets_values": ["v1-5-pruned-emaonly.safetensors"],
            },
            {
                "id": 2,
                "type": "CLIPTextEncode",
                "inputs": [{"name": "clip", "type": "CLIP", "link": 2}],
                "outputs": [{"name": "CONDITIONING", "type": "CONDITIONING", "links": [4, 5]}],
                "widgets_values": ["a cat"],
            },
            {
                "id": 3,
                "type": "EmptyLatentImage",
                "inputs": [],
                "outputs": [{"name": "LATENT", "type": "LATENT", "links": [7]}],
                "widgets_values": [512, 512, 1],
            },
            {
                "id": 4,
                "type": "KSampler",
                "inputs": [
                    {"name": "model", "type": "MODEL", "link": 1},
                    {"name": "positive", "type": "CONDITIONING", "link": 4},
                    {"name": "negative", "type": "CONDITIONING", "link": 5},
                    {"name": "latent_image", "type": "LATENT", "link": 7},
                ],
                "outputs": [{"name": "LATENT", "type": "LATENT", "links": [8]}],
                "widgets_values": [1],
            },
            {
                "id": 5,
                "type": "VAEDecode",
                "inputs": [
                    {"name": "samples", "type": "LATENT", "link": 8},
                    {"name": "vae", "type": "VAE", "link": 6},
                ],
                "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [9]}],
            },
            {
                "id": 6,
                "type": "SaveImage",
                "inputs": [{"name": "images", "type": "IMAGE", "link": 9}],
                "outputs": [],
                "widgets_values": ["x"],
            },
        ],
        "links": [
            [1, 1, 0, 4, 0, "MODEL"],
            [2, 1, 1, 2, 0, "CLIP"],
            [4, 2, 0, 4, 1, "CONDITIONING"],
            [5, 2, 0, 4, 2, "CONDITIONING"],
            [6, 1, 2, 5, 1, "VAE"],
            [7, 3, 0, 4, 3, "LATENT"],
            [8, 4, 0, 5, 0, "LATENT"],
            [9, 5, 0, 6, 0, "IMAGE"],
        ],
        "version": 0.4,
    }
    ui["nodes"][3]["widgets_values"] = stored
    planned = plan_workflow(ui, BUDGET)
    assert [s.evaluations for s in planned.workload.steps if s.node_id == "4"] == [20]
    assert any(
        "node 4 (KSampler) input 'steps' has no value in the workflow" in n for n in planned.workload.notes
    )


def test_a_wan_model_with_an_sd_checkpoints_own_encoders_is_refused_at_load() -> None:
    """The pairing check read only text_encoder_*: a Wan DiT with an SD checkpoint's CLIP failed at the
    sampler with a raw "mat1 and mat2 shapes cannot be multiplied"."""
    from types import SimpleNamespace

    from comfyui_headroom.nodes.input_checks import OffloadError, check_pairing

    def info(kind: str, family: str) -> Any:
        return SimpleNamespace(kind=kind, family=family)

    files = {
        "checkpoint": ("checkpoint", Path("sd15.safetensors")),
        "diffusion_model": ("diffusion_model", Path("wan.safetensors")),
    }
    infos = {
        "checkpoint": [info("diffusion_model", "sd15"), info("text_encoder", "clip_l"), info("vae", "sd15")],
        "diffusion_model": [info("diffusion_model", "wan21")],
    }
    with pytest.raises(
        OffloadError, match="input checkpoint is a clip_l text encoder, but a wan21 diffusion model"
    ):
        check_pairing(files, infos, "wan")
    infos["diffusion_model"] = [info("diffusion_model", "sd15")]
    check_pairing(files, infos, "stable_diffusion")  # the same family: accepted


def test_a_sampler_whose_model_cannot_take_its_conditioning_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #43: a Wan DiT with an SD checkpoint's own CLIP still failed with the raw "mat1 and mat2
    shapes cannot be multiplied" at the sampler; the Streaming KSampler names the inputs and the fix."""
    from types import SimpleNamespace

    import torch

    from comfyui_headroom.nodes import streaming_sampler

    class WAN21(SimpleNamespace):
        pass

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (77x768 and 4096x1536)")

    monkeypatch.setattr(streaming_sampler.sampling, "streaming_ksample", fails)
    monkeypatch.setattr(
        streaming_sampler.lookups, "sampler_latent_spec", lambda model: (None, 2, False, False)
    )
    model = SimpleNamespace(model=SimpleNamespace(model_config=WAN21()))
    positive = [[torch.zeros(1, 77, 768), {}]]
    node = streaming_sampler.HeadroomStreamingSampler()
    latent = {"samples": torch.zeros(1, 16, 8, 8)}
    with pytest.raises(ValueError) as info:
        node.sample(model, 1, 1, 1.0, "euler", "normal", positive, positive, latent)
    message = str(info.value)
    assert "inputs positive and negative: the conditioning is 768 wide" in message, message
    assert "WAN21 diffusion model" in message and "umt5xxl" in message and "mat1 and mat2" in message
