"""Residency on the host: ``memory.residency.HostOps`` on ComfyUI's model management, the tiers a
component's CPU copy can take, and the process's controller as a subscriber of the executor's events.

The controller's moves go through the host's model management only: load_models_gpu to load,
free_memory(keep_loaded=every other model) to evict, nothing else. It knows nothing of the monitor: its
budget comes from a function (``card_budget``) and its applied moves go to listeners (``on_move``);
``state`` connects both to the monitor.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from ...memory.deadline import HOST_PLAN_LIMIT_S
from ...memory.names import OFFLOAD_LOADER
from ...memory.planning.costmodel import CHOICE_HOST, Budget, Hardware
from ...memory.residency import Controller, MappedFile, bind, footprint, pin, read_through, to_pageable
from ...memory.residency.mapped import read_ahead
from ...memory.residency.prefetch import Prefetcher
from ...memory.residency.ram_budget import RAM, RamReading, read_process, release_heap, release_pinned_cache
from ...memory.residency.ram_guard import RamGuard
from ...memory.residency.run_log import Streamed
from ...memory.telemetry.runs import ResidencyEvent
from ...memory.units import format_bytes
from . import dynamic_vram, legacy_2024, lora_reads, recording, sampling, text_encoders
from .events import Subscriber
from .links import device_name, hardware_for
from .lookups import HOST_MODEL_FILES, host_module, lazy_inputs, output_nodes, queued_outputs
from .media_sizes import media_sizes
from .patches import REGISTRY
from .prefetch import HostPrefetch
from .vae_plan import tiled_decode_figures

if TYPE_CHECKING:
    import torch

    from .host_types import LoadedModel, ModelPatcher

_log = logging.getLogger("headroom")


class Handle(Protocol):
    """What the host ops need of a loaded component (``loading.ComponentHandle``)."""

    kind: str  # the component's kind ("diffusion_model", "text_encoder", ...): what may stream
    paths: list[Path]  # the files it was loaded from
    residency: str

    @property
    def patcher(self) -> ModelPatcher: ...
    @property
    def module(self) -> Any: ...  # the host's model (None once released)

    files: list[MappedFile] | None
    mapped_names: dict[str, str]

    def mapped(self) -> list[MappedFile]: ...

    def live_clones(self) -> list[ModelPatcher]: ...


def host_part(h: Handle) -> str:
    """Where the component's CPU copy is now: "P" (pinned), "R" (pageable RAM) or "D" (its file)."""
    if dynamic_vram.is_dynamic(h.patcher):  # the host maps it from its file and pins per layer
        return dynamic_vram.dynamic_host_part(h.patcher)
    fp = footprint(h.module, h.files or ())
    return "D" if fp.mapped > fp.ram + fp.pinned else "P" if fp.pinned > fp.ram else "R"


READ_THROUGH = "Module._apply[read through]"  # the disk tier's read-through hooks on a component


def _remove_read_through(module: Any) -> None:
    read_through.remove(module)  # (already removed is undone too)


def place_host_copy(h: Handle, host: str | None = None) -> str:
    """Move the component's CPU copy to pinned RAM, pageable RAM or its file; returns a note."""
    host = host if host is not None else CHOICE_HOST.get(h.residency, "")  # "" (auto, gpu): leave it
    if host and dynamic_vram.is_dynamic(h.patcher):  # the host's own unpin and unmap, never our copies
        return dynamic_vram.set_host_tier(h.patcher, host)
    if host:
        release_host_pins(h.patcher)
        hooks = REGISTRY.find_on(READ_THROUGH, h.module)  # the disk tier's hooks, their undo in the registry
        if hooks is not None:
            REGISTRY.uninstall(hooks)  # (put back where its forward left it: the mapping's views)
    if host == "D":
        binding = bind(h.module, h.mapped(), h.mapped_names)
        h.mapped_names.update(binding.bound)
        # the host's moves and its compute (a CPU's kernels, a GPU host's low-VRAM casts) read the file,
        # never its pages: no SIGBUS mid-node; pinned copies where the casts go to a CUDA GPU
        if read_through.install(h.module, pin=casts_to_cuda()):  # instance _apply overrides: a patch
            REGISTRY.record_on(READ_THROUGH, h.module, _remove_read_through)
        lora_reads.install()  # and its LoRA patches (on clones of the patcher: wrapped on the class)
        if binding.kept_bytes >= 2**20:  # below a MiB: buffers the file does not hold (sigmas, scales)
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


