"""Stream a model's blocks through a fixed ring of device slots, uploads ahead of compute.

``attach`` puts the non-block weights and the resident blocks on the device (their host tensors
are kept, so ``detach`` only rebinds: nothing is ever copied back). Where the streamed blocks upload
from is ``pin``'s choice:

- ``pin=True``: every streamed block's tensors move into one host buffer allocated once (pinned when
  the device is CUDA and pinning works; pinned bytes = streamed bytes plus alignment; a tensor that is a
  mapped file's pages also keeps its original, which ``detach`` puts back: see ``host_buffer``), and a
  block uploads as one copy. The plan's ``stream<-pinned``.
- ``pin=False``: no copy at all. Each tensor uploads from where it lives: its RAM, or the pages of its
  file for a mapped (disk) component, read as the upload needs them. The plan's ``stream<-RAM`` and
  ``stream<-disk``. On CUDA these copies come from pageable memory, which blocks the thread issuing
  them, so they run on one worker thread and the compute thread never waits on the disk (as do a
  buffer's whose pinning failed).

It then hooks each streamed block: when it is entered (its forward or a direct child's), compute waits
for its upload's event and its parameters become views of its ring slot; when it is left, they point
back at the host and the slot takes the next upload. Model calls of one step that the host runs
separately (cond and uncond) can share each upload through ``run_together`` (see ``lockstep``).
Uploads go on a side CUDA stream into ``depth + 1`` slots, each the size of the largest streamed
block, so once warm nothing is allocated per step. The order of uploads is learnt from the first step (a block
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..units import format_bytes
from .discovery import BlockLayout
from .file_reads import FileRead, check, checked_copy, file_read
from .file_reads import copy as read_file
from .host_buffer import (
    Entry,
    FilePages,
    Part,
    direct,
    fill,
    host_wrapper,
    in_place_copies,
    lay_out,
    part_views,
    put,
    restore,
    set_weight,
    swap,
    view,
)
from .ledger import DeviceLedger
from .lockstep import LockStep
from .placement import StreamingChoice
from .storage import packed, storage_bytes
from .stream_stats import Mark, StreamStats

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    index: int
    buffer: torch.Tensor  # uint8 on the device
    done: torch.cuda.Event | None = None  # the last block computed from this slot has finished (CUDA)


@dataclass
class _Upload:
    block: int
    slot: _Slot
    ready: Mark | None  # CUDA event recorded after the copy (a time or None on CPU)
    # on the upload thread: done once the copies are issued (gives ``ready``)
    issued: Future[Mark | None] | None = None

    def wait_issued(self) -> Mark | None:
        """The copy's ``ready``, once the upload thread has issued it (at once without a thread)."""
        if self.issued is not None:
            self.ready, self.issued = self.issued.result(), None
        return self.ready


def eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` never traced by ``torch.compile`` (the host's TorchCompileModel compiles the whole diffusion
    model): dynamo breaks the graph at its call and runs it as Python, so the weights it rebinds are
    what the compiled code reads next. Traced, its rebinding was compiled into code of its own that
    failed (torch 2.14: "self.size(-1) must be divisible by 4 to view Byte as Float"). ``fn`` itself
    where this torch has no ``torch.compiler.disable``."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return fn if disable is None else disable(fn)


# Steps whose blocks and uploads are timed: the first learns the block order and warms up (allocator,
# kernels), the second is the steady state the node's text compares with its bound.
CALIBRATE_STEPS = 2


class BlockStreamer:
    def __init__(
        self,
        model: nn.Module,
        layout: BlockLayout,
        choice: StreamingChoice,
        device: torch.device | str,
        *,
        pin: bool = True,
        pin_bytes: int | None = None,
        ledger: DeviceLedger | None = None,
        calibrate_steps: int | None = CALIBRATE_STEPS,
        upload_thread: bool | None = None,
    ) -> None:
        self.model, self.layout, self.choice = model, layout, choice
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.want_pin = pin
        self.in_place = not pin  # upload each tensor from where it lives (module docstring)
        self.pin_bytes = pin_bytes  # with ``pin``: the blocks past this many bytes stream in place
        self.upload_thread = upload_thread  # None: a thread where the copies come from pageable memory
        self._pool: ThreadPoolExecutor | None = None
        self._copies: dict[int, list[tuple[Part, torch.Tensor]]] = {}  # in place: block -> (where, from)
        self._reads: dict[int, list[FileRead | None]] = {}  # the same, read through their file where mapped
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
        self._current: dict[int, tuple[_Slot, Mark | None]] = {}  # block -> its slot, compute began
        self._pos = 0
        self._hooks: list[RemovableHandle] = []
        self._side: torch.cuda.Stream | None = None
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
                    set_weight(sub, name, is_param, self._to_device(tensor.data))
                else:  # the storage moves as it is, in a wrapper rebuilt around it
                    self._host_objects[(id(sub), name)] = tensor
                    swap(sub, name, is_param, inner.rebuild([t.to(self.device) for t in inner.inner]))
            stack += [(child, owner) for child in module.children()]

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` on the device; from a mapped file, read through the file (on a CPU device ``t`` stays
        itself: computing from the mapping is what the disk tier is there)."""
        read = file_read(t) if self.device.type != "cpu" else None
        if read is None:
            return t.to(self.device)
        out = torch.empty(t.shape, dtype=t.dtype, device=self.device)
        checked_copy(out, read)
        return out

    def _build_host_buffer(self) -> None:
        """The streamed blocks' tensors move into one host buffer (see ``host_buffer``), as many blocks
        as ``pin_bytes`` holds; the others (all of them with ``in_place``) stay where they are."""
        blocks = [(i, self.layout.blocks[i][1]) for i in self.streamed]
        buffered: list[tuple[int, nn.Module]] = []
        if not self.in_place:
            sizes = self.layout.block_bytes()
            cap, used = self.pin_bytes, 0
            for i, block in blocks:
                if cap is not None and used + sizes[i] > cap:
                    break
                buffered.append((i, block))
                used += sizes[i]
        self._entries, self._span, nbytes = lay_out(buffered)
        entries, span, _ = lay_out(blocks[len(buffered) :], in_place=True)
        self._entries.update(entries)
        self._span.update(span)
        self.stats.streamed_bytes = sum(e.nbytes for v in self._entries.values() for e in v)
        for i, _ in blocks[len(buffered) :]:
            self._copies[i] = in_place_copies(self._entries[i])
            self._reads[i] = [file_read(t) for _, t in self._copies[i]]
            for e in self._entries[i]:
                self._bind_host(e, i)  # a CPU copy where the tensor was not in host memory
        if buffered:
            buffer = {i: self._entries[i] for i, _ in buffered}
            self._host, self.stats.pinned = fill(buffer, self._span, nbytes, self.cuda and self.want_pin)
            self.stats.host_bytes = nbytes
        self.stats.uploads_from = self._uploads_from()
        # a copy from pageable memory to a GPU blocks the thread issuing it: that is the upload thread
        threaded = self.cuda and not self.stats.pinned if self.upload_thread is None else self.upload_thread
        if self.streamed and threaded:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="headroom-upload")

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
        forward returns. Under ``torch.compile`` the hooks run eagerly (``eager``)."""
        shared = self._shared_modules()
        enter, leave, leave_all = eager(self._enter), eager(self._leave), eager(self._leave_all)
        for i in self.streamed:
            block = self.layout.blocks[i][1]
            for module in (block, *(c for c in block.children() if id(c) not in shared)):
                self._hooks.append(module.register_forward_pre_hook(lambda m, a, i=i: enter(i)))
            self._hooks.append(block.register_forward_hook(lambda m, a, o, i=i: leave(i)))
        if self.streamed:
            self._hooks.append(self.model.register_forward_hook(lambda m, a, o: leave_all()))

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
    def _mark(self, stream: torch.cuda.Stream | None = None) -> Mark:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream or torch.cuda.current_stream(self.device))
        return event

    @property
    def _timing(self) -> bool:
        """The first ``calibrate_steps`` steps time their blocks and uploads (None: every step); later
        steps record one mark each, for the step time."""
        return self.calibrate_steps is None or self.stats.steps <= self.calibrate_steps

    # --- the ring ----------------------------------------------------------------------------------
    def _bind_slot(self, e: Entry, slot: _Slot) -> None:
        if e.rebuild is None:
            set_weight(e.module, e.name, e.is_param, view(slot.buffer, e.offset, e))
            return
        bound = e.bound.get(slot.index)  # a slot's wrapper is built once: the same views every time
        if bound is None:
            bound = e.bound[slot.index] = e.rebuild(part_views(slot.buffer, 0, e))
        swap(e.module, e.name, e.is_param, bound)

    def _bind_host(self, e: Entry, block: int) -> None:
        if block in self._copies:  # streamed in place
            assert e.original is not None
            return put(e, e.original)
        if e.rebuild is not None:
            return swap(e.module, e.name, e.is_param, host_wrapper(e))
        assert self._host is not None
        set_weight(e.module, e.name, e.is_param, view(self._host, self._span[block][0] + e.offset, e))

    def _issue(self, block: int) -> None:
        """Upload ``block`` into a free slot (on the side stream, after the slot's last compute), on the
        upload thread where there is one."""
        slot = self._free.popleft()
        start, nbytes = self._span[block]
        pairs: list[tuple[torch.Tensor, torch.Tensor | FileRead]]
        if block in self._copies:
            pairs = []
            for (part, t), read in zip(self._copies[block], self._reads[block], strict=True):
                if read is None:
                    pairs.append((view(slot.buffer, part.offset, part), t))
                else:  # the slot's raw bytes: the file's bytes go in as they are
                    pairs.append((slot.buffer[part.offset : part.offset + part.nbytes], read))
        else:
            assert self._host is not None
            pairs = [(slot.buffer[:nbytes], self._host[start : start + nbytes])]
        copy = functools.partial(self._copy, pairs, nbytes, slot.done, self._timing)
        if self._pool is not None:
            self._inflight.append(_Upload(block, slot, None, self._pool.submit(copy)))
        else:
            self._inflight.append(_Upload(block, slot, copy()))
        self.stats.uploads += 1
        self.stats.uploaded_bytes += nbytes

    def _copy(
        self,
        pairs: list[tuple[torch.Tensor, torch.Tensor | FileRead]],
        nbytes: int,
        after: torch.cuda.Event | None,
        timing: bool,
    ) -> Mark | None:
        """The copies of one upload; returns its ``ready`` (a CUDA event, a time on a CPU, or None). A
        tensor of a mapped file is read through the file (``file_reads``), which is checked before and
        after: a file truncated or rewritten meanwhile is an error, never SIGBUS or a mix of versions."""
        ready: Mark | None
        reads = [src for _, src in pairs if isinstance(src, FileRead)]
        check(reads)
        if self.cuda:
            side = self._side
            assert side is not None  # made with the ring
            with torch.cuda.device(self.device), torch.cuda.stream(side):
                if after is not None:
                    side.wait_event(after)
                began = self._mark(side) if timing else None
                for dst, src in pairs:
                    if isinstance(src, FileRead):
                        read_file(dst, src)
                    else:
                        dst.copy_(src, non_blocking=True)
                ready = torch.cuda.Event(enable_timing=timing)
                ready.record(side)
        else:
            began = self._mark() if timing else None
            for dst, src in pairs:
                if isinstance(src, FileRead):
                    read_file(dst, src)
                else:
                    dst.copy_(src)
            ready = self._mark() if timing else None
        check(reads)
        if began is not None and ready is not None:  # both set where timing
            self.stats._upload_marks.append((nbytes, began, ready))
        return ready

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
        ready = upload.wait_issued()
        if isinstance(ready, torch.cuda.Event):  # on CUDA
            torch.cuda.current_stream(self.device).wait_event(ready)
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
        for e in self._entries[block]:
            self._bind_host(e, block)
        self._free.append(slot)
        self._top_up()

    def _miss(self, block: int) -> None:
        """``block`` is not next in the ring: drop the prefetched uploads and fetch it now."""
        self.stats.misses += 1
        for upload in self._inflight:  # their copies are issued before the slots are reused
            upload.wait_issued()
        if self._side is not None:  # on CUDA
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

        Streamed tensors that were a mapped file's pages get their originals back (``host_buffer``), as
        does every one with ``in_place``; the others stay views of the host buffer (pinned memory is kept
        for the next run) unless ``release``, which copies them into ordinary tensors and frees the buffer.
        """
        for upload in self._inflight:
            try:
                upload.wait_issued()
            except Exception:  # the upload's error was or will be the caller's; detaching goes on
                log.debug("Headroom: an upload failed before detach", exc_info=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.cuda and self._side is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._side)
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        for sub, name, is_param, _ in self._owned(self.model):
            host = self._host_tensors.get((id(sub), name))
            if host is not None:
                set_weight(sub, name, is_param, host)
            original = self._host_objects.get((id(sub), name))
            if original is not None:
                swap(sub, name, is_param, original)
        self._host_tensors.clear()
        self._host_objects.clear()
        for i, entries in self._entries.items():
            for e in entries:
                restore(e, self._host, self._span[i][0], release)
        if release:
            self._host = None
        self._copies.clear()
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
            "uploads_from": self.stats.uploads_from,
            "device_peak_bytes": self.ledger.peak,
            "uploads": self.stats.uploads,
            "misses": self.stats.misses,
            "steps": self.stats.steps,
            "calls_together": self.stats.calls_together,
            "h2d_bytes_per_s": bw,
            "cuda": self.cuda,
            "step_s": statistics.median(self.stats.step_s) if self.stats.step_s else None,
            "bound_s": self.stats.bound_s(),
            "bound_kind": "busiest of compute and H2D copies" if self.cuda else "compute + RAM copies, CPU",
        }

    def _uploads_from(self) -> str:
        """Where the streamed blocks upload from: "pinned RAM" (the buffer), "RAM" (a pageable buffer, or
        the weights' own RAM), "file pages" (a mapped component's file); with their bytes when mixed."""
        tensors = [t for copies in self._copies.values() for _, t in copies]
        mapped = FilePages().bytes_in(tensors)
        own = sum(t.numel() * t.element_size() for t in tensors) - mapped
        buffer = self.stats.host_bytes
        parts = [
            ("pinned RAM" if self.stats.pinned else "RAM", buffer),
            ("file pages", mapped),
            ("RAM", own),
        ]
        merged: dict[str, int] = {}
        for name, n in parts:
            if n:
                merged[name] = merged.get(name, 0) + n
        if len(merged) == 1:
            return next(iter(merged))
        return " and ".join(f"{name} ({format_bytes(n)})" for name, n in merged.items())
