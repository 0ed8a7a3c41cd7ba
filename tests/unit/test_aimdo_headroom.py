"""tests/headroom_testing/aimdo.py: the VRAM headroom reaches comfy-aimdo through whichever call its
release has (0.4.13, the 0.33 host's pin, has only ``init(simple_vram_headroom=)``)."""

from __future__ import annotations

import importlib.util
import inspect
from types import SimpleNamespace

import pytest

from headroom_testing.aimdo import set_vram_headroom


def test_the_old_setter_is_used_where_it_exists() -> None:
    seen: list[int] = []
    set_vram_headroom(SimpleNamespace(set_simple_vram_headroom=seen.append), 7.0)  # type: ignore[arg-type]
    assert seen == [7]


def test_newer_releases_take_it_through_init() -> None:
    seen: list[dict[str, int]] = []
    control = SimpleNamespace(init=lambda **kw: seen.append(kw) or True)
    set_vram_headroom(control, 5 << 30)
    assert seen == [{"simple_vram_headroom": 5 << 30}]
    with pytest.raises(RuntimeError, match="not loaded"):
        set_vram_headroom(SimpleNamespace(init=lambda **kw: False), 1)


def test_the_installed_comfy_aimdo_has_one_of_the_two() -> None:
    if importlib.util.find_spec("comfy_aimdo") is None:
        pytest.skip("comfy-aimdo is not installed here (the 0.33 venv has 0.4.13)")
    import comfy_aimdo.control as control

    assert hasattr(control, "set_simple_vram_headroom") or (
        "simple_vram_headroom" in inspect.signature(control.init).parameters
    )
