"""What the plan still decides on a DynamicVRAM (comfy-aimdo) host. Pure policy: no ComfyUI, no torch.

On such a host (ComfyUI 0.18, ``comfy.memory_management.aimdo_enabled``) every model is a
``ModelPatcherDynamic``: loading it only reserves a virtual range (a VBAR) and puts that VBAR on top of
aimdo's priority list; weights take VRAM pages when a layer first computes, and a fault that finds no
free VRAM frees pages from the lowest-priority VBAR up (``model-vbar.c``: ``vbars_free_for_vbar``). The
priority list is the order of the host's loads: eviction by recency. The host copy is the safetensors
file itself, mapped by aimdo (``comfy/utils.py:load_safetensors``); a layer that gets no VRAM page is
pinned on the fly (``comfy/pinned_memory.py``) and copied per use.

The graph knows what recency does not: which model the next nodes need. So at each node boundary:

- **order** (the plan's evictions): every idle model with pages goes to the bottom of the host's
  priority list, nearest next use first, so the one needed last (or never again) ends lowest: when a
  fault of the node's model needs room, the host takes that model's pages first, and only as many as the
  fault needs (Belady's order instead of recency). A model the plan moves off the device is *released*:
  its pages stay until a fault takes them, because paging it out whole at the boundary would cost its
  whole upload again when it is needed (later in the prompt, in the next queued run, or in the user's
  next prompt), and would free nothing the host does not free on demand;
- **warm**: the next node's models that are not all on the device get their file pages read ahead,
  so its first-touch faults copy from the page cache, not the disk (a model with no page on the device
  is warmed by the controller's own warm step; this adds the ones the host evicted in part).

Which idle copies leave RAM (pinned pages back to the OS, mapped pages dropped) is the RAM guard's
(``ram_guard``): the host part gives it the host's own unpin and unmap for dynamic models. Headroom's
block streamer leaves dynamic models alone: the host already pages them per layer, and a second copy
scheme would fight its VBAR (``stream_note``).

``after``: the uses of the nodes the host runs after this prompt, when the next queued prompt is the same
workflow (``repeat_uses``): a model the prompt no longer needs is then ranked by where the next run
needs it, instead of "never again" (a queue of runs is the cycle recency handles worst).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..planning.planner import StepPlan
from .ram_guard import needed_again, next_use, size

ORDER, WARM, RELEASE = "deprioritize", "warm", "unpin"


@dataclass(frozen=True)
class Resident:
    """A registered dynamic model as the host has it now."""

    component_id: str
    label: str
    device_bytes: int  # its VRAM pages (the host's loaded_size)
    size: int  # all its weights
    host_bytes: int = 0  # its host buffer in RAM (the host's loaded_ram_size: its pins)


@dataclass(frozen=True)
class Move:
    """One action at a node boundary, in the order to apply it, with its one-line reason."""

    action: str  # ORDER, WARM or RELEASE
    component_id: str
    label: str
    nbytes: int
    why: str
    released: bool = (
        False  # off the device in the plan: the host frees its pages on demand, not the controller
    )


def _again(n: int | None, in_prompt: int) -> str:
    where = "" if n is None or n < in_prompt else " (in the next queued run of this workflow)"
    return needed_again(n) + where


def boundary_moves(
    steps: Sequence[StepPlan],
    s: int,
    held: Sequence[Resident],
    after: Sequence[Sequence[str]] = (),
) -> list[Move]:
    """What to do at the start of step ``s`` for the dynamic models in ``held``, in the order to do it.

    A model the node computes with is the host's: its load prioritizes it and its faults page it in."""
    sp = steps[s]
    node, uses = sp.step.node_id, set(sp.step.uses)
    in_prompt = len(steps) - s
    idle = [r for r in held if r.component_id not in uses and r.device_bytes > 0]
    ranked = {r.component_id: next_use(steps, s, r.component_id, after) for r in idle}

    def farthest_first(r: Resident) -> tuple[bool, int, int, str]:
        n = ranked[r.component_id]
        return (n is not None, -(n or 0), -r.device_bytes, r.component_id)

    moves = []
    # deprioritize puts a model at the bottom of the host's list: nearest first, so the farthest ends last
    for r in reversed(sorted(idle, key=farthest_first)):
        n, kept = ranked[r.component_id], _kept(sp, r.component_id)
        if kept:
            why = f"kept on the device by the plan, idle at node {node}: {_again(n, in_prompt)}; "
        else:
            why = f"off the device in the plan at node {node}: {_again(n, in_prompt)}; released to the host, "
        why += "which frees it before the models needed sooner, only as far as a fault needs"
        moves.append(Move(ORDER, r.component_id, r.label, r.device_bytes, why, released=not kept))
    for r in held:
        # the host frees pins under RAM pressure from the most recently loaded model first, the current
        # prompt's last (comfy/model_management.py free_pins): a model the graph is done with gives its
        # pins back now, so that release does not take those of the models the next nodes need
        if (
            r.component_id in uses
            or r.host_bytes <= 0
            or next_use(steps, s, r.component_id, after) is not None
        ):
            continue
        nxt_run = " nor in the next queued run of this workflow" if after else ""
        why = (
            f"not needed again in this prompt{nxt_run}: its {size(r.host_bytes)} of host buffer (pins) go "
            "back now, so the host's RAM-pressure release, which takes the most recently loaded model's pins "
            "first, keeps the pins of the models the next nodes need"
        )
        moves.append(Move(RELEASE, r.component_id, r.label, r.host_bytes, why))
    if s + 1 < len(steps):
        nxt = steps[s + 1].step
        for r in held:
            missing = r.size - r.device_bytes
            # all off the device: the controller's own warm step reads it ahead (``HostOps.warm``)
            if r.component_id in nxt.uses and r.component_id not in uses and 0 < r.device_bytes < r.size:
                why = (
                    f"node {nxt.node_id} computes with it next and {size(missing)} of it are not on the "
                    f"device: its file pages are read ahead"
                )
                moves.append(Move(WARM, r.component_id, r.label, missing, why))
    return moves


