"""The block streamer on CPU: same bits as the resident forward, bytes within the budget, one upload
per streamed block per step, the order learnt, every tensor back on the host after detach."""

from __future__ import annotations

import functools
import os
import threading

import pytest
import torch
from torch import nn

from comfyui_headroom.memory.streaming import (
    BlockStreamer,
    BudgetExceeded,
    DeviceLedger,
    choose_streaming,
    discover_blocks,
)
from comfyui_headroom.memory.streaming.discovery import module_bytes
from comfyui_headroom.memory.streaming.host_buffer import FilePages
from comfyui_headroom.memory.streaming.placement import step_time


class Block(nn.Module):
    def __init__(self, width: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width).to(dtype)
        self.down = nn.Linear(2 * width, width).to(dtype)
        self.register_buffer("scale", torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # cast weights to the activations' dtype per op, as the host's manual-cast ops do
        h = nn.functional.linear(self.norm(x), self.up.weight.to(x.dtype), self.up.bias.to(x.dtype))
        h = nn.functional.linear(
            torch.nn.functional.gelu(h), self.down.weight.to(x.dtype), self.down.bias.to(x.dtype)
        )
        return x + h * self.scale


class TinyDiT(nn.Module):
    def __init__(
        self, width: int = 32, depth: int = 8, dtype: torch.dtype = torch.float32, order=None
    ) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.ModuleList(Block(width, dtype) for _ in range(depth))
        self.out = nn.Linear(width, 8)
        self.call_order = order or list(range(depth))

    def forward(self, x: torch.Tensor, order: list[int] | None = None) -> torch.Tensor:
        h = self.embed(x)
        for i in self.call_order if order is None else order:
            h = self.blocks[i](h)
        return self.out(h)


def _model(seed: int = 0, **kwargs) -> TinyDiT:
    torch.manual_seed(seed)
    model = TinyDiT(**kwargs)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.randn_like(p.float()) * 0.2).to(p.dtype))
    return model


def _budget(model: TinyDiT, share: float) -> tuple[int, int, list[int]]:
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    return rest + int(share * sum(blocks)) + 2 * max(blocks) + 1, rest, blocks


def _attached(model: TinyDiT, share: float) -> tuple[BlockStreamer, torch.Tensor, torch.Tensor]:
    """The model's output on a fixed input, then a streamer attached at ``share`` residency."""
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    budget, rest, blocks = _budget(model, share)
    streamer = BlockStreamer(model, discover_blocks(model), choose_streaming(blocks, rest, budget), "cpu")
    streamer.attach()
    return streamer, x, expected


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.7, 1.0])
def test_streamed_forward_is_bitwise_the_resident_forward(share: float) -> None:
    model = _model()
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = [model(x * (s + 1)) for s in range(3)]
    budget, rest, blocks = _budget(model, share)
    choice = choose_streaming(blocks, rest, budget)
    ledger = DeviceLedger(budget)
    originals = {n: p.detach().clone() for n, p in model.named_parameters()}
    streamer = BlockStreamer(model, discover_blocks(model), choice, "cpu", ledger=ledger)
    streamer.attach()
    seen: list[int] = []  # where a streamed block's weight lives while it computes
    streamed = [i for i in range(len(blocks)) if i not in choice.resident]
    if streamed:
        model.blocks[streamed[-1]].register_forward_pre_hook(  # runs after the streamer's own
            lambda m, a: seen.append(m.down.weight.data_ptr())
        )
    slots = [(s.buffer.data_ptr(), s.buffer.data_ptr() + s.buffer.numel()) for s in streamer._slots]
    with torch.no_grad():
        got = [model(x * (s + 1)) for s in range(3)]
    assert all(any(a <= ptr < b for a, b in slots) for ptr in seen), "computes from a ring slot"
    assert len(seen) == (3 if streamed else 0)
    summary = streamer.summary()
    ahead = len(streamer._inflight)  # the next step's first uploads, already issued
    streamer.detach(release=True)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)
    assert ledger.peak <= budget
    assert summary["uploads"] == 3 * len(streamed) + ahead, "one upload per streamed block per step"
    assert ahead <= choice.depth + 1
    assert summary["misses"] == 0
    assert summary["host_bytes"] <= 1.1 * summary["streamed_bytes"] + 64 * 8
    assert all(torch.equal(p, originals[n]) for n, p in model.named_parameters()), "nothing changed"
    assert not streamer._hooks
    if share < 1.0:
        assert streamed, "the budget forces streaming"


