"""The planner knows the Stream Model node: the MODEL it outputs is its input, streamed whenever it is
sampled, so the plan streams that diffusion model at every sampler downstream (within the node's
vram_budget) even where it would fit, and says why."""

from __future__ import annotations

from typing import Any

import pytest

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.pipeline import plan_workflow
from comfyui_headroom.memory.units import GB, parse_vram_budget
from headroom_testing.prompts import offload_t2i

HW = Hardware.pcie(4)
FILES = {
    "diffusion_model": "flux1-dev.safetensors",
    "text_encoder_1": "clip_l.safetensors",
    "text_encoder_2": "t5xxl_fp16.safetensors",
    "vae": "ae.safetensors",
    "clip_type": "flux",
}
DM = "1:diffusion_model:diffusion_model"


def streamed(vram_budget: str = "auto", lora: bool = False) -> dict[str, Any]:
    """The t2i prompt with the Stream Model node between the loader and the sampler (and a LoRA after)."""
    prompt = offload_t2i(**FILES)
    prompt["8"] = {
        "class_type": "HeadroomStreamModel",
        "inputs": {"model": ["1", 0], "vram_budget": vram_budget},
    }
    model = ["8", 0]
    if lora:
        prompt["9"] = {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": model, "lora_name": "flux_lora.safetensors", "strength_model": 1.0},
        }
        model = ["9", 0]
    prompt["4"]["inputs"]["model"] = model
    return prompt


def sampler_step(prompt: dict[str, Any], card_gb: float = 80) -> Any:
    planned = plan_workflow(prompt, Budget.from_card(int(card_gb * GB), 64 * GB), HW)
    assert planned.plan.feasible, planned.plan.bottleneck
    return next(sp for sp in planned.plan.steps if sp.step.node_id == "4")


def test_without_the_node_a_model_that_fits_stays_whole() -> None:
    sp = sampler_step(offload_t2i(**FILES))
    assert sp.step.streamed == () and sp.placements[DM].tier.gpu == "G"


@pytest.mark.parametrize("lora", [False, True], ids=["direct", "through-a-lora"])
def test_the_stream_model_node_streams_its_model_at_the_sampler_even_where_it_fits(lora: bool) -> None:
    sp = sampler_step(streamed(lora=lora))
    assert sp.step.streamed == ((DM, None),)
    placement = sp.placements[DM]
    assert placement.tier.gpu == "S", placement
    assert "streamed by the Stream Model node" in placement.reason and "does not fit" not in placement.reason
    assert any(a.kind == "stream" and a.component == DM for a in sp.actions)


def test_the_nodes_vram_budget_bounds_the_resident_blocks() -> None:
    free = sampler_step(streamed()).placements[DM]
    sp = sampler_step(streamed(vram_budget="12"))
    assert sp.step.streamed == ((DM, parse_vram_budget("12")),)
    capped = sp.placements[DM]
    assert capped.tier.gpu == "S" and "within its" in capped.reason and "vram_budget" in capped.reason
    assert capped.resident_blocks < free.resident_blocks and capped.streamed_bytes > free.streamed_bytes


def test_a_sampler_not_downstream_of_the_node_is_planned_as_usual() -> None:
    prompt = streamed()
    prompt["4"]["inputs"]["model"] = ["1", 0]  # the node's output goes nowhere
    sp = sampler_step(prompt)
    assert sp.step.streamed == () and sp.placements[DM].tier.gpu == "G"


def test_a_guider_carries_the_streaming_to_sampler_custom_advanced() -> None:
    prompt = streamed()
    sampler = prompt.pop("4")["inputs"]
    prompt |= {
        "21": {"class_type": "RandomNoise", "inputs": {"noise_seed": 1}},
        "22": {
            "class_type": "CFGGuider",
            "inputs": {"model": ["8", 0], "positive": ["2", 0], "negative": ["2", 0], "cfg": 3.5},
        },
        "23": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "24": {
            "class_type": "BasicScheduler",
            "inputs": {"model": ["8", 0], "scheduler": "simple", "steps": 20, "denoise": 1.0},
        },
        "4": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {
                "noise": ["21", 0],
                "guider": ["22", 0],
                "sampler": ["23", 0],
                "sigmas": ["24", 0],
                "latent_image": sampler["latent_image"],
            },
        },
    }
    sp = sampler_step(prompt)
    assert sp.step.streamed == ((DM, None),) and sp.placements[DM].tier.gpu == "S"