def _kept(sp: StepPlan, cid: str) -> bool:
    placement = sp.placements.get(cid)
    return placement is not None and placement.tier.gpu != ""


def repeat_uses(
    steps: Sequence[StepPlan], prompt: Mapping[str, Any], queued: Mapping[str, Any] | None
) -> list[tuple[str, ...]]:
    """The uses of the nodes the host runs for ``queued`` when it is the same workflow as ``prompt``
    (the same node ids and classes), in this plan's order; a node whose inputs and whose ancestors'
    inputs are all unchanged is served from the host's cache and dropped. [] when it is another one."""
    if not isinstance(queued, Mapping) or set(queued) != set(prompt):
        return []
    for node_id, node in prompt.items():
        other = queued.get(node_id)
        if not isinstance(node, Mapping) or not isinstance(other, Mapping):
            return []
        if node.get("class_type") != other.get("class_type"):
            return []
    changed: dict[str, bool] = {}

    def differs(node_id: str, seen: frozenset[str] = frozenset()) -> bool:
        if node_id in changed:
            return changed[node_id]
        if node_id in seen or node_id not in prompt:
            return True
        a, b = prompt[node_id].get("inputs") or {}, queued[node_id].get("inputs") or {}
        result = a != b or any(
            differs(str(v[0]), seen | {node_id}) for v in a.values() if isinstance(v, list) and len(v) == 2
        )
        changed[node_id] = result
        return result

    return [tuple(sp.step.uses) for sp in steps if differs(sp.step.node_id)]


STREAM_NOTE = (
    "not streamed: ComfyUI's DynamicVRAM (comfy-aimdo) pages this model in per layer itself and Headroom "
    "orders its evictions and releases its pins instead (a second copy scheme would fight the host's VBAR). "
    "The host's own block prefetch (comfy/model_prefetch.py) is wired into a few models only (LTX-AV, "
    "MiniMax, Wan-Animate2, some text encoders); whether Headroom should drive it for the others (Wan 2.x, "
    "Flux, Qwen-Image) waits for a GPU benchmark (scripts/gpu-check). Start ComfyUI with "
    "--disable-dynamic-vram to stream this model with the node's budget"
)


def stream_note(is_dynamic: bool) -> str:
    """Why the block streamer leaves a model alone ("" when it may stream it)."""
    return STREAM_NOTE if is_dynamic else ""


AIMDO_HEADROOM_FLOOR = 256 * 2**20  # comfy-aimdo's compiled-in floor (VRAM_HEADROOM): less changes nothing
HEADROOM_STEP = 64 * 2**20  # set in whole steps, so a re-plan's few bytes do not reset it at every node


def vram_headroom(reservation: int, total: int | None) -> tuple[int, str]:
    """The VRAM comfy-aimdo should keep free of weight pages while a node computes (its simple budget,
    ``control.set_simple_vram_headroom``): what the plan reserves for the node's activations (the host's
    own formula for it where known), rounded up to 64 MiB, never below aimdo's 256 MiB floor and never
    above half the card (the weights need the rest). Returns (bytes, why)."""
    wanted = -(-max(0, reservation) // HEADROOM_STEP) * HEADROOM_STEP
    if total and wanted > max(AIMDO_HEADROOM_FLOOR, total // 2):
        return max(
            AIMDO_HEADROOM_FLOOR, total // 2
        ), "half the card: the node's planned activations would leave its weights too little"
    if wanted <= AIMDO_HEADROOM_FLOOR:
        return AIMDO_HEADROOM_FLOOR, "comfy-aimdo's own floor: the node's planned activations fit within it"
    return wanted, "the node's planned activations"
