"""What a copy of the pack (into a server's custom_nodes, a wheel build, a benchmark's folder) leaves out.

Virtualenvs first: ``scripts/test`` makes one per host (``.venv``, ``HEADROOM_VENV=.venv033``), several
GB each with torch, and a copy per test server filled a disk (5 servers, 13 GB each).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

NOT_THE_PACK = (
    ".venv*", ".git", "__pycache__", "*.egg-info", ".*_cache", ".hypothesis", "node_modules", ".gpu-*",
    "build", "dist",
)  # fmt: skip


def ignore(*more: str) -> Callable[[Any, list[str]], set[str]]:
    """``shutil.copytree``'s ``ignore`` for the pack: ``NOT_THE_PACK`` and ``more`` patterns."""
    return shutil.ignore_patterns(*NOT_THE_PACK, *more)
