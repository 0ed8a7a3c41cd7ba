"""Make the model calls of one sampling step share each streamed block's upload: record, then replay.

ComfyUI builds a step's model calls (cond and uncond, when its memory estimate says one batch does not
fit) one after another inside its ``calc_cond_batch``: each call's inputs are built after the previous
call returned, so they cannot be gathered from the model call. A wrapper around ``calc_cond_batch``
therefore runs the host's function twice. A dry run records each call's arguments (the model returns
zeros); the recorded calls then run through the streamer's ``run_together`` (each block uploaded once
for all of them, each call computing exactly what it computes alone); a second run of the host's
function gets each call's output back, so the host combines them as it always does: bitwise the stock
result. Anything the host computes while building a call (a ControlNet's output) is computed twice.

Only used while the host does split: after a step with a single call, steps run plainly until a split is
seen again. Calls whose conds carry hooks (scheduled LoRA) run plainly: the host patches weights between
them. This module is the policy only; ``nodes/host/sampling.py`` installs it where the host has the
wrapper (ComfyUI with patcher wrappers, late 2024 on) and routes every model call through it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence, Sized
from typing import Any, Protocol

import torch

_log = logging.getLogger("headroom.streaming")
_UNKNOWN = object()

ModelCall = Callable[[Any, dict[str, Any]], Any]  # (the host's apply_model, its args) -> the model's output


class Lockstep(Protocol):
    """What the recorder needs of the streamer (``BlockStreamer``)."""

    @property
    def streamed(self) -> Sized: ...  # the blocks that stream (empty: everything is resident)

    def run_together(self, calls: Sequence[Callable[[], Any]]) -> list[Any]: ...


class SharedUploads:
    """One sampling's recorder: ``model_call`` for every model call, ``calc_cond_batch`` for the host's
    per-step wrapper. ``streamer()`` is the streamer once attached (None before)."""

    KEY = "headroom.streaming.shared_uploads"  # the wrapper's key in the host's patcher

    def __init__(self, streamer: Callable[[], Lockstep | None], call_model: ModelCall) -> None:
        self._streamer = streamer
        self._call_model = call_model
        self._mode: str | None = None  # "record" or "replay" inside the wrapper's two host runs
        self._recorded: list[tuple[Any, dict[str, Any]]] = []
        self._outputs: list[tuple[dict[str, Any], Any]] = []
        self._share = True  # record the next step (it starts True: the first step may split)
        self.calls = 0  # model calls computed
        self.shared_steps = 0
        self.replay_mismatches = 0
        self._warned = False

    def counts(self) -> dict[str, int]:
        return {
            "model_calls": self.calls,
            "shared_steps": self.shared_steps,
            "replay_mismatches": self.replay_mismatches,
        }

    def _streams(self) -> bool:
        streamer = self._streamer()
        return streamer is not None and bool(streamer.streamed)

    def model_call(self, apply_model: Any, args: dict[str, Any]) -> Any:
        if self._mode == "record":
            self._recorded.append((apply_model, args))
            return torch.zeros_like(args["input"])
        if self._mode == "replay":
            if self._outputs and same_call(self._outputs[0][0], args):
                return self._outputs.pop(0)[1]
            self.replay_mismatches += 1  # the host built another call than recorded: compute it
            _log.warning("Headroom: a model call differs from its dry run; computing it again")
        self.calls += 1
        return self._call_model(apply_model, args)

    def calc_cond_batch(self, executor: Any, *args: Any, **kwargs: Any) -> Any:
        """The host's ``calc_cond_batch(model, conds, x_in, timestep, model_options, ...)`` wrapper:
        every argument goes through as given (a host that adds one loses nothing); only ``conds`` is
        read, and where it cannot be found the step runs unshared, with one log line."""
        conds = args[1] if len(args) > 1 else kwargs.get("conds", _UNKNOWN)
        if conds is _UNKNOWN:
            if not self._warned:
                self._warned = True
                _log.warning(
                    "Headroom: calc_cond_batch has no conds argument on this host; steps run unshared"
                )
            return executor(*args, **kwargs)
        if not self._share or has_hooks(conds):
            before = self.calls
            out = executor(*args, **kwargs)
            self._share = self.calls - before > 1 and self._streams()  # a split: share from the next step
            return out
        self._mode, self._recorded = "record", []
        try:
            executor(*args, **kwargs)
        finally:
            self._mode = None
        recorded, self._recorded = self._recorded, []
        calls = [functools.partial(self._call_model, apply_model, args) for apply_model, args in recorded]
        streamer = self._streamer()
        if streamer is not None and len(calls) > 1:
            outputs = streamer.run_together(calls)
            self.shared_steps += bool(streamer.streamed)
        else:
            outputs = [call() for call in calls]
        self.calls += len(calls)
        self._outputs = [(args, out) for (_, args), out in zip(recorded, outputs, strict=True)]
        self._mode = "replay"
        try:
            out = executor(*args, **kwargs)
        finally:
            self._mode, self._outputs = None, []
        self._share = len(calls) > 1 and self._streams()
        return out


def same_call(recorded: dict[str, Any], args: dict[str, Any]) -> bool:
    """The replayed call is the recorded one: same input, timesteps and cond/uncond chunks."""
    return (
        recorded.get("cond_or_uncond") == args.get("cond_or_uncond")
        and torch.equal(recorded["input"], args["input"])
        and torch.equal(recorded["timestep"], args["timestep"])
    )


def has_hooks(conds: Any) -> bool:
    """Whether any cond of the step carries hooks (the host patches weights between such calls)."""
    return any(c.get("hooks") is not None for cond in conds if cond for c in cond if isinstance(c, dict))
