"""The tiled VAE engine with no host: a whole decode of a small stand-in with the host KL decoder's
module structure (tiles, statistics, parks, OOM retries, estimates, budgets)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from comfyui_headroom.memory.tiled_vae import DecodeOptions, Unsupported, kl, make_tiled_decoder
from comfyui_headroom.memory.tiled_vae.budget import park_ram_allowance
from comfyui_headroom.memory.tiled_vae.groupnorm import apply_group_norm, kernel_stats
from comfyui_headroom.memory.tiled_vae.head import MIN_ROWS, SCORE_COPIES, SLICE_SCORES
from comfyui_headroom.memory.tiled_vae.kl import HEAD_FACTOR, estimate_head, estimate_stage
from comfyui_headroom.memory.tiled_vae.parks import ParkAllocator
from comfyui_headroom.memory.tiled_vae.runtime import MIN_TILE, DecodeReport
from headroom_testing.exactness import TOLERANCE, assert_exact, max_abs_diff
from headroom_testing.measure import PeakLiveBytes


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# -- a whole decode of a stand-in with the host KL decoder's structure -------------------------------


class Block(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels = cin, cout
        self.swish = nn.SiLU(inplace=True)
        self.norm1, self.conv1 = nn.GroupNorm(8, cin, eps=1e-6), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(8, cout, eps=1e-6), nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor, temb: None = None) -> torch.Tensor:
        h = self.conv1(self.swish(self.norm1(x)))
        h = self.conv2(self.swish(self.norm2(h)))
        return (self.nin_shortcut(x) if self.in_channels != self.out_channels else x) + h


class Attn(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm, self.qkv = nn.GroupNorm(8, c, eps=1e-6), nn.Conv2d(c, 3 * c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm(x)).flatten(2).transpose(1, 2).chunk(3, dim=-1)
        return x + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(x.shape)


class Upsample(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.scale_factor, self.with_conv, self.conv = 2.0, True, nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Decoder(nn.Module):
    """conv_in, mid.block_1/attn_1/block_2, up[i].block/attn/upsample, norm_out, conv_out."""

    def __init__(self, ch: int = 16, mult: tuple[int, ...] = (1, 2, 2), z: int = 4) -> None:
        super().__init__()
        top = ch * mult[-1]
        self.num_resolutions = len(mult)
        self.conv_in = nn.Conv2d(z, top, 3, padding=1)
        self.mid = nn.Module()
        self.mid.block_1, self.mid.attn_1, self.mid.block_2 = Block(top, top), Attn(top), Block(top, top)
        self.up = nn.ModuleList()
        cin = top
        for i in reversed(range(len(mult))):
            level = nn.Module()
            level.block = nn.ModuleList()
            for _ in range(2):
                level.block.append(Block(cin, ch * mult[i]))
                cin = ch * mult[i]
            level.attn = nn.ModuleList()
            if i != 0:
                level.upsample = Upsample(cin)
            self.up.insert(0, level)
        self.norm_out, self.conv_out = nn.GroupNorm(8, cin, eps=1e-6), nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(self.conv_in(z))))
        for i in reversed(range(len(self.up))):
            for block in self.up[i].block:
                h = block(h)
            if i != 0:
                h = self.up[i].upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.decoder = Decoder()

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z)


@pytest.fixture(scope="module")
def model() -> Model:
    return Model().eval()


def test_stand_in_decoder_is_staged_with_halos_from_its_layers(model: Model) -> None:
    engine = make_tiled_decoder(model, DecodeOptions(torch.device("cpu"), torch.float32))
    assert engine.family == "kl"
    halos = {(s.name, s.halo, s.scale) for s in engine.stages}
    assert ("up2.block1.b", 2, 2) in halos  # conv2 (1) + the upsample's conv, 1 px at twice the size
    assert ("up0.block1.b", 1, 1) in halos and ("out", 1, 1) in halos
    assert len(engine.stages) == 2 * 6 + 1  # one stage per GroupNorm of the up path


def stand_in_tiled(model: Model, z: torch.Tensor, **options: object) -> tuple[torch.Tensor, DecodeReport]:
    with torch.no_grad():
        return make_tiled_decoder(model, DecodeOptions(torch.device("cpu"), torch.float32, **options)).decode(
            z
        )


def test_stand_in_decode_in_tiles_is_exactly_its_full_decode(model: Model) -> None:
    """Within TOLERANCE when tiled, never asserted bitwise: the stand-in is so narrow (16-32 channels)
    that torch gives its small tiles its native convolution kernel (N*C*H*W <= 20480) and the whole
    image oneDNN's, which round differently (3e-6 measured). The hosts' VAEs are wide enough to stay
    on oneDNN (tests/host/test_tiled_vae.py). Unsplit, one sample: the same kernels, bitwise."""
    z = rand(2, 4, 20, 18, seed=3)
    with torch.no_grad():
        want = model.decode(z)
    got, report = stand_in_tiled(model, z, tile=64)
    assert got.shape == want.shape and max(n for _, _, n in report.stages) >= 4
    assert max_abs_diff(got, want) <= TOLERANCE
    one = z[:1]  # the engine decodes an image batch sample by sample: a batch of one is unsplit
    whole, report = stand_in_tiled(model, one, tile=1024)
    assert max(n for _, _, n in report.stages) == 1
    with torch.no_grad():
        assert_exact(whole, model.decode(one), split=False)


def test_stand_in_merged_statistics_match_to_rounding(model: Model) -> None:
    """The CUDA path's float64-merged statistics and float32 apply, run on the CPU."""
    z = rand(2, 4, 20, 18, seed=3)
    with torch.no_grad():
        want = model.decode(z)
    got, report = stand_in_tiled(model, z, tile=64, stats="merge", exact=False)
    assert got.shape == want.shape and max(n for _, _, n in report.stages) >= 4
    assert max_abs_diff(got, want) < 1e-4


