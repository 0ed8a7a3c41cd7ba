"""Preflight on workflows that fit, that fit only with Headroom, and that cannot fit; the plan cache;
the timeline chart."""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.planning.preflight import PlanCache, check, plan_prompt
from comfyui_headroom.memory.planning.records import PlannedNode, PlannedRun
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.telemetry import chart as telemetry_chart
from comfyui_headroom.memory.telemetry.probe import Sample
from comfyui_headroom.memory.telemetry.runs import NodeRecord
from comfyui_headroom.memory.units import GiB

ROOT = Path(__file__).resolve().parents[2]
FLUX = json.loads((ROOT / "example_workflows" / "api" / "Flux Dev text to image.json").read_text())
FLUX_2048 = json.loads(
    (ROOT / "example_workflows" / "api" / "Flux Dev 2048px with Tiled VAE decode.json").read_text()
)
MiB = 2**20


def test_a_workflow_that_fits_gets_no_warning() -> None:
    planned, verdict = plan_prompt(FLUX, Budget.from_card(24 * GiB, 64 * GiB))
    assert verdict.fits is True and verdict.level == "ok" and verdict.node is None
    assert planned is not None and planned.fits is True
    assert [n.class_type for n in planned.nodes][-3:] == ["KSampler", "VAEDecode", "SaveImage"]
    sampler = next(n for n in planned.nodes if n.class_type == "KSampler")
    assert sampler.vram_peak > 0 and any("diffusion_model" in label for label in sampler.placements)
    # the timeline's reasons are the plan's, by the same labels as the placements
    step = next(s for s in planned.plan["steps"] if s["node"] == sampler.node_id)
    assert sorted(sampler.reasons.values()) == sorted(p["reason"] for p in step["placements"].values())
    assert set(sampler.reasons) == set(sampler.placements) and all(sampler.reasons.values())


def test_a_workflow_that_cannot_fit_names_the_failing_node_and_the_fix() -> None:
    planned, verdict = plan_prompt(FLUX, Budget.from_card(1 * GiB, 64 * GiB))
    assert verdict.fits is False and verdict.level == "error"
    # The text encoder runs first and is the first node whose own minimum exceeds 0.5 GiB.
    assert (verdict.node, verdict.class_type) == ("6", "CLIPTextEncode")
    assert verdict.message.startswith("CLIPTextEncode (node 6) will run out of VRAM even with Headroom")
    # the advice is about the step that sets the minimum (the sampler of the 1024x1024 latent: the VAE
    # decode's least is the host's 256 px fallback tile)
    assert "The whole workflow needs" in verdict.message and "at KSampler (node 3)" in verdict.message
    assert "a card with at least" in verdict.fix and "To fit: " + verdict.fix in verdict.message
    assert verdict.min_vram > verdict.budget_vram
    assert planned is not None and planned.fits is False and planned.nodes  # the order is still shown


def test_a_node_that_fails_only_with_comfyuis_loading_gets_the_headroom_node_as_fix() -> None:
    # 1 GiB usable, 0.9 GiB of activations: ComfyUI's lowvram budget leaves too little for weights plus
    # activations; streaming 100 small blocks through a ring fits.
    dit = Component("dit", "dit.safetensors", 2 * GiB, blocks=tuple([20 * MiB] * 100), kind="diffusion_model")
    workload = Workload((dit,), (Step("3", "KSampler", ("dit",), evaluations=20, activation=900 * MiB),))
    budget = Budget(vram=1 * GiB, ram=32 * GiB, pinned=16 * GiB)
    verdict = check(workload, plan(workload, budget, Hardware.pcie(4)))
    assert verdict.level == "warn" and verdict.fits is False
    assert (verdict.node, verdict.class_type) == ("3", "KSampler")
    assert verdict.fix.startswith("Streaming KSampler (VRAM offload)")
    assert "Headroom's plan then peaks at" in verdict.message
    assert verdict.headroom_peak is not None and verdict.headroom_peak <= budget.vram


def gib_figures(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+\.\d\d) GiB", text)]


