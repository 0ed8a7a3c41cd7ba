"""Exact tiled decode for the KL (GroupNorm) VAEs: SD1.x/SD2, SDXL, SD3 and Flux (4/16 channels), and
HunyuanVideo's 3D-convolution KL VAE (its GroupNorms span the whole clip: same scheme, time upsampled
inside the stages as the host does, and stages cut into runs of frames when the budget needs it, each
run reading the frames its causal convolutions reach: see ``tiles.Chunk``). The 0.18+ core (Kandinsky 5
too) normalises each run of 2 latent frames on its own: so do we there (``KLTiledDecoder.segments``).

The decoder (``decoder.conv_in``, ``mid.block_1/attn_1/block_2``, ``up[i].block[j]``, ``up[i].upsample``,
``norm_out``, ``conv_out``; duck-typed, never imported; read by ``kl_stages``) is cut into stages at
its GroupNorm layers:

* the head (``post_quant_conv``, ``conv_in`` and the mid block with its attention) runs once, whole, at
  latent resolution, where it is cheap;
* every later stage starts with a GroupNorm whose input is a whole activation "parked" on the park
  device, and ends where the next GroupNorm's input is complete. It runs tile by tile on the compute
  device, each tile grown by the stage's own receptive field (a few pixels, from its convolutions and
  upsample factor) and cropped back - no blending - into the next park;
* each GroupNorm uses the statistics of its whole input (see ``groupnorm``), so a tile sees exactly
  what the full decode would. In float32 on the CPU the result is the full decode's up to the
  convolution kernel's rounding for another tile shape: bitwise on AVX2, within 1e-5 where oneDNN
  blocks a tile otherwise (AVX-512: 2e-6 measured). See the package docstring.

The host's own layers (its convolutions, activations, upsample) run every operation except the
GroupNorm itself, so the arithmetic is the host's.
"""

from __future__ import annotations

from collections.abc import Callable
from types import EllipsisType

import torch
from torch import nn

from .groupnorm import GroupStats, Segments, StatsMerger, addcmul_is_fma, apply_group_norm, segment_stats
from .head import SCORE_COPIES, holds_no_scores, slice_count, slice_rows, sliceable, sliced_attention
from .kl_stages import Stage, build_stages, check_decoder
from .layout import StageGeometry, TileLayout, run_with_oom_retry
from .parks import ParkAllocator, live_bytes
from .runtime import DecodeOptions, DecodeReport, Progress
from .tiles import Chunk, carried_conv, chunks, min_crop_frames, tiles_of

# The stage estimate counts the tensors alive at a tile's peak (see Stage.work_channels); measured with
# measure.PeakLiveBytes on the host's SD decoder it is exact to the channel, so the margin is small.
WORK_FACTOR = 1.05
# Head (conv_in + mid block): measured 10.0 values per latent pixel per mid channel besides attention,
# whose (pixels x pixels) scores are computed a slice of query rows at a time (head.py).
HEAD_FACTOR = 10.5
# An attention block of unknown make runs whole: the host's split attention cuts its scores into up to
# 128 slices fitted to the memory free, and SDPA holds none, so it needs at least 1/128 of them.
ATTENTION_MAX_SLICES = 128
# Latent frames per run of the 0.18+ core's carried HunyuanVideo up path (``torch.split(h, 2, dim=2)``).
CARRIED_FRAMES = 2


