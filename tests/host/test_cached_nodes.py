"""Nodes the host serves from its cache, as telemetry sees them in a real executor (#16 item 11): a re-run
reports them "cached" with the prompt that computed them, and their badges keep that run's figures."""

from __future__ import annotations

import copy

import pytest

from headroom_testing.harness import Host

pytestmark = pytest.mark.host

PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 32, "height": 24, "batch_size": 1, "color": 7}},
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},  # runs every time
}


def test_a_rerun_reports_cached_nodes_with_the_run_that_computed_them(host: Host) -> None:
    telemetry = host.pack_module("nodes.host.state").monitor().telemetry
    first = host.run(copy.deepcopy(PROMPT))  # a fresh copy per run, as every POST /prompt is
    second = host.run(copy.deepcopy(PROMPT))
    assert "1" in second.cached and "1" not in second.executed
    rows = {r["node"]: r for r in telemetry.report(second.prompt_id)["nodes"]}
    assert rows["2"]["status"] == "done"
    badges = {
        b["node"]: b
        for run in telemetry.recent()
        for b in run["nodes"]
        if run["prompt_id"] == second.prompt_id
    }
    assert rows["1"]["status"] == "cached" and rows["1"]["cached_from"] == first.prompt_id
    assert rows["1"]["duration_s"] is None and rows["1"]["planned_vram_peak"] is None
    computed = telemetry.run(first.prompt_id).nodes["1"]
    assert badges["1"]["status"] == "cached" and badges["1"]["duration_s"] == computed.duration_s
    assert badges["1"]["rss_peak"] == computed.peak.get("rss")
