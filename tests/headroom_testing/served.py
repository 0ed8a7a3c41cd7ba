"""The host's own ``server.PromptServer`` with the pack registered on it, served to aiohttp's TestClient.

The harness runs ComfyUI in-process without a server (PromptServer.instance does not exist there), so the
``served`` fixture builds the host's real ``server.PromptServer`` (both the 2024 copy and current ComfyUI
construct it the same way), lets the pack register on it as at startup, mounts the routes with the host's
own ``add_routes()`` and serves its aiohttp app on loopback. A test module imports the fixture to use it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from .harness import Host

WAIT_S = 30  # generous: a deadline for events, never a measured delay


class Served:
    def __init__(
        self, host: Host, server: Any, loop: asyncio.AbstractEventLoop, client: Any, state: ModuleType
    ):
        self.host, self.server, self.loop, self.client, self.state = host, server, loop, client, state

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def get(self, path: str) -> tuple[int, str, str]:
        async def fetch() -> tuple[int, str, str]:
            response = await self.client.get(path)
            return response.status, response.content_type, await response.text()

        return self.run(fetch())

    def post_json(self, path: str, body: Any, status: int = 200) -> Any:
        async def send() -> tuple[int, str]:
            data = body if isinstance(body, str) else json.dumps(body)
            response = await self.client.post(path, data=data, headers={"Content-Type": "application/json"})
            return response.status, await response.text()

        code, text = self.run(send())
        assert code == status, f"POST {path}: {code} {text[:500]}"
        return json.loads(text)

    def get_json(self, path: str, status: int = 200) -> Any:
        code, kind, text = self.get(path)
        assert code == status, f"GET {path}: {code} {text[:500]}"
        assert kind == "application/json"
        return json.loads(text)


@pytest.fixture(scope="module")
def served(host: Host, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from aiohttp.test_utils import TestClient, TestServer

    args = importlib_module("comfy.cli_args").args
    web_root = tmp_path_factory.mktemp("frontend")
    (web_root / "index.html").write_text("<html></html>")
    saved_root = getattr(args, "front_end_root", None)
    args.front_end_root = str(web_root)  # current hosts: no frontend package needed for these routes
    folder_paths = host.folder_paths
    if hasattr(folder_paths, "set_user_directory"):
        folder_paths.set_user_directory(str(tmp_path_factory.mktemp("user")))
    server_module = importlib_module("server")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = server_module.PromptServer(loop)
    if server.prompt_queue is None:  # 2024 hosts: main.py attaches the queue (the websocket reports it)
        server.prompt_queue = host.execution.PromptQueue(server)
    state = host.pack_module("nodes.host.state")  # the process state: the monitor
    hooks = host.pack_module("nodes.host").install_monitor(server)  # what ComfyUI's import of the pack does
    assert hooks["server"] == "on", hooks
    server.add_routes()

    async def start() -> TestClient:
        client = TestClient(TestServer(server.app))  # aiohttp wants its running loop here
        await client.start_server()
        return client

    client = loop.run_until_complete(start())
    publisher = loop.create_task(server.publish_loop())  # delivers send_sync messages to websockets
    yield Served(host, server, loop, client, state)
    publisher.cancel()
    loop.run_until_complete(client.close())
    state.monitor().server = None
    state.monitor().sampler.stop()
    del server_module.PromptServer.instance
    args.front_end_root = saved_root
    asyncio.set_event_loop(None)
    loop.close()


def importlib_module(name: str) -> ModuleType:
    return importlib.import_module(name)


async def receive(ws: Any, event: str) -> dict[str, Any]:
    """The next websocket message of type ``event`` (others are skipped), within WAIT_S."""
    async with asyncio.timeout(WAIT_S):
        while True:
            message = await ws.receive()
            assert message.type.name not in ("CLOSE", "CLOSED", "CLOSING", "ERROR"), message
            if message.type.name != "TEXT":
                continue
            data = json.loads(message.data)
            if data.get("type") == event:
                return data["data"]
