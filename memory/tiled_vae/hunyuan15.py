"""Exact tiled decode for HunyuanVideo 1.5's VAE (32 latent channels, 16x in space, 4x in time), as the
0.18+ core runs it (``comfy.ldm.hunyuan_video.vae_refiner.Decoder`` with ``refiner_vae``; duck-typed,
never imported).

Its up path has no GroupNorm: ``RMS_norm`` normalises each pixel over its channels, the convolutions
(``CarriedConv3d``) are 3x3x3, causal in time, and ``UpSmpl`` is a convolution then a pixel shuffle (2x2
in space, and 2x in time on the first two levels) plus a per-pixel channel-repeat shortcut. The host runs
that path on runs of 2 latent frames, each convolution carrying its last 2 input frames into the next
run (``conv_carry_causal_3d``), so time is causal and whole-clip. So, as for Wan:

* the head (``conv_in`` plus the channel-repeated latent, the mid block with its attention over the
  whole clip) runs whole, with the host's own modules;
* each spatial tile (a full-height strip on a CPU), grown by the receptive field read from its layers,
  runs through every run of 2 latent frames in order with the host's own carry protocol and its own
  ``conv_carry_causal_3d`` (found in the decoder's module), never reset: the frame count and every
  frame are the full decode's, and device memory holds one run of one tile;
* the tile is cropped back, no blending.

The 0.3.x decoder of the same name decodes the whole clip at once with ``VideoConv3d`` (no carry): the
same maths, but a tile would hold every frame; it is left to the host, as is the ``refiner_vae=False``
variant (GroupNorm across the clip with the pixel-shuffle up path).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from .layout import TileLayout, run_with_oom_retry
from .runtime import MIN_TILE, DecodeOptions, DecodeReport, Progress, tile_for_budget
from .tiles import Unsupported, conv_radius, crop_area, is_carried, tiles_of

RUN_FRAMES = 2  # latent frames per run of the host's up path (``torch.split(x, 2, dim=2)``)
# Peak live activation values per output pixel of a tile's crop per output frame of a run (8 frames
# per run after the first), per channel of the last level (128 in the real decoder): at the last level
# its input, norm, padded copy, convolution output and residual sum, and at the upsample into it the
# convolution output, the repeated shortcut and their pixel-shuffled copies, about 6-7 values per
# channel; the carried frames and a margin on top. tests/host/test_tiled_vae_hunyuan15.py measures the
# host's decoder with measure.PeakLiveBytes against it.
VALUES_PER_CHANNEL = 9.0
# Head (conv_in + mid block): values per latent voxel per mid channel besides attention (as kl.py's).
HEAD_FACTOR = 10.5


def _name(module: object) -> str:
    return type(module).__name__


def _carry_function(decoder: Any) -> Callable[..., torch.Tensor]:
    """The host's ``conv_carry_causal_3d``, from the module that defines the decoder (which imports it)."""
    module = sys.modules.get(type(decoder).__module__)
    run = getattr(module, "conv_carry_causal_3d", None)
    if not callable(run):
        raise Unsupported(
            "HunyuanVideo 1.5's decoder without a causal carry (the 0.3.x core decodes the whole clip at "
            "once: a tile would hold every frame); ComfyUI decodes it"
        )
    return cast(Callable[..., torch.Tensor], run)


def check_decoder(model: nn.Module) -> Any:
    """The model's HunyuanVideo 1.5 decoder (the host's module, duck-typed: hence Any), or Unsupported
    saying why this engine cannot tile it."""
    decoder = getattr(model, "decoder", None)
    if decoder is None or _name(decoder) != "Decoder" or not hasattr(decoder, "block_out_channels"):
        raise Unsupported("not HunyuanVideo 1.5's decoder")
    for name in ("conv_in", "mid", "up", "norm_out", "conv_out", "z_channels"):
        if not hasattr(decoder, name):
            raise Unsupported(f"decoder has no {name}")
    if not getattr(decoder, "refiner_vae", False):
        raise Unsupported(
            "HunyuanVideo 1.5-style decoder with GroupNorm across the clip (refiner_vae off): its "
            "pixel-shuffle up path is not taught to the GroupNorm engine; ComfyUI decodes it"
        )
    _carry_function(decoder)
    convs = [decoder.conv_in, decoder.conv_out]
    norms = [decoder.norm_out]
    for stage in decoder.up:
        for block in stage.block:
            if any(hasattr(block, n) for n in ("temb_proj", "time_stack")) or not hasattr(block, "conv2"):
                raise Unsupported(f"{_name(block)} is not a plain ResnetBlock")
            convs += [block.conv1, block.conv2]
            norms += [block.norm1, block.norm2]
        upsample = getattr(stage, "upsample", None)
        if upsample is not None:
            if _name(upsample) != "UpSmpl":
                raise Unsupported(f"up path upsamples with {_name(upsample)}")
            convs.append(upsample.conv)
    if not all(is_carried(c) for c in convs):
        raise Unsupported("a convolution of the up path is not a CarriedConv3d")
    if any(_name(n) != "RMS_norm" for n in norms):
        raise Unsupported("a norm of the up path is not the per-pixel RMS_norm")
    return decoder


