"""DynamicVRAM (comfy-aimdo) hosts: the plan's moves through the host's own functions.

The policy is ``memory.residency.dynamic_policy``; this module reads the host's state and acts. Every
call is one the host itself makes (0.18.2):

- the order of the host's own eviction (the plan's evictions): ``ModelVBAR.deprioritize`` of the model's
  VBAR (the list ``vbars_free_for_vbar`` frees from, lowest first; the host's ``load`` calls
  ``prioritize``, ``comfy/model_patcher.py:1547``);
- pages off the device at once, where the controller still evicts (a replaced loader's models, a
  re-plan): ``ModelPatcherDynamic.partially_unload`` (``:1651``), which ``free_memory`` calls; it keeps
  the model listed, staged and pinned, and a later load prioritizes it again;
- a copy out of RAM: ``partially_unload_ram`` (unpins, ``comfy/pinned_memory.py:unpin_memory``) and
  ``model_mmap_residency(free=True)`` (drops the touched pages of aimdo's file mapping), as ``free_memory``
  does under RAM pressure (``comfy/model_management.py:818-830``);
- read-ahead: ``madvise(WILLNEED)`` on the files the host mapped (``comfy/utils.py:load_safetensors``).

What this module does not do: load a dynamic model (the host pages it in when the node computes),
pin a layer (the host pins per layer, and only the layers that get no VRAM page), stream it
(``dynamic_policy.stream_note``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from ...memory.residency import dynamic_policy as policy
from ...memory.residency.dynamic_policy import Resident, stream_note
from ...memory.residency.mapped import read_ahead
from ...memory.residency.ram_guard import size
from .aimdo_hooks import HeadroomSetter
from .lookups import dynamic_vram_active, next_queued_prompt

if TYPE_CHECKING:
    from .host_types import DynamicModelPatcher, ModelPatcher

_log = logging.getLogger("headroom")
__all__ = ["DynamicBoundaries", "is_dynamic", "page_out", "stream_note", "to_disk"]

LOAD_NOTE = "DynamicVRAM pages it in as the node computes (the host's load puts it first); nothing moved now"
HOST_TIER_NOTE = {
    "P": "DynamicVRAM pins per layer itself, only the layers that get no VRAM page; it stays mapped",
    "R": "DynamicVRAM keeps it mapped from its file (page cache); there is no private copy to make",
}


def is_dynamic(patcher: ModelPatcher) -> TypeGuard[DynamicModelPatcher]:
    """A ``ModelPatcherDynamic`` (or any patcher the host pages itself)."""
    check = getattr(patcher, "is_dynamic", None)
    try:
        return bool(check()) if callable(check) else False
    except Exception:
        return False


def _vbar(patcher: ModelPatcher) -> Any:
    """The model's VBAR on its load device (``ModelPatcherDynamic._vbar_get`` without creating one)."""
    vbars = getattr(getattr(patcher, "model", None), "dynamic_vbars", None)
    return vbars.get(patcher.load_device) if isinstance(vbars, dict) else None


def resident(cid: str, label: str, patcher: DynamicModelPatcher) -> Resident:
    ram = getattr(patcher, "loaded_ram_size", None) or patcher.pinned_memory_size  # 0.18 has no host buffer
    return Resident(cid, label, int(patcher.loaded_size()), int(patcher.model_size()), int(ram()))


# -- the moves (HostOps and RamOps call these for dynamic patchers)


def page_out(patcher: ModelPatcher) -> int:
    """Every VRAM page and force-loaded weight of the model off the device; returns the bytes freed."""
    before = int(patcher.loaded_size())
    if before:
        patcher.partially_unload(patcher.offload_device, before)
    return before - int(patcher.loaded_size())


def deprioritize(patcher: ModelPatcher) -> bool:
    vbar = _vbar(patcher)
    if vbar is None:
        return False
    vbar.deprioritize()
    return True


def host_bytes(patcher: DynamicModelPatcher) -> tuple[int, int]:
    """(pageable, pinned) private RAM of the model: its pins; the mapped file is page cache, not RssAnon."""
    return 0, int(patcher.pinned_memory_size())


def dynamic_host_part(patcher: DynamicModelPatcher) -> str:
    pinned = int(patcher.pinned_memory_size())
    return "P" if pinned * 2 > int(patcher.model_size()) else "D"


