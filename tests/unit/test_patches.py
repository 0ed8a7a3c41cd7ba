"""The registry of host patches without a ComfyUI: install and uninstall put back exactly what was there
(an own attribute, or none over a class's method), installed and fired are separate states, a per-prompt
hook that never fires while prompts run is a warning, and the executor patches go through it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from comfyui_headroom.nodes.host import events
from comfyui_headroom.nodes.host.patches import PatchRefused, PatchRegistry


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


def test_a_value_replaced_again_by_someone_else_is_left_alone_and_stays_stuck(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = PatchRegistry()
    target = SimpleNamespace(flag=False)
    patch = registry.replace("server.flag", target, "flag", True)
    target.flag = "theirs"
    with caplog.at_level(logging.WARNING, logger="headroom"):
        assert registry.uninstall() == 0
    assert target.flag == "theirs" and "replaced again" in caplog.text
    assert registry.patches == [patch] and patch.stuck and patch.installed
    assert registry.state() == {"server.flag": {"installed": 0, "fired": 0, "stuck": 1}}
    target.flag = True  # they put it back: the retry undoes ours
    assert registry.uninstall() == 1 and target.flag is False and registry.patches == []


def _another_packs_wrapper(module: ModuleType, calls: list[str]) -> Callable[[], None]:
    """What another pack does after Headroom: wrap ``module.run`` by plain assignment; returns its unwrap."""
    below = module.run

    def run() -> None:
        calls.append("theirs")
        below()

    module.run = run
    return lambda: setattr(module, "run", below)


def _ours(registry: PatchRegistry, module: ModuleType, calls: list[str]) -> Any:
    def make(original: Any) -> Any:
        def run() -> None:
            patch.fire()
            calls.append("ours")
            original()

        return run

    patch = registry.wrap("execution.run", module, "run", make)
    return patch


def test_under_another_packs_wrapper_a_failed_undo_is_stuck_passes_through_and_rearms_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another pack wraps after Headroom: uninstall cannot put the attribute back, so the patch stays,
    stuck and reported, its shim stepping out of the middle of the chain; installing again re-arms that
    shim (one wrap, not two), and once the other pack is gone the retry restores the host's own."""
    registry = PatchRegistry()
    calls: list[str] = []
    module = ModuleType("execution")

    def host() -> None:
        calls.append("host")

    module.run = host
    patch = _ours(registry, module, calls)
    unwrap = _another_packs_wrapper(module, calls)
    module.run()
    assert calls == ["theirs", "ours", "host"]

    with caplog.at_level(logging.WARNING, logger="headroom"):
        assert registry.uninstall() == 0
    assert "could not undo execution.run (replaced again by someone else)" in caplog.text
    assert registry.patches == [patch] and patch.installed and patch.stuck
    assert registry.state() == {"execution.run": {"installed": 0, "fired": 1, "stuck": 1}}
    assert registry.find("execution.run") is None
    calls.clear()
    module.run()
    assert calls == ["theirs", "host"]  # ours stepped out of the middle of the chain

    again = _ours(registry, module, calls)
    assert again is patch and not patch.stuck and len(registry.patches) == 1
    calls.clear()
    module.run()
    assert calls == ["theirs", "ours", "host"]  # exactly once: not ours, theirs, ours, host
    assert registry.state() == {"execution.run": {"installed": 1, "fired": 2, "stuck": 0}}

    with caplog.at_level(logging.WARNING, logger="headroom"):
        registry.uninstall()  # stuck again, and the retry below is not warned about twice
        caplog.clear()
        assert registry.uninstall() == 0
    assert not caplog.records
    unwrap()  # they take theirs off: ours is on top again
    assert registry.uninstall() == 1 and module.run is host and registry.patches == []


