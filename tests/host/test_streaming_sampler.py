"""Layer-Streaming DiT Sampler in the real host on CPU: the stock KSampler's latent bit for bit while
its blocks stream through the ring, after a stock LoRA loader too, and the model left as it was."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
import torch

from comfyui_headroom.memory.units import parse_bytes
from comfyui_headroom.nodes.common import node_vram_budget
from headroom_testing.harness import Host, PromptInvalid
from headroom_testing.tiny_models import build_tiny_sd_checkpoint
from headroom_testing.tiny_stock import build_lora

pytestmark = pytest.mark.host

CKPT = "tiny_sd15_stream.safetensors"


def prompt(sampler: str, seed: int = 3, lora: str | None = None, **extra: object) -> dict:
    model: list = ["1", 0]
    nodes: dict = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CKPT}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a streamed test", "clip": ["1", 1]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["1", 1]}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 2}},
    }
    if lora:
        nodes["8"] = {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": lora, "strength_model": 1.0},
        }
        model = ["8", 0]
    # our sampler gets its own id: the 2024 host's cache compares a node's inputs, not its class
    sid = "5" if sampler == "KSampler" else "9"
    nodes[sid] = {
        "class_type": sampler,
        "inputs": {
            "model": model, "seed": seed, "steps": 2, "cfg": 5.0, "sampler_name": "euler",
            "scheduler": "normal", "positive": ["2", 0], "negative": ["3", 0], "latent_image": ["4", 0],
            "denoise": 1.0, **extra,
        },
    }  # fmt: skip
    nodes["6"] = {"class_type": "VAEDecode", "inputs": {"samples": [sid, 0], "vae": ["1", 2]}}
    nodes["7"] = {"class_type": "PreviewImage", "inputs": {"images": ["6", 0]}}
    return nodes


@pytest.fixture(scope="module")
def tiny(host: Host) -> Host:
    build_tiny_sd_checkpoint(host.models_dir, name=CKPT, seed=5)
    build_lora(host.models_dir)
    host.register_models_dir(host.models_dir)
    return host


def _latent(result) -> torch.Tensor:
    node = "5" if "5" in result.outputs else "9"
    return result.outputs[node][0][0]["samples"]


def test_streamed_latent_is_the_stock_latent_bit_for_bit(tiny: Host) -> None:
    stock = _latent(tiny.run(prompt("KSampler")))
    streamed = tiny.run(prompt("HeadroomStreamingSampler", vram_budget="0.075"))
    assert torch.equal(_latent(streamed), stock)
    text = streamed.ui["9"]["text"][0]
    assert "blocks resident" in text and "MiB streamed per step" in text, text
    # the model is left as it was: a stock run afterwards gives the same latent again
    assert torch.equal(_latent(tiny.run(prompt("KSampler"))), stock)


def test_auto_budget_on_a_cpu_streams_nothing_and_matches(tiny: Host) -> None:
    stock = _latent(tiny.run(prompt("KSampler", seed=4)))
    result = tiny.run(prompt("HeadroomStreamingSampler", seed=4))
    assert torch.equal(_latent(result), stock)
    assert "nothing streamed" in result.ui["9"]["text"][0]


def test_after_a_stock_lora_loader(tiny: Host) -> None:
    plain = _latent(tiny.run(prompt("KSampler", seed=6)))
    stock = _latent(tiny.run(prompt("KSampler", seed=6, lora="tiny_lora.safetensors")))
    assert not torch.equal(stock, plain), "the LoRA changes the result"
    streamed = tiny.run(
        prompt(
            "HeadroomStreamingSampler", seed=6, lora="tiny_lora.safetensors", vram_budget="0.095", prefetch=2
        )
    )
    assert torch.equal(_latent(streamed), stock)
    assert "prefetch 2" in streamed.ui["9"]["text"][0]


def test_unload_models_then_stock_sampling_still_works(tiny: Host) -> None:
    tiny.run(prompt("HeadroomStreamingSampler", seed=8, vram_budget="0.075", resident_blocks=1))
    tiny.free()
    stock = _latent(tiny.run(prompt("KSampler", seed=8)))
    assert torch.isfinite(stock).all()


SAMPLER_NAME = "Streaming KSampler (VRAM offload)"


@pytest.mark.parametrize("budget", ["lots", "-2", "0", "1e-10", "1e-300", "6 GB of VRAM"])
def test_a_bad_budget_is_refused_at_queue_time_naming_the_node_and_the_input(tiny: Host, budget: str) -> None:
    """Refused by the host's validation, before any node runs; "1e-10" GB is not "no budget"."""
    with pytest.raises(PromptInvalid, match="vram_budget") as info:
        tiny.validate(prompt("HeadroomStreamingSampler", vram_budget=budget), "bad-budget")
    assert SAMPLER_NAME in str(info.value) and "6GB" in str(info.value)  # what to write instead