def test_the_red_toast_names_the_latent_first_and_its_figures_add_up() -> None:
    # #16 item 6: at 2 GB even Headroom cannot fit Flux at 2048x2048; the activations of that latent,
    # not the weights, set the minimum, so the first fix is a smaller latent, named with its node.
    card = 2 * GiB
    _, verdict = plan_prompt(FLUX_2048, Budget.from_card(card, 64 * GiB))
    assert verdict.level == "error" and (verdict.node, verdict.class_type) == ("3", "KSampler")
    assert verdict.driver == {
        "node": "27", "class_type": "EmptySD3LatentImage", "title": None,
        "width": 2048, "height": 2048, "frames": 1, "batch": 1,
    }  # fmt: skip
    assert verdict.activations > verdict.weights > 0
    assert verdict.weights + verdict.activations == verdict.predicted_peak == verdict.min_vram
    assert verdict.card_vram == card == verdict.budget_vram + verdict.reserve
    assert verdict.fix.startswith("a smaller latent at EmptySD3LatentImage (node 27) (now 2048×2048)")
    assert "2.16 GiB of activations for the 2048×2048 latent set by EmptySD3LatentImage" in verdict.message
    # one unit, and the card advice is the minimum plus the reserve, said so
    assert "MiB" not in verdict.message
    least, card_gib = (
        verdict.min_vram / GiB,
        math.ceil((verdict.min_vram + verdict.reserve) * 100 / GiB) / 100,
    )
    assert f"at its least it holds {least:.2f} GiB" in verdict.message
    assert f"a card with at least {card_gib:.2f} GiB of VRAM ({least:.2f} GiB usable" in verdict.message
    assert "a 2.00 GiB card leaves 1.50 GiB usable (0.50 GiB is kept" in verdict.message


def test_the_yellow_toast_says_what_comfyuis_loading_would_hold_and_headrooms_peak() -> None:
    _, verdict = plan_prompt(FLUX_2048, Budget.from_card(4 * GiB, 64 * GiB))
    assert verdict.level == "warn" and verdict.node == "3" and verdict.driver["node"] == "27"
    assert verdict.weights + verdict.activations == verdict.predicted_peak > verdict.budget_vram
    assert verdict.headroom_peak <= verdict.budget_vram < verdict.card_vram
    figures = gib_figures(verdict.message)
    # would hold (weights + activations), the card, usable, reserve, Headroom's peak: in that order
    assert figures[0] == pytest.approx(verdict.predicted_peak / GiB, abs=0.006)
    assert figures[1] + figures[2] == pytest.approx(figures[0], abs=0.011)
    assert figures[3:6] == [4.0, 3.5, 0.5]
    assert figures[6] == pytest.approx(verdict.headroom_peak / GiB, abs=0.006)
    assert "would hold" in verdict.message and "needs at least" not in verdict.message


def test_a_titled_node_is_named_by_its_title() -> None:
    prompt = json.loads(json.dumps(FLUX_2048))
    prompt["3"]["_meta"] = {"title": "Main sampler"}
    prompt["27"]["_meta"] = {"title": "Poster size"}
    _, verdict = plan_prompt(prompt, Budget.from_card(2 * GiB, 64 * GiB))
    assert verdict.title == "Main sampler" and verdict.driver["title"] == "Poster size"
    assert verdict.message.startswith('"Main sampler" (KSampler, node 3) will run out of VRAM')
    assert 'set by "Poster size" (EmptySD3LatentImage, node 27)' in verdict.message


def test_bad_prompts_are_skipped_not_raised() -> None:
    planned, verdict = plan_prompt({"1": {"nope": 1}}, Budget.from_card(8 * GiB, 16 * GiB))
    assert planned is None and verdict.fits is None and verdict.level == "skipped"
    assert verdict.message.startswith("not planned:")


