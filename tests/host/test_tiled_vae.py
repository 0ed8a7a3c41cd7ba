"""Tiled VAE Decode (Headroom) inside the real host: exactly the host's own full decode.

Every comparison is against the host's ``VAEDecode`` on the same VAE object, in float32 on the CPU, with
tiles smaller than the image (each test asserts that several tiles ran). The VAEs are the hosts' own
full-size architectures with random weights (tests/headroom_testing/tiny_models.py); latents stay small.
"Exact" is ``headroom_testing.exactness.assert_exact``: bitwise where the decode is unsplit or this
machine's convolution kernels were measured to round alike for every tile shape, else within 1e-5.
KL image VAEs here; the video VAEs (Wan, HunyuanVideo, LTXV) in test_tiled_vae_video.py.
"""

from __future__ import annotations

import importlib
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from headroom_testing.exactness import TOLERANCE, assert_exact, is_split, max_abs_diff, max_tiles
from headroom_testing.harness import Host, PromptInvalid
from headroom_testing.tiled_vae_host import (
    NODE,
    assert_same_image,
    engine,
    engine_decode,
    host_vae,
    latent,
    recorded_reports,
    stock_decode,
    tiled_decode,
    tiled_decode_text,
)
from headroom_testing.tiny_models import (
    SD_VAE_DDCONFIG,
    _init_state_dict,
    _on_meta,
    build_tiny_vae,
    flux_vae_state_dict,
)

pytestmark = pytest.mark.host


@pytest.fixture(autouse=True)
def no_grad() -> Any:
    with torch.no_grad():  # as the host's executor runs nodes
        yield


@pytest.fixture(scope="module")
def sd_vae(host: Host) -> Any:
    import comfy.utils

    path = build_tiny_vae(host.models_dir, name="tiled_vae_sd.safetensors", dtype=torch.float32)
    host.register_models_dir(host.models_dir)
    vae = host_vae(comfy.utils.load_torch_file(str(path)))
    vae.file_name = path.name
    return vae


@pytest.fixture(scope="module")
def flux_vae(host: Host) -> Any:
    """A 16-channel KL VAE (the Flux/SD3 layout: no quant convs) as the host builds it."""
    from comfy.ldm.models.autoencoder import AutoencoderKL

    ddconfig = {**SD_VAE_DDCONFIG, "z_channels": 16}
    if host.legacy:  # the 2024 host only detects 4-channel VAEs; its config path builds any AutoencoderKL
        model = _on_meta(lambda: AutoencoderKL(ddconfig=dict(ddconfig), embed_dim=16))
        sd = {k: v.float() for k, v in _init_state_dict(model, 1, torch.float32).items()}
        return host_vae(sd, {"params": {"ddconfig": ddconfig, "embed_dim": 16}})
    vae = host_vae(flux_vae_state_dict(seed=1))
    assert vae.latent_channels == 16 and not hasattr(vae.first_stage_model, "post_quant_conv")
    return vae


