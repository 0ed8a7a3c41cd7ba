"""Quantized weights (tensor subclasses) stream as they are: their inner tensors go through the host buffer
and the ring, the wrapper is rebuilt around the copies, and the bytes counted are the real ones.

``FakeQuant`` behaves like the 2026 host's comfy-kitchen ``QuantizedTensor`` where it matters: a wrapper
subclass with int8 data and a float32 scale behind a float32 weight, no storage of its own, a ``copy_``
from a plain tensor refused, the traceable-subclass protocol (``__tensor_flatten__``), and every other op
run on the dequantized weight."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_map

from comfyui_headroom.memory.streaming import (
    BlockStreamer,
    DeviceLedger,
    choose_streaming,
    discover_blocks,
    storage,
)
from comfyui_headroom.memory.streaming.discovery import module_bytes


class FakeQuant(torch.Tensor):
    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor) -> FakeQuant:
        return torch.Tensor._make_wrapper_subclass(  # type: ignore[return-value]
            cls, qdata.shape, dtype=torch.float32, device=qdata.device, requires_grad=False
        )

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor) -> None:
        self._qdata, self._scale = qdata, scale

    @staticmethod
    def quantize(weight: torch.Tensor) -> FakeQuant:
        scale = weight.abs().amax().float() / 127
        return FakeQuant((weight / scale).round().to(torch.int8), scale)

    def dequantize(self) -> torch.Tensor:
        return self._qdata.float() * self._scale

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["_qdata", "_scale"], {}

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: dict, size: Any, stride: Any) -> FakeQuant:
        return FakeQuant(inner["_qdata"], inner["_scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.detach.default:  # (comfy-kitchen also clones the scale here)
            return FakeQuant(args[0]._qdata.detach(), args[0]._scale.clone())
        if func is torch.ops.aten.copy_.default:
            raise TypeError(f"Cannot copy {type(args[1]).__name__} to FakeQuant")
        plain = tree_map(lambda t: t.dequantize() if isinstance(t, FakeQuant) else t, (args, kwargs or {}))
        return func(*plain[0], **plain[1])


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, width: int = 32, depth: int = 6) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.out = nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def _quantized(seed: int = 0) -> Net:
    """Every Linear weight quantized, as the host's mixed-precision ops load a scaled fp8 checkpoint."""
    torch.manual_seed(seed)
    model = Net()
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight = nn.Parameter(FakeQuant.quantize(module.weight.detach()), requires_grad=False)
    return model


def _logical_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def _streamer(model: nn.Module, share: float) -> tuple[BlockStreamer, int]:
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    budget = rest + int(share * sum(blocks)) + 2 * max(blocks) + 1
    choice = choose_streaming(blocks, rest, budget)
    return BlockStreamer(model, layout, choice, "cpu", ledger=DeviceLedger(budget)), budget


def _spans(streamer: BlockStreamer) -> list[tuple[int, int]]:
    return [(s.buffer.data_ptr(), s.buffer.data_ptr() + s.buffer.numel()) for s in streamer._slots]


def test_the_bytes_of_a_quantized_weight_are_its_data_and_scale() -> None:
    weight = FakeQuant.quantize(torch.randn(16, 4))
    assert weight.numel() * weight.element_size() == 256  # what it stands for: fp32
    assert storage.storage_bytes(weight) == 64 + 4  # int8 data and a float32 scale
    assert storage.storage_bytes(torch.ones(3, dtype=torch.float16)) == 6
    assert storage.packed(torch.ones(3)) is None and storage.packed(nn.Parameter(torch.ones(3))) is None
    model = _quantized()
    assert 3 * module_bytes(model) < _logical_bytes(model), "blocks are planned by their real bytes"
    from comfyui_headroom.memory.residency.host_memory import footprint

    assert footprint(model).ram == module_bytes(model), "and the residency measures their real bytes"


