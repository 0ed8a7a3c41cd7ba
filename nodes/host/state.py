"""Process state: the process-wide monitor, residency controller and executor event source, made on first
use, and the wiring between them. They are held with the pack's other process-wide objects in
``memory.process_state.PROCESS``; ``nodes.host.reset_process_state()`` makes them all new in one call.

The monitor and the controller never call each other. They meet here: both subscribe to the event
source (the monitor first, so a node's telemetry opens before the controller moves models for it and
closes before the controller's bookkeeping), the controller's budget is the monitor's card budget, and
the controller's moves are recorded in the monitor's telemetry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from ...memory.planning.costmodel import Budget
from ...memory.process_state import PROCESS
from ...memory.residency.ram_budget import RAM, RamBudget
from ...memory.telemetry.runs import ResidencyEvent
from . import node_text
from .events import EventSource
from .legacy_2024 import subscribe_scopes
from .monitor import Monitor, monitor_enabled
from .residency import Residency

_MONITOR: Monitor | None = None
_RESIDENCY: Residency | None = None
_EVENTS: EventSource | None = None
_LOCK = threading.RLock()  # reentrant: the event source's factory makes the other two


def _reset() -> None:
    """Drop the three (the monitor's threads stopped); the next use makes new ones. The event source's
    executor hooks are the caller's: ``reset_process_state`` takes them off first and puts them back."""
    global _MONITOR, _RESIDENCY, _EVENTS
    with _LOCK:
        old, _MONITOR, _RESIDENCY, _EVENTS = _MONITOR, None, None, None
    if old is not None:
        old.close()


PROCESS.hold(
    "host.state: monitor, controller, event source",
    (_MONITOR, _RESIDENCY, _EVENTS),
    "made on first use and wired to each other and to the host's executor",
    reset=_reset,
)


_T = TypeVar("_T")


def _process_wide(name: str, factory: Callable[[], _T]) -> _T:
    """This module's global ``name``, made by ``factory`` on first use (tests reset it to None)."""
    with _LOCK:
        if globals()[name] is None:
            globals()[name] = factory()
        made: _T = globals()[name]
        return made


def monitor() -> Monitor:
    """The process-wide monitor, created on first use."""
    return _process_wide("_MONITOR", Monitor)


node_text.connect(monitor)  # the Stream nodes' texts go out through the monitor


def residency() -> Residency:
    """The process-wide residency controller, created on first use."""
    return _process_wide("_RESIDENCY", lambda: Residency(card_budget, on_move=_record_move))


def events() -> EventSource:
    """The process-wide executor event source, with the monitor and the controller subscribed."""
    return _process_wide("_EVENTS", _event_source)


def _event_source() -> EventSource:
    source = EventSource([monitor(), residency()] if monitor_enabled() else [residency()])
    subscribe_scopes(source)  # first: a streamed model detaches before the controller moves models
    return source


def running_hooks() -> tuple[bool, object]:
    """Whether the pack's hooks are on (an event source that patched the executor, or a monitor talking to a
    server) and that server (None without one), read without making anything."""
    with _LOCK:
        source, m = _EVENTS, _MONITOR
    server = m.server if m is not None else None
    return bool(source is not None and source.hooks) or server is not None, server


def card_budget() -> Budget | None:
    """The card the controller plans for: the monitor's (the assumed VRAM, else the device's)."""
    return monitor().budget()


def _record_move(move: ResidencyEvent) -> None:
    monitor().telemetry.record_event(move)


def configure_ram_budget(value: int | str | None) -> RamBudget:
    """Set the RAM budget (bytes or a size such as "24GB"; None or "auto": the machine's default) and return
    the budget now in force (HEADROOM_RAM_BUDGET, when set, still wins). A bad size raises ValueError."""
    RAM.configure(value)
    return RAM.resolve()


def ram_budget() -> RamBudget:
    """The RAM budget in force: RssAnon + pinned of this process stay within it at every node boundary."""
    return RAM.resolve()
