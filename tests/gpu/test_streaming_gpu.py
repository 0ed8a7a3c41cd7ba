"""The block streamer on CUDA: same result as the resident forward, device memory within the budget,
no allocator growth across steps. Skipped (with the reason) where there is no CUDA device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comfyui_headroom.memory.streaming import BlockStreamer, DeviceLedger, choose_streaming, discover_blocks
from comfyui_headroom.memory.streaming.discovery import module_bytes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp_in = nn.Linear(width, 4 * width)
        self.mlp_out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        x = x + self.proj(torch.nn.functional.scaled_dot_product_attention(q, k, v))
        return x + self.mlp_out(torch.nn.functional.gelu(self.mlp_in(x)))


class Dit(nn.Module):
    def __init__(self, width: int = 512, depth: int = 12) -> None:
        super().__init__()
        self.embed = nn.Linear(64, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


@pytest.mark.parametrize("share", [0.25, 0.5, 0.75])
def test_streamed_equals_resident_within_budget_and_without_growth(share: float) -> None:
    torch.manual_seed(0)
    model = Dit().to(torch.bfloat16)
    x = torch.randn(1, 256, 64, device="cuda", dtype=torch.bfloat16)
    torch.backends.cudnn.deterministic = True
    resident_model = Dit().to(torch.bfloat16)
    resident_model.load_state_dict(model.state_dict())
    resident_model.cuda()
    with torch.no_grad():
        expected = resident_model(x)
    del resident_model
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    budget = rest + int(share * sum(blocks)) + 2 * max(blocks)
    choice = choose_streaming(blocks, rest, budget)
    base = torch.cuda.memory_allocated()
    streamer = BlockStreamer(model, layout, choice, "cuda", ledger=DeviceLedger(budget))
    streamer.attach()
    torch.cuda.reset_peak_memory_stats()
    outs, levels = [], []  # the device bytes held after each step, its output already on the host
    with torch.no_grad():
        for _ in range(4):
            outs.append(model(x).cpu())
            torch.cuda.synchronize()
            levels.append(torch.cuda.memory_allocated())
    weights_peak = streamer.ledger.peak
    # After the first step the blocks it leaves uploaded for the next are the most ever held between
    # steps (on an H200: the same or less at 0.25 and 0.75, 30 MiB less at 0.5): no step adds to them.
    assert max(levels[1:]) <= levels[0], f"device bytes grew across steps: {levels}"
    streamer.detach(release=True)
    for out in outs:
        assert torch.equal(out, expected.cpu())
    assert weights_peak <= budget
    assert all(p.device.type == "cpu" for p in model.parameters())
    del outs, expected
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= base, "every device byte is returned"
    summary = streamer.summary()
    assert summary["pinned"] and summary["host_bytes"] <= 1.1 * summary["streamed_bytes"]


class ChildCalledDit(Dit):
    """Runs each block's children itself, as the host's UNet does (the block's forward never runs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            q, k, v = block.qkv(h).chunk(3, dim=-1)
            h = h + block.proj(torch.nn.functional.scaled_dot_product_attention(q, k, v))
            h = h + block.mlp_out(torch.nn.functional.gelu(block.mlp_in(h)))
        return self.head(h)


@pytest.mark.parametrize("model_class", [Dit, ChildCalledDit])
def test_calls_run_together_share_uploads_and_equal_the_calls_run_alone(model_class: type) -> None:
    torch.manual_seed(1)
    model = model_class().to(torch.bfloat16)
    inputs = [torch.randn(1, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    budget = rest + int(0.25 * sum(blocks)) + 2 * max(blocks)
    streamer = BlockStreamer(model, layout, choose_streaming(blocks, rest, budget), "cuda")
    streamer.attach()
    n = len(streamer.streamed)
    with torch.no_grad():
        alone = [model(x) for x in inputs]  # one after another: each call uploads every block
        before = streamer.stats.uploads
        together = [streamer.run_together([lambda x=x: model(x) for x in inputs]) for _ in range(2)]
        torch.cuda.synchronize()
    uploads = streamer.stats.uploads - before
    streamer.detach(release=True)
    assert n >= 2 and uploads == 2 * n, "one upload per streamed block per step for both calls"
    for step in together:
        assert all(torch.equal(a, b) for a, b in zip(step, alone, strict=True))
    assert streamer.ledger.peak <= budget and streamer.stats.misses == 0
