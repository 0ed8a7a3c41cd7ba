"""Process state: the process-wide monitor, residency controller and executor event source, made on first
use, and the wiring between them. Tests reach (and reset) process state here and nowhere else: set
``_MONITOR``, ``_RESIDENCY`` or ``_EVENTS`` to None and the next call makes a new one.

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
