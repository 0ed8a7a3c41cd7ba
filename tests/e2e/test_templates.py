"""Headroom's example workflows as Browse Templates shows them (issue #16, items 1 and 10): a card per
example with a readable title and a thumbnail; each example opened from its card lays out without
overlapping nodes, shows every widget of the Offload Loader, and offers its model files for download
in the missing-models dialog, or in the Workflow Overview's Missing Models group on 1.49+ (the server
has none of them). A screenshot of each opened example is
saved as example-<name>.png."""

from __future__ import annotations

import re

import pytest

from headroom_testing.browser_server import ROOT, Server

pytestmark = pytest.mark.e2e
EXAMPLES = ROOT / "example_workflows"
SAFE = re.compile(r"[^\w.-]+")  # templates.mjs names the screenshots so
TITLE_HEIGHT = 30  # LiteGraph.NODE_TITLE_HEIGHT: the title bar is drawn above a node's pos


def model_files(state: dict) -> set[str]:
    """The model files the opened workflow's widgets name."""
    values = [w["value"] for n in state["nodes"] for w in n["widgets"]]
    return {v for v in values if isinstance(v, str) and v.endswith(".safetensors")}


def overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Two (x, y, w, h) rectangles share some area (touching edges do not count)."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


@pytest.fixture(scope="module")
def seen(comfy_server: Server) -> dict:
    pack = next(
        p.name for p in (comfy_server.home / "custom_nodes").iterdir() if (p / "__init__.py").is_file()
    )
    return comfy_server.browser("templates.mjs", pack)


def test_cards_have_readable_titles_and_thumbnails(seen: dict) -> None:
    cards = {card["name"]: card for card in seen["cards"]}
    for name, card in cards.items():
        assert card["thumbnail"] and all(img["width"] > 0 for img in card["thumbnail"]), (
            f"{name}: no thumbnail"
        )
        assert card["title"] == name and re.fullmatch(r"[A-Z][\w .,()]+", name) and "_" not in name, card
    expected = sorted(p.stem for p in EXAMPLES.glob("*.json"))
    assert sorted(cards) == expected, "one card per example in example_workflows/, none twice"


def test_opened_examples_have_no_overlapping_nodes(seen: dict) -> None:
    assert len(seen["examples"]) == len(list(EXAMPLES.glob("*.json")))
    for name, state in seen["examples"].items():
        boxes = [(b["x"], b["y"], b["w"], b["h"]) for b in state["boxes"]]
        pairs = [
            (a["type"], b["type"])
            for i, a in enumerate(state["boxes"])
            for j, b in enumerate(state["boxes"])
            if i < j and overlaps(boxes[i], boxes[j])
        ]
        assert not pairs, f"{name}: overlapping nodes {pairs}"


def test_every_offload_loader_widget_is_visible(seen: dict) -> None:
    loaders = 0
    for name, state in seen["examples"].items():
        for node in state["nodes"]:
            if node["type"] != "HeadroomOffloadLoader":
                continue
            loaders += 1
            x, y = node["pos"]
            others = [
                (o["pos"][0], o["pos"][1] - TITLE_HEIGHT, o["size"][0], o["size"][1] + TITLE_HEIGHT)
                for o in state["nodes"]
                if o["id"] != node["id"]
            ]
            assert len(node["widgets"]) == 11
            for widget in node["widgets"]:
                assert widget["y"] + widget["h"] <= node["size"][1] + 1, (
                    f"{name}: {widget['name']} below the node"
                )
                row = (x, y + widget["y"], node["size"][0], widget["h"])
                covered = [o for o in others if overlaps(row, o)]
                assert not covered, f"{name}: the Offload Loader's {widget['name']} is covered"
    assert loaders == 3  # one in the Flux example, one per expert in the Wan one


def test_missing_models_dialog_offers_the_official_downloads(seen: dict) -> None:
    for name, state in seen["examples"].items():
        files = model_files(state)
        assert files, name
        # 1.27-1.4x: the missing-models dialog; 1.49+: the Workflow Overview's Missing Models group, whose
        # "Copy URL" gives Hugging Face's page form of the same file (/blob/ for /resolve/)
        offered = {
            m["label"].split(" / ")[-1]: {**m, "url": (m["url"] or "").replace("/blob/", "/resolve/", 1)}
            for m in state["missingModels"]
        }
        assert set(offered) == files, f"{name}: the missing-models dialog lists {sorted(offered)}"
        for file, entry in offered.items():
            assert entry["url"].startswith("https://huggingface.co/") and entry["url"].endswith("/" + file)
            assert entry["download"], f"{name}: {file} cannot be downloaded from the dialog"
        linked = {m["name"]: m["url"] for n in state["nodes"] for m in n["models"]}
        assert set(linked) == files and all(linked[f] == offered[f]["url"] for f in files)
        note = [n for n in state["nodes"] if n["type"] == "MarkdownNote"]
        assert len(note) == 1


def test_each_opened_example_is_screenshotted(seen: dict, comfy_server: Server) -> None:
    for name in seen["examples"]:
        shot = comfy_server.artifacts / f"example-{SAFE.sub('_', name)}.png"
        assert shot.is_file() and shot.stat().st_size > 10_000, shot
    assert (comfy_server.artifacts / "templates-dialog.png").is_file()
