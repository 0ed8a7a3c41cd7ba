"""Runs compared (#42) in a real browser: two consecutive runs of one workflow, and the timeline says
what the second did against the first (disk reads again, RAM/VRAM change and who holds it, the host)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom_testing.browser_server import TINY_PROMPT as PROMPT
from headroom_testing.browser_server import Server

pytestmark = pytest.mark.e2e


def test_two_runs_show_the_comparison_in_the_timeline(comfy_server: Server, tmp_path: Path) -> None:
    prompt_file = tmp_path / "prompt.json"
    prompt_file.write_text(json.dumps(PROMPT))
    seen = comfy_server.browser("runs_compared.mjs", prompt_file)
    print(json.dumps(seen, indent=1))
    assert seen["errors"] == [], seen["errors"]
    assert seen["first"]["event"] == seen["second"]["event"] == "execution_success"
    compared = seen["compared"]
    assert compared["heading"] == "Since the last run" and compared["previous"] == seen["first"]["promptId"]
    lines = "\n".join(compared["lines"])
    assert "RAM (process)" in lines and "VRAM" in lines
    assert "host settings:" in lines
