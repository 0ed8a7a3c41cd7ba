"""Every patch of the host goes through one registry and comes off exactly, on every host: install,
run a prompt (each per-prompt hook fires), uninstall (every attribute of ``execution``, of
``PromptExecutor`` and of the server is the host's own again, by identity), install again."""

from __future__ import annotations

from typing import Any

import pytest

from headroom_testing.harness import Host

pytestmark = pytest.mark.host
PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 16, "height": 16, "batch_size": 1, "color": 0}},
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
}


class Server:
    """The PromptServer attributes the pack writes to: its route table and on-prompt handlers."""

    def __init__(self) -> None:
        from aiohttp import web

        self.routes = web.RouteTableDef()
        self.on_prompt_handlers: list[Any] = []

    def add_on_prompt_handler(self, handler: Any) -> None:
        self.on_prompt_handlers.append(handler)


def snapshot(host: Host, server: Server) -> dict[str, dict[str, Any]]:
    return {
        "execution": dict(vars(host.execution)),
        "PromptExecutor": dict(vars(host.execution.PromptExecutor)),
        "server": dict(vars(server)),
        "routes": {"items": list(server.routes)},
        "handlers": {"items": list(server.on_prompt_handlers)},
    }


def same(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> list[str]:
    """What differs, by identity (a wrapper equal to nothing but itself)."""
    diffs = []
    for part in a:
        for key in a[part].keys() | b[part].keys():
            x, y = a[part].get(key, "<absent>"), b[part].get(key, "<absent>")
            if isinstance(x, list) and isinstance(y, list):
                if len(x) != len(y) or any(i is not j for i, j in zip(x, y, strict=True)):
                    diffs.append(f"{part}.{key}")
            elif x is not y:
                diffs.append(f"{part}.{key}")
    return diffs


def test_install_then_uninstall_leaves_every_host_object_as_it_was(host: Host) -> None:
    pack = host.pack_module("nodes.host")
    registry = host.pack_module("nodes.host.patches").REGISTRY
    state = host.pack_module("nodes.host.state")
    assert pack.uninstall_monitor() >= 4  # what the pack's import installed
    server = Server()
    before = snapshot(host, server)
    hooks = pack.install_monitor(server)
    try:
        assert hooks["nodes"] == "on" and hooks["server"] == "on", hooks
        changed = same(before, snapshot(host, server))
        assert {
            "execution.validate_prompt",
            "execution.get_output_data",
            "PromptExecutor.add_message",
        } <= set(changed)
        assert "server._headroom_routes" in changed and "handlers.items" in changed
        host.run(PROMPT)
        host.run(PROMPT, prompt_id="second")
        fired = registry.state()
        boundary = "execution.recursive_execute" if host.legacy else "execution.reset_progress_state"
        for name in (boundary, "execution.PromptExecutor.add_message", "execution.validate_prompt"):
            assert fired[name]["installed"] == 1 and fired[name]["fired"] >= 2, (name, fired)
    finally:
        undone = pack.uninstall_monitor()
    assert undone >= len(changed)  # a patch per changed attribute (two wrap get_output_data in 2024)
    assert same(before, snapshot(host, server)) == []
    assert not [k for k in registry.state() if k.startswith(("execution.", "server."))]
    assert state.monitor().hooks == {}
    assert pack.install_monitor()["nodes"] == "on"  # as the pack's import left it
