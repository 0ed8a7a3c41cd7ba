"""Exact tiled VAE decode: bounded device memory, the same pixels as a full decode.

What is exact: every GroupNorm uses the statistics of the whole activation (the whole image or clip),
every tile reads the full halo its layers reach, and tiles are cropped, never blended, so each output
pixel is computed from exactly the inputs it has in the full decode. What is not under our control is
how the convolution backend rounds for a different tile shape: oneDNN picks its algorithm and blocking
by shape and instruction set. Measured in float32 on CPUs: an unsplit decode (one tile per stage) is
bitwise the full one; a split one is bitwise on AVX2 (oneDNN's ``jit:avx2`` convolution) and was 2e-6
off on AVX-512 (a full-size SD VAE in 61 tiles; bitwise again with ``ONEDNN_MAX_CPU_ISA=AVX2``). The
tests assert bitwise where a probe finds the kernels measured bitwise, else at most 1e-5
(tests/headroom_testing/exactness.py); per-tile statistics, as stock tiled decoders use, are off by
more than 1e-3 on the same decodes.

``make_tiled_decoder(model, options)`` returns the engine for the host VAE's ``first_stage_model`` (KL
image VAEs and HunyuanVideo's 3D KL VAE, Wan 2.1 and 2.2, LTXV 0.9.x and LTX-2) or raises
``Unsupported`` with the reason, after which the caller uses the host's own decode. No ComfyUI
import: the host's module structure is duck-typed.
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
