"""The block streamer under ``torch.compile`` (what the host's TorchCompileModel does to a diffusion model):
the streamer's hooks run eagerly (dynamo breaks the graph at each, never traces them), so a compiled
forward computes the streamed blocks from their ring slots and gives the uncompiled result bit for bit.
Traced instead, dynamo compiled the hooks' rebinding of the weights to ring views into code of its own,
which failed on the host's UNet under TorchCompileModel (torch 2.14: "self.size(-1) must be divisible by 4
to view Byte as Float"; tests/host/test_torch_compile.py). A backend that runs each traced graph as it
is keeps this test bitwise and fast, and lists what was traced."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comfyui_headroom.memory.streaming import BlockStreamer, choose_streaming, discover_blocks
from comfyui_headroom.memory.streaming.discovery import module_bytes
from headroom_testing.torch_compile import recording_backend


class _Block(nn.Module):
    """A block whose hidden width is its own: the blocks' tensors differ in shape (as a UNet's do)."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class _Net(nn.Module):
    def __init__(self, width: int = 8, hidden: tuple[int, ...] = (3, 5, 7, 9, 11, 13)) -> None:
        super().__init__()
        self.embed = nn.Linear(4, width)
        self.blocks = nn.ModuleList(_Block(width, h) for h in hidden)
        self.out = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="this torch has no torch.compile")


def _streamer(model: nn.Module) -> BlockStreamer:
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    choice = choose_streaming(blocks, rest, rest + 2 * max(blocks) + 1)  # every block streamed, two slots
    return BlockStreamer(model, layout, choice, "cpu")


def test_a_compiled_forward_streams_from_the_ring_and_matches_the_eager_forward() -> None:
    torch._dynamo.reset()
    torch.manual_seed(4)
    model = _Net()
    x = torch.randn(3, 4)
    with torch.no_grad():
        expected = [model(x * (s + 1)) for s in range(3)]
    traces: list[str] = []
    compiled = torch.compile(model, backend=recording_backend(traces))
    streamer = _streamer(model)
    streamer.attach()
    seen: list[int] = []
    # after the streamer's own hook: where the block's weight is as it computes (eager, as the streamer's)
    probe = torch.compiler.disable(lambda m, a: seen.append(m.down.weight.data_ptr()))
    model.blocks[4].register_forward_pre_hook(probe)
    slots = [(s.buffer.data_ptr(), s.buffer.data_ptr() + s.buffer.numel()) for s in streamer._slots]
    try:
        with torch.inference_mode():  # as the host's executor runs a sampler
            got = [compiled(x * (s + 1)) for s in range(3)]
        stats = streamer.stats
    finally:
        streamer.detach(release=True)
        torch._dynamo.reset()
    assert traces, "the forward was compiled"
    assert not [t for t in traces if "memory/streaming" in t], "the streamer's own code is never traced"
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)
    assert stats.steps == 3 and stats.misses == 0 and stats.uploads >= 3 * len(streamer.streamed)
    assert len(seen) == 3 and all(any(a <= p < b for a, b in slots) for p in seen), "computes from a slot"
