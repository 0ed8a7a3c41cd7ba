"""Preflight: plan a queued prompt before it runs and say which node will run out of memory, and the fix.

Two predictions are compared under the device's budget: ComfyUI's own reactive loading (the ``comfyui``
baseline) and Headroom's plan. When ComfyUI's would run out of VRAM, the warning names the first node that
fails and the Headroom node that avoids it; when even Headroom's plan cannot fit, it names the node that
sets the minimum and what would make it fit (report.fit_advice).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..deadline import PlanTimeout
from ..units import format_bytes
from ..workflow.graph import WorkflowError
from .baselines import comfyui_reactive
from .costmodel import Budget, Hardware
from .pipeline import plan_workflow
from .planner import Plan, minimum_vram
from .records import PlannedNode, PlannedRun, prompt_key
from .report import fit_advice, plan_json
from .workload import Step, Workload

# Which Headroom node takes over the work of a component kind that does not fit.
FIX_BY_KIND = {
    "diffusion_model": "Layer-Streaming DiT Sampler (Headroom) in place of the sampler",
    "vae": "Tiled VAE Decode (Headroom) in place of the VAE decode",
    "text_encoder": "Offload Loader (Headroom) with text_encoder_residency set to auto",
}
DEFAULT_FIX = "Offload Loader (Headroom) with residency set to auto"


@dataclass(frozen=True)
class Preflight:
    """The verdict on one prompt under one budget; ``fits`` None means it could not be checked."""

    fits: bool | None
    level: str  # ok, warn, error (even Headroom cannot fit), skipped
    message: str
    node: str | None = None  # the node that will fail
    class_type: str | None = None
    fix: str | None = None
    predicted_peak: int | None = None  # ComfyUI's own loading: weights + activations at the failing node
    min_vram: int | None = None  # the least any Headroom plan needs
    budget_vram: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _step_need(workload: Workload, step: Step, depth: int) -> int:
    """The least VRAM ``step`` needs under Headroom (minimum_vram of a one-step workload)."""
    return minimum_vram(Workload(workload.components, (step,)), depth)[0]


def _fix_for(workload: Workload, step: Step) -> str:
    kinds = sorted((workload.component(c) for c in step.uses), key=lambda c: -c.bytes)
    return FIX_BY_KIND.get(kinds[0].kind, DEFAULT_FIX) if kinds else DEFAULT_FIX


def check(workload: Workload, result: Plan) -> Preflight:
    """Preflight from a workload and its Headroom plan (both under the same budget)."""
    budget = result.budget
    stock = comfyui_reactive(workload, budget, result.hardware)
    base = {"min_vram": result.min_vram, "budget_vram": budget.vram}
    if not result.feasible:
        depth = result.prefetch_depth
        step = next((s for s in workload.steps if _step_need(workload, s, depth) > budget.vram), None)
        where = f"node {step.node_id} ({step.label})" if step else result.bottleneck
        need = _step_need(workload, step, depth) if step else result.min_vram
        return Preflight(
            False,
            "error",
            f"{where} will run out of VRAM even with Headroom: it needs at least {format_bytes(need)} and "
            f"{format_bytes(budget.vram)} is usable; the workflow needs {format_bytes(result.min_vram)} "
            f"(set by {result.bottleneck}). To fit: {fit_advice(result)}",
            node=step.node_id if step else None,
            class_type=step.label if step else None,
            fix=fit_advice(result),
            predicted_peak=need,
            **base,
        )
    if stock.fits:
        peak = max((s.vram_peak for s in result.steps), default=0)
        return Preflight(
            True, "ok", f"fits: predicted VRAM peak {format_bytes(peak)}", predicted_peak=peak, **base
        )
    step = next((s for s in workload.steps if stock.oom_step == f"node {s.node_id} ({s.label})"), None)
    if step is None:  # the baseline names steps this way; guard against a wording change all the same
        return Preflight(
            False, "warn", f"{stock.oom_step} will run out of VRAM with ComfyUI's own loading", **base
        )
    peak = sum(workload.component(c).bytes for c in step.uses) + step.activation
    fix = _fix_for(workload, step)
    return Preflight(
        False,
        "warn",
        f"node {step.node_id} ({step.label}) will run out of VRAM with ComfyUI's own loading: it needs "
        f"{format_bytes(peak)} and {format_bytes(budget.vram)} is usable. Fix: use {fix}; Headroom's plan "
        f"fits in {format_bytes(max(s.vram_peak for s in result.steps))}.",
        node=step.node_id,
        class_type=step.label,
        fix=fix,
        predicted_peak=peak,
        **base,
    )


def planned_run(workload: Workload, result: Plan, preflight: Preflight) -> PlannedRun:
    nodes = tuple(
        PlannedNode(
            node_id=sp.step.node_id,
            class_type=sp.step.label,
            order=n,
            vram_peak=sp.vram_peak,
            wall_s=sp.wall_s,
            placements={
                workload.component(cid).label: p.label
                + (f" {p.resident_blocks}/{p.total_blocks}" if p.total_blocks else "")
                for cid, p in sp.placements.items()
            },
            reasons={workload.component(cid).label: p.reason for cid, p in sp.placements.items()},
        )
        for n, sp in enumerate(result.steps, 1)
    )
    if not result.feasible:  # no placements to show, but the predicted order still is
        nodes = tuple(
            PlannedNode(
                s.node_id, s.label, n, _step_need(workload, s, result.prefetch_depth), s.compute_s, {}
            )
            for n, s in enumerate(workload.steps, 1)
        )
    return PlannedRun(
        fits=preflight.fits,
        nodes=nodes,
        budget_vram=result.budget.vram,
        min_vram=result.min_vram,
        plan=plan_json(result, workload, {}),
        preflight=preflight.as_dict(),
    )


def plan_prompt(
    prompt: dict[str, Any],
    budget: Budget,
    hardware: Hardware | None = None,
    models_dir: Path | Sequence[Path] | None = None,
    outputs: list[str] | None = None,
    time_limit_s: float | None = None,
) -> tuple[PlannedRun | None, Preflight]:
    """Parse, order, extract and plan an API prompt (what POST /prompt carries); never raises on bad input.

    ``outputs``: the output node ids the host will execute, when it knows them (it knows every node
    class's OUTPUT_NODE; the node-type table only knows the classes it lists). ``time_limit_s``: past
    it, planning stops and the preflight says so (the prompt runs unplanned).
    """
    try:
        planned = plan_workflow(
            prompt, budget, hardware, models_dir=models_dir, outputs=outputs, time_limit_s=time_limit_s
        )
    except (WorkflowError, ValueError, KeyError, TypeError) as exc:
        return None, Preflight(None, "skipped", f"not planned: {exc}", budget_vram=budget.vram)
    except PlanTimeout as exc:
        message = f"not planned: {exc} ({len(prompt)} nodes); the prompt runs as usual"
        return None, Preflight(None, "skipped", message, budget_vram=budget.vram)
    workload, result = planned.workload, planned.plan
    assert result is not None  # planned under a budget
    verdict = check(workload, result)
    return planned_run(workload, result, verdict), verdict


class PlanCache:
    """Plans by prompt_key and ``context`` (the budget), so a plan made when the prompt was queued serves
    its run; bounded and thread-safe. ``get`` returns the stored plan, waits for one being made, or makes
    it with ``planner(prompt)``.
    """

    def __init__(
        self, planner: Callable[[dict[str, Any]], tuple[PlannedRun | None, Preflight]], size: int = 64
    ):
        self.planner, self.size = planner, size
        self._items: OrderedDict[str, Future] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(prompt: dict[str, Any], context: Any = None) -> str:
        return f"{prompt_key(prompt)}|{context!r}"

    def _future(self, key: str) -> tuple[Future, bool]:
        with self._lock:
            future = self._items.get(key)
            if future is not None:
                self._items.move_to_end(key)
                return future, False
            future = Future()
            self._items[key] = future
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return future, True

    def get(self, prompt: dict[str, Any], context: Any = None) -> tuple[PlannedRun | None, Preflight]:
        future, mine = self._future(self.key(prompt, context))
        if mine:
            try:
                future.set_result(self.planner(prompt))
            except BaseException as exc:
                future.set_exception(exc)
        return future.result()

    def peek(self, key: str) -> tuple[PlannedRun | None, Preflight] | None:
        """The finished plan stored under ``key`` (see ``key``), or None."""
        with self._lock:
            future = self._items.get(key)
        return future.result() if future is not None and future.done() and not future.exception() else None
