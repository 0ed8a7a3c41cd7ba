"""Exact tiled decode for the Wan causal video VAEs (2.1 and 2.2).

Wan's decoder (``decoder.conv1``, ``middle``, ``upsamples``, ``head``; duck-typed, never imported) has no
GroupNorm: its RMS_norm is per pixel and its only attention is per frame in the middle block. So:

* the head (``conv2``, ``conv1`` and the middle block) runs on whole frames at latent resolution, one
  latent frame at a time with its own causal cache, exactly as the host does, and its outputs are parked;
* the rest (upsamples and output head) is purely local in space: each spatial tile, grown by the
  receptive field computed from its layers, runs through *all* latent frames in order with one causal
  cache of its own that is never reset, so time is exact and the frame count is the full decode's;
* the tile is cropped back, no blending. In float32 on the CPU the result is the host's own decode up
  to the convolution kernel's rounding for another tile shape (bitwise on AVX2, checked for Wan 2.1
  and Wan 2.2; see the package docstring).

On a CPU the tiles are full-height strips (``DecodeOptions.strips``). Wan's 2D resample convolutions
take oneDNN or torch's native kernel by N*C*H*W, which a narrow crop could push below the threshold
the full frame is above: with the real decoders' widths (>= 96 channels) and a crop of at least
MIN_TILE/2 + halo latent px it never does.

Wan 2.2's decoder differs only in its up blocks (``Up_ResidualBlock``: residual blocks plus a
``DupUp3D`` shortcut, a per-pixel repeat, which is told which chunk is the first) and in a 2x2
unpatchify after the decoder, a per-pixel rearrangement done here on each tile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol, cast

import torch
from einops import rearrange
from torch import nn

from .layout import TileLayout, run_with_oom_retry
from .runtime import MIN_TILE, DecodeOptions, DecodeReport, Progress, tile_for_budget
from .tiles import Unsupported, conv_radius, crop_area, tiles_of

CACHE_T = 2  # frames a causal 3x3x3 convolution keeps from the previous chunk (the host's CACHE_T)
# Peak live activation values per output pixel of a tile (halo included), the causal cache and the four
# frames one latent frame becomes included: measured with measure.PeakLiveBytes on the host's Wan 2.1
# decoder (bench/tiled_vae.py), plus a margin. Wan 2.2's decoder is wider (256 vs 96 base channels) at
# half the resolution before its 2x2 unpatchify; per output pixel it measured about the same (4380 at
# 3 latent frames of 6x6, the host's full-size Wan 2.2 decoder).
WAN_VALUES_PER_PX = {"wan21": 4300.0, "wan22": 4700.0}
HEAD_BYTES_PER_PX = 24.0  # per latent pixel x middle channels (head: conv1 + middle with attention)


class _ResidualBlock(Protocol):
    residual: Iterable[nn.Module]
    shortcut: nn.Module


class _Resample(Protocol):
    mode: str
    time_conv: nn.Module
    resample: Sequence[nn.Module]


class _DupUp(Protocol):
    factor_s: int


class _UpResidual(Protocol):  # Wan 2.2's Up_ResidualBlock
    upsamples: Iterable[nn.Module]
    avg_shortcut: _DupUp | None


Cache = list["torch.Tensor | None"]  # the host decoder's causal cache: one entry per cached convolution


def _name(module: object) -> str:
    return type(module).__name__


def _need(module: nn.Module, after: int) -> int:
    """Pixels needed at ``module``'s input to compute ``after`` exact pixels beyond a tile's core."""
    kind = _name(module)
    if kind == "ResidualBlock":
        block = cast(_ResidualBlock, module)
        convs = [m for m in block.residual if _name(m) == "CausalConv3d"]
        reach = sum(conv_radius(c) for c in convs)
        short = conv_radius(block.shortcut) if _name(block.shortcut) == "CausalConv3d" else 0
        return after + max(reach, short)
    if kind == "Resample":
        resample = cast(_Resample, module)
        if resample.mode not in ("upsample2d", "upsample3d"):
            raise Unsupported(f"Resample mode {resample.mode}")
        if resample.mode == "upsample3d" and conv_radius(resample.time_conv) != 0:
            raise Unsupported("time_conv reaches in space")
        return math.ceil((after + conv_radius(resample.resample[1])) / 2)
    if kind == "Up_ResidualBlock":
        up = cast(_UpResidual, module)
        main = after
        for layer in reversed(list(up.upsamples)):
            main = _need(layer, main)
        dup = up.avg_shortcut
        return max(main, math.ceil(after / dup.factor_s)) if dup is not None else main
    if kind == "CausalConv3d":
        return after + conv_radius(module)
    if kind in ("RMS_norm", "SiLU", "Dropout", "Identity"):
        return after
    raise Unsupported(f"{kind} in the Wan decoder's tiled part")


def _scale(module: nn.Module) -> int:
    kind = _name(module)
    if kind == "Resample":
        return 2
    if kind == "Up_ResidualBlock":
        return math.prod(_scale(m) for m in cast(_UpResidual, module).upsamples)
    return 1


def _time_upsamples(upsamples: nn.Module) -> int:
    modes = [cast(_Resample, m).mode for m in upsamples.modules() if _name(m) == "Resample"]
    return sum(mode == "upsample3d" for mode in modes)


def host_chunks(frames: int, paired: bool) -> list[tuple[int, int]]:
    """The latent frames the host's decode() runs at a time: one by one, or (the 0.18 core's Wan 2.1
    decoder, which has ``run_up``) the first alone and then pairs. Its caches keep only the last chunk's
    frames, so the engine must feed the same chunks to be exact (and takes the same kernels)."""
    if not paired:
        return [(i, i + 1) for i in range(frames)]
    return [(0, 1)] + [(a, min(frames, a + 2)) for a in range(1, frames, 2)]


def _causal(layer: nn.Module, x: torch.Tensor, cache: Cache, idx: list[int]) -> torch.Tensor:
    """One cached causal convolution, with the host decoder's cache protocol (conv1 and head)."""
    i = idx[0]
    keep = x[:, :, -CACHE_T:].clone()
    prev = cache[i]
    if keep.shape[2] < 2 and prev is not None:
        keep = torch.cat([prev[:, :, -1:].to(keep.device), keep], dim=2)
    y: torch.Tensor = layer(x, cache[i])
    cache[i] = keep
    idx[0] += 1
    return y


