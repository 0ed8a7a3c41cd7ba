"""An independent brute-force optimiser of the planner's cost model, for tests and benchmarks.

It enumerates every tier sequence of every component and prices each with scalar code written
separately from memory/planning/planner.py, so agreement between the two is evidence, not an echo.
"""

from __future__ import annotations

import itertools
import math

from comfyui_headroom.memory.planning.costmodel import (
    CHOICE_HOST,
    IDLE_TIERS,
    USED_TIERS,
    Budget,
    Hardware,
    Tier,
)
from comfyui_headroom.memory.planning.planner import minimum_vram
from comfyui_headroom.memory.planning.workload import Workload


def _honours(pin: str, t: Tier) -> bool:
    """The user's residency choice, restated: a GPU pin keeps every weight on the GPU; a host pin fixes
    where the host copy lives (P pinned, R pageable, D the file)."""
    if pin == "gpu":
        return t.gpu == "G"
    return not pin or t.host == CHOICE_HOST[pin]


def _choices(w: Workload) -> list[tuple[Tier, ...]]:
    out = []
    for c in w.components:
        uses = [s for s, step in enumerate(w.steps) if c.id in step.uses]
        # already off disk at the start: live from the first step (the planner's documented rule)
        first = 0 if w.initial.get(c.id, Tier.DISK) != Tier.DISK else (uses[0] if uses else 0)
        for s, step in enumerate(w.steps):
            if not uses or s < first or s > uses[-1]:
                out.append((Tier.DISK,))
            elif c.id in step.uses:
                out.append(tuple(t for t in USED_TIERS if (c.blocks or t.gpu == "G") and _honours(c.pin, t)))
            else:
                out.append(tuple(t for t in IDLE_TIERS if _honours(c.pin, t)))
    return out


def search_space(w: Workload) -> int:
    """How many tier sequences brute force would price."""
    return math.prod(len(c) for c in _choices(w))


def brute_force(w: Workload, budget: Budget, hw: Hardware) -> float:
    """The least total transfer seconds over every tier sequence and prefetch depth (inf if none fits)."""
    depths = (budget.prefetch_depth,) if budget.prefetch_depth is not None else (1, 2, 3)
    # the planner's documented rule: synchronous streaming (d = 0) only when no ring of two blocks fits
    if budget.prefetch_depth is None and minimum_vram(w, 1)[0] > budget.vram:
        depths = (0,)
    return min(_brute_force(w, budget, hw, depth) for depth in depths)


def _resident(blocks: tuple[int, ...], room: float) -> int:
    """Largest blocks first while they fit (the planner's documented rule)."""
    resident = 0
    for size in sorted(blocks, reverse=True):
        if resident + size > room:
            break
        resident += size
    return resident


def _brute_force(w: Workload, budget: Budget, hw: Hardware, depth: int) -> float:
    comps = list(w.components)
    choices = _choices(w)
    bw = {"P": hw.h2d_pinned, "R": hw.h2d_pageable, "D": hw.disk}
    best = math.inf
    for combo in itertools.product(*choices):
        tier = {
            (c.id, s): combo[k * len(w.steps) + s] for k, c in enumerate(comps) for s in range(len(w.steps))
        }
        total = 0.0
        for s, step in enumerate(w.steps):
            vram = step.activation_min  # the host runs cond alone when cond+uncond do not fit
            ring = 0  # streamed components run one after another and share one ring
            for c in comps:
                t = tier[c.id, s]
                if t.gpu == "G":
                    vram += c.bytes
                elif t.gpu == "S":
                    vram += c.bytes - sum(c.blocks)
                    ring = max(ring, (depth + 1) * max(c.blocks))
            vram += ring
            ram = pinned = 0
            streamed = {}
            room = budget.vram - vram  # resident blocks take what is left, component by component
            for c in comps:
                t = tier[c.id, s]
                if t.host in "PR":  # a streamed one keeps its whole copy there, resident blocks too
                    ram += c.bytes
                if t.gpu == "S":
                    resident = _resident(c.blocks, room)
                    room -= resident
                    streamed[c.id] = sum(c.blocks) - resident
                    continue
                if t.host == "P":
                    pinned += c.bytes
            pinned_part = {}  # a stream from pinned RAM pins what the cap leaves; the rest is pageable
            for c in comps:
                if tier[c.id, s] == Tier.STREAM_PINNED:
                    pinned_part[c.id] = min(streamed[c.id], max(0, budget.pinned - pinned))
                    pinned += pinned_part[c.id]
            if vram > budget.vram or ram > budget.ram or pinned > budget.pinned:
                total = math.inf
                break
            for c in comps:
                t = tier[c.id, s]
                prev = tier[c.id, s - 1] if s else w.initial.get(c.id, Tier.DISK)
                if t.host in "PR" and prev.host != t.host:
                    sources = (
                        [hw.disk]
                        + ([hw.memcpy] if prev.host in "PR" else [])
                        + ([hw.d2h] if prev.gpu == "G" else [])
                    )
                    total += c.bytes / max(sources)
                if t.gpu == "G" and prev.gpu != "G":
                    total += c.bytes / max(bw[prev.host], bw[t.host])
                if t.gpu == "S":
                    once = c.bytes - sum(c.blocks) + (sum(c.blocks) - streamed[c.id])
                    if t == Tier.STREAM_PINNED:
                        # pinned and pageable in the proportion the cap leaves, for the bytes uploaded
                        # once as for those streamed at every evaluation
                        part = pinned_part[c.id]
                        fast_once = once * part / streamed[c.id] if streamed[c.id] else once
                        total += fast_once / hw.h2d_pinned + (once - fast_once) / hw.h2d_pageable
                        per_pass = part / hw.h2d_pinned + (streamed[c.id] - part) / hw.h2d_pageable
                    else:
                        total += once / bw[t.host]
                        per_pass = streamed[c.id] / bw[t.host]
                    total += step.evaluations * per_pass
        best = min(best, total)
    return best
