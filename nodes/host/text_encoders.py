"""Streaming for text encoders: ``stream_clip`` gives a clone of a CLIP whose text encoder(s) stream
their transformer blocks whenever it encodes, and ``arm_clip_streaming`` streams a CLIP (or its patcher)
for a stretch its caller chooses (the residency controller: one node).

The policy is ``memory.streaming``'s, as for diffusion models: the layers of every encoder the CLIP holds
(``text_layouts``), the budget, the resident set and ring (``choose_streaming``) and the streamer.

Where it hooks in. Every encode node of every host (CLIPTextEncode, CLIPTextEncodeFlux, SDXL, Qwen-Image
Edit, HunyuanVideo, ...) calls the CLIP object's ``encode_from_tokens`` or ``encode_from_tokens_scheduled``
(current hosts; 0.18.2 also ``generate``), which load the patcher and run ``cond_stage_model``
(``comfy/sd.py`` class CLIP on every host). ``cond_stage_model`` is shared by the CLIP and all its clones,
so the hook cannot live on it: the streamed clone's class is a subclass of the host's CLIP whose encode
methods each run in one ``ClipStreaming`` session, and whose ``clone`` keeps the subclass (LoRA loaders
and CLIPSetLastLayer clone). A session arms forward pre-hooks on the modules that run each layer list;
the first one entered attaches the streamer (so after the host's ``load_model``: its patches are applied
and, on a GPU, what it loaded is offloaded again through ``partially_unload``, as for diffusion models),
and ``end`` detaches it however the encode ended: every byte comes back (``BlockStreamer.detach``); a
pinned host copy stays the streamed layers' home, so the next encode uploads from it without pinning and
copying again.

The encoders run in their wrapper's order (SDXL: CLIP-G, then CLIP-L): the list entered first leads the
upload order, and the order seen is kept for the clone's next encode, so the ring prefetches right.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...memory.process_state import PROCESS
from ...memory.streaming.budget import activation_reserve
from ...memory.streaming.text_layouts import TEXT_ACTIVATION_FLOOR, discover_text_blocks, in_call_order
from . import host_load, node_text, recording
from .links import record_stream
from .patches import REGISTRY
from .sampling import StreamSettings, check_budget, streamed_line, streaming_choice

if TYPE_CHECKING:
    import torch

    from .host_types import CLIP, ModelPatcher


_log = logging.getLogger("headroom")

_ACTIVE: dict[int, ClipStreaming] = PROCESS.hold(  # id(cond_stage_model) -> the session streaming it now
    "host.text_encoders: streaming sessions",
    {},
    "the text encoders being streamed now; empty between runs",
    reset=lambda: _ACTIVE.clear(),
)


@dataclass
class ClipRun:
    """What one streamed encode did, for the log and the node: the streamer's summary, or why not."""

    summary: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    lists_in_order: list[str] = field(default_factory=list)  # the layer lists, in the order they ran


