"""The streamed blocks' host side: one buffer, allocated once, that every streamed tensor is a view of.

``lay_out`` places each streamed block's tensors in one span of it (each aligned for any dtype's view; a
tensor subclass as its inner tensors, rebuilt around views of them: see ``storage``); ``fill`` allocates
the buffer (pinned when asked and possible), copies the tensors in and points the modules at their views;
``restore`` points them back at detach. Streamed in place (``lay_out(in_place=True)``) there is no
buffer: every tensor keeps its original (a CPU copy where it was not in host memory) and uploads from it
(``in_place_copies``).

A tensor whose bytes are pages of a file mapped into the process (a "disk" component's views of its
safetensors file, see ``residency.mapped``; ComfyUI-GGUF's memory-mapped weights) keeps its original as
well: holding it costs no RAM of its own (the pages are the file's: clean page cache), and ``restore``
puts it back, so the component leaves streaming where its plan placed it. A tensor in private RAM gives
its original up, else its bytes would be held twice while it streams; ``restore(release=True)`` clones it
out of the buffer instead. Which pages are a file's is read from ``/proc/self/maps``; where that cannot be
read (not Linux), no tensor counts as mapped and every one is cloned back.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import nn

from .file_reads import checked_copy, file_read
from .storage import Packed, as_parameter, packed

log = logging.getLogger(__name__)
ALIGN = 64  # bytes: every tensor in the buffers starts aligned for any dtype's view


class Part(NamedTuple):  # one inner tensor of a tensor subclass (see ``storage``), in the block's span
    dtype: torch.dtype
    shape: torch.Size
    offset: int
    nbytes: int


@dataclass
class Entry:
    """One tensor of a streamed block: where it lives in the host buffer and a slot."""

    module: nn.Module
    name: str
    is_param: bool
    dtype: torch.dtype
    shape: torch.Size
    offset: int  # within the block's span
    nbytes: int
    # a tensor subclass (quantized): its inner tensors' places, its wrapper on the host buffer and per slot
    parts: tuple[Part, ...] = ()
    rebuild: Callable[[Sequence[torch.Tensor]], torch.Tensor] | None = None
    host: torch.Tensor | None = None
    bound: dict[int, torch.Tensor] = field(default_factory=dict)
    # kept when its bytes are a mapped file's (module docstring); streaming in place, always
    original: torch.Tensor | None = None
    # a subclass's inner tensors until ``fill`` has copied them; streaming in place, its original's
    source: Packed | None = None


class FilePages:
    """The address ranges this process maps from regular files (``/proc/self/maps``; none elsewhere).
    Device files, shared memory and deleted files are left out: their pages are RAM of their own."""

    def __init__(self, maps: str = "/proc/self/maps") -> None:
        ranges: list[tuple[int, int]] = []
        try:
            with open(maps, encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.split(maxsplit=5)
                    path = fields[5].strip() if len(fields) == 6 else ""
                    if not path.startswith("/") or path.startswith("/dev/") or path.endswith("(deleted)"):
                        continue
                    lo, hi = (int(x, 16) for x in fields[0].split("-"))
                    ranges.append((lo, hi))
        except (OSError, ValueError) as exc:
            log.debug("Headroom: no file mappings read from %s (%s)", maps, exc)
        merged: list[list[int]] = []
        for lo, hi in sorted(ranges):  # a file mapped in pieces reads as one range
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._starts = [lo for lo, _ in merged]
        self._ends = [hi for _, hi in merged]

    def bytes_in(self, tensors: Iterable[torch.Tensor]) -> int:
        """How many of the tensors' bytes lie in a file mapping (each tensor wholly or not at all)."""
        total = 0
        for t in tensors:
            nbytes = t.numel() * t.element_size()
            if t.device.type != "cpu" or nbytes == 0:
                continue
            ptr = t.data_ptr()
            k = bisect.bisect_right(self._starts, ptr) - 1
            if k >= 0 and ptr + nbytes <= self._ends[k]:
                total += nbytes
        return total


Spans = dict[int, tuple[int, int]]  # block -> (offset, bytes) in the host buffer