def release_host_pins(patcher: ModelPatcher) -> int:
    """Undo the host's own pins of the model's weights, through the host, before a move swaps storages.

    A 0.3.x ModelPatcher pins weights in place (``cudaHostRegister``, kept in ``patcher.pinned`` and
    ``model_management.PINNED_MEMORY``). A move that swaps such a tensor's storage frees registered
    memory that the host never unregisters: the host's later unpin finds a pointer it did not pin, and
    a later non-blocking copy from reused memory fails with CUDA's "invalid argument" (seen on an H200,
    0.33 with --disable-dynamic-vram). Returns how many weights the host unpinned."""
    pinned = getattr(patcher, "pinned", None)
    unpin = getattr(patcher, "unpin_all_weights", None)
    if not pinned or unpin is None:
        return 0
    count = len(pinned)
    try:
        unpin()
    except Exception as exc:  # fail open: the move goes on as before
        _log.warning("Headroom: the host's unpin_all_weights failed (%r); its pins stay", exc)
        return 0
    return count


def free_memory(patcher: ModelPatcher, mm: ModuleType, device: torch.device) -> int:
    """The device's free memory as the host's sampler reads it: the patcher's ``get_free_memory`` (0.33:
    the module figure plus what comfy-aimdo's VBARs can give back under DynamicVRAM, which the module
    figure alone under-counts; ``comfy/samplers.py`` asks ``model.current_patcher``), else the module's."""
    ask = getattr(patcher, "get_free_memory", None)
    return int(ask(device) if callable(ask) else mm.get_free_memory(device))


class _HostOps:
    """memory.residency.HostOps on the host's model management."""

    def __init__(self) -> None:
        self.armed: dict[int, tuple[Any, Callable[..., list[Any]]]] = {}  # id(handle) -> (state, disarm)
        # DynamicVRAM: a model the plan moved off is released to the host, which frees its pages on demand
        self.dynamic = dynamic_vram.DynamicBoundaries()

    @property
    def mm(self) -> ModuleType:  # looked up when used: the glue imports outside a host too
        return host_module("comfy.model_management")

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
    def _bytes(lm: LoadedModel) -> int:
        legacy = legacy_2024.loaded_bytes(lm)
        return int(lm.model_loaded_memory()) if legacy is None else legacy

    def on_gpu(self, handle: Handle) -> int:
        if handle.module is None or self.dynamic.is_released(handle):  # gone, or off in the plan
            return 0
        return sum(self._bytes(lm) for lm in self._loaded(handle.module))

    def fully_loaded(self, handle: Handle) -> bool:
        return any(self._bytes(lm) >= int(lm.model_memory()) for lm in self._loaded(handle.module))

    def room_for(self, handle: Handle) -> bool:
        """What load_models_gpu asks before it evicts (1.1x the model plus the inference reserve)."""
        mm = self.mm
        device = mm.get_torch_device()
        if getattr(device, "type", "cpu") == "cpu":
            return True
        need = handle.patcher.model_size() * 1.1 + mm.minimum_inference_memory()
        return bool(free_memory(handle.patcher, mm, device) >= need)

    def load(self, handle: Handle) -> str:
        if recording.skip("a residency move"):
            return f"not now: {recording.RECORDING}"
        if dynamic_vram.is_dynamic(handle.patcher):
            return dynamic_vram.LOAD_NOTE
        patched = [c for c in handle.live_clones() if getattr(c, "patches", None)]
        if patched:  # the node loads its patched clone; loading the base would be undone at once
            return f"a patched clone ({len(patched)}) is what the node computes with; the host loads that"
        self.mm.load_models_gpu([handle.patcher])
        return ""

    def evict(self, handle: Handle) -> None:
        if recording.skip("a residency move"):
            return
        if dynamic_vram.is_dynamic(handle.patcher):  # its pages go; it stays staged, pinned and listed
            dynamic_vram.page_out(handle.patcher)
            return
        ours = self._loaded(handle.module)
        keep = [lm for lm in self.mm.current_loaded_models if lm not in ours]
        device = ours[0].device if ours else self.mm.get_torch_device()
        self.mm.free_memory(1 << 62, device, keep_loaded=keep)  # unloads ours alone, with its accounting

    def host_part(self, handle: Handle) -> str:
        return host_part(handle)

    def set_host_tier(self, handle: Handle, host: str) -> str:
        return place_host_copy(handle, host)

    def warm(self, handle: Handle) -> None:
        if dynamic_vram.is_dynamic(handle.patcher):  # the files the host mapped
            read_ahead(handle.paths)
            return
        if handle.files:  # mapped from its file: ask the kernel to read ahead (returns at once)
            read_ahead(mf.path for mf in handle.files)

    def device_bytes(self) -> int:
        device = self.mm.get_torch_device()
        return sum(
            self._bytes(lm)
            for lm in list(self.mm.current_loaded_models)
            if lm.model is not None and lm.device == device
        )

    def stream(self, handle: Handle, budget: int, source: str = "P", pinned: int | None = None) -> str:
        if dynamic_vram.is_dynamic(handle.patcher):
            return dynamic_vram.stream_note(True)
        release_host_pins(handle.patcher)  # the streamer swaps storages too
        # the plan's stream<-pinned uploads from a pinned host copy; from RAM or disk, in place (no copy)
        settings = sampling.StreamSettings(budget, pin=source == "P", pin_bytes=pinned, weights_only=True)
        if handle.kind == "text_encoder":  # hooks the encoder itself: every clone's encode streams
            streaming = text_encoders.arm_clip_streaming(handle.patcher, settings)
            self.armed[id(handle)] = (streaming, lambda armed, _clones: [armed.end()])
            return ""
        if handle.kind != "diffusion_model":
            return f"a {handle.kind.replace('_', ' ')} does not stream"
        self.armed[id(handle)] = (
            sampling.arm(handle.patcher, handle.live_clones(), settings),
            sampling.disarm,
        )
        return ""

    def stream_ended(self, handle: Handle) -> Streamed:
        per = "encode" if handle.kind == "text_encoder" else "step"
        line = functools.partial(sampling.streamed_line, per=per)
        state, disarm = self.armed.pop(id(handle), (None, None))
        runs = disarm(state, handle.live_clones()) if disarm is not None else []
        streamed = [r for r in runs if line(r.summary)]
        if streamed:
            lines = dict.fromkeys(line(r.summary) for r in streamed)
            return Streamed("streamed", max(r.summary["streamed_bytes"] for r in streamed), "; ".join(lines))
        loaded = self._loaded(handle.module)
        on, total = sum(self._bytes(lm) for lm in loaded), sum(int(lm.model_memory()) for lm in loaded)
        if 0 < on < total:
            return Streamed("partial", on, f"host partial load: {format_bytes(on)} of {format_bytes(total)}")
        notes = dict.fromkeys(r.note.removeprefix("not streamed: ") for r in runs if r.note)
        return Streamed("none", 0, f"not streamed: {'; '.join(notes) or 'the node did not sample it'}")

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.mm.OOM_EXCEPTION)

    def free_device(self) -> None:
        self.mm.unload_all_models()
        self.mm.soft_empty_cache()


