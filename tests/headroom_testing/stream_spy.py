"""What the streaming host tests observe of the pack's BlockStreamer (as the host imported it): every
attach and detach in order, and probes proving that a streamed block computes from a ring slot, not
from the model's own storage; plus the model's state before and after, and a budget that streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from comfyui_headroom.memory.streaming import discover_blocks
from comfyui_headroom.memory.streaming.discovery import module_bytes
from comfyui_headroom.memory.streaming.storage import packed
from headroom_testing import fixture_nodes as fx


@dataclass
class Probe:
    """One module with a weight, two levels or more inside a streamed block: where its weight was each
    time it computed (every inner tensor of a quantized weight: its data and its scales)."""

    block: int
    seen: list[int] = field(default_factory=list)


@dataclass
class Watched:
    streamer: Any
    probes: list[Probe]
    ring: list[tuple[int, int]]  # [start, end) of each ring slot and of the host buffer
    handles: list[Any]


class StreamSpy:
    """Install with ``StreamSpy(host, monkeypatch)``; ``log`` is [("attach"|"detach", streamer), ...]."""

    def __init__(self, host: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        cls = host.pack_module("memory.streaming.streamer").BlockStreamer
        self.log: list[tuple[str, Any]] = []
        self.watched: list[Watched] = []
        attach, detach = cls.attach, cls.detach

        def spy_attach(streamer: Any) -> Any:
            probes = [p for p in (_probe(streamer, i) for i in streamer.streamed) if p is not None]
            out = attach(streamer)
            ring = [_span(s.buffer) for s in streamer._slots]
            if streamer._host is not None:
                ring.append(_span(streamer._host))
            handles = [
                module.register_forward_pre_hook(lambda m, a, p=probe: p.seen.extend(_ptrs(m.weight)))
                for probe, module in probes
            ]
            self.watched.append(Watched(streamer, [p for p, _ in probes], ring, handles))
            self.log.append(("attach", streamer))
            return out

        def spy_detach(streamer: Any, release: bool = False) -> Any:
            for w in self.watched:
                if w.streamer is streamer:
                    for handle in w.handles:
                        handle.remove()
            out = detach(streamer, release)
            self.log.append(("detach", streamer))
            return out

        monkeypatch.setattr(cls, "attach", spy_attach)
        monkeypatch.setattr(cls, "detach", spy_detach)

    def streamers(self) -> list[Any]:
        return [w.streamer for w in self.watched]


def _span(buffer: torch.Tensor) -> tuple[int, int]:
    return buffer.data_ptr(), buffer.data_ptr() + buffer.numel() * buffer.element_size()


def _ptrs(weight: torch.Tensor) -> list[int]:
    found = packed(weight)
    return [t.data_ptr() for t in found.inner] if found is not None else [weight.data_ptr()]


def _probe(streamer: Any, block: int) -> tuple[Probe, torch.nn.Module] | None:
    root = streamer.layout.blocks[block][1]
    # two levels in or deeper: entering a child of the block has bound it (SD3's weights are deeper)
    level = [grand for child in root.children() for grand in child.children()]
    while level:
        for module in level:
            if isinstance(getattr(module, "weight", None), torch.nn.Parameter):
                return Probe(block), module
        level = [child for module in level for child in module.children()]
    return None  # (a UNet's first block is one conv)


def assert_streamed(watched: Watched, steps: int) -> None:
    """The streamed blocks computed from the streamer's ring slots, not from the model's own storage;
    each was uploaded once per step (the next step's first ones may be prefetched), none out of order."""
    streamer, stats = watched.streamer, watched.streamer.stats
    streamed = len(streamer.streamed)
    assert streamed >= 2 and stats.misses == 0 and stats.steps == steps, (streamed, stats.misses, stats.steps)
    ahead = stats.uploads - steps * streamed
    assert 0 <= ahead <= streamer.choice.depth + 1, f"{stats.uploads} uploads: one per block per step"
    slots = watched.ring[: streamer.choice.depth + 1]
    assert len(watched.probes) >= streamed - 1, "a probe in (nearly) every streamed block"
    for probe in watched.probes:
        assert probe.seen, f"block {probe.block} never computed"
        assert all(any(a <= ptr < b for a, b in slots) for ptr in probe.seen), "computes from a ring slot"


def snapshot(diffusion: torch.nn.Module) -> dict[str, tuple[int, int, torch.Tensor]]:
    """Each parameter's data_ptr, storage size and value."""
    return {
        n: (p.data_ptr(), p.untyped_storage().nbytes(), p.detach().clone())
        for n, p in diffusion.named_parameters()
    }


def assert_restored(diffusion: torch.nn.Module, before: dict, spy: StreamSpy) -> None:
    """Unhooked, every value as it was, every parameter in storage of its own again (the size it had,
    outside every ring slot and host buffer); those that never streamed in the very storage they had."""
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in diffusion.modules()), "unhooked"
    mine = [w for w in spy.watched if w.streamer.model is diffusion]
    assert mine and all(not w.streamer.attached for w in mine), "streamed, then detached"
    buffers = [span for w in mine for span in w.ring]  # (another's freed buffers may hold these clones)
    streamed = {
        id(p) for w in mine for i in w.streamer.streamed for p in w.streamer.layout.blocks[i][1].parameters()
    }
    for name, p in diffusion.named_parameters():
        ptr, nbytes, value = before[name]
        assert torch.equal(p, value), f"{name} changed"
        assert p.untyped_storage().nbytes() == nbytes, f"{name} shares a buffer"
        assert not any(a <= p.data_ptr() < b for a, b in buffers), f"{name} still in a streamer's buffer"
        if id(p) not in streamed:
            assert p.data_ptr() == ptr, f"{name} moved"


