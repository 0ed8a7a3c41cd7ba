"""Comfy Compiler safety on the host's own code paths, with a stand-in for CUDA's capture: while the host
records a step (``recording.capturing()`` true on the sampling thread, as ``torch.cuda.
is_current_stream_capturing()`` is during a ``torch.cuda.graph`` capture), Headroom attaches no streamer,
starts no prefetch and makes no residency move; once the recording ends the same sampling streams, its
latent still the stock one bit for bit, and the streamer's allocations happen inside the host's
``pause_malloc_graph`` (a stand-in on hosts older than aimdo 0.5's compiler, looked up by name)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import torch

from headroom_testing import fixture_nodes as fx
from headroom_testing.harness import Host
from headroom_testing.stream_spy import StreamSpy, tiny_sd_sources

pytestmark = pytest.mark.host

CKPT = "tiny_sd15_recording.safetensors"
STEPS = 2


class Capture:
    """The stand-in: the sampling thread is "capturing" for its first ``calls`` questions; and a
    ``pause_malloc_graph`` that counts how deep it is paused."""

    def __init__(self, calls: int) -> None:
        self.left, self.thread = calls, threading.get_ident()
        self.asked = 0
        self.depth = 0

    def capturing(self) -> bool:
        if threading.get_ident() != self.thread:  # capture is per thread, as CUDA's
            return False
        self.asked += 1
        if self.left > 0:
            self.left -= 1
            return True
        return False

    @contextlib.contextmanager
    def pause_malloc_graph(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


@pytest.fixture
def capture(host: Host, monkeypatch: pytest.MonkeyPatch) -> Iterator[Capture]:
    recording = host.pack_module("nodes.host.recording")
    stand_in = Capture(calls=0)
    monkeypatch.setattr(recording, "capturing", stand_in.capturing)
    monkeypatch.setattr(recording, "_told", set())
    prefetch = sys.modules.get("comfy.model_prefetch")
    if prefetch is None:  # hosts before 0.29 have no comfy.model_prefetch
        prefetch = ModuleType("comfy.model_prefetch")
        monkeypatch.setitem(sys.modules, "comfy.model_prefetch", prefetch)
    monkeypatch.setattr(prefetch, "pause_malloc_graph", stand_in.pause_malloc_graph, raising=False)
    yield stand_in


@pytest.fixture(scope="module")
def sd(host: Host) -> Iterator[dict[str, Any]]:
    yield tiny_sd_sources(host, CKPT, 9, "recorded")
    fx.VALUES.clear()


def _prompt(keys: dict[str, Any], model: list) -> dict[str, Any]:
    inputs = {"seed": 2, "steps": STEPS, "cfg": 5.0, "sampler_name": "euler", "scheduler": "normal"}
    common = {"positive": ["p", 0], "negative": ["n", 0], "latent_image": ["l", 0], "denoise": 1.0}
    return {
        "m": fx.source("MODEL", keys["m"]),
        "p": fx.source("CONDITIONING", keys["p"]),
        "n": fx.source("CONDITIONING", keys["n"]),
        "l": fx.source("LATENT", keys["l"]),
        "x": {
            "class_type": "HeadroomStreamModel",
            "inputs": {"model": ["m", 0], "vram_budget": keys["budget"]},
        },
        "o": {"class_type": "KSampler", "inputs": {"model": model, **inputs, **common}},
        "keep": fx.sink(["o", 0]),
    }


def test_a_recorded_step_is_not_streamed_and_the_streamer_attaches_after_it_paused(
    host: Host, sd: dict[str, Any], capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    stock = host.run(_prompt(sd, ["m", 0])).outputs["o"][0][0]["samples"]
    spy = StreamSpy(host, monkeypatch)
    cls = host.pack_module("memory.streaming.streamer").BlockStreamer
    attach, at = cls.attach, []

    def attach_paused(streamer: Any) -> Any:
        at.append((capture.asked, capture.depth))
        return attach(streamer)

    monkeypatch.setattr(cls, "attach", attach_paused)
    capture.left = 1  # the first model call is recorded (the host batches cond and uncond: one a step)
    streamed = host.run(_prompt(sd, ["x", 0])).outputs["o"][0][0]["samples"]
    assert torch.equal(streamed, stock)
    assert at == [(2, 1)], "attached at the first call after the recording, inside the host's pause"
    assert [e for e, _ in spy.log] == ["attach", "detach"]
    assert spy.streamers()[0].stats.uploads > 0


def test_nothing_is_attached_prefetched_or_moved_while_the_host_records(
    host: Host, sd: dict[str, Any], capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = host.pack_module("nodes.host.recording")
    capture.left = 10**6
    ops = host.pack_module("nodes.host.residency")._HostOps()
    handle = type("Handle", (), {"patcher": sd["model"], "module": sd["model"].model})()

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a device move inside a recorded region")

    with monkeypatch.context() as m:  # the host's own loads (of the sampling below) are the host's
        m.setattr(host.model_management, "load_models_gpu", forbidden)
        m.setattr(host.model_management, "free_memory", forbidden)
        assert ops.load(handle) == f"not now: {recording.RECORDING}"
        assert ops.evict(handle) is None
        assert host.pack_module("nodes.host.prefetch").HostPrefetch().why_sync(handle) == recording.RECORDING
    spy = StreamSpy(host, monkeypatch)
    sampling = host.pack_module("nodes.host.sampling")
    patched, stream = sampling.stream_model(sd["model"], sampling.StreamSettings())
    with stream.sampling():
        v = fx.VALUES
        host.nodes.common_ksampler(patched, 2, 1, 1.0, "euler", "normal", v[sd["p"]], v[sd["n"]], v[sd["l"]])
    assert spy.log == [] and "recording" in stream.last_run.note
