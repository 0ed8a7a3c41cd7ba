"""Layer-Streaming DiT Sampler on the host's own DiT classes at tiny size (current hosts only): Flux
(double_blocks + single_blocks), Wan 2.1 (blocks) from the stock UNETLoader in fp32, fp8 and the
host's scaled fp8, SD3 (joint_blocks) and Qwen-Image (transformer_blocks). Through the node, each
gives the stock KSampler's latent bit for bit at a budget that forces streaming, with every streamed
block uploaded once per sampling step (also when the host splits cond and uncond), computing from the
ring slots, and the bytes placed on the device within the budget. On the 2026 host the scaled fp8
weights are comfy-kitchen ``QuantizedTensor``s: they stream as they are (fp8 data and scale), and their
real bytes are what is planned and uploaded."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from comfyui_headroom.memory.streaming import discover_blocks
from comfyui_headroom.memory.streaming.discovery import module_bytes
from comfyui_headroom.memory.streaming.storage import packed
from headroom_testing.harness import Host
from headroom_testing.stream_spy import StreamSpy, assert_streamed
from headroom_testing.tiny_models import (
    build_tiny_dit,
    build_tiny_wan_blocks,
    load_tiny_dit,
    tiny_wan_conditioning,
)

pytestmark = pytest.mark.host

STEPS = 2


@pytest.fixture(scope="module")
def current(host: Host) -> Host:
    if host.legacy:
        pytest.skip(
            "the 2024 host predates Flux, Wan, SD3 and Qwen-Image: it has none of their model classes "
            "(set COMFYUI_ROOT to a current ComfyUI to run these)"
        )
    return host


def _conditioning(width: int, pooled: int | None = None, seed: int = 0, **extra: Any) -> list:
    gen = torch.Generator().manual_seed(seed)
    options = dict(extra)
    if pooled:
        options["pooled_output"] = torch.randn(1, pooled, generator=gen)
    return [[torch.randn(1, 8, width, generator=gen), options]]


def _unet_loader(host: Host, name: str, weight_dtype: str = "default") -> Any:
    host.register_models_dir(host.models_dir)
    return host.node_class("UNETLoader")().load_unet(name, weight_dtype)[0]


@dataclass(frozen=True)
class Family:
    layout: str  # what discover_blocks calls it
    load: Callable[[Host], Any]  # -> MODEL
    conditioning: Callable[[int], list]  # seed -> CONDITIONING
    latent: tuple[int, ...]
    weight_dtype: torch.dtype = torch.float32  # of the streamed blocks' Linear weights


def _wan(scaled_fp8: bool = False, weight_dtype: str = "default") -> Callable[[Host], Any]:
    def load(host: Host) -> Any:
        name = f"tiny_wan21_4_blocks{'_scaled_fp8' if scaled_fp8 else ''}.safetensors"
        build_tiny_wan_blocks(host.models_dir, name=name, seed=3, scaled_fp8=scaled_fp8)
        return _unet_loader(host, name, weight_dtype)

    return load


def _dit(family: str) -> Callable[[Host], Any]:
    return lambda host: load_tiny_dit(build_tiny_dit(host.models_dir, family, seed=3), family)


FAMILIES = {
    "flux": Family(
        "flux", _dit("flux"), lambda s: _conditioning(64, 32, s, guidance=3.5), (1, 16, 8, 8)
    ),
    "wan": Family("wan", _wan(), lambda s: tiny_wan_conditioning(seed=s), (1, 16, 1, 8, 8)),
    "wan-fp8": Family(
        "wan", _wan(weight_dtype="fp8_e4m3fn"), lambda s: tiny_wan_conditioning(seed=s), (1, 16, 1, 8, 8),
        torch.float8_e4m3fn,
    ),
    "wan-scaled-fp8": Family(
        "wan", _wan(scaled_fp8=True), lambda s: tiny_wan_conditioning(seed=s), (1, 16, 1, 8, 8),
        torch.float8_e4m3fn,
    ),
    "sd3": Family("sd3", _dit("sd3"), lambda s: _conditioning(64, 32, s), (1, 16, 8, 8)),
    "qwen_image": Family(
        "qwen_image", _dit("qwen_image"), lambda s: _conditioning(64, seed=s), (1, 16, 8, 8)
    ),
}  # fmt: skip


def _storage_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype the weight is stored in: a quantized subclass's data, not the dtype it stands for."""
    found = packed(weight)
    return found.inner[0].dtype if found is not None else weight.dtype


