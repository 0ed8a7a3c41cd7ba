"""Shared test configuration. Tiers: unit (tests/unit), host (tests/host), gpu, e2e.

A tier that cannot run here is skipped with its reason printed (pytest runs with -ra). CI sets
HEADROOM_REQUIRE_HOST=1 so that a missing host fails the run instead of skipping it.
"""

from __future__ import annotations

import os

import pytest

from headroom_testing.harness import Host, HostUnavailable, find_host_root


@pytest.fixture(scope="session")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    """A real ComfyUI in this process with the pack loaded (see headroom_testing.harness)."""
    try:
        root = find_host_root()
    except HostUnavailable as exc:
        if os.environ.get("HEADROOM_REQUIRE_HOST") == "1":
            pytest.fail(f"HEADROOM_REQUIRE_HOST=1 but {exc}")
        pytest.skip(str(exc))
    return Host(root, tmp_path_factory.mktemp("comfyui"))
