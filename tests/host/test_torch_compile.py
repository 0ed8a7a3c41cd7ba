"""Stream Model and the Streaming KSampler under the host's TorchCompileModel (torch.compile, backend
inductor, on the CPU): a checkpoint loaded by the host's loader, compiled, streamed, sampled and decoded
gives the pixels of the same workflow without Headroom's node (compiled too) bit for bit, and the streamed
blocks compute from the streamer's ring.

TorchCompileModel (comfy_api/torch_helpers/torch_compile.py, the same on 0.3.64 and 0.33) puts an
APPLY_MODEL wrapper on the clone that swaps ``diffusion_model`` for ``torch.compile(diffusion_model)``
during each model call. The streamer attaches before (at the sampling's first model call, outside
APPLY_MODEL), so its hooks sit on the blocks the compiled module runs; they run eagerly (dynamo breaks the
graph at each: ``streamer.eager``), and the compiled code reads the weights they bound. Before that, dynamo
traced them and the sampling failed ("self.size(-1) must be divisible by 4 to view Byte as Float").

On the CPU the host's sub-quadratic attention asks ``psutil`` for free memory inside the UNet, so even the
stock compiled forward breaks its graph there (12 breaks on 0.33): the compiled code is the blocks' parts
between breaks, and the streamer's hooks add a break at each streamed block. The pixels are the same bit
for bit (measured: max difference 0.0 on 0.33 and 0.3.64). One checkpoint and one compilation serve the
module (the executor's cache keeps the loader's and TorchCompileModel's outputs); the 2024 host has no
TorchCompileModel, and inductor needs a C++ compiler: each test skips saying which is missing."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host
from headroom_testing.stream_spy import StreamSpy, budget_gb
from headroom_testing.tiny_models import build_tiny_sd_checkpoint

pytestmark = pytest.mark.host

CKPT = "tiny_sd15_torch_compile.safetensors"
STEPS = 2


def _cxx() -> str | None:
    """The C++ compiler inductor's CPU code needs (its default is g++, or $CXX)."""
    return next(
        (
            path
            for name in (os.environ.get("CXX"), "g++", "c++", "clang++")
            if name and (path := shutil.which(name))
        ),
        None,
    )


def _prompt(stream: str | None, budget: str = "auto") -> dict[str, dict]:
    """Loader → TorchCompileModel (inductor) → [Headroom] → sampler → VAEDecode → PreviewImage. ``stream``:
    None (stock), "after" (Stream Model on the compiled model), "before" (TorchCompileModel on the
    streamed model) or "sampler" (the Streaming KSampler on the compiled model)."""
    nodes: dict[str, dict] = {
        "c": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CKPT}},
        "p": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["c", 1], "text": "a compiled model"}},
        "n": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["c", 1], "text": ""}},
        "l": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "t": {"class_type": "TorchCompileModel", "inputs": {"model": ["c", 0], "backend": "inductor"}},
    }
    model: list[Any] = ["t", 0]
    if stream == "after":
        nodes["x"] = {
            "class_type": "HeadroomStreamModel",
            "inputs": {"model": ["t", 0], "vram_budget": budget},
        }
        model = ["x", 0]
    elif stream == "before":
        nodes["x"] = {
            "class_type": "HeadroomStreamModel",
            "inputs": {"model": ["c", 0], "vram_budget": budget},
        }
        nodes["t2"] = {
            "class_type": "TorchCompileModel",
            "inputs": {"model": ["x", 0], "backend": "inductor"},
        }
        model = ["t2", 0]
    inputs = {
        "model": model, "seed": 3, "steps": STEPS, "cfg": 5.0, "sampler_name": "euler", "scheduler": "normal",
        "positive": ["p", 0], "negative": ["n", 0], "latent_image": ["l", 0], "denoise": 1.0,
    }  # fmt: skip
    if stream == "sampler":
        nodes["o"] = {"class_type": "HeadroomStreamingSampler", "inputs": {**inputs, "vram_budget": budget}}
    else:
        nodes["o"] = {"class_type": "KSampler", "inputs": inputs}
    nodes["d"] = {"class_type": "VAEDecode", "inputs": {"samples": ["o", 0], "vae": ["c", 2]}}
    nodes["s"] = {"class_type": "PreviewImage", "inputs": {"images": ["d", 0]}}
    return nodes


@pytest.fixture(scope="module")
def compiled(host: Host) -> Iterator[dict[str, Any]]:
    """The stock compiled workflow's pixels, the diffusion model and a budget that streams it."""
    if "TorchCompileModel" not in host.nodes.NODE_CLASS_MAPPINGS:
        pytest.skip(f"ComfyUI {host.version} has no TorchCompileModel node")
    if _cxx() is None:
        pytest.skip("inductor compiles C++ on the CPU: no C++ compiler (g++, c++, clang++ or $CXX) found")
    build_tiny_sd_checkpoint(host.models_dir, name=CKPT, seed=5)
    host.register_models_dir(host.models_dir)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    host.run(_prompt(None))
    pixels = host.output("d")[0][0]
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    diffusion = host.output("c")[0][0].model.diffusion_model
    yield {"pixels": pixels, "diffusion": diffusion, "budget": budget_gb(diffusion), "graphs": graphs}
    torch._dynamo.reset()


@pytest.mark.parametrize("stream", ["after", "before", "sampler"])
def test_streamed_under_torch_compile_gives_the_stock_compiled_pixels(
    host: Host, compiled: dict[str, Any], monkeypatch: pytest.MonkeyPatch, stream: str
) -> None:
    assert compiled["graphs"] > 0, "the stock workflow ran compiled code"
    assert torch.isfinite(compiled["pixels"]).all() and compiled["pixels"].std() > 0
    spy = StreamSpy(host, monkeypatch)
    result = host.run(_prompt(stream, compiled["budget"]))
    assert torch.equal(host.output("d")[0][0], compiled["pixels"])
    (watched,) = spy.watched
    streamer = watched.streamer
    assert streamer.model is compiled["diffusion"], "the compiled module's own blocks streamed"
    assert [event for event, _ in spy.log] == ["attach", "detach"]
    stats = streamer.stats
    assert len(streamer.streamed) >= 2 and stats.steps == STEPS and stats.misses == 0
    assert stats.uploads >= STEPS * len(streamer.streamed), "one upload per streamed block per step"
    slots = watched.ring[: streamer.choice.depth + 1]
    seen = [ptr for probe in watched.probes for ptr in probe.seen]
    assert seen and all(any(a <= ptr < b for a, b in slots) for ptr in seen), "computes from a ring slot"
    if stream == "sampler":
        assert "streamed per step" in result.ui["o"]["text"][0]
