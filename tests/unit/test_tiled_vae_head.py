"""The head's attention in query slices (memory/tiled_vae/head.py): the host's result, stoppable between
slices, within its byte cap; and the decode's refusal of what cannot fit (budget.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from comfyui_headroom.memory.tiled_vae import head as head_mod
from comfyui_headroom.memory.tiled_vae.budget import largest_clip, largest_latent, too_large_message
from comfyui_headroom.memory.tiled_vae.head import (
    MIN_ROWS,
    SCORE_COPIES,
    slice_count,
    slice_rows,
    sliceable,
    sliced_attention,
)
from headroom_testing.exactness import assert_exact


def normal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The host's split attention with one slice (comfy/ldm/modules/diffusionmodules/model.py), as it
    runs where memory allows."""
    b, c = q.shape[:2]
    shape = q.shape
    q = q.reshape(b, c, -1).permute(0, 2, 1)
    k, v = k.reshape(b, c, -1), v.reshape(b, c, -1)
    s1 = torch.bmm(q, k) * (int(c) ** (-0.5))
    s2 = F.softmax(s1, dim=2).permute(0, 2, 1)
    return torch.bmm(v, s2).reshape(shape)


def pytorch_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The host's SDPA attention (same file): accepts fewer queries than keys."""
    shape, (b, c) = q.shape, q.shape[:2]
    q, k, v = (t.view(b, 1, c, -1).transpose(2, 3).contiguous() for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v).transpose(2, 3).reshape(shape)


class AttnBlock(nn.Module):
    """The host's AttnBlock layout (norm, q, k, v, proj_out and its chosen attention function)."""

    def __init__(self, channels: int, attention: object, conv: type = nn.Conv2d) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(8, channels, eps=1e-6)
        self.q, self.k, self.v, self.proj_out = (conv(channels, channels, 1) for _ in range(4))
        self.optimized_attention = attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.proj_out(self.optimized_attention(self.q(h), self.k(h), self.v(h)))


def block_and_input(
    attention: object, shape: tuple[int, ...], seed: int = 0
) -> tuple[AttnBlock, torch.Tensor]:
    torch.manual_seed(seed)
    conv = nn.Conv3d if len(shape) == 5 else nn.Conv2d
    return AttnBlock(shape[1], attention, conv).eval(), torch.randn(shape)


@pytest.mark.parametrize("shape", [(1, 32, 20, 12), (2, 32, 9, 37), (1, 16, 3, 5, 7), (1, 64, 64, 64)])
@pytest.mark.parametrize("rows", [16, 64, 128, 1024])
def test_sliced_attention_is_the_host_block(shape: tuple[int, ...], rows: int) -> None:
    """Ragged pixel counts (240, 333, 105) included: the last slice starts early, as wide as the rest."""
    block, x = block_and_input(normal_attention, shape)
    pixels = math.prod(shape[2:])
    with torch.no_grad():
        want = block(x)
        got = sliced_attention(block, x, min(rows, 1 << (pixels.bit_length() - 1)))
    assert_exact(got, want, split=True)


def test_an_interrupt_stops_the_attention_between_slices() -> None:
    block, x = block_and_input(normal_attention, (1, 32, 16, 16))
    calls, done = [], []

    def check() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with torch.no_grad(), pytest.raises(KeyboardInterrupt):
        sliced_attention(block, x, 16, check, lambda: done.append(1))
    assert len(done) == 2  # two of the 16 slices ran, then the check stopped it


def test_only_the_split_attention_is_sliced() -> None:
    """SDPA (and xformers, and unknown blocks) run whole, as the host runs them."""
    assert sliceable(AttnBlock(8, normal_attention))
    assert not sliceable(AttnBlock(8, pytorch_attention)) and not sliceable(nn.Identity())
    with pytest.raises(ValueError):
        sliced_attention(AttnBlock(8, pytorch_attention), torch.zeros(1, 8, 2, 2), 4)


