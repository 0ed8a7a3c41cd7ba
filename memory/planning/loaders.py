"""The loader nodes the planner knows, and which value types carry which component kinds.

A loader's spec says which of its inputs names a file, the kind of component that file is, and which
output carries it; a loader no spec names is read from the node table (``generic_loader``). ``CARRIES``
is what flows along links: a value of a type carries the components of the kinds listed for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..models.info import ComponentInfo
from ..names import OFFLOAD_FILE_INPUTS, OFFLOAD_LOADER, OFFLOAD_RESIDENCY_INPUTS
from ..workflow.graph import Node
from ..workflow.node_types import lookup as lookup_node_type

# Output type -> the component kinds a value of that type can carry.
# "checkpoint" is a checkpoint nobody catalogued, one estimated file behind all of its outputs.
CARRIES: dict[str, frozenset[str]] = {
    "MODEL": frozenset({"diffusion_model", "lora", "model_patch", "checkpoint", "detector"}),
    "CLIP": frozenset({"text_encoder", "lora", "checkpoint"}),
    "VAE": frozenset({"vae", "checkpoint"}),
    "CONTROL_NET": frozenset({"controlnet"}),
    "CONDITIONING": frozenset({"controlnet"}),
    "GUIDER": frozenset({"diffusion_model", "lora", "model_patch", "controlnet", "checkpoint"}),
    "CLIP_VISION": frozenset({"clip_vision", "checkpoint"}),
    "UPSCALE_MODEL": frozenset({"upscale_model"}),
    "MODEL_PATCH": frozenset({"model_patch"}),
    "STYLE_MODEL": frozenset({"style_model"}),
    "AUDIO_ENCODER": frozenset({"audio_encoder"}),
}
# The kind of a model a loader builds for a type no table above names (0.33's MoGe, Depth Anything 3,
# background removal, frame interpolation, optical flow, latent upscale models): sized, never streamed,
# used by the node that takes it.
OTHER_KIND = "other"
# Outputs that never mean "the weights ran" (a scheduler reads the model's sigmas, not its weights).
LIGHT_OUTPUTS = frozenset({"SIGMAS", "INT", "FLOAT", "STRING", "BOOLEAN", "SAMPLER", "NOISE", "COMBO"})


@dataclass(frozen=True)
class LoaderSpec:
    """A loader node: which widget names a file, what kind it is, and which output carries it."""

    files: tuple[tuple[str, str], ...]  # (input name, component kind)
    outputs: tuple[str, ...]  # output types in order
    patches: tuple[str, ...] = ()  # inputs whose value this loader patches (LoRA)
    # part kind -> the inputs whose files replace a checkpoint's part of that kind (the Offload Loader)
    overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()
    residency: tuple[tuple[str, str], ...] = ()  # part kind -> the input holding the user's residency
    merge: tuple[str, ...] = ()  # part kinds whose files the loader builds into one object (one CLIP)
    # A loader that builds one part of the file it names (LTX-2's audio VAE out of the whole checkpoint):
    # (what the part is, the catalogued file whose size stands in for it); a note says so.
    part: tuple[str, str] = ("", "")


_CKPT = (("ckpt_name", "checkpoint"),)
LOADERS: dict[str, LoaderSpec] = {
    "CheckpointLoaderSimple": LoaderSpec(_CKPT, ("MODEL", "CLIP", "VAE")),
    "CheckpointLoader": LoaderSpec(_CKPT, ("MODEL", "CLIP", "VAE")),
    "unCLIPCheckpointLoader": LoaderSpec(_CKPT, ("MODEL", "CLIP", "VAE", "CLIP_VISION")),
    "ImageOnlyCheckpointLoader": LoaderSpec(_CKPT, ("MODEL", "CLIP_VISION", "VAE")),
    "UNETLoader": LoaderSpec((("unet_name", "diffusion_model"),), ("MODEL",)),
    "UnetLoaderGGUF": LoaderSpec((("unet_name", "diffusion_model"),), ("MODEL",)),
    "CLIPLoader": LoaderSpec((("clip_name", "text_encoder"),), ("CLIP",)),
    "CLIPLoaderGGUF": LoaderSpec((("clip_name", "text_encoder"),), ("CLIP",)),
    "DualCLIPLoader": LoaderSpec((("clip_name1", "text_encoder"), ("clip_name2", "text_encoder")), ("CLIP",)),
    "DualCLIPLoaderGGUF": LoaderSpec(
        (("clip_name1", "text_encoder"), ("clip_name2", "text_encoder")), ("CLIP",)
    ),
    "TripleCLIPLoader": LoaderSpec(tuple((f"clip_name{i}", "text_encoder") for i in (1, 2, 3)), ("CLIP",)),
    "QuadrupleCLIPLoader": LoaderSpec(
        tuple((f"clip_name{i}", "text_encoder") for i in (1, 2, 3, 4)), ("CLIP",)
    ),
    # city96/ComfyUI-GGUF: the stock loaders' inputs; .gguf files are sized from their header (models/gguf.py)
    "UnetLoaderGGUFAdvanced": LoaderSpec((("unet_name", "diffusion_model"),), ("MODEL",)),
    "TripleCLIPLoaderGGUF": LoaderSpec(
        tuple((f"clip_name{i}", "text_encoder") for i in (1, 2, 3)), ("CLIP",)
    ),
    "QuadrupleCLIPLoaderGGUF": LoaderSpec(
        tuple((f"clip_name{i}", "text_encoder") for i in (1, 2, 3, 4)), ("CLIP",)
    ),
    "VAELoader": LoaderSpec((("vae_name", "vae"),), ("VAE",)),
    "ControlNetLoader": LoaderSpec((("control_net_name", "controlnet"),), ("CONTROL_NET",)),
    "DiffControlNetLoader": LoaderSpec((("control_net_name", "controlnet"),), ("CONTROL_NET",)),
    "CLIPVisionLoader": LoaderSpec((("clip_name", "clip_vision"),), ("CLIP_VISION",)),
    "UpscaleModelLoader": LoaderSpec((("model_name", "upscale_model"),), ("UPSCALE_MODEL",)),
    "ModelPatchLoader": LoaderSpec((("name", "model_patch"),), ("MODEL_PATCH",)),
    "StyleModelLoader": LoaderSpec((("style_model_name", "style_model"),), ("STYLE_MODEL",)),
    "AudioEncoderLoader": LoaderSpec((("audio_encoder_name", "audio_encoder"),), ("AUDIO_ENCODER",)),
    # 0.33's nodes_lt_audio.py: the audio VAE and vocoder ("audio_vae.", "vocoder." keys) of an LTX-2
    # checkpoint; no catalogued file holds that part alone, the LTX-2.5 audio VAE released on its own does
    "LTXVAudioVAELoader": LoaderSpec(
        (("ckpt_name", "vae"),), ("VAE",), part=("audio VAE", "ltx-2.5-audio-vae-bf16.safetensors")
    ),
    "LoraLoader": LoaderSpec((("lora_name", "lora"),), ("MODEL", "CLIP"), patches=("model", "clip")),
    "LoraLoaderModelOnly": LoaderSpec((("lora_name", "lora"),), ("MODEL",), patches=("model",)),
    OFFLOAD_LOADER: LoaderSpec(
        (
            ("checkpoint", "checkpoint"),
            ("diffusion_model", "diffusion_model"),
            ("text_encoder_1", "text_encoder"),
            ("text_encoder_2", "text_encoder"),
            ("text_encoder_3", "text_encoder"),
            ("vae", "vae"),
        ),
        ("MODEL", "CLIP", "VAE"),
        overrides=tuple(OFFLOAD_FILE_INPUTS.items()),
        residency=tuple(OFFLOAD_RESIDENCY_INPUTS.items()),
        merge=("text_encoder",),
    ),  # fmt: skip
}
_OUTPUT_KIND = {
    "MODEL": "diffusion_model",
    "CLIP": "text_encoder",
    "VAE": "vae",
    "CLIP_VISION": "clip_vision",
}
NO_FILE = {"", "none", "None", None}

# NodeIO: class_type -> (input name -> type, output types), or None for a node we know nothing about.
NodeIO = Callable[[str], "tuple[dict[str, str], tuple[str, ...]] | None"]


def node_io(class_type: str) -> tuple[dict[str, str], tuple[str, ...]] | None:
    """Input and output types from the shipped node table (memory/data/node_types.json)."""
    known = lookup_node_type(class_type)
    return None if known is None else ({i.name: i.type for i in known.inputs}, known.outputs)


# Types that are never a model's weights.
PLAIN_TYPES = frozenset({
    "LATENT", "IMAGE", "MASK", "VIDEO", "AUDIO", "CONDITIONING", "SIGMAS", "INT", "FLOAT", "STRING",
    "BOOLEAN", "SAMPLER", "NOISE", "COMBO", "*", "GUIDER",
})  # fmt: skip
MODEL_EXTENSIONS = (".safetensors", ".sft", ".gguf", ".ckpt", ".pt", ".pth", ".bin")


def generic_loader(node: Node, io: tuple[dict[str, str], tuple[str, ...]] | None) -> LoaderSpec | None:
    """A loader we have no spec for (a new family's CLIP or VAE loader): it names model files and
    outputs one of MODEL/CLIP/VAE/CLIP_VISION. Each file is taken as that output's kind. A
    ``ckpt_name`` is skipped: such loaders read one part of a checkpoint (LTX-2's text projection or
    audio VAE), whose size a name cannot tell; a checkpoint loader counts the file where it loads it."""
    if io is None or len(io[1]) != 1 or (io[1][0] not in _OUTPUT_KIND and not model_type(io[1][0])):
        return None
    names = [
        name
        for name, value in node.inputs.items()
        if name != "ckpt_name" and isinstance(value, str) and value.lower().endswith(MODEL_EXTENSIONS)
    ]
    kind = _OUTPUT_KIND.get(io[1][0], OTHER_KIND)
    return LoaderSpec(tuple((n, kind) for n in names), io[1]) if names else None


def model_type(type_name: str) -> bool:
    """Whether a value of this type can be a model a loader built (not pixels, numbers, text or
    conditioning): the output types of loaders no table names."""
    return type_name not in PLAIN_TYPES and type_name not in CARRIES


# Input type -> the part of a checkpoint a node computes with when the checkpoint arrives through it.
ROLE_OF_TYPE = {
    "MODEL": "diffusion_model", "GUIDER": "diffusion_model", "CLIP": "text_encoder", "VAE": "vae",
    "CLIP_VISION": "clip_vision",
}  # fmt: skip


def as_role(info: ComponentInfo, role: str | None) -> ComponentInfo:
    """A whole-file "checkpoint" component seen as the part ``role`` a node computes with: its family's
    compute and activations (a checkpoint's VAE is the family's VAE: ``ltxv`` -> ``ltxv_vae``)."""
    if info.kind != "checkpoint":
        return info
    role = role or "diffusion_model"
    family = info.family
    if role == "vae" and family and not family.endswith("_vae"):
        family += "_vae"
    return replace(info, kind=role, family=family)