def test_a_budget_the_node_would_refuse_at_run_time_is_refused_at_validation(tiny: Host) -> None:
    """Issue #43: "0.001" (1 MiB) passed the node's own validation, which sees the text but not the model,
    and was refused only when the node ran. Headroom's hook of the host's validate_prompt applies the
    node's run-time rule (non-block weights plus one block) with the model it reads from the prompt."""
    with pytest.raises(PromptInvalid, match="vram_budget") as info:
        tiny.validate(prompt("HeadroomStreamingSampler", vram_budget="0.001"), "unstreamable-budget")
    assert "cannot stream" in str(info.value) and "'9'" in str(info.value)  # the node, and why
    assert tiny.validate(prompt("HeadroomStreamingSampler", vram_budget="0.075"), "streamable") == ["7"]


@pytest.mark.parametrize("budget", ["6", "6GB", "6 GiB", "6144MB", "auto", " 0.5 gb "])
def test_the_budget_sizes_the_command_line_takes_pass_validation(tiny: Host, budget: str) -> None:
    """The host accepts the prompt whole (its one output will run) and the node reads the budget as the
    bytes the command line's ``--vram`` reads from the same text."""
    assert tiny.validate(prompt("HeadroomStreamingSampler", vram_budget=budget), "good-budget") == ["7"]
    expected = None if budget == "auto" else parse_bytes(budget)
    assert node_vram_budget(budget, SAMPLER_NAME) == expected


@pytest.fixture(scope="module")
def stock_seed_9(tiny: Host) -> torch.Tensor:
    return _latent(tiny.run(prompt("KSampler", seed=9)))


@pytest.mark.parametrize(("budget", "prefetch"), [("auto", 16), ("0.075", 16), ("0.2", 16), ("0.075", 4)])
def test_a_prefetch_beyond_the_streamed_blocks_is_capped_and_said(
    tiny: Host, stock_seed_9: torch.Tensor, budget: str, prefetch: int
) -> None:
    stock = stock_seed_9
    result = tiny.run(prompt("HeadroomStreamingSampler", seed=9, vram_budget=budget, prefetch=prefetch))
    assert torch.equal(_latent(result), stock)
    text = result.ui["9"]["text"][0]
    if "nothing streamed" not in text:
        assert f"capped from {prefetch}" in text, text


def test_the_reported_bound_is_below_the_step_time(tiny: Host) -> None:
    text = tiny.run(prompt("HeadroomStreamingSampler", seed=10, vram_budget="0.075")).ui["9"]["text"][0]
    found = re.search(r"([0-9.]+) s/step vs bound ([0-9.]+) s", text)
    assert found, text
    assert float(found.group(2)) <= float(found.group(1)), text


@pytest.mark.parametrize(
    ("shape", "problem"),
    [
        ((0, 4, 8, 8), "empty batch"),
        ((1, 16, 8, 8), "16 channels"),
        ((1, 4, 2, 8, 8), "5-D"),
        ((1, 4, 8), "3-D"),
    ],
)
@torch.inference_mode()
def test_a_latent_the_model_cannot_take_is_refused_before_sampling(
    tiny: Host, shape: tuple[int, ...], problem: str
) -> None:
    model, clip, _ = tiny.node_class("CheckpointLoaderSimple")().load_checkpoint(CKPT)
    (cond,) = tiny.node_class("CLIPTextEncode")().encode(clip, "")
    latent = {"samples": torch.randn(shape)}
    sampler = tiny.node_class("HeadroomStreamingSampler")()
    with pytest.raises(ValueError, match=problem) as info:
        sampler.sample(model, 1, 1, 1.0, "euler", "normal", cond, cond, latent, vram_budget="0.075")
    assert str(info.value).startswith(f"{SAMPLER_NAME}: input latent_image: the latent"), info.value


# --- cond and uncond split into separate model calls -----------------------------------------------
SPLIT_STEPS = 3


