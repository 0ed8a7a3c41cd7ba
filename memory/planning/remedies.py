"""Make it fit: when a workflow does not fit, up to three concrete changes, each planned again.

1. ``latent``: the largest latent that fits with the models as they are, found by re-planning (bisection
   on the batch, then the frames, else a uniform scale of width and height rounded to the multiple the
   latent node accepts). The node and inputs are those that set the latent of the node that needs the
   most (preflight.latent_driver); an input fed by a link is not changed (the note says so).
2. ``precision``: a lower-precision file of the same model (fp8 from the catalog, or an fp8 or GGUF file
   in the models folder), with its size and, where the templates publish one, its download link.
3. ``node``: the Headroom node that does the work of the node that runs out of memory.

"Fits" is the verdict's own question: Headroom's plan when even it does not fit (an ``error``
verdict), ComfyUI's own loading when only that runs out (a ``warn`` verdict). Each remedy carries the
changes that make it (``{node, input, value}``; ``op`` "replace" swaps a node's class keeping its
links, "insert" puts a node on an input), the predicted VRAM peak and wall time of its plan.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..deadline import PlanTimeout, time_limit
from ..models.catalog import ModelsDir, catalog, catalog_name, model_roots, normalise_name
from ..names import NODE_IDS
from ..units import format_bytes
from ..workflow.graph_types import Graph, Link, Node
from .baselines import comfyui_reactive
from .costmodel import Budget, Hardware
from .latents import MediaSizes
from .pipeline import graph_workload, plan_workflow
from .planner import Plan, minimum_vram, plan
from .preflight import latent_driver, latent_size, node_name
from .tiled_decode import TiledDecodeFigures
from .workload import Step, Workload

URLS_PATH = Path(__file__).resolve().parent.parent / "data" / "model_urls.json"
MAX_REMEDIES = 3
# The width/height step of the latent nodes that set a size (their INPUT_TYPES); others: 16, which every
# current family accepts (SD1.x/SDXL take multiples of 8).
SIZE_STEP = {"EmptyLatentImage": 8, "EmptySD3LatentImage": 16, "EmptyHunyuanLatentVideo": 16}
DEFAULT_SIZE_STEP = 16
FRAME_STEP = 4  # video latents: 4k + 1 frames (the host's temporal compression)
SIZE_INPUTS = ("width", "height")
# Dtype and quantisation tokens in a file name: what differs between two files of one model.
_PRECISION = re.compile(r"fp8|fp16|bf16|fp32|f16|f32|e4m3fn|e5m2|scaled|mixed|q\d(k[msl]?|[01])?|k[msl]")
# What each kind of component's work moves to (the verdict's fix, made concrete).
SAMPLERS = frozenset({"KSampler"})  # the Streaming KSampler takes KSampler's inputs
VAE_DECODERS = frozenset({"VAEDecode", "VAEDecodeTiled"})
HEADROOM_DEFAULTS: dict[str, dict[str, Any]] = {
    NODE_IDS["streaming_sampler"]: {"vram_budget": "auto", "prefetch": 1, "resident_blocks": -1},
    NODE_IDS["tiled_vae_decode"]: {"vram_budget": "auto", "mode": "exact"},
    NODE_IDS["stream_model"]: {"vram_budget": "auto", "prefetch": 1, "resident_blocks": -1},
    NODE_IDS["stream_clip"]: {"vram_budget": "auto", "prefetch": 1, "resident_blocks": -1},
}
DISPLAY = {
    NODE_IDS["streaming_sampler"]: "Streaming KSampler",
    NODE_IDS["tiled_vae_decode"]: "Tiled VAE Decode",
    NODE_IDS["stream_model"]: "Stream Model",
    NODE_IDS["stream_clip"]: "Stream CLIP",
}


@dataclass(frozen=True)
class Change:
    """One edit of the workflow: set ``input`` of ``node`` to ``value`` (op "set"); swap the node's class
    for ``value`` keeping its links (op "replace"); put a new node of class ``value`` on ``input`` (op
    "insert": it takes what fed that input and feeds it)."""

    node: str
    input: str | None
    value: Any
    op: str = "set"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Remedy:
    kind: str  # latent, precision, node
    text: str
    changes: tuple[Change, ...]
    vram_peak: int | None
    wall_s: float | None
    fits: bool
    size: int | None = None  # precision: the file's bytes
    url: str | None = None  # precision: where the catalog's file is published
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["changes"] = [c.as_dict() for c in self.changes]
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class Outcome:
    fits: bool
    vram_peak: int | None
    wall_s: float | None


def apply_changes(graph: Graph, changes: Sequence[Change]) -> Graph:
    """A copy of ``graph`` with ``changes`` made (the original is left as it was)."""
    nodes = dict(graph.nodes)
    for n, change in enumerate(changes):
        node = nodes[change.node]
        if change.op == "set":
            nodes[change.node] = dataclasses.replace(
                node, inputs={**node.inputs, str(change.input): change.value}
            )
        elif change.op == "replace":
            extra = HEADROOM_DEFAULTS.get(str(change.value), {})
            inputs = {**extra, **node.inputs}
            nodes[change.node] = dataclasses.replace(node, class_type=str(change.value), inputs=inputs)
        elif change.op == "insert":
            new_id = f"{change.node}.headroom{n}"
            source = node.inputs[str(change.input)]
            feed = {"model" if "Model" in str(change.value) else "clip": source}
            nodes[new_id] = Node(
                new_id, str(change.value), {**feed, **HEADROOM_DEFAULTS.get(str(change.value), {})}
            )
            nodes[change.node] = dataclasses.replace(
                node, inputs={**node.inputs, str(change.input): Link(new_id, 0)}
            )
        else:
            raise ValueError(f"unknown change {change.op!r}")
    return Graph(nodes, graph.format, [])


class Replanner:
    """Plans variants of one workflow under one budget, and says whether each fits the verdict's way."""

    def __init__(
        self,
        graph: Graph,
        budget: Budget,
        hardware: Hardware,
        *,
        headroom: bool = True,
        models_dir: ModelsDir = None,
        outputs: list[str] | None = None,
        tiled_decode: TiledDecodeFigures | None = None,
        media: MediaSizes | None = None,
    ) -> None:
        self.graph, self.budget, self.hardware, self.headroom = graph, budget, hardware, headroom
        self.media = media
        self.models_dir, self.outputs, self.tiled_decode = models_dir, outputs, tiled_decode
        self.count = 0  # plans made, for the tests and the bench

    def workload(self, graph: Graph) -> Workload:
        return graph_workload(
            graph, self.hardware, models_dir=self.models_dir, outputs=self.outputs,
            tiled_decode=self.tiled_decode, media=self.media,
        )  # fmt: skip

    def outcome(self, changes: Sequence[Change]) -> Outcome:
        self.count += 1
        workload = self.workload(apply_changes(self.graph, changes))
        result = plan(workload, self.budget, self.hardware)
        if not result.feasible:
            return Outcome(False, None, None)
        peak = max((s.vram_peak for s in result.steps), default=0)
        if self.headroom:
            return Outcome(True, peak, result.wall_s)
        # ComfyUI's loading: the baseline says whether it runs out and its time, not a peak (it loads
        # what fits and casts the rest per operation, so its peak is the budget it fills)
        stock = comfyui_reactive(workload, self.budget, self.hardware)
        return Outcome(stock.oom_step is None, None, stock.wall_s)


