"""``plan --why``: a reason line per component per node; without the flag the output is what it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from comfyui_headroom.cli import main

FLUX = Path(__file__).resolve().parents[2] / "example_workflows" / "api" / "Flux Dev text to image.json"
ARGS = ["plan", str(FLUX), "--vram", "8GB", "--ram", "32GB"]
STEP = re.compile(r"^\s{0,3}\d+  (\S+) ")  # a table row: the step number, then the node id


def output(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main([*ARGS, *extra]) == 0
    return capsys.readouterr().out


def test_why_prints_one_reason_per_component_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(output(capsys, "--json"))
    labels = [c["label"] for c in data["components"]]
    text = output(capsys, "--why")
    blocks: dict[str, list[str]] = {}
    node = None
    for line in text.splitlines():
        if match := STEP.match(line):
            node = match.group(1)
            blocks[node] = []
        elif line.startswith("      why ") and node is not None:
            blocks[node].append(line.removeprefix("      why "))
    assert list(blocks) == [s["node"] for s in data["steps"]]
    for step in data["steps"]:
        lines = blocks[step["node"]]
        assert [line.split(": ", 1)[0] for line in lines] == labels, step["node"]
        for cid, placement in step["placements"].items():  # a live placement: the plan's own reason
            label = next(c["label"] for c in data["components"] if c["id"] == cid)
            assert f"{label}: {placement['reason']}" in lines
    sampler = next(s for s in data["steps"] if s["class_type"] == "KSampler")
    (model,) = sampler["placements"].values()
    assert model["reason"].startswith("streamed from pinned RAM: 22.17 GiB does not fit the 7.50 GiB budget")


def test_without_why_the_output_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    plain = output(capsys)
    why = output(capsys, "--why")
    assert "why " not in plain and why.count("\n      why ") == 10 * 4  # 10 nodes, 4 components
    extra = ("      why ", "  host: ")  # the reasons, and what the 2026 host does per node
    assert [line for line in why.splitlines() if not line.startswith(extra)] == plain.splitlines()


def test_why_is_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "--why" in capsys.readouterr().out
