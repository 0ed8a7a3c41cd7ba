"""A plan for people (a table and a summary), for machines (JSON) and as a picture (matplotlib)."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..units import GiB, format_bytes, format_bytes_up
from .baselines import Outcome
from .planner import Action, Placement, Plan, Prefetch
from .reasons import step_reasons
from .timing import time_basis, time_line
from .workload import Component, Workload


def plan_table(plan: Plan, workload: Workload, why: bool = False) -> str:
    """One row per node of the predicted order: where every live component is, VRAM, transfer; with
    ``why``, a line per component saying why it is where it is at that node."""
    reasons = step_reasons(workload, plan) if why else []
    header = f"{'step':>4}  {'node':<28} {'components (tier)':<52} {'VRAM GiB':>8} {'transfer s':>10}"
    rows = [header, "-" * len(header)]
    for n, sp in enumerate(plan.steps, 1):
        tiers = [f"{workload.component(cid).label}: {placement_text(p)}" for cid, p in sp.placements.items()]
        node = f"{sp.step.node_id} {sp.step.label}"[:28]
        text = ", ".join(tiers) or "-"
        rows.append(f"{n:>4}  {node:<28} {text:<52} {sp.vram_peak / GiB:>8.2f} {sp.transfer_s:>10.2f}")
        for action in sp.actions:
            rows.append(f"{'':>6}- {action_text(action, workload)}")
        for item in sp.prefetched:
            rows.append(f"{'':>6}- {prefetch_text(item, workload)}")
        for cid, reason in reasons[n - 1].items() if why else ():
            rows.append(f"{'':>6}why {workload.component(cid).label}: {reason}")
    return "\n".join(rows)


def placement_text(p: Placement) -> str:
    """The tier ("+ram" where the pinned cap left part of a pinned copy pageable) and resident blocks."""
    return p.label + (f" {p.resident_blocks}/{p.total_blocks}" if p.total_blocks else "")


def _split(pinned: int, pageable: int) -> str:
    return f"{format_bytes(pinned)} pinned + {format_bytes(pageable)} pageable"


def action_text(a: Action, workload: Workload) -> str:
    """One action in words, every figure the action's own (the JSON carries the same fields)."""
    label = workload.component(a.component).label
    # a copy meant for pinned RAM that the pinned cap cut short lives partly in pageable RAM
    host = "RAM" if a.pageable_bytes else a.source if a.kind == "stream" else a.target
    if a.kind == "copy":
        text = f"copy {label} from {a.source} to {host} ({format_bytes(a.bytes)}, {a.seconds:.2f} s)"
        if a.pinned_bytes and a.pageable_bytes:
            text += f", keeping {_split(a.pinned_bytes, a.pageable_bytes)}"
        return text
    if a.kind == "load":
        return f"load {label} to GPU from {a.source} ({format_bytes(a.bytes)}, {a.seconds:.2f} s)"
    if a.kind == "evict":
        return f"evict {label} from GPU ({f'keep in {a.target}' if a.target else 'free'})"
    if a.kind == "release":
        return f"release {label} from {a.source}"
    text = (
        f"stream {label}: {a.resident_blocks}/{a.total_blocks} blocks resident, prefetch {a.prefetch_depth}, "
        f"{format_bytes(a.bytes)} per pass x {a.evaluations} from {host}"
    )
    if a.pageable_bytes and a.source == "pinned RAM":
        text += f" ({_split(a.pinned_bytes, a.pageable_bytes)})"
    return f"{text}, {a.seconds:.2f} s"


def prefetch_text(p: Prefetch, workload: Workload) -> str:
    label = workload.component(p.component).label
    return (
        f"prefetch during this node: {label} ({format_bytes(p.bytes)}, {p.seconds:.2f} s) for node {p.node}"
    )


def vram_peak(plan: Plan) -> int:
    return max((s.vram_peak for s in plan.steps), default=0)


def shortfall(plan: Plan) -> int:
    """How much more usable VRAM an infeasible plan needs (0 when it fits)."""
    return 0 if plan.feasible else max(0, plan.min_vram - plan.budget.vram)


def moves_less(plan: Plan, name: str, outcome: Outcome) -> float | None:
    """The fraction of a baseline's transfer seconds Headroom saves; None where it does not compare."""
    if plan.feasible and outcome.fits and outcome.transfer_s > 0 and name != "lower_bound":
        return 1 - plan.transfer_s / outcome.transfer_s
    return None


