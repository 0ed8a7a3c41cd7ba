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
image VAEs and HunyuanVideo's 3D KL VAE, Wan 2.1 and 2.2, LTXV 0.9.x and LTX-2, HunyuanVideo 1.5) or raises
``Unsupported`` with the reason, after which the caller uses the host's own decode. No ComfyUI
import: the host's module structure is duck-typed.
"""

from __future__ import annotations

from torch import nn

from .hunyuan15 import Hunyuan15TiledDecoder
from .kl import KLTiledDecoder
from .ltxv import LTXVTiledDecoder
from .runtime import DecodeOptions, DecodeReport
from .tiles import Unsupported
from .wan import WanTiledDecoder

__all__ = [
    "HOST_DECODED", "DecodeOptions", "DecodeReport", "Hunyuan15TiledDecoder", "KLTiledDecoder",
    "LTXVTiledDecoder", "Unsupported", "WanTiledDecoder", "host_decoded", "make_tiled_decoder",
]  # fmt: skip
TiledDecoder = KLTiledDecoder | WanTiledDecoder | LTXVTiledDecoder | Hunyuan15TiledDecoder


# VAEs the host decodes, and why (docs/tiled-vae.md lists them): by the class of the first_stage_model.
HOST_DECODED = {
    "CausalDiffusionVAE": (
        "LTX 2.4's diffusion decoder: its 32 neighbourhood-attention blocks (windows 3x7x7 to 11x11x11) "
        "widen what a pixel depends on to about 31 latent pixels (1000 output pixels) on every side, so "
        "an exact tile would hold most of the frame; nothing to save by tiling it"
    ),
    "MiniMaxH3VideoVAE": (
        "MiniMax H3's transformer decoder attends across every token of a chunk, and the host's decode "
        "already runs it in 256 px tiles and 17-frame chunks blended at their overlaps: that blend is "
        "the decode's defined output, which only the host's own tiling reproduces"
    ),
    "MageVAE": (
        "Mage-VAE's one-step diffusion decoder: its global parts (GroupNorms, attention, a whole-image "
        "channel-attention mean in every block) run at 1/16 resolution and its full-resolution part is a "
        "per-patch MLP 32 channels wide, so a full decode holds few activations per pixel: not tiled"
    ),
}


def host_decoded(model: nn.Module | None) -> str | None:
    """Why the host decodes ``model`` itself, for the VAEs known to need it; None for the others."""
    return HOST_DECODED.get(type(model).__name__)


def make_tiled_decoder(model: nn.Module, options: DecodeOptions) -> TiledDecoder:
    """The tiled engine for ``model`` (a host VAE's first_stage_model), or Unsupported (with the reason
    first for the VAEs the host decodes by design: ``HOST_DECODED``)."""
    known = host_decoded(model)
    if known is not None:
        raise Unsupported(known)
    reasons = []
    for engine in (KLTiledDecoder, WanTiledDecoder, LTXVTiledDecoder, Hunyuan15TiledDecoder):
        try:
            return engine(model, options)
        except Unsupported as exc:
            reasons.append(f"{engine.family}: {exc}")
    raise Unsupported("; ".join(reasons))
