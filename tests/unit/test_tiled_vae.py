"""The tiled VAE engine's parts, with no host: grids, receptive fields, GroupNorm statistics, budgets
and the OOM retry. A whole decode of a small stand-in: test_tiled_vae_decode.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from comfyui_headroom.memory.tiled_vae import DecodeOptions, Unsupported, groupnorm
from comfyui_headroom.memory.tiled_vae.budget import activation_budget
from comfyui_headroom.memory.tiled_vae.groupnorm import (
    StatsMerger,
    apply_group_norm,
    kernel_stats,
    segment_stats,
)
from comfyui_headroom.memory.tiled_vae.layout import (
    StageGeometry,
    TileLayout,
    frame_counts,
    run_with_oom_retry,
)
from comfyui_headroom.memory.tiled_vae.ltxv import apply_norm, whole_mean
from comfyui_headroom.memory.tiled_vae.runtime import MIN_TILE, DecodeReport, tile_for_budget
from comfyui_headroom.memory.tiled_vae.tiles import (
    Chunk,
    chunks,
    conv_radius,
    crop_area,
    grid,
    min_crop_frames,
    spans,
    tiles_of,
    time_reach,
)
from comfyui_headroom.memory.tiled_vae.wan import host_chunks
from comfyui_headroom.memory.units import GiB, parse_vram_budget
from headroom_testing.exactness import assert_exact


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# -- grids and receptive fields ----------------------------------------------------------------------


@pytest.mark.parametrize(("size", "tile"), [(1, 16), (17, 16), (100, 16), (96, 32), (5, 100)])
def test_spans_cover_the_axis_once_with_near_equal_tiles(size: int, tile: int) -> None:
    parts = spans(size, tile)
    assert parts[0][0] == 0 and parts[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(parts[:-1], parts[1:], strict=True))
    lengths = [b - a for a, b in parts]
    assert max(lengths) <= tile and max(lengths) - min(lengths) <= 1
    assert len(list(grid(size, size, tile))) == len(parts) ** 2


def test_columns_are_full_height_strips_covering_the_width_once() -> None:
    strips = tiles_of(30, 50, 16, strips=True)
    assert [(t.y0, t.y1) for t in strips] == [(0, 30)] * 4
    assert [(t.x0, t.x1) for t in strips] == spans(50, 16)
    assert tiles_of(30, 50, 16, strips=False) == list(grid(30, 50, 16))
    assert crop_area(16, 2, 30, 50, strips=True) == 30 * 20
    assert crop_area(16, 2, 30, 50, strips=False) == 20 * 20
    assert crop_area(16, 20, 30, 50, strips=False) == 30 * 50  # clipped to the image


def test_chunks_read_the_reach_in_time_and_cover_the_clip_once() -> None:
    cuts = chunks(17, 6, (3, 1))
    assert [(c.t0, c.t1) for c in cuts] == spans(17, 6)
    assert [(c.c0, c.c1) for c in cuts] == [(0, 7), (3, 12), (8, 17)]
    assert chunks(5, 5, (2, 0)) == [Chunk(0, 5, 0, 5)]


def test_a_chunk_maps_its_core_through_a_time_upsample() -> None:
    """Upsampled, frame 0 stays one frame and frame i becomes 2i - 1, 2i; a crop's own first frame
    counts as frame 0, so its output j is the clip's 2 c0 + j."""
    frames = 9
    clip = torch.arange(frames, dtype=torch.float32)

    def upsample(x: torch.Tensor) -> torch.Tensor:  # the host's rule, on frame indices
        return torch.cat([x[:1], x[1:].repeat_interleave(2)])

    full = upsample(clip)
    produced = torch.full_like(full, -1.0)
    for cut in chunks(frames, 4, (2, 0)):
        o0, o1, j = cut.output(time_up=True)
        produced[o0:o1] = upsample(clip[cut.c0 : cut.c1])[j : j + o1 - o0]
    assert torch.equal(produced, full)
    assert Chunk(3, 6, 1, 6).output(time_up=False) == (3, 6, 2)


