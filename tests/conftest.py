"""Shared test configuration. Tiers: unit (tests/unit), host (tests/host), gpu, e2e.

A tier that cannot run here is skipped with its reason printed (pytest runs with -ra). CI sets
HEADROOM_REQUIRE_HOST=1 so that a missing host fails the run instead of skipping it. Every run ends
with the tests run and skipped per tier and the host, and the share of the pack's lines each tier ran
(headroom_testing.coverage, headroom_testing.line_coverage); ./scripts/test checks them against
tests/coverage_floor.json.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# the links a test run "measures" (nodes/host/links.py) never reach the user's own cache; the
# session that made the folder removes it (servers the tests start inherit it and end before)
if "HEADROOM_CACHE_DIR" not in os.environ:
    os.environ["HEADROOM_CACHE_DIR"] = tempfile.mkdtemp(prefix="headroom-cache-")
    atexit.register(shutil.rmtree, os.environ["HEADROOM_CACHE_DIR"], ignore_errors=True)

from headroom_testing.coverage import pytest_addoption, pytest_configure  # noqa: F401 (hooks)
from headroom_testing.harness import Host, HostUnavailable, find_host_root


@pytest.fixture(scope="session")
def host_root() -> Path:
    """The ComfyUI folder the host tests use; skipped (or failed, under CI) when there is none."""
    try:
        return find_host_root()
    except HostUnavailable as exc:
        if os.environ.get("HEADROOM_REQUIRE_HOST") == "1":
            pytest.fail(f"HEADROOM_REQUIRE_HOST=1 but {exc}")
        pytest.skip(str(exc))


@pytest.fixture
def fresh_process_state() -> Iterator[None]:
    """The pack's process-wide state made new for the test and again after it, in one call
    (``nodes.host.reset_process_state``; docs/architecture.md, "Process-wide state"). The hooks a test
    armed on stand-in modules are left off."""
    from comfyui_headroom.nodes.host import reset_process_state

    reset_process_state(rearm=False)
    yield
    reset_process_state(rearm=False)


@pytest.fixture(scope="session")
def host(host_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Host:
    """A real ComfyUI in this process with the pack loaded (see headroom_testing.harness)."""
    return Host(host_root, tmp_path_factory.mktemp("comfyui"))
