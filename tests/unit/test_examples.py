"""The example workflows: each UI workflow parses to exactly its API twin, and both plan; each is a
template the frontend can show (thumbnail, readable file name, a note, download links on its loaders,
a layout whose boxes do not meet). tests/e2e/test_templates.py checks the same in a real browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.extract import workload_from_graph
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.units import GiB
from comfyui_headroom.memory.workflow.graph import load_workflow
from comfyui_headroom.memory.workflow.order import predict_order

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "example_workflows"
EXAMPLES = sorted(p.stem for p in (WORKFLOWS / "api").glob("*.json"))
TITLE_HEIGHT = 30  # the frontend draws a node's title bar above its pos


def test_there_are_examples() -> None:
    assert {"Flux Dev text to image", "Wan 2.2 14B text to video"} <= set(EXAMPLES)
    # ComfyUI lists every *.json of example_workflows/ (and of workflows/, examples/, ...) as a template:
    # exactly the UI workflows, each once.
    assert sorted(p.stem for p in WORKFLOWS.glob("*.json")) == EXAMPLES
    assert not (ROOT / "workflows").exists()


@pytest.mark.parametrize("name", EXAMPLES)
def test_ui_workflow_is_its_api_twin(name: str) -> None:
    ui, api = load_workflow(WORKFLOWS / f"{name}.json"), load_workflow(WORKFLOWS / "api" / f"{name}.json")
    assert ui.format == "ui" and api.format == "api"
    assert {k: (n.class_type, n.inputs) for k, n in ui.nodes.items()} == {
        k: (n.class_type, n.inputs) for k, n in api.nodes.items()
    }


# the examples for small cards and small files (fp16 SDXL, and fp8 Flux.2 Klein from its official template)
SMALL_CARDS = ("SDXL on an 8 GB card", "Flux.2 Klein 4B fp8 on an 8 GB card")


def test_the_small_card_examples_are_examples() -> None:
    assert set(SMALL_CARDS) <= set(EXAMPLES)


@pytest.mark.parametrize("name", [e for e in EXAMPLES if e not in SMALL_CARDS])
def test_examples_fit_a_12gb_card_with_streaming(name: str) -> None:
    graph = load_workflow(WORKFLOWS / f"{name}.json")
    workload = workload_from_graph(graph, predict_order(graph))
    assert all(c.source == "catalog" for c in workload.components), "every model file is catalogued"
    result = plan(workload, Budget.from_card(16 * GiB, 64 * GiB), Hardware.pcie(4))
    assert result.feasible
    assert any(p.tier.gpu == "S" for s in result.steps for p in s.placements.values())


@pytest.mark.parametrize("name", SMALL_CARDS)
def test_the_small_card_examples_fit_8gb_and_16gb_of_ram_as_their_notes_say(name: str) -> None:
    graph = load_workflow(WORKFLOWS / f"{name}.json")
    workload = workload_from_graph(graph, predict_order(graph))
    assert all(c.source == "catalog" for c in workload.components), "every model file is catalogued"
    # small files: each loads whole into the 7.5 GiB an 8 GB card leaves usable, all of them in 10 GiB
    assert max(c.bytes for c in workload.components) < 7.5 * GiB
    assert sum(c.bytes for c in workload.components) < 10 * GiB
    result = plan(workload, Budget.from_card(8 * GiB, 16 * GiB), Hardware.pcie(4))
    assert result.feasible
    peak = max(s.vram_peak for s in result.steps)
    ui = json.loads((WORKFLOWS / f"{name}.json").read_text(encoding="utf-8"))
    note = next(n for n in ui["nodes"] if n["type"] == "MarkdownNote")["widgets_values"][0]
    assert f"VRAM peak {peak / GiB:.1f} GiB" in note and "With 8 GB of VRAM and 16 GB of RAM it fits" in note


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 9 < len(data):
        marker, length = data[i + 1], int.from_bytes(data[i + 2 : i + 4], "big")
        if 0xC0 <= marker <= 0xC3:  # start of frame: height, then width
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        i += 2 + length
    raise AssertionError("no JPEG frame header")


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_has_a_readable_name_and_a_thumbnail(name: str) -> None:
    assert re.fullmatch(r"[A-Z][\w .,()]+", name) and "_" not in name  # the card's title is the file name
    data = (WORKFLOWS / f"{name}.jpg").read_bytes()  # what the frontend fetches: <name>.jpg
    assert data[:3] == b"\xff\xd8\xff"
    width, height = _jpeg_size(data)
    assert abs(width / height - 4 / 3) < 0.01 and width >= 600  # the cards are 4:3


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_has_a_note_and_download_links(name: str) -> None:
    ui = json.loads((WORKFLOWS / f"{name}.json").read_text(encoding="utf-8"))
    api = json.loads((WORKFLOWS / "api" / f"{name}.json").read_text())
    files = {
        v
        for n in api.values()
        for v in n["inputs"].values()
        if isinstance(v, str) and v.endswith(".safetensors")
    }
    notes = [n for n in ui["nodes"] if n["type"] == "MarkdownNote"]
    assert len(notes) == 1
    text = notes[0]["widgets_values"][0]
    assert re.search(
        r"at least \*\*[\d.]+ GiB\*\* of VRAM\. With \d+ GB of VRAM and \d+ GB of RAM it fits", text
    )
    linked = {}
    for node in ui["nodes"]:
        for model in node["properties"].get("models", []):
            assert model["name"] in node["widgets_values"]  # the frontend offers only the selected files
            assert model["url"].startswith("https://huggingface.co/") and model["url"].endswith(
                "/" + model["name"]
            )
            assert f"]({model['url']})" in text
            linked[model["name"]] = model["directory"]
    assert set(linked) == files
    assert set(linked.values()) <= {"diffusion_models", "text_encoders", "vae", "checkpoints"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_stored_node_boxes_do_not_meet(name: str) -> None:
    ui = json.loads((WORKFLOWS / f"{name}.json").read_text(encoding="utf-8"))
    boxes = [(n["pos"][0], n["pos"][1] - TITLE_HEIGHT, *n["size"]) for n in ui["nodes"]]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] + TITLE_HEIGHT <= b[1]
            assert apart or b[1] + b[3] + TITLE_HEIGHT <= a[1], (name, a, b)


@pytest.mark.parametrize("name", EXAMPLES)
def test_m13_each_note_sends_artists_to_the_button_before_the_command_line(name: str) -> None:
    ui = json.loads((WORKFLOWS / f"{name}.json").read_text(encoding="utf-8"))
    text = next(n for n in ui["nodes"] if n["type"] == "MarkdownNote")["widgets_values"][0]
    button = text.find("Your card: press **Will it fit?** in the Headroom sidebar")
    assert 0 <= button < text.find("python -m comfyui_headroom plan"), text
