"""Sampling memory over time: a daemon thread that reads a probe while someone listens, into a bounded
history, and the peaks of a window of samples."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable

from .probe import SAMPLE_FIELDS, Sample

log = logging.getLogger("headroom")


class Sampler:
    """Samples ``probe`` every ``period_s`` on a daemon thread while ``wanted()`` holds, into a history.

    ``period_s`` 0 means off. The thread ends by itself as soon as ``wanted()`` is false (nobody listens and
    nothing runs); ``ensure_running()`` starts it again when demand returns. ``tick()`` takes one sample
    now (node boundaries use it too, so per-node figures exist even with the thread off).
    """

    def __init__(
        self,
        probe: Callable[[], Sample],
        period_s: float = 1.0,
        history: int = 3600,
        wanted: Callable[[], bool] = lambda: True,
        on_sample: Callable[[Sample], None] | None = None,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self.probe, self.wanted, self.on_sample = probe, wanted, on_sample
        self.paused = paused  # True: the thread skips its sample (the host is recording a step)
        self.skipped = 0
        self.period_s = 0.0
        self.set_period(period_s)
        self._samples: deque[Sample] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0

    def set_period(self, period_s: float) -> None:
        if not 0 <= period_s <= 3600:
            raise ValueError(f"sampling period must be 0 (off) to 3600 s, got {period_s}")
        self.period_s = float(period_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def tick(self, notify: bool = True) -> Sample:
        sample = self.probe()
        with self._lock:
            self._samples.append(sample)
            self.ticks += 1
        if notify and self.on_sample is not None:
            try:
                self.on_sample(sample)
            except Exception:  # a broken listener must not stop sampling
                log.exception("Headroom: a telemetry listener failed")
        return sample

    def ensure_running(self) -> bool:
        """Start the thread if sampling is on, wanted and not running; True if it runs afterwards."""
        if self.period_s <= 0 or not self.wanted():
            return self.running
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._wake.clear()
                self._thread = threading.Thread(target=self._loop, name="headroom-sampler", daemon=True)
                self._thread.start()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout)

    def _loop(self) -> None:
        while self.period_s > 0 and self.wanted():
            if self.paused():
                self.skipped += 1
            else:
                self.tick()
            if self._wake.wait(self.period_s):
                break

    @property
    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def history(self, since: float | None = None, limit: int | None = None) -> list[Sample]:
        """Samples newer than ``since`` (all when None), oldest first, at most the last ``limit``."""
        with self._lock:
            if since is None:
                samples = list(self._samples)
            else:  # walk back from the newest: a node's window is short, the history long
                samples = list(itertools.takewhile(lambda s: s.t > since, reversed(self._samples)))[::-1]
        return samples[-limit:] if limit else samples

    def peaks(self, start: float, end: float) -> dict[str, int]:
        """The largest value of every field over samples taken in [start, end]."""
        return peaks(s for s in self.history() if start <= s.t <= end)


def peaks(samples: Iterable[Sample]) -> dict[str, int]:
    out: dict[str, int] = {}
    for sample in samples:
        for name in SAMPLE_FIELDS:
            value = getattr(sample, name)
            if value is not None and value > out.get(name, -1):
                out[name] = value
    return out