def test_time_reach_reads_the_convolutions() -> None:
    class VideoConv3d(nn.Module):  # the host's: pads by hand, causal in time
        def __init__(self, kernel: int, padding: int) -> None:
            super().__init__()
            self.padding = (padding,) * 4 + (kernel - 1, 0) if padding else 0
            self.conv = nn.Conv3d(4, 4, kernel, padding=0)

    assert time_reach(VideoConv3d(3, 1)) == (2, 0)
    assert time_reach(VideoConv3d(1, 0)) == (0, 0)
    assert time_reach(nn.Conv3d(4, 4, 3, padding=1)) == (1, 1)
    assert time_reach(nn.Conv2d(4, 4, 3, padding=1)) == (0, 0)
    with pytest.raises(Unsupported):
        time_reach(nn.Conv3d(4, 4, 3, padding=1, stride=(2, 1, 1)))
    with pytest.raises(Unsupported):
        time_reach(nn.Conv3d(4, 4, 3, padding=0))


def test_cpu_crops_keep_the_full_decodes_convolution_kernel() -> None:
    """torch sends a float32 CPU convolution to oneDNN above N*C*D*H = 20480 elements: a crop must stay
    above it wherever the full decode is, and nothing is cut in time where the full decode is below."""
    assert min_crop_frames(128, 24, 17) == 7  # 128 * 24 * 7 = 21504 > 20480 >= 128 * 24 * 6
    assert min_crop_frames(128, 8, 13) == 13  # the whole clip is under the line: no cut
    assert min_crop_frames(512, 64, 9) == 1
    conv = nn.Conv3d(128, 128, 3, padding=(0, 1, 1))
    x = rand(1, 128, 9, 24, 6)
    with torch.no_grad():
        full = conv(x)
        for c0, c1 in [(2, 9), (0, 7)]:  # 7 frames: oneDNN, bitwise the full decode's frames
            assert torch.equal(conv(x[:, :, c0:c1]), full[:, :, c0 : c1 - 2])


def test_layout_cuts_time_only_when_the_budget_needs_it() -> None:
    geo = StageGeometry(height=64, width=64, frames=33, halo=2, time_halo=(3, 0), strips=False)

    def estimate(tile: int, crop_frames: int) -> int:
        return 100 * crop_frames * (tile + 4) ** 2

    options = DecodeOptions(torch.device("cuda"), torch.float32, budget_bytes=100 * 33 * 68**2)
    assert geo.choose(options, None, estimate) == TileLayout(64, 33, 1)  # fits whole
    options.budget_bytes = 100 * 33 * 36**2
    roomy = geo.choose(options, None, estimate)
    assert roomy.frames == 33 and roomy.tile == 32  # tiles cost less halo than chunks here
    options.budget_bytes = 100 * 6 * 20**2  # too small for every frame even at the smallest tile
    tight = geo.choose(options, None, estimate)
    assert tight.frames < 33 and geo.peak(tight, estimate) <= options.budget_bytes
    assert all(
        geo.peak(TileLayout(t, n), estimate) > options.budget_bytes
        or geo.work(TileLayout(t, n)) >= geo.work(tight)
        for n in frame_counts(33)
        for t in range(MIN_TILE, 65)
    ), "no layout within the budget computes less"
    options.budget_bytes = 1
    assert geo.choose(options, None, estimate) == geo.smallest() == TileLayout(MIN_TILE, 1, 1)
    cpu = StageGeometry(64, 64, 33, 2, (3, 0), strips=True, min_frames=7)
    assert cpu.smallest().frames == 7 and cpu.crop_range(7)[0] >= 7
    forced = cpu.choose(DecodeOptions(torch.device("cpu"), torch.float32, frames=2), None, estimate)
    assert forced.frames == 7, "a forced chunk grows to what the CPU kernel rule allows"


def test_video_is_cut_in_strips_on_the_cpu_only() -> None:
    cpu = DecodeOptions(torch.device("cpu"), torch.float32)
    assert cpu.strips(video=True) and not cpu.strips(video=False)
    assert not DecodeOptions(torch.device("cuda"), torch.float32).strips(video=True)


def test_strip_crops_reduce_like_the_whole_frame_only_with_the_whole_mean() -> None:
    """PixelNorm of a strip with the whole activation's channel mean is bitwise the full PixelNorm."""

    class PixelNorm(nn.Module):  # the host's LTXV PixelNorm
        def __init__(self) -> None:
            super().__init__()
            self.dim, self.eps = 1, 1e-8

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / torch.sqrt(torch.mean(x**2, dim=self.dim, keepdim=True) + self.eps)

    norm = PixelNorm()
    x = rand(1, 128, 3, 20, 45) * 3
    full, mean = norm(x), whole_mean(norm, x)
    for x0, x1 in [(0, 13), (7, 30), (29, 45)]:
        crop = x[..., x0:x1].contiguous()
        assert torch.equal(apply_norm(norm, crop, mean[..., x0:x1].contiguous()), full[..., x0:x1])
    assert whole_mean(None, x) is None and torch.equal(apply_norm(None, x, None), x)


