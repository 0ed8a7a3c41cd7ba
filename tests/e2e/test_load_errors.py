"""N5 of #29 in the browser: an Offload Loader whose file the machine cannot map (out of memory or
address space; on Windows a page file too small) is reported as memory, with what to do, where the artist
sees the failed run. It was "the file does not match the architecture the host built for it". The fault
is the test-only faults pack's (tests/e2e/faults), on a checkpoint named for it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headroom_testing.browser_server import ENOMEM_CHECKPOINT, Server
from headroom_testing.prompts import offload_loader

pytestmark = pytest.mark.e2e
PROMPT = {
    "1": offload_loader(checkpoint=ENOMEM_CHECKPOINT),
    "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},
}


@pytest.fixture(scope="module")
def seen(comfy_server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    prompt = tmp_path_factory.mktemp("enomem") / "prompt.json"
    prompt.write_text(json.dumps(PROMPT))
    return comfy_server.browser("load_error.mjs", prompt)


def test_the_run_fails_on_the_loader_with_the_machines_memory_named(seen: dict[str, Any]) -> None:
    assert seen["ended"]["event"] == "execution_error"
    error = seen["error"]
    assert str(error["node_id"]) == "1" and error["node_type"] == "HeadroomOffloadLoader", error
    message = error["exception_message"]
    assert f"ran out of memory to map or load {ENOMEM_CHECKPOINT}" in message, message
    assert "does not match the architecture" not in message


def test_the_frontend_shows_the_memory_message_not_a_mismatch(seen: dict[str, Any]) -> None:
    shown = seen["shown"]
    assert f"ran out of memory to map or load {ENOMEM_CHECKPOINT}" in shown, shown[-2000:]
    assert "does not match the architecture" not in shown
