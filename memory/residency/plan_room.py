"""What the running prompt's plan leaves a node for its activations: the plan's VRAM budget less the
weights it keeps on the device at that node (whole models, and a streamed model's resident rest, its
resident blocks and its ring of uploads). The Tiled VAE Decode sizes its tiles and runs of frames from
it (issue #32: tiles from the plan), so its decode fits beside what the plan keeps loaded there.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..planning.planner import StepPlan
from .run_log import Run


def running_run(runs: Iterable[Run], node_id: str) -> Run | None:
    """The open run whose node ``node_id`` has started and not finished (the latest such)."""
    found = None
    for run in runs:
        if not run.closed and run.current == node_id:
            found = run
    return found


def weights_kept(run: Run, sp: StepPlan) -> int:
    """Bytes of weights the plan holds on the device during step ``sp`` of ``run``."""
    components = {c.id: c for c in run.workload.components}
    kept, ring = 0, 0
    for cid, placement in sp.placements.items():
        c = components.get(cid)
        if c is None or not placement.tier.gpu:
            continue
        if placement.tier.gpu == "G":
            kept += c.bytes
        else:  # streamed: its rest and resident blocks stay, blocks pass through the ring
            kept += c.rest + sum(sorted(c.blocks, reverse=True)[: placement.resident_blocks])  # largest first
            ring = max(ring, c.ring(run.plan.prefetch_depth))
    return kept + ring


def activation_room(runs: Iterable[Run], node_id: str) -> int | None:
    """VRAM the plan of the prompt running ``node_id`` leaves for that node's activations; None when no
    feasible plan has that node (not planned, no device to plan for, an unplanned helper node)."""
    run = running_run(runs, node_id)
    if run is None or not run.plan.feasible:
        return None
    for sp in run.plan.steps:
        if sp.step.node_id == node_id:
            return max(0, run.plan.budget.vram - weights_kept(run, sp))
    return None