def lay_out(
    blocks: Sequence[tuple[int, nn.Module]], in_place: bool = False
) -> tuple[dict[int, list[Entry]], Spans, int]:
    """Each block's entries, its span (offset, bytes) in the buffer (the same in a ring slot), and the
    buffer's size. Entries whose bytes are mostly a mapped file's pages keep their original (the module
    docstring). ``in_place``: no buffer (size 0); every entry keeps its original to upload from, a CPU copy
    of it where it is not in host memory."""
    pages = FilePages()
    entries: dict[int, list[Entry]] = {}
    span: Spans = {}
    offset = 0
    for i, block in blocks:
        start = offset
        entries[i] = []
        for sub, name, is_param, tensor in (entry for m in block.modules() for entry in direct(m)):
            inner = packed(tensor)
            e = Entry(sub, name, is_param, tensor.dtype, tensor.shape, offset - start, 0)
            if inner is not None:
                e.rebuild, e.source = inner.rebuild, inner
            plain = (tensor,) if inner is None else inner.inner
            for t in plain:
                nbytes = t.numel() * t.element_size()
                if inner is not None:
                    e.parts += (Part(t.dtype, t.shape, offset - start, nbytes),)
                e.nbytes += nbytes
                offset += -(-nbytes // ALIGN) * ALIGN
            if in_place:
                e.original = on_host(tensor, inner, is_param)
                e.source = packed(e.original) if inner is not None else None
            elif e.nbytes and 2 * pages.bytes_in(plain) >= e.nbytes:  # a subclass's scales may be private
                e.original = held(tensor, inner, is_param)
            entries[i].append(e)
        span[i] = (start, offset - start)
    return entries, span, 0 if in_place else offset


def held(tensor: torch.Tensor, inner: Packed | None, is_param: bool) -> torch.Tensor:
    """What to keep of a module's ``tensor`` to put back later: a parameter's data (the Parameter object
    stays and is rebound: ``set_weight``), else the tensor itself (a subclass is swapped whole: ``swap``)."""
    return tensor.data if inner is None and is_param else tensor


def in_host_memory(tensor: torch.Tensor, inner: Packed | None) -> bool:
    """Whether ``tensor`` (a subclass: every inner tensor) is in host memory."""
    return all(t.device.type == "cpu" for t in ((tensor,) if inner is None else inner.inner))


def on_host(tensor: torch.Tensor, inner: Packed | None, is_param: bool) -> torch.Tensor:
    """``tensor`` itself where it is in host memory, else a CPU copy of it (a subclass rebuilt around
    copies of its inner tensors)."""
    if in_host_memory(tensor, inner):
        return held(tensor, inner, is_param)
    if inner is None:
        return tensor.detach().to("cpu")
    return inner.rebuild([t.to("cpu") for t in inner.inner])


def in_place_copies(entries: Sequence[Entry]) -> list[tuple[Part, torch.Tensor]]:
    """What uploads a block streamed in place: (where in the slot, the host tensor) per plain tensor."""
    out: list[tuple[Part, torch.Tensor]] = []
    for e in entries:
        assert e.original is not None
        if e.source is None:
            out.append((Part(e.dtype, e.shape, e.offset, e.nbytes), e.original))
        else:
            out += zip(e.parts, e.source.inner, strict=True)
    return out


def fill(entries: dict[int, list[Entry]], span: Spans, nbytes: int, pin: bool) -> tuple[torch.Tensor, bool]:
    """Allocate the buffer, copy every entry in and set_weight the modules to their views; returns the buffer
    and whether it is pinned. Where a previous streamer left every tensor in its buffer at the same place
    (``restore`` without release: a pinned copy kept for the next run), that buffer is taken again and
    nothing is copied (``left_in_place``)."""
    reused = left_in_place(entries, span, nbytes)
    if reused is not None and (not pin or reused.is_pinned()):
        host, pinned = reused, reused.is_pinned()
    else:
        host, pinned = allocate(nbytes, pin)
    for i, block in entries.items():
        start = span[i][0]
        for e in block:
            if e.rebuild is None:
                v = view(host, start + e.offset, e)
                t = getattr(e.module, e.name).detach()
                if v.data_ptr() != t.data_ptr():
                    _fill_one(v, t.reshape(e.shape))
                set_weight(e.module, e.name, e.is_param, v)
                continue
            views = part_views(host, start, e)
            assert e.source is not None
            for v, t in zip(views, e.source.inner, strict=True):
                if v.data_ptr() != t.data_ptr():
                    _fill_one(v, t.detach().reshape(v.shape))
            e.source = None  # the inner tensors are not held: a private original's RAM goes
            e.host = e.rebuild(views)
            swap(e.module, e.name, e.is_param, e.host)
    return host, pinned


def left_in_place(entries: dict[int, list[Entry]], span: Spans, nbytes: int) -> torch.Tensor | None:
    """The buffer every entry's tensors are still views of, each at its place in this layout, or None."""
    storage: torch.UntypedStorage | None = None
    for i, block in entries.items():
        start = span[i][0]
        for e in block:
            if e.original is not None:  # a file's pages, or an original kept: not in a buffer
                return None
            if e.rebuild is None:
                placed: list[tuple[torch.Tensor, int]] = [(getattr(e.module, e.name), e.offset)]
            else:
                assert e.source is not None
                placed = list(zip(e.source.inner, (p.offset for p in e.parts), strict=True))
            for t, offset in placed:
                if t.device.type != "cpu":
                    return None
                if storage is None:
                    storage = t.untyped_storage()
                    if storage.nbytes() != nbytes:
                        return None
                if t.untyped_storage().data_ptr() != storage.data_ptr():
                    return None
                if t.data_ptr() != storage.data_ptr() + start + offset:
                    return None
    if storage is None:
        return None
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,), (1,))


