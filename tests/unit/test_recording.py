"""Comfy Compiler safety without a GPU: ``recording`` asks the host's capture streams and this thread's
stream whether a CUDA graph is being captured, pauses the host's malloc graph by name, and fails open
where the host has neither. CUDA is a stand-in here (a torch.cuda whose capture predicate the test sets)."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from comfyui_headroom.memory.telemetry.sampler import Sampler
from comfyui_headroom.nodes.host import recording


class FakeCuda:
    """torch.cuda as far as ``recording`` asks it: the stream each thread has, and which are capturing."""

    def __init__(self) -> None:
        self.current: Any = "default"
        self.capturing: set[Any] = set()

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def is_current_stream_capturing(self) -> bool:
        return self.current in self.capturing

    @contextlib.contextmanager
    def stream(self, s: Any) -> Iterator[None]:
        before, self.current = self.current, s
        try:
            yield
        finally:
            self.current = before


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=fake))
    monkeypatch.delitem(sys.modules, "comfy.model_prefetch", raising=False)
    monkeypatch.setattr(recording, "_told", set())
    return fake


def host_prefetch(monkeypatch: pytest.MonkeyPatch, **names: Any) -> ModuleType:
    module = ModuleType("comfy.model_prefetch")
    for name, value in names.items():
        setattr(module, name, value)
    monkeypatch.setitem(sys.modules, "comfy.model_prefetch", module)
    return module


def test_a_capture_on_this_threads_stream_is_seen(cuda: FakeCuda) -> None:
    assert not recording.capturing()
    cuda.capturing.add("default")
    assert recording.capturing() and recording.skip("streaming")


def test_a_capture_on_the_hosts_capture_stream_is_seen_from_any_thread(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_prefetch(monkeypatch, GRAPH_CAPTURE_STREAMS={0: "capture-0"})  # 0.33's comfy/model_prefetch.py
    assert not recording.capturing()
    cuda.capturing.add("capture-0")
    assert recording.capturing() and cuda.current == "default", "this thread's stream is given back"


def test_without_cuda_or_with_a_broken_predicate_nothing_is_capturing(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cuda, "is_initialized", lambda: False)  # never initialise CUDA to ask
    cuda.capturing.add("default")
    assert not recording.capturing()
    monkeypatch.setattr(cuda, "is_initialized", lambda: True)

    def broken() -> bool:
        raise RuntimeError("no driver")

    monkeypatch.setattr(cuda, "is_current_stream_capturing", broken)
    with caplog.at_level(logging.INFO, logger="headroom"):
        assert not recording.capturing() and not recording.capturing()
    assert caplog.text.count("cannot tell") == 1


def test_paused_enters_the_hosts_pause_by_name_and_fails_open(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with recording.paused():  # 0.33 (aimdo 0.4.13) has no pause: nothing to enter
        pass
    log: list[str] = []

    @contextlib.contextmanager
    def pause_malloc_graph() -> Iterator[None]:
        log.append("paused")
        try:
            yield
        finally:
            log.append("resumed")

    module = host_prefetch(monkeypatch, pause_malloc_graph=pause_malloc_graph)
    with recording.paused():
        log.append("ours")
    assert log == ["paused", "ours", "resumed"]
    with pytest.raises(ValueError), recording.paused():  # an error inside still resumes recording
        raise ValueError
    assert log[-1] == "resumed"

    def broken() -> Any:
        raise RuntimeError("aimdo changed")

    module.pause_malloc_graph = broken
    with caplog.at_level(logging.INFO, logger="headroom"), recording.paused():
        log.append("still ours")
    assert log[-1] == "still ours" and "pause_malloc_graph failed" in caplog.text


def test_the_monitors_sampler_skips_its_samples_while_the_host_records(cuda: FakeCuda) -> None:
    reads: list[int] = []
    recorded = iter([True, True, False])
    sampler = Sampler(lambda: reads.append(1) or SimpleNamespace(), 1.0, paused=lambda: next(recorded, False))
    wanted = iter([True, True, True, False])
    sampler.wanted = lambda: next(wanted)
    sampler.period_s = 1e-6
    sampler._loop()
    assert sampler.skipped == 2 and len(reads) == 1
