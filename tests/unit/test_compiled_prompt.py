"""A streamed model under torch.compile's "cudagraphs" backend is found in the prompt
(memory/workflow/compiled.py) and refused at the host's validation on the compile node's ``backend``
input (nodes/host/budget_check.refuse_cudagraphs); what the prompt does not run, or runs on another
model chain, is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from comfyui_headroom.memory.workflow.compiled import REFUSAL, cudagraphs_streamed
from comfyui_headroom.memory.workflow.graph import parse_workflow
from comfyui_headroom.nodes.host import budget_check

SAMPLER = {"seed": 1, "steps": 2, "cfg": 5.0, "sampler_name": "euler", "scheduler": "normal",
           "positive": ["p", 0], "negative": ["p", 0], "latent_image": ["l", 0], "denoise": 1.0}  # fmt: skip


def prompt(order: str, backend: str = "cudagraphs") -> dict[str, dict[str, Any]]:
    """Loader → the nodes ``order`` names ("compile", "stream", "sampler": the Streaming KSampler as the
    sampler, else KSampler) → VAEDecode → PreviewImage."""
    nodes: dict[str, dict[str, Any]] = {
        "c": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"}},
        "p": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["c", 1], "text": "a fox"}},
        "l": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    }
    model = ["c", 0]
    sampler = "KSampler"
    for step in order.split():
        if step == "compile":
            nodes["t"] = {"class_type": "TorchCompileModel", "inputs": {"model": model, "backend": backend}}
            model = ["t", 0]
        elif step == "stream":
            stream = {"model": model, "vram_budget": "auto"}
            nodes["x"] = {"class_type": "HeadroomStreamModel", "inputs": stream}
            model = ["x", 0]
        elif step == "sampler":
            sampler = "HeadroomStreamingSampler"
    extra = {"vram_budget": "auto"} if sampler == "HeadroomStreamingSampler" else {}
    nodes["o"] = {"class_type": sampler, "inputs": {"model": model, **SAMPLER, **extra}}
    nodes["d"] = {"class_type": "VAEDecode", "inputs": {"samples": ["o", 0], "vae": ["c", 2]}}
    nodes["s"] = {"class_type": "PreviewImage", "inputs": {"images": ["d", 0]}}
    return nodes


@pytest.mark.parametrize(
    ("order", "found"),
    [("compile stream", ("t", "x")), ("stream compile", ("t", "x")), ("compile sampler", ("t", "o"))],
)
def test_cudagraphs_on_a_streamed_chain_is_found_on_either_side(order: str, found: tuple[str, str]) -> None:
    assert cudagraphs_streamed(parse_workflow(prompt(order)), ["s"]) == found


@pytest.mark.parametrize("order", ["compile stream", "compile sampler"])
def test_inductor_or_no_streaming_is_left_alone(order: str) -> None:
    assert cudagraphs_streamed(parse_workflow(prompt(order, backend="inductor")), ["s"]) is None
    assert cudagraphs_streamed(parse_workflow(prompt("compile")), ["s"]) is None  # stock: nothing streams


def test_a_compile_node_the_prompt_does_not_run_or_on_another_chain_is_left_alone() -> None:
    p = prompt("stream")
    # a cudagraphs compile of the same model that nothing reads: the host does not run it
    p["u"] = {"class_type": "TorchCompileModel", "inputs": {"model": ["c", 0], "backend": "cudagraphs"}}
    assert cudagraphs_streamed(parse_workflow(p), ["s"]) is None
    # read by a second, stock sampler: run, but on a chain of its own (the streamed one is not compiled)
    p["o2"] = {"class_type": "KSampler", "inputs": {**p["o"]["inputs"], "model": ["u", 0]}}
    p["d2"] = {"class_type": "VAEDecode", "inputs": {"samples": ["o2", 0], "vae": ["c", 2]}}
    p["s2"] = {"class_type": "PreviewImage", "inputs": {"images": ["d2", 0]}}
    assert cudagraphs_streamed(parse_workflow(p), ["s", "s2"]) is None
    # only the outputs the host was asked to run count (a partial run of the frontend)
    p["t2"] = {"class_type": "TorchCompileModel", "inputs": {"model": ["x", 0], "backend": "cudagraphs"}}
    p["o2"]["inputs"]["model"] = ["t2", 0]
    assert cudagraphs_streamed(parse_workflow(p), ["s"]) is None
    assert cudagraphs_streamed(parse_workflow(p), ["s", "s2"]) == ("t2", "x")


def test_a_long_model_chain_is_walked_without_recursion() -> None:
    p = prompt("stream compile")
    chain = 20_000  # deeper than Python's recursion limit
    previous = ["t", 0]
    for i in range(chain):
        p[f"m{i}"] = {"class_type": "ModelSamplingDiscrete",
                      "inputs": {"model": previous, "sampling": "eps", "zsnr": False}}  # fmt: skip
        previous = [f"m{i}", 0]
    p["o"]["inputs"]["model"] = previous
    assert cudagraphs_streamed(parse_workflow(p), ["s"]) == ("t", "x")


def test_a_model_cycle_ends_and_a_refusal_is_still_found() -> None:
    p = prompt("compile stream")
    p["t"]["inputs"]["model"] = ["x", 0]  # t reads x, x reads t: the host would refuse it when it runs
    assert cudagraphs_streamed(parse_workflow(p), ["s"]) == ("t", "x")
    p["t"]["inputs"]["model"] = ["t", 0]  # a node reading itself
    assert cudagraphs_streamed(parse_workflow(p), ["s"]) == ("t", "x")


def test_the_host_validation_answer_refuses_the_compile_nodes_backend() -> None:
    p = prompt("compile stream")
    p["s2"] = {"class_type": "PreviewImage", "inputs": {"images": ["i", 0]}}  # an output that needs no model
    p["i"] = {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}}
    valid = (True, None, ["s", "s2"], {})
    answer = budget_check.refuse_at_validation(p, valid)
    ok, error, outputs, node_errors = answer
    assert not ok and outputs == [] and error["type"] == "prompt_outputs_failed_validation"
    assert list(node_errors) == ["t"]
    entry = node_errors["t"]
    # the outputs that need the compile node, as the host lists a node error's
    assert entry["class_type"] == "TorchCompileModel" and entry["dependent_outputs"] == ["s"]
    (err,) = entry["errors"]
    assert err["extra_info"] == {"input_name": "backend"} and err["details"] == REFUSAL
    assert "'inductor'" in REFUSAL  # the way out is named
    # left as the host answered: inductor, a prompt the host refused already, an answer of another shape
    assert budget_check.refuse_at_validation(prompt("compile stream", "inductor"), valid) is valid
    refused = (False, {"type": "x"}, [], {"o": {}})
    assert budget_check.refuse_at_validation(prompt("compile stream"), refused) is refused
    assert budget_check.refuse_at_validation(prompt("compile stream"), "odd") == "odd"


def test_a_prompt_the_graph_cannot_read_leaves_the_answer_alone() -> None:
    p = prompt("compile stream")
    p["bad"] = {"class_type": "Note", "inputs": ["not", "an", "object"]}  # the parser refuses the prompt
    valid = (True, None, ["s"], {})
    assert budget_check.refuse_cudagraphs(p, valid) is valid
