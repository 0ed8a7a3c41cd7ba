"""Streaming that belongs to the model: ``stream_model`` gives a clone of a MODEL whose diffusion model
streams its blocks whenever it is sampled, by any sampler that goes through the host's sampling.

The policy lives in ``memory.streaming``: the budget (``budget``), the resident set and ring
(``choose_streaming``), the streamer, and the record/replay that lets a step's model calls share each
upload (``shared_uploads``). This module attaches them to the host's model at the right moments.

One sampling is one ``_Session``: the streamer attaches at the model's first call, once the host has
loaded the model, and detaches (``release``: every byte of the ring and the host buffer returns) when the
sampling ends, however it ends (interrupt, OOM, error). Where the two moments come from depends on the
host:

- Current hosts (patcher wrappers, late 2024 on): an ``OUTER_SAMPLE`` wrapper. Every sampler of the host
  (KSampler, KSamplerAdvanced, SamplerCustom, SamplerCustomAdvanced with any guider) runs
  ``CFGGuider.sample``, which runs the OUTER_SAMPLE wrappers around loading and sampling
  (``comfy/samplers.py:1013-1041`` on 0.3.64, ``:1004-1053`` on 0.18.2). The wrapper opens the session,
  puts the session's model call in that sampling's own copy of the model options (chained with any
  ``model_function_wrapper`` set before, so a later node's wrapper cannot displace it) and ends the
  session in a ``finally``. A ``CALC_COND_BATCH`` wrapper lets the step's separate cond/uncond calls
  share each upload.
- The 2024 host (no ``comfy.patcher_extension``): its path is ``legacy_2024``'s (the clone's
  ``model_function_wrapper``, ended when the node that sampled finishes, or by a caller's scope:
  ``StreamedModel.sampling``, as the streaming sampler takes).

On a CPU device the streamer places the blocks itself; on CUDA it first asks the host to offload what it
loaded (``partially_unload``, so its accounting stays right) and then places rest, resident blocks and
ring itself for the duration of the sampling.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...memory.process_state import PROCESS
from ...memory.residency.dynamic_policy import stream_note
from ...memory.streaming.budget import activation_reserve, streaming_budget
from ...memory.streaming.shared_uploads import SharedUploads
from ...memory.units import format_bytes
from ...memory.workflow.compiled import REFUSAL as CUDAGRAPHS_REFUSAL
from . import host_load, legacy_2024, node_text, recording
from .links import record_stream
from .lookups import host_module

if TYPE_CHECKING:
    import torch

    from .host_types import BaseModel, ModelPatcher

_log = logging.getLogger("headroom")

KEY = "headroom.streaming"  # the OUTER_SAMPLE wrapper's key in the host's patcher
# where the host's TorchCompileModel keeps its torch.compile arguments in the model options
# (comfy_api/torch_helpers/torch_compile.py: TORCH_COMPILE_KWARGS, the same on 0.3.64 and 0.33)
COMPILE_KWARGS = "torch_compile_kwargs"


class CompiledWithCudaGraphs(RuntimeError):
    """A streamed model carries torch.compile's ``cudagraphs`` backend: refused before the sampling."""


def cudagraphs_refusal(options: dict[str, object]) -> str | None:
    """Why a model with these model options cannot stream (the host's TorchCompileModel with the
    ``cudagraphs`` backend: CUDA graphs replay the device addresses of the weights they recorded, and the
    streamer binds a block's weights to a ring slot at each step), or None."""
    kwargs = options.get(COMPILE_KWARGS)
    if not isinstance(kwargs, dict) or kwargs.get("backend") != "cudagraphs":
        return None
    return CUDAGRAPHS_REFUSAL


@dataclass(frozen=True)
class StreamSettings:
    """The Stream Model node's inputs: ``budget`` in bytes (None = auto), None = auto for the others."""

    budget: int | None = None
    prefetch: int | None = None
    resident_blocks: int | None = None
    pin: bool = True
    pin_bytes: int | None = None  # with ``pin``: at most this many bytes pinned, the rest in place
    # ``budget`` holds weights only (the controller's share of the plan): the activations come on top
    weights_only: bool = False


@dataclass
class StreamingRun:
    """What one streamed sampling did, for the node's UI text and the log."""

    summary: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # why nothing streamed, when nothing did


