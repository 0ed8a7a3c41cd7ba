"""Issue #40 item 6: comfy-aimdo's page-outs counted per node and its VRAM headroom set from the plan.

No GPU and no aimdo 0.6 here: stand-in modules keep aimdo 0.6.0's signatures (``ModelVBAR(size, device,
pageout_callback=None)``, ``control.set_simple_vram_headroom`` / ``get_simple_vram_headroom``; the host-API
records read them from its wheel) and call the callback as aimdo's native code does. The real run is a
step of scripts/gpu-check."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from comfyui_headroom.memory.residency.dynamic_policy import AIMDO_HEADROOM_FLOOR, vram_headroom
from comfyui_headroom.memory.telemetry.bounds import bounded_by
from comfyui_headroom.nodes.host import aimdo_hooks
from comfyui_headroom.nodes.host.aimdo_hooks import PAGE_OUTS, HeadroomSetter, count_pageouts, pageout_gauges
from comfyui_headroom.nodes.host.patches import REGISTRY

MiB, GiB = 2**20, 2**30


class VBAR06:
    """aimdo 0.6.0's ModelVBAR as far as the callback goes: kept, and called at each page-out."""

    def __init__(self, size: int, device: int, pageout_callback: Any = None) -> None:
        self.size, self.device, self.callback = size, device, pageout_callback

    def page_out(self, offset: int, nbytes: int) -> None:  # what vbars_free_for_vbar does natively
        if self.callback is not None:
            self.callback(offset, nbytes)


class VBAR04:
    def __init__(self, size: int, device: int) -> None:
        self.size, self.device = size, device


@pytest.fixture
def aimdo(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    module = ModuleType("comfy_aimdo.model_vbar")
    module.ModelVBAR = VBAR06  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "comfy_aimdo.model_vbar", module)
    PAGE_OUTS.clear()
    yield module
    REGISTRY.uninstall(prefix="aimdo.")
    PAGE_OUTS.clear()


def test_page_outs_are_counted_and_the_hosts_own_callback_still_runs_first(aimdo: ModuleType) -> None:
    assert pageout_gauges() == {"aimdo_pageouts": None, "aimdo_pageout_bytes": None}  # not installed
    assert count_pageouts() == "on"
    assert count_pageouts() == "on"  # idempotent: one wrap
    plain = VBAR06(64 * MiB, 0)  # the host's call (core passes no callback)
    calls: list[tuple[str, int]] = []
    theirs = VBAR06(64 * MiB, 0, lambda offset, nbytes: calls.append(("host", nbytes)))
    plain.page_out(0, 32 * MiB)
    plain.page_out(32 * MiB, 32 * MiB)
    theirs.page_out(0, 8 * MiB)
    assert calls == [("host", 8 * MiB)]
    assert pageout_gauges() == {"aimdo_pageouts": 3, "aimdo_pageout_bytes": 72 * MiB}
    assert REGISTRY.uninstall(prefix="aimdo.") == 1
    assert VBAR06.__init__.__name__ == "__init__" and VBAR06(1, 0).callback is None  # the class as it was


def test_an_aimdo_without_the_callback_is_left_alone_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "comfy_aimdo.model_vbar", raising=False)
    assert count_pageouts().startswith("off: comfy-aimdo's model_vbar is not loaded")
    module = ModuleType("comfy_aimdo.model_vbar")
    module.ModelVBAR = VBAR04  # type: ignore[attr-defined]  # 0.4.13 and 0.5.5
    monkeypatch.setitem(sys.modules, "comfy_aimdo.model_vbar", module)
    assert (
        count_pageouts() == "off: this comfy-aimdo's ModelVBAR takes no pageout_callback (0.6.0 and later do)"
    )
    assert REGISTRY.find(aimdo_hooks.PAGEOUT_PATCH) is None


def test_a_nodes_page_outs_go_into_what_bounded_it() -> None:
    start = {"aimdo_vram": 6 * GiB, "aimdo_pageouts": 10, "aimdo_pageout_bytes": 1 * GiB}
    end = {"aimdo_vram": 7 * GiB, "aimdo_pageouts": 22, "aimdo_pageout_bytes": int(2.5 * GiB)}
    b = bounded_by(4.0, {}, gauges=(start, end))
    assert (b.aimdo_pageouts, b.aimdo_pageout_bytes) == (12, int(1.5 * GiB))
    assert "comfy-aimdo paged out 1.50 GiB of weights for room (12 ranges)" in b.line
    quiet = bounded_by(4.0, {}, gauges=(start, start))
    assert quiet.aimdo_pageouts == 0 and "paged out" not in quiet.line
    unread = bounded_by(4.0, {}, gauges=({"aimdo_pageouts": None}, {"aimdo_pageouts": None}))
    assert unread.aimdo_pageouts is None