def to_disk(patcher: DynamicModelPatcher) -> str:
    """Pins released and the touched pages of its mapping dropped, with the host's own calls."""
    pinned = int(patcher.pinned_memory_size())
    patcher.partially_unload_ram(1e32)
    touched = 0
    if hasattr(patcher, "model_mmap_residency"):
        touched, _ = patcher.model_mmap_residency(free=True)
    left = int(patcher.pinned_memory_size())
    if left:
        return f"{size(left)} stay pinned (the host did not release them)"
    _log.debug("Headroom: %s pinned released, %s mapped pages dropped", size(pinned), size(touched))
    return ""


def set_host_tier(patcher: DynamicModelPatcher, host: str) -> str:
    return to_disk(patcher) if host == "D" else HOST_TIER_NOTE.get(host, "")


# -- the boundary: evict and order by the plan, before the controller applies the step


class DynamicBoundaries:
    """The plan's eviction order on a DynamicVRAM host, applied at each planned node's start.

    A model the plan moves off the device is *released*: deprioritized, its pages left for the host to
    free on demand. ``is_released`` makes the controller's accounting (``HostOps.on_gpu``) count it off,
    as the plan has it, so the controller does not page it out whole (``dynamic_policy``: that would
    cost its whole upload again when it is next needed)."""

    def __init__(self) -> None:
        self.after: dict[str, list[tuple[str, ...]]] = {}  # prompt id -> uses of the next queued run
        self.released: dict[int, weakref.ref[Any]] = {}  # id() -> the handles released to the host
        self.told = False
        self.headroom = HeadroomSetter()  # aimdo's VRAM headroom from the plan (opt-in, aimdo 0.6+)

    def is_released(self, handle: Any) -> bool:
        ref = self.released.get(id(handle))
        return ref is not None and ref() is handle  # a dead handle's id may come back

    def prompt_started(self, controller: Any, prompt_id: str, prompt: Mapping[str, Any]) -> None:
        if not dynamic_vram_active():
            return
        if not self.told:
            _log.info(
                "Headroom: ComfyUI pages weights with DynamicVRAM (comfy-aimdo); the residency plan orders "
                "its evictions, warms the next model's file and keeps RAM within the budget"
            )
            self.told = True
        run = controller.runs.get(prompt_id)
        queued = next_queued_prompt() if run is not None else None
        self.after = {prompt_id: policy.repeat_uses(run.plan.steps, prompt, queued)} if run else {}

    def node_started(self, controller: Any, prompt_id: str, node_id: str) -> None:
        """Apply the policy's moves when ``node_id`` is the plan's next node (the controller re-plans
        otherwise; its evictions then page models out whole through the host)."""
        if not dynamic_vram_active():
            return
        with controller.lock:
            run = controller.runs.get(prompt_id)
            if run is None or run.closed or not run.plan.feasible or run.position >= len(run.plan.steps):
                return
            if run.plan.steps[run.position].step.node_id != node_id:
                return
            s = run.position
            pending = {sp.step.node_id for sp in run.plan.steps[s:]}
            ids = {c.id for c in run.workload.components}
            held = {
                cid: m
                for cid, m in controller.managed.items()
                if cid in ids and cid.split(":", 1)[0] not in pending and is_dynamic(m.handle.patcher)
            }
            for m in held.values():
                self.released.pop(id(m.handle), None)
            now = [resident(cid, m.label, m.handle.patcher) for cid, m in held.items()]
            for move in policy.boundary_moves(run.plan.steps, s, now, self.after.get(prompt_id, ())):
                self._apply(controller, run, node_id, held[move.component_id], move)
            step = run.plan.steps[s].step
            label = f"node {node_id} ({step.label})"
            self.headroom.node_started(step.reservation, run.plan.budget.vram, label)

    def prompt_finished(self) -> None:
        """The prompt's end: aimdo's VRAM headroom goes back to the host's (when Headroom set it)."""
        self.headroom.prompt_finished()

    def _apply(self, controller: Any, run: Any, node_id: str, m: Any, move: policy.Move) -> None:
        patcher, kind, detail = m.handle.patcher, "applied", move.why
        try:
            if move.action == policy.ORDER:
                if not deprioritize(patcher):
                    kind, detail = "skipped", "the host has no VBAR for it (never loaded on this device)"
                elif move.released:
                    self.released[id(m.handle)] = weakref.ref(m.handle)
            elif move.action == policy.WARM:
                read_ahead(m.handle.paths)
            elif move.action == policy.RELEASE:
                left = to_disk(patcher)
                if left:
                    kind, detail = "skipped", left
        except Exception as exc:  # fail open: the host pages as it would without Headroom
            kind, detail = "failed", repr(exc)
        # the controller's log: one line per move, what was done and why (Controller._event is its writer)
        controller._event(run, node_id, kind, move.action, m.component_id, m.label, move.nbytes, detail)