def test_the_call_order_is_learnt_on_the_first_step() -> None:
    order = [0, 4, 1, 5, 2, 6, 3, 7]  # VACE-like interleaving of two lists
    model = _model(order=order)
    streamer, x, expected = _attached(model, 0.0)
    with torch.no_grad():
        outs = [model(x) for _ in range(4)]
    misses_after_first = streamer.stats.misses
    assert streamer.order == order
    with torch.no_grad():
        model(x)
    assert streamer.stats.misses == misses_after_first, "no miss once the order is known"
    streamer.detach()
    assert all(torch.equal(o, expected) for o in outs)


def test_a_block_called_twice_in_a_step_is_fetched_on_demand_and_still_right() -> None:
    model = _model(order=[0, 1, 2, 3, 3, 4, 5, 6, 7])
    streamer, x, expected = _attached(model, 0.25)
    with torch.no_grad():
        assert torch.equal(model(x), expected) and torch.equal(model(x), expected)
    streamer.detach()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn])
def test_low_precision_weights_stream_unchanged(dtype: torch.dtype) -> None:
    model = _model(dtype=dtype)
    streamer, x, expected = _attached(model, 0.3)
    with torch.no_grad():
        got = [model(x) for _ in range(2)]
    streamer.detach()
    assert all(torch.equal(g, expected) for g in got)
    assert streamer.stats.uploads >= 2 * len(streamer.streamed) > 0 and streamer.stats.misses == 0
    assert model.blocks[0].up.weight.dtype == dtype


def test_a_budget_below_the_minimum_is_refused_with_the_minimum() -> None:
    model = _model()
    _, rest, blocks = _budget(model, 0.0)
    with pytest.raises(BudgetExceeded, match="needs at least"):
        choose_streaming(blocks, rest, rest + max(blocks) - 1)


def test_without_room_for_two_slots_it_streams_synchronously_and_still_exactly() -> None:
    model = _model()
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    _, rest, blocks = _budget(model, 0.0)
    budget = rest + max(blocks)  # one slot: no prefetch
    choice = choose_streaming(blocks, rest, budget)
    assert choice.depth == 0 and not choice.resident
    streamer = BlockStreamer(model, discover_blocks(model), choice, "cpu", ledger=DeviceLedger(budget))
    streamer.attach()
    with torch.no_grad():
        got = [model(x) for _ in range(2)]
    assert streamer.stats.misses == 0 and streamer.ledger.peak <= budget
    streamer.detach()
    assert all(torch.equal(g, expected) for g in got)


def test_the_ledger_refuses_bytes_beyond_the_budget() -> None:
    model = _model()
    budget, rest, blocks = _budget(model, 0.5)
    choice = choose_streaming(blocks, rest, budget)
    streamer = BlockStreamer(model, discover_blocks(model), choice, "cpu", ledger=DeviceLedger(budget // 2))
    with pytest.raises(BudgetExceeded):
        streamer.attach()
    assert not streamer.attached and not streamer._hooks
    x = torch.randn(2, 8)
    with torch.no_grad():
        model(x)  # the model still runs where it was


def test_everything_resident_when_it_fits() -> None:
    choice = choose_streaming([100] * 10, 50, 2000)
    assert choice.resident == frozenset(range(10)) and choice.streamed_bytes == 0


def test_resident_blocks_are_chosen_by_cost_not_position() -> None:
    # uniform blocks: resident ones spread between streamed ones hide uploads behind their compute
    blocks, compute = [100] * 10, [1.0] * 10
    choice = choose_streaming(blocks, 0, 650, compute_s=compute, bandwidth=50.0)
    first_n = frozenset(range(len(choice.resident)))
    assert choice.step_s < step_time(blocks, compute, first_n, choice.depth, 50.0)
    assert choice.step_s == pytest.approx(choice.bound_s)
    # mixed blocks with no compute known: the biggest stay, streaming the fewest bytes
    mixed = choose_streaming([100] * 5 + [300] * 5, 0, 1200)
    assert mixed.resident <= frozenset(range(5, 10))


def test_discovery_of_known_layouts_and_the_generic_rule() -> None:
    class Flux(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.img_in = nn.Linear(4, 4)
            self.double_blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
            self.single_blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    class Unet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
            self.middle_block = nn.Linear(4, 4)
            self.output_blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))

    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(4, 4)
            self.stages = nn.ModuleList(
                nn.Sequential(nn.Linear(64, 64), nn.ModuleList([nn.Linear(8, 8)])) for _ in range(3)
            )

    flux = discover_blocks(Flux())
    assert flux.family == "flux" and flux.names == (
        "double_blocks.0", "double_blocks.1", "single_blocks.0", "single_blocks.1", "single_blocks.2",
    )  # fmt: skip
    assert discover_blocks(Unet()).names == (
        "input_blocks.0", "input_blocks.1", "middle_block", "output_blocks.0", "output_blocks.1",
    )  # fmt: skip
    odd = discover_blocks(Odd())
    assert odd.generic and odd.names == ("stages.0", "stages.1", "stages.2")


class SeqBlock(nn.Sequential):
    """A block the model never calls itself: it runs the children, as the host's UNet does."""


class ChildCalledNet(nn.Module):
    def __init__(self, width: int = 16, depth: int = 6) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.input_blocks = nn.ModuleList(
            SeqBlock(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width)) for _ in range(depth)
        )
        self.middle_block = SeqBlock(nn.Linear(width, width))
        self.output_blocks = nn.ModuleList(SeqBlock(nn.Linear(2 * width, width)) for _ in range(depth))
        self.out = nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, skips = self.embed(x), []
        for block in self.input_blocks:
            for layer in block:  # forward_timestep_embed: the block's own forward never runs
                h = layer(h)
            skips.append(h)
        for layer in self.middle_block:
            h = layer(h)
        for block in self.output_blocks:
            for layer in block:
                h = layer(torch.cat([h, skips.pop()], dim=-1))
        return self.out(h)


