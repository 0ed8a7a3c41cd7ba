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
    path = Path(__file__).resolve().parents[1] / "unit" / "test_tiled_vae.py"
    spec = importlib.util.spec_from_file_location("tiled_vae_unit_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model().eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_tiled_decode_matches_and_stays_in_budget(dtype: torch.dtype) -> None:
    device = torch.device("cuda")
    model = stand_in().to(device, dtype)
    z = torch.randn(1, 4, 64, 64, device=device, dtype=dtype)
    with torch.no_grad():
        want = model.decode(z).float().cpu()
        again = model.decode(z).float().cpu()
    spread = (again - want).abs().max().item()  # the full decode's own run-to-run spread
    budget = 64 << 20
    options = DecodeOptions(device, dtype, budget_bytes=budget, pin=True, exact=False)
    engine = make_tiled_decoder(model, options)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        got, report = engine.decode(z)
    peak = torch.cuda.max_memory_allocated() - base
    assert report.max_tiles_in_a_stage > 1
    assert peak <= 1.1 * report.predicted_peak_bytes and peak <= budget
    tolerance = 1e-4 if dtype == torch.float32 else max(spread, 0.0) + 0.05
    assert (got - want).abs().max().item() <= tolerance