@pytest.mark.parametrize("pixels", [1, 7, 16, 240, 4096, 1 << 20])
@pytest.mark.parametrize("cap", [None, 0, 1 << 20, 1 << 30, 1 << 40])
def test_slice_rows_are_a_power_of_two_within_the_cap(pixels: int, cap: int | None) -> None:
    rows = slice_rows(pixels, 1, 4, cap)
    assert rows & (rows - 1) == 0 and 1 <= rows <= pixels
    assert rows * pixels <= max(head_mod.SLICE_SCORES, MIN_ROWS * pixels)
    least = min(MIN_ROWS, 1 << (pixels.bit_length() - 1))
    if cap is not None and rows > least:
        assert SCORE_COPIES * rows * pixels * 4 <= cap
    assert slice_count(pixels, rows) * rows >= pixels


def test_largest_latent_is_the_largest_that_fits() -> None:
    def need(shape: tuple[int, ...]) -> int:
        return shape[-2] * shape[-1] * 1000

    assert largest_latent((1, 4, 1024, 512), need, 1000 * 200 * 100) == (200, 100)
    assert largest_latent((1, 4, 1024, 512), need, 999) is None
    h, w = largest_latent((1, 4, 300, 500), need, 10**7)
    assert need((1, 4, h, w)) <= 10**7 < need((1, 4, h + 1, round(500 * (h + 1) / 300)))


def test_the_refusal_names_the_resolution_the_head_and_the_fix() -> None:
    gib = 1 << 30
    text = too_large_message(
        "Node", (1, 4, 1024, 1024), 22 * gib, 21 * gib, 16 * gib, "the RAM", (870, 870), 8
    )
    assert "1024x1024 (8192x8192 px) latent needs 22.00 GiB" in text
    assert "21.00 GiB of it for the mid block" in text and "the RAM leaves 16.00 GiB" in text
    assert "decode at most 870x870 (6960x6960 px) latents" in text and "6.00 GiB more" in text
    text = too_large_message("Node", (1, 4, 8, 8), 3 * gib, gib, -gib, "input vram_budget '0.2'", None, None)
    assert "mid block" not in text and "leaves 0.00 GiB" in text and "no size of this shape fits" in text


def test_the_head_estimate_follows_the_attention_the_host_picked() -> None:
    """Split attention: the slices the decode runs for the whole batch (not batch x one latent's rows);
    SDPA/xformers: no score matrix, so a big decode on a GPU is not refused for scores it never holds."""
    from comfyui_headroom.memory.tiled_vae.kl import HEAD_FACTOR, KLTiledDecoder

    def engine(attention: object, budget: int | None) -> KLTiledDecoder:
        head = KLTiledDecoder.__new__(KLTiledDecoder)  # only the head's sizing is exercised here
        mid = nn.Module()
        mid.block_1, mid.attn_1 = nn.Conv2d(512, 512, 1), AttnBlock(512, attention)
        head.decoder = nn.Module()
        head.decoder.mid = mid
        head.options = type("Options", (), {"budget_bytes": budget})()
        return head

    shape, pixels = (4, 4, 256, 256), 256 * 256
    linear = 4 * int(HEAD_FACTOR * 512 * pixels * 2)
    split = engine(normal_attention, None)
    rows, slices = split._head_rows(shape, 2)
    assert split._head_estimate(shape, 2) == linear + SCORE_COPIES * 4 * rows * pixels * 2
    assert rows * slices >= pixels and 4 * rows * pixels <= head_mod.SLICE_SCORES
    assert split._head_estimate(shape, 2, smallest=True) == linear + SCORE_COPIES * 4 * MIN_ROWS * pixels * 2
    fused = engine(pytorch_attention, 1 << 30)
    assert fused._head_estimate(shape, 2) == fused._head_estimate(shape, 2, smallest=True) == linear


def test_largest_clip_is_the_most_frames_that_fit() -> None:
    """A video too long to decode is refused with the most latent frames that fit at its size."""
    need = lambda shape: 1000 * shape[2] * shape[3] * shape[4]  # noqa: E731
    assert largest_clip((1, 16, 40, 8, 8), need, 1000 * 64 * 13) == 13
    assert largest_clip((1, 16, 40, 8, 8), need, 10) is None
    assert largest_clip((1, 4, 64, 64), need, 10**9) is None  # an image: no frames to give
    text = too_large_message("Node", (1, 16, 40, 8, 8), 2 * 10**9, 0, 10**9, "the budget", None, 8, (13, 49))
    assert "at most 13 latent frames (49 frames) of this size" in text
