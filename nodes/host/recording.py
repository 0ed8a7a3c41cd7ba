"""Headroom's work stays out of the host's recorded regions (Comfy Compiler safety).

From 0.33 on the host records parts of a step and replays them: ``comfy/model_prefetch.py`` captures a
layer's compute into a ``torch.cuda.graph`` on its own capture stream (``GRAPH_CAPTURE_STREAMS``; on
0.33 for the dynamic-VRAM decode of LLM text encoders and MiniMax's AR decoder), and comfy-aimdo 0.5's
compiler (host 0.35+) records a whole step's allocations into a malloc graph, which a custom node pauses
with ``comfy.model_prefetch.pause_malloc_graph()`` around allocations of its own. An allocation or a
stream synchronisation inside a recorded region aborts the process or breaks the capture (ComfyUI#16342,
KJNodes#750).

So what Headroom does during a step asks here first:

- ``capturing()``: a CUDA graph is being captured now, on this thread's stream or on one of the host's
  capture streams. Headroom then skips or defers its work: the streamer does not attach (the sampling runs
  unstreamed, with the note ``RECORDING``, and attaches at a later call), the monitor's sampler skips the
  sample, a prefetch stays synchronous, and the residency controller leaves its moves to the next node.
- ``paused()``: the host's pause of the malloc graph around an allocation Headroom must make during a
  step (the streamer's ring and buffers when it attaches at a sampling's first model call).

Both are looked up by name on the running host and fail open: without CUDA, without the host's capture
streams or its pause, ``capturing()`` is False and ``paused()`` does nothing; an error is one log line.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from ...memory.process_state import PROCESS

_log = logging.getLogger("headroom")

RECORDING = "the host is recording this step into a CUDA graph"
_told: set[str] = PROCESS.hold(
    "host.recording: said once", set(), "what was said once per process", reset=lambda: _told.clear()
)


def _once(key: str, message: str, *args: Any) -> None:
    if key not in _told:
        _told.add(key)
        _log.info(message, *args)


def _stream_capturing(torch: Any, stream: Any = None) -> bool:
    if stream is None:
        return bool(torch.cuda.is_current_stream_capturing())
    with torch.cuda.stream(stream):
        return bool(torch.cuda.is_current_stream_capturing())


def capturing() -> bool:
    """Whether a CUDA graph is being captured now: on this thread's current stream, or on one of the host's
    capture streams (``comfy.model_prefetch.GRAPH_CAPTURE_STREAMS``), so other threads see it too. False
    without CUDA, and where the question cannot be asked (one log line)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    try:
        if _stream_capturing(torch):
            return True
        prefetch = sys.modules.get("comfy.model_prefetch")
        streams = getattr(prefetch, "GRAPH_CAPTURE_STREAMS", None)
        return isinstance(streams, dict) and any(_stream_capturing(torch, s) for s in list(streams.values()))
    except Exception as exc:
        _once("capturing", "Headroom: cannot tell whether a CUDA graph is being captured (%r)", exc)
        return False


def host_pause() -> Any:
    """The host's ``pause_malloc_graph`` (``comfy.model_prefetch``), or None where it has none."""
    return getattr(sys.modules.get("comfy.model_prefetch"), "pause_malloc_graph", None)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Allocations inside stay out of the host's malloc graph: its ``pause_malloc_graph()`` where it has
    one (a no-op when no graph records), else nothing. Fails open: a pause that cannot start is logged."""
    pause = host_pause()
    with contextlib.ExitStack() as stack:
        if pause is not None:
            try:
                stack.enter_context(pause())
            except Exception as exc:
                _once("pause", "Headroom: the host's pause_malloc_graph failed (%r); going on", exc)
        yield


def skip(what: str) -> bool:
    """True (and said once per ``what``) when Headroom's ``what`` must wait: a capture is under way."""
    if not capturing():
        return False
    _once(what, "Headroom: %s waits: %s", what, RECORDING)
    return True
