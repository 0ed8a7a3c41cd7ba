"""The planner's table of Headroom's own nodes (memory/data/headroom_nodes.json) is what the live
classes say in the host, so plans and generated UI workflows read our nodes' widgets right."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from headroom_testing.harness import NODE_IDS, Host

pytestmark = pytest.mark.host
ROOT = Path(__file__).resolve().parents[2]


def _dump_script():
    spec = importlib.util.spec_from_file_location("dump_node_types", ROOT / "scripts" / "dump_node_types.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_shipped_table_of_our_nodes_matches_the_live_classes(host: Host) -> None:
    shipped = json.loads((ROOT / "memory" / "data" / "headroom_nodes.json").read_text())["types"]
    describe = _dump_script().describe
    assert set(shipped) == set(NODE_IDS)
    for node_id in NODE_IDS:
        live = describe(node_id, host.node_class(node_id))
        assert live == shipped[node_id], f"{node_id}: run scripts/dump_node_types.py --pack"
