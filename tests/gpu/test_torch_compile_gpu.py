"""Stream Model under the host's TorchCompileModel on CUDA (#40 item 7; the CPU side is
tests/host/test_torch_compile.py): with ``inductor``, the streamed compiled sampling against the same
compiled workflow without Headroom, and with ``cudagraphs`` a refusal before the first step.

What it prints (no assertion on time): the graph breaks dynamo made compiling each workflow
(``torch._dynamo.utils.counters``), the pixels' max difference and the streamed/stock time of one
sampling once compiled (the whole prompt, text encoding cached; a tiny SD1.5 UNet, so the ratio says what
the breaks at the streamed blocks cost where kernels are short, not what a full-size model pays).

The pixels: bit for bit on the CPU; on CUDA inductor's kernels are chosen per graph, and the streamer's
hooks break the graph at each streamed block, so kernels may round otherwise. The bound asserted: the
streamed compiled sampling is as close to the stock compiled one as that one is to the stock eager one
(at least 1e-3), and the print says whether it was bit for bit.

The host is imported here with CUDA (``Host(cpu=False)``), so this file runs in a process of its own
(``scripts/gpu-check`` runs one pytest per file); under DynamicVRAM Stream Model leaves the model to the
host, so the inductor test runs with ``--disable-dynamic-vram`` (``HEADROOM_DYNAMIC_VRAM=0``). Skipped
without a CUDA device, a host with TorchCompileModel, or Triton (inductor's CUDA kernels)."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from headroom_testing.stream_spy import StreamSpy
from headroom_testing.tiny_models import build_tiny_sd_checkpoint
from headroom_testing.torch_compile import CKPT, compiled_prompt, why_not_compiled

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]

SIZE, STEPS = 512, 8


@pytest.fixture(scope="module")
def cuda_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A ComfyUI imported with CUDA, the pack loaded, a tiny SD1.5 checkpoint in its models folder."""
    if "comfy.model_management" in sys.modules:
        pytest.skip("a host was imported on the CPU earlier in this process: run this file alone")
    from headroom_testing.harness import Host, HostUnavailable, find_host_root

    try:
        host = Host(find_host_root(), tmp_path_factory.mktemp("comfyui"), cpu=False)
    except HostUnavailable as exc:
        pytest.skip(str(exc))
    if (why := why_not_compiled(host, device="cuda")) is not None:
        pytest.skip(why)
    build_tiny_sd_checkpoint(host.models_dir, name=CKPT, seed=5)
    host.register_models_dir(host.models_dir)
    yield host
    torch._dynamo.reset()


