"""Tile grids and receptive fields, read from the layers themselves (never a magic halo constant)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
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


def grid_size(height: int, width: int, tile: int) -> int:
    return len(spans(height, tile)) * len(spans(width, tile))


def columns(height: int, width: int, tile: int) -> Iterator[Tile]:
    """Full-height strips at most ``tile`` wide (how video is cut on a CPU: DecodeOptions.strips)."""
    for x0, x1 in spans(width, tile):
        yield Tile(0, height, x0, x1)


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
    manual = getattr(module, "_padding", None)
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


def upsampled_need(need: int, scale: int) -> int:
    """Pixels needed before a nearest ``scale``x upsample to provide ``need`` pixels after it."""
    return math.ceil(need / scale)


def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
