"""Stream a model's blocks through a fixed ring of device slots, uploads ahead of compute.

``attach`` puts the non-block weights and the resident blocks on the device (their host tensors
are kept, so ``detach`` only rebinds: nothing is ever copied back), and moves every streamed
block's tensors into one host buffer allocated once (pinned when the device is CUDA and pinning
works; pinned bytes = streamed bytes plus alignment; a tensor that is a mapped file's pages also
keeps its original, which ``detach`` puts back: see ``host_buffer``). It then hooks each streamed
block: when it is entered (its forward or a direct child's), compute waits for its upload's event and
its parameters become views of its ring slot; when it is left, they point back at the host buffer and the slot
takes the next upload. Model calls of one step that the host runs separately (cond and uncond) can
share each upload through ``run_together`` (see ``lockstep``). Uploads go on a
side CUDA stream into ``depth + 1`` slots, each the size of the largest streamed block, so once
warm nothing is allocated per step. The order of uploads is learnt from the first step (a block
called out of order is uploaded on demand and counted as a miss). On a CPU device the same code
runs with synchronous copies, which is how the tests check it bit for bit. Quantized weights (tensor
subclasses) stream their inner tensors, and are rebuilt around the copies: see ``storage``.
"""

from __future__ import annotations

import functools
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .discovery import BlockLayout
from .host_buffer import Entry, bind, direct, fill, lay_out, part_views, restore, swap, view
from .ledger import DeviceLedger
from .lockstep import LockStep
from .placement import StreamingChoice
from .storage import packed, storage_bytes

log = logging.getLogger(__name__)


@dataclass
class StreamStats:
    uploads: int = 0
    uploaded_bytes: int = 0
    misses: int = 0  # blocks called out of the learnt order (uploaded on demand)
    calls_together: int = 0  # model calls that shared their uploads with another call (run_together)
    steps: int = 0
    pinned: bool = False
    cuda: bool = False
    host_bytes: int = 0  # the streamed blocks' host buffer
    streamed_bytes: int = 0
    block_compute_s: dict[int, list[float]] = field(default_factory=dict)
    upload_s: list[tuple[int, float]] = field(default_factory=list)  # (bytes, seconds)
    step_s: list[float] = field(default_factory=list)
    # the same as intervals in seconds from ``_origin``, and the steps (start, end, all of it timed)
    compute_iv: list[tuple[float, float]] = field(default_factory=list)
    upload_iv: list[tuple[float, float]] = field(default_factory=list)
    steps_iv: list[tuple[float, float, bool]] = field(default_factory=list)
    # timing marks not yet read: perf_counter floats on CPU, CUDA events (read after a sync) on GPU
    _origin: Any = None
    _compute_marks: list[tuple[int, Any, Any]] = field(default_factory=list)
    _upload_marks: list[tuple[int, Any, Any]] = field(default_factory=list)
    _step_marks: list[tuple[Any, bool]] = field(default_factory=list)  # (mark, timed)

    def resolve(self) -> None:
        """Turn the timing marks into seconds (synchronises the device once, after the fact)."""
        marks = [m for _, a, b in self._compute_marks + self._upload_marks for m in (a, b)]
        marks += [m for m, _ in self._step_marks]
        if any(not isinstance(m, float) for m in marks):
            torch.cuda.synchronize()
        at = functools.partial(_seconds, self._origin)
        for block, a, b in self._compute_marks:
            self.block_compute_s.setdefault(block, []).append(_seconds(a, b))
            self.compute_iv.append((at(a), at(b)))
        for nbytes, a, b in self._upload_marks:
            self.upload_s.append((nbytes, _seconds(a, b)))
            self.upload_iv.append((at(a), at(b)))
        steps = self._step_marks
        for (a, timed), (b, _) in zip(steps, steps[1:], strict=False):
            self.step_s.append(_seconds(a, b))
            self.steps_iv.append((at(a), at(b), timed))
        self._compute_marks, self._upload_marks = [], []
        self._step_marks = steps[-1:]

    def bandwidth(self) -> float | None:
        """Measured host-to-device bytes per second (median of the timed uploads)."""
        rates = [b / s for b, s in self.upload_s if s > 0]
        return statistics.median(rates) if rates else None

    def compute_s(self) -> float:
        """Median compute per step of the streamed blocks."""
        return sum(statistics.median(v) for v in self.block_compute_s.values() if v)

    def step_bounds(self) -> list[tuple[float, float]]:
        """(step time, lower bound) of every timed step. The bound is the time measured busy inside
        that step's own interval, so it cannot exceed the step: on CUDA the busier of the compute
        stream and the copy stream (they overlap), on a CPU compute and the RAM copies together (one
        thread does both; there is no PCIe link to overlap)."""
        out = []
        for a, b, timed in self.steps_iv:
            if not timed:
                continue
            compute = _busy(self.compute_iv, a, b)
            upload = _busy(self.upload_iv, a, b)
            both = _busy(self.compute_iv + self.upload_iv, a, b)
            out.append((b - a, max(compute, upload) if self.cuda else both))
        return out

    def bound_s(self) -> float | None:
        """The median of the per-step bounds: no step ran faster than its own bound, so this is at most
        the median step time (None until a step is timed, or when some steps were not timed)."""
        bounds = self.step_bounds()
        if not bounds or len(bounds) < len(self.steps_iv):
            return None
        return statistics.median(bound for _, bound in bounds)


