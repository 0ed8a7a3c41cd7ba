"""Reads of a file truncated under a mapping, run in a child process: a read of the mapping's pages past
the new end kills the child (SIGBUS, its exit signal); a read through the file raises FileChanged, which
the child's script catches and prints."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from typing import NoReturn


def run_child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c script *args`` in a child process, its output kept."""
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300, check=False
    )


def assert_sigbus_or_file_changed(child: subprocess.CompletedProcess[str], pages: bool, printed: str) -> None:
    """``pages``: the child read the mapping's pages (the old way) and died of SIGBUS. Else it exited 0
    having printed ``printed`` (its caught FileChanged)."""
    outcome = (child.returncode, child.stdout, child.stderr[-2000:])
    if pages:
        assert child.returncode == -signal.SIGBUS, outcome
        return
    assert child.returncode == 0, outcome
    assert printed in child.stdout, outcome


def report(action: Callable[[], object]) -> NoReturn:
    """In the child: run ``action``; exit 0 printing the FileChanged it raised, 3 if it raised none (a
    SIGBUS ends the child before either)."""
    from comfyui_headroom.memory.residency.mapped import FileChanged

    try:
        action()
    except FileChanged as exc:
        print("FileChanged:", exc)
        sys.exit(0)
    print("no error")
    sys.exit(3)