@pytest.mark.parametrize(
    ("reservation", "total", "wanted"),
    [
        (0, 8 * GiB, AIMDO_HEADROOM_FLOOR),  # nothing planned: aimdo's own floor
        (100 * MiB, 8 * GiB, AIMDO_HEADROOM_FLOOR),
        (int(1.5 * GiB) + 1, 8 * GiB, int(1.5 * GiB) + 64 * MiB),  # rounded up to 64 MiB
        (6 * GiB, 8 * GiB, 4 * GiB),  # never above half the card
        (2 * GiB, None, 2 * GiB),  # no card figure: the plan's
        (2 * GiB, 256 * MiB, AIMDO_HEADROOM_FLOOR),  # a tiny card: the floor, not half of it
    ],
)
def test_the_headroom_is_the_nodes_planned_reservation_within_the_floor_and_half_the_card(
    reservation: int, total: int | None, wanted: int
) -> None:
    assert vram_headroom(reservation, total)[0] == wanted


class Control:
    """aimdo's control module as far as the headroom goes (0.5.5 and 0.6.0)."""

    def __init__(self) -> None:
        self.value, self.sets = 512 * MiB, []

    def get_simple_vram_headroom(self) -> int:
        return self.value

    def set_simple_vram_headroom(self, headroom: int) -> None:
        self.sets.append(headroom)
        self.value = headroom


@pytest.fixture
def control(monkeypatch: pytest.MonkeyPatch) -> Iterator[Control]:
    fake = Control()
    module = ModuleType("comfy_aimdo.control")
    module.get_simple_vram_headroom = fake.get_simple_vram_headroom  # type: ignore[attr-defined]
    module.set_simple_vram_headroom = fake.set_simple_vram_headroom  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", module)
    yield fake
    REGISTRY.uninstall(prefix="aimdo.")


def test_the_headroom_is_left_alone_unless_the_user_opts_in(
    control: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(aimdo_hooks.HEADROOM_ENV, raising=False)
    setter = HeadroomSetter()
    assert setter.node_started(3 * GiB, 16 * GiB, "node 8 (VAEDecode)") is None
    assert control.sets == [] and setter.prompt_finished() == 0


def test_opted_in_each_change_is_logged_with_its_reason_and_the_hosts_value_comes_back(
    control: Control, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(aimdo_hooks.HEADROOM_ENV, "1")
    setter = HeadroomSetter()
    with caplog.at_level(logging.INFO, logger="headroom"):
        assert setter.node_started(3 * GiB, 16 * GiB, "node 8 (VAEDecode)") == 3 * GiB
        assert setter.node_started(3 * GiB, 16 * GiB, "node 9 (VAEDecode)") is None  # already that
        assert setter.node_started(0, 16 * GiB, "node 3 (KSampler)") == AIMDO_HEADROOM_FLOOR
        assert setter.prompt_finished() == 1
    assert control.sets == [3 * GiB, AIMDO_HEADROOM_FLOOR, 512 * MiB] and control.value == 512 * MiB
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "Headroom: comfy-aimdo's VRAM headroom 3.00 GiB for node 8 (VAEDecode) (was 512.00 MiB): the node's "
        "planned activations (HEADROOM_AIMDO_HEADROOM=1)"
    )
    assert "comfy-aimdo's own floor" in lines[1] and lines[-1].endswith("back to the host's 512.00 MiB")


def test_an_aimdo_without_the_setter_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(aimdo_hooks.HEADROOM_ENV, "1")
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", ModuleType("comfy_aimdo.control"))  # 0.4.13
    setter = HeadroomSetter()
    with caplog.at_level(logging.INFO, logger="headroom"):
        assert setter.node_started(GiB, 8 * GiB, "node 3") is None
        assert setter.node_started(GiB, 8 * GiB, "node 4") is None
    assert [r.getMessage() for r in caplog.records] == [
        "Headroom: HEADROOM_AIMDO_HEADROOM=1 but this comfy-aimdo has no set_simple_vram_headroom (0.5.5 and "
        "later do); comfy-aimdo's VRAM headroom stays as it is"
    ]
