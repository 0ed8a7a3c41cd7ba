"""The KL decoder's mid-block attention, run in query slices.

The head's attention relates every latent pixel to every other, so it cannot be tiled: a 1024x1024
latent (an 8192x8192 image) has 2^40 scores. Where the host uses its split attention (the CPU, and
GPUs without SDPA) it computes them in slices it picks from the free memory, for hours on a CPU at that
size, with no way to stop. Here the same arithmetic runs a slice of query rows at a time, within a
byte cap, checking for an interrupt between slices. SDPA and xformers (GPUs) hold no score matrix and
run in seconds; their blocks run whole, as the host's (sliced, SDPA rounded 2e-7 differently on a CPU).

Each query row's output depends only on that row (softmax over its own scores). Every slice has the
same number of rows, a power of two (the last one starts early and recomputes a few rows): a small
ragged last slice goes to another matrix kernel, which rounds differently (1e-7 measured), while
slices of 16 rows or more gave the host's whole result bitwise on the CPU measured (AVX2;
tests/unit/test_tiled_vae_head.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeGuard

import torch
from torch import nn

# Scores alive per query row and key in the split attention: the scores and their softmax (the host
# sizes its slices with 2.5 in float32, 3 in half precision).
SCORE_COPIES = 3
# At most this many scores per slice, so an interrupt is seen within about a second on a CPU even when
# memory would allow a larger slice.
SLICE_SCORES = 1 << 25
# Query rows of the smallest slice (fewer when the latent has fewer pixels).
MIN_ROWS = 16


Layer = Callable[[torch.Tensor], torch.Tensor]


class AttnBlock(Protocol):
    """The host's AttnBlock (``comfy.ldm.modules.diffusionmodules.model``): its layers, as ``sliceable``
    finds them."""

    norm: Layer
    q: Layer
    k: Layer
    v: Layer
    proj_out: Layer


def sliceable(block: object) -> TypeGuard[AttnBlock]:
    """Whether ``block`` (the host's ``mid.attn_1``) is an AttnBlock on the host's split attention,
    which this module reproduces slice by slice."""
    if not all(hasattr(block, n) for n in ("norm", "q", "k", "v", "proj_out")):
        return False
    return getattr(getattr(block, "optimized_attention", None), "__name__", "") == "normal_attention"


def holds_no_scores(block: nn.Module) -> bool:
    """Whether ``block`` attends with the host's SDPA or xformers function: fused kernels that never hold
    the (pixels x pixels) score matrix (the host falls back to its split attention only on an OOM)."""
    name = getattr(getattr(block, "optimized_attention", None), "__name__", "")
    return name in ("pytorch_attention", "xformers_attention")


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def slice_rows(pixels: int, batch: int, dtype_bytes: int, cap_bytes: int | None) -> int:
    """Query rows per slice: a power of two, at most ``pixels`` and SLICE_SCORES scores, at least
    MIN_ROWS, and within ``cap_bytes`` for the slice's scores where that allows more than the least."""
    rows = _pow2_floor(min(pixels, max(1, SLICE_SCORES // max(1, batch * pixels))))
    if cap_bytes is not None:
        fit = cap_bytes // max(1, SCORE_COPIES * batch * pixels * dtype_bytes)
        rows = min(rows, _pow2_floor(max(1, fit)))
    return max(min(MIN_ROWS, _pow2_floor(pixels)), rows)


def slice_count(pixels: int, rows: int) -> int:
    return -(-pixels // rows)


def sliced_attention(
    block: nn.Module,
    x: torch.Tensor,
    rows: int,
    check_interrupt: Callable[[], None] | None = None,
    on_slice: Callable[[], None] | None = None,
) -> torch.Tensor:
    """``block(x)`` (the host's AttnBlock forward on its split attention) with its attention a slice of
    ``rows`` queries at a time, ``check_interrupt`` before each slice and ``on_slice`` after it."""
    if not sliceable(block):
        raise ValueError("not an AttnBlock on the host's split attention")
    h = block.norm(x)
    q, k, v = block.q(h), block.k(h), block.v(h)
    del h
    b, c = q.shape[:2]
    n = q[0, 0].numel()
    out = torch.empty_like(q)
    flat_out = out.view(b, c, n)
    qf, kf, vf = q.reshape(b, c, n), k.reshape(b, c, n), v.reshape(b, c, n)
    queries = qf.permute(0, 2, 1)  # as comfy's normal_attention hands them to its slice_attention
    scale = int(c) ** (-0.5)
    for first in range(0, n, rows):
        if check_interrupt is not None:
            check_interrupt()
        start = min(first, n - rows)  # the last slice as wide as the others
        end = start + rows
        s1 = torch.bmm(queries[:, start:end], kf) * scale
        s2 = torch.nn.functional.softmax(s1, dim=2).permute(0, 2, 1)
        del s1
        flat_out[:, :, start:end] = torch.bmm(vf, s2)
        del s2
        if on_slice is not None:
            on_slice()
    del q, k, v, qf, kf, vf
    return x + block.proj_out(out)
