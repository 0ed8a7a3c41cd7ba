"""The Offload Loader declares, in the real host, the inputs the planner reads from workflows
(memory/names.py: one home for them)."""

from __future__ import annotations

import pytest

from comfyui_headroom.memory import names
from headroom_testing.harness import Host

pytestmark = pytest.mark.host


def test_the_offload_loader_declares_the_inputs_the_planner_reads(host: Host) -> None:
    loader = host.node_class(names.OFFLOAD_LOADER)
    declared = loader.INPUT_TYPES()["required"]
    for kind, inputs in names.OFFLOAD_FILE_INPUTS.items():
        assert all(i in declared for i in inputs), kind
        choices = declared[names.OFFLOAD_RESIDENCY_INPUTS[kind]][0]
        assert choices == ["auto", "gpu", "pinned_ram", "ram", "disk"]
    assert names.OFFLOAD_CHECKPOINT_INPUT in declared
