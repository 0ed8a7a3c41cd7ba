"""The tiled VAE engine on CUDA: parks in pinned host memory, merged statistics on the device, output
within rounding of the full decode, device peak within the per-tile prediction and the budget.
Skipped (with the reason) where there is no CUDA device."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from comfyui_headroom.memory.tiled_vae import DecodeOptions, make_tiled_decoder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]


def stand_in() -> torch.nn.Module:
    """The unit tests' small decoder with the host KL decoder's module structure."""
    path = Path(__file__).resolve().parents[1] / "unit" / "test_tiled_vae_decode.py"
    spec = importlib.util.spec_from_file_location("tiled_vae_unit_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model().eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_tiled_decode_matches_and_stays_in_budget(dtype: torch.dtype) -> None:
    device = torch.device("cuda")
    model = stand_in().to(device, dtype)
    z = torch.randn(1, 4, 64, 64, device=device, dtype=dtype)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        want = model.decode(z).float().cpu()
        full_peak = torch.cuda.max_memory_allocated() - base
        again = model.decode(z).float().cpu()
    spread = (again - want).abs().max().item()  # the full decode's own run-to-run spread
    # A third of what the whole decode takes: it must tile (a fixed 64 MiB held the whole 512x512
    # decode of the stand-in on an H200, one tile, and the test failed)
    budget = full_peak // 3
    options = DecodeOptions(device, dtype, budget_bytes=budget, pin=True, exact=False)
    engine = make_tiled_decoder(model, options)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        got, report = engine.decode(z)
    peak = torch.cuda.max_memory_allocated() - base
    assert max(n for _, _, n in report.stages) > 1
    assert peak <= 1.1 * report.predicted_peak_bytes and peak <= budget
    tolerance = 1e-4 if dtype == torch.float32 else max(spread, 0.0) + 0.05
    assert (got - want).abs().max().item() <= tolerance


@pytest.fixture
def no_tf32() -> object:
    """Full float32 convolutions: TF32 rounds differently for a tile and for the whole frame."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("family", ["wan22", "ltxv"])
def test_cuda_video_decode_matches_and_stays_in_budget(host: object, family: str, no_tf32: object) -> None:
    """The video engines on CUDA (square tiles, each PixelNorm per tile): the host's own classes at a
    small size, float32, against their own full decode on the same device."""
    from headroom_testing.tiny_models import host_video_vaes, ltxv_vae, small_wan_vae

    if family not in host_video_vaes():
        pytest.skip(f"the host has no {family} VAE")
    device = torch.device("cuda")
    if family == "wan22":
        model = small_wan_vae("2.2").to(device)
        z = torch.randn(1, 48, 3, 20, 20, device=device)
    else:
        import comfy.sd

        state_dict, metadata = ltxv_vae("0.9.1", seed=5)
        model = comfy.sd.VAE(sd=state_dict, metadata=metadata).first_stage_model.to(device, torch.float32)
        z = torch.randn(1, 128, 2, 20, 20, device=device)
    with torch.no_grad():
        torch.manual_seed(3)  # LTXV draws noise while decoding; both decodes draw the same
        want = model.decode(z).float().cpu()
    budget = 64 << 20
    engine = make_tiled_decoder(model, DecodeOptions(device, torch.float32, budget_bytes=budget, pin=True))
    assert not engine.strips  # squares on a GPU
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        torch.manual_seed(3)
        got, report = engine.decode(z)
    peak = torch.cuda.max_memory_allocated() - base
    assert max(n for _, _, n in report.stages) > 1
    assert peak <= 1.1 * report.predicted_peak_bytes
    assert got.shape == want.shape and (got - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", ["hunyuan_video", "ltxv"])
def test_cuda_video_cut_in_time_matches(host: object, family: str, no_tf32: object) -> None:
    """Runs of frames on CUDA (merged GroupNorm statistics for HunyuanVideo, per-tile PixelNorm for
    LTXV): the host's own classes, float32, against their own full decode on the same device."""
    import comfy.sd

    from headroom_testing.tiny_models import host_video_vaes, hunyuan_video_vae_state_dict, ltxv_vae

    if family not in host_video_vaes():
        pytest.skip(f"the host has no {family} VAE")
    device = torch.device("cuda")
    if family == "hunyuan_video":
        vae = comfy.sd.VAE(sd=hunyuan_video_vae_state_dict(seed=4))
        z = torch.randn(1, 16, 5, 16, 16, device=device)
    else:
        state_dict, metadata = ltxv_vae("0.9.1", seed=5)
        vae = comfy.sd.VAE(sd=state_dict, metadata=metadata)
        z = torch.randn(1, 128, 4, 12, 12, device=device)
    model = vae.first_stage_model.to(device, torch.float32)
    with torch.no_grad():
        torch.manual_seed(3)
        want = model.decode(z).float().cpu()
        engine = make_tiled_decoder(model, DecodeOptions(device, torch.float32, frames=2, pin=True))
        torch.manual_seed(3)
        got, report = engine.decode(z)
    assert len(report.chunks) >= 2, report.chunks
    assert got.shape == want.shape and (got - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", ["wan22", "hunyuan_video", "ltxv", "ltx2"])
def test_cuda_bf16_video_decode_is_as_close_as_the_full_bf16_decode(
    host: object, family: str, no_tf32: object
) -> None:
    """bfloat16 on CUDA for every video family (HunyuanVideo also decodes Kandinsky 5; LTX-2 / 2.3 by its
    small config), cut in space and in runs of frames: against the float32 full decode, the tiled bf16
    decode is off by no more than about what the full bf16 decode is off by itself."""
    import comfy.sd

    from headroom_testing.tiny_models import (
        host_video_vaes,
        hunyuan_video_vae_state_dict,
        ltxv_sized_by_config,
        ltxv_vae,
        small_wan_vae,
    )

    kind = "ltxv" if family == "ltx2" else family
    if kind not in host_video_vaes() or (family == "ltx2" and not ltxv_sized_by_config()):
        pytest.skip(f"the host has no {family} VAE")
    device = torch.device("cuda")
    if family == "wan22":
        model, z = small_wan_vae("2.2"), torch.randn(1, 48, 3, 20, 20)
    elif family == "hunyuan_video":
        model, z = (
            comfy.sd.VAE(sd=hunyuan_video_vae_state_dict(seed=4)).first_stage_model,
            torch.randn(1, 16, 5, 16, 16),
        )
    else:
        state_dict, metadata = ltxv_vae("0.9.1" if family == "ltxv" else "2", seed=5)
        model = comfy.sd.VAE(sd=state_dict, metadata=metadata).first_stage_model
        z = torch.randn(1, 128, 4, 12, 12)
    outputs = {}
    for dtype, tiled in ((torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)):
        model = model.to(device, dtype)
        zd = z.to(device, dtype)
        with torch.no_grad():
            torch.manual_seed(3)
            if tiled:
                options = DecodeOptions(device, dtype, budget_bytes=32 << 20, frames=2, pin=True)
                out, report = make_tiled_decoder(model, options).decode(zd)
                assert max(n for _, _, n in report.stages) > 1
            else:
                out = model.decode(zd)
        outputs[(dtype, tiled)] = out.float().cpu()
    want = outputs[(torch.float32, False)]
    full_error = (outputs[(torch.bfloat16, False)] - want).abs().max().item()
    tiled_error = (outputs[(torch.bfloat16, True)] - want).abs().max().item()
    assert tiled_error <= 2 * full_error + 1e-2, (tiled_error, full_error)
