"""What every tiled engine shares: options, the run report, progress and tile sizing (how a stage is cut,
and the OOM retry that cuts it smaller, are in layout.py)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..units import format_bytes

# Smallest tile side, in stage-input pixels. Besides keeping the halo overhead sane, it keeps every
# convolution on the same CPU backend as the full decode: torch sends a batch-1 3x3 convolution with at
# most 20480 input elements (128 channels x 160 px) to its native kernel instead of oneDNN
# (ConvParams::use_mkldnn), and the two round differently.
MIN_TILE = 16


@dataclass
class DecodeOptions:
    """How to run one tiled decode. ``budget_bytes`` bounds one tile's activations on ``device``;
    ``tile`` (output pixels) overrides it. Callbacks come from the host adapter."""

    device: torch.device
    dtype: torch.dtype
    exact: bool = True  # reproduce the CPU GroupNorm kernel's arithmetic (else float32 addcmul)
    stats: str = "auto"  # "kernel" | "merge" | "auto": kernel where the parked activations are on device
    tile: int | None = None
    frames: int | None = None  # at most this many stage-input frames per time chunk (overrides the budget)
    budget_bytes: int | None = None
    park_device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    pin: bool = False
    # RAM the parked activations may take at once (None: no limit); past it they are memory-mapped
    # files in park_dir (None: the system's temporary folder). See parks.py.
    park_ram_bytes: int | None = None
    park_dir: str | None = None
    act: Callable[[torch.Tensor], torch.Tensor] = F.silu  # the host decoder's own nonlinearity
    progress: Callable[[int, int], None] | None = None
    check_interrupt: Callable[[], None] | None = None
    oom_types: tuple[type[BaseException], ...] = ()
    on_oom: Callable[[], None] | None = None

    def strips(self, video: bool) -> bool:
        """Whether video activations are cut in full-height strips instead of squares.

        On the CPU torch picks a 3D convolution's kernel (oneDNN or its native one, which round
        differently) from N*C*T*H of the input, never W: a strip as tall as the image gets the same
        kernel as the full decode, a shorter crop may not. A GPU has no such rule; squares fit a budget
        better there.
        """
        return video and torch.device(self.device).type == "cpu"

    def stats_mode(self) -> str:
        if self.stats != "auto":
            return self.stats
        return "kernel" if torch.device(self.park_device).type == torch.device(self.device).type else "merge"


@dataclass
class DecodeReport:
    """What a tiled decode did: per stage, the tile side used and the number of tiles run."""

    family: str
    stages: list[tuple[str, int, int]] = field(default_factory=list)  # (stage, tile side, tiles)
    chunks: dict[str, int] = field(default_factory=dict)  # stages cut in time: stage -> chunks
    oom_retries: int = 0
    parks_on_disk: int = 0  # parks that went to memory-mapped files (over park_ram_bytes)
    park_disk_bytes: int = 0
    predicted_peak_bytes: int = 0  # the largest per-tile activation estimate actually used

    @property
    def tiles_run(self) -> int:
        return sum(n for _, _, n in self.stages)


# The node's text box does not wrap its lines (a table's rows would break): long reasons are cut here, to
# what a new node's box shows.
TEXT_WIDTH = 60


def decode_text(
    report: DecodeReport, exact: bool, budget_bytes: int, sized_by: str, output: tuple[int, ...]
) -> str:
    """What a tiled decode did, said on the node after its run (M19): in one pass or in tiles (per level of
    the decoder: the most tiles and the smallest side, any cut in time), what sized the tiles, the peak it
    planned for, and any OOM retry or activations parked on disk. ``output``: the decoded IMAGE's shape,
    (batch, height, width, channels) or (batch, frames, height, width, channels)."""
    how = "exact" if exact else "fast, approximate"
    if len(output) == 5:
        what = f"{_count(output[0], 'clip')} of {output[1]} frames, {output[3]}×{output[2]} px"
    else:
        what = f"{_count(output[0], 'image')}, {output[2]}×{output[1]} px"
    # a stage's level: "up1" of "up1.block2.b" (each image or clip of a batch runs every stage again)
    levels: dict[str, tuple[int, int, int]] = {}  # level -> (most tiles, smallest side, most time chunks)
    for stage, side, tiles in report.stages:
        level = stage.split(".")[0]
        most, least, cuts = levels.get(level, (0, side, 0))
        levels[level] = (max(most, tiles), min(least, side), max(cuts, report.chunks.get(stage, 0)))
    if all(most == 1 and not cuts for most, _, cuts in levels.values()):
        lines = [f"fits whole: decoded in one pass ({how})", f"{report.family} VAE, {what}"]
    else:
        lines = [
            f"decoded in {report.tiles_run} tiles ({how})",
            f"{report.family} VAE, {what}",
            "tiles per decoder level (side in its own pixels):",
        ]
        for level, (most, least, cuts) in levels.items():
            count = "1 tile" if most == 1 else f"up to {most} tiles"
            lines.append(f"  {level}: {count}, {least} px" + (f", in {cuts} time chunks" if cuts else ""))
    lines.append(f"tiles sized to {format_bytes(budget_bytes, 'GiB')} of activations:")
    lines += textwrap.wrap(sized_by, TEXT_WIDTH, initial_indent="  ", subsequent_indent="  ")
    lines.append(f"predicted peak {format_bytes(report.predicted_peak_bytes, 'GiB')} of activations")
    if report.oom_retries:
        lines.append(f"ran out of memory {report.oom_retries}× and retried with smaller tiles")
    if report.parks_on_disk:
        parked = format_bytes(report.park_disk_bytes, "GiB")
        lines.append(f"{report.parks_on_disk} intermediate activations ({parked}) went to files on disk:")
        lines.append("  not enough free RAM to hold them")
    return "\n".join(lines)


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'s' if n != 1 else ''}"


def host_decode_text(reason: str) -> str:
    """The node's text when the host's own decode ran instead of a tiled one (M19), with the reason."""
    lines = ["decoded by ComfyUI's own VAE decode, not in tiles:"]
    for part in reason.split("; "):
        lines += textwrap.wrap(part, TEXT_WIDTH, initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines)


class Progress:
    """Counts units of work (tiles) towards a total that may grow when a stage is retried."""

    def __init__(self, total: int, callback: Callable[[int, int], None] | None) -> None:
        self.total, self.done, self.callback = total, 0, callback

    def step(self, units: int = 1) -> None:
        self.done += units
        if self.callback is not None:
            self.callback(min(self.done, self.total), self.total)

    def grow(self, units: int) -> None:
        self.total += units


def tile_for_budget(bytes_per_px: float, halo: int, budget: float, size: int, rows: int | None = None) -> int:
    """The largest tile side ``t`` (stage-input px) whose crop fits ``budget``, at least MIN_TILE and at
    most ``size``: a square, ``bytes_per_px * (t + 2 halo)^2``, or with ``rows`` a full-height strip,
    ``bytes_per_px * rows * (t + 2 halo)``."""
    pixels = max(0, int(budget / max(bytes_per_px, 1e-9)))
    side = (pixels // rows if rows else math.isqrt(pixels)) - 2 * halo
    return max(MIN_TILE, min(size, side))