@pytest.fixture(scope="module")
def sd_case(host: Host, sd_vae: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A 160x96 image latent and the host's own decode of it (shared: full decodes are slow on a CPU)."""
    z = latent((1, 4, 20, 12))
    with torch.no_grad():
        return z, stock_decode(host, sd_vae, z)


# -- KL image VAEs -----------------------------------------------------------------------------------


def test_sd_vae_tiled_is_exactly_the_full_decode(host: Host, sd_vae: Any, sd_case: tuple) -> None:
    z, want = sd_case
    got, report = engine_decode(host, sd_vae, z, tile=64)
    assert report.family == "kl" and max_tiles(report) >= 4
    assert all(n >= 2 for _, _, n in report.stages)  # really tiled, at every level
    assert_same_image(got, want, split=True)


def test_per_tile_statistics_fail_the_exactness_check_by_far(
    host: Host, sd_vae: Any, sd_case: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation the exactness check must catch: each tile normalised with its own GroupNorm statistics
    (what stock tiled decoders do) instead of the whole image's. Same tiles, same halos, same crops."""
    kl = importlib.import_module(engine(host).KLTiledDecoder.__module__)  # as the host imported it
    groupnorm = importlib.import_module(kl.__name__.rpartition(".")[0] + ".groupnorm")
    whole_image = kl.apply_group_norm

    def per_tile(x: torch.Tensor, stats: Any, weight: Any, bias: Any, exact: bool) -> torch.Tensor:
        own = groupnorm.kernel_stats(x, stats.mean.shape[1], 1e-6)  # the tile's own; 1e-6: the VAEs' eps
        return whole_image(x, own, weight, bias, exact)

    monkeypatch.setattr(kl, "apply_group_norm", per_tile)
    z, want = sd_case
    got, report = engine_decode(host, sd_vae, z, tile=64)
    assert max_tiles(report) >= 4
    diff = max_abs_diff(got, want)
    assert diff > 100 * TOLERANCE, f"per-tile statistics are only {diff:.3g} off"
    with pytest.raises(AssertionError, match="differs by"):
        assert_exact(got, want, split=True)


def test_node_with_a_small_budget_tiles_and_is_exactly_the_full_decode(host: Host, sd_vae: Any) -> None:
    tv = engine(host)
    z = latent((2, 4, 8, 18), seed=1)  # a batch of two
    want = stock_decode(host, sd_vae, z)
    calls: list[int] = []
    original = tv.KLTiledDecoder.decode

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        calls.append(max_tiles(out[1]))
        return out

    weights_gb = sd_vae.patcher.model_size() / (1 << 30)
    tv.KLTiledDecoder.decode = spy
    try:
        got = tiled_decode(host, sd_vae, z, vram_budget=f"{weights_gb + 0.04:.3f}", mode="exact")
    finally:
        tv.KLTiledDecoder.decode = original
    assert calls and calls[0] > 1
    assert_same_image(got, want, split=True)


def test_flux_16_channel_vae_tiled_is_exactly_the_full_decode(host: Host, flux_vae: Any) -> None:
    z = latent((1, 16, 12, 20), seed=2)
    want = stock_decode(host, flux_vae, z)
    got, report = engine_decode(host, flux_vae, z, tile=64)
    assert max_tiles(report) >= 4
    assert_same_image(got, want, split=True)


def test_gpu_statistics_path_matches_to_rounding(host: Host, sd_vae: Any, sd_case: tuple) -> None:
    """The merged (count, mean, M2) statistics and float32 GroupNorm the CUDA path uses, run on CPU."""
    z, want = sd_case
    got, report = engine_decode(host, sd_vae, z, tile=64, stats="merge", exact=False)
    assert max_tiles(report) >= 4
    assert 0.0 < (got - want).abs().max().item() < 1e-4


def test_fast_mode_through_the_node_stays_close(host: Host, sd_vae: Any) -> None:
    z = latent((1, 4, 8, 8), seed=4)
    want = stock_decode(host, sd_vae, z)
    got = tiled_decode(host, sd_vae, z, mode="fast")
    assert got.shape == want.shape and (got - want).abs().max().item() < 1e-4


def test_workflow_runs_with_progress_and_matches_stock_decode(
    host: Host, sd_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the executor: VAEEncode of a noise image, then our node and the stock one side by side."""
    import comfy.utils
    from PIL import Image

    ticks: list[tuple] = []
    monkeypatch.setattr(
        comfy.utils, "PROGRESS_BAR_HOOK", lambda *a, **k: ticks.append((*a[:2], k.get("node_id")))
    )
    reports = recorded_reports(monkeypatch, engine(host).KLTiledDecoder)
    input_dir = Path(host.folder_paths.get_input_directory())
    noise = (latent((96, 80, 3), seed=5).sigmoid() * 255).to(torch.uint8).numpy()
    Image.fromarray(noise).save(input_dir / "tiled_vae_noise.png")
    prompt = {
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": sd_vae.file_name}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "tiled_vae_noise.png"}},
        "3": {"class_type": "VAEEncode", "inputs": {"pixels": ["2", 0], "vae": ["1", 0]}},
        "4": {"class_type": NODE, "inputs": {"samples": ["3", 0], "vae": ["1", 0], "vram_budget": "auto", "mode": "exact"}},  # noqa: E501
        "5": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["1", 0]}},
        "6": {"class_type": "PreviewImage", "inputs": {"images": ["4", 0]}},
        "7": {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}},
    }  # fmt: skip
    result = host.run(prompt)
    assert len(reports) == 1
    assert_same_image(result.outputs["4"][0][0], result.outputs["5"][0][0], split=is_split(reports[0]))
    # M19: the host hands the node's text to the browser (the executed message's ui), as the Stream nodes'
    assert result.ui["4"]["text"][0].startswith(("fits whole: decoded in one pass", "decoded in ")), result.ui
    ours = [t for t in ticks if t[2] in (None, "4")]
    assert ours and ours[-1][0] == ours[-1][1]  # the bar reaches its total
    if not host.legacy:
        assert {t[2] for t in ticks} >= {"4"}


def test_vae_is_loaded_with_a_per_tile_reservation(
    host: Host, sd_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import comfy.model_management as mm

    seen: list[int] = []
    original = mm.load_models_gpu

    def record(models: list, memory_required: int = 0, *args: Any, **kwargs: Any) -> Any:
        seen.append(memory_required)
        return original(models, memory_required, *args, **kwargs)

    monkeypatch.setattr(mm, "load_models_gpu", record)
    tv = engine(host)
    monkeypatch.setattr(
        tv.KLTiledDecoder, "decode", lambda self, z: (torch.zeros(1, 3, 512, 512), tv.DecodeReport("kl"))
    )
    z = latent((1, 4, 64, 64), seed=6)  # 512x512: the host would reserve the full frame
    tiled_decode(host, sd_vae, z, vram_budget="0.5")
    full_frame = sd_vae.memory_used_decode(z.shape, sd_vae.vae_dtype)
    assert seen and all(0 < m < full_frame / 4 for m in seen)
    assert max(seen) <= 0.5 * (1 << 30) - sd_vae.patcher.model_size()


@pytest.mark.parametrize("budget", ["lots", "-2", "0", "nan"])
def test_bad_budget_names_the_node_and_the_input(host: Host, sd_vae: Any, budget: str) -> None:
    with pytest.raises(ValueError, match=r"Tiled VAE Decode \(exact, low VRAM\): input vram_budget"):
        tiled_decode(host, sd_vae, latent((1, 4, 8, 8)), vram_budget=budget)


def test_budget_below_the_minimum_says_what_is_needed(host: Host, sd_vae: Any) -> None:
    with pytest.raises(
        ValueError, match=r"needs .* GiB .*; input vram_budget .0.2. less the VAE.s weights \(\d\.\d\d GiB\)"
    ):
        tiled_decode(host, sd_vae, latent((1, 4, 8, 8)), vram_budget="0.2")  # less than the weights


def test_bad_budget_in_a_workflow_fails_that_node_clearly(host: Host, sd_vae: Any) -> None:
    prompt = {
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": sd_vae.file_name}},
        "2": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": NODE, "inputs": {"samples": ["2", 0], "vae": ["1", 0], "vram_budget": "six", "mode": "exact"}},  # noqa: E501
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }  # fmt: skip
    with pytest.raises(PromptInvalid, match="vram_budget"):  # refused at validation, before any node runs
        host.run(prompt)


def test_unsupported_vae_falls_back_to_the_host_decode(host: Host, caplog: pytest.LogCaptureFixture) -> None:
    import comfy.taesd.taesd as taesd

    model = _on_meta(lambda: taesd.TAESD())
    vae = host_vae(_init_state_dict(model, 3, torch.float32))
    z = latent((1, 4, 8, 8), seed=7)
    with caplog.at_level(logging.INFO, logger="headroom"):
        got = tiled_decode(host, vae, z)
    want = stock_decode(host, vae, z)
    assert got.dtype == want.dtype and torch.equal(got, want)  # the host's own decode, both times
    assert "using the host's own decode" in caplog.text
    said = tiled_decode_text(host, vae, z)
    assert said.startswith("decoded by ComfyUI's own VAE decode, not in tiles:\n"), said  # M19
    assert "kl: " in said and "Unsupported" not in said, said  # each engine's reason, said plainly


# -- what the node says on itself after a run (M19) --------------------------------------------------


def test_the_node_says_it_decoded_whole_in_one_pass(host: Host, sd_vae: Any) -> None:
    """A small image on the CPU with "auto": every stage in one tile; the node says so, and what sized it."""
    said = tiled_decode_text(host, sd_vae, latent((1, 4, 8, 12), seed=8))
    lines = said.splitlines()
    assert lines[0] == "fits whole: decoded in one pass (exact)", said
    assert lines[1] == "kl VAE, 1 image, 96×64 px", said
    assert (
        "tiles sized to 2.00 GiB of activations:" in lines
        and "  auto on the CPU: a fixed size per tile" in lines
    )
    assert re.search(r"^predicted peak \d+\.\d\d GiB of activations$", said, re.M), said  # GiB, as everywhere
    assert "MiB" not in said and " GB" not in said, said


def test_the_node_says_its_tiles_and_what_sized_them(host: Host, sd_vae: Any) -> None:
    """A budget just above the VAE's weights: the node names its tiles per level of the decoder and the
    budget input that sized them."""
    weights_gb = sd_vae.patcher.model_size() / (1 << 30)
    budget = f"{weights_gb + 0.04:.3f}"
    said = tiled_decode_text(host, sd_vae, latent((2, 4, 8, 18), seed=1), vram_budget=budget, mode="fast")
    first = re.match(r"decoded in (\d+) tiles \(fast, approximate\)\nkl VAE, 2 images, 144×64 px\n", said)
    assert first and int(first[1]) > 2 * 25, said  # more tiles than the 25 stages of each image
    levels = re.findall(r"^  (\S+): (1 tile|up to (\d+) tiles), (\d+) px$", said, re.M)
    assert [level for level, *_ in levels] == ["up3", "up2", "up1", "up0", "out"], said
    assert any(most and int(most) > 1 for _, _, most, _ in levels), said
    assert f"input vram_budget '{budget}' less the VAE's weights" in said, said


# -- Wan 2.1 (causal video VAE) ----------------------------------------------------------------------


LOOK_ALIKES = {
    # name: (decoder module, decoder params) as comfy/sd.py builds them inside an AutoencodingEngine
    "HunyuanImage 2.1 (32x, pixel-shuffle up, latent skip into conv_in)": (
        "comfy.ldm.hunyuan_video.vae",
        {"block_out_channels": [128, 256, 512, 512, 1024, 1024], "in_channels": 3, "out_channels": 3,
         "num_res_blocks": 2, "ffactor_spatial": 32, "upsample_match_channel": True, "z_channels": 64},
    ),
    "HunyuanVideo 1.5 (16x, GroupNorm, 3D)": (
        "comfy.ldm.hunyuan_video.vae_refiner",
        {"block_out_channels": [128, 256, 512, 1024, 1024], "in_channels": 3, "out_channels": 3,
         "num_res_blocks": 2, "ffactor_spatial": 16, "ffactor_temporal": 4, "upsample_match_channel": True,
         "refiner_vae": False, "z_channels": 32},
    ),
    "SVD video decoder (time mixing)": (
        "comfy.ldm.modules.temporal_ae",
        {**SD_VAE_DDCONFIG, "video_kernel_size": [3, 1, 1], "alpha": 0.0},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(LOOK_ALIKES))
def test_look_alike_decoders_are_left_to_the_host(host: Host, name: str) -> None:
    """Decoders with the KL decoder's attribute names but other maths must fall back, not be tiled."""
    import importlib.util

    from comfy.ldm.models.autoencoder import AutoencodingEngine

    module, params = LOOK_ALIKES[name]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing too
        found = False
    if not found:
        pytest.skip(f"the host ({host.version}) has no {module}")
    decoder = module + (".VideoDecoder" if module.endswith("temporal_ae") else ".Decoder")
    encoder = (
        "comfy.ldm.modules.diffusionmodules.model.Encoder" if "temporal" in module else module + ".Encoder"
    )
    model = _on_meta(
        lambda: AutoencodingEngine(
            regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
            encoder_config={"target": encoder, "params": dict(params)},
            decoder_config={"target": decoder, "params": dict(params)},
        )
    )
    tv = engine(host)
    with pytest.raises(tv.Unsupported):
        tv.make_tiled_decoder(model, tv.DecodeOptions(torch.device("cpu"), torch.float32))
