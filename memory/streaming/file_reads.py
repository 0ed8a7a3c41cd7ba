"""Copies of a mapped file's bytes that go through the file, not its pages.

A tensor that views a memory-mapped model file reads the file's pages when it is touched: if the file was
truncated meanwhile, the pages past its new end raise SIGBUS, which kills the process (no Python error,
no traceback). A copy made with ``pread`` instead gets a short read, which is an error that names the file.
So every copy the streamer makes *from* a mapped file (an upload in place, the fill of its host buffer, a
resident tensor's upload to a GPU) reads through the file (``copy``), with the file's identity checked
around each block (``check``). The mapping (``memory.residency.mapped``) registers itself here
(``register``): this module knows nothing of it beyond ``Source``.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch

from ..process_state import PROCESS


class Source(Protocol):
    """A mapped file as this module needs it (``MappedFile``)."""

    def owns(self, t: torch.Tensor) -> bool: ...  # t's memory lies inside the mapping

    def offset_of(self, t: torch.Tensor) -> int: ...  # where t's first byte is in the file

    def read_into(self, out: memoryview, offset: int) -> None: ...  # the file's bytes at offset, or raise

    def check(self) -> None: ...  # raise when the file is no longer the one mapped


_SOURCES: weakref.WeakSet[Source] = PROCESS.hold(
    "streaming.file_reads: sources",
    weakref.WeakSet(),
    "the mapped files a copy can read instead of faulting pages in; weak, each leaves with its mapping",
)


def register(source: Source) -> None:
    _SOURCES.add(source)


@dataclass(frozen=True)
class FileRead:
    """``nbytes`` of ``source`` at ``offset``: what a copy from a mapped tensor reads instead."""

    source: Source
    offset: int
    nbytes: int


def file_read(t: torch.Tensor) -> FileRead | None:
    """How to read ``t``'s bytes from its file, when ``t`` is a contiguous CPU view of a live mapping;
    None for any other tensor (copied as usual)."""
    if t.device.type != "cpu" or not t.is_contiguous() or t.numel() == 0:
        return None
    for source in list(_SOURCES):
        if source.owns(t):
            return FileRead(source, source.offset_of(t), t.numel() * t.element_size())
    return None


def check(reads: Iterable[FileRead | None]) -> None:
    """Raise (the mapping's FileChanged) when a file among ``reads`` changed since it was mapped."""
    for source in {id(r.source): r.source for r in reads if r is not None}.values():
        source.check()


def copy(dst: torch.Tensor, read: FileRead) -> None:
    """``dst.copy_(the tensor read stands for)``, read through the file: ``dst`` takes the bytes whatever
    its dtype and shape (contiguous, ``read.nbytes`` of them). A CPU ``dst`` is read into directly; a
    device one through a pageable staging copy."""
    if dst.numel() * dst.element_size() != read.nbytes or not dst.is_contiguous():
        raise ValueError(f"a file read of {read.nbytes:,} bytes into a tensor of another size or layout")
    if dst.device.type == "cpu":
        read.source.read_into(_writable(dst), read.offset)
        return
    staging = torch.empty(read.nbytes, dtype=torch.uint8)
    read.source.read_into(_writable(staging), read.offset)
    dst.copy_(staging.view(dst.dtype).reshape(dst.shape))  # from pageable memory: staged when it returns


def checked_copy(dst: torch.Tensor, read: FileRead) -> None:
    """``copy`` between two checks of the file: a file changed before the read is refused unread, one
    rewritten while it was read is refused rather than copied half old, half new."""
    check([read])
    copy(dst, read)
    check([read])


def _writable(t: torch.Tensor) -> memoryview:
    """``t``'s bytes as a writable buffer (no copy; ``t`` must be contiguous and in host memory)."""
    nbytes = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B")
