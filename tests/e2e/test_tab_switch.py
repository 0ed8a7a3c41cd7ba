"""M1 (#42): a workflow opened from an API prompt keeps its results through a tab switch and F5 (frontend
1.49 gives it a new graph id at its first switch), in both renderers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom_testing.browser_server import TINY_PROMPT as PROMPT
from headroom_testing.browser_server import Server

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("renderer", ["classic", "vue"])
def test_m1_results_stay_through_a_tab_switch_and_f5(
    comfy_server: Server, tmp_path: Path, renderer: str
) -> None:
    prompt_file = tmp_path / "prompt.json"
    prompt_file.write_text(json.dumps(PROMPT))
    seen = comfy_server.browser("tab_switch.mjs", prompt_file, renderer)
    print(json.dumps(seen, indent=1))
    assert seen["errors"] == [], seen["errors"]
    after = seen["afterRun"]
    assert after["badges"] >= 4 and after["panelRows"] >= 4 and after["timelineRows"] >= 4
    assert seen["otherTab"]["badges"] == 0  # another workflow: none of its results
    for when in ("back", "afterReload"):
        now = seen[when]
        assert now["path"] == after["path"], (when, now)
        assert now["badges"] == after["badges"] and now["panelRows"] == after["panelRows"], (when, now)
    assert seen["back"]["timelineRows"] == after["timelineRows"]