@pytest.fixture(scope="module")
def split_runs(tiny: Host) -> dict[str, Any]:
    """Stock KSampler and the streamer's sampling of one prompt while the host's memory estimate
    says a cond+uncond batch never fits, so that it runs them as separate model calls each step."""
    base_model = sys.modules["comfy.model_base"].BaseModel
    estimate = base_model.memory_required
    base_model.memory_required = lambda self, *args, **kwargs: 1 << 45  # 32 TiB: nothing fits
    try:
        with torch.inference_mode():
            model, clip, _ = tiny.node_class("CheckpointLoaderSimple")().load_checkpoint(CKPT)
            (positive,) = tiny.node_class("CLIPTextEncode")().encode(clip, "split cfg")
            (negative,) = tiny.node_class("CLIPTextEncode")().encode(clip, "")
            (latent,) = tiny.node_class("EmptyLatentImage")().generate(64, 64, 2)
            calls: list[list[int]] = []

            def counting(apply_model, args):  # every model call the host makes, cond (0) or uncond (1)
                calls.append(list(args["cond_or_uncond"]))
                return apply_model(args["input"], args["timestep"], **args["c"])

            model = model.clone()
            model.set_model_unet_function_wrapper(counting)
            args = (11, SPLIT_STEPS, 5.0, "euler", "normal", positive, negative, latent, 1.0)
            (stock,) = tiny.nodes.common_ksampler(model, *args[:8], denoise=1.0)
            stock_calls = list(calls)
            calls.clear()
            streamed, run = tiny.pack_module("nodes.host.sampling").streaming_ksample(
                model, args, budget=int(0.075 * 2**30), prefetch=None, resident_blocks=None, pin=True
            )
    finally:
        base_model.memory_required = estimate
    return {"stock": stock, "streamed": streamed, "stock_calls": stock_calls, "calls": calls, "run": run}


def test_a_split_cfg_batch_streams_to_the_stock_latent(split_runs: dict[str, Any]) -> None:
    summary = split_runs["run"].summary
    streamed_blocks = summary["blocks"] - summary["resident_blocks"]
    stock_calls = split_runs["stock_calls"]
    steps = [sorted(stock_calls[i : i + 2]) for i in range(0, len(stock_calls), 2)]
    assert steps == [[[0], [1]]] * SPLIT_STEPS, "the host split every step in a cond and an uncond call"
    assert split_runs["calls"] == split_runs["stock_calls"], "each call computed once, in the host's order"
    assert torch.equal(split_runs["streamed"]["samples"], split_runs["stock"]["samples"])
    assert streamed_blocks >= 2 and summary["misses"] == 0
    assert summary["uploads"] >= SPLIT_STEPS * streamed_blocks, "the UNet's blocks went through the ring"


def test_a_split_cfg_batch_uploads_each_block_once_per_step(tiny: Host, split_runs: dict[str, Any]) -> None:
    if tiny.legacy:
        pytest.skip(
            "the 2024 host has no calc_cond_batch wrapper to gather a step's calls: there each call "
            "uploads the streamed blocks (checked for exactness by the test above)"
        )
    summary = split_runs["run"].summary
    streamed_blocks = summary["blocks"] - summary["resident_blocks"]
    ahead = summary["uploads"] - SPLIT_STEPS * streamed_blocks  # next step's first blocks, prefetched
    assert 0 <= ahead <= summary["prefetch"] + 1, f"{summary['uploads']} uploads for {SPLIT_STEPS} steps"
    assert summary["steps"] == SPLIT_STEPS and summary["shared_steps"] == SPLIT_STEPS
    assert summary["calls_together"] == 2 * SPLIT_STEPS and summary["model_calls"] == 2 * SPLIT_STEPS
    assert summary["replay_mismatches"] == 0


@torch.inference_mode()  # as the host's executor runs nodes
def test_an_interrupt_mid_sampling_leaves_nothing_behind(tiny: Host) -> None:
    host_module = tiny.pack_module("nodes.host.sampling")
    interrupted = tiny.model_management.InterruptProcessingException
    model, clip, _ = tiny.node_class("CheckpointLoaderSimple")().load_checkpoint(CKPT)
    (positive,) = tiny.node_class("CLIPTextEncode")().encode(clip, "interrupted")
    (negative,) = tiny.node_class("CLIPTextEncode")().encode(clip, "")
    (latent,) = tiny.node_class("EmptyLatentImage")().generate(64, 64, 1)
    calls = []

    def interrupt_on_second_call(apply_model, args):  # stands in for the user pressing Cancel
        calls.append(1)
        if len(calls) == 2:
            raise interrupted()
        return apply_model(args["input"], args["timestep"], **args["c"])

    model = model.clone()
    model.set_model_unet_function_wrapper(interrupt_on_second_call)
    diffusion = model.model.diffusion_model
    before = {n: p.detach().clone() for n, p in diffusion.named_parameters()}
    args = (1, 3, 5.0, "euler", "normal", positive, negative, latent, 1.0)
    with pytest.raises(interrupted):
        host_module.streaming_ksample(
            model, args, budget=int(0.075 * 2**30), prefetch=None, resident_blocks=None, pin=True
        )
    assert len(calls) == 2
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in diffusion.modules()), "unhooked"
    assert all(torch.equal(p, before[n]) for n, p in diffusion.named_parameters()), "weights as they were"
