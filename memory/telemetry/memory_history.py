"""The CUDA allocator's history for one prompt, in one click: armed for the next prompt, recorded while it
runs (``torch.cuda.memory._record_memory_history``), dumped when it ends (``_dump_snapshot``) to a file
named after the prompt, for PyTorch's memory viewer (https://pytorch.org/memory_viz). Off by default;
without CUDA it says so and records nothing.

The prompt's end: the host reports it when the next prompt starts, so the recorder also ends a recording
when no node has started for ``idle_s`` after the last one finished (and on a "stop" from the route).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..optional import optional_module

log = logging.getLogger("headroom")
MAX_ENTRIES = 100_000  # allocator events kept (PyTorch's own example uses 100000)
IDLE_S = 3.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def cuda_memory() -> tuple[Any, str]:
    """``torch.cuda.memory`` when it can record history, else None and the reason."""
    torch = optional_module("torch", "the CUDA memory history")
    if torch is None:
        return None, "no torch"
    if not torch.cuda.is_available():
        return None, "no CUDA device: the allocator history exists only for CUDA memory"
    memory = torch.cuda.memory
    if not hasattr(memory, "_record_memory_history") or not hasattr(memory, "_dump_snapshot"):
        return None, f"this torch ({torch.__version__}) cannot record the allocator's history"
    return memory, ""


def snapshot_name(prompt_id: str, prompt: dict[str, Any] | None) -> str:
    """The file name: the prompt's output prefix (its ``filename_prefix``, as its images are named) and id."""
    prefix = "prompt"
    for node in (prompt or {}).values():
        value = node.get("inputs", {}).get("filename_prefix") if isinstance(node, dict) else None
        if isinstance(value, str) and value.strip():
            prefix = value.strip()
            break
    name = _UNSAFE.sub("_", f"{prefix}-{prompt_id}").strip("._")[:120] or "prompt"
    return f"headroom-memory-{name}.pickle"


class MemoryHistory:
    """Arm, record, dump. ``memory``: ``torch.cuda.memory`` or a stand-in (None: unavailable, ``reason``);
    ``folder``: where snapshots go."""

    def __init__(
        self, memory: Any, reason: str, folder: Path, timer: Callable[..., Any] = threading.Timer
    ) -> None:
        self.memory, self.reason, self.folder, self.timer = memory, reason, folder, timer
        self.armed = False
        self.recording: str | None = None  # the prompt id being recorded
        self.name = ""
        self.files: dict[str, Path] = {}  # prompt id -> its snapshot
        self.error = ""
        self._idle: Any = None
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self.memory is not None

    def arm(self, on: bool = True) -> str:
        """Record the next prompt (``on``), or disarm; returns "" or why it cannot."""
        if on and not self.available:
            return self.reason
        with self._lock:
            self.armed = on
        return ""

    def prompt_started(self, prompt_id: str, prompt: dict[str, Any] | None) -> None:
        self.stop()  # the previous prompt has ended
        with self._lock:
            if not self.armed or not self.available:
                return
            self.armed = False
            try:
                self.memory._record_memory_history(max_entries=MAX_ENTRIES)
            except Exception as exc:  # never break the prompt for a diagnostic
                self.error = f"could not start recording: {exc!r}"
                log.warning("Headroom: memory history: %s", self.error)
                return
            self.recording, self.name = prompt_id, snapshot_name(prompt_id, prompt)
            log.info("Headroom: recording the CUDA allocator's history for prompt %s", prompt_id)

    def node_started(self) -> None:
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None

    def node_finished(self, idle_s: float = IDLE_S) -> None:
        with self._lock:
            if self.recording is None:
                return
            if self._idle is not None:
                self._idle.cancel()
            self._idle = self.timer(idle_s, self.stop)
            self._idle.daemon = True
            self._idle.start()

    def stop(self) -> Path | None:
        """End the recording (if any): dump the snapshot and stop recording; returns its path."""
        with self._lock:
            prompt_id, self.recording = self.recording, None
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            if prompt_id is None:
                return None
            path = self.folder / self.name
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                self.memory._dump_snapshot(str(path))
                self.files[prompt_id] = path
                log.info("Headroom: memory history of prompt %s in %s (open it at pytorch.org/memory_viz)",
                         prompt_id, path)  # fmt: skip
            except Exception as exc:
                self.error = f"could not write the snapshot: {exc!r}"
                log.warning("Headroom: memory history: %s", self.error)
                return None
            finally:
                try:
                    self.memory._record_memory_history(enabled=None)
                except Exception:
                    pass
            return path

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "available": self.available,
                "reason": self.reason,
                "armed": self.armed,
                "recording": self.recording,
                "files": {pid: path.name for pid, path in self.files.items()},
                "error": self.error,
            }
