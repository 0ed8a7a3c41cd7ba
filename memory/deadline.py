"""A time limit on planning, checked by its long loops: the preflight of a queued prompt must answer in
bounded time whatever the prompt's size, while the command line plans without one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# Planning inside the host (a queued prompt's preflight, the controller at a prompt's start) stops after
# this long and the prompt runs as ComfyUI would run it: planning takes about 0.3 ms per node on a 2-core
# CPU (a 2 MB prompt of 15k nodes: 4.5 s; bench/results/planner_scaling.md).
HOST_PLAN_LIMIT_S = 20.0

_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("headroom_plan_deadline", default=None)


class PlanTimeout(Exception):
    """Planning ran past its time limit."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Planning inside this block raises PlanTimeout once ``seconds`` have passed (None: no limit)."""
    token = _DEADLINE.set(None if seconds is None else (time.monotonic() + seconds, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_time() -> None:
    """Raise PlanTimeout when the current time limit has passed (cheap: call it once per loop turn)."""
    limit = _DEADLINE.get()
    if limit is not None and time.monotonic() > limit[0]:
        raise PlanTimeout(f"planning took longer than its limit of {limit[1]:g} s")
