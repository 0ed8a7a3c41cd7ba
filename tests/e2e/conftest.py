"""The browser tier: one real ComfyUI server for the whole session (startup takes a minute on two
cores); see headroom_testing.browser_server. Each test runs its own playwright script against it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from headroom_testing.browser_server import Server, start_server


@pytest.fixture(scope="session")
def comfy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with start_server(tmp_path_factory.mktemp("e2e")) as server:
        yield server
