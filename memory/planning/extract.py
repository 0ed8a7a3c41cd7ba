"""From a parsed workflow to the planner's workload: components, and the steps that compute with them.

Which loader produced each MODEL/CLIP/VAE/... value is traced along the links: a loader output
carries its components; any other node's output of type T carries what its inputs carry of the
kinds T can hold (a CONDITIONING carries the ControlNets applied to it, a GUIDER its model). A node
computes with a component when one of its inputs carries it and none of its outputs does (a LoRA or
model-sampling patch passes the model on; a sampler, an encoder or a decoder uses it up). LoRA
loaders derive a value that shares the base weights and adds the LoRA's own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

from ..deadline import check_time
from ..models.catalog import TEMPLATE_SOURCE, ModelsDir, lookup, lookup_components, merge_parts
from ..models.header import ComponentError
from ..models.info import ComponentInfo
from ..names import STREAM_MODEL
from ..units import cut_text, parse_vram_budget
from ..workflow.graph import Graph, Link, Node
from ..workflow.node_types import lookup as lookup_node_type
from ..workflow.node_types import node_table_host
from ..workflow.values import SWITCH, Evaluator
from ..workflow.walk import fill
from .activations import activation_bytes, host_reservation
from .compute import TEXT_TOKENS, call_work, hidden_of, seconds
from .costmodel import PIN_CHOICES, Hardware
from .latents import DEFAULT_SHAPE, MEDIA_TYPES, LatentReader, MediaSizes, Shape
from .loaders import (
    CARRIES,
    LIGHT_OUTPUTS,
    LOADERS,
    MODEL_EXTENSIONS,
    NO_FILE,
    OTHER_KIND,
    ROLE_OF_TYPE,
    LoaderSpec,
    NodeIO,
    as_role,
    generic_loader,
    model_type,
    node_io,
)
from .tiled_decode import TILED_DECODE, TiledDecodeFigures, TiledFigures
from .workload import Component, Step, Workload, component_id

# Nodes that read a model's configuration, never its weights (LTX-2's empty audio latent asks the audio
# VAE how many latents a clip needs): they load nothing.
CONFIG_READERS = frozenset({"LTXVEmptyLatentAudio"})
# Nodes that generate text with a CLIP's language model (0.33's prompt enhancers): each new token is a
# pass over the weights, up to ``max_length`` of them.
GENERATORS = frozenset({"TextGenerate", "TextGenerateLTX2Prompt"})


class _Size(TypedDict):
    """The latent size an activation estimate takes (activations.activation_bytes' keywords)."""

    width: int
    height: int
    frames: int
    batch: int


class _Extractor:
    def __init__(
        self, graph: Graph, order: list[str], node_io: NodeIO, models_dir: ModelsDir,
        media: MediaSizes | None = None,
    ) -> None:  # fmt: skip
        self.g, self.order, self.io, self.models_dir = graph, order, node_io, models_dir
        self.components: dict[str, Component] = {}
        self.info: dict[str, ComponentInfo] = {}
        self.notes: list[str] = []
        self._carried: dict[Link, frozenset[str]] = {}
        self._streamed: dict[Link, dict[str, int | None]] = {}
        self._model_types: dict[str, str] = {}  # an "other" component -> the type its loader outputs
        self.hardware = Hardware.pcie(4)
        self.tiled = TiledFigures(self.notes, VAE_TILE)
        self.values = Evaluator(graph)
        self.latents = LatentReader(
            graph,
            self.values,
            lambda node_id, name: self.number(node_id, name, max),
            lambda node_id: (self.io(graph.nodes[node_id].class_type) or ({}, ()))[0] or None,
            lambda node_id: _describe(graph.nodes[node_id]),
            media,
        )

    # --- components --------------------------------------------------------------------------------
    def _add(self, cid: str, info: ComponentInfo, label: str, pin: str = "") -> str:
        if cid not in self.components:
            blocks = tuple(b.bytes for b in info.blocks if b.bytes > 0)
            self.components[cid] = Component(cid, label, info.bytes, blocks, info.kind, info.source, pin)
            self.info[cid] = info
            if info.source == "estimate":
                self.notes.append(
                    f"{label}: unknown model file, size estimated ({info.note or 'from its name'})"
                )
            elif info.note.startswith(TEMPLATE_SOURCE):
                # no class of the host builds this file (its dims come from the file itself): the size is
                # the publisher's, its split into blocks a guess (bench/results/catalog.md says why)
                self.notes.append(
                    f"{label}: file not present, size as the official templates state it, "
                    "blocks assumed equal (no host class builds it)"
                )
        return cid

    def _lookup(self, file: str, kind: str) -> list[ComponentInfo]:
        try:
            if kind == "checkpoint":
                return lookup_components(file, "checkpoint", self.models_dir)
            return [lookup(file, kind, self.models_dir)]
        except ComponentError as exc:
            raise ValueError(str(exc)) from None

    def _loader_outputs(self, node_id: str, spec: LoaderSpec) -> list[frozenset[str]]:
        node = self.g.nodes[node_id]

        def named(input_name: str) -> bool:
            file = node.inputs.get(input_name)
            return not isinstance(file, (Link, list, dict)) and file not in NO_FILE  # lists: unhashable

        replaced = {kind for kind, names in spec.overrides if any(named(n) for n in names)}
        pins = {kind: node.inputs.get(name) for kind, name in spec.residency}
        # component id -> (parts, label files); parts of one id are one host object (merged)
        grouped: dict[str, tuple[list[ComponentInfo], list[str], str]] = {}
        for input_name, kind in spec.files:
            file = node.inputs.get(input_name)
            if not named(input_name):
                continue
            looked_up = str(file)
            if spec.part[1]:
                looked_up = spec.part[1]
                self._note(
                    f"{_describe(node)} builds the {spec.part[0]} inside {Path(str(file)).name}: sized as "
                    f"{spec.part[1]}, the same part released on its own"
                )
            for part in self._lookup(looked_up, kind):
                part_kind = part.kind if kind == "checkpoint" else kind
                if kind == "checkpoint" and part_kind in replaced:
                    continue  # the loader takes this part from its own file input instead
                first = next((c for c in grouped if c.endswith(f":{part_kind}")), None)
                own = component_id(node_id, input_name, part_kind)
                cid = first if part_kind in spec.merge and first else own
                parts, names, _ = grouped.setdefault(cid, ([], [], part_kind))
                parts.append(part)
                if Path(str(file)).name not in names:
                    names.append(Path(str(file)).name)
        by_kind: dict[str, set[str]] = {}
        for cid, (parts, names, part_kind) in grouped.items():
            pin = pins.get(part_kind)
            label = f"{' + '.join(names)} [{spec.part[0] or part_kind}]"
            info = merge_parts(parts)
            self._add(cid, info, label, pin if isinstance(pin, str) and pin in PIN_CHOICES else "")
            by_kind.setdefault(part_kind, set()).add(cid)
        outputs = []
        for out_type in spec.outputs:
            carried = {c for k in CARRIES.get(out_type, ()) for c in by_kind.get(k, ())}
            if model_type(out_type):  # a loader of a type no table names: its value is its model
                carried |= by_kind.get(OTHER_KIND, set())
                self._model_types.update((c, out_type) for c in by_kind.get(OTHER_KIND, ()))
            for patched in spec.patches:  # a LoRA shares the base weights and adds its own
                link = node.inputs.get(patched)
                if isinstance(link, Link) and CARRIES.get(out_type, frozenset()) & {
                    "diffusion_model",
                    "text_encoder",
                }:
                    base_type = "MODEL" if patched == "model" else "CLIP"
                    if base_type == out_type:
                        carried |= self.carried(link)
            outputs.append(frozenset(carried))
        return outputs

    # --- tracing -----------------------------------------------------------------------------------
    def carried(self, link: Link) -> frozenset[str]:
        if link not in self._carried:  # what it reads first, without recursion; a cycle carries nothing
            fill(link, self._carried, self._carry_reads, self._carry, lambda _: frozenset())
        return self._carried[link]

    def _spec(self, node: Node) -> LoaderSpec | None:
        return LOADERS.get(node.class_type) or generic_loader(node, self.io_of(node))

    def _carry_reads(self, link: Link) -> list[Link]:
        """The links ``_carry(link)`` reads: a loader's patched inputs, else the live inputs."""
        node = self.g.nodes.get(link.node)
        if node is None:
            return []
        spec = self._spec(node)
        inputs = self.values.live_inputs(node.id)
        names = spec.patches if spec is not None else inputs
        return [v for v in (inputs.get(n) for n in names) if isinstance(v, Link)]

    def io_of(self, node: Node) -> tuple[dict[str, str], tuple[str, ...]] | None:
        """The node's types from the table, else the output types a UI workflow recorded for it."""
        known = self.io(node.class_type)
        if known is None and node.outputs is not None:
            return {}, node.outputs
        return known

    def _carry(self, link: Link) -> frozenset[str]:
        node = self.g.nodes.get(link.node)
        if node is None:
            return frozenset()
        spec = self._spec(node)
        if spec is not None:
            outputs = self._loader_outputs(node.id, spec)
            return outputs[link.output] if 0 <= link.output < len(outputs) else frozenset()
        io = self.io_of(node)
        live = self.values.live_inputs(node.id)  # a switch passes on only the branch it chose
        upstream = frozenset().union(*(self.carried(v) for v in live.values() if isinstance(v, Link)))
        if io is None:
            return upstream  # unknown node: assume it passes on whatever it was given (conservative)
        out_types = io[1]
        out_type = out_types[link.output] if 0 <= link.output < len(out_types) else "*"
        if out_type == "*":
            return upstream
        if model_type(out_type):  # passes on only a model of its own type
            return frozenset(c for c in upstream if self._model_types.get(c) == out_type)
        kinds = CARRIES.get(out_type, frozenset())
        return frozenset(c for c in upstream if self.components[c].kind in kinds)

    def streamed(self, link: Link) -> dict[str, int | None]:
        """The diffusion models this value carries that a Stream Model node upstream streams, each with
        that node's vram_budget in bytes (None: auto); a LoRA or patch node's clone keeps the streaming."""
        if link not in self._streamed:  # as carried(): post-order, a cycle streams nothing
            self.carried(link)
            fill(link, self._streamed, self._stream_reads, self._stream, lambda _: {})
        return self._streamed[link]

    def _stream_reads(self, link: Link) -> list[Link]:
        node = self.g.nodes.get(link.node)
        if node is None or node.class_type == STREAM_MODEL:
            return []
        spec = self._spec(node)
        if spec is not None and not spec.patches:
            return []
        return [v for v in self.values.live_inputs(node.id).values() if isinstance(v, Link)]

    def _stream(self, link: Link) -> dict[str, int | None]:
        node = self.g.nodes.get(link.node)
        out: dict[str, int | None] = {}
        if node is None:
            return out
        spec = self._spec(node)
        model = node.inputs.get("model")
        if node.class_type == STREAM_MODEL and isinstance(model, Link):
            try:
                budget = parse_vram_budget(node.inputs.get("vram_budget"))
            except (ValueError, TypeError):  # a link or a bad size: the node says so when it runs
                budget = None
            kinds = ("diffusion_model",)
            out = {c: budget for c in self.carried(model) if self.components[c].kind in kinds}
        elif spec is None or spec.patches:
            for value in self.values.live_inputs(node.id).values():
                for cid, budget in (self.streamed(value) if isinstance(value, Link) else {}).items():
                    known = out.get(cid, budget)
                    out[cid] = budget if known is None else known if budget is None else min(known, budget)
            carried = self.carried(link)
            out = {c: b for c, b in out.items() if c in carried}
        return out

    def uses(self, node_id: str) -> frozenset[str]:
        node = self.g.nodes[node_id]
        carried_in = frozenset().union(
            *(self.carried(v) for v in self.values.live_inputs(node_id).values() if isinstance(v, Link))
        )
        if not carried_in:
            return carried_in
        io = self.io_of(node)
        if io is None:
            return carried_in
        if node.class_type in CONFIG_READERS:
            return frozenset()
        if node.class_type in GENERATORS:
            return carried_in
        out_types = io[1]
        if out_types and all(t in LIGHT_OUTPUTS for t in out_types):
            return frozenset()
        carried_out = frozenset().union(*(self.carried(Link(node_id, i)) for i in range(len(out_types))))
        return carried_in - carried_out

    def note_switch(self, node_id: str) -> None:
        """A switch whose condition is known only at run time: both branches are planned; say so."""
        if self.g.nodes[node_id].class_type != SWITCH or self.values.switch_taken(node_id) is not None:
            return
        got = self.values.input(node_id, "switch")
        why = got.unknown if got is not None else "not connected"
        self._note(
            f"{_describe(self.g.nodes[node_id])} input 'switch' is not known before the run ({why}): "
            "both branches planned"
        )

    # --- per-step figures --------------------------------------------------------------------------
    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def number(self, node_id: str, name: str, pick: Callable[..., Any] = max, fallback: Any = None) -> Any:
        """Input ``name`` of the node as a number, evaluated through the links (values.py).

        When it cannot be told exactly: ``pick`` of the numbers it may take (a switch whose condition is
        unknown), else ``fallback``; either way a note names the input, the cause and the value used.
        None when the node has no such input, or nothing is known and there is no fallback.
        """
        got = self.values.input(node_id, name)
        if got is None:
            return None
        numbers = [c for c in got.candidates if isinstance(c, (int, float)) and not isinstance(c, bool)]
        # Python's json reads NaN and Infinity: refused here, naming the input, before any int() of them
        if bad := [c for c in numbers if isinstance(c, float) and not math.isfinite(c)]:
            node = _describe(self.g.nodes[node_id])
            raise ValueError(f"{node} input {name!r} is {bad[0]}: write a finite number in the workflow")
        if name in SIZE_INPUTS and (bad := [c for c in numbers if c < 0]):
            node = _describe(self.g.nodes[node_id])
            raise ValueError(f"{node} input {name!r} is {bad[0]}: a size cannot be negative")
        if got.exact and numbers:
            return numbers[0]
        where = f"{_describe(self.g.nodes[node_id])} input {name!r}"
        why = got.unknown or f"{got.value!r} is not a number"
        if numbers:
            chosen = pick(numbers)
            self._note(f"{where} is not known before the run ({why}): {chosen} assumed (of {numbers})")
            return chosen
        if fallback is not None:
            self._note(f"{where} is not known before the run ({why}): {fallback} assumed")
        return fallback

    def step(self, node_id: str) -> Step:
        node = self.g.nodes[node_id]
        used = self.uses(node_id)
        ordered = tuple(sorted(used))
        if not used:
            return Step(node_id, node.class_type)
        streamed: dict[str, int | None] = {}
        for value in self.values.live_inputs(node_id).values():
            streamed |= self.streamed(value) if isinstance(value, Link) else {}
        evaluations = self._evaluations(node_id)
        latent = self._shape(node_id, used)
        width, height, frames, batch = latent.width, latent.height, latent.frames, latent.batch
        cfg_on = self._cfg_on(node_id)
        activation = activation_min = reservation = 0
        roles = self.roles(node_id)
        for cid in ordered:
            info = as_role(self.info[cid], roles.get(cid))
            size: _Size = {"width": width, "height": height, "frames": frames, "batch": batch}
            encode = info.kind == "vae" and "Decode" not in node.class_type
            if info.kind == "vae":  # VAEs adapt: the host falls back to tiles, ours tiles to the plan
                size = {
                    "width": min(width, VAE_TILE),
                    "height": min(height, VAE_TILE),
                    "frames": min(frames, 17),
                    "batch": 1,
                }
            if info.kind == "vae" and node.class_type == TILED_DECODE:
                figures = self.tiled(info.file, self.components[cid].label, width, height, frames, batch)
                if figures is not None:  # the engine's own: whole frame with room, else its least tiles
                    need, least = figures
                    activation, activation_min = max(activation, need), max(activation_min, least)
                    reservation = max(reservation, least)  # the node reserves its least, then sizes tiles
                    continue
            try:
                # activations are in the compute dtype (bf16 on current cards), whatever the weights' dtype
                family = info.family or "unknown"
                dim = hidden_of(info) if info.kind == "diffusion_model" else None  # which size of the family
                need = activation_bytes(family, info.kind, **size, cfg=cfg_on, encode=encode, dim=dim)
                # the host runs cond alone without room for both (the minimum), and reserves by its formula
                least = activation_bytes(
                    family, info.kind, **size, cfg=cfg_on, encode=encode, split=True, dim=dim
                )
                if info.kind == "vae":  # without room for a plan-sized tile, the host's fallback tile
                    small: _Size = {
                        **size,
                        "width": min(width, VAE_FALLBACK_TILE),
                        "height": min(height, VAE_FALLBACK_TILE),
                    }
                    least = activation_bytes(family, "vae", **small, encode=encode)
                held = need
                if info.kind in ("diffusion_model", "checkpoint"):
                    held = host_reservation(family, **size, cfg=cfg_on, dim=dim)
            except (KeyError, ValueError):
                need = least = held = 0
            activation, activation_min = max(activation, need), max(activation_min, least)
            reservation = max(reservation, held)
        card, fp8 = self.hardware.card(), self.hardware.fp8_matmul
        encode = "Decode" not in node.class_type
        compute_s = sum(
            seconds(
                call_work(
                    as_role(self.info[c], roles.get(c)), width=width, height=height, frames=frames,
                    batch=batch, cfg=cfg_on, encode=encode, fp8_matmul=fp8,
                ),
                card,
            )
            for c in ordered
        )  # fmt: skip
        total_s = evaluations * compute_s
        if node.class_type in GENERATORS:  # one call reads the prompt; each further pass adds one token
            tokens = int(self.number(node_id, "max_length", max, GENERATED_TOKENS) or 0)
            evaluations, total_s = 1 + tokens, compute_s * (1 + tokens / TEXT_TOKENS)
        return Step(
            node_id,
            node.class_type,
            ordered,
            evaluations,
            activation,
            total_s,
            activation_min=activation_min,
            reservation=reservation,
            streamed=tuple(sorted((c, b) for c, b in streamed.items() if c in used)),
        )

    def roles(self, node_id: str) -> dict[str, str]:
        """The part each component plays at this node, from the type of the input that brings it: a
        checkpoint nobody split (one record for the whole file) samples through a MODEL or GUIDER,
        encodes through a CLIP and decodes through a VAE, like the parts of a split one."""
        io = self.io_of(self.g.nodes[node_id])
        types = io[0] if io else {}
        roles: dict[str, str] = {}
        for name, value in self.values.live_inputs(node_id).items():
            role = ROLE_OF_TYPE.get(types.get(name, ""))
            if isinstance(value, Link) and role:
                for cid in self.carried(value):
                    roles.setdefault(cid, role)
        return roles

    def _shape(self, node_id: str, used: frozenset[str]) -> Shape:
        """The latent (or image) size the node computes on; a stated default, with a note, where it is
        only known at run time and matters (a diffusion model's or a VAE's step)."""
        read = self.latents.step_shape(node_id)
        node = self.g.nodes[node_id]
        outputs = (self.io_of(node) or ({}, ()))[1]
        matters = any(self.info[c].kind in SHAPED_KINDS for c in used) and bool(MEDIA_TYPES & set(outputs))
        if read.value is None:
            if matters:
                d = DEFAULT_SHAPE
                self._note(
                    f"{_describe(node)}: the latent's size is not known before the run ({read.why}): "
                    f"{d.width}x{d.height}, {d.frames} frame assumed"
                )
            return DEFAULT_SHAPE
        if read.why and matters:
            shape = read.value
            self._note(f"{_describe(node)}: {shape.width}x{shape.height} planned ({read.why})")
        return read.value

    def _evaluations(self, node_id: str) -> int:
        """Model evaluations of a sampler: its steps, or the part start_at_step..end_at_step of them
        (KSamplerAdvanced: the host samples sigmas[start:end+1]), or one per gap of its sigma list
        (SamplerCustom(Advanced), counted along the links: latents.py). Unknown steps count as the most
        of any branch, else DEFAULT_STEPS with a note; an unknown range as the widest."""
        inputs = self.values.live_inputs(node_id)
        if "steps" in inputs:
            steps = int(self.number(node_id, "steps", max, DEFAULT_STEPS))
            start = int(self.number(node_id, "start_at_step", min, 0) or 0)
            end = self.number(node_id, "end_at_step", max, steps)
            end = steps if end is None else int(end)
            return max(1, min(end, steps) - start)
        sigmas = inputs.get("sigmas")
        if isinstance(sigmas, Link):
            read = self.latents.sigma_count(sigmas)
            if read.value is not None:
                return max(1, int(read.value) - 1)
            self._note(
                f"{_describe(self.g.nodes[node_id])}: its steps are not known before the run ({read.why}): "
                f"{DEFAULT_STEPS} assumed"
            )
            return DEFAULT_STEPS
        known = lookup_node_type(self.g.nodes[node_id].class_type)
        if known is not None and known.input("steps") is not None:  # a widget the workflow did not store
            self._note(
                f"{_describe(self.g.nodes[node_id])} input 'steps' has no value in the workflow (fewer "
                f"widget values than the node has): {DEFAULT_STEPS} assumed, the frontend's default"
            )
            return DEFAULT_STEPS
        return 1

    def _cfg_on(self, node_id: str) -> bool:
        """Whether the sampler evaluates cond and uncond (cfg != 1); assumed so when cfg is unknown."""
        if "cfg" not in self.g.nodes[node_id].inputs:
            return False
        got = self.values.input(node_id, "cfg")
        assert got is not None
        numbers = [c for c in got.candidates if isinstance(c, (int, float)) and not isinstance(c, bool)]
        cfg_on = not numbers or any(c != 1 for c in numbers)  # no float(): an int may exceed a float
        if not got.exact or not numbers:
            where = f"{_describe(self.g.nodes[node_id])} input 'cfg'"
            why = got.unknown or f"{got.value!r} is not a number"
            assumed = "cfg != 1 (cond + uncond)" if cfg_on else "cfg = 1"
            self._note(f"{where} is not known before the run ({why}): {assumed} assumed")
        return cfg_on


def _check_budget(node: Node) -> None:
    """A Headroom node's constant vram_budget, refused as its VALIDATE_INPUTS refuses it at queue time."""
    budget = node.inputs.get("vram_budget")
    if not node.class_type.startswith("Headroom") or isinstance(budget, Link) or budget is None:
        return
    try:
        parse_vram_budget(budget)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"{_describe(node)} input 'vram_budget': {exc}; ComfyUI rejects this prompt"
        ) from None