class _RamOps:
    """memory.residency.ram_guard.RamOps on the host: the OS's figures and the disk tier."""

    def __init__(self, host: _HostOps) -> None:
        self.host = host

    def read(self) -> RamReading:
        return read_process()

    def host_bytes(self, handle: Handle) -> tuple[int, int]:
        if dynamic_vram.is_dynamic(handle.patcher):
            return dynamic_vram.host_bytes(handle.patcher)
        fp = footprint(handle.module, handle.files or ())
        return fp.ram, fp.pinned

    def to_disk(self, handle: Handle) -> str:
        # On a CPU device the loaded model is its RAM copy: unload it through the host first (nothing
        # moves), so the host's accounting does not count a model that now lives in the file.
        if self.computes_on_cpu() and self.host.on_gpu(handle):
            self.host.evict(handle)
        return place_host_copy(handle, "D")

    def trim(self) -> bool:
        # glibc keeps freed heap and torch keeps freed pinned blocks: what just moved to disk must leave
        pinned = release_pinned_cache()
        return release_heap() or pinned

    def computes_on_cpu(self) -> bool:
        return computes_on_cpu()


def _compute_device_type() -> str:
    mm = sys.modules.get("comfy.model_management")  # no host loaded (tests, the CLI): no device yet
    return "" if mm is None else str(getattr(mm.get_torch_device(), "type", "cpu"))


def casts_to_cuda() -> bool:
    """The host computes on a CUDA GPU (weights kept on the CPU are cast to it, fastest from pinned RAM)."""
    return _compute_device_type() == "cuda"


def computes_on_cpu() -> bool:
    """The host computes on the CPU (``--cpu``, or no accelerator)."""
    return _compute_device_type() == "cpu"


_EVENT_TIERS = {  # controller action -> the monitor's (tier_from, tier_to)
    "load": ("ram", "gpu"), "prefetch": ("ram", "gpu"), "evict": ("gpu", "ram"), "stream": ("ram", "stream"),
    "pin": ("ram", "pinned"), "unpin": ("pinned", "ram"), "map": ("ram", "disk"), "warm": ("disk", "disk"),
    "deprioritize": ("gpu", "gpu"),
}  # fmt: skip


