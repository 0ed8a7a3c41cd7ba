"""The residency controller on CUDA, through the benchmark in a subprocess (the host must import with CUDA,
while this test session's host runs on the CPU): the Offload Loader's two-expert workflow gives the stock
loaders' image, applies its plan, never exceeds the budget, and each node's real peak VRAM stays within
the plan's prediction for it. Skipped (with the reason) where there is no CUDA device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]

ROOT = Path(__file__).resolve().parents[2]
SLACK = 64 * 2**20  # the CUDA context's workspace and allocator rounding, outside any plan


def test_two_experts_follow_the_plan_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "residency.json"
    command = [sys.executable, str(ROOT / "bench" / "residency_gpu.py"), "--size", "tiny", "--res", "256"]
    command += ["--steps", "4", "--repeats", "1", "--json", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, timeout=900)
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert row["identical"], "the Offload Loader's image differs from the stock loaders'"
    assert row["applied_equals_planned"] and row["over_budget_events"] == 0
    assert any(e["kind"] == "planned" for e in row["events"]), "the controller planned no move at all"
    assert row["headroom_peak"] is not None and row["headroom_peak"] <= data["meta"]["cap_bytes"] + SLACK
    compared = 0
    for node, peak in row["headroom_node_peaks"].items():
        planned = row["planned_node_peaks"].get(node)
        if peak is not None and planned is not None:
            compared += 1
            assert peak <= planned + SLACK, f"node {node}: {peak} bytes on the device, plan said {planned}"
    assert compared >= 3, "too few nodes had both a measured and a planned peak"
