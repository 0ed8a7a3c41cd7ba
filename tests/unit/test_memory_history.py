"""The CUDA allocator's history for the next prompt (memory/telemetry/memory_history.py), with a stand-in
for torch.cuda.memory: armed, recorded for exactly one prompt, dumped under the prompt's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from comfyui_headroom.memory.telemetry.memory_history import MemoryHistory, cuda_memory, snapshot_name


class FakeMemory:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def _record_memory_history(self, enabled: Any = "all", max_entries: int = 0) -> None:
        self.calls.append(("record", enabled if enabled is None else max_entries))

    def _dump_snapshot(self, path: str) -> None:
        self.calls.append(("dump", Path(path).name))
        Path(path).write_bytes(b"snapshot")


class ManualTimer:
    """threading.Timer's shape; fires when the test says so."""

    made: list[ManualTimer] = []

    def __init__(self, seconds: float, fn: Any) -> None:
        self.fn, self.cancelled, self.daemon = fn, False, False
        ManualTimer.made.append(self)

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.fn()


PROMPT = {"9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "my run/flux"}}}


def test_off_by_default_records_one_armed_prompt_and_names_the_file_after_it(tmp_path: Path) -> None:
    memory = FakeMemory()
    history = MemoryHistory(memory, "", tmp_path, timer=ManualTimer)
    history.prompt_started("p0", PROMPT)
    assert memory.calls == [] and history.status()["armed"] is False  # off by default
    assert history.arm() == ""
    history.prompt_started("p1", PROMPT)
    assert memory.calls == [("record", 100_000)] and history.status()["recording"] == "p1"
    history.node_started()
    history.node_finished()
    history.node_started()  # another node: the idle timer is cancelled
    assert ManualTimer.made[-1].cancelled
    history.node_finished()
    ManualTimer.made[-1].fire()  # idle after the last node: the prompt has ended
    name = "headroom-memory-my_run_flux-p1.pickle"
    assert memory.calls[1:] == [("dump", name), ("record", None)]
    assert history.status()["files"] == {"p1": name} and (tmp_path / name).read_bytes() == b"snapshot"
    history.prompt_started("p2", PROMPT)  # not armed again: one prompt only
    assert len(memory.calls) == 3 and history.stop() is None


def test_the_next_prompts_start_ends_a_recording(tmp_path: Path) -> None:
    memory = FakeMemory()
    history = MemoryHistory(memory, "", tmp_path, timer=ManualTimer)
    history.arm()
    history.prompt_started("a", None)
    history.prompt_started("b", None)
    assert [c[0] for c in memory.calls] == ["record", "dump", "record"]
    assert history.files["a"].name == snapshot_name("a", None) == "headroom-memory-prompt-a.pickle"


def test_unavailable_without_cuda_says_why_and_never_arms(tmp_path: Path) -> None:
    history = MemoryHistory(
        None, "no CUDA device: the allocator history exists only for CUDA memory", tmp_path
    )
    assert history.arm() == history.reason and not history.status()["armed"]
    history.prompt_started("p", PROMPT)
    assert history.status()["recording"] is None


def test_this_machine_reports_what_it_can_do() -> None:
    memory, reason = cuda_memory()
    assert (memory is None) == bool(reason)
