"""Find a text encoder's blocks: the transformer layers of every encoder a host's CLIP object holds.

A host's text encoder (``CLIP.cond_stage_model``) wraps one or more encoders: CLIP-L alone, CLIP-L and
CLIP-G (SDXL), CLIP-L and T5-XXL (Flux), UMT5 (Wan), a Llama (HunyuanVideo) or Qwen2.5-VL (Qwen-Image).
Each keeps its layers in one ModuleList, named as in the host's classes (comfy/clip_model.py,
comfy/text_encoders/t5.py, llama.py, qwen_vl.py, bert.py). Every such list anywhere in the wrapper is
streamed, in registration order; the order the encoders really run in (SDXL runs CLIP-G first) is what
``in_call_order`` puts first. A wrapper with none of these lists falls back to ``discover_blocks``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .discovery import BlockLayout, discover_blocks, module_bytes

# (family, the list's dotted name suffix): first match wins, so "encoder.layers" comes before "layers".
TEXT_LAYOUTS: tuple[tuple[str, str], ...] = (
    ("t5", "encoder.block"),  # T5-XXL, UMT5, pile/byT5
    ("clip", "encoder.layers"),  # CLIP-L, CLIP-G, CLIP-H (text_model.encoder.layers)
    ("bert", "encoder.layer"),
    ("qwen_vl_vision", "visual.blocks"),  # Qwen2.5-VL's image encoder
    ("llama", "layers"),  # Llama, Qwen2.5, Gemma (model.layers)
)
# On a GPU a text encoder's activations are kept free beside its weights: the host's own estimate where
# it has one (0.18.2's memory_estimation_function), at least this much.
TEXT_ACTIVATION_FLOOR = 512 * 2**20


def _family(name: str) -> str | None:
    for family, suffix in TEXT_LAYOUTS:
        if name == suffix or name.endswith("." + suffix):
            return family
    return None


def block_lists(model: nn.Module) -> list[tuple[str, str, nn.ModuleList]]:
    """(dotted name, family, list) of every known layer list in ``model``, outermost, registration order."""
    found: list[tuple[str, str, nn.ModuleList]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or not name:
            continue
        if any(name.startswith(outer + ".") for outer, _, _ in found):
            continue  # a block's own inner list (T5Block.layer) is part of that block
        family = _family(name)
        if family is not None and module_bytes(module) > 0:
            found.append((name, family, module))
    return found


def discover_text_blocks(model: nn.Module) -> BlockLayout:
    """The blocks of a host's text encoder (``CLIP.cond_stage_model``), every encoder's layers."""
    lists = block_lists(model)
    if not lists:
        return discover_blocks(model)
    families = list(dict.fromkeys(family for _, family, _ in lists))
    blocks = tuple(
        (f"{name}.{i}", child)
        for name, _, module in lists
        for i, child in enumerate(module)
        if module_bytes(child) > 0
    )
    return BlockLayout("text:" + "+".join(families), blocks)


def in_call_order(layout: BlockLayout, lists_first: Sequence[str]) -> BlockLayout:
    """``layout`` with the blocks of the lists named in ``lists_first`` first, in that order (the order
    the encoders ran in last time, or the one that runs first), the rest after them as they were."""
    rank = {name: i for i, name in enumerate(lists_first)}

    def key(item: tuple[int, tuple[str, nn.Module]]) -> tuple[int, int]:
        index, (name, _) = item
        owner = name.rsplit(".", 1)[0]
        return (rank.get(owner, len(rank)), index)

    ordered = tuple(block for _, block in sorted(enumerate(layout.blocks), key=key))
    return BlockLayout(layout.family, ordered, layout.generic)
