"""Exact tiled VAE decode: bounded device memory, the same pixels as a full decode.

``make_tiled_decoder(model, options)`` returns the engine for the host VAE's ``first_stage_model`` (KL
image VAEs and HunyuanVideo's 3D KL VAE, Wan 2.1 and 2.2, LTXV) or raises ``Unsupported`` with the
reason, after which the caller uses the host's own decode. No ComfyUI import: the host's module
structure is duck-typed.
"""

from __future__ import annotations

from torch import nn

from .kl import KLTiledDecoder
from .ltxv import LTXVTiledDecoder
from .runtime import DecodeOptions, DecodeReport
from .tiles import Unsupported
from .wan import WanTiledDecoder

__all__ = [
    "DecodeOptions", "DecodeReport", "KLTiledDecoder", "LTXVTiledDecoder", "Unsupported", "WanTiledDecoder",
    "make_tiled_decoder",
]  # fmt: skip
TiledDecoder = KLTiledDecoder | WanTiledDecoder | LTXVTiledDecoder


def make_tiled_decoder(model: nn.Module, options: DecodeOptions) -> TiledDecoder:
    """The tiled engine for ``model`` (a host VAE's first_stage_model), or Unsupported."""
    reasons = []
    for engine in (KLTiledDecoder, WanTiledDecoder, LTXVTiledDecoder):
        try:
            return engine(model, options)
        except Unsupported as exc:
            reasons.append(f"{engine.family}: {exc}")
    raise Unsupported("; ".join(reasons))