_ACTIVE: dict[int, _Session] = PROCESS.hold(  # id(diffusion module) -> the session streaming it now
    "host.sampling: streaming sessions",
    {},
    "the diffusion models being streamed now (a second session on one refuses); empty between runs",
    reset=lambda: _ACTIVE.clear(),
)


class _Session:
    """One sampling of a streamed model: attach at the first model call, ``end`` detaches."""

    def __init__(
        self, settings: StreamSettings, patcher: ModelPatcher, previous: Callable[..., Any] | None
    ) -> None:
        self.settings, self.patcher, self.previous = settings, patcher, previous
        self.run = StreamingRun()
        self.streamer: Any = None
        self._module: Any = None
        self._tried = False
        self.ended = False
        self.shared = SharedUploads(lambda: self.streamer, self._call_model)
        self.originals: host_load.Captured = {}  # the host copies from before the host's load

    def _call_model(self, apply_model: Any, args: dict[str, Any]) -> Any:
        if self.previous is not None:
            return self.previous(apply_model, args)
        return apply_model(args["input"], args["timestep"], **args["c"])

    def model_call(self, apply_model: Any, args: dict[str, Any]) -> Any:
        """Every model call of the sampling (the host's ``model_function_wrapper``)."""
        if not self._tried:
            if recording.skip("streaming"):  # attach at a later call, outside the recorded region
                self.run.note = f"not streamed while {recording.RECORDING}"
                return self.shared.model_call(apply_model, args)
            self._tried = True
            self.run.note = ""
            base = getattr(apply_model, "__self__", None)  # the BaseModel being sampled
            with recording.paused():  # the ring and buffers are ours, not the step's
                self._attach(base if hasattr(base, "diffusion_model") else self.patcher.model, args)
        return self.shared.model_call(apply_model, args)

    def _attach(self, base_model: Any, args: dict[str, Any]) -> None:  # the BaseModel sampled
        import torch

        from ...memory.streaming import BlockStreamer, discover_blocks
        from ...memory.streaming.discovery import module_bytes

        diffusion = base_model.diffusion_model
        if id(diffusion) in _ACTIVE:
            self.run.note = "not streamed: this diffusion model streams in another sampling already"
            return
        patcher, s = self.patcher, self.settings
        if getattr(patcher, "is_dynamic", lambda: False)():  # DynamicVRAM pages it (host/dynamic_vram.py)
            self.run.note = stream_note(True)
            return
        device = torch.device(patcher.load_device)
        layout = discover_blocks(diffusion)
        sizes = layout.block_bytes()
        total = module_bytes(diffusion)
        on_gpu = device.type == "cuda"
        estimate = _activation_bytes(base_model, args["input"].shape) if on_gpu else 0  # none on a CPU
        activation = activation_reserve(estimate, on_gpu=on_gpu)
        originals, self.originals = self.originals, {}
        choice = streaming_choice(patcher, device, sizes, total, activation, s, originals)
        if isinstance(choice, str):
            self.run.note = f"{choice}; sampling without streaming"
            return
        if not choice.streamed_bytes and device.type == "cpu":  # the host's own placement is already it
            self.run.note = "everything fits the budget: nothing streamed"
            return
        streamer = BlockStreamer(diffusion, layout, choice, device, pin=s.pin, pin_bytes=s.pin_bytes)
        streamer.attach()
        self.streamer, self._module = streamer, diffusion
        _ACTIVE[id(diffusion)] = self

    def end(self) -> StreamingRun:
        """Detach (idempotent): the model's tensors back on the host, the ring released; a pinned host
        buffer stays the streamed blocks' host copy, for the next sampling."""
        self.ended = True
        self.originals = {}
        streamer, self.streamer = self.streamer, None
        if streamer is None:
            return self.run
        try:  # never let the summary replace the sampling's own exception (an interrupt, an OOM)
            self.run.summary = {**streamer.summary(), **self.shared.counts()}
            record_stream(self.run.summary)
        except Exception:
            _log.warning("Headroom: the streaming summary failed", exc_info=True)
        finally:
            # a pinned copy stays for the next run (taken again without a copy: ``host_buffer.fill``)
            streamer.detach(release=not streamer.stats.pinned)
            if _ACTIVE.get(id(self._module)) is self:
                del _ACTIVE[id(self._module)]
        _log.info("Headroom: %s", streamed_line(self.run.summary) or self.run.note)
        return self.run


