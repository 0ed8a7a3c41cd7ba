"""The host part of prefetch on a side stream (``memory/residency/prefetch.py``): ``PrefetchOps`` on
ComfyUI's model management.

Upload: every parameter and buffer of the component's module gets a device tensor, allocated on the
compute stream (so the caching allocator never hands that memory to compute before the copies are done),
and a worker thread queues the copies on a CUDA side stream (from pageable RAM a "non-blocking" copy
still holds the calling thread; the node's compute must not wait for it). The host's objects are not
touched: its accounting, the patcher and the module's tensors stay as they were.

Landing, on the executor's thread at a node boundary: the compute stream waits on the copies' event,
each tensor's ``.data`` becomes its device copy, and the host's own ``LoadedModel(patcher).model_load(0)``
runs, as ``load_models_gpu`` would for that model: it applies the weight patches (LoRA) on the device,
sets the patcher's device and loaded bytes (``current_device``, ``model_loaded_weight_memory``), and the
entry goes to the front of ``current_loaded_models``. Its ``.to(device)`` moves nothing: the weights are
there. What ``load_models_gpu`` would add is left out on purpose: ``free_memory`` (the copies hold the
room the plan reserved; asking again would evict a model the plan keeps) and the unload of a loaded
clone (a loaded clone makes the prefetch synchronous). If ``model_load`` raises, the tensors get their
CPU data back and the copies are freed.

Hosts where that cannot be made right stay synchronous, with the reason (``why_sync``): no CUDA side
stream, no ``LoadedModel`` list, a DynamicVRAM patcher, a host in lowvram/novram mode (it loads partially),
a loaded or patched clone, weights of a tensor subclass (the host converts them while it loads), or a
model partly on the device already.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from ...memory.residency.prefetch import CopyDone, Stream, Upload
from . import recording
from .lookups import host_module
from .patches import REGISTRY

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def weights(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    """Every parameter and buffer once (tied weights share one tensor)."""
    seen: set[int] = set()
    for t in (*module.parameters(), *module.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            yield t


class _CudaEvent:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.event = torch.cuda.Event()
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def query(self) -> bool:
        return self.thread is not None and not self.thread.is_alive() and self.event.query()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        torch.cuda.current_stream(self.device).wait_event(self.event)


class CudaStream:
    """``memory.residency.prefetch.Stream`` on a CUDA side stream, fed from a worker thread."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def copy(self, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> CopyDone:
        event = _CudaEvent(self.device)
        # the destinations were allocated on the compute stream: the side stream starts after that
        self.stream.wait_stream(torch.cuda.current_stream(self.device))

        def run() -> None:
            try:
                with torch.no_grad(), torch.cuda.stream(self.stream):
                    for dst, src in pairs:
                        dst.copy_(src, non_blocking=True)
                    event.event.record(self.stream)
            except BaseException as exc:  # raised again where the upload is waited on
                event.error = exc
                self.stream.synchronize()  # what was queued is done before the copies can be freed

        event.thread = threading.Thread(target=run, name="headroom-prefetch", daemon=True)
        event.thread.start()
        return event


@dataclass
class HostUpload:
    event: CopyDone
    nbytes: int
    # (the module's tensor, its device copy, its CPU data)
    swaps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)


def _own(upload: Upload) -> HostUpload:
    """``upload`` as this module made it (``HostPrefetch.start``)."""
    if not isinstance(upload, HostUpload):
        raise TypeError(f"Headroom: not a host upload: {upload!r}")
    return upload


class HostPrefetch:
    """``memory.residency.prefetch.PrefetchOps`` on the host; ``stream`` and ``device`` are injected by
    tests (a fake stream on the CPU), else a CUDA side stream on the host's compute device."""

    def __init__(self, stream: Stream | None = None, device: torch.device | None = None) -> None:
        self.stream = stream
        self.device = device
        self.no_stream = ""

    @property
    def mm(self) -> ModuleType:
        return host_module("comfy.model_management")

    def _side(self) -> Stream | None:
        if self.stream is None and not self.no_stream:
            device = self.device or self.mm.get_torch_device()
            if getattr(device, "type", "") != "cuda" or not torch.cuda.is_available():
                self.no_stream = f"the compute device is {device}: no CUDA side stream to upload on"
            else:
                self.device, self.stream = device, CudaStream(device)
        if self.device is None:
            self.device = self.mm.get_torch_device()
        return self.stream

    def why_sync(self, handle: Any) -> str:
        if recording.skip("a prefetch"):  # its device tensors must not be allocated in a recorded region
            return recording.RECORDING
        if self._side() is None:
            return self.no_stream
        mm = self.mm
        if not isinstance(getattr(mm, "current_loaded_models", None), list) or not hasattr(mm, "LoadedModel"):
            return "this host keeps no LoadedModel list to record the upload in"
        patcher = handle.patcher
        if "Dynamic" in type(patcher).__name__:
            return "a DynamicVRAM patcher pages its weights in itself"
        state = getattr(mm, "vram_state", None)
        if state is not None and getattr(state, "name", "") in ("LOW_VRAM", "NO_VRAM"):
            return f"the host runs in {state.name} mode and loads models partially"
        device = self.device
        assert device is not None  # set by _side()
        if torch.device(patcher.load_device) != torch.device(device):
            return f"it loads to {patcher.load_device}, the side stream uploads to {self.device}"
        for lm in list(mm.current_loaded_models):
            other = lm.model
            if other is not None and other is not patcher and patcher.is_clone(other):
                return "a clone of it is loaded: the host's own load exchanges them"
        if any(getattr(c, "patches", None) for c in handle.live_clones()):
            return "a patched clone is what the node computes with; the host loads that"
        for t in weights(patcher.model):
            if type(t) not in _PLAIN:
                return f"its weights are {type(t).__name__}: the host converts them while it loads"
            if t.device.type != "cpu":
                return f"part of it is on {t.device} already (a partial load)"
        return ""

    def size(self, handle: Any) -> int:
        return sum(t.numel() * t.element_size() for t in weights(handle.patcher.model))

    def start(self, handle: Any) -> HostUpload:
        stream = self._side()
        assert stream is not None, "why_sync() said no"
        swaps = []
        for t in weights(handle.patcher.model):  # an OOM here drops what was allocated with ``swaps``
            src = t.detach()
            swaps.append((t, torch.empty_like(src, device=self.device), src))
        event = stream.copy([(dst, src) for _, dst, src in swaps])
        return HostUpload(event, sum(d.numel() * d.element_size() for _, d, _ in swaps), swaps)

    def land(self, handle: Any, upload: Upload) -> None:
        upload = _own(upload)
        mm = self.mm
        patcher = handle.patcher
        if any(lm.model is patcher for lm in mm.current_loaded_models):
            raise RuntimeError("the host loaded it meanwhile")
        for t, dst, _ in upload.swaps:
            t.data = dst
        loaded = mm.LoadedModel(patcher)
        try:
            loaded.model_load(0)  # 0: no lowvram budget, a full load (every host's signature)
        except BaseException:
            for t, _, src in upload.swaps:
                t.data = src
            raise
        REGISTRY.insert("model_management.current_loaded_models[prefetch]", mm.current_loaded_models, loaded)
        upload.swaps.clear()  # the module holds the device tensors now

    def cancel(self, upload: Upload) -> None:
        upload = _own(upload)
        try:
            upload.event.wait()  # compute waits for the side stream before the memory is reused
        finally:
            upload.swaps.clear()

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.mm.OOM_EXCEPTION)