def _needs(workload: Workload, result: Plan) -> dict[str, int]:
    depth = result.prefetch_depth
    return {s.node_id: minimum_vram(Workload(workload.components, (s,)), depth)[0] for s in workload.steps}


def _worst(workload: Workload, result: Plan, headroom: bool) -> Step | None:
    """The node the remedies are about: the one needing the most under Headroom, else the first node
    ComfyUI's own loading runs out at."""
    if headroom:
        needs = _needs(workload, result)
        return max(workload.steps, key=lambda s: needs[s.node_id], default=None)
    stock = comfyui_reactive(workload, result.budget, result.hardware)
    return next((s for s in workload.steps if stock.oom_step == f"node {s.node_id} ({s.label})"), None)


# --- 1. the latent -------------------------------------------------------------------------------


def _largest(lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
    """The largest k in [lo, hi] with fits(k), assuming fits is monotone (smaller fits more); None if none."""
    if hi < lo or not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _latent(rp: Replanner, driver: dict[str, Any]) -> Remedy | None:
    node = rp.graph.nodes[driver["node"]]
    const = {name for name, v in node.inputs.items() if not isinstance(v, Link)}
    notes: list[str] = []
    width, height, frames, batch = driver["width"], driver["height"], driver["frames"], driver["batch"]
    base: list[Change] = []
    tried: dict[tuple[Change, ...], Outcome] = {}

    def outcome(changes: list[Change]) -> Outcome:
        key = tuple(changes)
        if key not in tried:
            tried[key] = rp.outcome(changes)
        return tried[key]

    def fits(changes: list[Change]) -> bool:
        return outcome(changes).fits

    if batch > 1 and "batch_size" in const:
        best = _largest(1, batch - 1, lambda b: fits([Change(node.id, "batch_size", b)]))
        if best is not None:
            return _latent_remedy(driver, {"batch": best}, [Change(node.id, "batch_size", best)], outcome)
        base = [Change(node.id, "batch_size", 1)]
        batch = 1
    # fewer frames, or a smaller picture: whichever keeps the larger latent
    options: list[tuple[int, dict[str, int], list[Change]]] = []
    if frames > 1 and "length" in const:
        top = (frames - 1) // FRAME_STEP
        k = _largest(0, top - 1, lambda k: fits([*base, Change(node.id, "length", 1 + FRAME_STEP * k)]))
        if k is not None:
            f = 1 + FRAME_STEP * k
            options.append((width * height * f, {"frames": f}, [*base, Change(node.id, "length", f)]))
    if all(n in const for n in SIZE_INPUTS):
        step = SIZE_STEP.get(node.class_type, DEFAULT_SIZE_STEP)
        top = max(width, height) // step

        def sized(k: int) -> list[Change]:
            w, h = (
                _scaled(width, k * step / max(width, height), step),
                _scaled(height, k * step / max(width, height), step),
            )
            return [*base, Change(node.id, "width", w), Change(node.id, "height", h)]

        k = _largest(1, top - 1, lambda k: fits(sized(k)))
        if k is not None:
            changes = sized(k)
            w, h = changes[-2].value, changes[-1].value
            options.append((w * h * frames, {"width": w, "height": h}, changes))
    else:
        notes.append(f"the width and height of node {node.id} come from a link: not changed here")
    if not options:
        if base and fits(base):
            return _latent_remedy(driver, {"batch": 1}, base, outcome)
        return None
    _, new, changes = max(options, key=lambda o: o[0])
    if base:
        new["batch"] = 1
    return _latent_remedy(driver, new, changes, outcome, tuple(notes))


def _scaled(side: int, ratio: float, step: int) -> int:
    return max(step, int(side * ratio) // step * step)


def _latent_remedy(
    driver: dict[str, Any],
    new: dict[str, int],
    changes: list[Change],
    outcome: Callable[[list[Change]], Outcome],
    notes: tuple[str, ...] = (),
) -> Remedy:
    after = {**driver, **new}
    got = outcome(changes)
    where = node_name(driver["node"], driver["class_type"], driver.get("title"))
    text = f"Make the latent {latent_size(after)} at {where} (now {latent_size(driver)}): {_figures(got)}"
    return Remedy("latent", text, tuple(changes), got.vram_peak, got.wall_s, got.fits, notes=notes)


def _figures(got: Outcome) -> str:
    if not got.fits:
        return "still does not fit"
    if got.vram_peak is None:  # planned as ComfyUI loads, which has no peak of its own
        wall = f", about {_seconds(got.wall_s)}" if got.wall_s else ""
        return f"fits with ComfyUI's own loading{wall}"
    peak = format_bytes(got.vram_peak or 0, "GiB")
    wall = f", about {_seconds(got.wall_s)}" if got.wall_s is not None and got.wall_s > 0 else ""
    return f"fits, peak {peak}{wall}"


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


# --- 2. a lower-precision file -------------------------------------------------------------------


@functools.cache
def _urls() -> dict[str, str]:
    try:
        with URLS_PATH.open(encoding="utf-8") as f:
            data: dict[str, str] = json.load(f)["urls"]
            return data
    except (OSError, ValueError, KeyError):
        return {}


def model_url(file_name: str) -> str | None:
    """Where the official templates download ``file_name`` from, if they name it."""
    return _urls().get(file_name)


def precision_stem(file_name: str) -> str:
    """The model a file holds, whatever its precision: 'wan22t2vhighnoise14b' for both fp16 and fp8."""
    return _PRECISION.sub("", normalise_name(file_name))


def _catalog_bytes(name: str, kind: str) -> tuple[str, int] | None:
    entries = catalog().get(name) or []
    for entry in entries:
        parts = [c["bytes"] for c in entry["components"] if c["kind"] == kind]
        if parts:
            return entry["directory"], sum(parts)
    return None


def smaller_files(file_name: str, kind: str, models_dir: ModelsDir) -> list[tuple[str, int, str]]:
    """Files of the same model at a lower precision, smallest last: (name, bytes, where: "catalog" or
    "folder"), from the catalog (same folder, fewer bytes) and the models folders (.gguf or fp8)."""
    stem = precision_stem(file_name)
    known = catalog_name(file_name)
    now = _catalog_bytes(known, kind) if known else None
    found: dict[str, tuple[str, int, str]] = {}
    if now is not None:
        folder, size = now
        for name in catalog():
            got = _catalog_bytes(name, kind)
            if (
                name != known
                and got
                and got[0] == folder
                and got[1] < size * 0.75
                and precision_stem(name) == stem
            ):
                found[name] = (name, got[1], "catalog")
    for root in model_roots(models_dir):
        for sub in ("diffusion_models", "unet", "text_encoders", "clip", "checkpoints"):
            folder_path = root / sub
            if not folder_path.is_dir():
                continue
            for path in folder_path.iterdir():
                if path.name == file_name or precision_stem(path.name) != stem or not path.is_file():
                    continue
                size = path.stat().st_size
                if now is None or size < now[1] * 0.75:
                    found[path.name] = (path.name, size, "folder")
    return sorted(found.values(), key=lambda f: -f[1])


def _precision(rp: Replanner, step: Step, workload: Workload) -> Remedy | None:
    """Every file of the kind that weighs most at ``step`` swapped for its largest lower-precision
    sibling (Wan 2.2's two experts both, else the second still does not fit)."""
    kinds = sorted(
        {workload.component(c).kind for c in step.uses} & {"diffusion_model", "text_encoder"},
        key=lambda k: -max(workload.component(c).bytes for c in step.uses if workload.component(c).kind == k),
    )
    for kind in kinds:
        changes: list[Change] = []
        said: list[str] = []
        size_total, urls = 0, []
        for comp in workload.components:
            node_id, input_name, _ = comp.id.rsplit(":", 2)
            node = rp.graph.nodes.get(node_id)
            file_name = node.inputs.get(input_name) if node is not None else None
            if comp.kind != kind or node is None or not isinstance(file_name, str):
                continue
            found = smaller_files(file_name, kind, rp.models_dir)
            if not found or any(c.node == node_id and c.input == input_name for c in changes):
                continue
            name, size, where = found[0]
            gguf = name.lower().endswith(".gguf")
            if gguf and not node.class_type.endswith("GGUF"):
                changes.append(Change(node_id, None, node.class_type + "GGUF", "replace"))
            changes.append(Change(node_id, input_name, name))
            url = model_url(name) if where == "catalog" else None
            urls.append(url)
            place = (
                "in your models folder"
                if where == "folder"
                else (f"download: {url}" if url else "download it")
            )
            loader = ", with the GGUF loader (city96/ComfyUI-GGUF)" if gguf else ""
            said.append(
                f"{name} ({format_bytes(size, 'GiB')}, {place}) in place of {file_name} at "
                f"{node_name(node_id, node.class_type, None)}{loader}"
            )
            size_total += size
        if not changes:
            continue
        got = rp.outcome(changes)
        if not got.fits:
            continue
        text = f"Load {'; and '.join(said)}: {_figures(got)}"
        url = next((u for u in urls if u), None)
        return Remedy("precision", text, tuple(changes), got.vram_peak, got.wall_s, True, size_total, url)
    return None


# --- 3. the Headroom node ------------------------------------------------------------------------


def _node_changes(graph: Graph, step: Step, workload: Workload) -> list[Change]:
    node = graph.nodes[step.node_id]
    kinds = {workload.component(c).kind for c in step.uses}
    if node.class_type in SAMPLERS:
        return [Change(node.id, None, NODE_IDS["streaming_sampler"], "replace")]
    if node.class_type in VAE_DECODERS:
        return [Change(node.id, None, NODE_IDS["tiled_vae_decode"], "replace")]
    if "diffusion_model" in kinds and isinstance(node.inputs.get("model"), Link):
        return [Change(node.id, "model", NODE_IDS["stream_model"], "insert")]
    if "text_encoder" in kinds and isinstance(node.inputs.get("clip"), Link):
        return [Change(node.id, "clip", NODE_IDS["stream_clip"], "insert")]
    return []


def _node(rp: Replanner, step: Step, workload: Workload) -> Remedy | None:
    # every node of the class that runs out (Wan 2.2's two samplers both), in the order they run
    changes = [
        c
        for s in workload.steps
        if rp.graph.nodes[s.node_id].class_type == rp.graph.nodes[step.node_id].class_type
        for c in _node_changes(rp.graph, s, workload)
    ]
    if not changes:
        return None
    got = rp.outcome(changes)
    if not got.fits:
        return None
    change, node = changes[0], rp.graph.nodes[step.node_id]
    name = DISPLAY.get(str(change.value), str(change.value))
    where = node_name(node.id, node.class_type, node.title if node.title != node.class_type else None)
    others = (
        f" and {len(changes) - 1} more {node.class_type} node{'s' if len(changes) > 2 else ''}"
        if len(changes) > 1
        else ""
    )
    if change.op == "replace":
        what = f"Use {name} in place of {where}{others}"
    else:
        what = f"Put {name} on the {change.input} input of {where}{others}"
    return Remedy("node", f"{what}: {_figures(got)}", tuple(changes), got.vram_peak, got.wall_s, True)


def make_it_fit(
    graph: Graph,
    workload: Workload,
    result: Plan,
    *,
    models_dir: ModelsDir = None,
    outputs: list[str] | None = None,
    tiled_decode: TiledDecodeFigures | None = None,
    media: MediaSizes | None = None,
) -> list[Remedy]:
    """Up to three changes that make the workflow fit (see the module docstring); [] when it fits both ways
    or nothing found fits."""
    headroom = not result.feasible
    if not headroom and comfyui_reactive(workload, result.budget, result.hardware).fits:
        return []
    rp = Replanner(
        graph, result.budget, result.hardware, headroom=headroom, models_dir=models_dir, outputs=outputs,
        tiled_decode=tiled_decode, media=media,
    )  # fmt: skip
    step = _worst(workload, result, headroom)
    if step is None:
        return []
    # the Headroom node is planned as Headroom runs it, whichever way the verdict asks
    ours = (
        rp
        if headroom
        else Replanner(
            graph,
            result.budget,
            result.hardware,
            models_dir=models_dir,
            outputs=outputs,
            tiled_decode=tiled_decode,
            media=media,
        )
    )
    found: list[Remedy] = []
    driver = latent_driver(graph, step.node_id) if step.activation else None
    if driver is None and headroom:  # the latent of any node that needs more than the budget
        needs = _needs(workload, result)
        for s in workload.steps:
            if needs[s.node_id] > result.budget.vram and s.activation:
                driver = latent_driver(graph, s.node_id)
                if driver is not None:
                    break
    makers: list[Callable[[], Remedy | None]] = [
        lambda: _latent(rp, driver) if driver is not None and driver["node"] in graph.nodes else None,
        lambda: _precision(rp, step, workload),
        lambda: _node(ours, step, workload),
    ]
    if not headroom:  # ComfyUI's loading runs out where Headroom's fits: the node is the first answer
        makers.insert(0, makers.pop())
    for make in makers:
        remedy = make()
        if remedy is not None and remedy.fits:
            found.append(remedy)
    return found[:MAX_REMEDIES]


def prompt_remedies(
    prompt: dict[str, Any],
    budget: Budget,
    hardware: Hardware,
    *,
    models_dir: ModelsDir = None,
    outputs: list[str] | None = None,
    tiled_decode: TiledDecodeFigures | None = None,
    time_limit_s: float | None = None,
    media: MediaSizes | None = None,
) -> list[Remedy]:
    """make_it_fit for an API prompt (POST /headroom/fit's): never raises on a bad prompt or past the
    time limit, where it offers nothing (the verdict has said what it could)."""
    try:
        with time_limit(time_limit_s):
            planned = plan_workflow(
                prompt,
                budget,
                hardware,
                models_dir=models_dir,
                outputs=outputs,
                tiled_decode=tiled_decode,
                media=media,
            )
            assert planned.plan is not None  # planned under a budget
            return make_it_fit(
                planned.graph,
                planned.workload,
                planned.plan,
                models_dir=models_dir,
                outputs=outputs,
                tiled_decode=tiled_decode,
                media=media,
            )
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError, PlanTimeout):
        return []


def remedies_text(remedies: Sequence[Remedy]) -> list[str]:
    """One line per remedy, numbered, as the command line and Copy give them."""
    if not remedies:
        return []
    return ["to make it fit:", *(f"  {n}. {r.text}" for n, r in enumerate(remedies, 1))]
