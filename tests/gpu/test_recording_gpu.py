"""Comfy Compiler safety on CUDA (issue #27, item 5): a step captured with ``torch.cuda.graph`` while the
Memory Monitor samples and a streamed model is set up around it. ``recording.capturing()`` sees the
capture on the capturing thread and, through the host's capture streams (``comfy.model_prefetch.
GRAPH_CAPTURE_STREAMS``, a stand-in module where the host has none), from the sampler's thread; the
sampler skips its samples while the capture runs, the capture succeeds in the strictest mode ("global":
any forbidden CUDA call from any thread breaks it), the graph replays the eager result, and a streamed
sampling's streamer attaches only outside the capture. Skipped where there is no CUDA device."""

from __future__ import annotations

import sys
import threading
import time
from types import ModuleType

import pytest
import torch
from torch import nn

from comfyui_headroom.memory.streaming import BlockStreamer, choose_streaming, discover_blocks
from comfyui_headroom.memory.streaming.discovery import module_bytes
from comfyui_headroom.memory.telemetry.probe import MemoryProbe
from comfyui_headroom.memory.telemetry.sampler import Sampler
from comfyui_headroom.nodes.host import recording

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]


class Dit(nn.Module):
    """A layered model as the streaming GPU test builds it: an embedding, blocks, a head."""

    def __init__(self, width: int = 256, depth: int = 6) -> None:
        super().__init__()
        self.embed = nn.Linear(64, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def _layers() -> nn.Module:
    torch.manual_seed(0)
    return Dit().eval()


@pytest.fixture
def capture_streams(monkeypatch: pytest.MonkeyPatch) -> dict[int, torch.cuda.Stream]:
    """The host's capture streams (0.33's comfy/model_prefetch.py keeps one per device)."""
    module = sys.modules.get("comfy.model_prefetch")
    if module is None:
        module = ModuleType("comfy.model_prefetch")
        monkeypatch.setitem(sys.modules, "comfy.model_prefetch", module)
    streams = {0: torch.cuda.Stream()}
    monkeypatch.setattr(module, "GRAPH_CAPTURE_STREAMS", streams, raising=False)
    monkeypatch.setattr(recording, "_told", set())
    return streams


def test_a_captured_step_with_the_monitor_sampling_replays_the_eager_result(
    capture_streams: dict[int, torch.cuda.Stream],
) -> None:
    model = _layers().cuda()
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        eager = model(x)
    probe = MemoryProbe.detect()
    sampler = Sampler(probe.read, 0.001, paused=lambda: recording.skip("the memory monitor's sample"))
    sampler.ensure_running()
    seen: list[bool] = []
    try:
        stream = capture_streams[0]
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        assert not recording.capturing()
        with torch.no_grad(), torch.cuda.graph(graph, stream=stream, capture_error_mode="global"):
            seen.append(recording.capturing())  # this thread's stream
            other = threading.Thread(target=lambda: seen.append(recording.capturing()))
            other.start()
            other.join()  # another thread, through the host's capture streams
            time.sleep(0.05)  # the sampler ticks meanwhile: each skipped
            out = model(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph.replay()
        torch.cuda.synchronize()
    finally:
        sampler.stop()
    assert seen == [True, True]
    assert sampler.skipped > 0, "the sampler sampled during the capture"
    assert torch.equal(out, eager)
    assert not recording.capturing()


def test_the_streamer_is_never_set_up_inside_a_capture(capture_streams: dict[int, torch.cuda.Stream]) -> None:
    """What the sampling's first model call does (``sampling._Session.model_call``): under a capture the
    streamer waits; after it, it attaches inside the host's pause and streams to the resident result."""
    model = _layers()
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    choice = choose_streaming(blocks, rest, rest + sum(blocks) // 2 + 2 * max(blocks))
    x = torch.randn(8, 64, device="cuda")
    resident = _layers().cuda()
    with torch.no_grad():
        expected = resident(x)
    stream = capture_streams[0]
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    attached: list[BlockStreamer] = []
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream, capture_error_mode="global"):
        if not recording.skip("streaming"):
            attached.append(BlockStreamer(model, layout, choice, "cuda"))
        inside = resident(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    assert attached == [] and torch.equal(inside, expected)
    if not recording.skip("streaming"):
        with recording.paused():
            streamer = BlockStreamer(model, layout, choice, "cuda")
            streamer.attach()
        attached.append(streamer)
    try:
        with torch.no_grad():
            assert torch.equal(model(x), expected)
    finally:
        attached[0].detach(release=True)
    assert attached[0].stats.uploads > 0
