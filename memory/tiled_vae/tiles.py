"""Tile grids and receptive fields, read from the layers themselves (never a magic halo constant)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class Unsupported(ValueError):
    """The decoder has a layer this engine cannot tile exactly; the caller falls back to a full decode."""


@dataclass(frozen=True)
class Tile:
    """One tile of a 2D grid: its core rows/columns ``[y0, y1) x [x0, x1)`` in the grid's pixels."""

    y0: int
    y1: int
    x0: int
    x1: int

    def crop(self, halo: int, height: int, width: int) -> Tile:
        """The core grown by ``halo`` on each side, clipped to the image."""
        return Tile(
            max(0, self.y0 - halo),
            min(height, self.y1 + halo),
            max(0, self.x0 - halo),
            min(width, self.x1 + halo),
        )


def spans(size: int, tile: int) -> list[tuple[int, int]]:
    """``size`` split into near-equal spans of at most ``tile`` (equal shapes keep the kernels alike)."""
    count = max(1, math.ceil(size / max(1, tile)))
    edges = [round(i * size / count) for i in range(count + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def grid(height: int, width: int, tile: int) -> Iterator[Tile]:
    for y0, y1 in spans(height, tile):
        for x0, x1 in spans(width, tile):
            yield Tile(y0, y1, x0, x1)


def columns(height: int, width: int, tile: int) -> Iterator[Tile]:
    """Full-height strips at most ``tile`` wide (how video is cut on a CPU: DecodeOptions.strips)."""
    for x0, x1 in spans(width, tile):
        yield Tile(0, height, x0, x1)


@dataclass(frozen=True)
class Chunk:
    """A run of frames: the core ``[t0, t1)`` a chunk produces and the crop ``[c0, c1)`` it reads (the
    core grown by the stage's reach in time), in stage-input frames."""

    t0: int
    t1: int
    c0: int
    c1: int

    @property
    def crop_frames(self) -> int:
        return self.c1 - self.c0

    def output(self, time_up: bool) -> tuple[int, int, int]:
        """The core's output frames ``[o0, o1)`` and the index of ``o0`` in the crop's output.

        A time upsample (HunyuanVideo's Upsample, LTXV's depth-to-space) turns frame 0 into one frame
        and every later frame ``i`` into ``2i - 1, 2i``; a crop starting at ``c0`` treats its first frame
        as frame 0, so its output ``j`` is the clip's ``2 c0 + j`` either way.
        """
        if not time_up:
            return self.t0, self.t1, self.t0 - self.c0
        o0 = 0 if self.t0 == 0 else 2 * self.t0 - 1
        return o0, 2 * self.t1 - 1, o0 - 2 * self.c0


def chunks(frames: int, chunk: int, reach: tuple[int, int]) -> list[Chunk]:
    """``frames`` split into near-equal chunks of at most ``chunk``, each crop grown by ``reach`` =
    (frames before, frames after) and clipped to the clip."""
    before, after = reach
    return [Chunk(a, b, max(0, a - before), min(frames, b + after)) for a, b in spans(frames, chunk)]


def time_reach(module: nn.Module) -> tuple[int, int]:
    """Frames a stride-1 convolution reads (before, after) each output frame; (0, 0) for 2D ones.

    Knows plain Conv3d (symmetric padding) and the host's VideoConv3d, which pads by hand with a 6-tuple
    whose last two entries are the frames added before and after (causal: ``k - 1, 0``).
    """
    conv = module.conv if isinstance(getattr(module, "conv", None), nn.Conv3d) else module
    if not isinstance(conv, nn.Conv3d):
        return (0, 0)
    span = conv.dilation[0] * (conv.kernel_size[0] - 1)
    if conv.stride[0] != 1:
        raise Unsupported(f"{type(module).__name__} is strided in time")
    if is_carried(module):
        return (span, 0)
    manual = getattr(module, "padding", None) if module is not conv else None
    if isinstance(manual, tuple) and len(manual) == 6:
        reach = (manual[4], manual[5])
    elif module is conv or manual == 0:
        pad = conv.padding[0] if isinstance(conv.padding, tuple) else -1
        reach = (pad, pad) if span else (0, 0)
    else:
        raise Unsupported(f"{type(module).__name__} pads time in an unknown way")
    if sum(reach) != span:
        raise Unsupported(f"{type(module).__name__} is not a 'same' convolution in time")
    return reach


def add_reach(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return (a[0] + b[0], a[1] + b[1])


def max_reach(*reaches: tuple[int, int]) -> tuple[int, int]:
    return (max(r[0] for r in reaches), max(r[1] for r in reaches))


# torch's CPU float32 convolution uses oneDNN when N*C*D*H of its input (N*C*H*W in 2D) exceeds this,
# else its native kernel (ConvParams::use_mkldnn); the two round differently, while oneDNN's result does
# not depend on the input's extent. A crop therefore matches the full decode when both are above it.
CPU_NATIVE_CONV_MAX = 20480


def min_crop_frames(channels: int, rows: int, frames: int) -> int:
    """The fewest frames a crop ``rows`` high may have on the CPU and still take the full decode's
    convolution kernel (``channels``: the fewest any of its convolutions reads); ``frames`` (no time
    split) when the full decode itself takes the native kernel."""
    per_frame = max(1, channels * rows)
    if per_frame * frames <= CPU_NATIVE_CONV_MAX:
        return frames
    return min(frames, CPU_NATIVE_CONV_MAX // per_frame + 1)


def tiles_of(height: int, width: int, tile: int, strips: bool) -> list[Tile]:
    return list(columns(height, width, tile) if strips else grid(height, width, tile))


def crop_area(tile: int, halo: int, height: int, width: int, strips: bool) -> int:
    """Pixels of the largest crop (core plus halo, clipped to the image) of this layout."""
    side = tile + 2 * halo
    return (height if strips else min(side, height)) * min(side, width)


def conv_radius(module: nn.Module) -> int:
    """How many pixels a stride-1 "same" convolution reaches on each side in the last two dims.

    Accepts plain Conv2d/Conv3d and the host's wrappers that pad by hand: a module holding the conv in
    ``.conv`` with a 6-tuple ``.padding`` (F.pad order), or a conv with a private ``._padding`` (causal).
    """
    conv = module.conv if isinstance(getattr(module, "conv", None), nn.Conv3d) else module
    if not isinstance(conv, (nn.Conv2d, nn.Conv3d)):
        raise Unsupported(f"not a convolution: {type(module).__name__}")
    kernel, dilation, stride = conv.kernel_size[-2:], conv.dilation[-2:], conv.stride[-2:]
    if any(s != 1 for s in stride) or any(k % 2 == 0 for k in kernel):
        raise Unsupported(f"{type(module).__name__} is strided or has an even kernel")
    radius = [d * (k - 1) // 2 for k, d in zip(kernel, dilation, strict=True)]
    if is_carried(module):
        if any(p != 0 for p in conv.padding) or any(d != 1 for d in conv.dilation):
            raise Unsupported("CarriedConv3d that pads or dilates itself")
        return max(radius)
    manual = getattr(module, "_padding", None)
    if isinstance(manual, int):  # Wan on the 0.18 core: the frames only; the conv pads space itself
        manual = None
    if manual is None and module is not conv:
        # LTXV's CausalConv3d keeps no padding of its own: its conv pads in space itself
        wrapper = getattr(module, "padding", None)
        manual = wrapper if isinstance(wrapper, tuple) else None
    if manual is not None and any(manual):  # F.pad order: (w, w, h, h, ...)
        padding = [manual[2], manual[0]]
    else:
        padding = list(conv.padding[-2:]) if isinstance(conv.padding, tuple) else [-1, -1]
    if padding != radius and not (manual is not None and not any(manual) and radius == [0, 0]):
        raise Unsupported(f"{type(module).__name__} is not a 'same' convolution (padding {padding})")
    return max(radius)


def is_carried(module: nn.Module) -> bool:
    """The 0.18+ core's ``CarriedConv3d``: a bare Conv3d whose caller (``conv_carry_causal_3d``) pads its
    input, replicate, ``k // 2`` pixels in space and ``k - 1`` frames before (causal)."""
    return type(module).__name__ == "CarriedConv3d" and isinstance(getattr(module, "conv", None), nn.Conv3d)


def carried_conv(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module`` as a function of its unpadded input: a CarriedConv3d padded as the host's
    ``conv_carry_causal_3d`` pads it when nothing is carried in; any other module as it is."""
    if not is_carried(module):
        return module
    conv = module.conv
    assert isinstance(conv, nn.Conv3d)  # is_carried checked it
    kt, kh, kw = conv.kernel_size
    pad = (kw // 2, kw // 2, kh // 2, kh // 2, kt - 1, 0)

    def run(x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = module(F.pad(x, pad, mode="replicate") if any(pad) else x)
        return y

    return run


def upsampled_need(need: int, scale: int) -> int:
    """Pixels needed before a nearest ``scale``x upsample to provide ``need`` pixels after it."""
    return math.ceil(need / scale)
