"""The nodes' own texts as a user meets them in the real frontend (#16 items 9, 13, 16 and the help
pages): every title whole at the default width, a tooltip on every input and output in both
renderers, "vram" and "offload" in the node search, a help page behind the info button, and a bad
vram_budget refused when the prompt is queued, before any node runs (node_texts.mjs collects it all in
one browser session)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from headroom_testing.browser_server import TINY_CHECKPOINT, Server

pytestmark = pytest.mark.e2e
NODES = (
    "HeadroomOffloadLoader",
    "HeadroomStreamingSampler",
    "HeadroomStreamModel",
    "HeadroomStreamCLIP",
    "HeadroomTiledVAEDecode",
    "HeadroomMemoryMonitor",
)  # the pack's every node (test_the_list_is_every_node_of_the_pack); node_texts.mjs's TYPES is the same
BAD_BUDGET = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": TINY_CHECKPOINT}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "3": {
        "class_type": "HeadroomStreamingSampler",
        "inputs": {
            "seed": 1,
            "steps": 1,
            "cfg": 1.0,
            "sampler_name": "euler",
            "scheduler": "normal",
            "denoise": 1.0,
            "model": ["4", 0],
            "positive": ["6", 0],
            "negative": ["6", 0],
            "latent_image": ["5", 0],
            "vram_budget": "lots",
        },
    },  # fmt: skip
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}},
}


@pytest.fixture(scope="module")
def seen(comfy_server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    prompt = tmp_path_factory.mktemp("texts") / "bad_budget.json"
    prompt.write_text(json.dumps(BAD_BUDGET))
    result = comfy_server.browser("node_texts.mjs", prompt)
    print(json.dumps(result, indent=1))
    assert result["errors"] == [], result["errors"]
    return result


def test_every_title_is_whole_at_the_default_width(seen: dict[str, Any]) -> None:
    nodes = [seen["nodes"][node_id] for node_id in NODES]
    cut = [
        f"{n['title']!r} ({n['textWidth']:.0f} px in {n['available']:.0f})"
        for n in nodes
        if n["textWidth"] > n["available"]
    ]
    assert not cut, f"titles cut at the default width: {cut}"
    assert not [n["title"] for n in nodes if "DiT" in n["title"]]  # it streams UNets too


def test_every_input_and_output_shows_a_tooltip_on_hover(seen: dict[str, Any]) -> None:
    for node_id in NODES:
        tips = seen["nodes"][node_id]["tooltips"]
        assert {t["kind"] for t in tips} == {"input", "output"}
        missing = [f"{t['kind']} {t['name']}" for t in tips if len(t["text"]) < 15]
        assert not missing, f"{node_id}: no tooltip on {missing}"
        for tip in tips:
            assert "lives between" not in tip["text"] or "encoders lives" not in tip["text"]
            assert not tip["text"].rstrip(".").endswith("checkpoint's"), tip  # a sentence cut short
    sampler = {t["name"]: t["text"] for t in seen["nodes"]["HeadroomStreamingSampler"]["tooltips"]}
    assert "default" in sampler["steps"].lower() and "default" in sampler["vram_budget"].lower()
    loader = {t["name"]: t["text"] for t in seen["nodes"]["HeadroomOffloadLoader"]["tooltips"]}
    assert "text encoders live between" in loader["text_encoder_residency"]


def test_every_input_and_output_shows_a_tooltip_in_the_vue_renderer(seen: dict[str, Any]) -> None:
    if seen["vueTips"] is None:
        pytest.skip(f"frontend {seen['frontend']}: its Vue renderer (a preview before 1.41) has no tooltips")
    for node_id in NODES:
        tips = seen["vueTips"][node_id]
        assert tips, node_id
        missing = [name for name, texts in tips.items() if not texts or min(map(len, texts)) < 15]
        assert not missing, f"{node_id}: no tooltip in the Vue renderer on {missing}"
    loader = seen["vueTips"]["HeadroomOffloadLoader"]
    assert "text encoders live between" in loader["text_encoder_residency"][0]


def test_the_node_search_finds_the_nodes_by_vram_and_offload(seen: dict[str, Any]) -> None:
    vram, offload = " | ".join(seen["search"]["vram"]), " | ".join(seen["search"]["offload"])
    for title in (seen["nodes"][n]["title"] for n in NODES):
        assert title in vram, f"{title!r} not found by 'vram': {vram}"
    assert seen["nodes"]["HeadroomOffloadLoader"]["title"] in offload
    assert seen["nodes"]["HeadroomStreamingSampler"]["title"] in offload


def test_the_info_button_opens_each_nodes_help_page(seen: dict[str, Any]) -> None:
    for node_id in NODES:
        page = seen["help"][node_id]
        assert page["heading"].startswith(page["title"]), page  # the page's own heading, not the description
        assert page["hasInputs"] and page["hasExample"] and page["hasLimits"], page


def test_a_bad_vram_budget_is_refused_on_its_node_before_anything_runs(seen: dict[str, Any]) -> None:
    check = seen["validation"]
    assert check["started"] == [], "a node ran"
    assert list(check["errors"]) == ["3"] and check["errors"]["3"]["errors"][0]["extra_info"][
        "input_name"
    ] == ("vram_budget")
    title = seen["nodes"]["HeadroomStreamingSampler"]["title"]
    if check["dialog"]:  # 1.27-1.4x: the error dialog says the node, the input and why
        assert f"{title}: input vram_budget: 'lots' is not" in check["dialog"]
    else:  # 1.41+: the Workflow Overview names the node and the input; the reason is the server's
        named = (f"{title} - vram_budget", f"vram_budget - {title}")  # 1.49+, 1.41
        assert any(text in check["panel"] for text in named), check["panel"]
        error = check["errors"]["3"]["errors"][0]
        assert "'lots' is not" in f"{error.get('message')} {error.get('details')}", error


def test_the_help_pages_exist_for_every_node_in_the_web_directory() -> None:
    docs = Path(__file__).resolve().parents[2] / "js" / "docs"
    for node_id in NODES:
        text = (docs / f"{node_id}.md").read_text()
        assert text.startswith("# ") and "## Inputs" in text and "## Example" in text and "## Limits" in text


def test_the_list_is_every_node_of_the_pack() -> None:
    from comfyui_headroom.nodes import NODE_CLASS_MAPPINGS

    assert sorted(NODES) == sorted(NODE_CLASS_MAPPINGS)
    script = (Path(__file__).parent / "node_texts.mjs").read_text()
    assert all(f'"{node_id}"' in script for node_id in NODES)
