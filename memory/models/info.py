"""What the planner is told about one model component: its kind, family, dtype, bytes and blocks.

``bytes`` is the sum of the tensor bytes; ``blocks`` are the streamable blocks in forward order and
everything else is the *rest* (see memory/models/components.py for the conventions).
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = frozenset(
    {
        "checkpoint", "diffusion_model", "text_encoder", "vae", "controlnet", "clip_vision", "upscale_model",
        "lora", "model_patch", "audio_encoder", "style_model", "detector", "other", "unknown",
    }
)  # fmt: skip
SOURCES = frozenset({"header", "catalog", "estimate"})


@dataclass(frozen=True)
class Block:
    name: str
    bytes: int


@dataclass(frozen=True)
class ComponentInfo:
    kind: str
    file: str | None
    family: str | None
    dtype: str
    bytes: int
    blocks: tuple[Block, ...]
    source: str
    note: str = ""

    @property
    def rest_bytes(self) -> int:
        """Weights outside the streamable blocks (embeddings, heads, norms): resident while streaming."""
        return self.bytes - sum(b.bytes for b in self.blocks)
