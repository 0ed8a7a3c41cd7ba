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
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host, PromptFailed, PromptInvalid
from headroom_testing.stream_spy import StreamSpy, budget_gb
from headroom_testing.tiny_models import build_tiny_sd_checkpoint
from headroom_testing.torch_compile import CKPT, STEPS, compiled_prompt, record_inductor, why_not_compiled

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def compiled(host: Host) -> Iterator[dict[str, Any]]:
    """The stock compiled workflow's pixels, the diffusion model and a budget that streams it."""
    if (why := why_not_compiled(host)) is not None:
        pytest.skip(why)
    # fp32: the host computes in fp32 on the CPU, so the disk tier's weights are views of the file (an fp16
    # file would be converted into RAM on load)
    build_tiny_sd_checkpoint(host.models_dir, name=CKPT, seed=5, dtype=torch.float32)
    host.register_models_dir(host.models_dir)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    host.run(compiled_prompt(None))
    pixels = host.output("d")[0][0]
    if not torch.isfinite(pixels).all():  # seen with ATEN_CPU_CAPABILITY=avx2 on an AVX-512 CPU, stock nodes
        isa = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
        pytest.skip(f"the host's own compiled run (no Headroom node) gives NaN pixels here ({isa})")
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
    result = host.run(compiled_prompt(stream, compiled["budget"]))
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


def test_the_offload_loaders_disk_tier_under_torch_compile_reads_through_the_file(
    host: Host, compiled: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Offload Loader's "disk" residency on the CPU: every module holding weights of the file reads
    them through it as its forward runs (``read_through``'s hooks). Under TorchCompileModel the hooks run
    eagerly: inductor compiles none of their code, each compiled forward calls them, and the weights
    view the file again after. Without ``eager`` dynamo traced their copy and rebinding.

    The pixels are within 1e-4 of the stock compiled workflow's, not bit for bit: dynamo breaks the graph
    at every module holding weights (36 breaks instead of the stock 12 on 0.33), so inductor fuses the
    ops between them otherwise (measured: max difference 1.4e-5; uncompiled, the disk tier is bit for
    bit the stock loader's, tests/host/test_offload_loader.py)."""
    host.free()
    torch._dynamo.reset()  # compiled afresh: code compiled before the hooks were on does not call them
    traces: list[str] = []
    record_inductor(monkeypatch, traces)
    read_through = host.pack_module("memory.residency.read_through")
    calls: dict[int, int] = {}
    before = read_through._Hooks.before

    def counted(hooks: Any, module: torch.nn.Module, *args: object) -> None:
        calls[id(module)] = calls.get(id(module), 0) + 1
        before(hooks, module, *args)

    monkeypatch.setattr(read_through._Hooks, "before", counted)
    host.run(compiled_prompt(None, residency="disk"))
    pixels = host.output("d")[0][0]
    print(f"disk tier compiled: max difference {float((pixels - compiled['pixels']).abs().max()):.3g}")
    assert torch.allclose(pixels, compiled["pixels"], rtol=0, atol=1e-4)
    assert traces, "the disk model's forward was compiled"
    hooks = ("memory/residency", "memory/streaming")  # read_through, host_memory, mapped; file_reads
    assert not [t for t in traces if any(h in t for h in hooks)], "the read-through hooks are never traced"
    managed = host.pack_module("nodes.host.state").residency().controller.managed
    (model,) = [m.handle for key, m in managed.items() if key.endswith(":checkpoint:diffusion_model")]
    assert read_through.installed(model.module)
    unet = model.module.diffusion_model
    first, last = unet.input_blocks[0][0], unet.out[2]  # each computes once per model call
    print(f"read through per module: {calls.get(id(first))}, {calls.get(id(last))} of {len(calls)} modules")
    assert calls.get(id(first), 0) >= STEPS and calls.get(id(last), 0) >= STEPS, "read at every forward"
    fp = host.pack_module("memory.residency").footprint(model.module, model.files or ())
    assert fp.mapped > 0.9 * (fp.mapped + fp.ram), fp  # the weights view the file again


@pytest.mark.parametrize("where", ["validation", "sampling"])
@pytest.mark.parametrize("stream", ["after", "before", "sampler"])
def test_a_streamed_model_under_cudagraphs_is_refused_before_sampling(
    host: Host, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stream: str, where: str
) -> None:
    """TorchCompileModel's ``cudagraphs`` backend replays the weights' device addresses it recorded; the
    streamer binds a block's weights to ring slots at every step. The host's validation refuses it on the
    TorchCompileModel's ``backend`` input, where the prompt says so (Stream Model on either side of it, or
    the Streaming KSampler), before any node runs; what validation does not see (``where`` "sampling": its
    check stood aside) Stream Model and the Streaming KSampler refuse in their OUTER_SAMPLE wrapper, before
    the host loads or samples anything (so this runs on the CPU too), naming the backend and the way out."""
    if (why := why_not_compiled(host, device="cuda")) is not None:
        pytest.skip(why)
    build_tiny_sd_checkpoint(host.models_dir, name=CKPT, seed=5, dtype=torch.float32)
    host.register_models_dir(host.models_dir)
    spy = StreamSpy(host, monkeypatch)
    import comfy.model_base

    calls: list[object] = []  # the host's model calls: none may happen

    apply_model = comfy.model_base.BaseModel.apply_model
    monkeypatch.setattr(
        comfy.model_base.BaseModel, "apply_model", lambda *a, **k: calls.append(a) or apply_model(*a, **k)
    )
    prompt = compiled_prompt(stream, backend="cudagraphs")
    compile_node = "t2" if stream == "before" else "t"
    if where == "sampling":
        budget_check = host.pack_module("nodes.host.budget_check")
        monkeypatch.setattr(budget_check, "refuse_cudagraphs", lambda prompt, answer: answer)
    with caplog.at_level("ERROR", logger="headroom"), pytest.raises((PromptFailed, PromptInvalid)) as failed:
        host.run(prompt)
    message = str(failed.value)
    assert "torch.compile's 'cudagraphs' backend" in message and "'inductor'" in message, message
    if where == "validation":
        assert isinstance(failed.value, PromptInvalid)
        assert f"'{compile_node}': {{'errors'" in message and "'input_name': 'backend'" in message, message
    else:
        assert isinstance(failed.value, PromptFailed)
        assert failed.value.error.get("node_id") == "o"  # the sampling node
    assert not calls and not spy.log, "refused before the first step"
    assert [r for r in caplog.records if "'cudagraphs' backend" in r.getMessage()], "one log line"
