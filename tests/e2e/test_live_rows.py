"""M9, M11 (#42): the node the host runs is "running" in the timeline from its start, the first node too,
and a long sampler's row gives its elapsed time and steps, in both renderers."""

from __future__ import annotations

import copy
import json
import re

import pytest

from headroom_testing.browser_server import TINY_PROMPT, Server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["classic", "vue"])
def seen(
    request: pytest.FixtureRequest, comfy_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> dict:
    prompt = copy.deepcopy(TINY_PROMPT)
    prompt["3"]["inputs"]["steps"] = 8  # a sampler long enough to be watched
    prompt["3"]["inputs"]["seed"] = 7
    path = tmp_path_factory.mktemp("live") / "prompt.json"
    path.write_text(json.dumps(prompt))
    result = comfy_server.browser("live_rows.mjs", path, request.param)
    print(json.dumps(result, indent=1))
    assert result["errors"] == [], result["errors"]
    return result["seen"]


def test_m9_the_first_node_reads_running_while_it_runs(seen: dict) -> None:
    assert "running" in seen["4"]["states"], seen["4"]  # CheckpointLoaderSimple, the first node


def test_m11_a_long_sampler_row_gives_elapsed_time_and_steps(seen: dict) -> None:
    times = seen["3"]["times"]
    assert any(re.search(r"so far · step \d+/8", t) for t in times), times
    assert any(re.search(r"so far", t) for t in times)
