"""The one planning thread of the server and its bounded queue (issue #43).

Anyone who can POST /prompt can queue planning work, so the queue has a length and a byte cap and refuses
new work when full instead of growing: 300 posts of a 190 KB prompt once queued 300 plans behind which a
"Will it fit?" waited 749 s. Urgent work (``submit_urgent``: "Will it fit?") goes before every waiting
preflight; preflights run in the order the prompts came (the host runs them in that order), one per
distinct prompt; a prompt the host refused is taken out (``drop``), and the one being planned is marked
so that its planner can stop before it starts (``cancelled``)."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ...memory.units import MiB

_log = logging.getLogger("headroom")

MAX_WAITING = 32  # preflights waiting: the host's queue is run one prompt at a time, and this is minutes
MAX_BYTES = 64 * MiB  # of waiting prompts, as their JSON
MAX_URGENT = 8  # "Will it fit?" requests waiting


@dataclass(eq=False)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future[Any] = field(default_factory=Future)
    prompt: Any = None  # the posted prompt object (identity), for ``drop``
    size: int = 0
    tag: Any = None  # the prompt's id
    cancelled: bool = False


class PreflightQueue:
    """The planning worker: urgent jobs first, then the waiting preflights in order; bounded."""

    def __init__(
        self, max_waiting: int = MAX_WAITING, max_bytes: int = MAX_BYTES, max_urgent: int = MAX_URGENT
    ) -> None:
        self.max_waiting, self.max_bytes, self.max_urgent = max_waiting, max_bytes, max_urgent
        self._cv = threading.Condition()
        self._urgent: deque[_Job] = deque()
        self._waiting: OrderedDict[str, _Job] = OrderedDict()  # key (the prompt's plan key) -> job
        self._bytes = 0
        self._running: _Job | None = None
        self._thread: threading.Thread | None = None
        self._closing: threading.Thread | None = None  # the worker told to stop (close)
        self._serial = itertools.count()
        # what was done: jobs run, preflights refused (full), merged with a waiting one (same), dropped
        self.counts = {"run": 0, "full": 0, "same": 0, "dropped": 0, "fits": 0}

    # -- submitting
    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """A plain job after the waiting preflights (not bounded: for the pack's own use)."""
        job = _Job(fn, args)
        with self._cv:
            self._waiting[f"job:{next(self._serial)}"] = job
            self._wake()
        return job.future

    def submit_urgent(self, fn: Callable[..., Any], *args: Any) -> Future[Any] | None:
        """A job before every waiting preflight; None when ``max_urgent`` already wait."""
        job = _Job(fn, args)
        with self._cv:
            if len(self._urgent) >= self.max_urgent:
                return None
            self._urgent.append(job)
            self.counts["fits"] += 1
            self._wake()
        return job.future

    def submit_preflight(
        self, key: str, prompt: Any, size: int, tag: Any, fn: Callable[..., Any], *args: Any
    ) -> str:
        """Queue the preflight of ``prompt`` (``size`` bytes, plan key ``key``, id ``tag``): "queued",
        "same" (the same prompt already waits: planned once) or "full" (refused: the queue is at its cap)."""
        with self._cv:
            if key in self._waiting:
                self.counts["same"] += 1
                return "same"
            if len(self._waiting) >= self.max_waiting or self._bytes + size > self.max_bytes:
                self.counts["full"] += 1
                return "full"
            self._waiting[key] = _Job(fn, args, prompt=prompt, size=size, tag=tag)
            self._bytes += size
            self._wake()
        return "queued"

    def drop(self, prompt: Any) -> list[Any]:
        """Take out the waiting preflight of ``prompt`` (that object), and mark it if it is being planned;
        returns the ids (tags) of both."""
        with self._cv:
            keys = [k for k, job in self._waiting.items() if job.prompt is prompt]
            tags = []
            for key in keys:
                job = self._waiting.pop(key)
                self._bytes -= job.size
                job.future.cancel()
                tags.append(job.tag)
            if self._running is not None and self._running.prompt is prompt:
                self._running.cancelled = True
                tags.append(self._running.tag)
            self.counts["dropped"] += len(keys)
        return tags

    def close(self) -> None:
        """Stop the worker after the job it runs (the process's state made new): the jobs still waiting are
        cancelled; a later submit starts a worker again."""
        with self._cv:
            jobs = [*self._urgent, *self._waiting.values()]
            self._urgent.clear()
            self._waiting.clear()
            self._bytes = 0
            self._closing = self._thread
            self._cv.notify_all()
        for job in jobs:
            job.future.cancel()

    def cancelled(self) -> bool:
        """On the worker: whether the job it runs was dropped since it started."""
        job = self._running
        return job is not None and job.cancelled and threading.current_thread() is self._thread

    def state(self) -> dict[str, Any]:
        with self._cv:
            return {
                "waiting": len(self._waiting),
                "urgent": len(self._urgent),
                "bytes": self._bytes,
                "max_waiting": self.max_waiting,
                "max_bytes": self.max_bytes,
                **self.counts,
            }

    # -- the worker
    def _wake(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="headroom-preflight", daemon=True)
            self._thread.start()
        self._cv.notify()

    def _next(self) -> _Job | None:
        with self._cv:
            while not self._urgent and not self._waiting:
                self._running = None
                if self._closing is threading.current_thread():
                    self._closing = self._thread = None
                    return None
                self._cv.wait()
            if self._urgent:
                job = self._urgent.popleft()
            else:
                job = self._waiting.popitem(last=False)[1]
                self._bytes -= job.size
            self._running = job
            return job

    def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:  # closed
                return
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                job.future.set_result(job.fn(*job.args))
            except BaseException as exc:
                job.future.set_exception(exc)
            finally:
                with self._cv:
                    self.counts["run"] += 1