def receptive_halo(decoder: Any) -> int:
    """Latent pixels a tile's crop must reach beyond its core for its core to be exact: from conv_out
    back through every level (a pixel shuffle halves what the level before must supply)."""
    need = conv_radius(decoder.conv_out)
    for stage in reversed(list(decoder.up)):
        upsample = getattr(stage, "upsample", None)
        if upsample is not None:
            need = math.ceil(need / 2) + conv_radius(upsample.conv)
        for block in reversed(list(stage.block)):
            short = (
                getattr(block, "conv_shortcut", None) if getattr(block, "use_conv_shortcut", False) else None
            )
            main = conv_radius(block.conv1) + conv_radius(block.conv2)
            need += max(main, conv_radius(short) if short is not None else 0)
    return need


class Hunyuan15TiledDecoder:
    """Decode ``[B, 32, T, H, W]`` HunyuanVideo 1.5 latents: whole head, tiles carried run by run."""

    family = "hunyuan_video15"

    def __init__(self, model: nn.Module, options: DecodeOptions) -> None:
        self.model, self.options = model, options
        self.decoder = check_decoder(model)
        self.carry = _carry_function(self.decoder)
        self.halo = receptive_halo(self.decoder)
        ups = [s.upsample for s in self.decoder.up if getattr(s, "upsample", None) is not None]
        self.scale = 1 << len(ups)
        self.time_ups = sum(bool(getattr(u, "tus", False)) for u in ups)
        self.mid_channels = self.decoder.block_out_channels[0]
        self.values_per_px = VALUES_PER_CHANNEL * self.decoder.block_out_channels[-1]
        self.strips = options.strips(video=True)
        self.batched = self.strips  # on the CPU a tile holds every clip, as the host's decode does

    # -- sizing -----------------------------------------------------------------------------------
    def _run_frames_out(self, frames: int) -> int:
        """Output frames of the longest run (all of a clip shorter than one run)."""
        return (1 << self.time_ups) * min(frames, RUN_FRAMES)

    def tile_bytes(
        self, tile: int, dtype_bytes: int, latent_hw: tuple[int, int], frames: int, clips: int = 1
    ) -> int:
        """Activation bytes of one run of a tile with a ``tile`` latent px core (its crop clipped to the
        image) over ``clips`` clips at once. Independent of the clip's length."""
        area = crop_area(tile, self.halo, latent_hw[0], latent_hw[1], self.strips)
        per_run = self._run_frames_out(frames)
        return int(self.values_per_px * area * self.scale**2 * per_run * dtype_bytes * clips)

    def _clips(self, latent_shape: tuple[int, ...]) -> int:
        return latent_shape[0] if self.batched else 1

    def head_bytes(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        """The head on the whole batch (the attention is the host's: SDPA holds no scores)."""
        voxels = latent_shape[0] * math.prod(latent_shape[2:])
        return int(HEAD_FACTOR * self.mid_channels * voxels * dtype_bytes)

    def latent_tile(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        hw = (latent_shape[-2], latent_shape[-1])
        size = hw[1] if self.strips else max(hw)
        if self.options.tile is not None:
            return min(size, max(MIN_TILE, self.options.tile // self.scale))
        if self.options.budget_bytes is None:
            return size
        per_px = (
            self.values_per_px
            * self.scale**2
            * self._run_frames_out(latent_shape[2])
            * dtype_bytes
            * self._clips(latent_shape)
        )
        return tile_for_budget(
            per_px, self.halo, self.options.budget_bytes, size, hw[0] if self.strips else None
        )

    def _peak(self, latent_shape: tuple[int, ...], dtype_bytes: int, tile: int) -> int:
        hw = (latent_shape[-2], latent_shape[-1])
        tiles = self.tile_bytes(tile, dtype_bytes, hw, latent_shape[2], self._clips(latent_shape))
        return max(tiles, self.head_bytes(latent_shape, dtype_bytes))

    def predicted_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        return self._peak(latent_shape, dtype_bytes, self.latent_tile(latent_shape, dtype_bytes))

    def minimum_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        return self._peak(latent_shape, dtype_bytes, min(MIN_TILE, max(latent_shape[-2:])))

    # -- running ----------------------------------------------------------------------------------
    def decode(self, latent: torch.Tensor) -> tuple[torch.Tensor, DecodeReport]:
        """The decoder output (before the host's process_output), float32 on the park device."""
        opts = self.options
        report = DecodeReport(self.family)
        dtype_bytes = torch.empty((), dtype=opts.dtype).element_size()
        shape = tuple(latent.shape)
        batch, _, frames, height, width = shape
        tile = self.latent_tile(shape, dtype_bytes)
        groups = [slice(None)] if self.batched else [slice(b, b + 1) for b in range(batch)]
        runs = math.ceil(frames / RUN_FRAMES)
        count = len(tiles_of(height, width, tile, self.strips))
        progress = Progress(1 + len(groups) * runs * count, opts.progress)
        report.predicted_peak_bytes = self.predicted_peak(shape, dtype_bytes)
        with torch.no_grad():
            head = self._head(latent.to(opts.device, opts.dtype)).to(opts.park_device)
            progress.step()
            out: dict[str, torch.Tensor] = {}
            for b, clips in enumerate(groups):
                state: dict[str, int] = {}

                def attempt(layout: TileLayout, clips: slice = clips, state: dict[str, int] = state) -> None:
                    state["tiles"] = self._tiles(head[clips], clips, layout.tile, out, batch, progress)

                used = run_with_oom_retry(attempt, TileLayout(tile), opts, report)
                report.stages.append((f"up[{b}]", used.tile, state["tiles"]))
        return out["image"], report

    def _head(self, z: torch.Tensor) -> torch.Tensor:
        """conv_in plus the channel-repeated latent, then the mid block: the host's forward, whole."""
        dec, check = self.decoder, self.options.check_interrupt or (lambda: None)
        x = self.carry([z], dec.conv_in) + z.repeat_interleave(dec.block_out_channels[0] // dec.z_channels, 1)
        check()
        x = dec.mid.block_1(x)
        check()
        x = dec.mid.attn_1(x)
        check()
        out: torch.Tensor = dec.mid.block_2(x)
        return out

    def _tiles(
        self,
        head: torch.Tensor,
        clips: slice,
        tile: int,
        out: dict[str, torch.Tensor],
        batch: int,
        progress: Progress,
    ) -> int:
        opts, dec, s = self.options, self.decoder, self.scale
        frames, height, width = head.shape[2:]
        runs = [(a, min(frames, a + RUN_FRAMES)) for a in range(0, frames, RUN_FRAMES)]
        tiles = tiles_of(height, width, tile, self.strips)
        for t in tiles:
            c = t.crop(self.halo, height, width)
            carry_in: list[Any] | None = None
            frame = 0
            for i, (a, b) in enumerate(runs):
                if opts.check_interrupt is not None:
                    opts.check_interrupt()
                carry_out: list[Any] | None = None if i == len(runs) - 1 else []
                x = head[:, :, a:b, c.y0 : c.y1, c.x0 : c.x1].to(opts.device)
                for stage in dec.up:  # the host's loop (Decoder.forward), on the crop
                    for block in stage.block:
                        x = block(x, None, carry_in, carry_out)
                    if hasattr(stage, "upsample"):
                        x = stage.upsample(x, carry_in, carry_out)
                x = self.carry([F.silu(dec.norm_out(x))], dec.conv_out, carry_in, carry_out)
                core = x[..., (t.y0 - c.y0) * s : (t.y1 - c.y0) * s, (t.x0 - c.x0) * s : (t.x1 - c.x0) * s]
                n = core.shape[2]
                if "image" not in out:
                    total = 1 + (2**self.time_ups) * (frames - 1)
                    out["image"] = torch.empty(
                        batch, core.shape[1], total, height * s, width * s, dtype=torch.float32
                    )
                out["image"][clips, :, frame : frame + n, t.y0 * s : t.y1 * s, t.x0 * s : t.x1 * s] = (
                    core.float().to(opts.park_device)
                )
                frame += n
                carry_in = carry_out
                del x, core
                progress.step()
        return len(tiles)
