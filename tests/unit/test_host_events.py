"""The executor event source of nodes/host without a ComfyUI: the patches go in the stated order (the OOM
retry around the node boundaries, so a retried node is a node start of its own), each subscriber gets
every event even when another fails, and the monitor and the residency controller only meet in ``state``.
Stand-ins mimic the 2024 host's recursive executor and the current host's progress registry."""

from __future__ import annotations

import ast
import logging
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from comfyui_headroom.nodes.host import events, legacy_2024, state

HOST_DIR = Path(__file__).resolve().parents[2] / "nodes" / "host"


class OOM(Exception):
    pass


class Recorder(events.Subscriber):
    def __init__(self, name: str, log: list, recover: bool = False) -> None:
        self.name, self.log, self.recover = name, log, recover

    def prompt_started(self, prompt_id: str, prompt: dict[str, Any] | None) -> None:
        self.log.append((self.name, "prompt_started", prompt_id, prompt is not None))

    def prompt_finished(self, prompt_id: str) -> None:
        self.log.append((self.name, "prompt_finished", prompt_id))

    def node_started(self, prompt_id: str | None, node_id: str) -> None:
        self.log.append((self.name, "node_started", prompt_id, node_id))

    def node_finished(self, prompt_id: str | None, node_id: str, ok: bool) -> None:
        self.log.append((self.name, "node_finished", prompt_id, node_id, ok))

    def out_of_memory(self) -> bool:
        self.log.append((self.name, "out_of_memory"))
        return self.recover

    def nodes_cached(self, prompt_id: str, node_ids: list[str]) -> None:
        self.log.append((self.name, "nodes_cached", prompt_id, tuple(node_ids)))


def legacy_execution(fail: dict[str, list[Exception]]) -> ModuleType:
    """The 2024 executor's shape: recursive_execute runs a node's inputs, then get_output_data for the node,
    both looked up as module globals (so patched ones are the ones called). A node raises the errors
    ``fail`` lists for it, one per attempt, then runs."""
    execution = ModuleType("execution")

    def get_output_data(obj: Any, input_data_all: Any) -> Any:
        if fail.get(obj.node_id):
            raise fail[obj.node_id].pop(0)
        return obj.node_id

    def recursive_execute(
        server, prompt, outputs, current_item, extra_data, executed, prompt_id, outputs_ui, object_storage
    ) -> Any:  # the 2024 host's parameter names: the hook binds them by name
        for dep in prompt[current_item]["deps"]:
            execution.recursive_execute(
                server, prompt, outputs, dep, extra_data, executed, prompt_id, outputs_ui, object_storage
            )
        return execution.get_output_data(SimpleNamespace(node_id=current_item), {})

    execution.get_output_data = get_output_data  # type: ignore[attr-defined]
    execution.recursive_execute = recursive_execute  # type: ignore[attr-defined]
    return execution


PROMPT = {"1": {"deps": []}, "2": {"deps": ["1"]}}


def run(execution: ModuleType, prompt_id: str, output: str = "2") -> Any:
    return execution.recursive_execute(None, PROMPT, {}, output, {}, set(), prompt_id, {}, {})