class ClipStreaming:
    """One streamed stretch of a text encoder: ``arm`` hooks it, the first layer list entered attaches
    the streamer, ``end`` (idempotent) detaches it and returns the ``ClipRun``. Also a context manager."""

    def __init__(
        self,
        patcher: ModelPatcher,
        settings: StreamSettings,
        *,
        tokens: Any = None,
        order: list[str] | None = None,
    ) -> None:
        self.patcher, self.settings, self.tokens = patcher, settings, tokens
        self.model = patcher.model  # the CLIP's cond_stage_model
        self.order = list(order or [])
        self.run = ClipRun()
        self.streamer: Any = None
        self._originals: host_load.Captured = {}  # the host copies from before the host's load
        self._release: Any = None  # undoes ``host_load.hold_back``
        self._handles: list[Any] = []
        self._tried = False
        self.ended = False

    @property
    def summary(self) -> dict[str, Any]:
        return self.run.summary

    def arm(self) -> ClipStreaming:
        if id(self.model) in _ACTIVE:
            self.run.note = "not streamed: this text encoder streams in another session already"
            return self
        layout = discover_text_blocks(self.model)
        if len(layout.blocks) < 2:
            self.run.note = "not streamed: no transformer layers found in this text encoder"
            return self
        self._layout = layout
        self._originals, self._release = host_load.before_host_load(self.patcher)
        lists = list(dict.fromkeys(name.rsplit(".", 1)[0] for name, _ in layout.blocks))
        for name in lists:
            parent = self.model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else self.model
            entered = functools.partial(self._entered, name)
            self._handles.append(parent.register_forward_pre_hook(lambda m, a, f=entered: f()))
        if self._release is not None:  # the host loads nothing: attach before the first encoder runs
            for root in dict.fromkeys(name.split(".", 1)[0] for name in lists if "." in name):
                first = next(name for name in lists if name.startswith(f"{root}."))
                early = functools.partial(self._attach_once, first)
                module = self.model.get_submodule(root)
                self._handles.append(module.register_forward_pre_hook(lambda m, a, f=early: f()))
        _ACTIVE[id(self.model)] = self
        return self

    def _attach_once(self, first: str) -> None:
        if not self._tried and not recording.skip("Stream CLIP"):  # else at a later call, unrecorded
            self._tried = True
            with recording.paused():  # the ring and buffers are ours, not the step's
                self._attach(first)

    def _entered(self, name: str) -> None:
        if name not in self.run.lists_in_order:
            self.run.lists_in_order.append(name)
        self._attach_once(name)

    def _attach(self, first: str) -> None:
        import torch

        from ...memory.streaming import BlockStreamer, BudgetExceeded
        from ...memory.streaming.discovery import module_bytes

        patcher, s, model = self.patcher, self.settings, self.model
        order = self.order if first in self.order else [first, *self.order]
        layout = in_call_order(self._layout, order)
        device = torch.device(patcher.load_device)
        on_gpu = device.type == "cuda"
        sizes = layout.block_bytes()
        total = module_bytes(model)
        activation = activation_reserve(max(TEXT_ACTIVATION_FLOOR, self._estimate(device)), on_gpu=on_gpu)
        try:
            originals, self._originals = self._originals, {}
            choice = streaming_choice(patcher, device, sizes, total, activation, s, originals)
            if isinstance(choice, str):
                self.run.note = f"{choice}; encoding without streaming"
                return
        except BudgetExceeded as exc:  # the host's own (partial) load encodes instead
            self.run.note = f"not streamed: {exc}"
            _log.warning("Headroom: text encoder %s", self.run.note)
            return
        if not choice.streamed_bytes and not on_gpu:
            self.run.note = "everything fits the budget: nothing streamed"
        streamer = BlockStreamer(model, layout, choice, device, pin=s.pin, pin_bytes=s.pin_bytes)
        streamer.attach()
        self.streamer = streamer

    def _estimate(self, device: torch.device) -> int:
        """The host's estimate of the encode's activations (0.18.2 has one per text encoder), else 0."""
        estimate = getattr(self.model, "memory_estimation_function", None)
        if estimate is None or self.tokens is None:
            return 0
        try:
            return int(estimate(self.tokens, device=device))
        except Exception:  # another host's signature, or tokens it does not expect
            return 0

    def end(self) -> ClipRun:
        """Unhook and detach (idempotent): the encoder's tensors back where they were, ring released."""
        if self.ended:
            return self.run
        self.ended = True
        self._originals = {}
        release, self._release = self._release, None
        if release is not None:
            release()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if _ACTIVE.get(id(self.model)) is self:
            del _ACTIVE[id(self.model)]
        streamer, self.streamer = self.streamer, None
        if streamer is None:
            if not self._tried and not self.run.note:
                self.run.note = "not streamed: the text encoder did not run"
            return self.run
        try:  # never let the summary replace the encode's own exception (an interrupt, an OOM)
            self.run.summary = streamer.summary()
            record_stream(self.run.summary)
        except Exception:
            _log.warning("Headroom: the text-encoder streaming summary failed", exc_info=True)
        finally:
            # a pinned copy stays for the next run (taken again without a copy: ``host_buffer.fill``)
            streamer.detach(release=not streamer.stats.pinned)
        _log.info("Headroom: text encoder %s", streamed_clip_line(self.run.summary) or self.run.note)
        return self.run

    def __enter__(self) -> ClipStreaming:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()


def arm_clip_streaming(clip_or_patcher: Any, settings: StreamSettings) -> ClipStreaming:
    """Stream a CLIP's text encoder (or a CLIP patcher's model) from now until ``.end()``: its blocks
    stream at every encode in between, whatever node runs it. ``.summary`` is the streamer's summary
    after ``end`` ({} when nothing streamed, ``.run.note`` says why). For the residency controller."""
    patcher = getattr(clip_or_patcher, "patcher", clip_or_patcher)
    return ClipStreaming(patcher, settings).arm()