class WanTiledDecoder:
    """Decode ``[B, 16|48, T, H, W]`` Wan latents: whole-frame head, spatial tiles with their own cache."""

    family = "wan"

    def __init__(self, model: nn.Module, options: DecodeOptions) -> None:
        decoder = getattr(model, "decoder", None)
        if decoder is None or not all(hasattr(decoder, n) for n in ("conv1", "middle", "upsamples", "head")):
            raise Unsupported("not a Wan decoder")
        if not hasattr(model, "conv2") or _name(decoder) != "Decoder3d":
            raise Unsupported("not a Wan VAE")
        kinds = {_name(m) for m in decoder.upsamples}
        if kinds <= {"ResidualBlock", "Resample"}:
            self.family, self.patch = "wan21", 1
        elif kinds == {"Up_ResidualBlock"}:
            self.family, self.patch = "wan22", 2  # the host unpatchifies 2x2 after the decoder
        else:
            raise Unsupported(f"Wan decoder with {sorted(kinds)}")
        self.model, self.decoder, self.options = model, decoder, options
        conv2 = model.conv2
        if not isinstance(conv2, nn.Module):
            raise Unsupported("the Wan VAE's conv2 is not a layer")
        self.conv2 = conv2
        tail = [*decoder.upsamples, *decoder.head]
        need = 0
        for layer in reversed(tail):
            need = _need(layer, need)
        self.halo = need  # latent pixels
        self.scale = math.prod(_scale(m) for m in decoder.upsamples) * self.patch
        self.time_factor = 2 ** _time_upsamples(decoder.upsamples)
        self.cached_convs = sum(_name(m) == "CausalConv3d" for m in decoder.modules())
        self.mid_channels = decoder.conv1.out_channels
        self.strips = options.strips(video=True)
        # On the CPU a tile holds every clip of the batch, as the host's CPU decode does: a one-clip
        # convolution can fall under torch's oneDNN size line (tiles.CPU_NATIVE_CONV_MAX) where the
        # host's batch of clips does not, and the two kernels round differently.
        self.batched = self.strips
        self.paired = callable(getattr(decoder, "run_up", None))

    # -- sizing -----------------------------------------------------------------------------------
    def tile_bytes(
        self, tile: int, dtype_bytes: int, latent_hw: tuple[int, int] | None = None, clips: int = 1
    ) -> int:
        """Activation bytes of a tile with a ``tile`` latent px core (its crop clipped to the image) over
        ``clips`` clips at once."""
        height, width = latent_hw or (tile + 2 * self.halo,) * 2
        area = crop_area(tile, self.halo, height, width, self.strips)
        return int(WAN_VALUES_PER_PX[self.family] * area * self.scale**2 * dtype_bytes * clips)

    def _clips(self, latent_shape: tuple[int, ...]) -> int:
        """Clips a tile holds: the whole batch on the CPU, else one."""
        return latent_shape[0] if self.batched else 1

    def head_bytes(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        pixels = latent_shape[0] * latent_shape[-2] * latent_shape[-1]
        return int(HEAD_BYTES_PER_PX * self.mid_channels * pixels * dtype_bytes)

    def latent_tile(self, latent_hw: tuple[int, int], dtype_bytes: int, clips: int = 1) -> int:
        size = latent_hw[1] if self.strips else max(latent_hw)
        if self.options.tile is not None:
            return min(size, max(MIN_TILE, self.options.tile // self.scale))
        if self.options.budget_bytes is None:
            return size
        per_px = WAN_VALUES_PER_PX[self.family] * self.scale**2 * dtype_bytes * clips
        rows = latent_hw[0] if self.strips else None
        return tile_for_budget(per_px, self.halo, self.options.budget_bytes, size, rows)

    def predicted_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        hw, clips = (latent_shape[-2], latent_shape[-1]), self._clips(latent_shape)
        tile = self.latent_tile(hw, dtype_bytes, clips)
        return max(self.tile_bytes(tile, dtype_bytes, hw, clips), self.head_bytes(latent_shape, dtype_bytes))

    def minimum_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        hw, clips = (latent_shape[-2], latent_shape[-1]), self._clips(latent_shape)
        tile = min(MIN_TILE, max(hw))
        return max(self.tile_bytes(tile, dtype_bytes, hw, clips), self.head_bytes(latent_shape, dtype_bytes))

    # -- running ----------------------------------------------------------------------------------
    def decode(self, latent: torch.Tensor) -> tuple[torch.Tensor, DecodeReport]:
        """The decoder output (before the host's process_output), float32 on the park device."""
        opts = self.options
        report = DecodeReport(self.family)
        dtype_bytes = torch.empty((), dtype=opts.dtype).element_size()
        batch, _, frames, height, width = latent.shape
        clips = self._clips(tuple(latent.shape))
        tile = self.latent_tile((height, width), dtype_bytes, clips)
        groups = [slice(None)] if self.batched else [slice(b, b + 1) for b in range(batch)]
        steps = len(host_chunks(frames, self.paired))
        progress = Progress(steps + len(groups) * steps * self._count(height, width, tile), opts.progress)
        report.predicted_peak_bytes = self.predicted_peak(tuple(latent.shape), dtype_bytes)
        with torch.no_grad():
            parked = self._head(latent, progress)
            out_frames = 1 + self.time_factor * (frames - 1)
            out = torch.empty(
                batch, 3, out_frames, height * self.scale, width * self.scale, dtype=torch.float32
            )
            state: dict[str, int] = {}
            for b, group in enumerate(groups):

                def attempt(layout: TileLayout, group: slice = group) -> None:
                    state["tiles"] = self._tiles(parked, group, layout.tile, out, progress)

                used = run_with_oom_retry(attempt, TileLayout(tile), opts, report)
                report.stages.append((f"tail[{b}]", used.tile, state["tiles"]))
        return out, report

    def _count(self, height: int, width: int, tile: int) -> int:
        return len(tiles_of(height, width, tile, self.strips))

    def _head(self, latent: torch.Tensor, progress: Progress) -> list[torch.Tensor]:
        """conv2, conv1 and the middle block on whole frames, in the host's chunks of frames (batched)."""
        opts, dec = self.options, self.decoder
        x = self.conv2(latent.to(opts.device, opts.dtype))
        cache: Cache = [None] * self.cached_convs
        parked = []
        for a, b in host_chunks(x.shape[2], self.paired):
            idx = [0]
            h = _causal(dec.conv1, x[:, :, a:b], cache, idx)
            for layer in dec.middle:
                h = layer(h, cache, idx) if _name(layer) == "ResidualBlock" else layer(h)
            parked.append(h.to(opts.park_device))
            progress.step()
        return parked

    def _tiles(
        self, parked: list[torch.Tensor], clips: slice, tile: int, out: torch.Tensor, progress: Progress
    ) -> int:
        opts, dec = self.options, self.decoder
        height, width = parked[0].shape[-2:]
        s, count = self.scale, 0
        for t in tiles_of(height, width, tile, self.strips):
            c = t.crop(self.halo, height, width)
            cache: Cache = [None] * self.cached_convs
            frame = 0
            for i, h in enumerate(parked):
                if opts.check_interrupt is not None:
                    opts.check_interrupt()
                x = h[clips, :, :, c.y0 : c.y1, c.x0 : c.x1].to(opts.device)
                idx = [0]
                if self.paired:  # the host's own recursion: it cuts each chunk after a time upsample
                    pieces: list[torch.Tensor] = []
                    dec.run_up(0, [x], cache, idx, pieces)
                    x = torch.cat(pieces, 2)
                    del pieces
                else:
                    for layer in dec.upsamples:
                        if self.family == "wan22":
                            x = layer(x, cache, idx, first_chunk=i == 0)
                        else:
                            x = layer(x, cache, idx)
                    for layer in dec.head:
                        x = _causal(layer, x, cache, idx) if _name(layer) == "CausalConv3d" else layer(x)
                if self.patch > 1:  # the host's unpatchify: a per-pixel rearrangement
                    x = rearrange(x, "b (c r q) f h w -> b c f (h q) (w r)", q=self.patch, r=self.patch)
                core = x[..., (t.y0 - c.y0) * s : (t.y1 - c.y0) * s, (t.x0 - c.x0) * s : (t.x1 - c.x0) * s]
                n = core.shape[2]
                out[clips, :, frame : frame + n, t.y0 * s : t.y1 * s, t.x0 * s : t.x1 * s] = (
                    core.float().cpu()
                )
                frame += n
                del x, core
                progress.step()
            count += 1
        return count
