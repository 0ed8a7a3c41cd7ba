"""The run's state in a real browser (#16 items 2, 3, 4, 8, 11): the tiny SD1.5 workflow with the
streaming sampler and a Memory Monitor runs twice, the page is reloaded, another workflow is opened.
One browser session (run_state.mjs) records what the user sees; each test checks one item."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from headroom_testing.browser_server import ROOT, TINY_CHECKPOINT, Server

pytestmark = pytest.mark.e2e

# Node ids like the host's default workflow: the other workflow (flux_dev_2048_tiled_vae) uses 3, 6, 8, 9,
# 10 as well, so a badge keyed by node id alone shows up there.
PROMPT: dict[str, Any] = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": TINY_CHECKPOINT}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red cube", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "3": {
        "class_type": "HeadroomStreamingSampler",
        "inputs": {
            "model": ["4", 0],
            "positive": ["6", 0],
            "negative": ["7", 0],
            "latent_image": ["5", 0],
            "seed": 1,
            "steps": 2,
            "cfg": 5.0,
            "sampler_name": "euler",
            "scheduler": "normal",
            "denoise": 1.0,
        },
    },  # fmt: skip
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "10": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["8", 0]}},
    "9": {"class_type": "PreviewImage", "inputs": {"images": ["10", 0]}},
}
COMPUTED_ONCE = {"3", "4", "5", "6", "7", "8"}  # cached on the second run (the monitor always runs)


@pytest.fixture(scope="module")
def seen(comfy_server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("run_state")
    prompt_file, other_file = tmp / "prompt.json", tmp / "other.json"
    prompt_file.write_text(json.dumps(PROMPT))
    shutil.copy(ROOT / "example_workflows" / "Flux Dev 2048px with Tiled VAE decode.json", other_file)
    result = comfy_server.browser("run_state.mjs", prompt_file, other_file)
    print(json.dumps({k: v for k, v in result.items() if k != "run1"}, indent=1)[:6000])
    return result


def _rows(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["node"]: r for r in view["rows"]}


def test_badges_stay_with_the_workflow_that_ran(seen: dict[str, Any]) -> None:
    """Item 2: the other workflow's never-run nodes (ids 3, 6, 8, 9, 10 as in the run) have no badges."""
    assert seen["run1"]["seen"]["badges"]["3"], "the run's own sampler has a badge"
    other = seen["other"]
    assert other["graphId"] != seen["run1"]["seen"]["graphId"]
    assert {k: v for k, v in other["badges"].items() if v} == {}
    assert other["panelRows"] == []
    back = seen["back"]  # the workflow that ran, opened again: its own badges are there
    assert (
        back["graphId"] == seen["run2"]["seen"]["graphId"]
        and back["badges"] == seen["run2"]["seen"]["badges"]
    )


def test_node_text_is_shown_on_the_node_in_both_renderers(seen: dict[str, Any]) -> None:
    """Item 3: the sampler's status line and the monitor's report appear on the nodes themselves."""
    ui_text = seen["run1"]["uiText"]
    sampler, report = ui_text["3"], ui_text["10"]
    assert sampler and report.startswith("Headroom memory")
    vue = {t["node"]: t for t in seen["run1"]["textAreasVue"]}
    assert vue.get("3", {}).get("value") == sampler and vue["3"]["readOnly"]
    assert vue.get("10", {}).get("value") == report and vue["10"]["readOnly"]
    classic = seen["run1"]["classic"]  # the text areas inside each node's box on the canvas
    assert {"value": sampler, "readOnly": True} in classic["3"]
    assert {"value": report, "readOnly": True} in classic["10"]
    # the second run's report replaces the first one's on the node
    assert {"value": seen["run2"]["uiText"]["10"], "readOnly": True} in seen["run2"]["classic"]["10"]


def test_the_last_run_comes_back_after_a_reload(seen: dict[str, Any]) -> None:
    """Item 4: after F5 the timeline, the badges and the per-node list show the last run again."""
    before, after = seen["run2"]["seen"], seen["reload"]
    assert "No run yet" not in (after["timelineText"] or "")
    assert {r["node"]: r["state"] for r in after["rows"]} == {r["node"]: r["state"] for r in before["rows"]}
    assert after["graphId"] == before["graphId"]
    assert after["badges"] == before["badges"] and after["badges"]["3"]
    assert len(after["panelRows"]) == len(before["panelRows"]) >= len(PROMPT)


def test_the_timeline_updates_while_the_run_goes_and_the_console_stays_quiet(seen: dict[str, Any]) -> None:
    """Item 8: rows turn from pending to done before the run ends; no 'Unknown message type' warning."""
    frames = seen["run1"]["frames"]
    live = [f["states"] for f in frames if not f["ended"] and f["states"]]
    assert live, "the timeline drew nothing before the run ended"
    assert any("pending" in states and len(set(states) - {"pending"}) for states in live), live[:5]
    assert seen["injected"] == 1  # the proxy added one headroom.residency message during the run
    noise = [line for line in seen["consoleHeadroom"] if "Unknown message type" in line]
    assert noise == []


def test_cached_nodes_are_labelled_cached_without_planned_bars_and_keep_their_badges(
    seen: dict[str, Any],
) -> None:
    """Item 11: on the re-run the host serves six nodes from its cache."""
    first, second = seen["run1"]["seen"], seen["run2"]["seen"]
    rows = _rows(second)
    assert {n for n, r in rows.items() if r["state"] == "cached"} == COMPUTED_ONCE
    assert all(rows[n]["plannedBar"] in (0, None) for n in COMPUTED_ONCE)
    assert rows["10"]["state"] != "cached"
    for node in COMPUTED_ONCE:
        assert second["badges"][node] and second["badges"][node] == first["badges"][node], node
    assert "skipped" not in {r["state"] for r in second["rows"]}
