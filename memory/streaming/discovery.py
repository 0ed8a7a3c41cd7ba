"""Find a diffusion model's blocks: the repeated modules that hold its weights, in forward order.

Known families are recognised by the attribute names the host's model classes use (comfy/ldm/*);
anything else falls back to the generic rule (the ModuleLists that hold most of the bytes), and the
layout says so. The forward order of known families is their attribute order; the streamer also
learns the real call order on its first step (VACE and Lumina interleave or reorder lists).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from .storage import storage_bytes

# (family, attributes in forward order). An attribute names a ModuleList (each element is a block)
# or a single module (one block). First match wins, so more specific layouts come first.
FAMILY_LAYOUTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hidream", ("double_stream_blocks", "single_stream_blocks")),
    ("flux", ("double_blocks", "single_blocks")),  # also Chroma and HunyuanVideo
    ("wan-vace", ("blocks", "vace_blocks")),
    ("sd3", ("joint_blocks",)),
    ("lumina", ("noise_refiner", "context_refiner", "layers")),
    ("unet", ("input_blocks", "middle_block", "output_blocks")),
    ("dit", ("transformer_blocks",)),  # Qwen-Image, LTXV
    ("wan", ("blocks",)),
)
# Class names that tell families apart when they share attribute names.
CLASS_FAMILIES = {
    "Chroma": "chroma", "HunyuanVideo": "hunyuan_video", "QwenImageTransformer2DModel": "qwen_image",
    "LTXVModel": "ltxv", "NextDiT": "lumina",
}  # fmt: skip
GENERIC_SHARE = 0.5  # the generic rule needs its ModuleLists to hold at least half the bytes


@dataclass(frozen=True)
class BlockLayout:
    family: str
    blocks: tuple[tuple[str, nn.Module], ...]  # (qualified name, module), forward order
    generic: bool = False  # found by the generic rule, not a known family's layout

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.blocks)

    def block_bytes(self) -> list[int]:
        return [module_bytes(m) for _, m in self.blocks]


def module_bytes(module: nn.Module) -> int:
    """The bytes ``module``'s weights really hold: a quantized tensor subclass counts its inner tensors
    (fp8 data and scales), not its logical dtype."""
    return sum(storage_bytes(t) for t in _tensors(module))


def _tensors(module: nn.Module) -> Iterator[torch.Tensor]:
    yield from module.parameters()
    yield from module.buffers()


def _expand(model: nn.Module, attr: str) -> list[tuple[str, nn.Module]] | None:
    value = getattr(model, attr, None)
    if isinstance(value, nn.ModuleList):
        return [(f"{attr}.{i}", m) for i, m in enumerate(value) if module_bytes(m) > 0]
    if isinstance(value, nn.Module):
        return [(attr, value)] if module_bytes(value) > 0 else []
    return None


def discover_blocks(model: nn.Module) -> BlockLayout:
    """The blocks of ``model`` (the host's diffusion model, e.g. ``BaseModel.diffusion_model``)."""
    family_name = CLASS_FAMILIES.get(type(model).__name__)
    for family, attrs in FAMILY_LAYOUTS:
        found = [_expand(model, attr) for attr in attrs]
        if any(f is None for f in found):
            continue
        blocks = tuple(b for part in found if part for b in part)
        if blocks:
            return BlockLayout(family_name or family, blocks)
    return _generic(model)


def _generic(model: nn.Module) -> BlockLayout:
    """The largest ModuleLists (by bytes) until they hold half the model, in registration order."""
    total = module_bytes(model)
    lists = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, nn.ModuleList) and name and module_bytes(m) > 0
    ]
    # Only outermost lists: a block's inner ModuleList is part of that block.
    outer = [(n, m) for n, m in lists if not any(n.startswith(o + ".") for o, _ in lists if o != n)]
    chosen: list[tuple[str, nn.ModuleList]] = []
    for name, m in sorted(outer, key=lambda item: -module_bytes(item[1])):
        if sum(module_bytes(c) for _, c in chosen) >= GENERIC_SHARE * total:
            break
        chosen.append((name, m))
    order = {name: i for i, (name, _) in enumerate(outer)}
    chosen.sort(key=lambda item: order[item[0]])
    blocks = tuple(
        (f"{name}.{i}", child) for name, m in chosen for i, child in enumerate(m) if module_bytes(child) > 0
    )
    return BlockLayout(type(model).__name__, blocks, generic=True)