def _stream(model: nn.Module, share: float) -> tuple[BlockStreamer, DeviceLedger]:
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    budget = rest + int(share * sum(blocks)) + 2 * max(blocks) + 1
    ledger = DeviceLedger(budget)
    streamer = BlockStreamer(model, layout, choose_streaming(blocks, rest, budget), "cpu", ledger=ledger)
    streamer.attach()
    return streamer, ledger


def _in_ring(streamer: BlockStreamer, tensor: torch.Tensor) -> bool:
    ptr = tensor.data_ptr()
    return any(s.buffer.data_ptr() <= ptr < s.buffer.data_ptr() + s.buffer.numel() for s in streamer._slots)


def test_blocks_entered_through_their_children_stream_too() -> None:
    torch.manual_seed(1)
    model = ChildCalledNet()
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = model(x)
    streamer, ledger = _stream(model, 0.3)
    n = len(streamer.streamed)
    first = model.input_blocks[streamer.streamed[0]][0]
    seen: list[bool] = []
    first.register_forward_pre_hook(lambda m, a: seen.append(_in_ring(streamer, m.weight)))
    before = streamer.stats.uploads
    with torch.no_grad():
        got = [model(x) for _ in range(3)]
    uploads = streamer.stats.uploads - before
    streamer.detach(release=True)
    assert all(torch.equal(g, expected) for g in got)
    assert n >= 4 and seen == [True] * 3, "the block computes from a ring slot"
    assert uploads == 3 * n and streamer.stats.misses == 0, "each streamed block uploaded once per step"
    assert ledger.peak <= ledger.budget


def test_a_module_shared_with_another_block_does_not_enter_a_block() -> None:
    torch.manual_seed(3)
    model = ChildCalledNet()
    shared = nn.GELU()  # weightless (a shared weight cannot stream), like a shared rope embedder
    for block in model.input_blocks:  # one module in every block (and so in none alone)
        block.append(shared)
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = model(x)
    streamer, _ = _stream(model, 0.3)
    with torch.no_grad():
        got = [model(x) for _ in range(2)]
    streamer.detach()
    assert all(torch.equal(g, expected) for g in got)
    assert streamer.stats.misses == 0, "the shared module did not pull another block in"


