"""GPU-only parts of issue #28: the CUDA allocator's history recorded for one prompt and dumped under its
name (memory/telemetry/memory_history.py), and a node bounded by its uploads (memory/telemetry/bounds.py)
from a real host-to-device copy timed on the device."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from comfyui_headroom.memory.telemetry.bounds import bounded_by
from comfyui_headroom.memory.telemetry.memory_history import MemoryHistory, cuda_memory
from comfyui_headroom.memory.telemetry.runs import ResidencyEvent

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]


def test_memory_history_records_the_armed_prompt_and_dumps_a_snapshot(tmp_path: Path) -> None:
    memory, reason = cuda_memory()
    assert memory is not None, reason
    history = MemoryHistory(memory, reason, tmp_path)
    assert history.arm() == ""
    history.prompt_started("p1", {"9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "gpu"}}})
    x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")  # an allocation the history must show
    del x
    path = history.stop()
    assert path is not None and path.name == "headroom-memory-gpu-p1.pickle"
    snapshot = pickle.loads(path.read_bytes())
    assert snapshot["segments"] and any(t for t in snapshot.get("device_traces", []))


def test_a_node_that_only_uploads_is_upload_bound() -> None:
    nbytes = 512 * 2**20
    host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    host.to("cuda", non_blocking=True)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000
    rate = nbytes / seconds  # this bus, measured
    event = ResidencyEvent(0.0, "p", "1", "unet", "pinned", "gpu", nbytes, "load")
    bound = bounded_by(seconds * 1.05, {}, [event], upload_rate=rate)
    assert bound.kind == "upload" and bound.upload_bytes == nbytes, bound.line