def streaming_choice(
    patcher: ModelPatcher,
    device: torch.device,
    sizes: list[int],
    total: int,
    activation: int,
    s: StreamSettings,
    originals: host_load.Captured | None = None,
) -> Any:
    """The streamer's choice (``choose_streaming``) for a module of ``total`` bytes with these block sizes.
    On CUDA the host's loaded part goes back first (``partially_unload``: its accounting stays right; what
    it loaded unchanged points back at ``originals`` first, so nothing is copied back: ``host_load``) and
    the device's free memory bounds the auto budget. Returns why not (a str) where the host cannot unload;
    raises BudgetExceeded when the budget cannot hold it."""
    from ...memory.streaming import choose_streaming

    free = None
    if device.type == "cuda":
        if not hasattr(patcher, "partially_unload"):
            return "this host has no partial unload"
        if originals:
            host_load.give_back(patcher.model, originals, getattr(patcher, "patches", None))
        patcher.partially_unload(patcher.offload_device, memory_to_free=patcher.loaded_size())
        free = host_module("comfy.model_management").get_free_memory(device)
    # the controller's budget is the weights' share of the plan (``weights_only``); the node's holds both
    requested = s.budget + activation if s.weights_only and s.budget is not None else s.budget
    return choose_streaming(
        sizes,
        total - sum(sizes),
        streaming_budget(requested, device_free=free, model_bytes=total, activation=activation),
        activation,
        depth=s.prefetch,
        resident_blocks=s.resident_blocks,
    )


class StreamedModel:
    """The streaming a ``stream_model`` clone (and every clone of it) carries: its settings, the session
    of the sampling under way, and what the last one did (``last_run``)."""

    def __init__(
        self,
        settings: StreamSettings,
        patcher: ModelPatcher | None = None,
        previous: Callable[..., Any] | None = None,
    ) -> None:
        self.settings = settings
        self.session: _Session | None = None
        self.last_run = StreamingRun()
        self.runs: list[StreamingRun] = []  # every sampling's, in order (``last_run`` is the last)
        # the patcher and the model_function_wrapper set before, where a per-call hook streams it
        self.patcher, self.previous = patcher, previous
        self._scopes = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> StreamedModel:
        return self  # a clone that deep-copies the model options shares the one state

    def begin(self, patcher: ModelPatcher, previous: Callable[..., Any] | None) -> _Session:
        self.session = _Session(self.settings, patcher, previous)
        return self.session

    def scoped(self) -> bool:
        """Whether a caller's ``sampling`` scope is open (it ends the sampling)."""
        return self._scopes > 0

    def not_streamed(self, note: str) -> None:
        """A sampling that ran without streaming, and why."""
        self.last_run = StreamingRun(note=note)

    def end(self, session: _Session) -> None:
        if self.session is session:
            self.session = None
        if session.ended:
            return
        self.last_run = session.end()
        self.runs.append(self.last_run)
        node_text.ended(self, self.last_run)  # said on the Stream Model node that armed it

    # -- current hosts
    def outer_sample(self, executor: Any, *args: Any, **kwargs: Any) -> Any:
        """The OUTER_SAMPLE wrapper: one session around the host's loading and sampling."""
        guider = getattr(executor, "class_obj", None)
        options = getattr(guider, "model_options", None)
        patcher = getattr(guider, "model_patcher", None)
        if self.session is not None or not isinstance(options, dict) or patcher is None:
            return executor(*args, **kwargs)  # nested sampling, or a guider we cannot reach into
        refusal = cudagraphs_refusal(options)
        if refusal is not None:  # before the host loads or samples anything
            _log.error("Headroom: %s", refusal)
            raise CompiledWithCudaGraphs(refusal)
        session = self.begin(patcher, options.get("model_function_wrapper"))
        options["model_function_wrapper"] = session.model_call  # this sampling's copy of the options
        session.originals, release = host_load.before_host_load(patcher)
        try:
            return executor(*args, **kwargs)
        finally:
            if release is not None:
                release()
            self.end(session)

    def calc_cond_batch(self, executor: Any, *args: Any, **kwargs: Any) -> Any:
        """The CALC_COND_BATCH wrapper: a step's calls share each upload (see ``shared_uploads``)."""
        session = self.session
        if session is None:
            return executor(*args, **kwargs)
        return session.shared.calc_cond_batch(executor, *args, **kwargs)

    @contextlib.contextmanager
    def sampling(self) -> Iterator[StreamedModel]:
        """A scope that ends the sampling run inside it (a no-op where OUTER_SAMPLE already did)."""
        self._scopes += 1
        try:
            yield self
        finally:
            self._scopes -= 1
            if self.session is not None and not self._scopes:
                self.end(self.session)