@pytest.mark.parametrize("model_kind", ["dit", "children"])
def test_calls_run_together_upload_each_block_once_per_step_and_match_alone(model_kind: str) -> None:
    torch.manual_seed(2)
    model = _model() if model_kind == "dit" else ChildCalledNet()
    inputs = [torch.randn(4, 8), torch.randn(3, 8), torch.randn(4, 8)]  # batch sizes differ, as chunks may
    with torch.no_grad():
        expected = [[model(x * (s + 1)) for x in inputs] for s in range(3)]
    streamer, ledger = _stream(model, 0.25)
    n = len(streamer.streamed)
    threads = threading.active_count()
    per_step, got = [], []
    for s in range(3):
        before = streamer.stats.uploads
        with torch.no_grad():
            got.append(streamer.run_together([functools.partial(model, x * (s + 1)) for x in inputs]))
        per_step.append(streamer.stats.uploads - before)
    stats = streamer.stats
    streamer.detach(release=True)
    for step_got, step_expected in zip(got, expected, strict=True):
        assert all(torch.equal(g, e) for g, e in zip(step_got, step_expected, strict=True))
    assert n >= 2 and per_step == [n] * 3, "one upload per streamed block per step for all three calls"
    assert stats.misses == 0 and stats.steps == 3 and stats.calls_together == 9
    assert ledger.peak <= ledger.budget
    assert threading.active_count() == threads, "the calls' threads are gone"


def test_calls_that_take_different_paths_still_match() -> None:
    model = _model()
    x = torch.randn(2, 8)
    orders = [list(range(8)), [0, 1, 2, 4, 6, 7], [0, 1, 2, 3, 3, 4, 5, 6, 7], []]  # skips, a repeat, none
    with torch.no_grad():
        expected = [model(x, order) for order in orders]
    streamer, _ = _stream(model, 0.25)
    with torch.no_grad():
        got = streamer.run_together([functools.partial(model, x, order) for order in orders])
        again = model(x)  # a plain call afterwards still streams exactly
    streamer.detach()
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))
    assert torch.equal(again, expected[0])


def test_the_calls_keep_the_callers_grad_and_inference_mode() -> None:
    model = _model()
    streamer, _ = _stream(model, 0.25)
    x = torch.randn(2, 8)

    def modes() -> tuple[bool, bool, bool]:
        out = model(x)
        return torch.is_inference_mode_enabled(), torch.is_grad_enabled(), out.is_inference()

    with torch.inference_mode():
        inside = streamer.run_together([modes, modes])
    with torch.no_grad():
        no_grad = streamer.run_together([modes, modes])
    streamer.detach()
    assert inside == [(True, False, True)] * 2
    assert no_grad == [(False, False, False)] * 2


def test_a_failing_call_stops_the_others_and_leaves_the_streamer_usable() -> None:
    model = _model()
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
    streamer, _ = _stream(model, 0.25)
    victim = model.blocks[streamer.streamed[2]].norm  # inside a streamed block, mid-round

    def fail_on_batch_of_five(m: nn.Module, args: tuple) -> None:
        if args[0].shape[0] == 5:
            raise ValueError("boom")

    hook = victim.register_forward_pre_hook(fail_on_batch_of_five)
    threads = threading.active_count()
    with torch.no_grad(), pytest.raises(ValueError, match="boom"):
        streamer.run_together([functools.partial(model, x), functools.partial(model, torch.randn(5, 8))])
    hook.remove()
    assert threading.active_count() == threads and streamer._lockstep is None and not streamer._current
    with torch.no_grad():
        assert torch.equal(model(x), expected)
        assert all(torch.equal(o, expected) for o in streamer.run_together([lambda: model(x)] * 2))
    streamer.detach()


# --- prefetch beyond what streams or fits --------------------------------------------------------
def test_a_deep_prefetch_is_capped_at_the_streamed_blocks() -> None:
    blocks = [10, 10, 10, 10, 10]
    choice = choose_streaming(blocks, 5, 5 + sum(blocks), depth=16)  # "auto" on a CPU: all of it
    streamed = len(blocks) - len(choice.resident)
    assert choice.depth <= max(streamed - 1, 0) and choice.requested_depth == 16
    assert choice.device_bytes <= 5 + sum(blocks)


def test_a_prefetch_the_budget_cannot_hold_is_lowered_to_the_deepest_ring_that_fits() -> None:
    blocks = [10, 12, 10, 10, 10]
    budget = 5 + 3 * 12  # a ring of three of the largest, nothing resident
    choice = choose_streaming(blocks, 5, budget, depth=4)
    assert (choice.depth, choice.requested_depth) == (2, 4)
    assert choice.device_bytes <= budget
    assert choose_streaming(blocks, 5, budget, depth=2).requested_depth is None  # asked what it got


