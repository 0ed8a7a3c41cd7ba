"""What a predicted time is: the card it assumes, what it counts, and how far off it may be.

Every answer that gives a time (the command line, the preflight, "Will it fit?", the timeline) carries
``time_basis``: the card that priced the compute and how it was chosen (named with --gpu or in the
sidebar, reported by the host's device, or assumed), what the time counts (reading models from disk,
loads, text encoding, sampling, decoding, the per-call overhead) and leaves out, and a range. The range
is the held-out error of the time model (``bench/results/wall_time.md``: each published source left out
of the fit in turn; 80% of its cases fall within it); a model the catalog does not know widens it to a
factor of three either way, since its FLOPs are estimated from its size.
"""

from __future__ import annotations

import math
from typing import Any

from ..units import format_bytes
from .costmodel import Tier
from .planner import Plan
from .workload import Workload

# predicted / measured of the held-out cases (bench/results/wall_time.md, each source left out): the
# 10th and 90th percentiles; the measured time is then within [wall / HIGH, wall / LOW] for 80% of them
HELD_OUT_RATIO = (0.77, 1.20)
UNKNOWN_RATIO = (1 / 3, 3.0)  # a model whose FLOPs were estimated from its size
LEFT_OUT = "the host's start-up, saving outputs, previews, LoRA merging and other custom nodes' own work"
_KIND_WORDS = {
    "text_encoder": "text encoding",
    "diffusion_model": "sampling",
    "checkpoint": "sampling",
    "vae": "VAE encode/decode",
}


def _card(plan: Plan) -> tuple[str, str]:
    hw = plan.hardware
    return hw.gpu, hw.gpu_source


def time_basis(plan: Plan, workload: Workload) -> dict[str, Any]:
    """The card, what the time includes, and its range, for every answer that shows a time."""
    card, source = _card(plan)
    by_kind: dict[str, float] = {}
    calls = 0
    for sp in plan.steps:
        kinds = {workload.component(c).kind for c in sp.step.uses}
        word = next(
            (_KIND_WORDS[k] for k in ("diffusion_model", "checkpoint", "vae", "text_encoder") if k in kinds),
            None,
        )
        if word and sp.step.compute_s:
            by_kind[word] = by_kind.get(word, 0.0) + sp.step.compute_s
            calls += sp.step.evaluations
    read = sum(
        workload.component(c).bytes
        for c in {c for sp in plan.steps for c in sp.step.uses}
        if workload.initial_tier(c) == Tier.DISK
    )
    parts = [f"{word} {seconds:.1f} s" for word, seconds in by_kind.items()]
    if read:
        parts.insert(0, f"reading {format_bytes(read)} of model files ({plan.hardware.disk / 1e9:.1f} GB/s)")
    if math.isfinite(plan.transfer_s):  # a plan that does not fit has no time (inf): said by its verdict
        parts.append(f"moving weights to the GPU {plan.transfer_s:.1f} s")
    unknown = sorted(
        c.label
        for c in workload.components
        if c.source == "estimate" and c.kind in ("diffusion_model", "checkpoint")
    )
    low, high = UNKNOWN_RATIO if unknown else HELD_OUT_RATIO
    wall = plan.wall_s
    return {
        "card": card,
        "card_source": source,
        "includes": "; ".join(parts),
        "left_out": LEFT_OUT,
        "model_calls": calls,
        # JSON has no Infinity: a browser's JSON.parse refuses the whole answer (read "no answer from the
        # server" in the sidebar), so a plan that does not fit has no range
        "range_s": [wall / high, wall / low] if 0 < wall < math.inf else None,
        "estimated_models": unknown,
    }


def time_line(basis: dict[str, Any], wall_s: float) -> str:
    """One line: "wall 35 s (25-50 s) on an RTX 4060 (named with --gpu): reading ...; sampling 30.1 s"."""
    how = {"named": "named", "device": "the host's device", "assumed": "assumed: no card named"}[
        basis["card_source"]
    ]
    span = ""
    if basis["range_s"]:
        low, high = basis["range_s"]
        span = f" ({low:.0f}-{high:.0f} s)" if high >= 10 else f" ({low:.2g}-{high:.2g} s)"
    line = f"time: {wall_s:.1f} s{span} on {basis['card']} ({how}): {basis['includes']}"
    line += f"; not counted: {basis['left_out']}"
    if basis["estimated_models"]:
        models = ", ".join(basis["estimated_models"])
        line += f"; {models}: a model the catalog does not know, so its time is a wide range"
    return line