def _budget(model: Any) -> str:
    """A vram_budget that streams about two thirds of the blocks: the host's activation estimate for one
    cond/uncond call, the non-block weights, a third of the blocks resident and a two-slot ring."""
    from comfyui_headroom.memory.streaming import discover_blocks
    from comfyui_headroom.memory.streaming.discovery import module_bytes

    diffusion = model.model.diffusion_model
    blocks = discover_blocks(diffusion).block_bytes()
    rest = module_bytes(diffusion) - sum(blocks)
    activation = int(model.model.memory_required([2, 4, SIZE // 8, SIZE // 8]))
    return f"{(activation + rest + sum(blocks) / 3 + 2 * max(blocks)) / 2**30:.6f}"


def _compiled_run(host: Any, prompt_of: Any) -> dict[str, Any]:
    """Compile afresh and run ``prompt_of(seed)``: the pixels and graph breaks, then the seconds of a
    second sampling (another seed) on the compiled code."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    host.run(prompt_of(3))
    pixels = host.output("d")[0][0].clone()
    counters = torch._dynamo.utils.counters
    breaks = sum(counters["graph_break"].values())
    graphs = counters["stats"]["unique_graphs"]
    torch.cuda.synchronize()
    start = time.perf_counter()
    host.run(prompt_of(4))
    torch.cuda.synchronize()
    return {"pixels": pixels, "breaks": breaks, "graphs": graphs, "seconds": time.perf_counter() - start}


def _report(
    budget: str, stock: dict[str, Any], streamed: dict[str, Any], difference: float, compile_error: float
) -> str:
    return (
        f"\ntorch.compile inductor on CUDA, tiny SD1.5 at {SIZE}x{SIZE}, {STEPS} steps, "
        f"vram_budget {budget} GB\ngraph breaks: stock {stock['breaks']} ({stock['graphs']} graphs), "
        f"streamed {streamed['breaks']} ({streamed['graphs']} graphs)\n"
        f"pixels: streamed vs stock compiled max difference {difference:.3g} "
        f"({'bit for bit' if difference == 0 else 'not bit for bit'}); stock compiled vs eager "
        f"{compile_error:.3g}\n"
        f"one compiled sampling: stock {stock['seconds']:.3f} s, streamed {streamed['seconds']:.3f} s, "
        f"ratio {streamed['seconds'] / stock['seconds']:.2f}"
    )


def _eager(prompt: dict[str, dict]) -> dict[str, dict]:
    """``prompt`` without TorchCompileModel: the sampler takes the loader's model."""
    prompt = {k: v for k, v in prompt.items() if k != "t"}
    prompt["o"] = {**prompt["o"], "inputs": {**prompt["o"]["inputs"], "model": ["c", 0]}}
    return prompt


def test_stream_model_under_inductor_gives_the_stock_compiled_pixels(
    cuda_host: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    host = cuda_host
    if host.dynamic_vram:
        pytest.skip(
            "DynamicVRAM on: Stream Model leaves the model to the host (HEADROOM_DYNAMIC_VRAM=0 runs it)"
        )
    if importlib.util.find_spec("triton") is None:
        pytest.skip("inductor's CUDA kernels need Triton, which this environment lacks")
    host.run(_eager(compiled_prompt(None, seed=3, steps=STEPS, size=SIZE)))
    eager = host.output("d")[0][0].clone()
    stock = _compiled_run(host, lambda seed: compiled_prompt(None, seed=seed, steps=STEPS, size=SIZE))
    budget = _budget(host.output("c")[0][0])
    spy = StreamSpy(host, monkeypatch)
    streamed = _compiled_run(
        host, lambda seed: compiled_prompt("after", budget, seed=seed, steps=STEPS, size=SIZE)
    )
    compile_error = float((stock["pixels"] - eager).abs().max())
    difference = float((streamed["pixels"] - stock["pixels"]).abs().max())
    with capsys.disabled():  # into scripts/gpu-check's log of the step, passed or not
        print(_report(budget, stock, streamed, difference, compile_error))
    assert torch.isfinite(stock["pixels"]).all() and stock["graphs"] > 0
    assert difference <= max(1e-3, compile_error), (difference, compile_error)
    watched = [w for w in spy.watched if w.streamer.streamed]
    assert watched, "nothing streamed at this budget"
    stats = watched[-1].streamer.stats
    assert stats.steps == STEPS and stats.misses == 0
    per_step = STEPS * len(watched[-1].streamer.streamed)
    assert stats.uploads >= per_step, "one upload per streamed block per step"


@pytest.mark.parametrize("stream", ["after", "before", "sampler"])
def test_cudagraphs_is_refused_before_the_first_step(cuda_host: Any, stream: str) -> None:
    from headroom_testing.harness import PromptFailed

    host = cuda_host
    host.free()
    with pytest.raises(PromptFailed) as failed:
        host.run(compiled_prompt(stream, backend="cudagraphs", steps=STEPS, size=SIZE))
    assert "torch.compile's 'cudagraphs' backend" in str(failed.value), failed.value
    assert failed.value.error.get("node_id") == "o"
    # refused in the OUTER_SAMPLE wrapper, before the host's load: the diffusion model never went up
    diffusion = host.output("c")[0][0].model.diffusion_model
    assert all(p.device.type == "cpu" for p in diffusion.parameters())
