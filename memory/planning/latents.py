"""What a sampler or a decoder works on, read along the links: the size, frames and batch of its latent,
and how many steps its sigmas make.

A latent's shape is set where it is made (an empty latent, an image-to-video node: any node with
``width`` and ``height`` inputs) or by a resize (of pixels or of the latent), and passed on unchanged by
everything else on the way to the sampler (samplers, noise masks, the LTX-2 audio-video concat, ...).
Reading walks that chain upstream (iteratively), then applies it in order. Pixel sizes throughout;
``frames`` counts pixel frames, as the hosts' ``length`` inputs do.

Sigma lists are counted the same way: a scheduler makes ``steps + 1``, ManualSigmas as many as its text
lists, SplitSigmas and SplitSigmasDenoise cut them as the host's nodes do (comfy_extras/
nodes_custom_sampler.py of ComfyUI 0.33).

Whatever is only known at run time (a loaded image's size, a custom node's output) stops the walk with a
reason; the caller assumes a stated default and writes the note.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from ..workflow.graph_types import Graph, Link
from ..workflow.values import Evaluator

# Types that carry pixels or a latent of some size.
MEDIA_TYPES = frozenset({"LATENT", "IMAGE", "VIDEO", "MASK"})
# Inputs through which a node's output takes its size, most specific first.
SIZE_SOURCES = (
    "latent_image", "samples", "latent", "video_latent", "av_latent", "pixels", "image", "images",
    "video", "start_image", "input", "source", "image1",
)  # fmt: skip
FRAME_INPUTS = ("length", "frames", "num_frames", "video_frames", "frame_count")
BATCH_INPUTS = ("batch_size", "batch")
SWITCH = "ComfySwitchNode"
MAX_NESTING = 64  # run-time switches and measured sizes within one another, far past any real workflow
BRANCHES = ("on_false", "on_true")
# Nodes whose outputs are an image's width, height and batch (ComfyUI 0.33's GetImageSize).
SIZE_READERS = frozenset({"GetImageSize"})
# Where a sampler-like node takes the latent it samples.
LATENT_INPUTS = ("latent_image", "samples", "latent", "pixels", "video_latent", "av_latent")

# ResizeImageMaskNode (0.33's "Resize Image/Mask"): its dynamic resize_type and the inputs each adds.
RESIZE_NODE = "ResizeImageMaskNode"
# Nodes that make a sigma list from a step count (all ComfyUI 0.33's schedulers): steps + 1 sigmas.
SCHEDULERS = frozenset({
    "BasicScheduler", "KarrasScheduler", "ExponentialScheduler", "PolyexponentialScheduler",
    "SDTurboScheduler", "VPScheduler", "BetaSamplingScheduler", "LaplaceScheduler",
    "AlignYourStepsScheduler", "GITSScheduler", "OptimalStepsScheduler", "LTXVScheduler",
    "Flux2Scheduler", "Ideogram4Scheduler",
})  # fmt: skip
SIGMAS_KEEP = frozenset({"FlipSigmas", "SetFirstSigma"})  # same count as their input
_NUMBER = re.compile(r"[-+]?(?:\d*\.*\d+)")  # ManualSigmas' own pattern


@dataclass(frozen=True)
class Shape:
    width: int
    height: int
    frames: int = 1
    batch: int = 1

    def scaled(self, factor: float) -> Shape:
        return replace(self, width=_side(self.width * factor), height=_side(self.height * factor))

    @property
    def volume(self) -> int:
        return self.width * self.height * self.frames * self.batch


DEFAULT_SHAPE = Shape(1024, 1024, 1, 1)
# Outputs that carry an audio latent beside a video one (LTX-2's audio-video latent, split): sized as
# one pixel, so an audio decode costs nothing of a video decode's memory.
AUDIO_OUTPUTS = frozenset({("LTXVSeparateAVLatent", 1)})
AUDIO_SHAPE = Shape(1, 1)
# Latents that are a sequence, not an image (audio, 3-D): node -> (what sizes it, positions per unit of
# that input, positions per model token, what it is), from ComfyUI 0.33's latent nodes:
# EmptyAceStep1.5LatentAudio [B, 64, round(s x 48000 / 1920)], DiT patch 2 (comfy_extras/nodes_ace.py);
# EmptyAceStepLatentAudio [B, 8, 16, s x 44100 / 512 / 8], one token per frame (16 bins x 8 in the patch);
# EmptyLatentAudio (Stable Audio) [B, 64, s x 44100 / 2048], patch 1 (nodes_audio.py);
# EmptyLatentHunyuan3Dv2 [B, 64, resolution] (nodes_hunyuan3d.py); EmptyTrellis2LatentStructure
# [B, C, 16, 16, 16], one token per voxel (nodes_trellis2.py).
SEQUENCE_LATENTS: dict[str, tuple[str, float, int, str]] = {
    "EmptyAceStep1.5LatentAudio": ("seconds", 48000 / 1920, 2, "ACE-Step 1.5 audio latent"),
    "EmptyAceStepLatentAudio": ("seconds", 44100 / 512 / 8, 1, "ACE-Step audio latent"),
    "EmptyLatentAudio": ("seconds", 44100 / 2048, 1, "Stable Audio latent"),
    "EmptyLatentHunyuan3Dv2": ("resolution", 1.0, 1, "Hunyuan3D shape latent"),
    "EmptyTrellis2LatentStructure": ("", 16**3, 1, "Trellis 2 structure latent (16^3 voxels)"),
}
# A sequence of N tokens is planned as a Shape whose cells make N tokens for a family the planner has no
# spec for (all of these: 8x latent, 2x2 patch): N tiles of 16 x 16 px, in one row.
SEQUENCE_TILE = 16
# ComfyUI's nodes.MAX_RESOLUTION: no size input takes more, and a chain of resizes is held to it too.
MAX_SIDE = 16384


def _side(pixels: float) -> int:
    return max(1, min(MAX_SIDE, round(pixels))) if math.isfinite(pixels) else MAX_SIDE


# (class_type, the loader's literal inputs) -> (width, height, frames) of the file it loads, or why not:
# the host reads an image's or a video's header from its input folder (nodes/host/media_sizes.py); the
# command line has no input folder, so its plans keep the note.
MediaSizes = Callable[[str, dict[str, Any]], "tuple[int, int, int] | str"]
# Loaders whose size the host can read from the file: LoadImage's frames are the batch it outputs
MEDIA_LOADERS = frozenset({"LoadImage", "LoadImageMask", "LoadVideo"})

# Number(node_id, input name) -> the input as a number (a note written when it had to be assumed), or
# None when the node has no such input or nothing is known.
Number = Callable[[str, str], "float | None"]
# Node id -> (input name -> type) from the node table, or None for a node it does not know.
InputTypes = Callable[[str], "dict[str, str] | None"]


V = TypeVar("V", Shape, int)


@dataclass(frozen=True)
class Read(Generic[V]):
    """A shape (or count), or None with why it is not known before the run."""

    value: V | None
    why: str = ""


class LatentReader:
    def __init__(
        self, graph: Graph, values: Evaluator, number: Number, input_types: InputTypes,
        describe: Callable[[str], str], media: MediaSizes | None = None,
    ) -> None:  # fmt: skip
        self.g, self.values, self.number, self.types, self.describe = (
            graph, values, number, input_types, describe,
        )  # fmt: skip
        self.media = media
        self.live = values.live_inputs
        self._memo: dict[tuple[str, int], Read[Shape]] = {}
        self._depth = 0

    # --- shapes ------------------------------------------------------------------------------------
    def step_shape(self, node_id: str) -> Read[Shape]:
        """The shape the node computes on: that of its latent (or pixel) input, else its own size inputs."""
        inputs = self.live(node_id)
        for name in LATENT_INPUTS:
            if isinstance(inputs.get(name), Link):
                return self.shape(inputs[name])
        own = self._own_shape(node_id, None)
        if own is not None:
            return Read(own)
        media = self._media_input(node_id)
        return self.shape(media) if media else Read(None, f"{self.describe(node_id)} has no latent input")

    def shape(self, link: Link) -> Read[Shape]:
        """The shape of the value ``link`` carries. A chain is walked in a loop; only a run-time switch or
        an image size read for a size nests, and that nesting is bounded (a hostile prompt)."""
        if self._depth >= MAX_NESTING:
            return Read(None, f"{self.describe(link.node)}: more than {MAX_NESTING} nested switches or sizes")
        self._depth += 1
        try:
            return self._shape(link)
        finally:
            self._depth -= 1

    def _shape(self, link: Link) -> Read[Shape]:
        chain: list[tuple[str, Link]] = []  # (node id, its upstream link) for each pass-through or resize
        current: Link | None = link
        found: Read[Shape] | None = None
        while current is not None:
            key = (current.node, current.output)
            if key in self._memo:
                found = self._memo[key]
                break
            if current.node not in self.g.nodes:
                found = Read(None, f"node {current.node}, which is not in the graph")
                break
            if any(n == current.node for n, _ in chain):
                found = Read(None, f"{self.describe(current.node)}, a dependency cycle")
                break
            if (self.g.nodes[current.node].class_type, current.output) in AUDIO_OUTPUTS:
                found = Read(AUDIO_SHAPE, f"{self.describe(current.node)} output {current.output} is audio")
                self._memo[key] = found
                break
            if self.g.nodes[current.node].class_type in SEQUENCE_LATENTS:
                found = self._sequence(current.node)
                self._memo[key] = found
                break
            if self._unknown_switch(current.node):
                found = self._largest_branch(current.node)
                self._memo[key] = found
                break
            own = self._own_shape(current.node, None)
            upstream = self._media_input(current.node)
            if own is not None and (upstream is None or self._sets_everything(current.node)):
                found = Read(own)
                self._memo[key] = found
                break
            if upstream is None:
                found = self._loaded(current.node) or Read(None, self._why_unknown(current.node))
                self._memo[key] = found
                break
            chain.append((current.node, current))
            current = upstream
        result = found if found is not None else Read(None, "no source")
        for node_id, through in reversed(chain):
            result = self._apply(node_id, result)
            self._memo[(through.node, through.output)] = result
        return result

    def _sequence(self, node_id: str) -> Read[Shape]:
        """An audio or 3-D latent (SEQUENCE_LATENTS): its real token count, as a one-row Shape."""
        name, per_unit, patch, what = SEQUENCE_LATENTS[self.g.nodes[node_id].class_type]
        amount = self.number(node_id, name) if name else 1.0
        if amount is None:
            return Read(None, f"{self.describe(node_id)} input {name!r} is not known before the run")
        tokens = max(1, math.ceil(amount * per_unit / patch))
        batch = self._int(node_id, BATCH_INPUTS) or 1
        unit = f"{amount:g} s" if name == "seconds" else f"{name} {amount:g}" if name else "fixed size"
        why = (
            f"{self.describe(node_id)} makes the {what} ({unit}): {tokens} tokens, planned as one row of"
            f" {tokens} {SEQUENCE_TILE}x{SEQUENCE_TILE} px tiles (no latent spec for the model's family)"
        )
        # one row, past MAX_SIDE if it must: a row is the only layout whose cells make exactly N tokens
        return Read(Shape(tokens * SEQUENCE_TILE, SEQUENCE_TILE, 1, max(batch, 1)), why)

    def _unknown_switch(self, node_id: str) -> bool:
        return self.g.nodes[node_id].class_type == SWITCH and self.values.switch_taken(node_id) is None

    def _largest_branch(self, node_id: str) -> Read[Shape]:
        """A switch whose condition is known only at run time: the larger of its branches is planned,
        so the plan holds whichever runs."""
        reads = [
            self.shape(v) for n, v in self.live(node_id).items() if n in BRANCHES and isinstance(v, Link)
        ]
        known = [r.value for r in reads if r.value is not None]
        if not known:
            return next((r for r in reads), Read(None, f"{self.describe(node_id)} has no branch connected"))
        largest = max(known, key=lambda shape: shape.volume)
        if len(known) == 1:
            return Read(largest)
        size = f"{largest.width} x {largest.height}" + (f" x {largest.frames}" if largest.frames > 1 else "")
        return Read(
            largest, f"{self.describe(node_id)} picks its latent at run time: the largest branch ({size})"
        )

    def _loaded(self, node_id: str) -> Read[Shape] | None:
        """A loaded image's or video's size, read from its file by the host (None: no reader, or not a
        loader it reads; a Read of None with why, when the file could not be read)."""
        node = self.g.nodes[node_id]
        if self.media is None or node.class_type not in MEDIA_LOADERS:
            return None
        literal = {k: v for k, v in self.live(node_id).items() if not isinstance(v, Link)}
        got = self.media(node.class_type, literal)
        if isinstance(got, str):
            return Read(None, f"{self.describe(node_id)}: {got}")
        width, height, frames = got
        if node.class_type == "LoadVideo":
            return Read(Shape(_side(width), _side(height), max(frames, 1), 1))
        return Read(Shape(_side(width), _side(height), 1, max(frames, 1)))

    def _why_unknown(self, node_id: str) -> str:
        node = self.g.nodes[node_id]
        if node.class_type.startswith("Load"):
            return f"{self.describe(node_id)}: its size is read from the file when it runs"
        for name in ("width", "height", "target_width", "target_height"):
            got = self.values.input(node_id, name)
            if got is not None and not got.exact:
                return f"{self.describe(node_id)} input {name!r} is not known before the run ({got.unknown})"
        return f"{self.describe(node_id)}: its output's size is not read before the run"

    def _media_input(self, node_id: str) -> Link | None:
        inputs = self.live(node_id)
        types = self.types(node_id) or {}
        for name in SIZE_SOURCES:
            value = inputs.get(name)
            if isinstance(value, Link) and types.get(name, "LATENT") in MEDIA_TYPES | {"*"}:
                return value
        for name, value in inputs.items():
            if isinstance(value, Link) and types.get(name) in MEDIA_TYPES:
                return value
        for name, value in inputs.items():  # a pass-through of any type (the If/Else switch)
            if isinstance(value, Link) and types.get(name) == "*":
                return value
        return None

    def _sets_everything(self, node_id: str) -> bool:
        inputs = self.live(node_id)
        return any(n in inputs for n in FRAME_INPUTS) and any(n in inputs for n in BATCH_INPUTS)

    def _int(self, node_id: str, names: tuple[str, ...]) -> int | None:
        for name in names:
            value = self.live(node_id).get(name)
            if value is None:
                continue
            measured = self._measured(value)
            if measured is not None:
                return measured
            got = self.number(node_id, name)
            return None if got is None else int(got)
        return None

    def _measured(self, value: Any) -> int | None:
        """A GetImageSize output (width, height, batch) of an image whose shape is known here."""
        if not isinstance(value, Link) or value.node not in self.g.nodes:
            return None
        node = self.g.nodes[value.node]
        image = self.live(node.id).get("image")
        if node.class_type not in SIZE_READERS or not isinstance(image, Link) or value.output > 2:
            return None
        shape = self.shape(image).value
        if shape is None:
            return None
        return (shape.width, shape.height, shape.batch)[value.output]

    def _own_shape(self, node_id: str, upstream: Shape | None) -> Shape | None:
        """The shape a node makes from its own width/height (and frames/batch) inputs, None without them."""
        node = self.g.nodes[node_id]
        if node.class_type == RESIZE_NODE:
            return None  # a resize of its input (see _apply)
        prefix = next((p for p in ("", "target_") if f"{p}width" in self.live(node_id)), None)
        if prefix is None or f"{prefix}height" not in self.live(node_id):
            return None
        width, height = self._int(node_id, (f"{prefix}width",)), self._int(node_id, (f"{prefix}height",))
        if width is None or height is None:
            return None
        base = upstream or Shape(width, height)
        if (width == 0 or height == 0) and upstream is not None:  # 0 keeps the aspect (ImageScale)
            if width == 0 and height == 0:
                width, height = upstream.width, upstream.height
            elif width == 0:
                width = round(upstream.width * height / max(upstream.height, 1))
            else:
                height = round(upstream.height * width / max(upstream.width, 1))
        frames = self._int(node_id, FRAME_INPUTS)
        batch = self._int(node_id, BATCH_INPUTS)
        return Shape(
            _side(width),
            _side(height),
            base.frames if frames is None else max(frames, 1),
            base.batch if batch is None else max(batch, 1),
        )

    def _apply(self, node_id: str, upstream: Read[Shape]) -> Read[Shape]:
        """The shape after ``node_id``, given its input's."""
        src = upstream.value
        own = self._own_shape(node_id, src)
        if own is not None:
            return Read(own)
        target = self._target_area(node_id)
        if target is not None:
            kind, amount = target
            if src is None and kind == "box":
                return Read(Shape(_side(amount[0]), _side(amount[1])))
            if src is None:  # the input's size is unknown: square is the largest area for a side
                side = _side(math.sqrt(amount) if kind == "area" else amount)
                return Read(Shape(side, side), upstream.why + "; aspect assumed square")
            return Read(_resize(src, kind, amount))
        factor = self._factor(node_id)
        if factor is not None and src is not None:
            return Read(src.scaled(factor))
        return upstream  # passes its input's size on

    def _factor(self, node_id: str) -> float | None:
        node = self.g.nodes[node_id]
        if node.class_type == "LTXVLatentUpsampler":
            return 2.0  # its latent upscale models are all x2 spatial (comfy_extras/nodes_lt_upsampler.py)
        if node.class_type == RESIZE_NODE and self.live(node_id).get("resize_type") == "scale by multiplier":
            return self.number(node_id, "resize_type.multiplier")
        if "scale_by" in self.live(node_id):
            return self.number(node_id, "scale_by")
        return None

    def _target_area(self, node_id: str) -> tuple[str, Any] | None:
        """A resize to a target: ("area", pixels), ("longer"/"shorter"/"width"/"height", side), which
        keep the aspect, or ("box", (width, height))."""
        node, inputs = self.g.nodes[node_id], self.live(node_id)
        if node.class_type == RESIZE_NODE:
            mode = inputs.get("resize_type")
            pick = {
                "scale longer dimension": ("longer", "resize_type.longer_size"),
                "scale shorter dimension": ("shorter", "resize_type.shorter_size"),
                "scale width": ("width", "resize_type.width"),
                "scale height": ("height", "resize_type.height"),
                "scale total pixels": ("area", "resize_type.megapixels"),
            }.get(mode if isinstance(mode, str) else "")
            if pick is None:
                if mode == "scale dimensions":
                    w = self.number(node_id, "resize_type.width")
                    h = self.number(node_id, "resize_type.height")
                    if w and h:
                        return ("box", (w, h))
                return None
            got = self.number(node_id, pick[1])
            if got is None:
                return None
            return (pick[0], got * 1024 * 1024 if pick[0] == "area" else got)
        if "megapixels" in inputs and node.class_type != "ResolutionSelector":
            got = self.number(node_id, "megapixels")
            return None if got is None else ("area", got * 1024 * 1024)
        for name in ("largest_size", "longer_size", "max_size"):
            if name in inputs:
                got = self.number(node_id, name)
                return None if got is None else ("longer", got)
        return None

    # --- sigma lists -------------------------------------------------------------------------------
    def sigma_count(self, link: Link) -> Read[int]:
        """How many sigmas the SIGMAS value ``link`` carries (a sampler takes one step per gap)."""
        cuts: list[tuple[str, int]] = []  # (node id, output) of each cut, downstream first
        current: Link | None = link
        count: Read[int] | None = None
        while current is not None and count is None:
            if current.node not in self.g.nodes:
                return Read(None, f"node {current.node}, which is not in the graph")
            if len(cuts) > len(self.g.nodes):
                return Read(None, f"{self.describe(current.node)}, a dependency cycle")
            node_id, kind = current.node, self.g.nodes[current.node].class_type
            upstream = self.live(node_id).get("sigmas")
            if kind in SCHEDULERS:
                steps = self.number(node_id, "steps")
                why = f"{self.describe(node_id)} input 'steps' is not known before the run"
                count = Read(None, why) if steps is None else Read(int(steps) + 1)
            elif kind == "ManualSigmas":
                text = self.live(node_id).get("sigmas")
                count = (
                    Read(len(_NUMBER.findall(text)))
                    if isinstance(text, str)
                    else Read(None, f"{self.describe(node_id)} input 'sigmas' is not known before the run")
                )
            elif kind in SIGMAS_KEEP | {"SplitSigmas", "SplitSigmasDenoise", "ExtendIntermediateSigmas"} and (
                isinstance(upstream, Link)
            ):
                cuts.append((node_id, current.output))
                current = upstream
            else:
                count = Read(None, f"{self.describe(node_id)}: its sigmas are made when it runs")
        assert count is not None
        for node_id, output in reversed(cuts):
            if count.value is None:
                break
            count = self._cut(node_id, output, count.value)
        return count

    def _cut(self, node_id: str, output: int, n: int) -> Read[int]:
        kind = self.g.nodes[node_id].class_type
        if kind == "SplitSigmas":
            step = self.number(node_id, "step")
            if step is None:
                return Read(None, f"{self.describe(node_id)} input 'step' is not known")
            step = max(int(step), 0)
            return Read(min(step + 1, n) if output == 0 else max(n - step, 0))
        if kind == "SplitSigmasDenoise":
            denoise = self.number(node_id, "denoise")
            if denoise is None:
                return Read(None, f"{self.describe(node_id)} input 'denoise' is not known")
            total = round(max(n - 1, 0) * denoise)
            high = n - total if total > 0 else 0  # sigmas[:-0] is empty, as in the host
            return Read(high if output == 0 else min(total + 1, n))
        if kind == "ExtendIntermediateSigmas":
            steps = self.number(node_id, "steps")
            if steps is None:
                return Read(None, f"{self.describe(node_id)} input 'steps' is not known")
            # at most steps - 1 new sigmas in every gap (only gaps within its sigma range get them)
            return Read(n + max(n - 1, 0) * max(int(steps) - 1, 0))
        return Read(n)


def _resize(src: Shape, kind: str, amount: Any) -> Shape:
    if kind == "box":
        return replace(src, width=_side(amount[0]), height=_side(amount[1]))
    if kind == "area":
        return src.scaled(math.sqrt(amount / max(src.width * src.height, 1)))
    side = {
        "longer": max(src.width, src.height),
        "shorter": min(src.width, src.height),
        "width": src.width,
        "height": src.height,
    }[kind]
    return src.scaled(amount / max(side, 1))
