"""Tiled VAE Decode (Headroom) inside the real host on the video VAEs: Wan 2.1/2.2, HunyuanVideo, LTXV.

As in test_tiled_vae.py: every comparison is against the host's own decode of the same VAE object, in
float32 on the CPU, with tiles smaller than the image, and "exact" is ``headroom_testing.exactness``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from headroom_testing.exactness import assert_exact, is_split, max_tiles
from headroom_testing.harness import Host
from headroom_testing.tiled_vae_host import (
    assert_same_image,
    engine,
    host_vae,
    latent,
    recorded_reports,
    stock_decode,
    tiled_decode,
)
from headroom_testing.tiny_models import (
    LTXV_TINY_CONFIGS,
    build_wan21_vae,
    host_video_vaes,
    hunyuan_video_vae_state_dict,
    ltxv_sized_by_config,
    ltxv_vae,
    small_wan_vae,
    supported_builders,
    wan22_vae_state_dict,
)

pytestmark = pytest.mark.host


@pytest.fixture(autouse=True)
def no_grad() -> Any:
    with torch.no_grad():  # as the host's executor runs nodes
        yield


@pytest.fixture(scope="module")
def wan_vae(host: Host) -> Any:
    if "build_wan21_vae" not in supported_builders():
        pytest.skip(f"the host ({host.version}) predates Wan: no comfy/ldm/wan")
    import comfy.utils

    path = build_wan21_vae(host.models_dir, name="tiled_vae_wan21.safetensors", dtype=torch.float32)
    return host_vae(comfy.utils.load_torch_file(str(path)))


def test_wan21_tiled_is_exactly_the_full_decode_with_every_frame(host: Host, wan_vae: Any) -> None:
    """Through the node, with a budget that allows 16-latent-pixel tiles: two tiles, five frames."""
    tv = engine(host)
    z = latent((1, 16, 2, 4, 17), seed=8)  # 2 latent frames -> 5 frames of 32x136 (strips on a CPU)
    want = stock_decode(host, wan_vae, z)
    probe = tv.make_tiled_decoder(
        wan_vae.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32)
    )
    assert probe.family == "wan21" and probe.halo >= 8  # from the layers: 13 latent px for Wan 2.1
    budget = (wan_vae.patcher.model_size() + probe.minimum_peak(tuple(z.shape), 4) * 1.01) / (1 << 30)
    reports: list = []
    original = tv.WanTiledDecoder.decode

    def spy(self: Any, *args: Any) -> Any:
        result = original(self, *args)
        reports.append(result[1])
        return result

    tv.WanTiledDecoder.decode = spy
    try:
        got = tiled_decode(host, wan_vae, z, vram_budget=f"{budget:.4f}")
    finally:
        tv.WanTiledDecoder.decode = original
    assert reports and max_tiles(reports[0]) == 2  # really tiled
    assert want.shape[0] == 5
    assert_same_image(got, want, split=True)


# -- Wan 2.2, HunyuanVideo, LTXV and Wan with real crops (current hosts) -----------------------------
# Video latents are cut in full-height strips on a CPU (DecodeOptions.strips), so these latents are
# wide and short. Each test asserts that every strip's crop is smaller than the image somewhere.


def need_video_vae(host: Host, kind: str) -> None:
    if kind not in host_video_vaes():
        pytest.skip(f"the host ({host.version}) has no {kind} VAE: nothing to tile")


def min_budget_gb(host: Host, vae: Any, shape: tuple[int, ...]) -> str:
    """A vram_budget that only fits the smallest tiles: the node must cut every stage it can."""
    tv = engine(host)
    probe = tv.make_tiled_decoder(vae.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32))
    return f"{(vae.patcher.model_size() + probe.minimum_peak(shape, 4) * 1.01) / (1 << 30):.6f}"


# The layouts the engine refuses, with the reason it gives (none left: kept for the next family).
REFUSALS = {}


def refused(
    host: Host,
    vae: Any,
    kind: str,
    node: Callable[[], torch.Tensor] | None = None,
    want: torch.Tensor | None = None,
    reports: list | None = None,
) -> bool:
    """True where the engine refuses this host's ``kind`` decoder, after checking that the reason is the
    known one (any other refusal fails) and that the node then falls back to the host's own decode:
    ``node()`` is ``want`` bitwise and no engine ran (``reports`` stays empty)."""
    tv = engine(host)
    try:
        tv.make_tiled_decoder(vae.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32))
    except tv.Unsupported as exc:
        assert REFUSALS[kind] in str(exc), exc
        if node is not None:
            got = node()
            assert got.shape == want.shape and torch.equal(got, want)
        assert not reports
        return True
    return False


def assert_raw_exact(got: torch.Tensor, want: torch.Tensor, *, split: bool) -> None:
    """The decoders' own outputs, before the host clamps them to 0..1 (which could hide a difference)."""
    assert_exact(got, want.float(), split=split)


