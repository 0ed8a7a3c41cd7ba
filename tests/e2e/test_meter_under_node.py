"""M2 (#42): the top-bar meter does not disappear when the artist pans the canvas so that a node slides
under the action bar (Vue renderer: its nodes are DOM with buttons and inputs, which the meter before the
fix took for the frontend's own controls; the classic renderer draws nodes on the canvas)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from headroom_testing.browser_server import Server

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("renderer", ["classic", "vue"])
def test_m2_the_meter_stays_when_a_node_slides_under_it(comfy_server: Server, renderer: str) -> None:
    seen = comfy_server.browser("meter_under_node.mjs", renderer)
    watched = Counter(seen.pop("seen"))
    print(json.dumps(seen, indent=1), watched)
    assert seen["errors"] == [], seen["errors"]
    assert seen["before"]["visibility"] == "visible"
    assert seen["placed"]["nodeUnder"], seen["placed"]  # the pan brought the node under the meter
    if renderer == "vue":
        assert seen["placed"]["domNode"] and seen["placed"]["controlsUnder"], seen["placed"]  # the case of M2
    # all the while (during the pan and three redraws after it) the meter was shown, at the level the
    # window's width gives it: neither hidden nor shrunk
    assert set(watched) == {f"visible:{seen['before']['level']}"}, watched
