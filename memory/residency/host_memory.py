"""Where a module's weights live on the host side: pinned RAM, pageable RAM, or the file (mapped).

These move a module between host tiers in place (``Tensor.data`` swaps, so Parameter objects the host
or other patchers hold stay valid) and measure where its bytes are. GPU placement is the host's job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ..streaming import file_reads
from ..streaming.storage import storage_bytes
from .mapped import MappedFile, _named_tensors


@dataclass(frozen=True)
class Footprint:
    device: int = 0  # on an accelerator
    pinned: int = 0
    mapped: int = 0  # views of a safetensors file: page cache, no private copy
    ram: int = 0  # pageable, private

    @property
    def host(self) -> int:
        return self.pinned + self.ram


def footprint(module: torch.nn.Module, files: Iterable[MappedFile] = ()) -> Footprint:
    files = list(files)
    device = pinned = mapped = ram = 0
    for _, t in _named_tensors(module):
        n = storage_bytes(t)  # a quantized subclass holds its inner tensors' bytes, not its dtype's
        if t.device.type != "cpu":
            device += n
        elif any(f.owns(t) for f in files):
            mapped += n
        elif _is_pinned(t):
            pinned += n
        else:
            ram += n
    return Footprint(device, pinned, mapped, ram)


def _is_pinned(t: torch.Tensor) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:  # no accelerator runtime: nothing is pinned
        return False


def can_pin() -> bool:
    return torch.cuda.is_available()


def pin(module: torch.nn.Module, cap: int | None = None) -> tuple[int, str]:
    """Copy the module's pageable CPU tensors into pinned memory, up to ``cap`` bytes.

    Returns (bytes now pinned by this call, why it stopped short: "" when it did not). Without CUDA
    nothing can be pinned; the weights stay pageable and the reason says so.
    """
    if not can_pin():
        return 0, "no CUDA device: pinned memory is unavailable, weights stay in pageable RAM"
    done = 0
    for _, t in _named_tensors(module):
        n = t.numel() * t.element_size()
        if t.device.type != "cpu" or _is_pinned(t):
            continue
        if cap is not None and done + n > cap:
            return done, f"pinned-memory cap reached after {done} bytes"
        try:
            t.data = private_copy(t, pin=True)
        except RuntimeError as exc:  # the driver refused (locked-memory limit, WSL): stay pageable
            return done, f"pinning failed: {exc}"
        done += n
    return done, ""


def to_pageable(module: torch.nn.Module, files: Iterable[MappedFile] = ()) -> int:
    """Give pinned and mapped tensors private pageable copies; returns the bytes copied."""
    files = list(files)
    done = 0
    for f in files:
        f.check()  # a changed file's pages are never copied: SIGBUS past a shortened end, or new bytes
    for _, t in _named_tensors(module):
        if t.device.type != "cpu":
            continue
        if _is_pinned(t) or any(f.owns(t) for f in files):
            t.data = private_copy(t)
            done += t.numel() * t.element_size()
    return done


def private_copy(t: torch.Tensor, pin: bool = False) -> torch.Tensor:
    """A private copy of CPU tensor ``t`` (pinned with ``pin``). A view of a mapped file is read through
    the file, never its pages: a file shortened meanwhile raises FileChanged instead of SIGBUS."""
    read = file_reads.file_read(t.data)
    if read is None:  # (in its own layout, as before)
        return t.data.pin_memory() if pin else torch.empty_like(t, device="cpu").copy_(t)
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=pin)  # contiguous, as every file_read is
    file_reads.checked_copy(out, read)
    return out