def _busy(intervals: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """Length of the union of ``intervals`` clipped to [a, b]."""
    total, end = 0.0, a
    for lo, hi in sorted(intervals):
        lo, hi = max(lo, end), min(hi, b)
        if hi > lo:
            total += hi - lo
            end = hi
    return total


def _seconds(a: Any, b: Any) -> float:
    return b - a if isinstance(a, float) else a.elapsed_time(b) / 1000


@dataclass
class _Slot:
    index: int
    buffer: torch.Tensor  # uint8 on the device
    done: Any = None  # CUDA event: the last block computed from this slot has finished


@dataclass
class _Upload:
    block: int
    slot: _Slot
    ready: Any  # CUDA event recorded after the copy (a time or None on CPU)


class BlockStreamer:
    def __init__(
        self,
        model: nn.Module,
        layout: BlockLayout,
        choice: StreamingChoice,
        device: torch.device | str,
        *,
        pin: bool = True,
        ledger: DeviceLedger | None = None,
        calibrate_steps: int | None = None,
    ) -> None:
        self.model, self.layout, self.choice = model, layout, choice
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.want_pin = pin
        self.ledger = ledger or DeviceLedger()
        self.calibrate_steps = calibrate_steps
        self.stats = StreamStats(cuda=self.cuda)
        self.streamed = [i for i in range(len(layout.blocks)) if i not in choice.resident]
        self.order: list[int] = list(self.streamed)  # learnt on the first step
        self._observed: list[int] = []
        self._order_known = False
        self._host_tensors: dict[tuple[int, str], torch.Tensor] = {}  # rest/resident: their host copies
        self._host_objects: dict[tuple[int, str], torch.Tensor] = {}  # the same, tensor subclasses
        self._entries: dict[int, list[Entry]] = {}
        self._span: dict[int, tuple[int, int]] = {}  # block -> (offset, nbytes) in the host buffer
        self._host: torch.Tensor | None = None
        self._slots: list[_Slot] = []
        self._free: deque[_Slot] = deque()
        self._inflight: deque[_Upload] = deque()
        self._current: dict[int, tuple[_Slot, float]] = {}
        self._pos = 0
        self._hooks: list[Any] = []
        self._side = None
        self._lockstep: LockStep | None = None
        self.attached = False

    # --- setup -----------------------------------------------------------------------------------
    def attach(self) -> StreamingChoice:
        """Place the model for streaming (see the module docstring); returns the choice in force."""
        if self.attached:
            return self.choice
        block_of = {id(m): i for i, (_, m) in enumerate(self.layout.blocks)}
        self.stats._origin = self._mark()  # every timing mark is read relative to this one
        try:
            self._place_resident(block_of)
            self._build_host_buffer()
            self._build_ring()
            self._hook()
            if self.streamed:
                self._top_up()  # the first blocks upload while the model's head runs
        except BaseException:
            self.detach(release=True)
            raise
        self.attached = True
        return self.choice

    def _owned(self, module: nn.Module) -> list[tuple[nn.Module, str, bool, torch.Tensor]]:
        return [entry for sub in module.modules() for entry in direct(sub)]

    def _place_resident(self, block_of: dict[int, int]) -> None:
        """Non-block tensors and resident blocks go to the device; their host tensors are kept."""
        streamed_ids = {id(self.layout.blocks[i][1]) for i in self.streamed}
        stack: list[tuple[nn.Module, str]] = [(self.model, "rest")]
        while stack:
            module, owner = stack.pop()
            if id(module) in streamed_ids:
                continue
            if id(module) in block_of and owner == "rest":
                owner = f"resident:{self.layout.blocks[block_of[id(module)]][0]}"
            for sub, name, is_param, tensor in direct(module):
                self.ledger.add(owner, storage_bytes(tensor))
                inner = packed(tensor)
                if inner is None:
                    self._host_tensors[(id(sub), name)] = tensor.data if is_param else tensor
                    bind(sub, name, is_param, tensor.data.to(self.device))
                else:  # the storage moves as it is, in a wrapper rebuilt around it
                    self._host_objects[(id(sub), name)] = tensor
                    swap(sub, name, is_param, inner.rebuild([t.to(self.device) for t in inner.inner]))
            stack += [(child, owner) for child in module.children()]

    def _build_host_buffer(self) -> None:
        """The streamed blocks' tensors move into one host buffer (see ``host_buffer``)."""
        self._entries, self._span, nbytes = lay_out([(i, self.layout.blocks[i][1]) for i in self.streamed])
        self.stats.streamed_bytes = sum(e.nbytes for v in self._entries.values() for e in v)
        if self.streamed:
            self._host, self.stats.pinned = fill(
                self._entries, self._span, nbytes, self.cuda and self.want_pin
            )
            self.stats.host_bytes = nbytes

    def _build_ring(self) -> None:
        if not self.streamed:
            return
        slot_bytes = max(n for _, n in self._span.values())
        for k in range(self.choice.depth + 1):
            self.ledger.add(f"ring:{k}", slot_bytes)
            self._slots.append(_Slot(k, torch.empty(slot_bytes, dtype=torch.uint8, device=self.device)))
        self._free = deque(self._slots)
        if self.cuda:
            self._side = torch.cuda.Stream(self.device)

    def _hook(self) -> None:
        """A streamed block is entered through its own forward or any direct child's: some hosts run
        a block's children without calling the block (the UNet's ``forward_timestep_embed``). It is
        left when its forward returns, else when the next streamed block is entered or the model's
        forward returns."""
        shared = self._shared_modules()
        for i in self.streamed:
            block = self.layout.blocks[i][1]
            for module in (block, *(c for c in block.children() if id(c) not in shared)):
                self._hooks.append(module.register_forward_pre_hook(lambda m, a, i=i: self._enter(i)))
            self._hooks.append(block.register_forward_hook(lambda m, a, o, i=i: self._leave(i)))
        if self.streamed:
            self._hooks.append(self.model.register_forward_hook(lambda m, a, o: self._leave_all()))

    def _shared_modules(self) -> set[int]:
        """Modules that are not one block's alone (also in another block or outside the blocks): a
        call of one of them must not count as entering a block."""
        seen: dict[int, int] = {}
        for _, block in self.layout.blocks:
            for module in block.modules():
                seen[id(module)] = seen.get(id(module), 0) + 1
        blocks = {id(block) for _, block in self.layout.blocks}
        stack = [self.model]
        while stack:  # the modules outside every block
            module = stack.pop()
            if id(module) not in blocks:
                seen[id(module)] = seen.get(id(module), 0) + 1
                stack += list(module.children())
        return {key for key, count in seen.items() if count > 1}

    # --- timing -----------------------------------------------------------------------------------
    def _mark(self, stream: Any = None) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream or torch.cuda.current_stream(self.device))
        return event

    @property
    def _timing(self) -> bool:
        """Every step is timed unless ``calibrate_steps`` limits it to the first ones."""
        return self.calibrate_steps is None or self.stats.steps <= self.calibrate_steps

    # --- the ring ----------------------------------------------------------------------------------
    def _bind_slot(self, e: Entry, slot: _Slot) -> None:
        if e.rebuild is None:
            bind(e.module, e.name, e.is_param, view(slot.buffer, e.offset, e))
            return
        bound = e.bound.get(slot.index)  # a slot's wrapper is built once: the same views every time
        if bound is None:
            bound = e.bound[slot.index] = e.rebuild(part_views(slot.buffer, 0, e))
        swap(e.module, e.name, e.is_param, bound)

    def _bind_host(self, e: Entry, start: int) -> None:
        if e.rebuild is not None:
            return swap(e.module, e.name, e.is_param, e.host)
        assert self._host is not None
        bind(e.module, e.name, e.is_param, view(self._host, start + e.offset, e))

    def _issue(self, block: int) -> None:
        """Upload ``block`` into a free slot (on the side stream, after the slot's last compute)."""
        slot = self._free.popleft()
        start, nbytes = self._span[block]
        assert self._host is not None
        source = self._host[start : start + nbytes]
        timing = self._timing
        if self.cuda:
            with torch.cuda.stream(self._side):
                if slot.done is not None:
                    self._side.wait_event(slot.done)
                began = self._mark(self._side) if timing else None
                slot.buffer[:nbytes].copy_(source, non_blocking=True)
                ready = torch.cuda.Event(enable_timing=timing)
                ready.record(self._side)
        else:
            began = self._mark() if timing else None
            slot.buffer[:nbytes].copy_(source)
            ready = self._mark() if timing else None
        if timing:
            self.stats._upload_marks.append((nbytes, began, ready))
        self._inflight.append(_Upload(block, slot, ready))
        self.stats.uploads += 1
        self.stats.uploaded_bytes += nbytes

    def _top_up(self) -> None:
        n = len(self.order)
        while self._free and len(self._inflight) < self.choice.depth + (0 if self._current else 1):
            self._issue(self.order[(self._pos + len(self._inflight)) % n])

    # --- lockstep.BlockRing: what run_together's scheduler calls -----------------------------------
    def rank(self, block: int) -> int:
        """How many blocks of the learnt order come before ``block`` from where the ring stands."""
        n = len(self.order)
        return (self.order.index(block) - self._pos) % n if block in self.order else n

    def _enter(self, block: int) -> None:
        if self._lockstep is not None:
            self._lockstep.enter(block)
        elif block not in self._current:  # else: another child of the block being computed
            self.acquire(block)

    def _leave(self, block: int) -> None:
        if self._lockstep is not None:
            self._lockstep.leave(block)
        elif block in self._current:
            self.release(block)

    def _leave_all(self) -> None:
        if self._lockstep is None:
            for block in list(self._current):
                self.release(block)

    def acquire(self, block: int) -> None:
        """Bind ``block`` to its uploaded slot (waiting for the upload), the held block released."""
        for held in list(self._current):
            self.release(held)
        self._track_order(block)
        if not self._inflight or self._inflight[0].block != block:
            self._miss(block)
        upload = self._inflight.popleft()
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_event(upload.ready)
        for e in self._entries[block]:
            self._bind_slot(e, upload.slot)
        self._current[block] = (upload.slot, None)
        self._pos = (self.order.index(block) + 1) % len(self.order)
        self._top_up()
        if self._timing:  # after the top-up: on a CPU its copies run here, and are timed as uploads
            self._current[block] = (upload.slot, self._mark())

    def release(self, block: int) -> None:
        """``block`` has computed: its tensors point back at the host buffer, its slot is reused."""
        slot, began = self._current.pop(block)
        if self.cuda:
            slot.done = torch.cuda.Event()
            slot.done.record(torch.cuda.current_stream(self.device))
        if began is not None:
            self.stats._compute_marks.append((block, began, self._mark()))
        start = self._span[block][0]
        for e in self._entries[block]:
            self._bind_host(e, start)
        self._free.append(slot)
        self._top_up()

    def _miss(self, block: int) -> None:
        """``block`` is not next in the ring: drop the prefetched uploads and fetch it now."""
        self.stats.misses += 1
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_stream(self._side)
        while self._inflight:
            self._free.append(self._inflight.pop().slot)
        if block not in self.order:
            self.order.append(block)
        self._pos = self.order.index(block)
        self._issue(block)

    def _track_order(self, block: int) -> None:
        """Learn the call order on the first step; the first block called again starts a step."""
        first = self.order[0] if self._order_known else (self._observed[0] if self._observed else block)
        if block == first:
            self.stats.steps += 1
            self.stats._step_marks.append((self._mark(), self._timing))
            if not self._order_known and self._observed:
                if self._observed != self.order:
                    log.info("Headroom: blocks run in another order than the layout's; using the order seen")
                    self.order = list(self._observed)
                self._order_known = True
        if not self._order_known and block not in self._observed:
            self._observed.append(block)

    # --- several calls per step ----------------------------------------------------------------------
    def run_together(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run model calls of one step (cond and uncond, when the host splits them) so that each
        streamed block is uploaded once for all of them; the results are bitwise those of running the
        calls one after another (see ``lockstep``). Without streamed blocks they just run in turn."""
        if len(calls) < 2 or not self.streamed or not self.attached:
            return [call() for call in calls]
        if self._lockstep is not None:
            raise RuntimeError("Headroom: run_together is already running on this model")
        self._leave_all()
        self._lockstep = LockStep(self, calls)
        try:
            return self._lockstep.run()
        finally:
            self._lockstep = None
            self.stats.calls_together += len(calls)

    # --- teardown ----------------------------------------------------------------------------------
    def detach(self, release: bool = False) -> None:
        """Unhook and put every tensor back on the host (rebinding only: nothing is copied back).

        Streamed tensors that were a mapped file's pages get their originals back (``host_buffer``); the
        others stay views of the host buffer (pinned memory is kept for the next run) unless ``release``,
        which copies them into ordinary tensors and frees the buffer.
        """
        if self.cuda and self._side is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._side)
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        for sub, name, is_param, _ in self._owned(self.model):
            host = self._host_tensors.get((id(sub), name))
            if host is not None:
                bind(sub, name, is_param, host)
            original = self._host_objects.get((id(sub), name))
            if original is not None:
                swap(sub, name, is_param, original)
        self._host_tensors.clear()
        self._host_objects.clear()
        if (host := self._host) is not None:
            for i, entries in self._entries.items():
                for e in entries:
                    restore(e, host, self._span[i][0], release)
            if release:
                self._host = None
        self._slots.clear()
        self._free.clear()
        self._inflight.clear()
        self._current.clear()
        self.ledger.clear()
        self.attached = False

    def summary(self) -> dict[str, Any]:
        self.stats.resolve()
        bw = self.stats.bandwidth()
        return {
            "family": self.layout.family,
            "generic_layout": self.layout.generic,
            "blocks": len(self.layout.blocks),
            "resident_blocks": len(self.choice.resident),
            "prefetch": self.choice.depth,
            "prefetch_requested": self.choice.requested_depth,
            "streamed_bytes": self.stats.streamed_bytes,
            "host_bytes": self.stats.host_bytes,
            "pinned": self.stats.pinned,
            "device_peak_bytes": self.ledger.peak,
            "uploads": self.stats.uploads,
            "misses": self.stats.misses,
            "steps": self.stats.steps,
            "calls_together": self.stats.calls_together,
            "h2d_bytes_per_s": bw,
            "step_s": statistics.median(self.stats.step_s) if self.stats.step_s else None,
            "bound_s": self.stats.bound_s(),
            "bound_kind": "busiest of compute and H2D copies" if self.cuda else "compute + RAM copies, CPU",
        }
