"""Process-wide state: every object of the pack that lives as long as the process, held in one registry.

An object the pack keeps between runs (the monitor, the residency controller, the sessions streaming a
model now, what was said once, the pinned-bytes ledger, the RAM knob, built VAE engines...) is declared
here by the module that owns it, with why it is process-wide and how it is made new. ``PROCESS.reset()``
makes every resettable one new in one call (``nodes.host.reset_process_state`` wraps it with the host's
hooks); what must outlive a reset (the undo of a host patch, bookkeeping that dies with the host object it
describes) says why. ``tests/unit/test_process_state.py`` fails on a module-level object that changes at
run time and is not held here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger("headroom")

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Held:
    """One process-wide object: its name (``module: what``), why it lives as long as the process, and how
    it is made new (None: it outlives a reset, and ``why`` says what forgetting it would lose)."""

    name: str
    why: str
    reset: Callable[[], object] | None


class ProcessState:
    """The registry: each owner declares its object once, at import; a reset runs in declaration order."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()

    def hold(self, name: str, obj: _T, why: str, reset: Callable[[], object] | None = None) -> _T:
        """Declare ``obj`` process-wide under ``name`` and return it (a module imported again replaces its
        entry: the name is the key)."""
        if not name or not why:
            raise ValueError("a process-wide object needs a name and a reason")
        with self._lock:
            self._held[name] = Held(name, why, reset)
        return obj

    def held(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def reset(self) -> list[str]:
        """Make every resettable object new, as at import; returns their names. One that fails to reset is
        logged and the rest still are (a test must not inherit half the state of the one before)."""
        done: list[str] = []
        for entry in self.held():
            if entry.reset is None:
                continue
            try:
                entry.reset()
                done.append(entry.name)
            except Exception:
                log.exception("Headroom: could not reset %s", entry.name)
        return done


PROCESS = ProcessState()  # the one home of the pack's process-wide state
