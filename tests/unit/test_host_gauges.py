"""The host's gauges for a node's "bounded by" line (nodes/host/host_gauges.py), read by name from stand-ins
of the host's modules: each missing or failing one leaves its figure out with the reason."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from comfyui_headroom.nodes.host import host_gauges

GiB = 2**30


def test_no_host_no_pins_and_dynamic_vram_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("comfy.model_management", "comfy.memory_management", "comfy_aimdo.control"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert host_gauges.host_pinned() is None
    assert host_gauges.gauges() == {
        "host_pinned": 0,
        "aimdo_vram": None,
        "aimdo_note": "DynamicVRAM is off: comfy-aimdo pages nothing here",
        "aimdo_pageouts": None,  # no aimdo 0.6 VBAR to count (nodes/host/aimdo_hooks.py)
        "aimdo_pageout_bytes": None,
    }


def test_comfy_aimdo_read_by_name_and_failing_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "comfy.model_management", SimpleNamespace(TOTAL_PINNED_MEMORY=GiB))
    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=True))
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", SimpleNamespace(lib=None))
    assert host_gauges.host_pinned() == GiB
    assert host_gauges.aimdo_vram() == (None, "comfy-aimdo's library is not loaded")
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", SimpleNamespace(lib=object()))
    assert host_gauges.aimdo_vram() == (None, "this comfy-aimdo has no get_total_vram_usage")
    control = SimpleNamespace(lib=object(), get_total_vram_usage=lambda: 5 * GiB)
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", control)
    assert host_gauges.aimdo_vram() == (5 * GiB, "")
    control.get_total_vram_usage = lambda: 1 / 0
    vram, note = host_gauges.aimdo_vram()
    assert vram is None and note == "comfy-aimdo's get_total_vram_usage failed (division by zero)"