# --- weights served from their file ------------------------------------------------------------------
def _file_ranges(path: str) -> list[tuple[int, int]]:
    """Where this process maps ``path`` (read apart from the streamer's own reading)."""
    with open("/proc/self/maps", encoding="utf-8") as f:
        lines = [line.split() for line in f if line.rstrip().endswith(path)]
    return [tuple(int(x, 16) for x in fields[0].split("-")) for fields in lines]  # type: ignore[misc]


def _in_file(t: torch.Tensor, ranges: list[tuple[int, int]]) -> bool:
    end = t.data_ptr() + t.numel() * t.element_size()
    return any(a <= t.data_ptr() and end <= b for a, b in ranges)


class _GGMLLike(torch.Tensor):
    """ComfyUI-GGUF's weights in the two attributes the adapter knows them by (``gguf_storage``)."""

    __torch_function__ = torch._C._disabled_torch_function_impl


def _mixed(model: TinyDiT, path: str) -> tuple[nn.Module, nn.Module, list[tuple[int, int]]]:
    """A model whose weights view ``path`` made mixed: block 5 in private RAM, block 6's ``up`` weight a
    GGUF-like subclass over the file. Returns block 5, that module and where the file is mapped."""
    from comfyui_headroom.memory.streaming.storage import as_parameter

    private = model.blocks[5]
    for t in [*private.parameters(), *private.buffers()]:
        t.data = t.data.clone()
    ggml = model.blocks[6].up
    ggml._parameters["weight"] = as_parameter(ggml.weight.detach().as_subclass(_GGMLLike))
    ggml.weight.tensor_type, ggml.weight.tensor_shape = "F32", ggml.weight.shape
    return private, ggml, _file_ranges(path)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads file mappings from /proc (Linux)")
