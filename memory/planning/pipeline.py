"""The planning pipeline, in one place: parse → order → extract → plan.

Used by the command line, the preflight of a queued prompt, the runtime residency controller and the
benches. Each caller keeps its own error handling (the command line prints one line and exits 2, the
preflight skips, the controller leaves the prompt to the host): this function raises what the stages
raise (WorkflowError and other ValueErrors, KeyError, TypeError, OverflowError, RecursionError, and
PlanTimeout past ``time_limit_s``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..deadline import time_limit
from ..models.catalog import ModelsDir
from ..names import NODE_IDS
from ..units import format_bytes, parse_vram_budget
from ..workflow.graph import Graph, load_workflow, parse_workflow
from ..workflow.order import predict_order
from .costmodel import Budget, Hardware
from .extract import workload_from_graph
from .latents import MediaSizes
from .planner import Plan, plan
from .tiled_decode import TiledDecodeFigures
from .workload import Workload

# The ordering stage's signature (workflow.order.predict_order): graph, cached ids, output ids.
OrderFn = Callable[[Graph, frozenset[str], "list[str] | None"], list[str]]


@dataclass(frozen=True)
class Planned:
    """What each stage produced. ``plan`` is None when no budget was given (the caller plans)."""

    graph: Graph
    order: list[str]  # node ids in the predicted execution order, cached nodes left out
    workload: Workload
    plan: Plan | None
    hardware: Hardware
    cached: frozenset[str] = frozenset()  # ids the host serves from its cache (not planned)
    seconds: dict[str, float] = field(default_factory=dict, compare=False)  # wall time per stage run


def plan_workflow(
    workflow: dict[str, Any] | os.PathLike[str],
    budget: Budget | None,
    hardware: Hardware | None = None,
    *,
    models_dir: ModelsDir = None,
    outputs: list[str] | None = None,
    cached: Collection[str] | Callable[[Graph], Collection[str]] = frozenset(),
    order_by: OrderFn = predict_order,
    time_limit_s: float | None = None,
    tiled_decode: TiledDecodeFigures | None = None,
    media: MediaSizes | None = None,
) -> Planned:
    """Plan ``workflow`` (an API prompt or UI workflow, or a Path to one as JSON) under ``budget``.

    ``hardware``: the bus and throughput assumed (default PCIe 4). ``models_dir``: folders to read model
    sizes from. ``outputs``: the output node ids the host will execute, when it knows them. ``cached``:
    the node ids the host will serve from its cache, or a function of the parsed graph that predicts
    them (they are left out of the order). ``order_by``: the ordering stage (the scaling bench compares
    the host's per-step scan). ``time_limit_s``: past it, PlanTimeout (None: no limit). ``tiled_decode``:
    the Tiled VAE Decode's own figures, from the host (tiled_decode.py). ``media``: the host's reader of
    a loaded image's or video's size (latents.MediaSizes).

    Without a budget the pipeline stops after extraction, for callers that plan the workload themselves:
    under several budgets (the planner bench), or from the tiers the components hold at that moment,
    read under the controller's lock.
    """
    hardware = hardware or Hardware.pcie(4)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[stage] = now - clock
        clock = now

    with time_limit(time_limit_s):
        # Only a Path is a file: a string is refused as a workflow, never opened, since the preflight and
        # the controller pass on whatever a client posted as its prompt.
        if isinstance(workflow, os.PathLike):
            graph = load_workflow(Path(workflow))  # names the file in every error
        else:
            graph = parse_workflow(workflow)  # refuses anything but a JSON object
        lap("parse")
        held = frozenset(cached(graph) if callable(cached) else cached)
        order = order_by(graph, held, outputs)
        lap("order")
        workload = workload_from_graph(
            graph, order, models_dir=models_dir, hardware=hardware, tiled_decode=tiled_decode, media=media
        )
        check_stream_budgets(graph, workload)
        lap("extract")
        result = None
        if budget is not None:
            result = plan(workload, budget, hardware)
            lap("plan")
    return Planned(graph, order, workload, result, hardware, held, seconds)


class BudgetRefused(ValueError):
    """A streaming node's VRAM budget the node refuses when it runs; ``node_id`` is the node that computes
    with the model (the Streaming KSampler, or the sampler a Stream Model's model reaches)."""

    def __init__(self, message: str, node_id: str) -> None:
        super().__init__(message)
        self.node_id = node_id


def check_stream_budgets(graph: Graph, workload: Workload) -> None:
    """The streaming nodes' run-time rule (streaming.placement.choose_streaming), applied to the plan: a
    VRAM budget below a model's non-block weights plus one slot for its largest block cannot stream it,
    whatever the activations, and the node refuses it when it runs, so the plan refuses it too (raises
    ValueError naming the node, its input and the least budget). The Streaming KSampler's own budget and a
    Stream Model node's (``Step.streamed``) are checked alike."""
    for step in workload.steps:
        node = graph.nodes.get(step.node_id)
        at = f"node {step.node_id} ({node.class_type if node else step.label})"
        budgets = {cid: (b, f"the Stream Model's input 'vram_budget' (for {at})") for cid, b in step.streamed}
        if node is not None and node.class_type == NODE_IDS["streaming_sampler"]:
            try:
                own = parse_vram_budget(node.inputs.get("vram_budget"))
            except (ValueError, TypeError):  # a link, or a size its own validation refuses
                own = None
            for cid in step.uses if own is not None else ():
                if workload.component(cid).kind == "diffusion_model":
                    budgets[cid] = (own, f"{at} input 'vram_budget'")
        for cid, (budget, where) in sorted(budgets.items()):
            c = workload.component(cid)
            need = c.rest + max(c.blocks, default=0)
            if budget is not None and c.blocks and budget < need:
                raise BudgetRefused(
                    f"{where}: a VRAM budget of {format_bytes(budget)} cannot stream {c.label}: it needs at "
                    f"least {format_bytes(need)} before activations (its non-block weights and one slot for "
                    "its largest block); the node refuses it when it runs: raise vram_budget, or auto",
                    step.node_id,
                )


def graph_workload(
    graph: Graph,
    hardware: Hardware,
    *,
    models_dir: ModelsDir = None,
    outputs: list[str] | None = None,
    tiled_decode: TiledDecodeFigures | None = None,
    media: MediaSizes | None = None,
) -> Workload:
    """The order and extraction stages alone, for a graph already parsed (and changed: the remedies plan
    variants of one workflow), with nothing cached."""
    order = predict_order(graph, frozenset(), outputs)
    return workload_from_graph(
        graph, order, models_dir=models_dir, hardware=hardware, tiled_decode=tiled_decode, media=media
    )
