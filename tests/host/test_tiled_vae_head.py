"""Issue #18 H1 in the real host: a latent too large for the decode's whole-latent head is refused before
any work, with the resolution that fits; the head's split attention runs in slices that stop on the
host's interrupt and still give exactly the host's decode."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from headroom_testing.exactness import assert_exact
from headroom_testing.harness import Host
from headroom_testing.tiny_models import build_tiny_vae

pytestmark = pytest.mark.host
NODE = "HeadroomTiledVAEDecode"
GiB = 1 << 30


@pytest.fixture(autouse=True)
def no_grad() -> Any:
    with torch.no_grad():  # as the host's executor runs nodes
        yield


@pytest.fixture(scope="module")
def sd_vae(host: Host) -> Any:
    """The host's full-size SD VAE architecture (512 mid channels), random weights, on the split
    attention the host picks on a CPU."""
    build_tiny_vae(host.models_dir, name="head_sd_vae.safetensors", dtype=torch.float32)
    host.register_models_dir(host.models_dir)
    vae = host.node_class("VAELoader")().load_vae("head_sd_vae.safetensors")[0]
    assert host.pack_module("memory.tiled_vae.head").sliceable(vae.first_stage_model.decoder.mid.attn_1)
    return vae


@pytest.fixture
def no_decode(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusals must come before any work: the engine's decode fails the test if it starts."""
    kl = host.pack_module("memory.tiled_vae.kl")

    def started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the decode started")

    monkeypatch.setattr(kl.KLTiledDecoder, "decode", started)


def decode(host: Host, vae: Any, z: torch.Tensor, **inputs: Any) -> torch.Tensor:
    return host.node_class(NODE)().decode(samples={"samples": z}, vae=vae, **inputs)["result"][0]


def test_auto_refuses_a_head_larger_than_the_ram_with_the_size_that_fits(
    host: Host, sd_vae: Any, no_decode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reported hang: a 1024x1024 latent (8192x8192 px) with "auto" on a CPU with 16 GB free."""
    monkeypatch.setattr(host.pack_module("nodes.host.vae"), "device_free_bytes", lambda device: 16 * GiB)
    with pytest.raises(ValueError) as info:
        decode(host, sd_vae, torch.zeros(1, 4, 1024, 1024))
    text = str(info.value)
    assert "Tiled VAE Decode (exact, low VRAM): a 1024x1024 (8192x8192 px) latent needs" in text
    assert "for the mid block, which attends across the whole latent" in text
    assert "the RAM available (less the output image) leaves" in text
    side = re.search(r"decode at most (\d+)x(\d+) \((\d+)x(\d+) px\) latents", text)
    assert side is not None and 0 < int(side[1]) < 1024 and int(side[3]) == 8 * int(side[1])
    need = float(re.search(r"needs ([\d.]+) GiB", text)[1])
    assert 20 < need < 24  # the head's linear part (10.5 x 512 values per latent px) and its least slice


def test_a_budget_below_the_head_names_the_budget_not_auto(
    host: Host, sd_vae: Any, no_decode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # more RAM free than the budget, whatever else the machine runs (the RAM would be the limit else)
    monkeypatch.setattr(host.pack_module("nodes.host.vae"), "device_free_bytes", lambda device: 16 * GiB)
    with pytest.raises(ValueError) as info:
        decode(host, sd_vae, torch.zeros(1, 4, 1024, 1024), vram_budget="8")
    text = str(info.value)
    assert "input vram_budget '8' less the VAE's weights" in text and "mid block" in text
    assert "use auto" not in text and "decode at most" in text


def test_the_head_attention_stops_on_the_hosts_interrupt(
    host: Host, sd_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import comfy.model_management as mm

    monkeypatch.setattr(host.pack_module("memory.tiled_vae.head"), "SLICE_SCORES", 16 * 1024)
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if done == 2:
            mm.interrupt_current_processing(True)  # the user presses Cancel during the attention

    tv = host.pack_module("memory.tiled_vae")
    host_layer = host.pack_module("nodes.host.vae")
    opts = tv.DecodeOptions(
        torch.device("cpu"), torch.float32, progress=progress, check_interrupt=host_layer.check_interrupted
    )
    engine = tv.make_tiled_decoder(sd_vae.first_stage_model, opts)
    try:
        with pytest.raises(mm.InterruptProcessingException):
            engine.decode(torch.randn(1, 4, 32, 32))  # 1024 px: 64 slices of 16 rows
    finally:
        mm.interrupt_current_processing(False)
    assert seen[-1][0] == 2 and seen[-1][1] > 64  # stopped in the attention, two slices in


def test_many_head_slices_decode_exactly_as_the_host(
    host: Host, sd_vae: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = host.pack_module("memory.tiled_vae.head")
    monkeypatch.setattr(head, "SLICE_SCORES", 160 * 32)
    z = torch.randn((1, 4, 20, 12), generator=torch.Generator().manual_seed(3))  # 240 px: ragged slices
    assert head.slice_rows(240, 1, 4, None) == 16
    want = host.node_class("VAEDecode")().decode(sd_vae, {"samples": z})[0]
    got = decode(host, sd_vae, z)
    assert_exact(got, want, split=False)  # one tile per stage: the attention is the only thing sliced