@pytest.mark.parametrize("opener", ["mapped_file", "safe_open"])
def test_weights_that_view_their_file_come_back_as_views_of_it(tmp_path, opener: str) -> None:
    """A "disk" component: its weights are views of its safetensors file. Streaming copies them into the
    host buffer; detach (release) puts the very same views back, no private copy, the buffer let go. A
    block made private RAM first comes back as a copy of its own (the old way), and a GGUF-like subclass
    over the file's bytes comes back as the original object."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from comfyui_headroom.memory.residency.mapped import MappedFile, bind

    model = _model()
    path = str(tmp_path / "tiny.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    if opener == "mapped_file":
        mapped = MappedFile(path)
        assert bind(model, [mapped]).kept == {}
    else:
        with safe_open(path, "pt") as f:
            for name, t in [*model.named_parameters(), *model.named_buffers()]:
                t.data = f.get_tensor(name)
    private, ggml, ranges = _mixed(model, path)
    named = dict([*model.named_parameters(), *model.named_buffers()])
    before = {n: (t, t.data_ptr(), t.detach().clone()) for n, t in named.items()}
    assert {n for n, t in named.items() if not _in_file(t, ranges)} == {
        f"blocks.5.{n}" for n, _ in [*private.named_parameters(), *private.named_buffers()]
    }
    streamer, x, expected = _attached(model, 0.0)
    assert streamer.streamed == list(range(8)) and streamer._host is not None
    host = streamer._host.data_ptr(), streamer._host.data_ptr() + streamer._host.numel()
    streaming = [*model.blocks.named_parameters(), *model.blocks.named_buffers()]
    assert all(host[0] <= t.data_ptr() < host[1] for _, t in streaming), "streams from the host buffer"
    with torch.no_grad():
        got = [model(x) for _ in range(2)]
    streamer.detach(release=True)
    assert streamer._host is None
    assert all(torch.equal(g, expected) for g in got)
    after = dict([*model.named_parameters(), *model.named_buffers()])
    for name, (obj, ptr, value) in before.items():
        t = after[name]
        assert torch.equal(t, value), name
        assert t is obj or name == "blocks.5.scale", name  # a private buffer alone comes back a new tensor
        if name.startswith("blocks.5."):
            assert not _in_file(t, ranges) and not host[0] <= t.data_ptr() < host[1], name
        else:
            assert t.data_ptr() == ptr and _in_file(t, ranges), f"{name}: not the file's view it was"
    assert type(ggml.weight) is _GGMLLike and ggml.weight.tensor_type == "F32"


def test_file_pages_reads_only_regular_files(tmp_path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "1000-2000 r--p 00000000 fe:00 1 /models/a.safetensors\n"
        "2000-3000 r--p 00001000 fe:00 1 /models/a.safetensors\n"
        "4000-5000 rw-p 00000000 00:00 0 \n"
        "5000-6000 rw-s 00000000 00:05 2 /dev/shm/torch_1\n"
        "6000-7000 rw-p 00000000 00:05 3 /tmp/gone (deleted)\n"
        "7000-8000 rw-p 00000000 00:00 0 [heap]\n"
    )
    pages = FilePages(str(maps))

    class At:  # a CPU tensor's address and size, without memory at that address
        def __init__(self, ptr: int, nbytes: int) -> None:
            self.device, self.ptr, self.nbytes = torch.device("cpu"), ptr, nbytes

        def data_ptr(self) -> int:
            return self.ptr

        def numel(self) -> int:
            return self.nbytes

        def element_size(self) -> int:
            return 1

    assert pages.bytes_in([At(0x1800, 0x1000)]) == 0x1000, "a file mapped in two pieces is one range"
    assert pages.bytes_in([At(0x2800, 0x1000)]) == 0, "not wholly in the file"
    assert pages.bytes_in([At(p, 16) for p in (0x4000, 0x5000, 0x6000, 0x7000)]) == 0
    assert FilePages(str(tmp_path / "absent")).bytes_in([At(0x1800, 16)]) == 0, "nothing readable: none"


# --- the reported bound -----------------------------------------------------------------------------
def test_the_bound_is_a_lower_bound_of_the_step_time_even_with_a_slow_first_step(monkeypatch) -> None:
    """A fake clock: every block computes for 9 s on its first call (warm-up) and 0.5 s after. The
    bound must stay at or below the measured step time (it was the first step's compute, 8x the rest)."""
    import types

    from comfyui_headroom.memory.streaming import streamer as streamer_module

    now = [0.0]

    def clock() -> float:  # each reading a microsecond on: an upload between two readings takes 1 us
        now[0] += 1e-6
        return now[0]

    monkeypatch.setattr(streamer_module, "time", types.SimpleNamespace(perf_counter=clock))
    model = _model()
    calls: dict[int, int] = {}

    def compute(module, args, out):  # registered before the streamer's hooks: inside the block's time
        calls[id(module)] = calls.get(id(module), 0) + 1
        now[0] += 9.0 if calls[id(module)] == 1 else 0.5

    for block in model.blocks:
        block.register_forward_hook(compute)
    budget, rest, blocks = _budget(model, 0.25)
    streamer = BlockStreamer(model, discover_blocks(model), choose_streaming(blocks, rest, budget), "cpu")
    streamer.attach()
    try:
        with torch.no_grad():
            for _ in range(5):
                model(torch.randn(2, 8))
        summary = streamer.summary()
    finally:
        streamer.detach()
    streamed = len(streamer.streamed)
    assert streamed >= 4 and summary["steps"] == 5
    assert summary["step_s"] == pytest.approx(0.5 * len(blocks), abs=1e-3)
    assert 0.5 * streamed <= summary["bound_s"] <= summary["step_s"]
    for step, bound in streamer.stats.step_bounds():
        assert bound <= step


def test_only_the_calibration_steps_time_their_blocks_and_uploads() -> None:
    """The README's calibration: the first CALIBRATE_STEPS steps time each block and upload; later steps
    record one mark each (their step time) and no per-block timing at all."""
    from comfyui_headroom.memory.streaming.streamer import CALIBRATE_STEPS

    model = _model()
    budget, rest, blocks = _budget(model, 0.25)
    streamer = BlockStreamer(model, discover_blocks(model), choose_streaming(blocks, rest, budget), "cpu")
    streamer.attach()
    try:
        with torch.no_grad():
            for _ in range(CALIBRATE_STEPS + 3):
                model(torch.randn(2, 8))
        summary = streamer.summary()
    finally:
        streamer.detach()
    stats = streamer.stats
    assert CALIBRATE_STEPS == 2 and summary["steps"] == 5
    assert [timed for _, _, timed in stats.steps_iv] == [True, True, False, False]
    assert sum(len(v) for v in stats.block_compute_s.values()) == 2 * len(streamer.streamed)
    n = len(streamer.streamed)
    assert 2 * n <= len(stats.upload_s) <= 2 * n + streamer.choice.depth + 1 < 5 * n <= stats.uploads
    assert summary["bound_s"] is not None and summary["h2d_bytes_per_s"] is not None
