"""Issue #39: a time model with physical limits, fitted to published runs, that says what its time is.

Every fitted figure is a physical quantity within its bound (no kernel faster than its card's peak);
the figures the product uses are the fit's own; every answer names its card, what the time counts and a
range; what the workflow's own widgets set (WanCameraImageToVideo's size, through WanCameraEmbedding)
is read before the run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.cli import main
from comfyui_headroom.memory.planning.compute import attention_reach
from comfyui_headroom.memory.planning.costmodel import Hardware
from comfyui_headroom.memory.planning.gpus import (
    MAX_OVERHEAD_S,
    MODEL,
    Efficiency,
    TimeModel,
    card_efficiency,
    find_gpu,
    sustained,
)
from comfyui_headroom.memory.planning.pipeline import plan_workflow
from comfyui_headroom.memory.planning.timing import HELD_OUT_RATIO, UNKNOWN_RATIO

ROOT = Path(__file__).resolve().parents[2]
FLUX = ROOT / "example_workflows" / "api" / "Flux Dev text to image.json"


def _bench() -> Any:
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("wall_time_bench", ROOT / "bench" / "wall_time.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_no_share_exceeds_the_peak_and_no_overhead_exceeds_its_bound() -> None:
    with pytest.raises(ValueError, match="matmul must be in"):
        Efficiency(1.01, 0.5, 0.5, 0.5, 0.0)
    with pytest.raises(ValueError, match="overhead_s"):
        Efficiency(0.5, 0.5, 0.5, 0.5, MAX_OVERHEAD_S * 2)
    with pytest.raises(ValueError, match="hopper_sdpa"):
        TimeModel(MODEL.kernels, MODEL.watts_per_tflops, 1.5)


def test_a_card_sustains_what_its_power_limit_allows() -> None:
    """A GeForce card's half-rate figure costs less than its power limit; an H100 SXM's full-rate figure
    (700 W for 989 TFLOPS) and a T4's (70 W for 65) cost more, so they sustain less of it."""
    for name in ("RTX 4090", "RTX 3090", "RTX 5090"):
        card = find_gpu(name)
        assert sustained(card.watts, card.bf16, "4nm" if card.arch != "ampere" else "8nm") == 1.0
    h100, t4, h20 = find_gpu("H100"), find_gpu("T4"), find_gpu("H20")
    assert sustained(h100.watts, h100.bf16, "4nm") < 1 and sustained(t4.watts, t4.bf16, "12nm") < 1
    assert h20.shares.matmul > h100.shares.matmul  # the cut-down part sustains more of its smaller peak
    # SDPA's FlashAttention-2 kernels run on Hopper with Ampere's instructions
    assert h100.shares.attention == pytest.approx(h100.shares.matmul * MODEL.hopper_sdpa, rel=1e-6)
    assert card_efficiency(find_gpu("L40")).attention == card_efficiency(find_gpu("L40")).matmul


def test_attention_reaches_its_share_only_at_long_sequences_and_large_heads() -> None:
    assert attention_reach(32760, 128) == pytest.approx(32760 / (32760 + 512))
    assert attention_reach(4096, 40) < attention_reach(4096, 64) < attention_reach(4096, 128) <= 1.0
    assert attention_reach(256, 128) < attention_reach(4096, 128) and attention_reach(10**6, 256) <= 1.0


def test_the_products_figures_are_the_fit_of_the_published_runs() -> None:
    """The table's figures are what bench/wall_time.py fits to bench/data/published_runs.json (a hand edit
    of either side fails here), each within its physical bound."""
    bench = _bench()
    used = [c for c in bench.all_cases() if not c.skip and not c.assumed]
    assert len(used) >= 40 and len({c.source_id for c in used}) >= 8
    assert any(bench.card_of(c).spec == "full_rate" for c in used)  # data-centre cards are in the set
    best, _ = bench.fit(used, [bench.features(c) for c in used])
    for name, lo, hi, _ in bench.PARAMS:
        assert lo <= best[name] <= hi
    k = MODEL.kernels
    fitted = {"matmul": k.matmul, "attention": k.attention, "conv": k.conv, "memory": k.memory,
              "overhead_s": k.overhead_s, "hopper_sdpa": MODEL.hopper_sdpa,
              "watts_8nm": MODEL.watts_per_tflops["8nm"], "watts_4nm": MODEL.watts_per_tflops["4nm"],
              "disk_gbs": bench.DISK_GBS, "pageable_gbs": bench.PAGEABLE_GBS}  # fmt: skip
    for name, value in fitted.items():
        assert best[name] == pytest.approx(value, rel=0.02, abs=0.002), name


