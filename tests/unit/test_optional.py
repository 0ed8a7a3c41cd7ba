from __future__ import annotations

import logging

import pytest

from comfyui_headroom.memory.optional import optional_module


def test_present_module_is_returned() -> None:
    assert optional_module("json", "test feature").dumps([1]) == "[1]"


def test_missing_module_disables_the_feature_once(caplog: pytest.LogCaptureFixture) -> None:
    optional_module.cache_clear()
    with caplog.at_level(logging.WARNING, logger="headroom"):
        assert optional_module("headroom_no_such_module", "the frobnicator") is None
        assert optional_module("headroom_no_such_module", "the frobnicator") is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "the frobnicator is disabled" in lines[0] and "pip install headroom_no_such_module" in lines[0]


def test_the_pip_name_is_suggested(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    optional_module.cache_clear()
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # an import of None raises ImportError
    with caplog.at_level(logging.WARNING, logger="headroom"):
        assert optional_module("pynvml", "NVML telemetry") is None
    assert "pip install nvidia-ml-py" in caplog.text
    optional_module.cache_clear()
