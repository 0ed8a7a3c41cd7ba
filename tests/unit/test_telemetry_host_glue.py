"""The host glue of the monitor without a ComfyUI: it does nothing outside a host, fails open (with a log
line) on a host without the hooks it looks for, registers only GET routes, and its preflight handler never
blocks or breaks a queued prompt."""

from __future__ import annotations

import logging
import sys
from types import ModuleType
from typing import Any

import pytest
from aiohttp import web

from comfyui_headroom.memory.deadline import HOST_PLAN_LIMIT_S
from comfyui_headroom.memory.planning.costmodel import Budget
from comfyui_headroom.memory.planning.preflight import Preflight
from comfyui_headroom.nodes import host
from comfyui_headroom.nodes.host import events, routes, state
from comfyui_headroom.nodes.host.monitor import Monitor


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, fresh_process_state: None) -> None:
    """New process-wide state for the test (conftest's fresh_process_state), and no host modules unless
    the test adds them."""
    for name in ("execution", "nodes", "server"):
        monkeypatch.delitem(sys.modules, name, raising=False)


class FakeServer:
    def __init__(self) -> None:
        self.routes = web.RouteTableDef()
        self.handlers: list[Any] = []
        self.sockets: dict[str, Any] = {}
        self.sent: list[tuple] = []

    def add_on_prompt_handler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def send_sync(self, event: str, data: dict, sid: str | None = None) -> None:
        self.sent.append((event, data, sid))


def test_outside_a_host_nothing_is_installed(fresh: None) -> None:
    assert host.install_monitor() == {}
    assert state._MONITOR is None  # not even the sampler was created


def test_a_host_without_the_hooks_fails_open_with_a_log_line(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "execution", ModuleType("execution"))
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    with caplog.at_level(logging.WARNING, logger="headroom"):
        hooks = host.install_monitor()
    assert hooks["nodes"].startswith("off: ") and hooks["server"].startswith("off: no PromptServer")
    assert "per-node memory telemetry is off" in caplog.text


def test_a_server_gets_its_routes_and_the_preflight_handler(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "execution", ModuleType("execution"))
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    server = FakeServer()
    assert host.install_monitor(server)["server"] == "on"
    assert sorted((r.method, r.path) for r in server.routes) == [
        ("GET", "/headroom/memory_history"),
        ("GET", "/headroom/memory_history/{prompt_id}"),
        ("GET", "/headroom/plan/{prompt_id}"),
        ("GET", "/headroom/ram/{prompt_id}"),
        ("GET", "/headroom/ram_budget"),
        ("GET", "/headroom/report/{prompt_id}"),
        ("GET", "/headroom/residency/{prompt_id}"),
        ("GET", "/headroom/runs"),
        ("GET", "/headroom/status"),
        # the writes: the fit check of the open workflow (plans, queues nothing), arming the CUDA memory
        # history, and the frontend's RAM budget setting
        ("POST", "/headroom/fit"),
        ("POST", "/headroom/memory_history"),
        ("POST", "/headroom/ram_budget"),
    ]
    host.install_monitor(server)  # idempotent: no second set of routes or handlers
    assert len(list(server.routes)) == 12 and len(server.handlers) == 1


@pytest.mark.parametrize("body", [None, [], "text", {"no": "prompt"}, {"prompt": "not a dict"}])
def test_the_preflight_handler_passes_anything_through(fresh: None, body: Any) -> None:
    assert routes._on_prompt(state.monitor(), body) is body


def test_the_preflight_handler_plans_in_the_background_and_keeps_the_prompt(fresh: None) -> None:
    m = state.monitor()
    prompt = {"1": {"class_type": "EmptyImage", "inputs": {}}}
    body = {"prompt": prompt, "client_id": "c"}
    assert routes._on_prompt(m, body) is body and body["prompt"] is prompt
    m.pool.submit(lambda: None).result(30)  # one worker: the preflight has run
    assert m.plans.peek(m.plans.key(prompt, m.budget())) is not None