def test_every_answer_names_its_card_what_it_counts_and_a_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(FLUX), "--gpu", "RTX 4060 Ti", "--json"]) in (0, 1)
    time = json.loads(capsys.readouterr().out)["time"]
    assert time["card"] == "RTX 4060 Ti" and time["card_source"] == "named"
    assert "sampling" in time["includes"] and "text encoding" in time["includes"] and time["left_out"]
    assert main(["plan", str(FLUX), "--vram", "24GB"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.startswith("time: "))
    assert "on RTX 4090 (assumed: no card named)" in line and "not counted:" in line
    prompt = json.loads(FLUX.read_text())
    planned = plan_workflow(prompt, None, Hardware.for_gpu("RTX 4090"))
    assert planned.workload.steps  # the same prompt planned under a budget gives the range
    from comfyui_headroom.memory.planning.costmodel import Budget
    from comfyui_headroom.memory.planning.planner import plan
    from comfyui_headroom.memory.planning.timing import time_basis

    result = plan(planned.workload, Budget.from_card(24 << 30, 64 << 30), planned.hardware)
    basis = time_basis(result, planned.workload)
    low, high = basis["range_s"]
    assert low == pytest.approx(result.wall_s / HELD_OUT_RATIO[1]) and high == pytest.approx(
        result.wall_s / HELD_OUT_RATIO[0]
    )
    assert Hardware.for_device("NVIDIA GeForce RTX 4090").gpu_source == "device"


def test_a_model_the_catalog_does_not_know_gets_a_range_not_a_point(
    capsys: pytest.CaptureFixture[str],
) -> None:
    prompt = json.loads(FLUX.read_text())
    loader = next(n for n in prompt.values() if n["class_type"] == "UNETLoader")
    loader["inputs"]["unet_name"] = "mochi_preview_dit_bf16.safetensors"  # a family the catalog lacks
    from comfyui_headroom.memory.planning.costmodel import Budget
    from comfyui_headroom.memory.planning.planner import plan
    from comfyui_headroom.memory.planning.timing import time_basis

    planned = plan_workflow(prompt, None, Hardware.for_gpu("RTX 4090"))
    result = plan(planned.workload, Budget.from_card(24 << 30, 64 << 30), planned.hardware)
    basis = time_basis(result, planned.workload)
    assert basis["estimated_models"] and "mochi" in basis["estimated_models"][0]
    low, high = basis["range_s"]
    assert high / low == pytest.approx(UNKNOWN_RATIO[1] / UNKNOWN_RATIO[0])


def _template(name: str) -> dict[str, Any]:
    templates = pytest.importorskip("comfyui_workflow_templates_json")
    return json.loads((Path(templates.__file__).parent / "templates" / f"{name}.json").read_text())


def test_wan_camera_image_to_video_is_sized_by_its_widgets_before_the_run() -> None:
    """The Wan 2.2 Fun Camera template's WanCameraImageToVideo takes width, height and length through links
    from WanCameraEmbedding, which passes its own widgets on (the host runs 720x720x81 there; the
    832x480 left in the node's own widget boxes is what the link overrides). Before: "1024x1024, 1 frame
    assumed" from the LoadImage upstream, a plan at 0.13 of the measured time."""
    from comfyui_headroom.memory.planning.preflight import latent_driver

    planned = plan_workflow(_template("video_wan2_2_14B_fun_camera"), None, Hardware.for_gpu("RTX 4090 D"))
    assert not any("not known before the run" in n for n in planned.workload.notes)
    driver = latent_driver(planned.graph, "102")
    assert driver is not None and driver["class_type"] == "WanCameraImageToVideo"
    assert (driver["width"], driver["height"], driver["frames"]) == (720, 720, 81)
    # the camera node's own widget boxes hold 832x480; the link is what runs
    widgets = _template("video_wan2_2_14B_fun_camera")
    node = next(n for n in widgets["nodes"] if str(n["id"]) == "98")
    assert node["widgets_values"][:3] == [832, 480, 81]


def _set_by_widgets(graph: Any, node: Any, name: str) -> bool:
    """The input is a widget's number, or comes by link from a node that has that input as a number
    (WanCameraEmbedding passes its width, height and length on)."""
    from comfyui_headroom.memory.workflow.graph_types import Link

    value = node.inputs.get(name)
    if isinstance(value, Link) and value.node in graph.nodes:
        value = graph.nodes[value.node].inputs.get(name)
    return isinstance(value, int) and not isinstance(value, bool)


def test_no_template_assumes_a_size_its_own_widgets_set() -> None:
    """Across the official templates, a "latent's size is not known" note never blames a node whose width
    and height are literal widget values (or WanCameraEmbedding's pass-through): those are read."""
    templates = pytest.importorskip("comfyui_workflow_templates_json")
    folder, planned_count, blamed = Path(templates.__file__).parent / "templates", 0, []
    for path in sorted(folder.glob("*.json")):
        try:
            workflow = json.loads(path.read_text(encoding="utf-8"))
            planned = plan_workflow(workflow, None, Hardware.pcie(4))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # the index and non-workflow files
        planned_count += 1
        for note in planned.workload.notes:
            if "latent's size is not known" not in note:
                continue
            node = planned.graph.nodes.get(note.split(" ")[1])
            if node is not None and all(_set_by_widgets(planned.graph, node, n) for n in ("width", "height")):
                blamed.append((path.name, note[:120]))
    assert planned_count > 300 and blamed == []


def test_a_plan_that_does_not_fit_has_no_infinite_time() -> None:
    """On a 1 GiB card Flux does not fit: the plan's time is inf, which JSON cannot carry (a browser's
    JSON.parse refused the whole "Will it fit?" answer and the sidebar read "no answer from the server")."""
    from comfyui_headroom.memory.planning.costmodel import Budget
    from comfyui_headroom.memory.planning.planner import plan
    from comfyui_headroom.memory.planning.timing import time_basis

    planned = plan_workflow(json.loads(FLUX.read_text()), None, Hardware.for_gpu("RTX 4090"))
    result = plan(planned.workload, Budget.from_card(1 << 30, 24 << 30), planned.hardware)
    assert result.wall_s == float("inf")  # what the planner says of a plan that does not fit
    basis = time_basis(result, planned.workload)
    json.dumps(basis, allow_nan=False)  # raises on inf or nan
    assert basis["range_s"] is None and "inf" not in basis["includes"], basis
