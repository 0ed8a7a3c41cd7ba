"""Helpers of the tiled-VAE host tests (tests/host/test_tiled_vae*.py): decodes through the host's
``VAEDecode``, through the pack's node and through the engine alone, and the exactness check of IMAGEs.

Imported by test modules only, once the ``host`` fixture has put a ComfyUI on ``sys.path``.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host

NODE = "HeadroomTiledVAEDecode"


def engine(host: Host) -> Any:
    """The pack's memory.tiled_vae as the host imported it (under a name of the host's choosing)."""
    import sys

    for name, module in list(sys.modules.items()):
        if name.endswith(".memory.tiled_vae") and str(host.pack_dir) in str(getattr(module, "__file__", "")):
            return module
    return importlib.import_module(f"{host.pack_dir.name}.memory.tiled_vae")


def host_vae(sd: dict, config: dict | None = None) -> Any:
    import comfy.sd

    return comfy.sd.VAE(sd=sd, config=config) if config else comfy.sd.VAE(sd=sd)


def latent(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def stock_decode(host: Host, vae: Any, samples: torch.Tensor) -> torch.Tensor:
    return host.node_class("VAEDecode")().decode(vae, {"samples": samples})[0]


def tiled_decode(host: Host, vae: Any, samples: torch.Tensor, **inputs: Any) -> torch.Tensor:
    """The node's IMAGE (its text: ``tiled_decode_text``)."""
    return node_decode(host, vae, samples, **inputs)["result"][0]


def tiled_decode_text(host: Host, vae: Any, samples: torch.Tensor, **inputs: Any) -> str:
    """What the node says on itself after the decode (its ui text, M19)."""
    [text] = node_decode(host, vae, samples, **inputs)["ui"]["text"]
    assert isinstance(text, str)
    return text


def node_decode(host: Host, vae: Any, samples: torch.Tensor, **inputs: Any) -> dict[str, Any]:
    """The node's whole return: {"ui": {"text": [...]}, "result": (IMAGE,)}."""
    out = host.node_class(NODE)().decode(samples={"samples": samples}, vae=vae, **inputs)
    assert isinstance(out, dict)
    return out


def engine_decode(host: Host, vae: Any, samples: torch.Tensor, tile: int, **options: Any) -> tuple:
    """The engine alone, as the node drives it but with a fixed tile (output pixels)."""
    import comfy.ldm.modules.diffusionmodules.model as model_module

    tv = engine(host)
    opts = tv.DecodeOptions(
        torch.device("cpu"), torch.float32, tile=tile, act=model_module.nonlinearity, **options
    )
    raw, report = tv.make_tiled_decoder(vae.first_stage_model, opts).decode(samples)
    return vae.process_output(raw).movedim(1, -1), report


def assert_same_image(got: torch.Tensor, want: torch.Tensor, *, split: bool) -> None:
    """IMAGE outputs: the stock layout and dtype, and exact (see the module docstring)."""
    assert got.dtype == want.dtype


def recorded_reports(monkeypatch: pytest.MonkeyPatch, engine_class: type) -> list:
    """Every DecodeReport ``engine_class.decode`` returns from now on (the node's run included)."""
    reports: list = []
    original = engine_class.decode

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        reports.append(result[1])
        return result

    monkeypatch.setattr(engine_class, "decode", spy)
    return reports
