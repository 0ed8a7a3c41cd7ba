"""Hostile inputs (issue #18) in the real host on CPU: each fails before any work with a message naming
the node, the input, the file when there is one, and the fix, instead of a torch error deep inside."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from headroom_testing.harness import Host, PromptInvalid
from headroom_testing.prompts import offload_loader
from headroom_testing.tiny_models import (
    SD_VAE_DDCONFIG,
    _init_state_dict,
    _on_meta,
    build_clip_l,
    build_tiny_sd15_unet,
    build_tiny_sd_checkpoint,
    build_tiny_vae,
    build_tiny_wan,
    build_wan21_vae,
    flux_vae_state_dict,
    supported_builders,
)

pytestmark = pytest.mark.host

DECODE = "Tiled VAE Decode (exact, low VRAM)"
UNET, CLIP, VAE = "hostile_unet.safetensors", "hostile_clip_l.safetensors", "hostile_sd_vae.safetensors"


@pytest.fixture(autouse=True)
def no_grad() -> Any:
    with torch.no_grad():  # as the host's executor runs nodes
        yield


@pytest.fixture(scope="module")
def tiny(host: Host) -> Host:
    models = host.models_dir
    unet = build_tiny_sd15_unet(models, name=UNET, seed=21)
    clip = build_clip_l(models, name=CLIP, seed=22)
    build_tiny_vae(models, name=VAE, seed=23)
    # a diffusion model alone, put where checkpoints go
    (models / "checkpoints").mkdir(parents=True, exist_ok=True)
    _link(unet, models / "checkpoints" / "unet_only.safetensors")
    for i in (2, 3):  # the same CLIP-L three times
        _link(clip, models / "text_encoders" / f"hostile_clip_l_{i}.safetensors")
    # an SD1.5 UNet the host detects as SD1.5 whose time embedding is of another width: its weights do
    # not fit the model the host builds (what a file of another or newer architecture does)
    sd = load_file(str(unet))
    sd["time_embed.0.weight"] = torch.zeros(sd["time_embed.0.weight"].shape[0], 64, dtype=torch.float16)
    save_file(sd, str(models / "diffusion_models" / "other_arch.safetensors"))
    host.register_models_dir(models)
    return host


def _link(source: Path, target: Path) -> None:
    if not target.exists():
        os.link(source, target)


def _load(host: Host, **files: str) -> Any:
    return host.pack_module("nodes.host.loading").offload_load("h", offload_loader(**files)["inputs"])


# --- Offload Loader ---------------------------------------------------------------------------------
def test_a_diffusion_model_chosen_as_checkpoint_says_where_it_goes(tiny: Host) -> None:
    """It loaded, and failed with "'VAE' object has no attribute 'patcher'"."""
    with pytest.raises(tiny.pack_module("nodes.input_checks").OffloadError) as info:
        _load(tiny, checkpoint="unet_only.safetensors")
    message = str(info.value)
    assert message.startswith("Offload Loader: input checkpoint: unet_only.safetensors holds no"), message
    # M17: the error dialog names the type as the host's full_type_name does, without the pack's path
    import execution  # the host's own, on the path the harness set

    full_type_name = execution.full_type_name
    assert full_type_name(type(info.value)) == "headroom.OffloadError"
    assert "VAE" in message and "choose it as diffusion_model" in message


def test_a_model_of_another_architecture_names_the_file_and_the_fix(tiny: Host) -> None:
    """It failed with the bare "size mismatch" of load_state_dict."""
    with pytest.raises(tiny.pack_module("nodes.input_checks").OffloadError) as info:
        _load(tiny, diffusion_model="other_arch.safetensors", text_encoder_1=CLIP, vae=VAE)
    message = str(info.value)
    assert message.startswith("Offload Loader: input diffusion_model: this ComfyUI could not load"), message
    assert "other_arch.safetensors" in message and "size mismatch" in message
    assert "choose a file of a model family this ComfyUI supports" in message


def test_three_clip_l_files_as_text_encoders_are_refused_at_load(tiny: Host) -> None:
    """They loaded, and the sampler failed with a matmul shape error."""
    with pytest.raises(
        tiny.pack_module("nodes.input_checks").OffloadError, match="both clip_l text encoders"
    ) as info:
        _load(
            tiny, diffusion_model=UNET, vae=VAE, text_encoder_1=CLIP,
            text_encoder_2="hostile_clip_l_2.safetensors", text_encoder_3="hostile_clip_l_3.safetensors",
        )  # fmt: skip
    assert "text_encoder_1 and text_encoder_2" in str(info.value)


def test_a_wan_model_with_a_clip_is_refused_at_load(tiny: Host) -> None:
    if "build_tiny_wan" not in supported_builders():
        pytest.skip(f"the host ({tiny.version}) predates Wan: no Wan model to pair")
    build_tiny_wan(tiny.models_dir, name="hostile_wan.safetensors")
    tiny.register_models_dir(tiny.models_dir)
    with pytest.raises(tiny.pack_module("nodes.input_checks").OffloadError) as info:
        _load(tiny, diffusion_model="hostile_wan.safetensors", text_encoder_1=CLIP, clip_type="wan")
    message = str(info.value)
    assert "input text_encoder_1 is a clip_l text encoder" in message and "umt5xxl" in message, message


def test_a_wan_model_with_an_sd_checkpoints_own_encoders_is_refused_at_load(tiny: Host) -> None:
    """Issue #43: a Wan DiT in diffusion_model with an SD checkpoint (its own CLIP-L, no text_encoder_*)
    loaded, and the sampler failed with the raw "mat1 and mat2 shapes cannot be multiplied"."""
    if "build_tiny_wan" not in supported_builders():
        pytest.skip(f"the host ({tiny.version}) predates Wan: no Wan model to pair")
    build_tiny_wan(tiny.models_dir, name="hostile_wan.safetensors")
    build_tiny_sd_checkpoint(tiny.models_dir, name="hostile_sd_checkpoint.safetensors", seed=24)
    tiny.register_models_dir(tiny.models_dir)
    with pytest.raises(tiny.pack_module("nodes.input_checks").OffloadError) as info:
        _load(tiny, diffusion_model="hostile_wan.safetensors", checkpoint="hostile_sd_checkpoint.safetensors")
    message = str(info.value)
    assert "umt5xxl" in message and "checkpoint" in message, message


def test_a_matching_pair_still_loads(tiny: Host) -> None:
    model, clip, vae = _load(tiny, diffusion_model=UNET, text_encoder_1=CLIP, vae=VAE)
    assert model is not None and clip is not None and vae is not None


# --- Tiled VAE Decode ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sd_vae(tiny: Host) -> Any:
    return tiny.node_class("VAELoader")().load_vae(VAE)[0]


def _decode(host: Host, vae: Any, shape: tuple[int, ...]) -> Any:
    return host.node_class("HeadroomTiledVAEDecode")().decode({"samples": torch.randn(shape)}, vae)


@pytest.mark.parametrize(
    ("shape", "problem"),
    [
        ((0, 4, 8, 8), "is an empty batch"),  # was ZeroDivisionError
        ((1, 16, 8, 8), "has 16 channels"),
        ((1, 4, 2, 8, 8), "is 5-D"),
        ((1, 4, 0, 8), "is empty"),
    ],
)
def test_a_latent_the_sd_vae_cannot_decode_is_refused(
    tiny: Host, sd_vae: Any, shape: tuple, problem: str
) -> None:
    with pytest.raises(ValueError) as info:
        _decode(tiny, sd_vae, shape)
    message = str(info.value)
    assert message.startswith(f"{DECODE}: input samples: the latent {problem}"), message


def test_a_4_channel_latent_to_a_16_channel_vae_is_refused(tiny: Host) -> None:
    import comfy.sd

    if tiny.legacy:  # the 2024 host only detects 4-channel VAEs; its config path builds any AutoencoderKL
        from comfy.ldm.models.autoencoder import AutoencoderKL

        ddconfig = {**SD_VAE_DDCONFIG, "z_channels": 16}
        model = _on_meta(lambda: AutoencoderKL(ddconfig=dict(ddconfig), embed_dim=16))
        sd = {k: v.float() for k, v in _init_state_dict(model, 3, torch.float32).items()}
        vae = comfy.sd.VAE(sd=sd, config={"params": {"ddconfig": ddconfig, "embed_dim": 16}})
    else:
        vae = comfy.sd.VAE(sd=flux_vae_state_dict(seed=3))
    with pytest.raises(ValueError, match="has 4 channels .* it takes 16-channel latents"):
        _decode(tiny, vae, (1, 4, 8, 8))


def test_an_image_latent_to_a_video_vae_is_refused(tiny: Host) -> None:
    if "build_wan21_vae" not in supported_builders():
        pytest.skip(f"the host ({tiny.version}) predates Wan: no video VAE")
    build_wan21_vae(tiny.models_dir, name="hostile_wan_vae.safetensors")
    tiny.register_models_dir(tiny.models_dir)
    vae = tiny.node_class("VAELoader")().load_vae("hostile_wan_vae.safetensors")[0]
    with pytest.raises(ValueError, match="is 4-D .* it takes 5-D latents") as info:
        _decode(tiny, vae, (1, 16, 8, 8))
    assert "Connect the VAE of the model that made this latent" in str(info.value)


@pytest.mark.parametrize("budget", ["1e-10", "0", "lots"])
def test_a_bad_decode_budget_is_refused_at_queue_time(tiny: Host, budget: str) -> None:
    prompt = {
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": VAE}},
        "2": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {
            "class_type": "HeadroomTiledVAEDecode",
            "inputs": {"samples": ["2", 0], "vae": ["1", 0], "vram_budget": budget},
        },
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }
    with pytest.raises(PromptInvalid, match=re.escape(f"{DECODE}: input vram_budget")):
        tiny.validate(prompt, "bad-decode-budget")
    prompt["3"]["inputs"]["vram_budget"] = "6144MB"
    tiny.validate(prompt, "good-decode-budget")


def test_a_prompt_the_host_refuses_for_a_missing_class_is_not_planned(host: Host) -> None:
    """The 1 KB hostile expression reached the preflight on hosts without ComfyMathExpression, which had
    already refused the prompt: a node class the host lacks now means "not planned", naming it."""
    refusals = host.pack_module("nodes.host.refusals")
    prompt = {
        "1": {"class_type": "EmptyLatentImage", "inputs": {"width": ["2", 1], "height": 64, "batch_size": 1}},
        "2": {"class_type": "NoSuchMathNode", "inputs": {"expression": "4000000**4000000"}},
    }
    assert refusals.host_refuses(prompt) == (
        "node 2 (NoSuchMathNode) is not a node class of this ComfyUI; the host refuses the prompt"
    )
    assert refusals.host_refuses({"1": prompt["1"]}) == ""
