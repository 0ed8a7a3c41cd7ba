"""The pack inside a real ComfyUI: registration, node definitions, and prompts through the executor."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from headroom_testing.harness import NODE_IDS, Host, PromptFailed

pytestmark = pytest.mark.host

DISPLAY_NAMES = {
    "HeadroomOffloadLoader": "Offload Loader (low VRAM)",
    "HeadroomStreamingSampler": "Streaming KSampler (VRAM offload)",
    "HeadroomStreamModel": "Stream Model (VRAM offload)",
    "HeadroomStreamCLIP": "Stream CLIP (VRAM offload)",
    "HeadroomTiledVAEDecode": "Tiled VAE Decode (exact, low VRAM)",
    "HeadroomMemoryMonitor": "VRAM Stats",
}
# Frozen once released: saved workflows refer to these names (UI widgets by position, too).
INPUT_NAMES = {
    "HeadroomOffloadLoader": [
        "checkpoint", "diffusion_model", "weight_dtype", "text_encoder_1", "text_encoder_2",
        "text_encoder_3", "clip_type", "vae", "model_residency", "text_encoder_residency", "vae_residency",
    ],
    "HeadroomStreamingSampler": [
        "model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
        "latent_image", "denoise", "vram_budget", "prefetch", "resident_blocks", "pin_memory",
    ],
    "HeadroomStreamModel": ["model", "vram_budget", "prefetch", "resident_blocks", "pin_memory"],
    "HeadroomStreamCLIP": ["clip", "vram_budget", "prefetch", "resident_blocks", "pin_memory"],
    "HeadroomTiledVAEDecode": ["samples", "vae", "vram_budget", "mode"],
    "HeadroomMemoryMonitor": ["value"],
}  # fmt: skip
RETURN_TYPES = {
    "HeadroomOffloadLoader": ("MODEL", "CLIP", "VAE"),
    "HeadroomStreamingSampler": ("LATENT",),
    "HeadroomStreamModel": ("MODEL",),
    "HeadroomStreamCLIP": ("CLIP",),
    "HeadroomTiledVAEDecode": ("IMAGE",),
    "HeadroomMemoryMonitor": ("*", "STRING", "IMAGE"),
}


def test_pack_loads_from_a_folder_with_any_name(host: Host) -> None:
    assert host.pack_loaded, "nodes.load_custom_node returned False: see the log above"
    assert host.pack_dir.name == "Headroom-Pack_test"
    for node_id in NODE_IDS:
        assert node_id in host.nodes.NODE_CLASS_MAPPINGS
        assert host.nodes.NODE_DISPLAY_NAME_MAPPINGS[node_id] == DISPLAY_NAMES[node_id]


@pytest.mark.parametrize("node_id", NODE_IDS)
def test_node_definition_is_valid(host: Host, node_id: str) -> None:
    cls = host.node_class(node_id)
    spec = cls.INPUT_TYPES()
    assert set(spec) <= {"required", "optional", "hidden"}
    assert "required" in spec  # 2024 hosts fail validation without it, even when it is empty
    names = [name for section in ("required", "optional") for name in spec.get(section, {})]
    assert names == INPUT_NAMES[node_id]
    for section in ("required", "optional"):
        for name, entry in spec.get(section, {}).items():
            assert isinstance(entry, tuple) and 1 <= len(entry) <= 2, name
            kind = entry[0]
            assert isinstance(kind, (str, list)), f"{name}: type must be a name or a list of choices"
            options = entry[1] if len(entry) == 2 else {}
            assert isinstance(options, dict)
            if isinstance(kind, list):
                assert kind and all(isinstance(c, str) for c in kind), name
                assert options.get("default", kind[0]) in kind, name
    assert tuple(str(t) for t in cls.RETURN_TYPES) == RETURN_TYPES[node_id]
    assert callable(getattr(cls, cls.FUNCTION))
    assert cls.CATEGORY.startswith("Headroom/")


def test_sampler_mirrors_the_stock_ksampler(host: Host) -> None:
    ours = host.node_class("HeadroomStreamingSampler").INPUT_TYPES()["required"]
    stock = host.nodes.KSampler.INPUT_TYPES()["required"]
    assert list(ours) == list(stock)

    def bare(spec: tuple) -> tuple:  # the spec less its tooltip: ours names every default (#16)
        return (spec[0], {k: v for k, v in (spec[1] if len(spec) > 1 else {}).items() if k != "tooltip"})

    assert {k: bare(v) for k, v in ours.items()} == {k: bare(v) for k, v in stock.items()}
    for name, spec in ours.items():
        default = spec[1].get("default", spec[0][0] if isinstance(spec[0], list) else None)
        assert spec[1]["tooltip"] and (default is None or f"Default: {default}" in spec[1]["tooltip"]), name


def test_loader_lists_the_hosts_model_folders(host: Host) -> None:
    vae = host.models_dir / "vae" / "listed_vae.safetensors"
    save_file({"decoder.conv_in.weight": torch.zeros(4, 4, 3, 3)}, str(vae))
    host.register_models_dir(host.models_dir)  # drop the host's cached listing
    spec = host.node_class("HeadroomOffloadLoader").INPUT_TYPES()["required"]
    assert vae.name in spec["vae"][0]
    assert spec["vae"][0][0] == "none"
    # the single- and dual-file loaders' types, single first (its default stays the default)
    single = list(host.nodes.CLIPLoader.INPUT_TYPES()["required"]["type"][0])
    dual = host.nodes.DualCLIPLoader.INPUT_TYPES()["required"].get("type", ([],))[0]
    assert spec["clip_type"][0] == single + [t for t in dual if t not in single]


def test_stock_prompt_runs_through_the_host(host: Host) -> None:
    prompt = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 2, "color": 0}},
        "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
        "3": {"class_type": "ImageScale", "inputs": {"image": ["2", 0], "upscale_method": "nearest-exact",
                                                     "width": 32, "height": 24, "crop": "disabled"}},
        "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "headroom_test"}},
        "5": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
    }  # fmt: skip
    result = host.run(prompt)
    assert result.executed == ["1", "2", "3", "4"]  # "5" feeds no output node, so it never runs
    image = result.outputs["3"][0][0]
    assert tuple(image.shape) == (2, 24, 32, 3)
    assert torch.equal(image, torch.ones_like(image))  # black inverted to white
    saved = result.ui["4"]["images"]
    assert len(saved) == 2 and all(s["type"] == "output" for s in saved)
    for item in saved:
        assert (host.output_dir / item["subfolder"] / item["filename"]).is_file()

    again = host.run(prompt)  # unchanged: the host serves everything from its cache
    assert again.executed == []
    assert set(again.cached) == {"1", "2", "3", "4"}


def test_a_loader_with_no_model_chosen_fails_clearly(host: Host) -> None:
    loader = host.node_class("HeadroomOffloadLoader").INPUT_TYPES()["required"]
    inputs = {name: spec[0][0] for name, spec in loader.items()}  # the first choice of each: no files
    prompt = {
        "1": {"class_type": "HeadroomOffloadLoader", "inputs": inputs},
        "2": {"class_type": "HeadroomMemoryMonitor", "inputs": {"value": ["1", 0]}},  # an output node
    }
    with pytest.raises(PromptFailed, match=r"Offload Loader: choose a checkpoint or a diffusion_model"):
        host.run(prompt)