@pytest.mark.parametrize("release", [False, True])
def test_quantized_weights_stream_as_they_are_and_compute_the_same(release: bool) -> None:
    model = _quantized()
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = model(x)
    embed = model.embed.weight
    streamer, budget = _streamer(model, 0.3)
    assert streamer.attach() and len(streamer.streamed) >= 2
    seen: list[int] = []  # every inner tensor a streamed weight computes with
    for i in streamer.streamed:
        model.blocks[i].mlp[0].register_forward_pre_hook(
            lambda m, a: seen.extend(t.data_ptr() for t in storage.packed(m.weight).inner)
        )
    with torch.no_grad():
        got = [model(x) for _ in range(3)]
    assert all(torch.equal(g, expected) for g in got)
    assert len(seen) == 3 * 2 * len(streamer.streamed)
    assert all(any(a <= p < b for a, b in _spans(streamer)) for p in seen), "computes from a ring slot"
    stats = streamer.stats
    blocks = [model.blocks[i] for i in streamer.streamed]
    assert stats.streamed_bytes == sum(module_bytes(b) for b in blocks) < sum(map(_logical_bytes, blocks))
    assert stats.misses == 0 and stats.uploads <= 3 * len(streamer.streamed) + streamer.choice.depth + 1
    assert streamer.ledger.peak <= budget
    host = streamer._host
    assert host is not None
    streamer.detach(release=release)
    for m in model.modules():
        m._forward_pre_hooks.clear()
    assert model.embed.weight is embed, "a weight that did not stream is the very object it was"
    in_host = host.data_ptr(), host.data_ptr() + host.numel()
    for block in blocks:
        for linear in (block.mlp[0], block.mlp[2]):
            assert isinstance(linear.weight, FakeQuant) and isinstance(linear.weight, nn.Parameter)
            inner = storage.packed(linear.weight).inner
            assert all((in_host[0] <= t.data_ptr() < in_host[1]) != release for t in inner)
    with torch.no_grad():
        assert torch.equal(model(x), expected)


def test_a_registered_adapter_moves_a_subclass_the_protocol_does_not_cover(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A subclass with storage of its own but attributes ``.data`` loses (as GGUF's tensors carry their
    quantization type) streams through an adapter that says how to rebuild it."""

    class Tagged(torch.Tensor):
        tag = "plain"

    def adapter(t: torch.Tensor) -> storage.Packed | None:
        if not isinstance(t, Tagged):
            return None
        tag = t.tag

        def rebuild(inner: Any) -> torch.Tensor:
            out = inner[0].as_subclass(Tagged)
            out.tag = tag
            return out

        return storage.Packed((t.as_subclass(torch.Tensor),), rebuild)

    torch.manual_seed(2)
    model = Net()
    for module in model.modules():
        if isinstance(module, nn.Linear):
            tagged = module.weight.detach().as_subclass(Tagged)
            tagged.tag = "q8"
            module.weight = storage.as_parameter(tagged)
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    monkeypatch.setattr(storage, "_ADAPTERS", list(storage._ADAPTERS))  # the registry as it was, after
    storage.register(adapter)
    streamer, _ = _streamer(model, 0.2)
    streamer.attach()
    tags: list[str] = []
    model.blocks[streamer.streamed[-1]].mlp[2].register_forward_pre_hook(
        lambda m, a: tags.append(m.weight.tag)
    )
    with torch.no_grad():
        got = model(x)
    streamer.detach()
    assert torch.equal(got, expected) and tags == ["q8"]
    assert all(m.weight.tag == "q8" for m in model.modules() if isinstance(m, nn.Linear))


class Offset(torch.Tensor):
    """A wrapper around another wrapper (a FakeQuant) and a plain offset: nested subclasses flatten."""

    @staticmethod
    def __new__(cls, base: torch.Tensor, offset: torch.Tensor) -> Offset:
        return torch.Tensor._make_wrapper_subclass(  # type: ignore[return-value]
            cls, base.shape, dtype=base.dtype, device=base.device, requires_grad=False
        )

    def __init__(self, base: torch.Tensor, offset: torch.Tensor) -> None:
        self._wrapped, self._offset = base, offset

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["_wrapped", "_offset"], {}

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: dict, size: Any, stride: Any) -> Offset:
        return Offset(inner["_wrapped"], inner["_offset"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return NotImplemented  # (never computed with here)


def test_a_subclass_inside_a_subclass_is_stored_as_its_plain_tensors() -> None:
    weight = Offset(FakeQuant.quantize(torch.randn(8, 4)), torch.randn(4))
    found = storage.packed(weight)
    assert found is not None and all(type(t) is torch.Tensor for t in found.inner)
    assert [t.dtype for t in found.inner] == [torch.int8, torch.float32, torch.float32]
    assert storage.storage_bytes(weight) == 32 + 4 + 16
    copies = [t.clone() for t in found.inner]
    rebuilt = found.rebuild(copies)
    assert type(rebuilt) is Offset and type(rebuilt._wrapped) is FakeQuant
    assert rebuilt._wrapped._qdata is copies[0] and rebuilt._wrapped._scale is copies[1]
    assert rebuilt._offset is copies[2]
    assert torch.equal(rebuilt._wrapped.dequantize(), weight._wrapped.dequantize())