class Residency(Subscriber):
    """The process's residency controller, its budget and the executor's events it acts on.

    ``card_budget()``: the card's budget before the host's inference reserve (None: nothing to plan for).
    ``on_move``: called with every applied (or failed) move, as the monitor's telemetry records it.
    """

    def __init__(
        self,
        card_budget: Callable[[], Budget | None],
        on_move: Callable[[ResidencyEvent], None] | None = None,
    ) -> None:
        ops = _HostOps()
        self.controller = Controller(ops, time_limit_s=HOST_PLAN_LIMIT_S)
        self.controller.listeners.append(self._moved)
        self.ram_guard = RamGuard(_RamOps(ops), RAM.resolve)
        self.controller.ram_guard = self.ram_guard
        self.controller.prefetcher = Prefetcher(HostPrefetch())  # uploads on a side stream (prefetch.py)
        self.controller.tiled_decode = tiled_decode_figures  # the Tiled VAE Decode's own figures
        self.controller.media = media_sizes  # a loaded image's or video's size, from its header
        self.card_budget = card_budget
        self.moves: list[Callable[[ResidencyEvent], None]] = [on_move] if on_move is not None else []
        self.budget_override: Budget | None = None
        self.hardware = Hardware.pcie(4)
        self.dynamic = ops.dynamic  # the plan's eviction order on DynamicVRAM hosts
        self.warned_reserve = False
        self.reaped_for: str | None = None  # the prompt whose start reaped dropped loaders

    def budget(self) -> Budget | None:
        """The override, else the card's budget less what the host keeps for inference (its
        minimum_inference_memory, which --reserve-vram raises): its loads fall back to partial ones
        inside that reserve."""
        if self.budget_override is not None:
            return self.budget_override
        budget = self.card_budget()
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

    # -- the executor's events (events.Subscriber)
    def prompt_started(self, prompt_id: str, prompt: dict[str, Any] | None) -> None:
        if prompt is None:
            return
        budget = self.budget()
        if budget is None:
            return
        try:  # the plan's RAM is what the RAM budget leaves after the process itself (measured now)
            # the copies this prompt's loaders hold are its own, not the baseline's; registrations of other
            # workflows' loaders stay in the baseline (they are not in this prompt's plan)
            loaders = {
                n
                for n, node in prompt.items()
                if isinstance(node, dict) and node.get("class_type") == OFFLOAD_LOADER
            }
            ours = [m.handle for cid, m in self.controller.managed.items() if cid.split(":", 1)[0] in loaders]
            ram = self.ram_guard.begin(prompt_id, ours)
            if self.budget_override is None:
                pinned = min(budget.pinned, ram.budget.pinned)
                budget = dataclasses.replace(budget, ram=max(0, ram.budget.ram - ram.baseline), pinned=pinned)
        except Exception:  # fail open: the plan keeps the card's budget, the guard measures at the first node
            _log.warning("Headroom: could not measure the RAM budget", exc_info=True)
        self.hardware = hardware_for(device_name())  # the card's bus, with this machine's measured links
        self.controller.prompt_started(
            prompt_id,
            prompt,
            budget,
            self.hardware,
            models_dir=HOST_MODEL_FILES,
            outputs=queued_outputs(prompt_id) or output_nodes(prompt),
            lazy_inputs=lazy_inputs,
        )
        self.dynamic.prompt_started(self.controller, prompt_id, prompt)  # DynamicVRAM hosts only

    def prompt_finished(self, prompt_id: str) -> None:
        self.controller.prompt_finished(prompt_id)
        self.dynamic.prompt_finished()

    def node_started(self, prompt_id: str | None, node_id: str) -> None:
        if prompt_id is not None and prompt_id != self.reaped_for:
            # A prompt's first node: the host's cache has let go of the outputs this prompt dropped (a
            # loader at a new node id, a changed input, a loader-less prompt). Their registrations go, and
            # the heap they freed goes back to the OS: glibc keeps freed blocks in its arenas, so RssAnon
            # would stay where the loader left it (+52 MiB over the stock loader's, issue #31).
            self.reaped_for = prompt_id
            if self.controller.reap():
                self.ram_guard.ops.trim()
        if prompt_id is not None:
            self.dynamic.node_started(self.controller, prompt_id, node_id)  # orders the host before the step
            self.controller.node_started(prompt_id, node_id)

    def node_finished(self, prompt_id: str | None, node_id: str, ok: bool = True) -> None:
        if prompt_id is not None:
            self.controller.node_finished(prompt_id, node_id, ok)

    def out_of_memory(self) -> bool:
        """Free the device through the host and put back what the running node needs (in a prompt the
        controller manages): the node then runs once more."""
        controller = self.controller
        if not controller.runs:
            return False
        _log.warning("Headroom: a node ran out of memory; freeing the device and running it once more")
        return controller.recover(next(reversed(controller.runs)))

    def _moved(self, prompt_id: str, event: Any) -> None:
        if event.kind not in ("applied", "oom", "failed") or not event.action:
            return
        a, b = _EVENT_TIERS.get(event.action, ("", ""))
        action = event.action if event.kind == "applied" else f"{event.action} {event.kind}"
        node = event.node_id or None
        move = ResidencyEvent(time.time(), prompt_id, node, event.label, a, b, event.nbytes, action)
        for listener in list(self.moves):
            listener(move)
