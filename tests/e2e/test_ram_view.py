"""RAM per node in a real browser (#17 item 1): the residency timeline shows, for every node the plan
knows, the RAM it ended with (RssAnon + pinned, read from the OS) against the plan's prediction, with
the RAM budget as a line and over-budget nodes highlighted; the RAM budget setting reaches the server,
and a value it refuses is said in a toast.

One browser session (ram_view.mjs) serves every test here; each test checks one thing of what it saw.
The server is this module's own: the session's (``comfy_server``) assumes a 1 GB card, all of which
ComfyUI's inference reserve on a CPU (1.19 GiB) takes, so the residency controller, and the RAM guard
with it, stands aside there. Here the card is 8 GB."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from headroom_testing.browser_server import TINY_CHECKPOINT, Server, start_server

pytestmark = pytest.mark.e2e
MiB = 2**20
PROMPT: dict[str, Any] = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": TINY_CHECKPOINT}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a blue sphere", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "3": {"class_type": "KSampler", "inputs": {
        "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0], "seed": 7,
        "steps": 2, "cfg": 5.0, "sampler_name": "euler", "scheduler": "normal", "denoise": 1.0}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}},
}  # fmt: skip
SMALL: dict[str, Any] = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 99}},
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
    "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
}  # fmt: skip


@pytest.fixture(scope="module")
def ram_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with start_server(tmp_path_factory.mktemp("e2e_ram"), env={"HEADROOM_ASSUME_VRAM": "8GB"}) as server:
        yield server


@pytest.fixture(scope="module")
def seen(ram_server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("ram_view")
    prompt_file, small_file = folder / "prompt.json", folder / "small.json"
    prompt_file.write_text(json.dumps(PROMPT))
    small_file.write_text(json.dumps(copy.deepcopy(SMALL)))
    result = ram_server.browser("ram_view.mjs", prompt_file, small_file)
    shown = {k: v for k, v in result.items() if k not in ("auto", "over")}
    for run in ("auto", "over"):
        shown[run] = {k: v for k, v in result.get(run, {}).items() if k != "ledger"}
    print(json.dumps(shown, indent=1)[:8000])
    assert result["pageErrors"] == [], result["pageErrors"]
    return result


def cells(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["node"]: r for r in view["rows"]}


def test_each_planned_node_shows_its_ram_against_the_prediction_and_the_budget(seen: dict[str, Any]) -> None:
    view = seen["auto"]
    assert "RAM at end (actual / predicted)" in view["columns"], view["columns"]
    ledger = {r["node"]: r for r in view["ledger"]["nodes"]}
    assert {"3", "4", "8"} <= set(ledger), ledger.keys()  # the loader, the sampler, the decoder
    shown = cells(view)
    for node, record in ledger.items():
        text = shown[node]["text"]
        # "1.2 GiB / 1.1 GiB": the OS's RssAnon + pinned, then the plan's prediction, as the ledger has them
        figures = re.match(r"(\d+(?:\.\d+)?) (MiB|GiB) / (\d+(?:\.\d+)?) (MiB|GiB)", text)
        assert figures, text
        actual = float(figures[1]) * (1024 if figures[2] == "GiB" else 1)
        assert actual == pytest.approx((record["anon"] + record["pinned"]) / MiB, rel=0.06), (text, record)
        assert "RssAnon" in shown[node]["title"] and "RAM budget" in shown[node]["title"]
        assert shown[node]["line"] is not None  # the budget line is drawn
    lines = {round(shown[node]["line"]) for node in ledger}
    assert len(lines) == 1, lines  # at one place on every row: a line down the column
    assert re.search(r"RAM budget \d+(\.\d)? GiB \(machine default\)", view["ramHeader"]), view["ramHeader"]
    assert "after the prompt RssAnon" in view["ramHeader"]
    assert not any(r["rowOver"] for r in view["rows"])  # the machine's budget: nothing over


def test_a_budget_below_what_comfyui_holds_is_highlighted_at_every_node(seen: dict[str, Any]) -> None:
    small = seen["small"]
    assert small["budget"]["source"] == "setting" and small["note"] == ""
    assert small["budget"]["ram"] == int(seen["smallSetting"].removesuffix("MB")) * MiB
    view = seen["over"]
    assert view["ledger"]["budget"]["ram"] == small["budget"]["ram"]  # the setting reached the guard
    ledger = {r["node"] for r in view["ledger"]["nodes"]}
    assert ledger >= {"1", "2"}, ledger
    shown = cells(view)
    for node in ledger:
        row = shown[node]
        assert row["rowOver"] and row["over"] == "true" and "over budget" in row["text"], row
        assert row["background"] not in ("", "rgba(0, 0, 0, 0)"), row  # tinted
        assert "over by" in row["title"], row
    assert "(setting)" in view["ramHeader"] and re.search(r"over at \d+ node", view["ramHeader"])


def test_a_size_the_server_refuses_is_said_and_changes_nothing(seen: dict[str, Any]) -> None:
    assert "not a size" in seen["refused"]["error"], seen["refused"]
    assert "RAM budget not changed" in seen["refusedToast"] and "not a size" in seen["refusedToast"]
    assert seen["afterRefusal"]["budget"] == seen["small"]["budget"]
    assert seen["initialBudget"]["budget"]["source"] == "machine"  # the page sent "auto" at load


def test_the_screenshots_were_taken(seen: dict[str, Any], ram_server: Server) -> None:
    for name in ("ram-timeline.png", "ram-over-budget.png"):
        assert (ram_server.artifacts / name).stat().st_size > 2_000, name