def summary(plan: Plan, baselines: dict[str, Outcome]) -> str:
    lines = [
        f"budget: {format_bytes(plan.budget.vram)} usable VRAM, {format_bytes(plan.budget.ram)} RAM "
        f"({format_bytes(plan.budget.pinned)} pinnable), {plan.hardware.name}",
        f"minimum VRAM for this workflow: {format_bytes(plan.min_vram)} (set by {plan.bottleneck})",
    ]
    if plan.hardware.measured:  # a run on this machine measured some links (telemetry.links)
        lines.insert(1, f"links: {plan.hardware.links_line()}")
    if plan.feasible:
        lines.append(
            f"fits: yes; VRAM peak {format_bytes(vram_peak(plan))}; "
            f"predicted transfer {plan.transfer_s:.1f} s, "
            f"wall {plan.wall_s:.1f} s"
        )
    else:
        lines.append(
            f"fits: NO; it needs {format_bytes(shortfall(plan))} more usable VRAM ({plan.bottleneck})"
        )
        lines.append(f"to fit: {fit_advice(plan)}")
    for name, outcome in baselines.items():
        fit = "fits" if outcome.fits else f"out of memory at {outcome.oom_step}"
        less = moves_less(plan, name, outcome)
        ratio = "" if less is None else f" (Headroom moves {_percent_less(less)})"
        lines.append(f"{name:>13}: transfer {outcome.transfer_s:.1f} s, {fit}{ratio}")
    return "\n".join(lines)


def plan_text(plan: Plan, workload: Workload, baselines: dict[str, Outcome], why: bool = False) -> str:
    """What ``plan`` prints without --json: the table (when it fits; with ``why``, a reason per component
    per node), the summary and the notes."""
    parts = [plan_table(plan, workload, why)] if plan.feasible else []
    text = summary(plan, baselines)
    if workload.uncounted and plan.feasible:  # never "fits, 0 B" for models the plan could not count
        files = f"{len(workload.uncounted)} model file(s)"
        text = text.replace(
            "fits: yes;", f"fits: not known: {files} not counted (see the notes); without them"
        )
    if plan.feasible:  # what the time is, right under the verdict that gives it
        lines = text.split("\n")
        at = next((i + 1 for i, line in enumerate(lines) if line.startswith("fits:")), len(lines))
        text = "\n".join([*lines[:at], time_line(time_basis(plan, workload), plan.wall_s), *lines[at:]])
    parts.append(text)
    notes = plan_notes(plan, workload)
    if notes:
        parts.append(f"{len(notes)} note(s): what the plan could not read before the run and what it assumed")
    parts += [f"note: {note}" for note in notes]
    return "\n".join(parts)


def plan_notes(plan: Plan, workload: Workload) -> list[str]:
    """The workload's notes (what the workflow did not say), then the plan's own (what it assumed)."""
    notes = list(workload.notes) + list(plan.notes)
    hw = plan.hardware
    if hw.gpu_assumed and any(s.step.compute_s for s in plan.steps):
        notes.append(
            f"wall time assumes an {hw.gpu} (no --gpu given): compute scales with the card; "
            "name yours with --gpu"
        )
    return notes


def fit_advice(plan: Plan) -> str:
    """What would make an infeasible plan fit, from the bottleneck node's weights/activations split."""
    short = shortfall(plan)
    advice = [f"a card with {format_bytes_up(plan.budget.card_for(plan.min_vram))} of VRAM or more"]
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
    """The plan for machines: the figures the text prints, unrounded, plus each action's sentence."""

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "fits": plan.feasible,
        "min_vram_bytes": plan.min_vram,
        "short_bytes": shortfall(plan),
        "advice": None if plan.feasible else fit_advice(plan),
        "bottleneck": plan.bottleneck,
        "budget": {"vram": plan.budget.vram, "ram": plan.budget.ram, "pinned": plan.budget.pinned},
        "hardware": asdict(plan.hardware),
        "vram_peak": vram_peak(plan),
        "transfer_s": num(plan.transfer_s),
        "wall_s": num(plan.wall_s),
        "time": time_basis(plan, workload),
        "prefetch_depth": plan.prefetch_depth,
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
                        "tier": p.label,
                        "resident_blocks": p.resident_blocks,
                        "blocks": p.total_blocks,
                        "streamed_bytes": p.streamed_bytes,
                        "pinned_bytes": p.pinned_bytes,
                        "pageable_bytes": p.pageable_bytes,
                        "reason": p.reason,
                    }
                    for cid, p in sp.placements.items()
                },
                "actions": [{**asdict(a), "text": action_text(a, workload)} for a in sp.actions],
                "prefetch": [{**asdict(p), "text": prefetch_text(p, workload)} for p in sp.prefetched],
            }
            for sp in plan.steps
        ],
        "baselines": {
            name: {
                "transfer_s": o.transfer_s,
                "wall_s": o.wall_s,
                "fits": o.fits,
                "oom_at": o.oom_step,
                "headroom_moves_less": moves_less(plan, name, o),
            }
            for name, o in baselines.items()
        },
        "notes": plan_notes(plan, workload),
        "uncounted": list(workload.uncounted),
        "note_count": len(plan_notes(plan, workload)),
    }