@pytest.fixture
def oom_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose OOM error is ``OOM`` and whose executor is the 2024 one."""
    monkeypatch.setitem(sys.modules, "comfy.model_management", SimpleNamespace(OOM_EXCEPTION=OOM))
    monkeypatch.delitem(sys.modules, "comfy_execution.progress", raising=False)
    monkeypatch.setattr(legacy_2024, "is_2024_host", lambda: True)


def test_the_patches_go_in_the_stated_order_and_a_retried_node_starts_again(oom_host: None) -> None:
    log: list = []
    execution = legacy_execution({"2": [OOM()]})
    original = execution.get_output_data
    source = events.EventSource([Recorder("monitor", log), Recorder("residency", log, recover=True)])
    hooks = source.install(execution)
    assert list(hooks) == ["nodes", "oom_retry", "validation", "cached"]
    assert hooks["nodes"] == "on" and hooks["oom_retry"] == "on" and hooks["validation"].startswith("off")
    assert hooks["cached"].startswith("off")
    outer = execution.get_output_data
    assert outer.__headroom_oom__ and outer.__wrapped__.__wrapped__ is original, "retry around boundaries"
    assert run(execution, "p1") == "2"
    residency = [e[1:] for e in log if e[0] == "residency"]
    assert residency == [
        ("prompt_started", "p1", True),
        ("node_started", "p1", "1"),
        ("node_finished", "p1", "1", True),
        ("node_started", "p1", "2"),
        ("node_finished", "p1", "2", False),  # the failed attempt closes before recovery is asked
        ("out_of_memory",),
        ("node_started", "p1", "2"),  # the retry: a node start of its own
        ("node_finished", "p1", "2", True),
    ]
    assert [e[1:] for e in log if e[0] == "monitor"] == residency, "every subscriber, in the same order"
    assert log.index(("monitor", "node_started", "p1", "1")) < log.index(
        ("residency", "node_started", "p1", "1")
    )


def test_an_oom_nobody_recovers_from_fails_the_node_once(oom_host: None) -> None:
    log: list = []
    execution = legacy_execution({"2": [OOM()]})
    events.EventSource([Recorder("monitor", log)]).install(execution)
    with pytest.raises(OOM):
        run(execution, "p1")
    assert [e[1] for e in log].count("node_started") == 2  # nodes 1 and 2, no retry
    assert ("monitor", "out_of_memory") in log


def test_other_errors_are_not_offered_for_recovery(oom_host: None) -> None:
    log: list = []
    execution = legacy_execution({"1": [ValueError("a bug")]})
    events.EventSource([Recorder("residency", log, recover=True)]).install(execution)
    with pytest.raises(ValueError):
        run(execution, "p1", output="1")
    assert ("residency", "out_of_memory") not in log


def test_installing_twice_wraps_nothing_twice(oom_host: None) -> None:
    execution = legacy_execution({})
    events.EventSource().install(execution)
    patched = (execution.get_output_data, execution.recursive_execute)
    assert events.EventSource().install(execution) == {
        "nodes": "on", "oom_retry": "on", "validation": "off: no execution.validate_prompt on this host",
        "cached": "off: no PromptExecutor.add_message on this host",
    }  # fmt: skip
    assert (execution.get_output_data, execution.recursive_execute) == patched


def test_a_prompt_finishes_when_the_next_starts_and_a_failing_subscriber_stops_no_one(
    oom_host: None, caplog: pytest.LogCaptureFixture
) -> None:
    log: list = []

    class Broken(events.Subscriber):
        def node_started(self, prompt_id: str | None, node_id: str) -> None:
            raise RuntimeError("telemetry bug")

    execution = legacy_execution({})
    events.EventSource([Broken(), Recorder("residency", log)]).install(execution)
    with caplog.at_level(logging.ERROR, logger="headroom"):
        run(execution, "p1")
        run(execution, "p1", output="1")  # another output of the same prompt: not a new prompt
        run(execution, "p2")
    kinds = [e[1:3] for e in log if e[1].startswith("prompt")]
    assert kinds == [("prompt_started", "p1"), ("prompt_finished", "p1"), ("prompt_started", "p2")]
    assert sum(e[1] == "node_started" for e in log) == 5
    assert "Broken failed in node_started" in caplog.text


def test_current_hosts_report_through_a_progress_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    handlers: list = []

    class ProgressHandler:
        def __init__(self, name: str) -> None:
            self.name = name

    progress = ModuleType("comfy_execution.progress")
    progress.ProgressHandler = ProgressHandler  # type: ignore[attr-defined]
    progress.add_progress_handler = handlers.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "comfy_execution.progress", progress)
    execution = ModuleType("execution")
    order: list = []
    execution.reset_progress_state = lambda prompt_id, dynprompt: order.append("host")  # type: ignore[attr-defined]
    log: list = []
    source = events.EventSource([Recorder("monitor", log)])
    assert source.install(execution)["nodes"] == "on"
    execution.reset_progress_state("p9", SimpleNamespace(original_prompt={"1": {}}))
    (handler,) = handlers
    handler.start_handler("1", None, "p9")
    handler.finish_handler("1", None, "p9")
    assert order == ["host"] and [e[1:] for e in log] == [
        ("prompt_started", "p9", True), ("node_started", "p9", "1"), ("node_finished", "p9", "1", True),
    ]  # fmt: skip


def _pack_imports(name: str) -> set[str]:
    tree = ast.parse((HOST_DIR / f"{name}.py").read_text(encoding="utf-8"))
    return {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1}


def test_the_monitor_and_the_controller_do_not_know_each_other() -> None:
    assert not {"residency", "state"} & _pack_imports("monitor")
    assert not {"monitor", "state"} & _pack_imports("residency")


def test_state_subscribes_both_and_wires_the_budget_and_the_moves(
    monkeypatch: pytest.MonkeyPatch, fresh_process_state: None
) -> None:
    # no host's model management (host tests earlier in the process leave one with its own reserve)
    monkeypatch.delitem(sys.modules, "comfy.model_management", raising=False)
    m, control = state.monitor(), state.residency()
    # the streamed models' node scopes, then the monitor, then the controller
    assert state.events().subscribers == [legacy_2024._SCOPES, m, control]
    assert legacy_2024._SCOPES.source is state.events()
    m.assume_vram = 8 * 2**30
    assert control.budget() == m.budget() and control.budget() is not None
    m.telemetry.start_prompt("p1")
    applied = SimpleNamespace(kind="applied", action="load", node_id="3", label="unet", nbytes=5)
    control._moved("p1", applied)
    control._moved("p1", SimpleNamespace(kind="planned", action="load", node_id="3", label="unet", nbytes=5))
    (move,) = m.telemetry.run("p1").events
    assert (move.component, move.tier_from, move.tier_to, move.action, move.nbytes) == (
        "unet",
        "ram",
        "gpu",
        "load",
        5,
    )


def test_the_hosts_cached_nodes_are_read_from_its_own_message_and_follow_the_prompts_start(
    oom_host: None,
) -> None:
    """Both hosts send execution_cached through PromptExecutor.add_message; the 2024 host before the
    prompt's first node (when this source learns the prompt started), so it is held until then."""
    log: list = []
    execution = legacy_execution({})
    sent: list = []

    class PromptExecutor:
        def add_message(self, event: str, data: dict, broadcast: bool) -> None:
            sent.append((event, data))

    execution.PromptExecutor = PromptExecutor  # type: ignore[attr-defined]
    source = events.EventSource([Recorder("monitor", log)])
    assert source.install(execution)["cached"] == "on"
    executor = PromptExecutor()
    executor.add_message("execution_cached", {"nodes": ["1"], "prompt_id": "p1"}, broadcast=False)
    executor.add_message("execution_start", {"prompt_id": "p1"}, broadcast=False)
    assert len(sent) == 2 and log == []  # passed on unchanged; held: p1 has not started
    execution.recursive_execute(None, PROMPT, {"1": ["cached"]}, "2", {}, set(), "p1", {}, {})
    assert [e[1:] for e in log][:2] == [("prompt_started", "p1", True), ("nodes_cached", "p1", ("1",))]
    executor.add_message("execution_cached", {"nodes": [2], "prompt_id": "p1"}, broadcast=False)
    assert log[-1] == ("monitor", "nodes_cached", "p1", ("2",))  # current hosts: after the start
    assert events.EventSource().install(execution)["cached"] == "on"  # not wrapped twice
    assert not hasattr(PromptExecutor.add_message.__wrapped__, "__wrapped__")
