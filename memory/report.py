"""A plan for people (a table and a summary), for machines (JSON) and as a picture (matplotlib)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .baselines import Outcome
from .costmodel import GiB
from .planner import Plan
from .units import format_bytes
from .workload import Workload


def _gib(n: float) -> str:
    return f"{n / GiB:.1f}"


def plan_table(plan: Plan, workload: Workload) -> str:
    """One row per node of the predicted order: where every live component is, VRAM, transfer."""
    header = f"{'step':>4}  {'node':<28} {'components (tier)':<52} {'VRAM GiB':>8} {'transfer s':>10}"
    rows = [header, "-" * len(header)]
    for n, sp in enumerate(plan.steps, 1):
        tiers = []
        for cid, placement in sp.placements.items():
            label = workload.component(cid).label
            tier = placement.tier.label
            if placement.total_blocks:
                tier += f" {placement.resident_blocks}/{placement.total_blocks}"
            tiers.append(f"{label}: {tier}")
        node = f"{sp.step.node_id} {sp.step.label}"[:28]
        text = ", ".join(tiers) or "-"
        rows.append(f"{n:>4}  {node:<28} {text:<52} {_gib(sp.vram_peak):>8} {sp.transfer_s:>10.2f}")
        for action in sp.actions:
            rows.append(f"{'':>6}- {action}")
        for item in sp.prefetched:
            rows.append(f"{'':>6}- prefetch during this node: {item}")
    return "\n".join(rows)


def summary(plan: Plan, baselines: dict[str, Outcome]) -> str:
    lines = [
        f"budget: {format_bytes(plan.budget.vram)} usable VRAM, {format_bytes(plan.budget.ram)} RAM "
        f"({format_bytes(plan.budget.pinned)} pinnable), {plan.hardware.name}",
        f"minimum VRAM for this workflow: {format_bytes(plan.min_vram)} (set by {plan.bottleneck})",
    ]
    if plan.feasible:
        peak = max((s.vram_peak for s in plan.steps), default=0)
        lines.append(
            f"fits: yes; VRAM peak {format_bytes(peak)}; predicted transfer {plan.transfer_s:.1f} s, "
            f"wall {plan.wall_s:.1f} s"
        )
    else:
        short = plan.min_vram - plan.budget.vram
        lines.append(f"fits: NO; it needs {format_bytes(short)} more usable VRAM ({plan.bottleneck})")
        lines.append(f"to fit: {fit_advice(plan)}")
    for name, outcome in baselines.items():
        fit = "fits" if outcome.fits else f"out of memory at {outcome.oom_step}"
        ratio = ""
        if plan.feasible and outcome.fits and outcome.transfer_s > 0 and name != "lower_bound":
            ratio = f" (Headroom moves {100 * (1 - plan.transfer_s / outcome.transfer_s):.0f}% less)"
        lines.append(f"{name:>13}: transfer {outcome.transfer_s:.1f} s, {fit}{ratio}")
    return "\n".join(lines)


def fit_advice(plan: Plan) -> str:
    """What would make an infeasible plan fit, from the bottleneck node's weights/activations split."""
    short = plan.min_vram - plan.budget.vram
    advice = [f"a card with {format_bytes(plan.min_vram + plan.budget.reserve)} of VRAM or more"]
    if "activations" in plan.bottleneck:
        advice.append("a smaller resolution, fewer frames or a smaller batch at that node")
    if "streaming" not in plan.bottleneck:
        advice.append("fp8 weights for the models that node uses")
    if 0 < short <= plan.budget.reserve:
        advice.append(
            f"--reserve below {format_bytes(plan.budget.reserve - short)} if nothing else uses the GPU"
        )
    return "; or ".join(advice)


def plan_json(plan: Plan, workload: Workload, baselines: dict[str, Outcome]) -> dict[str, Any]:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "fits": plan.feasible,
        "min_vram_bytes": plan.min_vram,
        "advice": None if plan.feasible else fit_advice(plan),
        "bottleneck": plan.bottleneck,
        "budget": {"vram": plan.budget.vram, "ram": plan.budget.ram, "pinned": plan.budget.pinned},
        "hardware": plan.hardware.__dict__,
        "transfer_s": num(plan.transfer_s),
        "wall_s": num(plan.wall_s),
        "components": [
            {
                "id": c.id,
                "label": c.label,
                "kind": c.kind,
                "bytes": c.bytes,
                "blocks": len(c.blocks),
                "source": c.source,
            }
            for c in workload.components
        ],
        "steps": [
            {
                "node": sp.step.node_id,
                "class_type": sp.step.label,
                "vram_peak": sp.vram_peak,
                "ram": sp.ram,
                "pinned": sp.pinned,
                "transfer_s": sp.transfer_s,
                "wall_s": sp.wall_s,
                "placements": {
                    cid: {
                        "tier": p.tier.label,
                        "resident_blocks": p.resident_blocks,
                        "blocks": p.total_blocks,
                    }
                    for cid, p in sp.placements.items()
                },
                "actions": sp.actions,
                "prefetch": sp.prefetched,
            }
            for sp in plan.steps
        ],
        "baselines": {
            name: {"transfer_s": o.transfer_s, "wall_s": o.wall_s, "fits": o.fits, "oom_at": o.oom_step}
            for name, o in baselines.items()
        },
        "notes": list(workload.notes),
    }


_COLOURS = {"G": "#2e7d32", "S": "#f9a825", "P": "#1565c0", "R": "#64b5f6", "D": "#bdbdbd"}


def timeline_png(plan: Plan, workload: Workload, path: Path) -> None:
    """Residency timeline: one row per component, one column per node, coloured by tier."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; never touch a GUI backend from the CLI
    from matplotlib import pyplot as plt
    from matplotlib.patches import Patch

    comps = list(workload.components)
    fig, (ax, vram_ax) = plt.subplots(
        2, 1, figsize=(max(6, 0.6 * len(plan.steps) + 3), 1.2 + 0.5 * len(comps) + 2), sharex=True,
        gridspec_kw={"height_ratios": [max(1, len(comps)), 2]},
    )  # fmt: skip
    for s, sp in enumerate(plan.steps):
        for row, c in enumerate(comps):
            placement = sp.placements.get(c.id)
            key = "D" if placement is None else placement.tier.gpu or placement.tier.host
            ax.barh(row, 1, left=s, color=_COLOURS[key], edgecolor="white")
            if placement and placement.total_blocks:
                ax.text(s + 0.5, row, f"{placement.resident_blocks}/{placement.total_blocks}", ha="center",
                        va="center", fontsize=7)  # fmt: skip
    ax.set_yticks(range(len(comps)), [c.label.replace(".safetensors", "") for c in comps], fontsize=8)
    ax.invert_yaxis()
    ax.legend(
        handles=[Patch(color=v, label=k) for k, v in zip(
            ["GPU", "streamed", "pinned RAM", "RAM", "disk"], _COLOURS.values(), strict=True)],
        loc="upper center", bbox_to_anchor=(0.5, 1.35), ncol=5, fontsize=8, frameon=False,
    )  # fmt: skip
    xs = [s + 0.5 for s in range(len(plan.steps))]
    vram_ax.bar(xs, [sp.vram_peak / GiB for sp in plan.steps], width=0.8, color="#455a64")
    vram_ax.axhline(plan.budget.vram / GiB, color="#c62828", linestyle="--", linewidth=1)
    vram_ax.set_ylabel("VRAM GiB")
    labels = [f"{sp.step.label[:18]} #{sp.step.node_id}" for sp in plan.steps]
    vram_ax.set_xticks(xs, labels, fontsize=7, rotation=40, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