def budget_gb(diffusion: torch.nn.Module) -> str:
    """A vram_budget that keeps about a third of the blocks resident beside a two-slot ring."""
    blocks = discover_blocks(diffusion).block_bytes()
    rest = module_bytes(diffusion) - sum(blocks)
    return f"{(rest + 0.3 * sum(blocks) + 2 * max(blocks) + 1) / 2**30:.12f}"


def sampling_sources(model: Any, positive: Any, negative: Any, latent: dict[str, Any]) -> dict[str, Any]:
    """What a streamed-sampling test prompt reads: the model, its conditionings and latent as fixture
    source-node keys (``fixture_nodes.put``), and a vram_budget that streams the model."""
    return {
        "model": model,
        "m": fx.put(model),
        "p": fx.put(positive),
        "n": fx.put(negative),
        "l": fx.put(latent),
        "budget": budget_gb(model.model.diffusion_model),
    }


def tiny_sd_sources(host: Any, name: str, seed: int, text: str) -> dict[str, Any]:
    """The tiny SD1.5 checkpoint ``name`` loaded by the host's own loader, ``text`` and "" encoded by
    its CLIP, and an empty 8x8 latent, as ``sampling_sources``. Call ``fixture_nodes.VALUES.clear()``
    when done (the models' __del__ needs the host before the interpreter's shutdown)."""
    from headroom_testing.tiny_models import build_tiny_sd_checkpoint

    fx.install(host)
    build_tiny_sd_checkpoint(host.models_dir, name=name, seed=seed)
    host.register_models_dir(host.models_dir)
    with torch.inference_mode():  # as the host's executor runs nodes
        model, clip, _ = host.node_class("CheckpointLoaderSimple")().load_checkpoint(name)
        (positive,) = host.node_class("CLIPTextEncode")().encode(clip, text)
        (negative,) = host.node_class("CLIPTextEncode")().encode(clip, "")
    return sampling_sources(model, positive, negative, {"samples": torch.zeros(1, 4, 8, 8)})
