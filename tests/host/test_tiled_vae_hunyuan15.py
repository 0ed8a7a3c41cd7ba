"""Tiled VAE Decode on HunyuanVideo 1.5's VAE (32 latent channels), inside the real host.

The host's own classes (``comfy.ldm.hunyuan_video.vae_refiner``) at a small width, compared with the
host's own full decode of the same module, in float32 on the CPU, every decode cut into strips narrower
than the frame; "exact" is ``headroom_testing.exactness``'s. The up path has no statistics to get wrong
(its RMS_norm is per pixel): what a wrong split breaks is the halo and the causal carry, and the mutation
tests show both fail by far.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from headroom_testing.exactness import TOLERANCE, assert_exact, max_tiles
from headroom_testing.harness import Host
from headroom_testing.tiled_vae_host import engine, latent
from headroom_testing.tiny_video_vaes import hunyuan15_autoencoder, hunyuan15_missing

pytestmark = pytest.mark.host

# The host's HunyuanVideo 1.5 config (comfy/sd.py) at 1/16 of its widths: 5 levels, 16x in space, 4x in
# time, the latent's 32 channels repeated into conv_in's output as the host does.
SMALL_CONFIG = {
    "block_out_channels": [16, 16, 32, 32, 64], "in_channels": 3, "out_channels": 3, "num_res_blocks": 2,
    "ffactor_spatial": 16, "ffactor_temporal": 4, "downsample_match_channel": True,
    "upsample_match_channel": True, "z_channels": 32,
}  # fmt: skip
LATENT = (1, 32, 3, 2, 32)  # 9 frames of 32x512: two runs of the host's up path, two strips


@pytest.fixture(autouse=True)
def no_grad() -> Any:
    with torch.no_grad():
        yield


@pytest.fixture(scope="module")
def model(host: Host) -> Any:
    missing = hunyuan15_missing()
    if missing:
        pytest.skip(f"the host ({host.version}) {missing}")
    return hunyuan15_autoencoder(SMALL_CONFIG, 3)


@pytest.fixture(scope="module")
def full(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model.decode(latent(LATENT))


def decode(host: Host, model: Any, tile: int = 16 * 16) -> tuple[torch.Tensor, Any]:
    tv = engine(host)
    options = tv.DecodeOptions(torch.device("cpu"), torch.float32, tile=tile)
    decoder = tv.make_tiled_decoder(model, options)
    assert type(decoder).__name__ == "Hunyuan15TiledDecoder"
    return decoder.decode(latent(LATENT))


def test_hunyuan15_in_strips_is_exactly_the_hosts_full_decode(host: Host, model: Any, full: Any) -> None:
    got, report = decode(host, model)
    assert got.shape == full.shape == (1, 3, 9, 32, 512)  # the full decode's frame count
    assert max_tiles(report) >= 2
    assert_exact(got, full, split=True)


def test_a_halved_halo_or_a_restarted_carry_fails_by_far(
    host: Host, model: Any, full: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutations the exactness check must catch: crops with half the receptive field (seams: 5e-4
    here; one pixel short measured 7e-7, the outermost layers' reach being faint with random weights),
    and each run of frames decoded from a fresh causal state (the host's temporal tiles: flicker)."""
    tv = engine(host)
    module = importlib.import_module(tv.Hunyuan15TiledDecoder.__module__)
    halo = module.receptive_halo(model.decoder)
    assert halo == 14  # 3 blocks of 2 convolutions and an upsample convolution per level, conv_out
    monkeypatch.setattr(module, "receptive_halo", lambda decoder: halo // 2)
    short, _ = decode(host, model)
    monkeypatch.undo()
    assert (short - full).abs().max() > 10 * TOLERANCE  # 5e-4 measured (random weights reach faintly)
    with pytest.raises(AssertionError, match="differs by"):
        assert_exact(short, full, split=True)

    original = module.Hunyuan15TiledDecoder._tiles

    def fresh_runs(self: Any, head: torch.Tensor, *args: Any) -> int:
        carry = self.carry

        def no_carry(xl: list, op: Any, carry_in: Any = None, carry_out: Any = None) -> torch.Tensor:
            return carry(xl, op)

        self.carry = no_carry
        try:
            return original(self, head, *args)
        finally:
            self.carry = carry

    monkeypatch.setattr(module.Hunyuan15TiledDecoder, "_tiles", fresh_runs)
    restarted, _ = decode(host, model)
    assert restarted.shape == full.shape
    assert (restarted - full).abs().max() > 100 * TOLERANCE


def test_the_tile_estimate_covers_the_measured_peak_and_not_the_clip_length(host: Host, model: Any) -> None:
    """One run of one strip is what the device holds: the estimate covers the measured peak, and neither
    grows with the clip (runs of 2 latent frames carried, whatever the length: 5 and 7 latent frames both
    have full runs of 8 output frames; a 3-frame clip's longest run has 5)."""
    from headroom_testing.measure import PeakLiveBytes

    tv = engine(host)
    peaks, estimates = [], []
    for frames in (5, 7):
        shape = (1, 32, frames, 2, 32)
        decoder = tv.make_tiled_decoder(model, tv.DecodeOptions(torch.device("cpu"), torch.float32, tile=256))
        head = decoder._head(latent(shape))
        out: dict = {}
        progress = importlib.import_module(tv.DecodeOptions.__module__).Progress(0, None)
        with PeakLiveBytes() as meter:
            decoder._tiles(head, slice(None), 16, out, 1, progress)
        peaks.append(meter.peak - out["image"].nbytes)  # the output is the caller's, in RAM
        estimates.append(decoder.tile_bytes(16, 4, (2, 32), frames))
    assert estimates[0] == estimates[1]
    assert peaks[1] <= 1.1 * peaks[0]
    assert max(peaks) <= estimates[0], f"measured {peaks} B, estimated {estimates[0]} B"


def test_the_gpu_runbooks_bench_step_decodes_hunyuan15(host: Host, model: Any, tmp_path: Any) -> None:
    """`scripts/gpu-check` runs bench/tiled_vae.py with hunyuan15 among its VAEs (bfloat16 on the GPU);
    here the same step on the CPU, in float32: every Headroom row is exact to the host's full decode."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "tiled_vae.md"
    command = [sys.executable, str(root / "bench" / "tiled_vae.py"), "--vaes", "hunyuan15", "--sizes", "tiny"]
    env = {**os.environ, "COMFYUI_ROOT": str(host.root)}
    subprocess.run([*command, "--out", str(out)], check=True, env=env, capture_output=True, timeout=600)
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| hunyuan15 ")]
    ours = [cells for cells in rows if cells[1].strip().startswith("Headroom exact")]
    assert len(ours) == 2 and any("full decode" in cells[1] for cells in rows), rows
    assert all(float(cells[4]) <= TOLERANCE for cells in ours), ours