def _wrappers_mp(patcher: ModelPatcher | None) -> Any:
    """The host's ``WrappersMP`` when ``patcher`` takes its wrappers (OUTER_SAMPLE), else None."""
    try:
        wrappers_mp = host_module("comfy.patcher_extension").WrappersMP
    except ImportError:
        return None
    if not hasattr(wrappers_mp, "OUTER_SAMPLE") or not hasattr(patcher, "add_wrapper_with_key"):
        return None
    return wrappers_mp


def stream_model(model: ModelPatcher, settings: StreamSettings) -> tuple[ModelPatcher, StreamedModel]:
    """A clone of ``model`` that streams its diffusion model's blocks whenever it is sampled, and its
    streaming state. Streaming ``model`` again replaces its settings (one streamer per model).
    Raises BudgetExceeded now when an explicit budget cannot hold the model even with no activations."""
    _precheck(model, settings)
    patched = model.clone()
    legacy = legacy_2024.stream_model(patched, settings, StreamedModel)
    if legacy is not None:
        return patched, legacy
    stream = StreamedModel(settings)
    wrappers_mp = _wrappers_mp(patched)
    if wrappers_mp is None:
        raise ValueError(f"{type(patched).__name__} takes no sampling wrappers (OUTER_SAMPLE)")
    _add_wrappers(patched, wrappers_mp, stream)
    return patched, stream


@dataclass
class Armed:
    """Streaming the residency controller put on a loaded model for one node's sampling (``arm``)."""

    stream: StreamedModel
    patchers: list[ModelPatcher] = field(default_factory=list)  # the ones given our wrappers
    # a Stream Model node's streaming already on a clone, with how many samplings it had run before
    others: list[tuple[StreamedModel, int]] = field(default_factory=list)
    legacy: legacy_2024.LegacyArm | None = None  # the 2024 host's arming instead of wrappers


def _hooks(wrappers_mp: Any, stream: StreamedModel) -> list[tuple[Any, str, Callable[..., Any]]]:
    """Our wrappers: (host wrapper type, our key, wrapper); CALC_COND_BATCH where the host has it."""
    hooks = [(wrappers_mp.OUTER_SAMPLE, KEY, stream.outer_sample)]
    if hasattr(wrappers_mp, "CALC_COND_BATCH"):
        hooks.append((wrappers_mp.CALC_COND_BATCH, SharedUploads.KEY, stream.calc_cond_batch))
    return hooks


def _add_wrappers(patcher: ModelPatcher, wrappers_mp: Any, stream: StreamedModel) -> None:
    for kind, key, wrapper in _hooks(wrappers_mp, stream):
        if hasattr(patcher, "remove_wrappers_with_key"):
            patcher.remove_wrappers_with_key(kind, key)
        patcher.add_wrapper_with_key(kind, key, wrapper)


def arm(patcher: ModelPatcher, clones: list[ModelPatcher], settings: StreamSettings) -> Armed:
    """Stream the model of ``patcher`` whenever it is sampled until ``disarm``, whichever of its clones
    the sampler holds: our OUTER_SAMPLE wrappers on the patcher and on each live clone (a clone made from
    them later copies them); a clone a Stream Model node streams keeps its own."""
    stream = StreamedModel(settings, patcher)
    armed = Armed(stream, legacy=legacy_2024.arm(patcher, stream, _ACTIVE))
    wrappers_mp = _wrappers_mp(patcher)
    if armed.legacy is not None or wrappers_mp is None:
        return armed
    for p in [patcher, *(c for c in clones if c is not patcher)]:
        own = streamed_model_of(p)
        if own is not None:
            if all(own is not o for o, _ in armed.others):
                armed.others.append((own, len(own.runs)))
            continue
        _add_wrappers(p, wrappers_mp, stream)
        armed.patchers.append(p)
    return armed


