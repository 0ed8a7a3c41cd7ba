"""The lazy If/Else switch (the 2026 host's ComfySwitchNode) runs only its chosen branch, in the order
predict_order says: checked on the real executor of the current host with a copy of the node.

Neither test host has ComfySwitchNode, so it is registered under its own name as a V1 class with the
2026 check_lazy_status verbatim (comfy_extras/nodes_logic.py); only its inputs are typed IMAGE, which
the V3 MatchType resolves to when images are linked. The 2024-03 host has no lazy inputs: skipped there.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from comfyui_headroom.memory.workflow.graph import parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order
from headroom_testing.harness import Host

pytestmark = pytest.mark.host
MISSING = object()


def image(color: int) -> dict[str, Any]:
    return {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": color}}


def invert(source: str) -> dict[str, Any]:
    return {"class_type": "ImageInvert", "inputs": {"image": [source, 0]}}


def blur(source: str) -> dict[str, Any]:
    return {"class_type": "ImageBlur", "inputs": {"image": [source, 0], "blur_radius": 1, "sigma": 1.0}}


def run_and_compare(host: Host, prompt: dict[str, Any]) -> tuple[list[str], frozenset[str]]:
    """The host's order (a lazy node is staged twice; its last staging is where it runs) against
    predict_order's."""
    outputs = host.validate(copy.deepcopy(prompt), "switch-outputs")
    result = host.run(copy.deepcopy(prompt))
    executed = [n for i, n in enumerate(result.executed) if n not in result.executed[i + 1 :]]
    cached = frozenset(result.cached)  # the host fixture is shared: earlier tests' nodes may be cached
    assert predict_order(parse_workflow(copy.deepcopy(prompt)), cached, outputs) == executed
    return executed, cached


class SwitchNode:
    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:  # noqa: N802 - the host's name
        lazy = ("IMAGE", {"lazy": True})
        return {"required": {"switch": ("BOOLEAN", {})}, "optional": {"on_false": lazy, "on_true": lazy}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "execute"
    CATEGORY = "testing"

    def check_lazy_status(self, switch: Any, on_false: Any = MISSING, on_true: Any = MISSING) -> Any:
        if switch and on_true is None:
            return ["on_true"]
        if not switch and on_false is None:
            return ["on_false"]
        return None

    def execute(self, switch: Any, on_true: Any = MISSING, on_false: Any = MISSING) -> tuple[Any]:
        selected = on_true if switch else on_false
        return (None if selected is MISSING else selected,)


@pytest.mark.parametrize("linked", [False, True])
@pytest.mark.parametrize("condition", [False, True])
def test_the_switch_runs_only_its_chosen_branch(
    host: Host, monkeypatch: pytest.MonkeyPatch, condition: bool, linked: bool
) -> None:
    if host.legacy:
        pytest.skip("the 2024-03 host has no lazy inputs (check_lazy_status)")
    monkeypatch.setitem(host.nodes.NODE_CLASS_MAPPINGS, "ComfySwitchNode", SwitchNode)
    switch = {"switch": ["8", 0] if linked else condition, "on_true": ["2", 0], "on_false": ["4", 0]}
    prompt = {
        "1": image(120 + 10 * linked),  # unlike the other cases' images: nothing comes from the cache
        "2": invert("1"),
        "3": image(121 + 10 * linked),
        "4": blur("3"),
        "5": {"class_type": "ComfySwitchNode", "inputs": switch},
        "6": {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}},
        "8": {"class_type": "PrimitiveBoolean", "inputs": {"value": condition}},
    }
    if not linked:
        del prompt["8"]
    executed, cached = run_and_compare(host, prompt)  # the predicted order equals the host's, exactly
    taken, skipped = ({"1", "2"}, {"3", "4"}) if condition else ({"3", "4"}, {"1", "2"})
    assert taken <= set(executed) | cached and not skipped & set(executed)
