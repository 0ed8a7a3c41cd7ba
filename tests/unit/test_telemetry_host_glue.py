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

from comfyui_headroom.nodes import host


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new process-wide monitor for the test, and no host modules unless the test adds them."""
    monkeypatch.setattr(host, "_MONITOR", None)
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
    assert host._MONITOR is None  # not even the sampler was created


def test_a_host_without_the_hooks_fails_open_with_a_log_line(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "execution", ModuleType("execution"))
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    with caplog.at_level(logging.WARNING, logger="headroom"):
        hooks = host.install_monitor()
    assert hooks["nodes"].startswith("off: ") and hooks["server"].startswith("off: no PromptServer")
    assert "per-node memory telemetry is off" in caplog.text


def test_a_server_gets_four_read_only_routes_and_the_preflight_handler(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "execution", ModuleType("execution"))
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    server = FakeServer()
    assert host.install_monitor(server)["server"] == "on"
    assert sorted((r.method, r.path) for r in server.routes) == [
        ("GET", "/headroom/plan/{prompt_id}"),
        ("GET", "/headroom/report/{prompt_id}"),
        ("GET", "/headroom/residency/{prompt_id}"),
        ("GET", "/headroom/status"),
    ]
    host.install_monitor(server)  # idempotent: no second set of routes or handlers
    assert len(list(server.routes)) == 4 and len(server.handlers) == 1


@pytest.mark.parametrize("body", [None, [], "text", {"no": "prompt"}, {"prompt": "not a dict"}])
def test_the_preflight_handler_passes_anything_through(fresh: None, body: Any) -> None:
    assert host._on_prompt(host.monitor(), body) is body


def test_the_preflight_handler_plans_in_the_background_and_keeps_the_prompt(fresh: None) -> None:
    m = host.monitor()
    prompt = {"1": {"class_type": "EmptyImage", "inputs": {}}}
    body = {"prompt": prompt, "client_id": "c"}
    assert host._on_prompt(m, body) is body and body["prompt"] is prompt
    m.pool.submit(lambda: None).result(30)  # one worker: the preflight has run
    assert m.plans.peek(m.plans.key(prompt, m.budget())) is not None


def test_the_user_can_switch_the_monitor_off(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "execution", ModuleType("execution"))
    monkeypatch.setitem(sys.modules, "nodes", ModuleType("nodes"))
    monkeypatch.setenv("HEADROOM_MONITOR", "0")
    server = FakeServer()
    assert host.install_monitor(server) == {
        "nodes": "off: HEADROOM_MONITOR=0",
        "server": "off: HEADROOM_MONITOR=0",
    }
    assert not list(server.routes) and not server.handlers and host._MONITOR is None


def test_the_residency_controller_defers_to_dynamic_vram(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    aimdo = ModuleType("comfy.memory_management")
    aimdo.aimdo_enabled = True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "comfy.memory_management", aimdo)
    monkeypatch.setattr(host, "_RESIDENCY", None)
    control = host.residency()
    control.budget_override = host.Budget(vram=8 * 2**30, ram=32 * 2**30, pinned=2**30)
    prompt = {"1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}}
    with caplog.at_level(logging.INFO, logger="headroom"):
        control.prompt_started(host.monitor(), "p1", prompt)
        control.prompt_started(host.monitor(), "p2", prompt)
    assert not control.controller.runs  # nothing planned, nothing will move
    assert sum("DynamicVRAM" in r.getMessage() for r in caplog.records) == 1  # said once
    aimdo.aimdo_enabled = False  # type: ignore[attr-defined]
    control.prompt_started(host.monitor(), "p3", prompt)
    assert "p3" in control.controller.runs
