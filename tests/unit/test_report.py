"""The text report and the JSON say the same thing: every figure the text prints is the JSON's, at the
printed precision, for random plans through the real planner."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from comfyui_headroom.memory.planning.baselines import BASELINES
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware, Tier
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.planning.report import plan_json, plan_text
from comfyui_headroom.memory.planning.workload import Component, Step, Workload
from comfyui_headroom.memory.units import GB
from headroom_testing.strategies import workloads

HW = Hardware.pcie(4)
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
SIZE = r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)"


def same_bytes(text: tuple[str, str], value: float) -> None:
    """A printed size (two decimals, or whole bytes) against the JSON's bytes."""
    number, unit = text
    step = 0.5 if unit == "B" else 0.005
    assert abs(float(number) - value / UNITS[unit]) <= step + 1e-9, (text, value)


def same_number(text: str, value: float) -> None:
    decimals = len(text.partition(".")[2])
    assert abs(float(text) - value) <= 0.5 * 10**-decimals + 1e-9, (text, value)


def check_action(line: str, action: dict[str, Any], label: str) -> None:
    assert line == action["text"]
    rest = line.replace(label, "<c>")
    sizes = re.findall(SIZE, rest)
    seconds = re.findall(r"(\d+\.\d+) s\b", rest)
    kind = action["kind"]
    assert rest.startswith(kind)
    if kind in ("copy", "load"):
        same_bytes(sizes[0], action["bytes"])
        same_number(seconds[0], action["seconds"])
        if kind == "copy" and len(sizes) == 3:
            same_bytes(sizes[1], action["pinned_bytes"])
            same_bytes(sizes[2], action["pageable_bytes"])
        else:
            assert len(sizes) == 1 and action["pinned_bytes"] + action["pageable_bytes"] in (
                0,
                action["bytes"],
            )
            # one host only: where the copy goes is the one the bytes are in
            if kind == "copy":
                assert (" to pinned RAM " in rest) == (action["pinned_bytes"] > 0)
    elif kind == "stream":
        k, n, depth, evaluations = re.search(
            r"(\d+)/(\d+) blocks resident, prefetch (\d+), .* x (\d+)", rest
        ).groups()
        assert (int(k), int(n), int(depth), int(evaluations)) == (
            action["resident_blocks"], action["total_blocks"], action["prefetch_depth"], action["evaluations"]
        )  # fmt: skip
        same_bytes(sizes[0], action["bytes"])
        same_number(seconds[-1], action["seconds"])
        if action["source"] == "pinned RAM" and action["pageable_bytes"]:
            same_bytes(sizes[1], action["pinned_bytes"])
            same_bytes(sizes[2], action["pageable_bytes"])
            assert " from RAM " in rest
        else:
            assert len(sizes) == 1 and f" from {action['source']}," in rest
    else:
        assert not sizes and not seconds


def check_text_against_json(text: str, data: dict[str, Any]) -> None:
    lines = text.splitlines()
    labels = {c["id"]: c["label"] for c in data["components"]}
    by_label = {v: k for k, v in labels.items()}
    budget = re.match(rf"budget: {SIZE} usable VRAM, {SIZE} RAM \({SIZE} pinnable\)", next(
        line for line in lines if line.startswith("budget: "))).groups()  # fmt: skip
    for (number, unit), key in zip(
        zip(budget[::2], budget[1::2], strict=True), ("vram", "ram", "pinned"), strict=True
    ):
        same_bytes((number, unit), data["budget"][key])
    minimum = next(line for line in lines if line.startswith("minimum VRAM"))
    found = re.match(rf"minimum VRAM for this workflow: {SIZE} \(set by (.*)\)$", minimum).groups()
    same_bytes(found[:2], data["min_vram_bytes"])
    assert found[2] == data["bottleneck"]
    fits = next(line for line in lines if line.startswith("fits: "))
    if data["fits"]:
        yes = rf"fits: yes; VRAM peak {SIZE}; predicted transfer (\S+) s, wall (\S+) s$"
        peak, unit, transfer, wall = re.match(yes, fits).groups()
        same_bytes((peak, unit), data["vram_peak"])
        same_number(transfer, data["transfer_s"])
        same_number(wall, data["wall_s"])
    else:
        short = re.match(rf"fits: NO; it needs {SIZE} more usable VRAM \((.*)\)$", fits).groups()
        same_bytes(short[:2], data["short_bytes"])
        assert short[2] == data["bottleneck"]
        assert f"to fit: {data['advice']}" in lines
    for name, b in data["baselines"].items():
        line = next(line for line in lines if line.startswith(f"{name:>13}: "))
        transfer = re.search(r"transfer (\S+) s", line).group(1)
        same_number(transfer, b["transfer_s"])
        assert ("fits" in line.split(",")[1]) == b["fits"]
        less = re.search(r"Headroom moves (\d+)% (less|more)", line)
        assert (less is None) == (b["headroom_moves_less"] is None)
        if less:
            sign = 1 if less.group(2) == "less" else -1
            same_number(str(sign * int(less.group(1))), 100 * b["headroom_moves_less"])
    # the table: one row per step, then its actions and prefetches in order
    row = re.compile(r"^\s*(\d+)  (.{28}) (.*?) +(\d+\.\d\d) +(\d+\.\d\d)$")
    rows = [n for n, line in enumerate(lines) if row.match(line)]
    assert len(rows) == (len(data["steps"]) if data["fits"] else 0)
    for n, step in zip(rows, data["steps"], strict=True):
        number, node, cells, vram, transfer = row.match(lines[n]).groups()
        assert node.strip() == f"{step['node']} {step['class_type']}"[:28].strip()
        same_number(vram, step["vram_peak"] / 2**30)
        same_number(transfer, step["transfer_s"])
        shown = {} if cells == "-" else dict(cell.split(": ") for cell in cells.split(", "))
        assert {by_label[k]: v for k, v in shown.items()} == {
            cid: p["tier"] + (f" {p['resident_blocks']}/{p['blocks']}" if p["blocks"] else "")
            for cid, p in step["placements"].items()
        }
        items = [*step["actions"], *step["prefetch"]]
        for k, item in enumerate(items, 1):
            line = lines[n + k].removeprefix("      - ")
            if "kind" in item:
                check_action(line, item, labels[item["component"]])
            else:
                assert line == item["text"]
                rest = line.replace(labels[item["component"]], "<c>")
                same_bytes(re.findall(SIZE, rest)[0], item["bytes"])
                same_number(re.search(r"(\d+\.\d+) s\)", rest).group(1), item["seconds"])
                assert rest.endswith(f"for node {item['node']}")
        # what the JSON says of the step adds up: moves priced into it, host copies held during it
        assert sum(a["seconds"] for a in step["actions"]) == pytest.approx(step["transfer_s"], abs=1e-9)
        assert step["ram"] == sum(
            p["pinned_bytes"] + p["pageable_bytes"] for p in step["placements"].values()
        )
        assert step["pinned"] == sum(p["pinned_bytes"] for p in step["placements"].values())
        for p in step["placements"].values():  # only a stream can be cut short by the pinned cap
            partly = p["tier"].startswith("stream<-pinned") and p["pinned_bytes"] < p["streamed_bytes"]
            assert (p["tier"] == "stream<-pinned+ram") == partly