def _logical_bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def _budget_gb(diffusion: torch.nn.Module) -> tuple[str, int]:
    """A budget that keeps about a third of the blocks resident beside a two-slot ring."""
    blocks = discover_blocks(diffusion).block_bytes()
    rest = module_bytes(diffusion) - sum(blocks)
    budget = int(rest + 0.3 * sum(blocks) + 2 * max(blocks)) + 1
    gb = f"{budget / 2**30:.12f}"
    return gb, int(float(gb) * 2**30)


# every family with cond and uncond in one call; the split checked on a double/single-stream DiT and
# a plain one
CASES = [(name, False) for name in FAMILIES] + [("flux", True), ("wan", True)]


@pytest.mark.parametrize(
    ("name", "split"), CASES, ids=[f"{n}-{'split' if s else 'batched'}" for n, s in CASES]
)
def test_family_streams_to_the_stock_latent(
    current: Host, monkeypatch: pytest.MonkeyPatch, name: str, split: bool
) -> None:
    family = FAMILIES[name]
    if split:  # the host's memory estimate says a cond+uncond batch never fits: two calls per step
        base_model = sys.modules["comfy.model_base"].BaseModel
        monkeypatch.setattr(base_model, "memory_required", lambda self, *a, **k: 1 << 45)
    spy = StreamSpy(current, monkeypatch)
    with torch.inference_mode():  # as the host's executor runs nodes
        model = family.load(current)
        diffusion = model.model.diffusion_model
        layout = discover_blocks(diffusion)
        linears = [m for _, block in layout.blocks for m in block.modules() if type(m).__name__ == "Linear"]
        linear_dtypes = {_storage_dtype(m.weight) for m in linears}
        quantized = {packed(m.weight) is not None for m in linears}
        budget_gb, budget = _budget_gb(diffusion)
        inputs = (
            5, STEPS, 4.0, "euler", "simple", family.conditioning(1), family.conditioning(2),
            {"samples": torch.zeros(family.latent)}, 1.0,
        )  # fmt: skip
        (stock,) = current.node_class("KSampler")().sample(model, *inputs)
        out = current.node_class("HeadroomStreamingSampler")().sample(model, *inputs, vram_budget=budget_gb)
    assert layout.family == family.layout and not layout.generic
    assert linear_dtypes == {family.weight_dtype}, "the blocks stream in the format under test"
    assert torch.isfinite(stock["samples"]).all() and stock["samples"].std() > 0
    assert torch.equal(out["result"][0]["samples"], stock["samples"])
    assert "blocks resident" in out["ui"]["text"][0]
    (watched,) = spy.watched
    assert_streamed(watched, STEPS)  # one upload per block per step, computed from the ring slots
    streamer = watched.streamer
    assert streamer.stats.calls_together == (2 * STEPS if split else 0)
    assert streamer.ledger.peak <= budget
    # the bytes planned and uploaded are the weights' real bytes (a quantized weight's data and scale)
    blocks = [streamer.layout.blocks[i][1] for i in streamer.streamed]
    assert streamer.stats.streamed_bytes == sum(module_bytes(b) for b in blocks)
    if quantized == {True}:  # (the 2026 host) fp8 data and scales, not the fp32 they stand for
        assert 2 * streamer.stats.streamed_bytes < sum(_logical_bytes(b) for b in blocks)
    else:
        assert quantized == {False}
        assert streamer.stats.streamed_bytes == sum(_logical_bytes(b) for b in blocks)
