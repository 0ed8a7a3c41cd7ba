"""Where a decode keeps its full-size intermediate activations ("parks") between stages.

A park holds a whole activation at its stage's resolution: for a long clip that is tens of GB (128
channels x 129 frames x 720 x 1280 in bf16 is 30 GB, and a stage holds two or three at once). Parks go
to RAM while the decode's parks fit ``DecodeOptions.park_ram_bytes`` (pinned for a CUDA decode while
they fit half of it); a park that would pass it is a file in ``park_dir``, memory-mapped: the page
cache keeps what RAM allows and the kernel writes the rest to disk. The values are the same either
way, so the decode stays exact.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from types import TracebackType

import torch

from .runtime import DecodeOptions, DecodeReport


class ParkAllocator:
    """Allocates one decode's parks; removes its files when the decode ends (``with`` block)."""

    def __init__(self, options: DecodeOptions, report: DecodeReport) -> None:
        self.options, self.report = options, report
        self.paths: list[str] = []

    def empty(
        self, shape: tuple[int, ...], dtype: torch.dtype, live_bytes: int, final: bool = False
    ) -> torch.Tensor:
        """An uninitialised park of ``shape``; ``live_bytes``: the decode's parks still held. The
        ``final`` one (the decoder's output, which the caller keeps) is always in RAM."""
        opts = self.options
        on_cpu = torch.device(opts.park_device).type == "cpu"
        size = math.prod(shape) * dtype.itemsize
        allowance = opts.park_ram_bytes
        if final or not on_cpu or allowance is None or live_bytes + size <= allowance:
            # Pinned (page-locked) memory cannot be paged out: only within half the allowance.
            pin = opts.pin and on_cpu and (allowance is None or live_bytes + size <= allowance // 2)
            return torch.empty(shape, dtype=dtype, device=opts.park_device, pin_memory=pin)
        return self._mapped(shape, dtype, size)

    def _mapped(self, shape: tuple[int, ...], dtype: torch.dtype, size: int) -> torch.Tensor:
        folder = self.options.park_dir or tempfile.gettempdir()
        fd, path = tempfile.mkstemp(prefix="headroom-park-", suffix=".bin", dir=folder)
        os.close(fd)
        try:
            park = torch.from_file(path, shared=True, size=math.prod(shape), dtype=dtype).view(shape)
        except BaseException:
            os.remove(path)
            raise
        try:  # POSIX: the mapping keeps the data, and nothing is left behind even after a crash
            os.remove(path)
        except OSError:  # Windows: a mapped file cannot be removed; done when the decode ends
            self.paths.append(path)
        self.report.parks_on_disk += 1
        self.report.park_disk_bytes += size
        return park

    def __enter__(self) -> ParkAllocator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for path in self.paths:
            with contextlib.suppress(OSError):
                os.remove(path)
        self.paths.clear()


def live_bytes(parks: dict[str, torch.Tensor]) -> int:
    """Bytes of the parks a decode still holds."""
    return sum(p.numel() * p.element_size() for p in parks.values())
