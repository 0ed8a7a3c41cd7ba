"""Streaming in place (``pin=False``): no host copy. Each streamed tensor uploads from where it lives, its
RAM or its file's pages, on an upload thread where asked; the result is bitwise the resident one and every
tensor is its very own object again after detach."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
import torch
from unit.test_streaming import _budget, _GGMLLike, _in_file, _mixed, _model

from comfyui_headroom.memory.streaming import BlockStreamer, choose_streaming, discover_blocks
from headroom_testing.sigbus import assert_sigbus_or_file_changed, run_child


def _streamer(model: torch.nn.Module, share: float, **kwargs: object) -> BlockStreamer:
    budget, rest, blocks = _budget(model, share)
    choice = choose_streaming(blocks, rest, budget)
    return BlockStreamer(model, discover_blocks(model), choice, "cpu", pin=False, **kwargs)


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return dict([*model.named_parameters(), *model.named_buffers()])


@pytest.mark.parametrize("thread", [False, True])
@pytest.mark.parametrize("share", [0.0, 0.5])
def test_in_place_streaming_is_bitwise_and_makes_no_host_copy(share: float, thread: bool) -> None:
    model = _model()
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = [model(x * (s + 1)) for s in range(3)]
    before = {n: (t, t.data_ptr()) for n, t in _tensors(model).items()}
    streamer = _streamer(model, share, upload_thread=thread)
    copied_on: set[int] = set()
    copy = streamer._copy

    def spy(*args: object) -> object:
        copied_on.add(threading.get_ident())
        return copy(*args)

    streamer._copy = spy  # type: ignore[method-assign]
    streamer.attach()
    last = model.blocks[streamer.streamed[-1]]
    seen: list[int] = []
    last.register_forward_pre_hook(lambda m, a: seen.append(m.down.weight.data_ptr()))  # after ours
    slots = [(s.buffer.data_ptr(), s.buffer.data_ptr() + s.buffer.numel()) for s in streamer._slots]
    with torch.no_grad():
        got = [model(x * (s + 1)) for s in range(3)]
    between = last.down.weight.data_ptr()  # the block has computed: it points at its own tensor again
    summary = streamer.summary()
    ahead = len(streamer._inflight)
    streamer.detach(release=True)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert seen and all(any(a <= p < b for a, b in slots) for p in seen), "computes from a ring slot"
    assert between == before[f"blocks.{streamer.streamed[-1]}.down.weight"][1]
    assert summary["host_bytes"] == 0 and summary["uploads_from"] == "RAM"
    assert summary["uploads"] == 3 * len(streamer.streamed) + ahead and summary["misses"] == 0
    assert (threading.get_ident() not in copied_on) == thread and len(copied_on) == 1
    after = _tensors(model)
    for name, (obj, ptr) in before.items():
        assert after[name] is obj and after[name].data_ptr() == ptr, name
    assert streamer._pool is None and not streamer._hooks


@pytest.mark.parametrize("thread", [False, True])
def test_a_miss_waits_for_the_uploads_under_way(thread: bool) -> None:
    model = _model(order=[0, 1, 2, 3, 3, 4, 5, 6, 7])
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    streamer = _streamer(model, 0.25, upload_thread=thread)
    streamer.attach()
    with torch.no_grad():
        assert torch.equal(model(x), expected) and torch.equal(model(x), expected)
    assert streamer.stats.misses > 0
    streamer.detach()


def test_an_upload_that_fails_raises_in_the_compute_and_detach_still_restores() -> None:
    model = _model()
    before = {n: t for n, t in _tensors(model).items()}
    streamer = _streamer(model, 0.0, upload_thread=True)
    streamer.attach()
    copy = streamer._copy

    def broken(pairs, *args):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk read failed")

    streamer._copy = broken  # type: ignore[method-assign]
    with torch.no_grad(), pytest.raises(RuntimeError, match="disk read failed"):
        for _ in range(2):
            model(torch.randn(2, 8))
    streamer._copy = copy  # type: ignore[method-assign]
    streamer.detach(release=True)
    after = _tensors(model)
    assert all(after[n] is t for n, t in before.items())


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads file mappings from /proc (Linux)")
def test_a_disk_component_streams_from_its_file_pages(tmp_path) -> None:
    """The plan's stream<-disk: the weights are views of their safetensors file and stay so while they
    stream (between computes they point at the file's pages, nothing private is made of them); a block in
    private RAM streams from that RAM, and a GGUF-like subclass over the file from the file."""
    from safetensors.torch import save_file

    from comfyui_headroom.memory.residency.mapped import MappedFile, bind

    model = _model()
    path = str(tmp_path / "tiny.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    assert bind(model, [MappedFile(path)]).kept == {}
    _, ggml, ranges = _mixed(model, path)
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    before = {n: (t, t.data_ptr()) for n, t in _tensors(model).items()}
    streamer = _streamer(model, 0.0)
    streamer.attach()
    with torch.no_grad():
        got = [model(x) for _ in range(2)]
    streaming = dict([*model.blocks.named_parameters(), *model.blocks.named_buffers()])
    in_file = {n for n, t in streaming.items() if _in_file(t, ranges)}
    summary = streamer.summary()
    streamer.detach(release=True)
    assert all(torch.equal(g, expected) for g in got)
    assert in_file == {n for n in streaming if not n.startswith("5.")}, "between computes: the file's pages"
    assert summary["host_bytes"] == 0
    assert summary["uploads_from"].startswith("file pages (") and "and RAM" in summary["uploads_from"]
    after = _tensors(model)
    for name, (obj, ptr) in before.items():
        assert after[name] is obj and after[name].data_ptr() == ptr, name
    assert type(ggml.weight) is _GGMLLike


@pytest.mark.parametrize("same_layout", [True, False])
def test_a_host_buffer_left_in_place_is_taken_again_without_a_copy(same_layout: bool) -> None:
    """``detach()`` without release leaves the streamed tensors in the host buffer (a pinned copy kept for
    the next encode); the next streamer of the same layout takes that buffer and copies nothing. Another
    layout (other resident blocks) gets a buffer of its own, filled from the old one."""
    model = _model()
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    budget, rest, blocks = _budget(model, 0.25)
    first = BlockStreamer(model, discover_blocks(model), choose_streaming(blocks, rest, budget), "cpu")
    first.attach()
    with torch.no_grad():
        assert torch.equal(model(x), expected)
    first.detach()
    buffer = first._host
    assert buffer is not None
    span = buffer.data_ptr(), buffer.data_ptr() + buffer.numel()
    kept = [t for i in first.streamed for t in model.blocks[i].parameters()]
    assert all(span[0] <= t.data_ptr() < span[1] for t in kept), "left in the buffer"
    copied = []
    original_copy = torch.Tensor.copy_

    def counting(self: torch.Tensor, src: torch.Tensor, *args: object, **kw: object) -> torch.Tensor:
        copied.append(self.numel())
        return original_copy(self, src, *args, **kw)

    share = 0.25 if same_layout else 0.6
    budget, rest, blocks = _budget(model, share)
    second = BlockStreamer(model, discover_blocks(model), choose_streaming(blocks, rest, budget), "cpu")
    torch.Tensor.copy_ = counting  # type: ignore[method-assign]
    try:
        second._build_host_buffer()
    finally:
        torch.Tensor.copy_ = original_copy  # type: ignore[method-assign]
    assert second._host is not None
    assert (second._host.data_ptr() == buffer.data_ptr()) == same_layout
    assert (copied == []) == same_layout
    second.detach()
    second = BlockStreamer(model, discover_blocks(model), choose_streaming(blocks, rest, budget), "cpu")
    second.attach()
    with torch.no_grad():
        assert torch.equal(model(x), expected)
    second.detach(release=True)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads file mappings from /proc (Linux)")
def test_a_pinned_cap_buffers_the_blocks_it_holds_and_streams_the_rest_in_place(tmp_path) -> None:
    """The plan's stream<-pinned+ram: ``pin_bytes`` holds three blocks; they upload from the buffer, the
    other five from where they are (their file's pages, block 5 its RAM). Bitwise, and every object back."""
    from safetensors.torch import save_file

    from comfyui_headroom.memory.residency.mapped import MappedFile, bind

    model = _model()
    path = str(tmp_path / "tiny.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    assert bind(model, [MappedFile(path)]).kept == {}
    _mixed(model, path)
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    before = {n: t for n, t in _tensors(model).items()}
    budget, rest, blocks = _budget(model, 0.0)
    choice = choose_streaming(blocks, rest, budget)
    streamer = BlockStreamer(model, discover_blocks(model), choice, "cpu", pin=True, pin_bytes=3 * blocks[0])
    streamer.attach()
    with torch.no_grad():
        got = [model(x) for _ in range(2)]
    summary = streamer.summary()
    streamer.detach(release=True)
    assert all(torch.equal(g, expected) for g in got)
    assert sorted(streamer.streamed) == list(range(8)) and summary["misses"] == 0
    assert blocks[0] <= summary["host_bytes"] <= 3 * blocks[0] + 64 * 32, "three blocks in the buffer"
    assert summary["uploads_from"].startswith("RAM (") and "and file pages (" in summary["uploads_from"]
    after = _tensors(model)
    assert all(after[n] is t for n, t in before.items() if not n.startswith("blocks.5."))


# A sampling that streams a disk component's blocks from their file, whose file is truncated after block 1
# has computed (a copy or a re-download over it). Run in a child: a SIGBUS shows as its exit signal.
TRUNCATED_MID_RUN = r"""
import os, sys
import torch
sys.path.insert(0, sys.argv[1])
from safetensors.torch import save_file
from unit.test_streaming import _model
from unit.test_streaming_in_place import _streamer
from comfyui_headroom.memory.residency.mapped import MappedFile, bind
from comfyui_headroom.memory.streaming import streamer as streamer_module
from headroom_testing.sigbus import report

path, through = sys.argv[2], sys.argv[3]
if through == "mapping":  # the copies as they were: straight from the mapping's pages
    streamer_module.file_read = lambda t: None
model = _model(width=128)
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
mapped = MappedFile(path)  # held, as the loader's handle holds its files
assert bind(model, [mapped]).kept == {}
streamer = _streamer(model, 0.0)
streamer.attach()
model.blocks[1].register_forward_hook(lambda *a: os.truncate(path, os.path.getsize(path) // 2))
with torch.no_grad():
    report(lambda: [model(torch.randn(2, 8)) for step in range(3)])
"""


@pytest.mark.skipif(not hasattr(os, "preadv") or sys.platform != "linux", reason="SIGBUS semantics: Linux")
@pytest.mark.parametrize("through", ["file", "mapping"])
def test_a_file_truncated_between_blocks_is_an_error_not_sigbus(tmp_path: Path, through: str) -> None:
    """Uploads of a mapped file's blocks read through the file: a file truncated mid-sampling is a
    FileChanged naming it at the next upload. The same run copying from the mapping's pages, as before,
    is killed by SIGBUS (which is what the child's exit shows)."""
    tests = str(Path(__file__).resolve().parents[1])
    child = run_child(TRUNCATED_MID_RUN, tests, str(tmp_path / "dit.safetensors"), through)
    printed = "FileChanged: dit.safetensors changed on disk after Headroom mapped it"
    assert_sigbus_or_file_changed(child, through == "mapping", printed)
    assert through == "mapping" or "its size went from" in child.stdout