def disarm(armed: Armed, clones: list[ModelPatcher]) -> list[StreamingRun]:
    """Undo ``arm`` (ending a sampling still open) and return what each sampling did, in order."""
    wrappers_mp = _wrappers_mp(armed.stream.patcher) if armed.legacy is None else None
    if wrappers_mp is not None:
        for p in [*armed.patchers, *clones]:  # and the clones made from an armed one since
            if streamed_model_of(p) is armed.stream and hasattr(p, "remove_wrappers_with_key"):
                for kind, key, _ in _hooks(wrappers_mp, armed.stream):
                    p.remove_wrappers_with_key(kind, key)
    if armed.legacy is not None:
        armed.legacy.undo()
    if armed.stream.session is not None:
        armed.stream.end(armed.stream.session)
    others = [r for s, before in armed.others for r in s.runs[before:]]
    return [*armed.stream.runs, *others, *(armed.legacy.seen if armed.legacy is not None else ())]


def streamed_model_of(model: ModelPatcher) -> StreamedModel | None:
    """The streaming a MODEL carries (a ``stream_model`` clone or a clone of one), else None."""
    found = legacy_2024.streams_on(model)
    if found is None:
        wrappers_mp = _wrappers_mp(model)
        if wrappers_mp is None or not hasattr(model, "get_wrappers"):
            return None
        found = [getattr(w, "__self__", None) for w in model.get_wrappers(wrappers_mp.OUTER_SAMPLE, KEY)]
    return next((s for s in found if isinstance(s, StreamedModel)), None)


def _precheck(model: ModelPatcher, settings: StreamSettings) -> None:
    """A model with nothing to stream, or an explicit budget that cannot hold the non-block weights and
    one slot, fails at the node (on a CPU this is the sampling's own choice, exactly)."""
    from ...memory.streaming import discover_blocks

    diffusion = getattr(getattr(model, "model", None), "diffusion_model", None)
    if diffusion is None:
        raise ValueError("not a diffusion model (it has no diffusion_model to stream)")
    if settings.budget is not None:
        check_budget(diffusion, discover_blocks(diffusion).block_bytes(), settings)


def check_budget(module: torch.nn.Module, sizes: list[int], settings: StreamSettings) -> None:
    """Raise BudgetExceeded now when the explicit budget cannot hold ``module``'s non-block weights and
    one slot of these block sizes (no activations counted: the node's check, before any sampling)."""
    from ...memory.streaming import choose_streaming
    from ...memory.streaming.discovery import module_bytes

    if settings.budget is None or not sizes:
        return
    rest = module_bytes(module) - sum(sizes)
    choose_streaming(
        sizes, rest, settings.budget, 0, depth=settings.prefetch, resident_blocks=settings.resident_blocks
    )


def streaming_ksample(
    model: ModelPatcher,
    sampler_args: tuple[Any, ...],
    *,
    budget: int | None,
    prefetch: int | None,
    resident_blocks: int | None,
    pin: bool,
) -> tuple[dict[str, Any], StreamingRun]:
    """The stock ``common_ksampler`` on ``stream_model(model, …)``: what the streaming sampler runs."""
    nodes = host_module("nodes")
    patched, stream = stream_model(model, StreamSettings(budget, prefetch, resident_blocks, pin))
    with stream.sampling():
        (latent,) = nodes.common_ksampler(patched, *sampler_args[:8], denoise=sampler_args[8])
    return latent, stream.last_run


def streamed_line(summary: dict[str, Any], per: str = "step") -> str:
    """ "streamed K/N blocks by Headroom, X per step" (``per``: "encode" for a text encoder), or "" when
    nothing streamed."""
    if not summary or not summary.get("streamed_bytes"):
        return ""
    streamed = summary["blocks"] - summary["resident_blocks"]
    source = f", from {summary['uploads_from']}" if summary.get("uploads_from") else ""
    return (
        f"streamed {streamed}/{summary['blocks']} blocks by Headroom, "
        f"{format_bytes(summary['streamed_bytes'])} per {per}{source}"
    )


def _activation_bytes(base_model: BaseModel, shape: Sequence[int]) -> int:
    """The host's own estimate of one model call's activations (0 where it has none)."""
    try:
        return int(base_model.memory_required(shape))
    except Exception:  # older or custom models: no estimate
        return 0
