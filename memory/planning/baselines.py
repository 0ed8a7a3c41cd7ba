"""Other policies priced in the planner's cost model, for comparison.

- ``comfyui_reactive``: ComfyUI 0.3.64's model management as coded in comfy/model_management.py:
  a model is loaded when a node needs it (``load_models_gpu``), room is
  made by ``free_memory(required * 1.1 + extra)`` evicting partially offloaded models first, then the
  smallest (reference counts are not predictable from a workflow and count as equal), with partial
  unloads of just the shortfall; what does not fit is loaded "lowvram": the budget
  ``max(128 MiB, free - minimum_memory_required, min(0.4 * free, free - minimum_inference))`` of
  weights stays resident and the rest is cast per operation from pageable RAM at every evaluation.
  Offloading copies weights back to RAM. Weights come from disk into RAM at the first use; what
  exceeds the RAM budget is paged back in from the file whenever it streams.
- ``model_offload``: diffusers' ``enable_model_cpu_offload``: each model moves whole to the GPU before
  it runs and back to RAM when the next one runs; a model that does not fit is out of memory.
- ``lower_bound``: no policy does better: every component is read from disk once, and what exceeds
  VRAM at a step is streamed again at the pinned rate for every evaluation after the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..units import MiB
from .costmodel import Budget, Hardware
from .workload import Workload

MIN_INFERENCE = 800 * MiB  # model_management.minimum_inference_memory(): 0.8 GiB + the extra reserve
LOWVRAM_MIN_WEIGHTS = 128 * MiB
MIN_WEIGHT_MEMORY_RATIO = 0.4


@dataclass
class Outcome:
    policy: str
    transfer_s: float
    wall_s: float
    oom_step: str | None = None  # the node where this policy runs out of VRAM
    ram_peak: int = 0
    per_step_s: list[float] = field(default_factory=list)
    # per step, where the bytes it moved came from ("pageable" RAM, "disk"), where the policy records it
    per_step_uploads: list[dict[str, int]] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.oom_step is None


def comfyui_reactive(w: Workload, budget: Budget, hw: Hardware) -> Outcome:
    loaded: dict[str, int] = {}  # component -> bytes on the GPU
    in_ram = {cid for cid, tier in w.initial.items() if tier.host in "PR"}  # a repeat run: cached in RAM
    ram = sum(w.component(cid).bytes for cid in in_ram)  # kept as it grows (prompts hold thousands)
    order: list[str] = []  # the loaded ones, most recently loaded first, as current_loaded_models
    out = Outcome("comfyui", 0.0, 0.0)
    for step in w.steps:
        seconds = 0.0
        moved = {"pageable": 0, "disk": 0}
        used = [w.component(c) for c in step.uses]
        for c in used:
            if c.id not in in_ram:
                in_ram.add(c.id)
                ram += c.bytes
                seconds += c.bytes / hw.disk
                moved["disk"] += c.bytes
        minimum_required = max(MIN_INFERENCE, step.reservation)  # the host's own formula
        need = 1.1 * sum(c.bytes - loaded.get(c.id, 0) for c in used) + minimum_required
        free = budget.vram - sum(loaded.values())
        if free < need:  # free_memory: offloaded-first, then smallest, partial unloads of the shortfall
            victims = [w.component(cid) for cid in order if cid not in step.uses and loaded.get(cid)]
            victims.sort(key=lambda c: (-(c.bytes - loaded[c.id]), c.bytes))
            for c in victims:
                if free >= need:
                    break
                drop = min(loaded[c.id], int(need - free))
                loaded[c.id] -= drop
                free += drop
                seconds += drop / hw.d2h
                if not loaded[c.id]:
                    del loaded[c.id]
                    order.remove(c.id)
        for c in used:
            free = budget.vram - sum(v for k, v in loaded.items() if k != c.id)
            if free - minimum_required >= c.bytes:
                resident = c.bytes
            else:
                ratio_room = min(MIN_WEIGHT_MEMORY_RATIO * free, free - MIN_INFERENCE)
                resident = min(c.bytes, int(max(LOWVRAM_MIN_WEIGHTS, free - minimum_required, ratio_room)))
            if resident + step.activation_min > free and out.oom_step is None:
                out.oom_step = f"node {step.node_id} ({step.label})"
            seconds += max(0, resident - loaded.get(c.id, 0)) / hw.h2d_pageable
            # weights beyond the RAM budget are paged back in from the file at every pass
            overflow = min(c.bytes - resident, max(0, ram - budget.ram))
            streamed = c.bytes - resident - overflow
            seconds += step.evaluations * (streamed / hw.h2d_pageable + overflow / hw.disk)
            moved["pageable"] += max(0, resident - loaded.get(c.id, 0)) + step.evaluations * streamed
            moved["disk"] += step.evaluations * overflow
            loaded[c.id] = resident
            if c.id in order:
                order.remove(c.id)
            order.insert(0, c.id)
        out.ram_peak = max(out.ram_peak, ram)
        out.per_step_s.append(seconds)
        out.per_step_uploads.append(moved)
        out.transfer_s += seconds
        out.wall_s += seconds + step.compute_s  # per-op casts are synchronous: no overlap
    return out


def model_offload(w: Workload, budget: Budget, hw: Hardware) -> Outcome:
    out = Outcome("model_offload", 0.0, 0.0)
    in_ram: set[str] = set()
    ram = 0  # bytes of in_ram
    on_gpu: set[str] = set()
    for step in w.steps:
        seconds = 0.0
        for cid in sorted(on_gpu - set(step.uses)) if step.uses else ():
            seconds += w.component(cid).bytes / hw.d2h
            on_gpu.discard(cid)
        for c in (w.component(cid) for cid in step.uses):
            if c.id not in in_ram:
                in_ram.add(c.id)
                ram += c.bytes
                seconds += c.bytes / hw.disk
            if c.id not in on_gpu:
                seconds += c.bytes / hw.h2d_pageable
                on_gpu.add(c.id)
        need = sum(w.component(c).bytes for c in on_gpu) + step.activation_min  # the host splits cond/uncond
        if need > budget.vram and out.oom_step is None:
            out.oom_step = f"node {step.node_id} ({step.label})"
        out.ram_peak = max(out.ram_peak, ram)
        out.per_step_s.append(seconds)
        out.transfer_s += seconds
        out.wall_s += seconds + step.compute_s
    return out


def lower_bound(w: Workload, budget: Budget, hw: Hardware) -> Outcome:
    used = {c for step in w.steps for c in step.uses}
    seconds = sum(w.component(c).bytes / hw.disk for c in used)  # a direct load from the file, at the least
    compute = 0.0
    for step in w.steps:
        excess = sum(w.component(c).bytes for c in step.uses) + step.activation_min - budget.vram
        stream = max(0, step.evaluations - 1) * max(0, excess) / hw.h2d_pinned
        seconds += stream
        compute += max(step.compute_s, stream)
    return Outcome("lower_bound", seconds, compute)


BASELINES = {"comfyui": comfyui_reactive, "model_offload": model_offload, "lower_bound": lower_bound}