def restore(e: Entry, host: torch.Tensor | None, start: int, release: bool) -> None:
    """Point ``e``'s module back at the host at detach: its original where it was kept (no copy); else its
    view of the buffer, or with ``release`` a copy of its own so the buffer can go."""
    e.bound.clear()
    e.source = None
    if e.original is not None:
        put(e, e.original)
        e.original = e.host = None
    elif host is None:
        raise ValueError("Headroom: a streamed tensor has neither its original nor a host buffer")
    elif not release:
        put(e, host_wrapper(e) if e.rebuild is not None else view(host, start + e.offset, e))
    elif e.rebuild is None:
        set_weight(e.module, e.name, e.is_param, view(host, start + e.offset, e).clone())
    else:  # storage of its own: each inner tensor cloned out of the buffer
        e.host = None
        swap(e.module, e.name, e.is_param, e.rebuild([v.clone() for v in part_views(host, start, e)]))


def allocate(nbytes: int, pin: bool) -> tuple[torch.Tensor, bool]:
    if pin:
        try:
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True), True
        except RuntimeError as exc:  # the OS or the driver caps pinned memory
            log.warning(
                "Headroom: pinning %.2f GB failed (%s); streaming from pageable RAM", nbytes / 1e9, exc
            )
    return torch.empty(nbytes, dtype=torch.uint8), False


def _fill_one(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)``; a mapped file's tensor is read through the file (``file_reads``): a file
    truncated since it was mapped is an error, never SIGBUS."""
    read = file_read(src)
    if read is None:
        dst.copy_(src)
        return
    checked_copy(dst, read)


def view(buffer: torch.Tensor, offset: int, e: Entry | Part) -> torch.Tensor:
    return buffer[offset : offset + e.nbytes].view(e.dtype).view(e.shape)


def part_views(buffer: torch.Tensor, start: int, e: Entry) -> list[torch.Tensor]:
    return [
        buffer[start + p.offset : start + p.offset + p.nbytes].view(p.dtype).view(p.shape) for p in e.parts
    ]


def host_wrapper(e: Entry) -> torch.Tensor:
    """A tensor subclass's wrapper on the host buffer (set with its ``rebuild`` when laid out)."""
    if e.host is None:
        raise ValueError(f"Headroom: {e.name} has no wrapper on the host buffer")
    return e.host


def put(e: Entry, tensor: torch.Tensor) -> None:
    """Bind ``tensor`` (plain) or swap it in (a subclass's wrapper) where ``e`` lives."""
    (set_weight if e.rebuild is None else swap)(e.module, e.name, e.is_param, tensor)


def direct(module: nn.Module) -> list[tuple[nn.Module, str, bool, torch.Tensor]]:
    """The module's own parameters and buffers (not its children's), as (module, name, is_param, tensor)."""
    out = [(module, n, True, p) for n, p in module._parameters.items() if p is not None]
    return out + [(module, n, False, b) for n, b in module._buffers.items() if b is not None]


def set_weight(module: nn.Module, name: str, is_param: bool, tensor: torch.Tensor) -> None:
    if is_param:
        param = module._parameters[name]
        assert param is not None  # a parameter the host buffer was laid out from
        param.data = tensor
    else:
        module._buffers[name] = tensor


def swap(module: nn.Module, name: str, is_param: bool, tensor: torch.Tensor) -> None:
    """Put another object in place: a tensor subclass's ``.data`` cannot be rebound to other storage."""
    if is_param:
        module._parameters[name] = as_parameter(tensor)  # type: ignore[assignment]
    else:
        module._buffers[name] = tensor