def _describe(node: Node) -> str:
    return f"node {node.id} ({node.class_type}{f' {node.title!r}' if node.title else ''})"


DEFAULT_STEPS = 20  # the host's KSampler default: assumed for steps nothing tells
GENERATED_TOKENS = 256  # TextGenerate's default max_length
# Kinds whose memory and compute depend on the latent's size.
SHAPED_KINDS = frozenset({"diffusion_model", "checkpoint", "vae", "controlnet"})
VAE_TILE = 512  # pixels: the tile a VAE step reserves room for (one tile of a tiled decode)
# The tile the host decodes with after an out-of-memory error (comfy/sd.py VAE.decode of 0.33: 256 px
# over the spatial compression): the least a decode needs, so it sets the minimum VRAM.
VAE_FALLBACK_TILE = 256
# Inputs that size a latent or an image: ComfyUI's minimum for each is 0 (keep the aspect) or more.
SIZE_INPUTS = frozenset({"width", "height", "length", "batch_size", "frames", "num_frames"})


def _unknown_types(graph: Graph, order: Sequence[str], io: NodeIO) -> dict[str, int]:
    """Node types that will run which the node table does not know, with how many nodes of each."""
    counts: dict[str, int] = {}
    for node in (graph.nodes[node_id] for node_id in order):
        if io(node.class_type) is None:
            counts[node.class_type] = counts.get(node.class_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _checked(step: Callable[[str], Step], node_id: str) -> Step:
    check_time()
    return step(node_id)


def workload_from_graph(
    graph: Graph,
    order: list[str],
    node_io: NodeIO = node_io,
    models_dir: ModelsDir = None,
    tflops: float | None = None,
    hardware: Hardware | None = None,
    tiled_decode: TiledDecodeFigures | None = None,
    media: MediaSizes | None = None,
) -> Workload:
    """Components and steps of ``graph`` executed in ``order`` (see the module docstring).

    ``hardware``: the card whose throughput prices each node's compute (memory/planning/compute.py;
    default PCIe 4's, said in a note). ``tflops`` is no longer read (the card's table figures are).
    ``media``: the host's reader of a loaded image's or video's size (latents.MediaSizes).
    """
    ex = _Extractor(graph, order, node_io, models_dir, media)
    ex.hardware = hardware or Hardware.pcie(4)
    ex.tiled.source = tiled_decode
    uncounted = []
    for node_id in order:
        node = graph.nodes[node_id]
        _check_budget(node)
        ex.note_switch(node_id)
        if ex._spec(node) is None:  # a loader the plan cannot read: its model is not in the plan
            uncounted += [
                f"{_describe(node)} input {name!r} names {value}"
                for name, value in node.inputs.items()
                if isinstance(value, str) and value.lower().endswith(MODEL_EXTENSIONS)
            ]
    for line in uncounted:
        ex.notes.append(f"{line}, a model this plan does not count (Headroom cannot read that loader)")
    steps = tuple(_checked(ex.step, node_id) for node_id in order)
    used = {c for s in steps for c in s.uses}
    unknown = _unknown_types(graph, order, node_io)
    if unknown:
        listed = ", ".join(f"{name} (x{count})" if count > 1 else name for name, count in unknown.items())
        ex.notes.insert(
            0,
            f"{sum(unknown.values())} node(s) of {len(unknown)} type(s) that will run are unknown to the "
            f"planner ({node_table_host()}'s node table and Headroom's): {listed}; their inputs are read "
            "from the workflow and their outputs taken to pass on the models they are given",
        )
    idle = Counter(ex.components[cid].label for cid in sorted(set(ex.components) - used))
    for label, count in idle.items():  # one line per file, not one per copy of a big prompt
        times = f" ({count:,} loaders)" if count > 1 else ""
        ex.notes.append(f"{label} is loaded{times} but nothing computes with it")
    notes = tuple(cut_text(n) for n in ex.notes)  # a value echoed in a note (a 1 MB expression) is cut
    return Workload(tuple(ex.components.values()), steps, notes, uncounted=tuple(uncounted))
