"""The core tour in a real browser: Headroom's sidebar tab, a small workflow with a Memory Monitor run
under both node renderers, the per-node badges, the residency timeline, and a preflight warning shown
as a toast; a screenshot is saved (see conftest.py for the server and the artifacts folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from headroom_testing.browser_server import ROOT, Server

pytestmark = pytest.mark.e2e
PROMPT = {
    "1": {
        "class_type": "EmptyImage",
        "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 3050327},
    },
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
    "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    "4": {"class_type": "PreviewImage", "inputs": {"images": ["2", 2]}},
}


def test_panel_badges_timeline_and_preflight_in_a_real_browser(comfy_server: Server, tmp_path: Path) -> None:
    prompt_file, flux_file = tmp_path / "prompt.json", tmp_path / "flux.json"
    prompt_file.write_text(json.dumps(PROMPT))
    shutil.copy(ROOT / "example_workflows" / "api" / "Flux Dev text to image.json", flux_file)
    seen = comfy_server.browser("browser.mjs", prompt_file, flux_file)
    print(json.dumps(seen, indent=1))
    assert seen["errors"] == [], seen["errors"]
    for run in (seen["classic"], seen["vue"]):
        assert sorted(n for n, _, _ in run["reportNodes"]) == ["1", "2", "3", "4"]  # outputs: host's order
        status = {n: st for n, _, st in run["reportNodes"]}
        assert status["2"] == status["3"] == status["4"] == "done"  # the monitor runs every time
        assert status["1"] in ("done", "cached")  # the second run serves EmptyImage from the cache
        assert run["badgeRecords"] >= 2
        assert len(run["monitorBadges"]) == 1 and run["monitorBadges"][0].startswith("RSS ")  # CPU: no VRAM
    assert seen["samples"] >= 2 and seen["panelNodeRows"] >= 2
    assert seen["timelineRows"] == 4
    # the node named as the canvas names it (its title), not by its class
    assert seen["toast"]["severity"] == "error" and "CLIP Text Encode" in seen["toast"]["summary"]
    assert seen["toastShown"] >= 1
    screenshot = comfy_server.artifacts / "headroom-monitor.png"
    assert screenshot.is_file() and screenshot.stat().st_size > 10_000
    server_log = comfy_server.log()
    # a traceback through the pack's files (the host's own, e.g. 0.18's OpenGL nodes failing to import on
    # a machine without OpenGL, are not the pack's, though the log's frontend path names headroom-e2e)
    ours = ("comfyui-headroom", "Headroom:")
    pack_tracebacks = [b for b in server_log.split("\n\n") if "Traceback" in b and any(o in b for o in ours)]
    assert not pack_tracebacks, pack_tracebacks