def test_wan21_batch_of_clips_through_the_node_is_exactly_the_stock_decode(
    host: Host, wan_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clips through all their frames with the causal cache; frames in the stock order. The tiles
    hold both clips on the CPU, as the host's decode does: one 80 px clip alone would take torch's
    native convolution kernel at the lowest levels (384 channels x 3 frames x 10 rows < 20480) and
    round differently (6.4e-6 measured before the tiles held the batch)."""
    reports = recorded_reports(monkeypatch, engine(host).WanTiledDecoder)
    z = latent((2, 16, 2, 10, 4), seed=18)
    want = stock_decode(host, wan_vae, z)
    got = tiled_decode(host, wan_vae, z)
    assert want.shape == (10, 80, 32, 3) and len(reports) == 1
    assert_same_image(got, want, split=is_split(reports[0]))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_wan_tiles_smaller_than_the_frame_are_exactly_the_host_decode(host: Host, version: str) -> None:
    """The host's own Wan VAE class at a small width (``small_wan_vae``) on a latent wide enough for real
    crops: three latent frames, so the causal caches and Wan 2.2's first-chunk handling all run."""
    if version == "2.1" and "build_wan21_vae" not in supported_builders():
        pytest.skip(f"the host ({host.version}) predates Wan: no comfy/ldm/wan")
    if version == "2.2":
        need_video_vae(host, "wan22")
    tv = engine(host)
    model = small_wan_vae(version)
    channels = 48 if version == "2.2" else 16
    z = latent((1, channels, 3, 3, 32), seed=9)
    want = model.decode(z)
    scale = 16 if version == "2.2" else 8
    dec = tv.make_tiled_decoder(model, tv.DecodeOptions(torch.device("cpu"), torch.float32, tile=16 * scale))
    got, report = dec.decode(z)
    assert dec.family == ("wan22" if version == "2.2" else "wan21") and dec.strips and dec.scale == scale
    assert max_tiles(report) == 2 and 16 + dec.halo < 32  # each crop misses part of the frame
    assert got.shape[2] == 1 + 4 * 2  # every frame, as the full decode
    assert_raw_exact(got, want, split=True)


@pytest.fixture(scope="module")
def wan22_vae(host: Host) -> Any:
    """The full-size Wan 2.2 VAE as comfy.sd builds it (705M parameters: stored bf16, run float32)."""
    need_video_vae(host, "wan22")
    state_dict = wan22_vae_state_dict(seed=3, dtype=torch.bfloat16)
    vae = host_vae(state_dict)
    del state_dict
    assert vae.latent_channels == 48 and type(vae.first_stage_model).__module__.endswith("vae2_2")
    yield vae
    del vae


def test_node_decodes_wan22_with_the_tiled_engine_exactly(
    host: Host, wan22_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the node with the host-built Wan 2.2 VAE: our engine runs (no fallback), the IMAGE has the
    stock layout (frames in the batch) and the pixels of the stock VAEDecode. (The latent is small, so
    here the crop is the frame; real crops are checked above on the same class.)"""
    tv = engine(host)
    reports = recorded_reports(monkeypatch, tv.WanTiledDecoder)
    z = latent((1, 48, 2, 2, 4), seed=10)
    want = stock_decode(host, wan22_vae, z)
    got = tiled_decode(host, wan22_vae, z)
    assert [r.family for r in reports] == ["wan22"]
    assert want.shape == (5, 32, 64, 3)
    assert_same_image(got, want, split=is_split(reports[0]))


@pytest.fixture(scope="module")
def hunyuan_vae(host: Host) -> Any:
    need_video_vae(host, "hunyuan_video")
    vae = host_vae(hunyuan_video_vae_state_dict(seed=4))
    assert vae.latent_dim == 3 and vae.latent_channels == 16
    return vae


def test_hunyuan_video_tiled_through_the_node_is_exactly_the_full_decode(
    host: Host, hunyuan_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HunyuanVideo's 3D KL VAE: clip-wide GroupNorm statistics, every frame in each strip, time
    upsampled inside the stages. Through the node with a budget for small tiles, then the engine with
    strips of 16 latent px at every stage."""
    tv = engine(host)
    reports = recorded_reports(monkeypatch, tv.KLTiledDecoder)
    z = latent((1, 16, 2, 3, 20), seed=11)  # 5 frames of 24x160
    want = stock_decode(host, hunyuan_vae, z)
    if refused(host, hunyuan_vae, "hunyuan_video", lambda: tiled_decode(host, hunyuan_vae, z), want, reports):
        return
    got = tiled_decode(host, hunyuan_vae, z, vram_budget=min_budget_gb(host, hunyuan_vae, tuple(z.shape)))
    assert len(reports) == 1 and max_tiles(reports[0]) >= 2
    assert want.shape == (5, 24, 160, 3)
    assert_same_image(got, want, split=True)
    raw, report = tv.make_tiled_decoder(
        hunyuan_vae.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32, tile=128)
    ).decode(z)
    assert all(n >= 2 for _, _, n in report.stages)  # every stage cut
    assert_raw_exact(raw, hunyuan_vae.first_stage_model.decode(z), split=True)


def test_hunyuan_video_cut_in_time_is_exactly_the_full_decode(
    host: Host, hunyuan_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A longer clip with chunks of frames: the causal reach read from the convolutions as a halo in
    time, the time upsample's first-frame rule mapped per chunk, clip-wide GroupNorm statistics. Through
    the node at the smallest budget (which needs time chunks), then the engine with forced chunks."""
    tv = engine(host)
    reports = recorded_reports(monkeypatch, tv.KLTiledDecoder)
    z = latent((1, 16, 5, 6, 4), seed=14)  # 17 frames of 48x32
    want = stock_decode(host, hunyuan_vae, z)
    if refused(host, hunyuan_vae, "hunyuan_video", lambda: tiled_decode(host, hunyuan_vae, z), want, reports):
        return
    got = tiled_decode(host, hunyuan_vae, z, vram_budget=min_budget_gb(host, hunyuan_vae, tuple(z.shape)))
    assert want.shape == (17, 48, 32, 3)
    assert len(reports) == 1 and reports[0].chunks, "the smallest budget cuts some stage in time"
    assert_same_image(got, want, split=True)
    options = tv.DecodeOptions(torch.device("cpu"), torch.float32, tile=32, frames=2)
    raw, report = tv.make_tiled_decoder(hunyuan_vae.first_stage_model, options).decode(z)
    assert sum(n >= 2 for n in report.chunks.values()) >= 4, report.chunks
    full = hunyuan_vae.first_stage_model.decode(z)
    assert_raw_exact(raw, full, split=True)
    options.stats = "merge"  # the GPU path: statistics merged over the chunks' cores in float64
    merged, _ = tv.make_tiled_decoder(hunyuan_vae.first_stage_model, options).decode(z)
    assert (merged - full).abs().max().item() < 1e-4
    # The mutation check: statistics over another extent than the host's fail by orders of magnitude.
    # The 0.18+ core normalises each run of 2 latent frames on its own: whole-clip statistics there; on
    # earlier hosts (whole-clip norms) statistics per run.
    cpu = tv.DecodeOptions(torch.device("cpu"), torch.float32)
    wrong = tv.make_tiled_decoder(hunyuan_vae.first_stage_model, cpu)
    wrong.carried = not wrong.carried
    assert (wrong.decode(z)[0] - full).abs().max().item() > 1e-3


def test_a_batch_of_clips_through_the_node_is_exactly_the_stock_decode(
    host: Host, hunyuan_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clips at once: frames of both in the IMAGE batch, in the stock order, with the stock pixels.
    The host decodes a CPU batch whole, where torch takes oneDNN for every convolution (N > 1); on the
    CPU the engine's tiles hold the whole batch too (one short clip alone would take the native kernel
    and round differently, by about 1e-6)."""
    reports = recorded_reports(monkeypatch, engine(host).KLTiledDecoder)
    z = latent((2, 16, 3, 4, 2), seed=16)  # 2 x 9 frames of 32x16
    want = stock_decode(host, hunyuan_vae, z)
    if refused(host, hunyuan_vae, "hunyuan_video", lambda: tiled_decode(host, hunyuan_vae, z), want, reports):
        return
    got = tiled_decode(host, hunyuan_vae, z, vram_budget=min_budget_gb(host, hunyuan_vae, tuple(z.shape)))
    assert want.shape == (18, 32, 16, 3) and len(reports) == 1
    assert_same_image(got, want, split=is_split(reports[0]))


def test_ltxv_batch_of_clips_through_the_node_is_exactly_the_stock_decode(
    host: Host, ltxv: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LTXV's tiles hold the whole batch. With timestep conditioning the host's own decode of a batch
    fails (its timestep embedding is built for one clip) unless it decodes clip by clip, which the
    engine then does: the stock pixels are those of the clips decoded one after the other."""
    z = latent((2, 128, 2, 3, 6), seed=17)
    torch.manual_seed(24)
    stock_fails = False
    try:
        want = stock_decode(host, ltxv, z)
    except RuntimeError:
        assert ltxv.first_stage_model.timestep_conditioning
        stock_fails = True
        torch.manual_seed(24)
        want = torch.cat([stock_decode(host, ltxv, z[b : b + 1]) for b in range(2)])
    reports = recorded_reports(monkeypatch, engine(host).LTXVTiledDecoder)

    def fallback() -> torch.Tensor:
        if not stock_fails:
            return seeded(24, lambda: tiled_decode(host, ltxv, z))
        with pytest.raises(RuntimeError):  # the host's own decode of this batch fails, as stock
            tiled_decode(host, ltxv, z)
        return want

    if refused(host, ltxv, "ltxv", fallback, want, reports):
        return
    torch.manual_seed(24)
    got = tiled_decode(host, ltxv, z, vram_budget=min_budget_gb(host, ltxv, tuple(z.shape)))
    assert want.shape[0] == 2 * 5 and reports
    assert_same_image(got, want, split=any(is_split(r) for r in reports))
    calls: list[tuple[int, int]] = []
    options = engine(host).DecodeOptions(
        torch.device("cpu"), torch.float32, progress=lambda *c: calls.append(c)
    )
    engine(host).make_tiled_decoder(ltxv.first_stage_model, options).decode(z)
    assert calls[-1][0] == calls[-1][1] and len({total for _, total in calls}) == 1  # one bar, filled once
    assert all(a[0] <= b[0] for a, b in zip(calls[:-1], calls[1:], strict=True))


def test_hunyuan_video_fast_mode_stays_close(host: Host, hunyuan_vae: Any) -> None:
    z = latent((1, 16, 2, 2, 20), seed=12)
    want = stock_decode(host, hunyuan_vae, z)
    got = tiled_decode(host, hunyuan_vae, z, mode="fast")
    assert got.shape == want.shape and (got - want).abs().max().item() < 1e-4


@pytest.fixture(scope="module", params=sorted(LTXV_TINY_CONFIGS))
def ltxv(host: Host, request: pytest.FixtureRequest) -> Any:
    """A small LTXV VAE the host builds from the file's config metadata (LTXV_TINY_CONFIGS)."""
    need_video_vae(host, "ltxv")
    if request.param == "2" and not ltxv_sized_by_config():
        pytest.skip(f"the host ({host.version}) predates LTX-2: its VideoVAE has no decoder_base_channels")
    state_dict, metadata = ltxv_vae(request.param, seed=5)
    vae = comfy_vae_with_metadata(state_dict, metadata)
    assert vae.latent_channels == 128 and type(vae.first_stage_model).__name__ == "VideoVAE"
    return vae


def comfy_vae_with_metadata(state_dict: dict, metadata: dict) -> Any:
    import comfy.sd

    return comfy.sd.VAE(sd=state_dict, metadata=metadata)


def test_ltxv_tiled_through_the_node_is_exactly_the_full_decode(
    host: Host, ltxv: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LTXV: per-pixel norms with whole-activation means, timestep modulation, the host's frame noise
    (drawn from the same generator state: both decodes are seeded alike), depth-to-space in space and
    time. Through the node with a budget for small tiles, then the engine with strips of 16 px at
    every stage."""
    tv = engine(host)
    reports = recorded_reports(monkeypatch, tv.LTXVTiledDecoder)
    z = latent((1, 128, 2, 3, 34), seed=13)
    torch.manual_seed(21)
    want = stock_decode(host, ltxv, z)
    if refused(host, ltxv, "ltxv", lambda: seeded(21, lambda: tiled_decode(host, ltxv, z)), want, reports):
        return
    torch.manual_seed(21)
    got = tiled_decode(host, ltxv, z, vram_budget=min_budget_gb(host, ltxv, tuple(z.shape)))
    assert len(reports) == 1 and reports[0].family == "ltxv" and max_tiles(reports[0]) >= 2
    assert want.shape[0] == 5
    assert_same_image(got, want, split=True)
    raw, report, raw_want = ltxv_raw_decodes(host, ltxv, z, 22, tile=16)
    assert all(n >= 2 for _, _, n in report.stages)  # every stage cut
    assert_raw_exact(raw, raw_want, split=True)


def seeded(seed: int, run: Callable[[], torch.Tensor]) -> torch.Tensor:
    torch.manual_seed(seed)
    return run()


def ltxv_raw_decodes(host: Host, ltxv: Any, z: torch.Tensor, seed: int, **options: Any) -> tuple:
    """(engine output, report, host output): both raw decodes of ``z`` from the same generator state."""
    tv = engine(host)
    dec = tv.make_tiled_decoder(
        ltxv.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32, **options)
    )
    torch.manual_seed(seed)
    raw_want = ltxv.first_stage_model.decode(z)
    torch.manual_seed(seed)
    raw, report = dec.decode(z)
    return raw, report, raw_want


def test_ltxv_cut_in_time_is_exactly_the_full_decode(host: Host, ltxv: Any, tmp_path: Path) -> None:
    """LTXV's decoder pads time on both sides: chunks read a halo before and after, the depth-to-space
    time upsample drops the first frame of each chunk as it does the clip's. No RAM for parks here: they
    are memory-mapped files, removed at the end."""
    tv = engine(host)
    # A decoder this narrow (LTX-2's tiny config) crosses torch's CPU kernel line (see
    # tiles.min_crop_frames) only with taller frames: else no stage could be cut in time on a CPU.
    rows = 6 if ltxv.first_stage_model.decoder.conv_in.out_channels >= 512 else 24
    z = latent((1, 128, 4, rows, 6), seed=15)
    want = seeded(23, lambda: stock_decode(host, ltxv, z))
    if refused(host, ltxv, "ltxv", lambda: seeded(23, lambda: tiled_decode(host, ltxv, z)), want):
        return
    raw, report, raw_want = ltxv_raw_decodes(
        host, ltxv, z, 23, frames=2, park_ram_bytes=0, park_dir=str(tmp_path)
    )
    assert len(report.chunks) >= 2, report.chunks
    assert report.parks_on_disk == len(report.stages) - 1 and list(tmp_path.iterdir()) == []
    assert_raw_exact(raw, raw_want, split=True)
    shape, cpu = tuple(z.shape), (torch.device("cpu"), torch.float32)
    least = tv.make_tiled_decoder(ltxv.first_stage_model, tv.DecodeOptions(*cpu)).minimum_peak(shape, 4)
    strips = tv.make_tiled_decoder(ltxv.first_stage_model, tv.DecodeOptions(*cpu, tile=16))
    assert least < strips.predicted_peak(shape, 4), "time chunks lower the least memory a decode needs"


def test_ltxv_fast_mode_stays_close(host: Host, ltxv: Any) -> None:
    """Fast: each tile takes its PixelNorm means from its own pixels (the same numbers, rounded otherwise)."""
    z = latent((1, 128, 2, 2, 34), seed=14)
    torch.manual_seed(23)
    want = stock_decode(host, ltxv, z)
    if refused(host, ltxv, "ltxv", lambda: seeded(23, lambda: tiled_decode(host, ltxv, z)), want):
        return
    torch.manual_seed(23)
    got = tiled_decode(host, ltxv, z, mode="fast", vram_budget=min_budget_gb(host, ltxv, tuple(z.shape)))
    assert got.shape == want.shape and (got - want).abs().max().item() < 1e-4


def test_video_stage_estimates_cover_the_measured_peak(host: Host, hunyuan_vae: Any, ltxv: Any) -> None:
    """Per-tile activation estimates vs the live bytes each stage really peaks at (PeakLiveBytes), on the
    host's HunyuanVideo and LTXV blocks: at most 1.1x the estimate, and not wildly pessimistic."""
    from comfyui_headroom.memory.tiled_vae.groupnorm import GroupStats, apply_group_norm
    from comfyui_headroom.memory.tiled_vae.kl import estimate_stage
    from comfyui_headroom.memory.tiled_vae.ltxv import apply_norm, whole_mean
    from headroom_testing.measure import PeakLiveBytes

    tv = engine(host)
    frames, rows, side = 2, 6, 20
    skip_kl = refused(host, hunyuan_vae, "hunyuan_video")
    kl = (
        None
        if skip_kl
        else tv.make_tiled_decoder(
            hunyuan_vae.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32)
        )
    )
    for stage in [] if kl is None else kl.stages:
        n, height = stage.frames(frames), rows * 2**stage.level
        crops = [latent((1, c, n, height, side), seed=i) for i, c in enumerate(stage.in_channels)]
        stats = GroupStats(torch.zeros(1, stage.norm.num_groups), torch.ones(1, stage.norm.num_groups))
        with PeakLiveBytes() as meter:
            out = stage.body(
                apply_group_norm(crops[0], stats, stage.norm.weight, stage.norm.bias, True), *crops[1:]
            )
            del out
        predicted = estimate_stage(stage, side - 2 * stage.halo, 4, True, n, height)
        assert 0.3 * predicted <= meter.peak <= 1.1 * predicted, stage.name

    if refused(host, ltxv, "ltxv"):
        return
    lt = tv.make_tiled_decoder(ltxv.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32))
    shape = (1, 128, frames, rows, side)
    _, bodies = lt._head(latent(shape))
    stages = zip(lt.plan, bodies, lt._specs(shape), lt.layouts(shape, 4), strict=True)
    for plan, body, spec, (_, estimate, _) in stages:
        height, width = rows * spec.scale, side * spec.scale
        channels = {
            "x": plan.block.in_channels if plan.kind == "res_b" else plan.channels,
            "t": plan.channels,
        }
        crops = [latent((1, channels[k], spec.frames, height, width), seed=1) for k in plan.inputs]
        with PeakLiveBytes() as meter:
            copies = [c.clone() for c in crops]  # a tile's crops are copies (contiguous) in the engine
            out = body(
                apply_norm(plan.norm, copies[0], whole_mean(plan.norm, crops[0])),
                *copies[1:],
                (0, height, 0, width),
            )
            del out, copies
        predicted = estimate(width - 2 * plan.halo, spec.frames)
        assert 0.3 * predicted <= meter.peak <= 1.1 * predicted, plan.name


def test_wan22_tile_estimate_covers_the_measured_peak(host: Host, wan22_vae: Any) -> None:
    """Wan 2.2's per-output-pixel coefficient (measured on this full-size decoder) against a tile run."""
    from headroom_testing.measure import PeakLiveBytes

    tv = engine(host)
    dec = tv.make_tiled_decoder(
        wan22_vae.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32)
    )
    z = latent((1, 48, 3, 4, 6), seed=15)
    parked = dec._head(z, _Quiet())
    out = torch.empty(1, 3, 9, 4 * 16, 6 * 16)
    with PeakLiveBytes() as meter:
        dec._tiles(parked, slice(0, 1), 6, out, _Quiet())
    predicted = dec.tile_bytes(6, 4, (4, 6))
    assert 0.3 * predicted <= meter.peak <= 1.1 * predicted


class _Quiet:
    def step(self, units: int = 1) -> None:
        pass


def test_a_clip_too_long_for_the_budget_is_refused_with_the_frames_that_fit(
    host: Host, hunyuan_vae: Any
) -> None:
    """Runs of frames bound the tiles, but the head grows with the clip: a budget that fits one latent
    frame of this size and not nine is refused up front, naming the most frames that fit."""
    tv = engine(host)
    probe = tv.make_tiled_decoder(
        hunyuan_vae.first_stage_model, tv.DecodeOptions(torch.device("cpu"), torch.float32)
    )
    one, nine = (probe.minimum_peak((1, 16, t, 6, 4), 4) for t in (1, 9))
    assert one < nine
    budget = f"{(hunyuan_vae.patcher.model_size() + one) / (1 << 30):.9f}"
    with pytest.raises(ValueError, match=r"or at most [1-8] latent frames \(\d+ frames\) of this size"):
        tiled_decode(host, hunyuan_vae, latent((1, 16, 9, 6, 4)), vram_budget=budget)