def render(w: Workload, budget: Budget) -> tuple[str, dict[str, Any]]:
    result = plan(w, budget, HW)
    baselines = {name: policy(w, budget, HW) for name, policy in BASELINES.items()}
    return plan_text(result, w, baselines), plan_json(result, w, baselines)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_printed_figure_is_the_json_s(case: tuple[Workload, Budget]) -> None:
    check_text_against_json(*render(*case))


def test_a_stream_beyond_the_pinned_cap_says_so_in_text_and_json() -> None:
    block = 1 * GB
    model = Component("m", "model", 21 * GB, (block,) * 20)
    w = Workload((model,), (Step("3", "KSampler", ("m",), evaluations=20),))
    budget = Budget(vram=6 * GB, ram=64 * GB, pinned=8 * GB)
    text, data = render(w, budget)
    check_text_against_json(text, data)
    p = data["steps"][0]["placements"]["m"]
    assert p["tier"] == "stream<-pinned+ram"
    assert p["pinned_bytes"] == 8 * GB < p["streamed_bytes"]
    assert p["pageable_bytes"] == model.bytes - 8 * GB, "the rest of its copy, resident blocks too, pageable"
    assert "from RAM (7.45 GiB pinned + " in text and "pageable)" in text
    copy = next(a for a in data["steps"][0]["actions"] if a["kind"] == "copy")
    assert copy["pinned_bytes"] == 8 * GB and "to pinned RAM" not in copy["text"]


def test_a_partly_pinned_stream_is_priced_pinned_and_pageable() -> None:
    block = 1 * GB
    model = Component("m", "model", 21 * GB, (block,) * 20)
    w = Workload((model,), (Step("3", "KSampler", ("m",), evaluations=20),))
    capped = plan(w, Budget(vram=6 * GB, ram=64 * GB, pinned=8 * GB), HW)
    [stream] = [a for a in capped.steps[0].actions if a.kind == "stream"]
    placement = capped.steps[0].placements["m"]
    assert placement.tier == Tier.STREAM_PINNED
    share = stream.pinned_bytes / stream.bytes
    once = model.bytes - stream.bytes  # the non-block weights and the resident blocks
    expected = once * (share / HW.h2d_pinned + (1 - share) / HW.h2d_pageable) + 20 * (
        stream.pinned_bytes / HW.h2d_pinned + stream.pageable_bytes / HW.h2d_pageable
    )
    assert stream.seconds == pytest.approx(expected, rel=1e-12)
    # a "stream from pinned RAM" that pins nothing costs exactly a stream from pageable RAM
    nothing = plan(w, Budget(vram=6 * GB, ram=64 * GB, pinned=0), HW)
    unpinned = [a for a in nothing.steps[0].actions if a.kind == "stream"][0]
    assert (
        unpinned.seconds == pytest.approx((once + 20 * stream.bytes) / HW.h2d_pageable, rel=1e-12)
        and unpinned.seconds > stream.seconds
    )
