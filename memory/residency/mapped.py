"""Weights that live in their safetensors file: zero-copy tensors over a private memory map.

A "disk" component keeps no copy of its weights in RAM: every parameter is a view of the file's pages,
which the kernel reads on first touch and may drop again under pressure (they are clean page cache).
The map is private (copy-on-write), so nothing can write back into the user's model file.

A loader builds its modules the usual way (a copy in RAM), then ``bind`` points each parameter whose
bytes equal a tensor of the file at that tensor and lets the copy go. Parameters the loader converted
(another dtype, fused or renamed keys that match nothing) keep their RAM copy and are reported.

Files change under us (a re-download overwrites a model in place, a copy truncates it): a private map
then reads the new bytes where it has not copied a page yet, and pages past a shortened end raise SIGBUS,
which kills the process. So a mapping remembers its file's identity (device, inode, size, modification
time, and the inode change time, which ``rsync --inplace -t`` or a restore from backup cannot put back as
they put back the modification time) and ``check`` refuses it once the file differs, before anything reads
its pages; ``bind`` and ``to_pageable`` check first. A mapping is reused only when the file's fingerprint
(a hash of its header and of sampled blocks, ``file_fingerprint``) is still the one mapped: the change time
of some file systems moves in steps of milliseconds, so a rewrite just after the mapping can keep it.
A file is mapped once per process and identity (``open_mapped``), however many components use it, and
unmapped when none holds it any more (``live_mappings`` counts them).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch

from ..models.header import ComponentError, read_header
from ..process_state import PROCESS
from ..streaming import file_reads

TORCH_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip
for _code, _name in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
    if hasattr(torch, _name):  # every torch the host supports has them; keep old ones importable
        TORCH_DTYPES[_code] = getattr(torch, _name)


Identity = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


def file_identity(path: str | Path) -> Identity:
    """What tells one version of a file from another, cheaply (one stat)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


SAMPLES, SAMPLE_BYTES = 16, 4096  # blocks hashed across the data, besides the header
HEADER_HASHED = 16 * 2**20  # of the header's JSON (a real header is well under a megabyte)


