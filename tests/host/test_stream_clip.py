"""Stream CLIP (VRAM offload) through the host's real executor: for tiny text encoders of the host's own
classes (CLIP-L, SDXL's CLIP-L + CLIP-G, Flux's CLIP-L + T5-XXL, Wan's UMT5, HunyuanVideo's Llama + CLIP-L,
Qwen-Image's Qwen2.5-VL; see ``headroom_testing.tiny_text_encoders``), the conditioning and pooled output
of the stock encode nodes on the streamed CLIP are the stock ones bit for bit (CPU), the streamed layers
compute from the streamer's ring (not from the encoder's own storage), each is uploaded once per encode,
and after the encode, however it ended, every parameter is back in storage of its own."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host, PromptFailed
from headroom_testing.stream_spy import StreamSpy, assert_restored, snapshot
from headroom_testing.tiny_text_encoders import TARGETS, available, load_tiny_clip

pytestmark = pytest.mark.host

VALUES: dict[str, Any] = {}
_KEYS = itertools.count()
PROMPT = "a photograph of an astronaut riding a horse"


class ClipSource:
    RETURN_TYPES = ("CLIP",)
    FUNCTION = "get"
    CATEGORY = "headroom_testing"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"key": ("STRING", {"default": ""})}}

    def get(self, key: str) -> tuple[Any]:
        return (VALUES[key],)


class KeepConditioning:
    RETURN_TYPES = ()
    FUNCTION = "keep"
    OUTPUT_NODE = True
    CATEGORY = "headroom_testing"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"conditioning": ("CONDITIONING",)}}

    def keep(self, conditioning: Any) -> dict[str, Any]:
        return {"ui": {}}


def _streamed_clip_of(text_encoders: Any, clip: Any) -> Any:
    """The StreamedClip a CLIP carries (a Stream CLIP clone or a clone of one), else None."""
    state = getattr(clip, text_encoders.ATTR, None)
    return state if isinstance(state, text_encoders.StreamedClip) else None


@contextlib.contextmanager
def _clip_streaming(text_encoders: Any, clip_or_patcher: Any, settings: Any) -> Iterator[Any]:
    """``arm_clip_streaming`` as a context: ended on the way out, however the block ends."""
    session = text_encoders.arm_clip_streaming(clip_or_patcher, settings)
    try:
        yield session
    finally:
        session.end()


def _put(value: Any) -> str:
    key = f"clip-{next(_KEYS)}"
    VALUES[key] = value
    return key


@pytest.fixture(scope="module")
def nodes(host: Host) -> Iterator[None]:
    mappings = host.nodes.NODE_CLASS_MAPPINGS
    mappings.setdefault("HeadroomTestClip", ClipSource)
    mappings.setdefault("HeadroomTestKeepConditioning", KeepConditioning)
    host.register_models_dir(host.models_dir)
    yield
    VALUES.clear()  # release the models before the interpreter's shutdown (their __del__ needs the host)
    CLIPS.clear()


CLIPS: dict[str, Any] = {}


def _clip(host: Host, kind: str) -> Any:
    reason = available(kind)
    if reason:
        pytest.skip(reason)
    if kind not in CLIPS:
        CLIPS[kind] = load_tiny_clip(host, kind, host.models_dir, seed=len(CLIPS))
    return CLIPS[kind]


def _budget(clip: Any, host: Host) -> str:
    """A vram_budget that keeps about a third of the layers resident beside a two-slot ring."""
    layouts = host.pack_module("memory.streaming.text_layouts")
    discovery = host.pack_module("memory.streaming.discovery")
    model = clip.cond_stage_model
    blocks = layouts.discover_text_blocks(model).block_bytes()
    rest = discovery.module_bytes(model) - sum(blocks)
    return f"{(rest + 0.3 * sum(blocks) + 2 * max(blocks) + 1) / 2**30:.12f}"


def _encode_prompt(key: str, stream: dict[str, Any] | None, encode: dict | None = None) -> dict:
    clip = ["c", 0] if stream is None else ["x", 0]
    nodes = {
        "c": {"class_type": "HeadroomTestClip", "inputs": {"key": key}},
        "e": encode or {"class_type": "CLIPTextEncode", "inputs": {"clip": clip, "text": PROMPT}},
        "keep": {"class_type": "HeadroomTestKeepConditioning", "inputs": {"conditioning": ["e", 0]}},
    }
    nodes["e"]["inputs"]["clip"] = clip
    if stream is not None:
        nodes["x"] = {"class_type": "HeadroomStreamCLIP", "inputs": {"clip": ["c", 0], **stream}}
    return nodes


def _conditioning(result: Any) -> list:
    return result.outputs["e"][0][0]


def assert_same_conditioning(out: list, stock: list) -> None:
    assert len(out) == len(stock)
    for (cond, extra), (stock_cond, stock_extra) in zip(out, stock, strict=True):
        assert torch.isfinite(stock_cond).all() and stock_cond.std() > 0
        assert torch.equal(cond, stock_cond)
        assert extra.keys() == stock_extra.keys()
        for name, value in stock_extra.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(extra[name], value), name
            else:
                assert extra[name] == value, name


class DeepProbes:
    """Where one weight deep inside each streamed layer was when it computed (the stream spy's own
    probes look two levels in, which T5's layers do not hold a weight at)."""

    def __init__(self, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
        cls = host.pack_module("memory.streaming.streamer").BlockStreamer
        attach = cls.attach
        self.seen: dict[int, list[int]] = {}
        self.slots: list[tuple[int, int]] = []
        self.handles: list[Any] = []

        def probed_attach(streamer: Any) -> Any:
            out = attach(streamer)
            self.slots = [
                (s.buffer.data_ptr(), s.buffer.data_ptr() + s.buffer.numel()) for s in streamer._slots
            ]
            for i in streamer.streamed:
                module = next(
                    m
                    for m in streamer.layout.blocks[i][1].modules()
                    if isinstance(getattr(m, "weight", None), torch.nn.Parameter)
                )
                seen = self.seen.setdefault(i, [])
                self.handles.append(
                    module.register_forward_pre_hook(lambda m, a, s=seen: s.append(m.weight.data_ptr()))
                )
            return out

        monkeypatch.setattr(cls, "attach", probed_attach)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def assert_from_ring(self, streamer: Any) -> None:
        assert set(self.seen) == set(streamer.streamed) and len(self.seen) >= 2
        for block, seen in self.seen.items():
            name = streamer.layout.blocks[block][0]
            assert seen or ".visual." in name, f"layer {name} never computed"  # (images only: Qwen-VL's)
            assert all(any(a <= p < b for a, b in self.slots) for p in seen), "computes from a ring slot"


def _streamed_encode(
    host: Host, clip: Any, monkeypatch: pytest.MonkeyPatch, encode: dict | None = None, **stream: Any
) -> tuple[list, list, Any]:
    """The stock encode, then the streamed one under a spy: the same conditioning; the streamer."""
    import copy

    key = _put(clip)
    stock = _conditioning(host.run(_encode_prompt(key, None, copy.deepcopy(encode))))
    model = clip.cond_stage_model
    before = snapshot(model)
    spy = StreamSpy(host, monkeypatch)
    probes = DeepProbes(host, monkeypatch)
    stream = {"vram_budget": _budget(clip, host), **stream}
    out = _conditioning(host.run(_encode_prompt(key, stream, copy.deepcopy(encode))))
    probes.remove()
    assert_same_conditioning(out, stock)
    (streamer,) = spy.streamers()
    assert streamer.model is model
    assert [event for event, _ in spy.log] == ["attach", "detach"]
    stats = streamer.stats
    assert stats.misses == 0 and stats.steps == 1, (stats.misses, stats.steps)
    ahead = stats.uploads - len(streamer.streamed)  # the ring prefetches a next encode's first layers
    assert 0 <= ahead <= streamer.choice.depth + 1, "one upload per streamed layer per encode"
    probes.assert_from_ring(streamer)
    assert_restored(model, before, spy)
    return out, stock, streamer


@pytest.mark.parametrize("kind", list(TARGETS))
def test_each_text_encoder_streams_to_the_stock_conditioning(
    host: Host, nodes: None, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    clip = _clip(host, kind)
    _, _, streamer = _streamed_encode(host, clip, monkeypatch)
    families = {"flux": "t5", "wan": "t5", "sdxl": "clip", "hunyuan_video": "llama", "qwen_image": "llama"}
    assert families.get(kind, "clip") in streamer.layout.family


def test_flux_text_encode_node_streams_too(host: Host, nodes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    clip = _clip(host, "flux")
    if "CLIPTextEncodeFlux" not in host.nodes.NODE_CLASS_MAPPINGS:
        pytest.skip("this host has no CLIPTextEncodeFlux")
    inputs = {"clip_l": "a horse", "t5xxl": PROMPT, "guidance": 3.5}
    _streamed_encode(host, clip, monkeypatch, {"class_type": "CLIPTextEncodeFlux", "inputs": inputs})


def test_sdxl_runs_clip_g_first_and_the_ring_follows(
    host: Host, nodes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SDXL's wrapper runs CLIP-G before CLIP-L: the list entered first leads the uploads (no misses)."""
    _, _, streamer = _streamed_encode(host, _clip(host, "sdxl"), monkeypatch, resident_blocks=0)
    assert streamer.layout.blocks[0][0].startswith("clip_g.")


@torch.inference_mode()
def test_clones_stream_and_streaming_again_replaces_the_settings(host: Host, nodes: None) -> None:
    """LoRA loaders and CLIPSetLastLayer clone the CLIP: the clone still streams, with the same state."""
    clip = _clip(host, "clip_l")
    text_encoders = host.pack_module("nodes.host.text_encoders")
    node = host.node_class("HeadroomStreamCLIP")()
    (streamed,) = node.stream(clip, vram_budget=_budget(clip, host), prefetch=1)["result"]
    (again,) = node.stream(streamed, vram_budget=_budget(clip, host), resident_blocks=0)["result"]
    (last_layer,) = host.node_class("CLIPSetLastLayer")().set_last_layer(again, -2)
    encode = host.node_class("CLIPTextEncode")()
    (stock,) = encode.encode(host.node_class("CLIPSetLastLayer")().set_last_layer(clip, -2)[0], PROMPT)
    assert_same_conditioning(encode.encode(last_layer, PROMPT)[0], stock)
    state = _streamed_clip_of(text_encoders, last_layer)
    assert state is _streamed_clip_of(text_encoders, again) is not _streamed_clip_of(text_encoders, streamed)
    summary = state.last_run.summary
    assert (
        summary["resident_blocks"] == 0 and summary["blocks"] <= summary["uploads"] <= summary["blocks"] + 2
    )
    line = text_encoders.streamed_clip_line(summary)
    assert line.startswith(f"streamed {summary['blocks']}/{summary['blocks']} blocks by Headroom, ")
    assert line.endswith(" per encode, from RAM"), line  # a CPU host: the buffer is not pinned
    assert _streamed_clip_of(text_encoders, clip) is None  # the input CLIP is untouched


@pytest.mark.parametrize("error", ["interrupt", "error"])
def test_an_encode_that_fails_midway_detaches_and_gives_every_byte_back(
    host: Host, nodes: None, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    clip = _clip(host, "clip_l")
    model = clip.cond_stage_model
    exc = host.model_management.InterruptProcessingException if error == "interrupt" else RuntimeError
    layers = host.pack_module("memory.streaming.text_layouts").discover_text_blocks(model).blocks

    def fail(module: Any, args: Any) -> None:
        raise exc("raised by the test")

    before = snapshot(model)
    spy = StreamSpy(host, monkeypatch)
    handle = layers[5][1].register_forward_pre_hook(fail)
    try:
        with pytest.raises(PromptFailed):
            host.run(_encode_prompt(_put(clip), {"vram_budget": _budget(clip, host)}))
    finally:
        handle.remove()
    assert [event for event, _ in spy.log] == ["attach", "detach"]
    assert_restored(model, before, spy)


@torch.inference_mode()
def test_the_controller_arms_streaming_on_a_stock_clip(
    host: Host, nodes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``arm_clip_streaming`` streams any encode of a plain CLIP (or its patcher) until ``end``."""
    clip = _clip(host, "wan" if not available("wan") else "clip_l")
    text_encoders = host.pack_module("nodes.host.text_encoders")
    settings = host.pack_module("nodes.host.sampling").StreamSettings(
        budget=int(float(_budget(clip, host)) * 2**30)
    )
    encode = host.node_class("CLIPTextEncode")()
    (stock,) = encode.encode(clip, PROMPT)
    spy = StreamSpy(host, monkeypatch)
    before = snapshot(clip.cond_stage_model)
    with _clip_streaming(text_encoders, clip.patcher, settings) as session:
        assert_same_conditioning(encode.encode(clip, PROMPT)[0], stock)
        assert_same_conditioning(encode.encode(clip, PROMPT)[0], stock)
    assert [event for event, _ in spy.log] == ["attach", "detach"]
    assert session.summary["steps"] == 2 and session.summary["misses"] == 0
    assert text_encoders.streamed_clip_line(session.summary).startswith("streamed ")
    assert_restored(clip.cond_stage_model, before, spy)
    idle = text_encoders.arm_clip_streaming(clip, settings)
    assert idle.end().note == "not streamed: the text encoder did not run" and idle.end() is idle.run


@torch.inference_mode()
def test_a_budget_that_cannot_hold_the_encoder_at_the_encode_leaves_it_to_the_host(
    host: Host, nodes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's budget is checked when the encode runs: too small, the host encodes as it would
    (no streamer at all) and the session says why."""
    clip = _clip(host, "clip_l")
    settings = host.pack_module("nodes.host.sampling").StreamSettings(budget=1024)
    spy = StreamSpy(host, monkeypatch)
    encode = host.node_class("CLIPTextEncode")()
    (stock,) = encode.encode(clip, PROMPT)
    with _clip_streaming(host.pack_module("nodes.host.text_encoders"), clip, settings) as session:
        assert_same_conditioning(encode.encode(clip, PROMPT)[0], stock)
    assert spy.log == [] and session.summary == {}
    assert session.run.note.startswith("not streamed: a VRAM budget of ")


@torch.inference_mode()
def test_auto_budget_on_a_cpu_streams_nothing_and_says_so(host: Host, nodes: None) -> None:
    clip = _clip(host, "clip_l")
    (streamed,) = host.node_class("HeadroomStreamCLIP")().stream(clip)["result"]
    (out,) = host.node_class("CLIPTextEncode")().encode(streamed, PROMPT)
    assert_same_conditioning(out, host.node_class("CLIPTextEncode")().encode(clip, PROMPT)[0])
    run = _streamed_clip_of(host.pack_module("nodes.host.text_encoders"), streamed).last_run
    assert run.note == "everything fits the budget: nothing streamed" and run.summary["streamed_bytes"] == 0


@pytest.mark.parametrize("budget", ["0.00001", "-1", "lots"])
def test_a_bad_or_too_small_budget_fails_at_the_node(host: Host, nodes: None, budget: str) -> None:
    clip = _clip(host, "clip_l")
    cls = host.node_class("HeadroomStreamCLIP")
    with pytest.raises(ValueError, match=r"^Stream CLIP \(VRAM offload\): input vram_budget"):
        cls().stream(clip, vram_budget=budget)
    if budget != "0.00001":
        assert isinstance(cls.VALIDATE_INPUTS(budget), str)


def test_something_that_is_not_a_clip_fails_at_the_node(host: Host, nodes: None) -> None:
    with pytest.raises(ValueError, match=r"^Stream CLIP \(VRAM offload\): input clip: not a CLIP"):
        host.node_class("HeadroomStreamCLIP")().stream(object())


def test_a_clip_with_lora_patches_streams_its_patched_weights(
    host: Host, nodes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LoRA loader's patches (here one diff patch on a streamed layer) are applied by the host's load
    before the streamer attaches: the streamed encode is the patched stock encode, not the plain one."""
    clip = _clip(host, "clip_l")
    layers = host.pack_module("memory.streaming.text_layouts").discover_text_blocks(clip.cond_stage_model)
    key = next(
        name
        for name, _ in clip.cond_stage_model.named_parameters()
        if name.startswith(layers.names[4] + ".") and name.endswith("fc1.weight")
    )
    weight = clip.cond_stage_model.get_parameter(key)
    patched = clip.clone()
    patched.add_patches({key: (torch.full(weight.shape, 0.5),)}, 1.0)
    plain = _conditioning(host.run(_encode_prompt(_put(clip), None)))
    out, stock, _ = _streamed_encode(host, patched, monkeypatch)
    assert not torch.equal(stock[0][0], plain[0][0]), "the patch changes the conditioning"


@torch.inference_mode()
def test_the_hosts_load_held_back_loads_nothing_and_encodes_the_same(host: Host, nodes: None) -> None:
    """On a GPU a streamed encoder's own host load is held back (``host_load.hold_back``) so the streamer's
    uploads are the only ones. That runs the host's real ``ModelPatcher.load`` with a 1-byte budget: here
    it takes those arguments, loads nothing (0 bytes, the host's low-VRAM mode) and the conditioning is
    the stock one; undone, the host loads it all again."""
    clip = _clip(host, "clip_l")
    host_load = host.pack_module("nodes.host.host_load")
    encode = host.node_class("CLIPTextEncode")()
    (stock,) = encode.encode(clip, PROMPT)
    host.free()
    held = clip.clone()
    undo = host_load.hold_back(held.patcher)
    if undo is None:
        pytest.skip("the 2024 host's patcher has no load(lowvram_model_memory, full_load) to hold back")
    try:
        (conditioning,) = encode.encode(held, PROMPT)
        loaded = held.patcher.loaded_size()
    finally:
        undo()
    assert_same_conditioning(conditioning, stock)
    assert loaded == 0 < held.patcher.model_size()
    host.free()
    encode.encode(held, PROMPT)
    assert held.patcher.loaded_size() == held.patcher.model_size(), "undone: the host's own full load"
