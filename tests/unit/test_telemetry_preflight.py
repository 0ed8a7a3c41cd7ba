"""Preflight on workflows that fit, that fit only with Headroom, and that cannot fit; the plan cache;
the timeline chart."""

from __future__ import annotations

import json
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
FLUX = json.loads((ROOT / "workflows" / "api" / "flux_dev_t2i.json").read_text())
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
    assert verdict.message.startswith("node 6 (CLIPTextEncode) will run out of VRAM")
    assert "To fit: a card with" in verdict.message and verdict.fix.startswith("a card with")
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
    assert verdict.fix.startswith("Layer-Streaming DiT Sampler (Headroom)")
    assert "Headroom's plan fits" in verdict.message


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
