"""ComfyUI-GGUF's weights stream as they are stored, without the pack: a stand-in with GGMLTensor's
contract (a tensor subclass over the raw quantized bytes, ``tensor_type``/``tensor_shape``/``patches``
attributes, ``shape`` the logical shape, ``clone``/``detach`` returning itself; dequantized in the
layer's forward). The real pack is tested in tests/host/test_gguf_stream.py."""

from __future__ import annotations

import torch
from torch import nn

from comfyui_headroom.memory.streaming import BlockStreamer, choose_streaming, discover_blocks
from comfyui_headroom.memory.streaming.discovery import module_bytes
from comfyui_headroom.memory.streaming.gguf_storage import ggml_packed, is_ggml
from comfyui_headroom.memory.streaming.storage import storage_bytes


class FakeGGML(torch.Tensor):
    """GGMLTensor's contract (ComfyUI-GGUF ops.py), over Q8_0-like rows."""

    def __new__(cls, data: torch.Tensor, *, tensor_type: str, tensor_shape: torch.Size, patches=()):  # noqa: ANN204
        return super().__new__(cls, data)

    def __init__(self, data: torch.Tensor, *, tensor_type: str, tensor_shape: torch.Size, patches=()) -> None:
        super().__init__()
        self.tensor_type, self.tensor_shape, self.patches = tensor_type, tensor_shape, list(patches)

    def clone(self, *args, **kwargs) -> torch.Tensor:  # as GGMLTensor: itself
        return self

    def detach(self, *args, **kwargs) -> torch.Tensor:
        return self

    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        return self.tensor_shape


def _quantized(out_f: int, in_f: int, gen: torch.Generator) -> FakeGGML:
    """Q8_0's layout: rows of 34 bytes, an fp16 scale then 32 int8 codes (so 8.5 bits per value)."""
    codes = torch.randint(-100, 100, (out_f * in_f // 32, 32), generator=gen, dtype=torch.int8)
    scales = (torch.rand(codes.shape[0], 1, generator=gen) / 64).half()
    raw = torch.cat([scales.view(torch.uint8), codes.view(torch.uint8)], dim=1)
    return FakeGGML(raw, tensor_type="Q8_FAKE", tensor_shape=torch.Size((out_f, in_f)))


def _dequantize(w: FakeGGML) -> torch.Tensor:
    raw = w.as_subclass(torch.Tensor)
    scales = raw[:, :2].contiguous().view(torch.float16).float()
    return (raw[:, 2:].contiguous().view(torch.int8).float() * scales).reshape(w.tensor_shape)


class QLinear(nn.Module):
    def __init__(self, in_f: int, out_f: int, gen: torch.Generator) -> None:
        super().__init__()
        self.weight = nn.Parameter(_quantized(out_f, in_f, gen), requires_grad=False)
        self.bias = nn.Parameter(torch.randn(out_f, generator=gen), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, _dequantize(self.weight), self.bias)  # dequantized in forward


class Block(nn.Module):
    def __init__(self, width: int, gen: torch.Generator) -> None:
        super().__init__()
        self.up, self.down = QLinear(width, 2 * width, gen), QLinear(2 * width, width, gen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


class TinyGGUFDiT(nn.Module):
    def __init__(self, width: int = 64, depth: int = 6) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.embed = QLinear(32, width, gen)
        self.blocks = nn.ModuleList(Block(width, gen) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return h


def test_the_adapter_knows_ggml_weights_only() -> None:
    gen = torch.Generator().manual_seed(1)
    weight = _quantized(64, 32, gen)
    assert is_ggml(weight) and not is_ggml(torch.zeros(3)) and ggml_packed(torch.zeros(3)) is None
    found = ggml_packed(weight)
    assert found is not None
    (raw,) = found.inner
    assert type(raw) is torch.Tensor and raw.shape == (64, 34) and raw.dtype == torch.uint8
    assert raw.data_ptr() == weight.data_ptr() and storage_bytes(weight) == 64 * 34  # not 64*32 floats
    copy = found.rebuild([raw.clone()])
    assert type(copy) is FakeGGML and copy.shape == (64, 32) and copy.tensor_type == "Q8_FAKE"
    assert copy.data_ptr() != weight.data_ptr() and copy.patches == weight.patches
    assert copy.patches is not weight.patches


def test_a_ggml_model_streams_bitwise_with_its_bytes_as_stored() -> None:
    model = TinyGGUFDiT()
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = [model(x), model(2 * x)]
    before = {
        n: (p.tensor_type, p.shape, p.as_subclass(torch.Tensor).clone())
        for n, p in model.named_parameters()
        if is_ggml(p)
    }
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    assert (
        module_bytes(model.blocks[0]) == blocks[0] == 2 * 64 * 128 * 34 // 32 + 4 * (128 + 64)
    )  # Q8 + fp32 biases
    rest = module_bytes(model) - sum(blocks)
    streamer = BlockStreamer(model, layout, choose_streaming(blocks, rest, rest + 3 * max(blocks)), "cpu")
    streamer.attach()
    slots = [(s.buffer.data_ptr(), s.buffer.data_ptr() + s.buffer.numel()) for s in streamer._slots]
    seen: list[int] = []
    model.blocks[-1].down.register_forward_pre_hook(lambda m, a: seen.append(m.weight.data_ptr()))
    try:
        with torch.no_grad():
            got = [model(x), model(2 * x)]
    finally:
        streamer.detach()
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert len(streamer.streamed) >= 4 and streamer.stats.misses == 0
    assert streamer.stats.uploads >= 2 * len(streamer.streamed)
    assert seen and all(any(a <= p < b for a, b in slots) for p in seen), "computed from a ring slot"
    assert streamer.stats.streamed_bytes == sum(blocks[i] for i in streamer.streamed)
    model.blocks[-1].down._forward_pre_hooks.clear()
    for name, p in model.named_parameters():
        if name in before:
            tensor_type, shape, data = before[name]
            assert is_ggml(p) and p.tensor_type == tensor_type and p.shape == shape, name
            assert torch.equal(p.as_subclass(torch.Tensor), data), name
    with torch.no_grad():
        assert torch.equal(model(x), expected[0])
