"""The host's own pins of a ModelPatcher's weights (0.3.x: ``cudaHostRegister`` in place, kept in
``patcher.pinned``) are undone through the host before a Headroom move swaps those weights' storages.

Freeing registered memory without ``cudaHostUnregister`` left stale registrations: on an H200 with 0.33
and --disable-dynamic-vram the host then warned "Tried to unpin tensor not pinned by ComfyUI" and a
later non-blocking copy failed with CUDA's "invalid argument". Here the host's pin and unpin run with a
stand-in for the CUDA register call (this machine has none); the GPU runbook runs the real one
(tests/gpu/test_residency_gpu.py under --disable-dynamic-vram)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host

pytestmark = pytest.mark.host


class Registry:
    """What cudaHostRegister keeps: the pointers the host registered, and the order of events."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.events: list[str] = []

    def pin(self, t: torch.Tensor) -> bool:
        self.live[t.data_ptr()] = t.nbytes
        self.events.append("pin")
        return True

    def unpin(self, t: torch.Tensor) -> bool:
        if self.live.pop(t.data_ptr(), None) is None:
            self.events.append("unpin of a pointer the host did not pin")
            return False
        self.events.append("unpin")
        return True


def patcher_with_host_pins(host: Host, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Registry]:
    import comfy.model_management as mm
    import comfy.model_patcher as mp

    if not hasattr(mp.ModelPatcher, "pin_weight_to_device"):
        pytest.skip("this host's ModelPatcher never pins weights itself (no pin_weight_to_device in 0.3.64)")
    registry = Registry()
    monkeypatch.setattr(mm, "pin_memory", registry.pin)
    monkeypatch.setattr(mm, "unpin_memory", registry.unpin)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    patcher = mp.ModelPatcher(model, torch.device("cpu"), torch.device("cpu"))
    for key in ("0.weight", "0.bias", "1.weight", "1.bias"):
        patcher.pin_weight_to_device(key)
    assert len(patcher.pinned) == 4 and len(registry.live) == 4
    return patcher, registry


def handle_of(patcher: Any) -> Any:
    return SimpleNamespace(
        patcher=patcher, module=patcher.model, files=[], residency="ram", mapped_names={}, mapped=list
    )


@pytest.mark.parametrize("tier", ["R", "P", "D"])
def test_a_move_unpins_the_hosts_pins_through_the_host_first(
    host: Host, monkeypatch: pytest.MonkeyPatch, tier: str
) -> None:
    residency = host.pack_module("nodes.host.residency")
    patcher, registry = patcher_with_host_pins(host, monkeypatch)
    residency.place_host_copy(handle_of(patcher), tier)
    assert registry.live == {} and not patcher.pinned, "every registration undone, the host's record too"
    assert registry.events == ["pin"] * 4 + ["unpin"] * 4
    patcher.unpin_all_weights()  # the host's own later unpin finds nothing left to unregister
    assert registry.events[-1] == "unpin"


def test_streaming_unpins_them_too_and_a_failing_unpin_fails_open(
    host: Host, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    residency = host.pack_module("nodes.host.residency")
    patcher, registry = patcher_with_host_pins(host, monkeypatch)
    ops = residency._HostOps()
    note = ops.stream(SimpleNamespace(**vars(handle_of(patcher)), kind="vae"), 2**20)
    assert "does not stream" in note and registry.live == {}

    patcher, registry = patcher_with_host_pins(host, monkeypatch)

    def broken() -> None:
        raise RuntimeError("driver gone")

    monkeypatch.setattr(patcher, "unpin_all_weights", broken)
    assert residency.release_host_pins(patcher) == 0
    assert "unpin_all_weights failed" in caplog.text and len(registry.live) == 4
    assert residency.release_host_pins(SimpleNamespace()) == 0  # a patcher with no pins of its own