def estimate_stage(
    stage: Stage,
    tile: int,
    dtype_bytes: int,
    exact: bool,
    frames: int = 1,
    rows: int | None = None,
    device_type: str = "cpu",
) -> int:
    """Peak activation bytes of one tile of ``stage`` (``tile`` stage-input pixels a side, or a strip
    ``tile`` wide and ``rows`` high), over ``frames`` input frames (video: the frames of the crop).

    Live at the peak: the input crops (on a CUDA device they are copies; on the CPU views of the parked
    activations, so this over-counts there), the body's work (``Stage.work_channels``) and, for video,
    the padded copy a 3D convolution makes of its input. The exact GroupNorm adds a few float64 channels
    where it is emulated (not float32 with a fused ``addcmul`` on ``device_type``: groupnorm.py).
    """
    side = tile + 2 * stage.halo
    height = rows if rows else side
    area = height * side * frames
    per_px = sum(stage.in_channels) + stage.work_channels
    padded = stage.pad_channels * (frames + 2) * (height + 2) * (side + 2)
    emulated = exact and not (dtype_bytes == 4 and addcmul_is_fma(device_type))
    extra = 16 * 3 * 8 * area if emulated else 0
    return int((WORK_FACTOR * per_px * area + padded) * dtype_bytes + extra)