def test_tile_crop_is_clipped_to_the_image() -> None:
    tile = next(iter(grid(40, 30, 16)))
    crop = tile.crop(3, 40, 30)
    assert (crop.y0, crop.x0) == (0, 0) and (crop.y1, crop.x1) == (tile.y1 + 3, tile.x1 + 3)


class VideoConv(nn.Module):
    """Pads by hand, like the host's VideoConv3d (replicate, causal in time)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.padding = (k // 2, k // 2, k // 2, k // 2, k - 1, 0)
        self.conv = nn.Conv3d(2, 2, k)


class CausalConv(nn.Conv3d):
    """Keeps its padding private, like Wan's CausalConv3d."""

    def __init__(self, k: int) -> None:
        super().__init__(2, 2, k)
        self._padding = (k // 2, k // 2, k // 2, k // 2, 2 * (k // 2), 0)
        self.padding = (0, 0, 0)


class CausalConvPadsSpace(nn.Conv3d):
    """Wan's CausalConv3d on the 0.18 core: ``_padding`` is the frames only, the conv pads space itself."""

    def __init__(self, k: int, space: int) -> None:
        super().__init__(2, 2, k)
        self._padding = 2 * (k // 2)
        self.padding = (0, space, space)


class LTXVCausalConv(nn.Module):
    """Pads time by hand but lets its conv pad space, with no padding attribute of its own (LTXV)."""

    def __init__(self, padding_mode: str) -> None:
        super().__init__()
        self.conv = nn.Conv3d(2, 2, 3, padding=(0, 1, 1), padding_mode=padding_mode)


def test_conv_radius_is_read_from_the_layer() -> None:
    assert conv_radius(LTXVCausalConv("zeros")) == 1 and conv_radius(LTXVCausalConv("reflect")) == 1
    assert conv_radius(nn.Conv2d(2, 2, 3, padding=1)) == 1
    assert conv_radius(nn.Conv2d(2, 2, 5, padding=4, dilation=2)) == 4
    assert conv_radius(nn.Conv2d(2, 2, 1)) == 0
    assert conv_radius(VideoConv(3)) == 1
    assert conv_radius(CausalConv(3)) == 1
    assert conv_radius(CausalConvPadsSpace(3, 1)) == 1 and conv_radius(CausalConvPadsSpace(1, 0)) == 0
    with pytest.raises(Unsupported):
        conv_radius(CausalConvPadsSpace(3, 0))  # pads time only: not 'same' in space
    for bad in (nn.Conv2d(2, 2, 3, padding=0), nn.Conv2d(2, 2, 3, stride=2, padding=1), nn.Conv2d(2, 2, 2)):
        with pytest.raises(Unsupported):
            conv_radius(bad)
    with pytest.raises(Unsupported):
        conv_radius(nn.Linear(2, 2))


# -- GroupNorm with whole-activation statistics -----------------------------------------------------


def test_kernel_statistics_and_exact_apply_reproduce_group_norm_on_a_crop() -> None:
    """Bitwise where torch's GroupNorm kernel is the vectorised one the exact apply mirrors (AVX2,
    AVX-512); a build without fused multiply-adds (ATEN_CPU_CAPABILITY=default) within rounding."""
    x = rand(1, 64, 37, 29) * 3 + 1
    weight, bias = rand(64, seed=1), rand(64, seed=2)
    want = F.group_norm(x, 16, weight, bias, 1e-6)
    stats = kernel_stats(x, 16, 1e-6, groups_per_call=3)  # chunked calls, same statistics
    _, mean, rstd = torch.native_group_norm(x, None, None, 1, 64, 37 * 29, 16, 1e-6)
    assert torch.equal(stats.mean, mean) and torch.equal(stats.rstd, rstd)
    crop = x[..., 5:30, 7:20]
    assert_exact(apply_group_norm(crop, stats, weight, bias, exact=True), want[..., 5:30, 7:20], split=False)
    approx = apply_group_norm(crop, stats, weight, bias, exact=False)
    assert (approx - want[..., 5:30, 7:20]).abs().max() < 1e-5


@pytest.mark.parametrize("per_frame", [False, True])
def test_the_fused_exact_apply_is_the_float64_emulation_bitwise(per_frame: bool) -> None:
    """Where the probe finds addcmul fused, the one-pass apply is the emulated fma to the bit, on a
    strided crop, per channel and per frame; where it is not, the emulation runs."""
    x = rand(1, 32, 4, 13, 41) * 2 - 0.5
    weight, bias = rand(32, seed=1), rand(32, seed=2)
    stats = segment_stats(x, 8, 1e-6, [(0, 1), (1, 4)] if per_frame else None)
    crop = x[..., 3:11, 5:38]
    got = apply_group_norm(crop, stats, weight, bias, exact=True)
    groupnorm.addcmul_is_fma.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(groupnorm, "addcmul_is_fma", lambda device_type: False)
            emulated = apply_group_norm(crop, stats, weight, bias, exact=True)
    finally:
        groupnorm.addcmul_is_fma.cache_clear()
    assert torch.equal(got, emulated)


def test_the_fma_probe_refuses_an_addcmul_that_rounds_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    def twice(base: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b + base

    groupnorm.addcmul_is_fma.cache_clear()
    monkeypatch.setattr(groupnorm.torch, "addcmul", twice)
    try:
        assert groupnorm.addcmul_is_fma("cpu") is False
    finally:
        monkeypatch.undo()
        groupnorm.addcmul_is_fma.cache_clear()


def test_exact_apply_handles_video_activations() -> None:
    x = rand(1, 32, 3, 11, 9)
    weight, bias = rand(32, seed=1), rand(32, seed=2)  # the VAEs' GroupNorms are all affine
    want = F.group_norm(x, 8, weight, bias, 1e-6)
    got = apply_group_norm(x[..., 2:9, 1:8], kernel_stats(x, 8, 1e-6), weight, bias, True)
    assert_exact(got, want[..., 2:9, 1:8], split=False)


def test_merged_tile_statistics_match_the_whole_activation() -> None:
    x = rand(2, 64, 50, 41) * 5 + 3
    merger = StatsMerger(2, 16, "cpu")
    for tile in grid(50, 41, 16):  # core pixels only, each counted once
        merger.add(x[..., tile.y0 : tile.y1, tile.x0 : tile.x1])
    merged, kernel = merger.stats(1e-6), kernel_stats(x, 16, 1e-6)
    assert torch.allclose(merged.mean, kernel.mean, rtol=1e-6, atol=1e-6)
    assert torch.allclose(merged.rstd, kernel.rstd, rtol=1e-6)


# -- budgets and retries -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gb"), [("auto", None), ("", None), (" AUTO ", None), ("6", 6.0), ("4.5 GB", 4.5), (3, 3.0)]
)
def test_budget_parses(text: str | int, gb: float | None) -> None:
    assert parse_vram_budget(text) == (None if gb is None else int(gb * GiB))  # bytes, as everywhere


@pytest.mark.parametrize("text", ["six", "-1", "0", "inf", "nan", "1e400"])
def test_bad_budget_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match='"auto" or a'):
        parse_vram_budget(text)


def test_activation_budget() -> None:
    assert activation_budget(4.0, GiB, None, on_gpu=True) == 3 * GiB  # the weights come off the top
    assert activation_budget(None, GiB, 10 * GiB, on_gpu=True) == 8 * GiB
    assert activation_budget(None, GiB, None, on_gpu=False) == 2 * GiB


def test_tile_for_budget_fits_and_clamps() -> None:
    tile = tile_for_budget(1000.0, 2, 1e8, 10_000)
    assert 1000 * (tile + 4) ** 2 <= 1e8 < 1000 * (tile + 5) ** 2
    strip = tile_for_budget(1000.0, 2, 1e8, 10_000, rows=300)  # full-height strips 300 px high
    assert 1000 * 300 * (strip + 4) <= 1e8 < 1000 * 300 * (strip + 5)
    assert tile_for_budget(1000.0, 2, 1.0, 10_000) == MIN_TILE
    assert tile_for_budget(1.0, 2, 1e12, 300) == 300


def test_oom_retry_halves_the_tile_then_the_frames_and_frees_between_tries() -> None:
    tried, freed = [], []

    def attempt(layout: TileLayout) -> None:
        tried.append((layout.tile, layout.frames))
        if layout.tile > 40 or layout.frames > 3:
            raise MemoryError("out of memory")

    options = DecodeOptions(
        torch.device("cpu"), torch.float32, oom_types=(MemoryError,), on_oom=lambda: freed.append(1)
    )
    report = DecodeReport("kl")
    assert run_with_oom_retry(attempt, TileLayout(64, 9, 2), options, report) == TileLayout(16, 3, 2)
    assert tried == [(64, 9), (32, 9), (16, 9), (16, 5), (16, 3)]
    assert report.oom_retries == 4 and len(freed) == 4

    def never(layout: TileLayout) -> None:
        raise MemoryError("out of memory")

    with pytest.raises(MemoryError):  # down to the smallest tile and the fewest frames allowed, then up
        run_with_oom_retry(never, TileLayout(64, 9, 4), options, DecodeReport("kl"))
    assert TileLayout(MIN_TILE, 4, 4).smaller() is None

    def bug(layout: TileLayout) -> None:
        raise KeyError("not an OOM")

    with pytest.raises(KeyError):  # anything else is not retried
        run_with_oom_retry(bug, TileLayout(64), options, DecodeReport("kl"))


def test_wan_chunks_follow_the_hosts_decode() -> None:
    """One latent frame at a time, or (a decoder with ``run_up``: the 0.18 core's Wan 2.1) the first
    alone and then pairs, the last maybe single: every frame once, in order."""
    assert host_chunks(3, paired=False) == [(0, 1), (1, 2), (2, 3)]
    assert host_chunks(1, paired=True) == [(0, 1)]
    assert host_chunks(3, paired=True) == [(0, 1), (1, 3)]
    assert host_chunks(4, paired=True) == [(0, 1), (1, 3), (3, 4)]


def test_group_norm_per_run_of_frames_is_the_norm_of_each_run() -> None:
    """The 0.18+ core's HunyuanVideo normalises each run of frames on its own: statistics per run, spread
    to its frames, applied to a crop of frames, give each run's own GroupNorm bitwise; the float64 merge
    of the crops' cores agrees; whole-clip statistics do not."""
    x = torch.randn(1, 8, 7, 5, 6, generator=torch.Generator().manual_seed(3))
    x[:, :, 3:] = x[:, :, 3:] * 3 + 2  # runs with other statistics
    weight, bias = torch.randn(8), torch.randn(8)
    runs = [(0, 1), (1, 3), (3, 7)]
    want = torch.cat([F.group_norm(x[:, :, a:b], 4, weight, bias, 1e-6) for a, b in runs], 2)
    stats = segment_stats(x, 4, 1e-6, runs)
    assert stats.mean.shape == (1, 4, 7)
    got = torch.cat(
        [apply_group_norm(x[:, :, a:b], stats.frames(a, b), weight, bias, True) for a, b in [(0, 2), (2, 7)]],
        2,
    )
    assert torch.equal(got, want)
    merger = StatsMerger(1, 4, "cpu", runs)
    merger.add(x[:, :, :2], 0)
    merger.add(x[:, :, 2:], 2)
    merged = apply_group_norm(x, merger.stats(1e-6), weight, bias, False)
    assert (merged - want).abs().max().item() < 1e-5
    whole = apply_group_norm(x, segment_stats(x, 4, 1e-6, None), weight, bias, True)
    assert (whole - want).abs().max().item() > 0.1


def test_the_vaes_the_host_decodes_are_refused_with_their_reason() -> None:
    """LTX 2.4's diffusion decoder, MiniMax H3 and HunyuanVideo 1.5 (by its decoder's class): Unsupported
    up front, the reason naming the family, whatever else the module looks like."""
    from comfyui_headroom.memory.tiled_vae import make_tiled_decoder

    options = DecodeOptions(torch.device("cpu"), torch.float32)
    for name, words in (("CausalDiffusionVAE", "LTX 2.4"), ("MiniMaxH3VideoVAE", "MiniMax H3")):
        model = type(name, (nn.Module,), {})()
        with pytest.raises(Unsupported, match=words):
            make_tiled_decoder(model, options)
    decoder = type("Decoder", (nn.Module,), {"__module__": "comfy.ldm.hunyuan_video.vae_refiner"})()
    engine = nn.Module()
    engine.decoder = decoder
    with pytest.raises(Unsupported, match="HunyuanVideo 1.5"):
        make_tiled_decoder(engine, options)
