"""What a streamer measured: uploads, misses, and the timing marks it turns into step times and a
lower bound per step (``StreamStats``)."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

Mark = float | torch.cuda.Event  # a timing mark: perf_counter seconds on CPU, a CUDA event on GPU


@dataclass
class StreamStats:
    uploads: int = 0
    uploaded_bytes: int = 0
    misses: int = 0  # blocks called out of the learnt order (uploaded on demand)
    calls_together: int = 0  # model calls that shared their uploads with another call (run_together)
    steps: int = 0
    pinned: bool = False
    cuda: bool = False
    host_bytes: int = 0  # the streamed blocks' host buffer
    uploads_from: str = ""  # where the streamed blocks upload from (``BlockStreamer._uploads_from``)
    streamed_bytes: int = 0
    block_compute_s: dict[int, list[float]] = field(default_factory=dict)
    upload_s: list[tuple[int, float]] = field(default_factory=list)  # (bytes, seconds)
    step_s: list[float] = field(default_factory=list)
    # the same as intervals in seconds from ``_origin``, and the steps (start, end, all of it timed)
    compute_iv: list[tuple[float, float]] = field(default_factory=list)
    upload_iv: list[tuple[float, float]] = field(default_factory=list)
    steps_iv: list[tuple[float, float, bool]] = field(default_factory=list)
    # timing marks not yet read: perf_counter floats on CPU, CUDA events (read after a sync) on GPU
    _origin: Mark | None = None
    _compute_marks: list[tuple[int, Mark, Mark]] = field(default_factory=list)
    _upload_marks: list[tuple[int, Mark, Mark]] = field(default_factory=list)
    _step_marks: list[tuple[Mark, bool]] = field(default_factory=list)  # (mark, timed)

    def resolve(self) -> None:
        """Turn the timing marks into seconds (synchronises the device once, after the fact)."""
        marks = [m for _, a, b in self._compute_marks + self._upload_marks for m in (a, b)]
        marks += [m for m, _ in self._step_marks]
        if any(not isinstance(m, float) for m in marks):
            torch.cuda.synchronize()
        at = functools.partial(_seconds, self._origin)
        for block, a, b in self._compute_marks:
            self.block_compute_s.setdefault(block, []).append(_seconds(a, b))
            self.compute_iv.append((at(a), at(b)))
        for nbytes, a, b in self._upload_marks:
            self.upload_s.append((nbytes, _seconds(a, b)))
            self.upload_iv.append((at(a), at(b)))
        steps = self._step_marks
        for (a, timed), (b, _) in zip(steps, steps[1:], strict=False):
            self.step_s.append(_seconds(a, b))
            self.steps_iv.append((at(a), at(b), timed))
        self._compute_marks, self._upload_marks = [], []
        self._step_marks = steps[-1:]

    def bandwidth(self) -> float | None:
        """Measured host-to-device bytes per second (median of the timed uploads)."""
        rates = [b / s for b, s in self.upload_s if s > 0]
        return statistics.median(rates) if rates else None

    def compute_s(self) -> float:
        """Median compute per step of the streamed blocks."""
        return sum(statistics.median(v) for v in self.block_compute_s.values() if v)

    def step_bounds(self) -> list[tuple[float, float]]:
        """(step time, lower bound) of every timed step. The bound is the time measured busy inside
        that step's own interval, so it cannot exceed the step: on CUDA the busier of the compute
        stream and the copy stream (they overlap), on a CPU compute and the RAM copies together (one
        thread does both; there is no PCIe link to overlap)."""
        out = []
        for a, b, timed in self.steps_iv:
            if not timed:
                continue
            compute = _busy(self.compute_iv, a, b)
            upload = _busy(self.upload_iv, a, b)
            both = _busy(self.compute_iv + self.upload_iv, a, b)
            out.append((b - a, max(compute, upload) if self.cuda else both))
        return out

    def bound_s(self) -> float | None:
        """The least of the timed steps' bounds (None until a step is timed): a lower bound of each of
        them, and of the steady-state step when the first step is slower (warm-up, order learning)."""
        bounds = self.step_bounds()
        return min(bound for _, bound in bounds) if bounds else None


def _busy(intervals: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """Length of the union of ``intervals`` clipped to [a, b]."""
    total, end = 0.0, a
    for lo, hi in sorted(intervals):
        lo, hi = max(lo, end), min(hi, b)
        if hi > lo:
            total += hi - lo
            end = hi
    return total


def _seconds(a: Mark | None, b: Mark) -> float:
    if isinstance(a, torch.cuda.Event) and isinstance(b, torch.cuda.Event):
        return float(a.elapsed_time(b)) / 1000
    if isinstance(a, float) and isinstance(b, float):
        return b - a
    raise TypeError(f"timing marks of two kinds: {a!r}, {b!r}")