class StreamedClip:
    """The streaming a ``stream_clip`` clone (and every clone of it) carries: its settings, the layer
    lists' order seen last, and what the last encode did (``last_run``)."""

    def __init__(self, settings: StreamSettings) -> None:
        self.settings = settings
        self.order: list[str] = []
        self.last_run = ClipRun()

    def __deepcopy__(self, memo: dict[int, Any]) -> StreamedClip:
        return self  # clones share one state

    def run(self, clip: Any, call: Callable[[], Any], tokens: Any) -> Any:
        if id(clip.cond_stage_model) in _ACTIVE:  # an outer encode method, or the controller, streams it
            return call()
        session = ClipStreaming(clip.patcher, self.settings, tokens=tokens, order=self.order).arm()
        try:
            return call()
        finally:
            self.last_run = session.end()
            if self.last_run.lists_in_order:
                self.order = list(self.last_run.lists_in_order)
            node_text.ended(self, self.last_run)  # said on the Stream CLIP node that armed it


ATTR = "_headroom_stream"
_ENCODE_METHODS = ("encode_from_tokens", "encode_from_tokens_scheduled", "generate")
_CLASSES: dict[type, type] = PROCESS.hold(
    "host.text_encoders: streamed classes",
    {},
    "one streamed subclass per CLIP class; instances swapped to one keep it, and a second per class would "
    "break the swap back",
)


def _streamed_class(cls_or_streamed: type) -> type:
    """The subclass of the host's CLIP class whose encodes stream (one per host class, made once)."""
    base: Any = getattr(cls_or_streamed, "_headroom_base", cls_or_streamed)  # the host's CLIP class
    cls = _CLASSES.get(base)
    if cls is not None:
        return cls

    def clone(self: Any, *args: Any, **kwargs: Any) -> Any:
        copy = base.clone(self, *args, **kwargs)  # the host's CLIP(no_init=True) with its fields
        _swap_class(copy, getattr(self, ATTR))  # a patch of its own: uninstall gives it its class back
        return copy

    def streamed(name: str) -> Callable[..., Any]:
        method = getattr(base, name)

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            REGISTRY.fire(SWAP)
            tokens = args[0] if args else kwargs.get("tokens")
            return getattr(self, ATTR).run(self, lambda: method(self, *args, **kwargs), tokens)

        return wrapper

    namespace: dict[str, Any] = {"_headroom_base": base, "clone": clone, "__module__": __name__}
    namespace.update({name: streamed(name) for name in _ENCODE_METHODS if hasattr(base, name)})
    cls = _CLASSES[base] = type(f"Streamed{base.__name__}", (base,), namespace)
    return cls


def stream_clip(clip: CLIP, settings: StreamSettings) -> tuple[CLIP, StreamedClip]:
    """A clone of ``clip`` whose text encoder streams its blocks at every encode, and its streaming
    state. Streaming a streamed CLIP again replaces its settings. Raises ValueError for an object with
    no text encoder, BudgetExceeded when an explicit budget cannot hold the encoder even so."""
    model = getattr(clip, "cond_stage_model", None)
    if model is None or not hasattr(clip, "patcher") or not hasattr(clip, "clone"):
        raise ValueError("not a CLIP (it has no text encoder to stream)")
    _precheck(model, settings)
    patched = clip.clone()
    state = StreamedClip(settings)
    _swap_class(patched, state)
    return patched, state


SWAP = "CLIP.__class__[Stream CLIP]"  # the class swap of our clone, in the patch registry


def _swap_class(clip: Any, state: StreamedClip) -> None:
    """Make our clone ``clip`` a streamed subclass of its class carrying ``state``, as a patch whose undo
    gives it its class back and takes the state off; the registry forgets it when the clone is freed.
    A clone that is streamed already (made by a streamed CLIP's ``clone``, its swap a patch of its own)
    takes the new state alone."""
    base: type = getattr(type(clip), "_headroom_base", type(clip))
    swapped = type(clip) is not base
    ref = weakref.ref(clip)
    clip.__class__ = _streamed_class(base)
    setattr(clip, ATTR, state)
    if swapped:
        return

    def undo() -> None:
        target = ref()
        if target is not None and getattr(target, "_headroom_base", None) is base:
            target.__class__ = base
            vars(target).pop(ATTR, None)

    patch = REGISTRY.record(SWAP, undo)
    weakref.finalize(clip, REGISTRY.forget, patch)


def _precheck(model: torch.nn.Module, settings: StreamSettings) -> None:
    sizes = discover_text_blocks(model).block_bytes()
    if len(sizes) < 2:
        raise ValueError("no transformer layers found in this text encoder")
    check_budget(model, sizes, settings)


def streamed_clip_line(summary: dict[str, Any]) -> str:
    """ "streamed K/N blocks by Headroom, X per encode", or "" when nothing streamed."""
    return streamed_line(summary, per="encode")
