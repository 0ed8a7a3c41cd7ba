"""How a stage is cut: spatial tiles (or strips) times time chunks, chosen to fit the budget while
computing the least, and cut smaller after an OOM. Shared by the KL (HunyuanVideo) and LTXV engines; Wan
keeps its causal cache and is never cut in time (it uses ``TileLayout`` and the OOM retry only)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from .runtime import MIN_TILE, DecodeOptions, DecodeReport, tile_for_budget
from .tiles import Chunk, chunks, crop_area, tiles_of


@dataclass(frozen=True)
class TileLayout:
    """Spatial tiles ``tile`` stage-input px a side (or strips that wide) and time chunks of at most
    ``frames`` stage-input frames (all of them: no cut in time). No chunk's crop may be shorter than
    ``min_frames`` (the CPU kernel rule, ``tiles.min_crop_frames``)."""

    tile: int
    frames: int = 1
    min_frames: int = 1

    def smaller(self) -> TileLayout | None:
        """The next layout to try after an OOM: half the tile, then half the frames; None at the end."""
        if self.tile > MIN_TILE:
            return replace(self, tile=max(MIN_TILE, self.tile // 2))
        if self.frames > self.min_frames:
            return replace(self, frames=max(self.min_frames, math.ceil(self.frames / 2)))
        return None


def frame_counts(frames: int) -> list[int]:
    """Every distinct chunk length ``ceil(frames / k)``, longest first: the time cuts worth trying."""
    return sorted({math.ceil(frames / k) for k in range(1, frames + 1)}, reverse=True)


@dataclass(frozen=True)
class StageGeometry:
    """A stage's input as the layout sees it: its size, its reach in space and time, and how crops
    must be cut (full-height strips and at least ``min_frames`` frames for video on the CPU)."""

    height: int
    width: int
    frames: int
    halo: int
    time_halo: tuple[int, int]
    strips: bool
    min_frames: int = 1

    @property
    def size(self) -> int:
        return self.width if self.strips else max(self.height, self.width)

    @property
    def rows(self) -> int | None:
        return self.height if self.strips else None

    def chunks(self, chunk: int) -> list[Chunk]:
        return chunks(self.frames, chunk, self.time_halo)

    def crop_range(self, chunk: int) -> tuple[int, int]:
        """The (shortest, longest) crop in frames of a cut into chunks of ``chunk``."""
        crops = [c.crop_frames for c in self.chunks(chunk)]
        return min(crops), max(crops)

    def allowed(self, chunk: int) -> bool:
        return chunk >= self.frames or self.crop_range(chunk)[0] >= self.min_frames

    def count(self, layout: TileLayout) -> int:
        """Crops run: time chunks x spatial tiles."""
        tiles = tiles_of(self.height, self.width, layout.tile, self.strips)
        return len(self.chunks(layout.frames)) * len(tiles)

    def work(self, layout: TileLayout) -> int:
        """Input voxels the crops cover in all (a halo counts each time it is read)."""
        area = 0
        for t in tiles_of(self.height, self.width, layout.tile, self.strips):
            c = t.crop(self.halo, self.height, self.width)
            area += (c.y1 - c.y0) * (c.x1 - c.x0)
        return area * sum(c.crop_frames for c in self.chunks(layout.frames))

    def smallest(self) -> TileLayout:
        chunk = next(n for n in range(1, self.frames + 1) if self.allowed(n))
        return TileLayout(min(MIN_TILE, max(self.height, self.width)), chunk, self.min_frames)

    def peak(self, layout: TileLayout, estimate: Callable[[int, int], int]) -> int:
        """``estimate(tile, crop frames)`` for the layout's longest crop."""
        return estimate(layout.tile, self.crop_range(layout.frames)[1])

    def record(self, report: DecodeReport, stage: str, layout: TileLayout) -> None:
        """Add the stage run with ``layout`` to ``report``: its tile side and crops, and its time chunks
        when cut in time."""
        report.stages.append((stage, layout.tile, self.count(layout)))
        cuts = len(self.chunks(layout.frames))
        if cuts > 1:
            report.chunks[stage] = cuts

    def choose(
        self, options: DecodeOptions, tile_override: int | None, estimate: Callable[[int, int], int]
    ) -> TileLayout:
        """The options' overrides (``tile_override``: ``options.tile`` in this stage's px), else the
        layout computing least within the budget (the smallest when none fits), else whole."""
        if tile_override is not None or options.frames is not None:
            tile = self.size if tile_override is None else min(self.size, max(MIN_TILE, tile_override))
            chunk = min(self.frames, options.frames or self.frames)
            while not self.allowed(chunk):
                chunk += 1
            return TileLayout(tile, chunk, self.min_frames)
        budget = options.budget_bytes
        if budget is None:
            return TileLayout(self.size, self.frames, self.min_frames)
        unit = crop_area(1, self.halo, self.rows or 1 + 2 * self.halo, 1 + 2 * self.halo, self.strips)
        best: tuple[tuple[bool, int], TileLayout] | None = None
        for chunk in frame_counts(self.frames):
            if not self.allowed(chunk):
                continue
            longest = self.crop_range(chunk)[1]
            per_px = estimate(1, longest) / unit
            tile = tile_for_budget(per_px, self.halo, budget, self.size, self.rows)
            while tile > MIN_TILE and estimate(tile, longest) > budget:  # per_px rounds down a little
                tile -= 1
            layout = TileLayout(tile, chunk, self.min_frames)
            size = self.peak(layout, estimate)
            key = (size > budget, size if size > budget else self.work(layout))
            if best is None or key < best[0]:
                best = (key, layout)
        assert best is not None  # no cut in time is always allowed
        return best[1]


def run_with_oom_retry(
    attempt: Callable[[TileLayout], None], layout: TileLayout, options: DecodeOptions, report: DecodeReport
) -> TileLayout:
    """Run ``attempt(layout)``; on the host's OOM error retry with ``layout.smaller()``. Returns the
    layout used.

    The retry happens after the ``except`` block has ended, so the failed attempt's tensors (held by the
    exception's frames) are freed before ``on_oom`` empties the allocator cache.
    """
    while True:
        smaller = None
        try:
            attempt(layout)
        except options.oom_types:
            smaller = layout.smaller()
            if smaller is None:
                raise
        if smaller is None:
            return layout
        report.oom_retries += 1
        layout = smaller
        if options.on_oom is not None:
            options.on_oom()
