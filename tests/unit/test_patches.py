"""The registry of host patches without a ComfyUI: install and uninstall put back exactly what was there
(an own attribute, or none over a class's method), installed and fired are separate states, a per-prompt
hook that never fires while prompts run is a warning, and the executor patches go through it."""

from __future__ import annotations

import logging
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from comfyui_headroom.nodes.host import events
from comfyui_headroom.nodes.host.patches import PatchRegistry


class Model:
    def apply_model(self, x: int) -> int:
        return x


def test_uninstall_restores_an_own_attribute_and_removes_one_added_over_the_class() -> None:
    registry = PatchRegistry()
    module = ModuleType("execution")
    original = module.validate = lambda *a: "host"
    model = Model()
    registry.replace("execution.validate", module, "validate", lambda *a: "ours")
    registry.replace("apply_model", model, "apply_model", lambda x: -x)
    assert module.validate() == "ours" and model.apply_model(2) == -2
    assert registry.uninstall() == 2
    assert module.validate is original
    assert "apply_model" not in vars(model) and model.apply_model(2) == 2
    assert registry.patches == []


def test_patches_undo_newest_first_so_stacked_wrappers_unwind() -> None:
    registry = PatchRegistry()
    module = ModuleType("execution")
    original = module.run = lambda: "host"
    registry.replace("execution.run[a]", module, "run", lambda: "a")
    registry.replace("execution.run[b]", module, "run", lambda: "b")
    registry.uninstall()
    assert module.run is original


def test_a_patch_replaced_again_by_someone_else_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    registry = PatchRegistry()
    module = ModuleType("execution")
    module.run = lambda: "host"
    registry.replace("execution.run", module, "run", lambda: "ours")
    theirs = module.run = lambda: "theirs"
    with caplog.at_level(logging.WARNING, logger="headroom"):
        registry.uninstall()
    assert module.run is theirs and "replaced again" in caplog.text


def test_installed_and_fired_are_separate_and_a_silent_per_prompt_hook_is_a_warning_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = PatchRegistry()
    target = SimpleNamespace(a=None, b=None)
    live = registry.replace("host.a", target, "a", object(), per_prompt=True)
    registry.replace("host.b", target, "b", object(), per_prompt=True)
    assert registry.state() == {
        "host.a": {"installed": 1, "fired": 0},
        "host.b": {"installed": 1, "fired": 0},
    }
    with caplog.at_level(logging.WARNING, logger="headroom"):
        for prompt in ("p1", "p1", "p2", "p3"):  # p1 is seen twice (two hooks report it): one prompt
            registry.prompt_seen(prompt)
            live.fire()
    assert registry.state()["host.a"] == {"installed": 1, "fired": 4}
    assert registry.state()["host.b"] == {"installed": 1, "fired": 0}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "host.b" in warnings[0] and "never fired" in warnings[0]


def test_a_hook_installed_during_the_last_prompt_is_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = PatchRegistry()
    registry.prompt_seen("p1")
    registry.replace("host.a", SimpleNamespace(a=None), "a", object(), per_prompt=True)
    with caplog.at_level(logging.WARNING, logger="headroom"):
        registry.prompt_seen("p2")
    assert not caplog.records


def current_execution() -> ModuleType:
    execution = ModuleType("execution")
    execution.reset_progress_state = lambda prompt_id, dynprompt: None

    async def validate_prompt(*args: Any) -> tuple:
        return (True, None, [], {})

    execution.validate_prompt = validate_prompt
    execution.get_output_data = lambda *args: "out"

    class PromptExecutor:
        def add_message(self, event: str, data: dict, broadcast: bool) -> None:
            pass

    execution.PromptExecutor = PromptExecutor
    return execution


def test_the_event_sources_patches_go_through_the_registry_and_come_off_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = PatchRegistry()
    monkeypatch.setattr(events, "REGISTRY", registry)
    progress = ModuleType("comfy_execution.progress")
    progress.ProgressHandler = type("ProgressHandler", (), {"__init__": lambda self, name: None})
    progress.add_progress_handler = lambda handler: None
    monkeypatch.setitem(__import__("sys").modules, "comfy_execution.progress", progress)
    execution = current_execution()
    before = dict(vars(execution)), dict(vars(execution.PromptExecutor))
    source = events.EventSource()
    hooks = source.install(execution)
    assert hooks == {"nodes": "on", "oom_retry": "on", "validation": "on", "cached": "on"}
    assert execution.get_output_data is not before[0]["get_output_data"]
    execution.reset_progress_state("p1", SimpleNamespace(original_prompt={}))
    execution.PromptExecutor().add_message("execution_start", {"prompt_id": "p1"}, False)
    state = registry.state()
    assert state["execution.reset_progress_state"]["fired"] == 1
    assert state["execution.PromptExecutor.add_message"]["fired"] == 1
    assert state["execution.validate_prompt"] == {"installed": 1, "fired": 0}
    assert source.uninstall() == 4 and source.hooks == {}
    assert dict(vars(execution)) == before[0]
    assert dict(vars(execution.PromptExecutor)) == before[1]
    assert source.install(execution) == hooks  # and on again


def test_the_add_message_wrapper_passes_through_arguments_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(events, "REGISTRY", PatchRegistry())
    execution = current_execution()
    seen = []

    def add_message(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.append((args, kwargs))

    execution.PromptExecutor.add_message = add_message
    source = events.EventSource()
    events._hook_cached(source, execution)
    execution.PromptExecutor().add_message("execution_cached", {"prompt_id": "p"}, False, future=1)
    assert seen == [(("execution_cached", {"prompt_id": "p"}, False), {"future": 1})]
