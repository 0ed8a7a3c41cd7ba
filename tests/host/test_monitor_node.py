"""The Memory Monitor node in a real host's executor: it passes any input through unchanged, runs every
time, reports memory and plan-vs-actual, and the executor hooks record every node that ran."""

from __future__ import annotations

import copy

import pytest
import torch

from headroom_testing.harness import Host

pytestmark = pytest.mark.host


PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 32, "height": 24, "batch_size": 1, "color": 255}},
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
    "3": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "4": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["3", 0]}},
    "5": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
    "6": {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}},
}


def test_monitor_passes_any_input_through_unchanged(host: Host) -> None:
    result = host.run(copy.deepcopy(PROMPT))
    image, latent = result.outputs["1"][0][0], result.outputs["3"][0][0]
    assert result.outputs["2"][0][0] is image  # the very object: no copy, no conversion
    stock_keys = set(host.node_class("EmptyLatentImage")().generate(64, 64, 1)[0])  # 0.18: extra keys
    assert result.outputs["4"][0][0] is latent and set(latent) == stock_keys
    assert torch.equal(result.outputs["5"][0][0], 1.0 - image)
    text = result.outputs["2"][1][0]
    assert text.startswith("Headroom memory at node 2 (VRAM Stats):") and "process RSS" in text
    chart = result.outputs["2"][2][0]
    assert chart.shape == (1, 64, 64, 3)  # nothing consumes the chart: the cheap placeholder
    assert result.ui["2"]["text"] == [text]


def test_the_monitor_names_nodes_by_their_titles(host: Host) -> None:
    """N15: the report names nodes as the canvas does (the prompt's _meta titles), not by class alone."""
    prompt = copy.deepcopy(PROMPT)
    prompt["2"]["_meta"] = {"title": "Memory after the image"}
    prompt["1"]["_meta"] = {"title": "Blank canvas"}
    text = host.run(prompt).outputs["2"][1][0]
    assert text.startswith("Headroom memory at node 2 (Memory after the image):")
    assert "Blank canvas" in text and "EmptyImage" not in text


def test_monitor_runs_every_time_and_nodes_are_recorded(host: Host) -> None:
    # A fresh copy per run, as every POST /prompt is: hosts store IS_CHANGED results in the prompt dict.
    host.run(copy.deepcopy(PROMPT))
    again = host.run(copy.deepcopy(PROMPT))
    assert "1" not in again.executed  # the stock node is cached...
    assert {"2", "4"} <= set(again.executed)  # ...the monitors run again (IS_CHANGED is NaN)
    report = host.pack_module("nodes.host.state").monitor().telemetry.report(again.prompt_id)
    ran = [row["node"] for row in report["nodes"] if row["status"] == "done"]
    assert sorted(ran) == sorted(set(again.executed))
    assert all(row["duration_s"] >= 0 for row in report["nodes"] if row["status"] == "done")
    assert report["peaks"].get("rss", 0) > 0


def test_monitor_draws_the_chart_when_it_is_used(host: Host) -> None:
    prompt = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 16, "height": 16, "batch_size": 1, "color": 0}},
        "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 2]}},
    }
    chart = host.run(prompt).outputs["2"][2][0]
    assert chart.ndim == 4 and chart.shape[0] == 1 and chart.shape[3] == 3 and chart.shape[1] > 64
    assert chart.dtype == torch.float32 and 0.0 <= float(chart.min()) and float(chart.max()) <= 1.0


def test_plan_vs_actual_with_an_assumed_card(host: Host) -> None:
    state = host.pack_module("nodes.host.state")
    state.monitor().configure(assume_vram=8 * 2**30)
    try:
        result = host.run(copy.deepcopy(PROMPT))
    finally:
        state.monitor().configure(assume_vram=None)
    report = state.monitor().telemetry.report(result.prompt_id)
    assert report["plan"]["fits"] is True and report["plan"]["budget_vram"] == 8 * 2**30 - 2**29
    planned = {row["node"]: row["planned_order"] for row in report["nodes"]}
    assert planned["2"] is not None and planned["6"] is not None  # every node of this prompt was planned
    csv = state.monitor().telemetry.report(result.prompt_id, "csv")
    assert csv.splitlines()[0].startswith("order,node,class_type,status")


def test_the_hooks_are_on_for_this_host(host: Host) -> None:
    hooks = host.pack_module("nodes.host").install_monitor()
    assert hooks["nodes"] == "on" and hooks["oom_retry"] == "on" and hooks["validation"] == "on", hooks
    assert hooks["server"].startswith("off: no PromptServer") or hooks["server"] == "on"


def test_a_cpu_run_says_what_bounded_each_node_in_the_timeline_and_the_vram_stats_text(host: Host) -> None:
    # A latent no other test makes: the host's cache would otherwise skip node 3 (and 1) when an earlier
    # test ran PROMPT, and the host may run node 4 before node 2, leaving no done node before it.
    prompt = copy.deepcopy(PROMPT)
    prompt["3"]["inputs"]["width"] = 72
    result = host.run(prompt)
    assert "3" in result.executed
    monitor = host.pack_module("nodes.host.state").monitor()
    report = monitor.telemetry.report(result.prompt_id)  # the timeline's data (/headroom/report)
    done = [row for row in report["nodes"] if row["status"] == "done"]
    assert done and all(row["bounded_by"]["kind"] in ("compute", "disk", "upload") for row in done)
    assert all(row["bounded_by"]["line"].startswith(row["bounded_by"]["kind"] + "-bound: ") for row in done)
    bound = done[0]["bounded_by"]
    assert bound["spill_note"].startswith("not reported by this OS")  # Linux: no sysmem fallback
    assert bound["aimdo_vram"] is None and bound["aimdo_note"]  # a CPU host pages nothing with aimdo
    text = result.outputs["4"][1][0]  # VRAM Stats, after the nodes before it finished
    assert any(row["bounded_by"]["line"] in text for row in done if row["node"] != "4")
    assert text.count("spill into shared memory: not reported by this OS") == 1
