"""M2 (#42): the top-bar meter does not disappear when a node slides under the action bar (Vue renderer:
its nodes are DOM with buttons and inputs; the classic renderer draws them on the canvas)."""

from __future__ import annotations

import json

import pytest

from headroom_testing.browser_server import Server

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("renderer", ["classic", "vue"])
def test_m2_the_meter_stays_when_a_node_slides_under_it(comfy_server: Server, renderer: str) -> None:
    seen = comfy_server.browser("meter_under_node.mjs", renderer)
    print(json.dumps(seen, indent=1))
    assert seen["errors"] == [], seen["errors"]
    assert seen["before"] == "visible"
    if renderer == "vue":
        assert seen["placed"]["domNode"] and seen["placed"]["under"], seen["placed"]  # the case of M2
    assert seen["hiddenSeen"] == 0