_COLOURS = {"G": "#2e7d32", "S": "#f9a825", "P": "#1565c0", "R": "#64b5f6", "D": "#bdbdbd"}


# The largest timeline drawn: a column per node and a row per component stay legible (and the figure's
# memory bounded; a 20,000-node chain was killed at 4.9 GB).
MAX_TIMELINE_STEPS, MAX_TIMELINE_COMPONENTS = 400, 60


class TimelineTooLarge(ValueError):
    """A plan too large to draw legibly; the message says what was drawn up to and what to use."""


def _drawn_steps(plan: Plan, workload: Workload) -> tuple[list[Any], list[Component]]:
    """The steps and components a timeline shows: every step, or only those computing with a model when
    all do not fit (a long chain of latent nodes); refused past MAX_TIMELINE_*."""
    steps = list(plan.steps)
    if len(steps) > MAX_TIMELINE_STEPS:
        steps = [sp for sp in steps if sp.step.uses]
    used = {c for sp in steps for c in sp.step.uses} if len(steps) < len(plan.steps) else None
    comps = [c for c in workload.components if used is None or c.id in used]
    if len(steps) > MAX_TIMELINE_STEPS or len(comps) > MAX_TIMELINE_COMPONENTS:
        raise TimelineTooLarge(
            f"{len(steps):,} nodes computing with {len(comps):,} model components: a timeline is drawn "
            f"for up to {MAX_TIMELINE_STEPS} nodes and {MAX_TIMELINE_COMPONENTS} components (--json has "
            "the whole plan)"
        )
    return steps, comps


def timeline_png(plan: Plan, workload: Workload, path: Path) -> None:
    """Residency timeline: one row per component, one column per node, coloured by tier (only the nodes
    that compute with a model when there are too many; TimelineTooLarge past that)."""
    steps, comps = _drawn_steps(plan, workload)
    import matplotlib

    matplotlib.use("Agg")  # no display needed; never touch a GUI backend from the CLI
    from matplotlib import pyplot as plt
    from matplotlib.patches import Patch

    fig, (ax, vram_ax) = plt.subplots(
        2, 1, figsize=(max(6, 0.6 * len(steps) + 3), 1.2 + 0.5 * len(comps) + 2), sharex=True,
        gridspec_kw={"height_ratios": [max(1, len(comps)), 2]},
    )  # fmt: skip
    for s, sp in enumerate(steps):
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
    xs = [s + 0.5 for s in range(len(steps))]
    vram_ax.bar(xs, [sp.vram_peak / GiB for sp in steps], width=0.8, color="#455a64")
    vram_ax.axhline(plan.budget.vram / GiB, color="#c62828", linestyle="--", linewidth=1)
    vram_ax.set_ylabel("VRAM GiB")
    labels = [f"{sp.step.label[:18]} #{sp.step.node_id}" for sp in steps]
    vram_ax.set_xticks(xs, labels, fontsize=7, rotation=40, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")  # exactly `path`: no ".png" appended to other names
    plt.close(fig)


def _percent_less(less: float) -> str:
    """ "42% less", or "9% more" where Headroom moves more bytes than the baseline (it fits where the
    baseline does not, or keeps more for later nodes)."""
    return f"{100 * less:.0f}% less" if less >= 0 else f"{-100 * less:.0f}% more"
