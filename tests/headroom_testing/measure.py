"""Peak live activation bytes of a computation, on any device (the CPU included).

A TorchDispatchMode sees every tensor an op creates and, through weak references, when it dies: the peak
of the sum of live storages is the activation memory the computation needs, weights and inputs excluded.
This is how the per-architecture coefficients of ``memory/tiled_vae/budget.py`` are measured and checked on
a CPU (tests, bench/ and scripts/build_model_catalog.py use it; the pack does not).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakLiveBytes(TorchDispatchMode):
    """``with PeakLiveBytes() as meter: ...`` then ``meter.peak`` (bytes) on ``meter.device`` tensors."""

    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.device = device
        self.refs: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.live = 0
        self.peak = 0

    def _release(self, ptr: int) -> None:
        self.refs[ptr] -= 1
        if self.refs[ptr] == 0:
            self.live -= self.sizes.pop(ptr)
            del self.refs[ptr]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):
            return out  # a view allocates nothing
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or not t.untyped_storage().nbytes():
                continue
            if self.device is not None and t.device.type != self.device:
                continue
            ptr = t.untyped_storage().data_ptr()
            if ptr in inputs and ptr not in self.refs:
                continue  # written in place into memory this meter did not see allocated
            self.count(t)
        return out

    def count(self, t: torch.Tensor) -> None:
        """``t`` holds its storage until it dies: the storage is live from its first holder to its last."""
        ptr = t.untyped_storage().data_ptr()
        if ptr not in self.refs:
            self.refs[ptr], self.sizes[ptr] = 0, t.untyped_storage().nbytes()
            self.live += self.sizes[ptr]
            self.peak = max(self.peak, self.live)
        self.refs[ptr] += 1
        weakref.finalize(t, self._release, ptr)