def test_a_second_install_of_the_same_name_on_the_same_target_is_refused() -> None:
    registry = PatchRegistry()
    module, other = ModuleType("execution"), ModuleType("other")
    module.run = other.run = lambda: "host"
    registry.replace("execution.run", module, "run", lambda: "ours")
    with pytest.raises(PatchRefused, match="already installed"):
        registry.replace("execution.run", module, "run", lambda: "twice")
    with pytest.raises(PatchRefused, match="already installed"):
        registry.wrap("execution.run", module, "run", lambda inner: inner)
    registry.replace("execution.run", other, "run", lambda: "ours")  # another target is another patch
    assert module.run() == "ours" and len(registry.patches) == 2


def test_an_undo_that_raises_is_stuck_and_retried_at_the_next_uninstall(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = PatchRegistry()
    attempts: list[int] = []

    def undo() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("busy")

    patch = registry.record("host.write", undo)
    with caplog.at_level(logging.WARNING, logger="headroom"):
        assert registry.uninstall() == 0
    assert "its undo raised OSError('busy')" in caplog.text and patch.stuck
    assert registry.state()["host.write"]["stuck"] == 1
    assert registry.uninstall() == 1 and len(attempts) == 2 and registry.patches == []


def test_a_shim_keeps_a_coroutine_function_one_and_binds_as_a_method() -> None:
    import asyncio
    import inspect

    registry = PatchRegistry()
    module = ModuleType("execution")

    async def validate() -> str:
        return "host"

    module.validate = validate

    def make(original: Any) -> Any:
        async def ours() -> str:
            return "ours+" + await original()

        return ours

    registry.wrap("execution.validate", module, "validate", make)
    assert inspect.iscoroutinefunction(module.validate)
    assert asyncio.run(module.validate()) == "ours+host"
    registry.replace("Model.apply_model", Model, "apply_model", lambda self, x: x + 1)
    assert Model().apply_model(1) == 2
    registry.uninstall()
    assert Model().apply_model(1) == 1 and "apply_model" in vars(Model)


def test_installed_and_fired_are_separate_and_a_silent_per_prompt_hook_is_a_warning_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = PatchRegistry()
    target = SimpleNamespace(a=None, b=None)
    live = registry.replace("host.a", target, "a", object(), per_prompt=True)
    registry.replace("host.b", target, "b", object(), per_prompt=True)
    assert registry.state() == {
        "host.a": {"installed": 1, "fired": 0, "stuck": 0},
        "host.b": {"installed": 1, "fired": 0, "stuck": 0},
    }
    with caplog.at_level(logging.WARNING, logger="headroom"):
        for prompt in ("p1", "p1", "p2", "p3"):  # p1 is seen twice (two hooks report it): one prompt
            registry.prompt_seen(prompt)
            live.fire()
    assert registry.state()["host.a"] == {"installed": 1, "fired": 4, "stuck": 0}
    assert registry.state()["host.b"] == {"installed": 1, "fired": 0, "stuck": 0}
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
    assert state["execution.validate_prompt"] == {"installed": 1, "fired": 0, "stuck": 0}
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


class Entry:
    """A host list's entry (a LoadedModel): weak-referenceable, equal only to itself."""


def test_an_insert_into_a_host_list_comes_off_by_identity_and_leaves_once_the_host_took_it_out() -> None:
    registry = PatchRegistry()
    host_entry, ours, again = Entry(), Entry(), Entry()
    loaded = [host_entry]
    patch = registry.insert("mm.current_loaded_models[prefetch]", loaded, ours)
    assert loaded == [ours, host_entry] and patch.installed
    loaded.remove(ours)  # the host unloaded it: the next insert forgets the first
    registry.insert("mm.current_loaded_models[prefetch]", loaded, again)
    assert not patch.installed and len(registry.patches) == 1
    loaded.append(Entry())
    assert registry.uninstall() == 1
    assert again not in loaded and len(loaded) == 2 and loaded[0] is host_entry


def test_a_write_to_a_posted_prompt_is_undone_or_forgotten_once_the_prompt_starts() -> None:
    registry = PatchRegistry()
    posted: dict[str, Any] = {"prompt": {}}
    posted["prompt_id"] = "p1"
    registry.record("server.posted prompt_id", lambda: posted.pop("prompt_id"), prompt_id="p1")
    other: dict[str, Any] = {"prompt_id": "p2"}
    registry.record("server.posted prompt_id", lambda: other.pop("prompt_id"), prompt_id="p2")
    registry.prompt_seen("p1")  # the host has p1: its write is the host's now
    assert [p.prompt_id for p in registry.patches] == ["p2"]
    assert registry.uninstall(prefix="server.") == 1
    assert posted == {"prompt": {}, "prompt_id": "p1"} and other == {}


def test_posted_prompts_that_never_start_are_kept_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import comfyui_headroom.nodes.host.patches as patches

    monkeypatch.setattr(patches, "POSTED_KEPT", 3)
    registry = PatchRegistry()
    for n in range(5):
        registry.record("server.posted prompt_id", lambda: None, prompt_id=f"p{n}")
    assert [p.prompt_id for p in registry.patches] == ["p2", "p3", "p4"]


def test_a_forgotten_patch_is_not_undone() -> None:
    registry = PatchRegistry()
    undone: list[str] = []
    patch = registry.record("x", lambda: undone.append("x"))
    registry.forget(patch)
    assert registry.uninstall() == 0 and undone == [] and not patch.installed


def test_a_write_recorded_on_a_host_object_holds_it_weakly_and_is_refused_twice() -> None:
    """``record_on`` (a module's read-through hooks): undone with the object while it lives, one per name
    and object, and forgotten when the host frees the object, which the registry does not keep alive."""
    import gc
    import weakref

    registry = PatchRegistry()
    undone: list[Any] = []
    model, other = Model(), Model()
    patch = registry.record_on("Module._apply[x]", model, undone.append)
    assert (
        registry.find_on("Module._apply[x]", model) is patch
        and registry.find_on("Module._apply[x]", other) is None
    )
    with pytest.raises(PatchRefused):
        registry.record_on("Module._apply[x]", model, undone.append)
    registry.record_on("Module._apply[x]", other, undone.append)
    assert registry.uninstall(patch) == 1 and undone == [model]
    freed = weakref.ref(other)
    del other
    gc.collect()
    assert freed() is None and registry.patches == []


def test_the_event_sources_oom_retry_under_another_packs_wrapper_steps_out_and_rearms_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The executor's patches as installed: another pack wraps get_output_data after Headroom. Uninstall
    leaves the retry stuck (reported) and passing straight through; installing again arms it once."""
    registry = PatchRegistry()
    monkeypatch.setattr(events, "REGISTRY", registry)
    calls: list[str] = []
    execution = current_execution()

    def host(*args: Any) -> str:
        calls.append("host")
        return "out"

    execution.get_output_data = host
    source = events.EventSource()
    source.install(execution)
    below = execution.get_output_data

    def theirs(*args: Any) -> str:
        calls.append("theirs")
        return below(*args)

    execution.get_output_data = theirs
    assert source.uninstall() == 2  # the validation mark and the cache report came off; the retry is stuck
    name = "execution.get_output_data[oom_retry]"
    assert registry.state() == {name: {"installed": 0, "fired": 0, "stuck": 1}}
    assert execution.get_output_data() == "out" and calls == ["theirs", "host"]
    assert registry.state()[name]["fired"] == 0  # passed straight through: Headroom's wrapper did not run

    assert source.install(execution)["oom_retry"] == "on"
    calls.clear()
    assert execution.get_output_data() == "out" and calls == ["theirs", "host"]
    assert registry.state()[name] == {"installed": 1, "fired": 1, "stuck": 0}  # in the chain once
    assert len([p for p in registry.patches if p.name == name]) == 1