def test_per_tile_statistics_fail_the_exactness_check_by_far(
    model: Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation: each tile normalised with its own GroupNorm statistics (as stock tiled decoders do)
    instead of the whole image's; the same tiles, halos and crops otherwise."""
    whole_image = kl.apply_group_norm

    def per_tile(x: torch.Tensor, stats: object, weight: object, bias: object, exact: bool) -> torch.Tensor:
        return whole_image(x, kernel_stats(x, 8, 1e-6), weight, bias, exact)  # the stand-in's norms

    monkeypatch.setattr(kl, "apply_group_norm", per_tile)
    z = rand(1, 4, 20, 18, seed=3)
    with torch.no_grad():
        want = model.decode(z)
    got, report = stand_in_tiled(model, z, tile=64)
    assert max(n for _, _, n in report.stages) >= 4
    assert max_abs_diff(got, want) > 100 * TOLERANCE
    with pytest.raises(AssertionError, match="differs by"):
        assert_exact(got, want, split=True)


def test_parks_past_the_ram_allowance_go_to_mapped_files_and_change_nothing(
    model: Model, tmp_path: Path
) -> None:
    z = rand(1, 4, 20, 18, seed=5)
    cpu = (torch.device("cpu"), torch.float32)
    with torch.no_grad():
        want, in_ram = make_tiled_decoder(model, DecodeOptions(*cpu, tile=64)).decode(z)
        options = DecodeOptions(*cpu, tile=64, park_ram_bytes=0, park_dir=str(tmp_path))
        got, spilled = make_tiled_decoder(model, options).decode(z)
        options.park_ram_bytes = spilled.park_disk_bytes // 8  # the small parks in RAM, the large on disk
        some, partly = make_tiled_decoder(model, options).decode(z)
    assert in_ram.parks_on_disk == 0
    assert spilled.parks_on_disk == len(spilled.stages) - 1  # every park but the decoder's output
    assert 0 < partly.parks_on_disk < spilled.parks_on_disk
    assert torch.equal(got, want) and torch.equal(some, want) and not got.is_shared()
    assert list(tmp_path.iterdir()) == []  # nothing left behind
    assert park_ram_allowance(8 << 30) == 4 << 30


def test_parks_are_pinned_only_within_half_the_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    """Page-locked memory cannot be paged out: a CUDA decode pins its parks only while they take at most
    half the RAM allowance (the rest in plain RAM, then files)."""
    pinned: list[bool] = []
    real_empty = torch.empty

    def record(*shape: object, pin_memory: bool = False, **kw: object) -> torch.Tensor:
        pinned.append(pin_memory)
        return real_empty(*shape, **kw)

    monkeypatch.setattr(torch, "empty", record)
    options = DecodeOptions(torch.device("cpu"), torch.float32, pin=True, park_ram_bytes=1000)
    parker = ParkAllocator(options, DecodeReport("kl"))
    parker.empty((100,), torch.float32, live_bytes=0)  # 400 bytes: within half
    parker.empty((100,), torch.float32, live_bytes=400)  # 800: plain RAM
    parker.empty((100,), torch.float32, live_bytes=800, final=True)  # the output: RAM, never a file
    assert pinned[-3:] == [True, False, False]
    options.park_ram_bytes = None  # no allowance: pinned as before
    parker.empty((100,), torch.float32, live_bytes=10**12)
    assert pinned[-1] is True


def test_out_of_memory_in_a_tile_retries_smaller_and_still_matches(model: Model) -> None:
    z = rand(1, 4, 24, 24, seed=4)
    conv = model.decoder.up[0].block[0].conv1
    real_forward = conv.forward

    def tight(x: torch.Tensor) -> torch.Tensor:  # a device that only fits small tiles at full resolution
        if x.shape[-1] * x.shape[-2] > 40 * 40:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(x)

    conv.forward = tight
    try:
        with torch.no_grad():
            options = DecodeOptions(
                torch.device("cpu"), torch.float32, tile=96, oom_types=(torch.OutOfMemoryError,)
            )
            got, report = make_tiled_decoder(model, options).decode(z)
    finally:
        conv.forward = real_forward
    with torch.no_grad():
        want = model.decode(z)
    assert report.oom_retries >= 1
    assert max_abs_diff(got, want) <= TOLERANCE  # the stand-in's small tiles: see above


def test_up_path_attention_is_unsupported() -> None:
    model = Model()
    model.decoder.up[1].attn.append(Attn(32))
    with pytest.raises(Unsupported, match="attention in the up path"):
        make_tiled_decoder(model, DecodeOptions(torch.device("cpu"), torch.float32))
    with pytest.raises(Unsupported):
        make_tiled_decoder(nn.Linear(2, 2), DecodeOptions(torch.device("cpu"), torch.float32))


def test_stage_estimate_covers_the_measured_peak(model: Model) -> None:
    """The per-tile activation estimate vs the live bytes a tile really peaks at (PeakLiveBytes)."""
    engine = make_tiled_decoder(model, DecodeOptions(torch.device("cpu"), torch.float32))
    from comfyui_headroom.memory.tiled_vae.groupnorm import GroupStats

    for stage in engine.stages:
        cin = stage.in_channels
        crops = [rand(1, c, 36, 36, seed=i) for i, c in enumerate(cin)]
        groups = stage.norm.num_groups
        stats = GroupStats(torch.zeros(1, groups), torch.ones(1, groups))
        with torch.no_grad(), PeakLiveBytes() as meter:
            h = apply_group_norm(crops[0], stats, stage.norm.weight, stage.norm.bias, True)
            out = stage.body(h, *crops[1:])
            del h, out
        predicted = estimate_stage(stage, 36 - 2 * stage.halo, 4, True)
        assert meter.peak <= 1.1 * predicted, stage.name
        assert meter.peak >= 0.3 * predicted, stage.name  # and not wildly pessimistic
    assert math.isfinite(predicted)


def test_head_attention_scores_count_as_they_are_sliced() -> None:
    """The head's attention runs a slice of query rows at a time (head.py): its scores take what the
    budget leaves, at most SLICE_SCORES and at least MIN_ROWS rows. An attention block of unknown make
    runs whole, as the host slices it (up to 128 slices) or holds none (SDPA): a 2048x2048 Flux decode
    must not be refused on an 8 GB card for a 8.6 GB score matrix."""
    pixels = 256 * 256
    linear = int(HEAD_FACTOR * 512 * pixels * 2)
    per_row = SCORE_COPIES * pixels * 2
    assert estimate_head((256, 256), 512, 2) == linear + per_row * (SLICE_SCORES // pixels)
    assert estimate_head((256, 256), 512, 2, score_cap=0) == linear + per_row * MIN_ROWS
    assert estimate_head((256, 256), 512, 2, score_cap=linear + 100 * per_row) == linear + 64 * per_row
    small = int(HEAD_FACTOR * 512 * 64 * 2) + SCORE_COPIES * 64 * 64 * 2  # every row in one slice
    assert estimate_head((8, 8), 512, 2, score_cap=1 << 30) == small
    whole = {"sliced": False}
    assert estimate_head((256, 256), 512, 2, **whole) == linear + pixels * pixels * 2  # as on a roomy CPU
    assert estimate_head((256, 256), 512, 2, score_cap=0, **whole) == linear + pixels * pixels * 2 // 128
    assert estimate_head((256, 256), 512, 2, score_cap=1 << 30, **whole) == 1 << 30  # the cap, head included
    assert estimate_head((256, 256), 512, 2, score_cap=0, **whole) < 1 << 30


def test_budget_picks_the_largest_tile_that_fits(model: Model) -> None:
    z_shape = (1, 4, 64, 64)
    for budget in (4 << 20, 32 << 20):
        options = DecodeOptions(torch.device("cpu"), torch.float32, budget_bytes=budget)
        engine = make_tiled_decoder(model, options)
        for stage, (_, _, layout) in zip(engine.stages, engine.layouts(z_shape, 4), strict=True):
            size = 64 * 2**stage.level
            tile = layout.tile
            assert estimate_stage(stage, tile, 4, True) <= budget or tile == MIN_TILE
            assert tile == size or estimate_stage(stage, tile + 1, 4, True) > budget
        head = estimate_head((64, 64), 32, 4)  # the head runs whole: no budget can shrink it
        assert engine.predicted_peak(z_shape, 4) <= max(budget, head)


# -- what the node says after a decode (M19) ---------------------------------------------------------


def test_the_decode_text_names_tiles_per_level_time_chunks_retries_and_parks() -> None:
    from comfyui_headroom.memory.tiled_vae.runtime import decode_text, host_decode_text

    report = DecodeReport("wan", predicted_peak_bytes=3 << 29, oom_retries=1, parks_on_disk=2)
    report.park_disk_bytes = 5 << 30
    report.stages += [("up0.a", 64, 4), ("up0.b", 48, 6), ("up1.a", 96, 1), ("up0.a", 64, 4)]  # two clips
    report.chunks["up0.b"] = 3
    text = decode_text(
        report, False, 2 << 30, "auto: 80% of the VRAM free once the VAE is loaded", (2, 81, 480, 832, 3)
    )
    assert text.splitlines() == [
        "decoded in 15 tiles (fast, approximate)",
        "wan VAE, 2 clips of 81 frames, 832×480 px",
        "tiles per decoder level (side in its own pixels):",
        "  up0: up to 6 tiles, 48 px, in 3 time chunks",
        "  up1: 1 tile, 96 px",
        "tiles sized to 2.00 GiB of activations:",
        "  auto: 80% of the VRAM free once the VAE is loaded",
        "predicted peak 1.50 GiB of activations",
        "ran out of memory 1× and retried with smaller tiles",
        "2 intermediate activations (5.00 GiB) went to files on disk:",
        "  not enough free RAM to hold them",
    ]
    whole = DecodeReport("kl", stages=[("up0.a", 64, 1), ("out", 64, 1)], predicted_peak_bytes=1 << 27)
    said = decode_text(whole, True, 2 << 30, "auto on the CPU: a fixed size per tile", (1, 64, 64, 3))
    first = "fits whole: decoded in one pass (exact)"
    assert said.splitlines()[:2] == [first, "kl VAE, 1 image, 64×64 px"]
    fallback = host_decode_text("kl: no plain decoder; wan: " + "not a Wan decoder " * 8)
    lines = fallback.splitlines()
    assert lines[:2] == ["decoded by ComfyUI's own VAE decode, not in tiles:", "  kl: no plain decoder"]
    assert all(len(line) <= 60 for line in lines) and lines[3].startswith("    not a Wan"), lines
