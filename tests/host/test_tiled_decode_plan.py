"""The plan's figures for the Tiled VAE Decode are its engine's own estimate (issue #32, item 3).

The host adapter builds the VAE on the meta device from the file's header (nodes/host/vae_plan.py); its
figures equal those of the engine made from the loaded VAE, and the planned step of the node carries
them (whole frame with room, smallest tiles at least), where a stock VAE Decode keeps ComfyUI's formula
at a 512 px tile. Without a host (the command line) the node is planned as a VAE decode, with a note."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from headroom_testing.harness import Host
from headroom_testing.tiny_models import build_tiny_vae, build_wan21_vae, supported_builders

pytestmark = pytest.mark.host


def engine_figures(path: Any, shape: tuple[int, ...]) -> tuple[int, int]:
    """The figures of the engine the node itself makes, from the VAE the host loads."""
    import comfy.sd
    import comfy.utils

    from comfyui_headroom.memory.tiled_vae import DecodeOptions, make_tiled_decoder

    vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(path)))
    options = DecodeOptions(torch.device("cuda"), torch.bfloat16, budget_bytes=1 << 50)
    engine = make_tiled_decoder(vae.first_stage_model, options)
    return engine.predicted_peak(shape, 2), engine.minimum_peak(shape, 2)


def test_the_figures_are_the_engines_for_an_image_vae(host: Host) -> None:
    vae_plan = host.pack_module("nodes.host.vae_plan")
    path = build_tiny_vae(host.models_dir, name="plan_vae.safetensors", dtype=torch.float32)
    whole, least = vae_plan.tiled_decode_figures(path.name, 1024, 768, 1, 2)
    assert (whole, least) == engine_figures(path, (2, 4, 96, 128))
    assert least < whole  # the smallest tiles take less than the whole frame
    bigger, _ = vae_plan.tiled_decode_figures(path.name, 2048, 1536, 1, 2)
    assert bigger > 3 * whole  # four times the pixels


def test_the_figures_are_the_engines_for_a_video_vae(host: Host) -> None:
    if "build_wan21_vae" not in supported_builders():
        pytest.skip("this host has no Wan 2.1 VAE class")
    vae_plan = host.pack_module("nodes.host.vae_plan")
    path = build_wan21_vae(host.models_dir, name="plan_wan21.safetensors", dtype=torch.float32)
    figures = vae_plan.tiled_decode_figures(path.name, 256, 128, 17, 1)
    assert figures == engine_figures(path, (1, 16, 5, 16, 32))  # 17 frames: 1 + 16 / 4 latent frames


def test_what_cannot_be_read_is_a_reason_not_a_guess(host: Host, tmp_path: Any) -> None:
    vae_plan = host.pack_module("nodes.host.vae_plan")
    assert "not one the host lists" in vae_plan.tiled_decode_figures("gone.safetensors", 64, 64, 1, 1)
    broken = host.models_dir / "vae" / "plan_broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    host.register_models_dir(host.models_dir)  # the host lists the new file
    assert "header could not be read" in vae_plan.tiled_decode_figures(broken.name, 64, 64, 1, 1)


def test_a_name_the_host_does_not_list_is_never_opened(host: Host, tmp_path: Any) -> None:
    """Issue #43: a path from a client (absolute, ../) is refused alike whether or not the file exists:
    the decoder of a VAE outside the models folders is never built, its header never read."""
    vae_plan = host.pack_module("nodes.host.vae_plan")
    outside = build_tiny_vae(tmp_path, name="outside_vae.safetensors", dtype=torch.float32)
    gone = outside.with_name("gone_vae.safetensors")
    escape = "../" * 12 + str(outside).lstrip("/")
    answers = {
        name: vae_plan.tiled_decode_figures(name, 64, 64, 1, 1)
        for name in (str(outside), str(gone), escape, "../" * 12 + str(gone).lstrip("/"))
    }
    assert set(answers.values()) == {"the VAE's file is not one the host lists"}, answers


def prompt(vae: str, node: str) -> dict[str, Any]:
    return {
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": vae}},
        "2": {"class_type": "EmptyLatentImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 1}},
        "3": {"class_type": node, "inputs": {"samples": ["2", 0], "vae": ["1", 0]}},
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }


def test_the_planned_step_of_the_node_carries_them(host: Host) -> None:
    from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
    from comfyui_headroom.memory.planning.pipeline import plan_workflow

    vae_plan = host.pack_module("nodes.host.vae_plan")
    path = build_tiny_vae(host.models_dir, name="plan_vae.safetensors", dtype=torch.float32)
    budget = Budget(vram=8 << 30, ram=32 << 30, pinned=8 << 30)
    hw = Hardware.pcie(4)

    def decode_step(node: str, **kw: Any) -> tuple[Any, list[str]]:
        planned = plan_workflow(prompt(path.name, node), budget, hw, models_dir=host.models_dir, **kw)
        return next(s for s in planned.workload.steps if s.node_id == "3"), planned.workload.notes

    figures = vae_plan.tiled_decode_figures(path.name, 1024, 1024, 1, 1)
    tiled, notes = decode_step("HeadroomTiledVAEDecode", tiled_decode=vae_plan.tiled_decode_figures)
    assert (tiled.activation, tiled.activation_min) == figures, notes
    assert not any("Tiled VAE Decode is planned" in n for n in notes)
    stock, _ = decode_step("VAEDecode", tiled_decode=vae_plan.tiled_decode_figures)
    assert (stock.activation, stock.activation_min) != figures  # ComfyUI's formula, 512 px tile
    cli, notes = decode_step("HeadroomTiledVAEDecode")
    assert (cli.activation, cli.activation_min) == (stock.activation, stock.activation_min)
    assert any("planned as a VAE decode in 512 px tiles" in n and "no host" in n for n in notes), notes