def file_fingerprint(path: str | Path) -> str:
    """A hash of the file's header and of SAMPLES blocks spread over it and its last block: what tells a
    file rewritten in place with its dates put back from the one before (two checkpoints of one
    architecture share a header: the blocks differ). Reads about 70 KiB besides the header."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        digest.update(head)
        if len(head) == 8:
            digest.update(f.read(min(struct.unpack("<Q", head)[0], HEADER_HASHED)))
        for at in [size * i // SAMPLES for i in range(SAMPLES)] + [max(0, size - SAMPLE_BYTES)]:
            f.seek(at)
            digest.update(f.read(SAMPLE_BYTES))
    return f"{size}:{digest.hexdigest()}"


def file_version(path: str | Path) -> str:
    """The file's identity and fingerprint in one string (the Offload Loader's IS_CHANGED per file)."""
    return f"{file_identity(path)}:{file_fingerprint(path)}"


class FileChanged(ComponentError):
    """A mapped model file changed on disk (or went away) after it was mapped."""


class MappedFile:
    """A validated safetensors file mapped read-only-by-contract into this process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.identity = file_identity(self.path)
        self.fingerprint = file_fingerprint(self.path)
        self.specs, _ = read_header(self.path)  # raises ComponentError naming the file and the problem
        size = self.identity[2]
        with self.path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
        self.data_start = 8 + length
        # shared=False: a MAP_PRIVATE mapping; pages come from the page cache and are never written back
        # UntypedStorage.from_file makes an UntypedStorage (torch's stub says its base class)
        self.storage = cast(
            torch.UntypedStorage, torch.UntypedStorage.from_file(str(self.path), shared=False, nbytes=size)
        )
        self.size = size
        # the mapped file itself (this inode), for the copies that read through it: a short read where a
        # page of the mapping would raise SIGBUS (streaming.file_reads)
        self._file = self.path.open("rb", buffering=0)
        self._read_lock = threading.Lock()  # seek + read where the OS has no pread (Windows)
        weakref.finalize(self, self._file.close)
        self.check()  # changed while it was being read: refused now rather than read half old, half new
        file_reads.register(self)

    def changed(self) -> str:
        """How the file differs from the one mapped ("" when it is the same file, unchanged)."""
        try:
            now = file_identity(self.path)
        except OSError as exc:
            return f"it is gone ({exc.strerror or exc})"
        if now == self.identity:
            return ""
        if now[2] != self.identity[2]:
            return f"its size went from {self.identity[2]:,} to {now[2]:,} bytes"
        if now[:2] != self.identity[:2]:
            return "it was replaced by another file"
        if now[3] != self.identity[3]:
            return "it was rewritten (its modification time changed)"
        return "it was rewritten (its modification time was put back, its change time was not)"

    def check(self) -> None:
        """Raise FileChanged, saying what to do, when the file is no longer the one mapped."""
        how = self.changed()
        if how:
            raise FileChanged(
                f"{self.path.name} changed on disk after Headroom mapped it ({how}); its old mapping is not "
                "read again. Queue the prompt again: the Offload Loader reloads a changed file from its "
                "new bytes (and refuses it, saying why, if it is damaged)"
            )

    def __contains__(self, key: str) -> bool:
        return key in self.specs

    def tensor(self, key: str) -> torch.Tensor | None:
        """The tensor ``key`` as a view of the mapping, or None where no zero-copy view exists (a dtype
        torch lacks, or data not aligned to its element size)."""
        spec = self.specs[key]
        dtype = TORCH_DTYPES.get(spec.dtype)
        if dtype is None:
            return None
        item = torch.empty((), dtype=dtype).element_size()
        offset = self.data_start + spec.start
        if offset % item:
            return None
        stride = _contiguous_strides(spec.shape)
        return torch.empty(0, dtype=dtype).set_(self.storage, offset // item, spec.shape, stride)

    def offset_of(self, t: torch.Tensor) -> int:
        """Where ``t``'s first byte lies in the file (``t`` is in this mapping: ``owns``)."""
        return t.data_ptr() - self.storage.data_ptr()

    def read_into(self, out: memoryview, offset: int) -> None:
        """Fill ``out`` with the file's bytes from ``offset``, through the file, never its pages: a file
        shortened since it was mapped raises FileChanged where the mapping would raise SIGBUS."""
        done, want = 0, len(out)
        while done < want:
            if hasattr(os, "preadv"):
                n = os.preadv(self._file.fileno(), [out[done:]], offset + done)
            else:
                with self._read_lock:
                    self._file.seek(offset + done)
                    n = self._file.readinto(out[done:]) or 0
            if n <= 0:
                raise FileChanged(
                    f"{self.path.name} ends at byte {offset + done:,}, before the {want:,} bytes read from "
                    f"byte {offset:,} (it was {self.size:,} bytes when Headroom mapped it: truncated on "
                    "disk?). Nothing was read past its end. Restore the file and queue the prompt again"
                )
            done += n

    def owns(self, t: torch.Tensor) -> bool:
        """True when ``t``'s memory lies inside this mapping."""
        if t.device.type != "cpu":
            return False
        base: int = self.storage.data_ptr()
        ptr: int = t.untyped_storage().data_ptr()
        return base <= ptr < base + self.size


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


@dataclass
class Binding:
    """Which of a module's tensors view the file, and what stayed in RAM (with why)."""

    bound: dict[str, str] = field(default_factory=dict)  # module tensor name -> file key
    mapped_bytes: int = 0
    kept: dict[str, str] = field(default_factory=dict)  # module tensor name -> reason
    kept_bytes: int = 0


def _named_tensors(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from module.named_parameters(remove_duplicate=True)
    yield from module.named_buffers(remove_duplicate=True)


def _candidates(name: str, by_leaf: dict[str, list[str]]) -> list[str]:
    """File keys that may hold module tensor ``name``: equal, or equal after a prefix on either side (a
    checkpoint's ``model.diffusion_model.``; the host's ``diffusion_model.`` over a bare UNet file)."""
    leaf = name.rsplit(".", 1)[-1]
    return [k for k in by_leaf.get(leaf, ()) if k == name or k.endswith("." + name) or name.endswith("." + k)]


def bind(
    module: torch.nn.Module, files: Iterable[MappedFile], known: dict[str, str] | None = None
) -> Binding:
    """Point ``module``'s CPU tensors at equal tensors of ``files`` (see the module docstring).

    Equality is checked byte for byte, so a binding never changes a result. ``known`` maps module names to
    file keys found by an earlier bind of the same module (after the host moved it back from the GPU).
    """
    files = list(files)
    for mf in files:
        mf.check()  # before torch.equal reads a page of it
    result = Binding()
    index: list[tuple[MappedFile, dict[str, list[str]]]] = []
    for mf in files:
        by_leaf: dict[str, list[str]] = {}
        for key in mf.specs:
            by_leaf.setdefault(key.rsplit(".", 1)[-1], []).append(key)
        index.append((mf, by_leaf))
    for name, t in _named_tensors(module):
        nbytes = t.numel() * t.element_size()
        if t.device.type != "cpu":
            result.kept[name], result.kept_bytes = "on a device", result.kept_bytes + nbytes
            continue
        if any(mf.owns(t) for mf in files):
            result.bound[name] = (known or {}).get(name, name)
            result.mapped_bytes += nbytes
            continue
        view, key = _find(name, t, index, (known or {}).get(name))
        if view is None:
            result.kept[name] = key  # the reason
            result.kept_bytes += nbytes
            continue
        t.data = view  # keeps the Parameter object: the host and other patchers may hold it
        result.bound[name] = key
        result.mapped_bytes += nbytes
    return result


def _find(
    name: str, t: torch.Tensor, index: list[tuple[MappedFile, dict[str, list[str]]]], hint: str | None
) -> tuple[torch.Tensor | None, str]:
    reason = "no tensor of that name in the file"
    for mf, by_leaf in index:
        keys = [hint] if hint in mf.specs else _candidates(name, by_leaf)
        for key in keys:
            view = mf.tensor(key)
            if view is None:
                reason = f"{key}: no zero-copy view (dtype or alignment)"
            elif view.dtype != t.dtype or tuple(view.shape) != tuple(t.shape):
                reason = f"{key}: converted by the loader ({view.dtype} {tuple(view.shape)})"
            elif not _equal_through_file(view, t):
                reason = f"{key}: different values (patched or converted)"
            else:
                return view, key
    return None, reason


def _equal_through_file(view: torch.Tensor, t: torch.Tensor) -> bool:
    """``torch.equal(view, t)`` with ``view``'s bytes read through its file, not its pages: a file
    truncated after ``bind``'s check raises FileChanged instead of SIGBUS."""
    read = file_reads.file_read(view)
    if read is None:  # not a view of a registered mapping (a test's stand-in): compare as it is
        return torch.equal(view, t)
    copy = torch.empty(view.shape, dtype=view.dtype)
    file_reads.copy(copy, read)
    return torch.equal(copy, t)


# Every live mapping of this process, by (resolved path, identity): held weakly, so a file is unmapped
# when the last component using it lets it go.
_MAPPINGS: weakref.WeakValueDictionary[tuple[str, Identity], MappedFile] = PROCESS.hold(
    "residency.mapped: live mappings",
    weakref.WeakValueDictionary(),
    "one mapping per file for every component using it; weak, so it empties as components go (forgetting "
    "a live one would map its file twice)",
)
_MAPPINGS_LOCK = threading.Lock()


def open_mapped(paths: Iterable[str | Path]) -> list[MappedFile]:
    """Map every path, sharing this process's mapping of a file that has not changed; a bad file raises
    ComponentError naming it. Out of address space or memory: said as such, with what to do."""
    out = []
    for p in paths:
        try:
            key = (str(Path(p).resolve()), file_identity(p))
            with _MAPPINGS_LOCK:
                mf = _MAPPINGS.get(key)
                if mf is not None and mf.fingerprint != file_fingerprint(p):  # rewritten within a tick
                    mf = None
                if mf is None:
                    mf = MappedFile(p)
                    _MAPPINGS[(key[0], mf.identity)] = mf
            out.append(mf)
        except (OSError, RuntimeError) as exc:  # the header was fine (ComponentError otherwise): the map
            raise ComponentError(f"{p}: cannot memory-map: {_why(exc)}") from exc
    return out


def _why(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, MemoryError) or "Cannot allocate memory" in text or "ENOMEM" in text:
        return (
            f"out of memory or address space ({text}): close other workflows or free models (the host's "
            "Unload models), or raise the process's limits (ulimit -v, the container's memory limit)"
        )
    return text


def live_mappings() -> tuple[int, int]:
    """How many files this process has mapped now, and their bytes (address space, not RAM)."""
    with _MAPPINGS_LOCK:
        maps = list(_MAPPINGS.values())
    return len(maps), sum(m.size for m in maps)


def read_ahead(paths: Iterable[Path]) -> None:
    """Ask the kernel to read these files' pages ahead (``madvise(WILLNEED)``; returns at once). Where
    the OS has no such advice (Windows), nothing: the pages come in when first touched."""
    if not hasattr(mmap, "MADV_WILLNEED"):
        return
    for path in paths:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            m.madvise(mmap.MADV_WILLNEED)