def test_plan_cache_plans_each_prompt_once_even_when_asked_concurrently() -> None:
    calls: list[dict] = []
    release = threading.Event()

    def planner(prompt: dict) -> tuple:
        calls.append(prompt)
        release.wait(10)
        return None, prompt

    cache = PlanCache(planner, size=2)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(cache.get({"a": 1}))) for _ in range(3)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and results == [(None, {"a": 1})] * 3
    cache.get({"b": 2})
    cache.get({"c": 3})  # the cache holds 2: {"a": 1} is dropped
    cache.get({"a": 1})
    assert len(calls) == 4
    cache.get({"a": 1}, context=8 * GiB)  # another budget is another plan
    assert len(calls) == 5
    assert cache.peek(PlanCache.key({"a": 1}, 8 * GiB)) == (None, {"a": 1})
    assert cache.peek(PlanCache.key({"z": 0})) is None


def test_plan_cache_passes_planner_errors_on() -> None:
    cache = PlanCache(lambda prompt: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cache.get({})


def test_timeline_image_is_an_rgb_float_picture() -> None:
    samples = [Sample(t=10.0 + i, rss=(100 + 10 * i) * MiB, ram_used=GiB) for i in range(5)]
    nodes = [
        NodeRecord("1", "EmptyImage", 10.0, 11.5, "done"),
        NodeRecord("2", "KSampler", 11.5, 13.0, "done"),
    ]
    run = PlannedRun(True, (PlannedNode("2", "KSampler", 1, 200 * MiB, 1.0, {}),), 2 * GiB, 200 * MiB)
    image = telemetry_chart.timeline_image(samples, nodes, run, size=(320, 160))
    assert image.shape == (160, 320, 3) and image.dtype == np.float32
    assert 0.0 <= image.min() and image.max() <= 1.0
    assert image.std() > 0.05  # something was drawn, not a blank canvas


def test_timeline_image_is_none_without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry_chart, "optional_module", lambda name, feature: None)
    assert telemetry_chart.timeline_image([Sample(t=0, rss=1)]) is None


def test_when_an_earlier_node_fails_first_the_latent_of_the_minimum_is_still_named() -> None:
    # at 1 GB the text encoder fails first; the 2048x2048 latent sets the workflow's minimum later on
    _, verdict = plan_prompt(FLUX_2048, Budget.from_card(1 * GiB, 64 * GiB))
    assert verdict.node == "6" and verdict.driver["node"] == "27"
    first, rest = verdict.message.split(" The whole workflow needs ")
    assert "latent" not in first  # the text encoder's activations come from its prompt, not the latent
    assert rest.startswith(f"{verdict.min_vram / GiB:.2f} GiB, at KSampler (node 3)")
    assert "2048×2048 latent set by EmptySD3LatentImage (node 27)" in rest
    assert verdict.fix.startswith("a smaller latent at EmptySD3LatentImage (node 27)")


def test_the_latent_driver_follows_latent_links_not_a_conditioning_size() -> None:
    """SDXL's text encode has width/height inputs (4096 for conditioning): the size that drives the
    sampler is the EmptyLatentImage's 1024×1024, reached through latent_image."""
    from comfyui_headroom.memory.planning.preflight import latent_driver
    from comfyui_headroom.memory.workflow.graph import parse_workflow

    prompt = {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sdxl.safetensors"}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 1}},
        "6": {
            "class_type": "CLIPTextEncodeSDXL",
            "inputs": {
                "clip": ["4", 1],
                "width": 4096,
                "height": 4096,
                "crop_w": 0,
                "crop_h": 0,
                "target_width": 4096,
                "target_height": 4096,
                "text_g": "a",
                "text_l": "a",
            },
        },  # fmt: skip
        "3": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["4", 0],
                "positive": ["6", 0],
                "negative": ["6", 0],
                "latent_image": ["5", 0],
                "seed": 0,
                "steps": 2,
                "cfg": 7.0,
                "sampler_name": "euler",
                "scheduler": "normal",
                "denoise": 1.0,
            },
        },  # fmt: skip
    }
    graph = parse_workflow(prompt)
    driver = latent_driver(graph, "3")
    assert driver is not None and driver["node"] == "5"
    assert (driver["width"], driver["height"]) == (1024, 1024)
    assert latent_driver(graph, "6") is None  # a text encoder's memory is set by its text