def test_a_prompt_is_tied_to_the_workflow_the_frontend_sent_it_from(fresh: None) -> None:
    m = state.monitor()
    prompt = {"1": {"class_type": "EmptyImage", "inputs": {}}}
    workflow = {"extra_pnginfo": {"workflow": {"id": "wf-1", "nodes": []}}}
    routes._on_prompt(m, {"prompt": prompt, "prompt_id": "p1", "extra_data": workflow})
    routes._on_prompt(m, {"prompt": prompt, "prompt_id": "p2", "extra_data": {"extra_pnginfo": None}})
    m.prompt_started("p1", prompt)
    m.prompt_started("p2", prompt)
    assert m.telemetry.run("p1").workflow_id == "wf-1"
    assert m.telemetry.run("p2").workflow_id is None  # a script's prompt: no workflow
    assert [r["workflow_id"] for r in m.telemetry.recent()] == ["wf-1", None]


def test_the_user_can_switch_the_monitor_off(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """HEADROOM_MONITOR=0 is the monitor only: no route, no monitor, but the executor hooks stay, with the
    residency controller (and through it the OOM retry and the 2024 host's end of streaming) subscribed."""
    monkeypatch.setitem(sys.modules, "execution", ModuleType("execution"))
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    monkeypatch.setenv("HEADROOM_MONITOR", "0")
    server = FakeServer()
    hooks = host.install_monitor(server)
    assert hooks["server"] == "off: HEADROOM_MONITOR=0"
    assert {"nodes", "oom_retry", "validation", "cached"} <= set(hooks)  # the executor hooks were tried
    assert not list(server.routes) and not server.handlers and state._MONITOR is None
    assert state._EVENTS is not None and state._RESIDENCY in state._EVENTS.subscribers
    assert not any(isinstance(s, Monitor) for s in state._EVENTS.subscribers)


def test_the_user_can_switch_the_executor_hooks_off(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """HEADROOM_HOOKS=0: no executor hook and no event source; the monitor's routes still serve."""
    monkeypatch.setitem(sys.modules, "execution", ModuleType("execution"))
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    monkeypatch.setenv("HEADROOM_HOOKS", "0")
    server = FakeServer()
    hooks = host.install_monitor(server)
    assert hooks["nodes"] == "off: HEADROOM_HOOKS=0" and "oom_retry" not in hooks
    assert state._EVENTS is None and state._MONITOR is not None
    assert hooks["server"] == "on" and list(server.routes)


def test_the_residency_controller_plans_on_dynamic_vram_hosts(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """DynamicVRAM (comfy-aimdo) hosts no longer make the controller stand aside: it plans, and says once
    that it orders the host's evictions (``nodes/host/dynamic_vram.py``)."""
    aimdo = ModuleType("comfy.memory_management")
    aimdo.aimdo_enabled = True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "comfy.memory_management", aimdo)
    control = state.residency()
    control.budget_override = Budget(vram=8 * 2**30, ram=32 * 2**30, pinned=2**30)
    prompt = {"1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}}
    with caplog.at_level(logging.INFO, logger="headroom"):
        control.prompt_started("p1", prompt)
        control.prompt_started("p2", prompt)
    assert {"p1", "p2"} <= set(control.controller.runs)
    assert sum("DynamicVRAM" in r.getMessage() for r in caplog.records) == 1  # said once
    aimdo.aimdo_enabled = False  # type: ignore[attr-defined]
    control.prompt_started("p3", prompt)
    assert "p3" in control.controller.runs


@pytest.mark.parametrize("is_async", [False, True])
def test_the_hosts_validation_is_marked_so_the_preflight_waits_for_it(
    fresh: None, monkeypatch: pytest.MonkeyPatch, is_async: bool
) -> None:
    """Issue #18 R77: a preflight planning beside the host's validation (both on the GIL) doubled the
    time POST /prompt froze the server; the preflight now waits until no validation is under way."""
    import asyncio

    m = state.monitor()
    source = events.EventSource([m])
    seen: list[tuple[int, bool]] = []

    def check(prompt: Any) -> str:
        seen.append((m.validating, m.validated.is_set()))
        return "valid"

    async def check_async(prompt: Any) -> str:
        return check(prompt)

    execution = ModuleType("execution")
    execution.validate_prompt = check_async if is_async else check  # type: ignore[attr-defined]
    assert events._hook_validation(source, execution) == "on"
    assert events._hook_validation(source, execution) == "on"  # idempotent: wrapped once
    call = execution.validate_prompt({})
    assert (asyncio.run(call) if is_async else call) == "valid"
    assert seen == [(1, False)] and m.validating == 0 and m.validated.is_set()

    waits: list[float] = []
    monkeypatch.setattr(m.validated, "wait", lambda timeout: waits.append(timeout) or True)
    monkeypatch.setattr(m, "plan_for", lambda prompt: (None, Preflight(None, "skipped", "test")))
    m.preflight({}, "p", None)
    assert waits == [HOST_PLAN_LIMIT_S]


def test_the_preflight_is_submitted_after_the_handler_returns_on_the_event_loop(fresh: None) -> None:
    """On the event loop the plan starts only once the host's handler yields (its validation is then
    marked): the handler itself only records the prompt."""
    import asyncio

    m = state.monitor()
    submitted: list[Any] = []
    m.pool.submit_preflight = lambda *job: submitted.append(job)  # type: ignore[method-assign]

    async def post() -> int:
        routes._on_prompt(m, {"prompt": {"1": {"class_type": "EmptyImage", "inputs": {}}}})
        before = len(submitted)
        await asyncio.sleep(0)
        return before

    assert asyncio.run(post()) == 0 and len(submitted) == 1


def test_a_host_reserve_larger_than_the_card_leaves_loading_to_the_host(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """--reserve-vram above the card made a budget with a reserve larger than the card and 0 B to plan."""
    mm = ModuleType("comfy.model_management")
    mm.minimum_inference_memory = lambda: 64 * 2**30  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)
    m = state.monitor()
    m.assume_vram = 8 * 2**30
    control = state.residency()  # its card budget is the monitor's (wired in state, not a monitor object)
    with caplog.at_level(logging.WARNING, logger="headroom"):
        assert control.budget() is None and control.budget() is None
    assert caplog.text.count("reserves 64.00 GiB for inference") == 1  # said once, not every prompt
    mm.minimum_inference_memory = lambda: 2**30  # type: ignore[attr-defined]
    budget = control.budget()
    assert budget is not None and 0 < budget.vram < 8 * 2**30 and budget.reserve == 2**30


@pytest.mark.parametrize("value", ["0.0001", "1e-300", "101", "inf", "nan", "fast", "-1"])
def test_a_sampling_rate_out_of_range_is_said_naming_the_variable_and_the_pack_still_starts(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    """Issue #43: HEADROOM_MONITOR_HZ=0.0001 (below one sample an hour) stopped the whole pack importing
    with a message that did not name the variable."""
    monkeypatch.setenv("HEADROOM_MONITOR_HZ", value)
    with caplog.at_level(logging.WARNING, logger="headroom"):
        m = Monitor()
    assert m.sampler.period_s == 1.0  # the default rate
    assert "HEADROOM_MONITOR_HZ" in caplog.text and "one sample an hour to 100 a second" in caplog.text


@pytest.mark.parametrize(("value", "period"), [("0", 0.0), ("0.0002777777777777778", 3600.0), ("100", 0.01)])
def test_the_sampling_rate_range_ends_are_taken(
    fresh: None, monkeypatch: pytest.MonkeyPatch, value: str, period: float
) -> None:
    monkeypatch.setenv("HEADROOM_MONITOR_HZ", value)
    assert Monitor().sampler.period_s == pytest.approx(period)


def test_a_message_to_the_browser_carries_no_infinity(fresh: None) -> None:
    """The host writes its messages with json.dumps, which writes Infinity; a browser's JSON.parse refuses
    the whole message for it (a preflight whose plan did not fit was lost that way)."""
    import json

    m, server = Monitor(), FakeServer()
    server.sockets["a"] = object()
    m.server = server
    m.push("headroom.preflight", {"wall_s": float("inf"), "time": {"range_s": [float("nan"), 1.5]}, "n": 2})
    [(_, sent, _)] = server.sent
    assert json.loads(json.dumps(sent, allow_nan=False)) == {
        "wall_s": None,
        "time": {"range_s": [None, 1.5]},
        "n": 2,
    }


def test_a_card_chosen_in_the_sidebar_is_the_card_the_time_is_for(fresh: None) -> None:
    """M5 (#42): a check on a card chosen in the sidebar said its time was for "this server's card"."""
    from comfyui_headroom.memory.planning.gpus import find_gpu

    gpu = find_gpu("RTX 4060")
    assert gpu is not None
    budget, hardware, name = state.monitor().chosen(gpu)
    assert name == "RTX 4060 (chosen in the sidebar)" and hardware.gpu_source == "named"
    assert "4060" in hardware.gpu and budget.vram <= 8 * 2**30
