"""Preflight: plan a queued prompt before it runs and say which node will run out of memory, and the fix.

Two predictions are compared under the device's budget: ComfyUI's own reactive loading (the ``comfyui``
baseline) and Headroom's plan. When ComfyUI's would run out of VRAM, the warning names the first node that
fails and the Headroom node that avoids it; when even Headroom's plan cannot fit, it names the node that
sets the minimum and what would make it fit.

Every figure in a message is one quantity: VRAM held at a node's peak, weights + activations, compared
with the *usable* VRAM (the card's total minus the reserve for the driver and host). A card size appears
only as usable + reserve, and says so. Where activations drive the peak, the message names the latent
(its size and the node that sets it), since a smaller latent is then the cheapest fix.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..deadline import PlanTimeout
from ..models.catalog import ModelsDir
from ..units import format_bytes, format_bytes_up
from ..workflow.graph_types import Graph, Link, WorkflowError
from ..workflow.values import Evaluator
from .baselines import comfyui_reactive
from .costmodel import Budget, Hardware
from .host_advice import host_report, hosts_json, rerun_nodes
from .host_settings import HostSettings
from .latents import MediaSizes
from .pipeline import Planned, plan_workflow
from .planner import Plan, minimum_vram
from .records import PlannedNode, PlannedRun, prompt_key
from .report import plan_json
from .tiled_decode import TiledDecodeFigures
from .timing import time_basis
from .workload import Step, Workload

# Which Headroom node takes over the work of a component kind that does not fit.
FIX_BY_KIND = {
    "diffusion_model": "Streaming KSampler (VRAM offload) in place of the sampler",
    "vae": "Tiled VAE Decode (exact, low VRAM) in place of the VAE decode",
    "text_encoder": "Offload Loader (low VRAM) with text_encoder_residency set to auto",
}
DEFAULT_FIX = "Offload Loader (low VRAM) with residency set to auto"
SIZE_NAMES = ("width", "height")


@dataclass(frozen=True)
class Preflight:
    """The verdict on one prompt under one budget; ``fits`` None means it could not be checked.

    Byte figures are VRAM at a peak, comparable with ``budget_vram`` (usable); ``card_vram`` is the
    card's total (usable + ``reserve``).
    """

    fits: bool | None
    level: str  # ok, warn, error (even Headroom cannot fit), skipped
    message: str
    node: str | None = None  # the node that will fail
    class_type: str | None = None
    fix: str | None = None
    predicted_peak: int | None = None  # at the failing node: weights + activations (the loading it names)
    min_vram: int | None = None  # the least any Headroom plan needs (usable VRAM)
    budget_vram: int | None = None  # usable VRAM
    title: str | None = None  # the failing node's title, when the workflow gives it one
    weights: int | None = None  # predicted_peak's split at the failing node
    activations: int | None = None
    # the latent the message names (node, class_type, title, width, height, frames, batch): the one at
    # the failing node, else at the node that sets the workflow's minimum
    driver: dict[str, Any] | None = None
    card_vram: int | None = None
    reserve: int | None = None
    headroom_peak: int | None = None  # Headroom's plan's VRAM peak, when it fits
    card: str | None = None  # the card's name ("NVIDIA GeForce RTX 4060", "assumed: HEADROOM_ASSUME_VRAM")
    # the host this prompt runs on: its settings, what it will do (both runs) and which settings fit
    # (host_advice.hosts_json's "settings" and "advice", and the repeat run's reloads), for the toast
    host: dict[str, Any] | None = None
    # the card the time assumes, what it counts and its range (timing.time_basis)
    time: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _step_need(workload: Workload, step: Step, depth: int) -> int:
    """The least VRAM ``step`` needs under Headroom (minimum_vram of a one-step workload)."""
    return minimum_vram(Workload(workload.components, (step,)), depth)[0]


def _fix_for(workload: Workload, step: Step) -> str:
    kinds = sorted((workload.component(c) for c in step.uses), key=lambda c: -c.bytes)
    return FIX_BY_KIND.get(kinds[0].kind, DEFAULT_FIX) if kinds else DEFAULT_FIX


def _title(graph: Graph | None, node_id: str) -> str | None:
    node = graph.nodes.get(node_id) if graph is not None else None
    return node.title if node is not None and node.title and node.title != node.class_type else None


def node_name(node_id: str, class_type: str, title: str | None = None) -> str:
    """'KSampler (node 3)', or '"Upscaled" (KSampler, node 3)' when the node has its own title."""
    return f'"{title}" ({class_type}, node {node_id})' if title else f"{class_type} (node {node_id})"


# The inputs that carry a latent or an image: the walk follows only these, so the size of a conditioning
# (CLIPTextEncodeSDXL's width/height) is never taken for the latent's.
LATENT_INPUTS = frozenset(
    {
        "latent_image",
        "latent",
        "samples",
        "image",
        "images",
        "pixels",
        "start_image",
        "end_image",
        "init_image",
    }
)


def latent_driver(graph: Graph | None, node_id: str) -> dict[str, Any] | None:
    """The nearest node upstream of ``node_id``, along latent and image links (breadth first), whose
    width and height are known numbers: the latent (or image) size that sets the node's activations.
    None if there is none (a text encoder's activations come from its text, not from a latent)."""
    if graph is None or node_id not in graph.nodes:
        return None
    values, seen, frontier = Evaluator(graph), {node_id}, [node_id]
    while frontier:
        nxt: list[str] = []
        for nid in frontier:
            inputs = values.live_inputs(nid)
            if nid != node_id:  # the node itself is what needs the memory, not what sets the size
                got = {n: values.input(nid, n) for n in (*SIZE_NAMES, "length", "batch_size") if n in inputs}
                size = {n: v.value for n, v in got.items() if v is not None and v.exact}
                if all(isinstance(size.get(n), (int, float)) for n in SIZE_NAMES):
                    node = graph.nodes[nid]
                    return {
                        "node": nid,
                        "class_type": node.class_type,
                        "title": _title(graph, nid),
                        "width": int(size["width"]),
                        "height": int(size["height"]),
                        "frames": int(size.get("length", 1) or 1),
                        "batch": int(size.get("batch_size", 1) or 1),
                    }
            for name, v in inputs.items():
                if (
                    isinstance(v, Link)
                    and name in LATENT_INPUTS
                    and v.node in graph.nodes
                    and v.node not in seen
                ):
                    seen.add(v.node)
                    nxt.append(v.node)
        frontier = nxt
    return None


def latent_size(driver: dict[str, Any]) -> str:
    """'2048×2048', with frames and batch when more than 1."""
    size = f"{driver['width']}×{driver['height']}"
    if driver.get("frames", 1) > 1:
        size += f"×{driver['frames']} frames"
    if driver.get("batch", 1) > 1:
        size += f", batch {driver['batch']}"
    return size


def describe_latent(driver: dict[str, Any]) -> str:
    """'the 2048×2048 latent set by EmptySD3LatentImage (node 27)'."""
    where = node_name(driver["node"], driver["class_type"], driver.get("title"))
    return f"the {latent_size(driver)} latent set by {where}"


def _split(weights: int, activations: int, driver: dict[str, Any] | None) -> str:
    """'22.17 GiB of weights + 2.16 GiB of activations for the 2048×2048 latent set by ...'."""
    acts = f"{format_bytes(activations, 'GiB')} of activations"
    if driver is not None and activations > 0:
        acts += f" for {describe_latent(driver)}"
    return f"{format_bytes(weights, 'GiB')} of weights + {acts}"


def article(figure: str) -> str:
    """'a 4.00 GiB', 'an 8.00 GiB', 'an 11.00 GiB': the article a figure takes when read aloud (M12)."""
    whole = figure.split(".")[0].split(" ")[0]
    spoken_vowel = (
        whole.startswith("8") or whole in ("11", "18") or (len(whole) in (5, 6) and whole[:2] in ("11", "18"))
    )
    return f"{'an' if spoken_vowel else 'a'} {figure}"


def _card(budget: Budget) -> str:
    """'a 4.00 GiB card leaves 3.50 GiB usable (0.50 GiB is kept for the driver and host)'."""
    card = budget.vram + budget.reserve
    if not budget.reserve:
        return f"{format_bytes(budget.vram, 'GiB')} of VRAM is usable"
    return (
        f"{article(format_bytes(card, 'GiB'))} card leaves {format_bytes(budget.vram, 'GiB')} usable "
        f"({format_bytes(budget.reserve, 'GiB')} is kept for the driver and host)"
    )


def _advice(result: Plan, activations: int, weights: int, driver: dict[str, Any] | None) -> str:
    """What would make an infeasible plan fit, cheapest first: a smaller latent when activations drive
    the peak, then a card (sized as usable + reserve, so it compares with the card the user has)."""
    budget = result.budget
    card = f"a card with at least {format_bytes_up(budget.card_for(result.min_vram))} of VRAM"
    reserve = budget.card_for(0)
    if reserve:
        usable = format_bytes(result.min_vram, "GiB")
        card += f" ({usable} usable + the {format_bytes(reserve, 'GiB')} reserve)"
    smaller = (
        f"a smaller latent at {node_name(driver['node'], driver['class_type'], driver.get('title'))} "
        f"(now {latent_size(driver)})"
        if driver is not None
        else "a smaller resolution, fewer frames or a smaller batch at that node"
    )
    advice = [smaller, card] if activations > weights else [card]
    if driver is not None and activations <= weights:
        advice.append(smaller)
    if "streaming" not in result.bottleneck:
        advice.append("fp8 weights for the models that node uses")
    short = max(0, result.min_vram - budget.vram)
    if 0 < short <= budget.reserve:
        advice.append(
            f"--reserve below {format_bytes(budget.reserve - short, 'GiB')} if nothing else uses the GPU"
        )
    return "; or ".join(advice)


def check(workload: Workload, result: Plan, graph: Graph | None = None) -> Preflight:
    """Preflight from a workload and its Headroom plan (both under the same budget); ``graph`` (the
    parsed prompt) lets the messages give node titles and the latent that sizes the activations."""
    budget = result.budget
    stock = comfyui_reactive(workload, budget, result.hardware)
    base: dict[str, Any] = {
        "min_vram": result.min_vram,
        "budget_vram": budget.vram,
        "card_vram": budget.vram + budget.reserve,
        "reserve": budget.reserve,
    }
    if not result.feasible:
        depth = result.prefetch_depth
        needs = {s.node_id: _step_need(workload, s, depth) for s in workload.steps}
        step = next((s for s in workload.steps if needs[s.node_id] > budget.vram), None)
        if step is None:  # the minimum's own step, by its description; a fallback only
            return Preflight(
                False,
                "error",
                f"this workflow will run out of VRAM even with Headroom: it needs at least "
                f"{format_bytes(result.min_vram, 'GiB')} at {result.bottleneck}; {_card(budget)}.",
                fix=_advice(result, 0, result.min_vram, None),
                **base,
            )
        need, title = needs[step.node_id], _title(graph, step.node_id)
        acts = min(step.activation_min or 0, need)
        driver = latent_driver(graph, step.node_id) if acts else None
        where = node_name(step.node_id, step.label, title)
        # the advice is about the step that sets the workflow's minimum, which may come later
        worst = max(workload.steps, key=lambda s: needs[s.node_id])
        whole, named = "", driver
        if worst is step:
            fix = _advice(result, acts, need - acts, driver)
        else:
            w_acts = min(worst.activation_min or 0, needs[worst.node_id])
            w_driver = latent_driver(graph, worst.node_id) if w_acts else None
            fix = _advice(result, w_acts, needs[worst.node_id] - w_acts, w_driver)
            named = driver or w_driver  # the latent the advice names
            other = node_name(worst.node_id, worst.label, _title(graph, worst.node_id))
            whole = (
                f" The whole workflow needs {format_bytes(result.min_vram, 'GiB')}, at {other}: "
                f"{_split(needs[worst.node_id] - w_acts, w_acts, w_driver)}."
            )
        return Preflight(
            False,
            "error",
            f"{where} will run out of VRAM even with Headroom: at its least it holds "
            f"{format_bytes(need, 'GiB')} "
            f"({_split(need - acts, acts, driver)}), and {_card(budget)}.{whole} To fit: {fix}",
            node=step.node_id,
            class_type=step.label,
            fix=fix,
            predicted_peak=need,
            title=title,
            weights=need - acts,
            activations=acts,
            driver=named,
            **base,
        )
    headroom_peak = max((s.vram_peak for s in result.steps), default=0)
    if stock.fits:
        return Preflight(
            True,
            "ok",
            f"fits: Headroom's plan peaks at {format_bytes(headroom_peak, 'GiB')}; {_card(budget)}",
            predicted_peak=headroom_peak,
            headroom_peak=headroom_peak,
            **base,
        )
    step = next((s for s in workload.steps if stock.oom_step == f"node {s.node_id} ({s.label})"), None)
    if step is None:  # the baseline names steps this way; guard against a wording change all the same
        return Preflight(
            False,
            "warn",
            f"{stock.oom_step} will run out of VRAM with ComfyUI's own loading",
            headroom_peak=headroom_peak,
            **base,
        )
    weights = sum(workload.component(c).bytes for c in step.uses)
    peak, title = weights + step.activation, _title(graph, step.node_id)
    driver = latent_driver(graph, step.node_id) if step.activation else None
    fix = _fix_for(workload, step)
    return Preflight(
        False,
        "warn",
        f"{node_name(step.node_id, step.label, title)} will run out of VRAM with ComfyUI's own loading: "
        f"it would hold {format_bytes(peak, 'GiB')} at once ({_split(weights, step.activation, driver)}), "
        f"and "
        f"{_card(budget)}. Fix: use {fix}; Headroom's plan then peaks at "
        f"{format_bytes(headroom_peak, 'GiB')}.",
        node=step.node_id,
        class_type=step.label,
        fix=fix,
        predicted_peak=peak,
        title=title,
        weights=weights,
        activations=step.activation,
        driver=driver,
        headroom_peak=headroom_peak,
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
    models_dir: ModelsDir = None,
    outputs: list[str] | None = None,
    time_limit_s: float | None = None,
    card: str | None = None,
    host: HostSettings | None = None,
    tiled_decode: TiledDecodeFigures | None = None,
    media: MediaSizes | None = None,
) -> tuple[PlannedRun | None, Preflight]:
    """Parse, order, extract and plan an API prompt (what POST /prompt carries); never raises on bad input.

    ``outputs``: the output node ids the host will execute, when it knows them (it knows every node
    class's OUTPUT_NODE; the node-type table only knows the classes it lists). ``time_limit_s``: past
    it, planning stops and the preflight says so (the prompt runs unplanned). ``card``: the card's name,
    passed on in the verdict for the timeline's header. ``host``: the running host's settings (None: the
    2026 host's defaults), predicted and advised in the verdict's ``host``. ``tiled_decode``: the Tiled
    VAE Decode's own figures, from the host (tiled_decode.py). ``media``: the host's reader of a loaded
    image's or video's size (latents.MediaSizes).
    """
    try:
        planned = plan_workflow(
            prompt,
            budget,
            hardware,
            models_dir=models_dir,
            outputs=outputs,
            time_limit_s=time_limit_s,
            tiled_decode=tiled_decode,
            media=media,
        )
    except (WorkflowError, ValueError, KeyError, TypeError) as exc:
        return None, Preflight(None, "skipped", f"not planned: {exc}", budget_vram=budget.vram)
    except PlanTimeout as exc:
        message = f"not planned: {exc} ({len(prompt)} nodes); the prompt runs as usual"
        return None, Preflight(None, "skipped", message, budget_vram=budget.vram)
    workload, result = planned.workload, planned.plan
    assert result is not None  # planned under a budget
    verdict = replace(check(workload, result, planned.graph), card=card)
    verdict = replace(
        verdict, host=host_verdict(planned, budget, host or HostSettings()), time=time_basis(result, workload)
    )
    return planned_run(workload, result, verdict), verdict


def host_verdict(planned: Planned, budget: Budget, settings: HostSettings) -> dict[str, Any] | None:
    """What the host will do and which of its settings fit (host_advice), for the toast and the Monitor;
    None (and the toast goes without it) where the model cannot price this workload."""
    try:
        rerun = rerun_nodes(planned.graph, planned.order)
        hosts, advice = host_report(planned.workload, budget, planned.hardware, settings, rerun)
    except (ValueError, KeyError, ZeroDivisionError):
        return None
    data = hosts_json(hosts, advice, settings)
    paging = hosts["comfyui_2026"]
    return {
        "settings": data["settings"]["text"],
        "flags": data["settings"]["flags"],
        "advice": [a["line"] for a in data["advice"]],
        # the host's own flags worth changing here (what the toast offers): a "use" line of a flag
        "suggest": [
            a["line"] for a in data["advice"] if a["verdict"] == "use" and a["setting"].startswith("--")
        ],
        "reloads": getattr(paging, "reloads", {}),
        "repeat_s": getattr(paging, "runs_s", [0.0, 0.0])[-1],
    }


class PlanCache:
    """Plans by prompt_key and ``context`` (the budget), so a plan made when the prompt was queued serves
    its run; bounded and thread-safe. ``get`` returns the stored plan, waits for one being made, or makes
    it with ``planner(prompt)``.
    """

    def __init__(
        self, planner: Callable[[dict[str, Any]], tuple[PlannedRun | None, Preflight]], size: int = 64
    ):
        self.planner, self.size = planner, size
        self._items: OrderedDict[str, Future[tuple[PlannedRun | None, Preflight]]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(prompt: dict[str, Any], context: Any = None) -> str:
        return f"{prompt_key(prompt)}|{context!r}"

    def _future(self, key: str) -> tuple[Future[tuple[PlannedRun | None, Preflight]], bool]:
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