def estimate_head(
    latent_hw: tuple[int, int],
    channels: int,
    dtype_bytes: int,
    frames: int = 1,
    score_cap: int | None = None,
    sliced: bool = True,
) -> int:
    """Peak activation bytes of the head (conv_in + mid block) on one latent at latent resolution. Its
    attention spans every pixel of every frame. ``sliced``: its scores a slice of query rows at a time
    (head.slice_rows), within what ``score_cap`` leaves beside the rest of the head (0: the least
    slice). Else whole, or with ``score_cap`` as the host slices them (at least 1/ATTENTION_MAX_SLICES)."""
    pixels = latent_hw[0] * latent_hw[1] * frames
    linear = int(HEAD_FACTOR * channels * pixels * dtype_bytes)
    if sliced:
        rows = slice_rows(pixels, 1, dtype_bytes, None if score_cap is None else score_cap - linear)
        return linear + SCORE_COPIES * rows * pixels * dtype_bytes
    scores = pixels * pixels * dtype_bytes
    if score_cap is not None:
        scores = min(scores, max(scores // ATTENTION_MAX_SLICES, score_cap - linear))
    return linear + scores


class KLTiledDecoder:
    """Decode ``[B, C, H, W]`` (or ``[B, C, T, H, W]`` for 3D-conv KL decoders) latents tile by tile."""

    family = "kl"

    def __init__(self, model: nn.Module, options: DecodeOptions) -> None:
        self.model = model
        self.decoder = check_decoder(model)
        self.options = options
        self.stages = build_stages(self.decoder, options.act)
        # The 0.18+ core: the up path on runs of latent frames, causal frames carried, GroupNorm per run.
        self.carried = bool(getattr(self.decoder, "carried", False))
        self.strips = options.strips(video=not isinstance(self.decoder.conv_in, nn.Conv2d))
        # Video on the CPU: a tile holds every clip of the batch, as the host's CPU decode does (a
        # one-clip 3D convolution can fall under torch's oneDNN size line where the batch does not).
        self.batched = self.strips

    # -- sizing -----------------------------------------------------------------------------------
    def geometry(self, stage: Stage, latent_shape: tuple[int, ...]) -> StageGeometry:
        """``stage``'s input for a latent of ``latent_shape``, as its layout is chosen from."""
        height, width = latent_shape[-2] * 2**stage.level, latent_shape[-1] * 2**stage.level
        frames = stage.frames(latent_shape[2] if len(latent_shape) == 5 else 1)
        # On the CPU a video crop keeps enough frames to take the full decode's convolution kernel.
        min_frames = min_crop_frames(min(stage.in_channels), height, frames) if self.strips else 1
        return StageGeometry(height, width, frames, stage.halo, stage.time_halo, self.strips, min_frames)

    def _estimator(
        self, stage: Stage, geo: StageGeometry, dtype_bytes: int, clips: int
    ) -> Callable[[int, int], int]:
        def estimate(tile: int, crop_frames: int) -> int:
            return clips * estimate_stage(
                stage, tile, dtype_bytes, self.options.exact, crop_frames, geo.rows, self.options.device.type
            )

        return estimate

    def layouts(
        self, latent_shape: tuple[int, ...], dtype_bytes: int, smallest: bool = False
    ) -> list[tuple[StageGeometry, Callable[[int, int], int], TileLayout]]:
        """Per stage: its geometry, its estimate ``(tile, crop frames) -> bytes`` and its layout (the one
        chosen from the options, or the smallest possible)."""
        rows = []
        for stage in self.stages:
            geo = self.geometry(stage, latent_shape)
            estimate = self._estimator(stage, geo, dtype_bytes, latent_shape[0] if self.batched else 1)
            if smallest:
                layout = geo.smallest()
            else:
                forced = None
                if self.options.tile is not None:
                    forced = self.options.tile * 2**stage.level // 2 ** self.stages[-1].level
                layout = geo.choose(self.options, forced, estimate)
            rows.append((geo, estimate, layout))
        return rows

    def _head_score_cap(self, latent_shape: tuple[int, ...], smallest: bool = False) -> int | None:
        """Bytes the head of one latent may take, its attention scores included (0: the least)."""
        cap = 0 if smallest else self.options.budget_bytes
        return None if cap is None else cap // latent_shape[0]

    def _head_estimate(self, latent_shape: tuple[int, ...], dtype_bytes: int, smallest: bool = False) -> int:
        """The head on the whole batch: its attention scores in the slices the decode will run (the least
        slice for ``smallest``), none for fused kernels (SDPA, xformers), else as the host slices them."""
        frames = latent_shape[2] if len(latent_shape) == 5 else 1
        hw = (latent_shape[-2], latent_shape[-1])
        batch, pixels = latent_shape[0], hw[0] * hw[1] * frames
        channels = self.decoder.mid.block_1.in_channels
        block = self.decoder.mid.attn_1
        linear = batch * int(HEAD_FACTOR * channels * pixels * dtype_bytes)
        if sliceable(block):
            least = slice_rows(pixels, batch, dtype_bytes, 0)
            rows = least if smallest else self._head_rows(latent_shape, dtype_bytes)[0]
            return linear + SCORE_COPIES * batch * rows * pixels * dtype_bytes
        if holds_no_scores(block):
            return linear
        cap = self._head_score_cap(latent_shape, smallest)
        return batch * estimate_head(hw, channels, dtype_bytes, frames, cap, sliced=False)

    def head_bytes(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        """The least the head needs: it runs on the whole latent (its attention in the smallest slices)."""
        return self._head_estimate(latent_shape, dtype_bytes, smallest=True)

    def _head_rows(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> tuple[int, int]:
        """(query rows per attention slice, slices) for the head of the whole batch."""
        pixels = 1
        for side in latent_shape[2:]:
            pixels *= side
        cap = self._head_score_cap(latent_shape)
        if cap is not None:  # what the rest of the head leaves, for the whole batch
            linear = int(HEAD_FACTOR * self.decoder.mid.block_1.in_channels * pixels * dtype_bytes)
            cap = (cap - linear) * latent_shape[0]
        rows = slice_rows(pixels, latent_shape[0], dtype_bytes, cap)
        return rows, slice_count(pixels, rows)

    def predicted_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int, smallest: bool = False) -> int:
        """The largest activation estimate of the head and of any stage's tile."""
        tiles = [
            geo.peak(layout, est) for geo, est, layout in self.layouts(latent_shape, dtype_bytes, smallest)
        ]
        return max([self._head_estimate(latent_shape, dtype_bytes, smallest), *tiles])

    def minimum_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        """The activation bytes the smallest tiles and time chunks still need (below this no budget can
        work)."""
        return self.predicted_peak(latent_shape, dtype_bytes, smallest=True)

    # -- running ----------------------------------------------------------------------------------
    def decode(
        self, latent: torch.Tensor, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, DecodeReport]:
        """The decoder output (before the host's process_output), float32 on the park device."""
        opts = self.options
        report = DecodeReport(self.family)
        dtype_bytes = torch.empty((), dtype=opts.dtype).element_size()
        shape = tuple(latent.shape)
        layouts = self.layouts(shape, dtype_bytes)
        batch = latent.shape[0]
        groups = [slice(None)] if self.batched else [slice(b, b + 1) for b in range(batch)]
        crops = sum(geo.count(layout) for geo, _, layout in layouts)
        sliced = sliceable(self.decoder.mid.attn_1)
        rows, slices = self._head_rows(shape, dtype_bytes) if sliced else (0, 1)
        progress = Progress(slices + len(groups) * crops, opts.progress)
        report.predicted_peak_bytes = self.predicted_peak(shape, dtype_bytes)
        with torch.no_grad():
            # The head runs on the whole batch, as the host's decode does: at latent resolution a
            # batch-1 convolution can take a different CPU kernel than a batch-N one (see MIN_TILE).
            head = self._head(latent.to(opts.device, opts.dtype), rows, progress)
        if not sliced:
            progress.step()
        with ParkAllocator(opts, report) as parker:
            results = [self._decode_one(head[clips], layouts, report, progress, parker) for clips in groups]
        del head
        image = torch.cat(results, 0) if out is None else torch.cat(results, 0, out=out)
        return image, report

    def _head(self, z: torch.Tensor, rows: int = 0, progress: Progress | None = None) -> torch.Tensor:
        """post_quant_conv, conv_in and the mid block, whole; the attention in slices of ``rows`` query
        rows (0: the host's block, whole), with an interrupt check between layers and slices."""
        dec, check = self.decoder, self.options.check_interrupt or (lambda: None)
        post = getattr(self.model, "post_quant_conv", None)
        if post is not None:
            z = post(z)
        h = carried_conv(dec.conv_in)(z)
        check()
        h = dec.mid.block_1(h, None)
        check()
        if rows:
            on_slice = None if progress is None else progress.step
            h = sliced_attention(dec.mid.attn_1, h, rows, check, on_slice)
        else:
            h = dec.mid.attn_1(h)
        check()
        return dec.mid.block_2(h, None)

    def segments(self, stage: Stage, latent_frames: int) -> Segments | None:
        """The runs of ``stage``'s input frames the host normalises on their own (None: the whole clip):
        the latent's runs of CARRIED_FRAMES, each boundary moved as the time upsamples move frames
        (frame 0 stays one frame, frame i becomes 2i - 1 and 2i)."""
        if not self.carried:
            return None
        bounds = [*range(0, latent_frames, CARRIED_FRAMES), latent_frames]
        for _ in range(stage.time_level):
            bounds = [0 if b == 0 else 2 * b - 1 for b in bounds]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    def _decode_one(
        self,
        h: torch.Tensor,
        layouts: list[tuple[StageGeometry, Callable[[int, int], int], TileLayout]],
        report: DecodeReport,
        progress: Progress,
        parker: ParkAllocator,
    ) -> torch.Tensor:
        opts = self.options
        mode = opts.stats_mode()
        frames = h.shape[2] if h.ndim == 5 else 1
        segments = [self.segments(stage, frames) for stage in self.stages]
        with torch.no_grad():
            first = self.stages[0].norm
            stats = segment_stats(h, first.num_groups, first.eps, segments[0])  # the compute device's kernel
            parks = {"x": h.to(opts.park_device) if h.device != torch.device(opts.park_device) else h}
            del h
            produced: list[tuple[torch.Tensor, StatsMerger | None]] = []  # the stage's last attempt
            for index, (stage, (geo, _, layout)) in enumerate(zip(self.stages, layouts, strict=True)):
                nxt = self.stages[index + 1].norm if index + 1 < len(self.stages) else None
                runs = segments[index + 1] if nxt is not None else None

                def attempt(
                    layout: TileLayout,
                    stage: Stage = stage,
                    stats: GroupStats = stats,
                    merge_for: nn.GroupNorm | None = nxt if mode == "merge" else None,
                    runs: Segments | None = runs,
                ) -> None:
                    produced[:] = [
                        self._run_stage(stage, parks, stats, layout, merge_for, runs, progress, parker)
                    ]

                geo.record(report, stage.name, run_with_oom_retry(attempt, layout, opts, report))
                if stage.output != "t":  # the block (or decoder) is done with its inputs
                    for name in stage.inputs:
                        parks.pop(name, None)
                parks[stage.output], merger = produced[0]
                if nxt is not None:
                    if merger is not None:
                        stats = merger.stats(nxt.eps)
                    else:
                        stats = segment_stats(parks[stage.output], nxt.num_groups, nxt.eps, runs)
        return parks["image"].float()

    def _run_stage(
        self,
        stage: Stage,
        parks: dict[str, torch.Tensor],
        stats: GroupStats,
        layout: TileLayout,
        merge_for: nn.GroupNorm | None,
        runs: Segments | None,
        progress: Progress,
        parker: ParkAllocator,
    ) -> tuple[torch.Tensor, StatsMerger | None]:
        """The stage's output, parked, and the statistics of it merged tile by tile (``merge_for``)."""
        opts = self.options
        src = parks[stage.inputs[0]]
        height, width = src.shape[-2:]
        video = src.ndim == 5
        device_stats = stats.to(opts.device)
        merger = None
        if merge_for is not None:
            merger = StatsMerger(src.shape[0], merge_for.num_groups, opts.device, runs)
        out: torch.Tensor | None = None
        s = stage.scale
        cuts: list[Chunk | None] = (
            [*chunks(src.shape[2], layout.frames, stage.time_halo)] if video else [None]
        )
        frames_out = (2 * src.shape[2] - 1 if stage.time_up else src.shape[2],) if video else ()
        for cut in cuts:
            for t in tiles_of(height, width, layout.tile, self.strips):
                if opts.check_interrupt is not None:
                    opts.check_interrupt()
                c = t.crop(stage.halo, height, width)
                area = (slice(c.y0, c.y1), slice(c.x0, c.x1))
                window: tuple[slice, ...] = area if cut is None else (slice(cut.c0, cut.c1), *area)
                index: tuple[EllipsisType | slice, ...] = (Ellipsis, *window)
                crops = [parks[k][index].to(opts.device, non_blocking=True) for k in stage.inputs]
                tile_stats = device_stats if cut is None else device_stats.frames(cut.c0, cut.c1)
                h = apply_group_norm(crops[0], tile_stats, stage.norm.weight, stage.norm.bias, opts.exact)
                y = stage.body(h, *crops[1:])
                del h, crops
                rows = slice((t.y0 - c.y0) * s, (t.y1 - c.y0) * s)
                cols = slice((t.x0 - c.x0) * s, (t.x1 - c.x0) * s)
                target: tuple[slice, ...] = (slice(t.y0 * s, t.y1 * s), slice(t.x0 * s, t.x1 * s))
                o0 = 0
                if cut is None:
                    core = y[..., rows, cols]
                else:
                    o0, o1, j = cut.output(stage.time_up)
                    core = y[..., j : j + o1 - o0, rows, cols]
                    target = (slice(o0, o1), *target)
                if out is None:
                    dtype = torch.float32 if stage.output == "image" else y.dtype
                    shape = (*y.shape[:2], *frames_out, height * s, width * s)
                    out = parker.empty(shape, dtype, live_bytes(parks), final=stage.output == "image")
                into: tuple[EllipsisType | slice, ...] = (Ellipsis, *target)
                out[into].copy_(core, non_blocking=True)
                if merger is not None:
                    merger.add(core, o0)
                del y, core
                progress.step()
        if torch.device(opts.device).type == "cuda":
            torch.cuda.synchronize(opts.device)  # the non-blocking copies into the park must land
        assert out is not None  # every stage has at least one tile
        return out, merger
