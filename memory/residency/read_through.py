"""Compute from a mapped file without reading its pages: the "disk" tier on a CPU compute device.

On a GPU a "disk" component's weights are uploaded before they are used, and every upload Headroom makes
reads the file (``streaming.file_reads``). On a CPU the compute device is the host: the weights are the
file's pages, read by the kernels themselves, so a file truncated while a node computes from it kills the
process (SIGBUS) and one overwritten in place mixes old and new bytes.

``install`` hooks every module of a component that holds mapped tensors of its own. As a module's
forward begins, each of those tensors is read through the file (``pread``: a short file raises
FileChanged naming it; the file is checked before and after, so new bytes are refused too) into a
private copy, and as it ends the module points back at the mapping and the copies go. RAM holds one
module's weights at a time beside the page cache; each forward reads its weights once more (from the
page cache after the first step). ``remove`` undoes it, as a move off the disk tier does.

What a module reads of another module's weights outside that module's forward (a tied embedding, a
weight passed to a functional call) still reads the pages: those are rare in the host's models.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..streaming import file_reads
from ..streaming.host_buffer import direct, set_weight

_Held = list[tuple[str, bool, torch.Tensor]]  # (name, is_param, the mapped view put back after forward)


class _Hooks:
    """The hooks on one component, and what each module holds of its own while its forward runs."""

    def __init__(self) -> None:
        self.handles: list[RemovableHandle] = []
        self.held: dict[int, _Held] = {}  # id(module) -> its mapped views, while their copies are in use
        self.depth: dict[int, int] = {}  # id(module) -> forwards in progress (a module called in itself)

    def before(self, module: nn.Module, *_: object) -> None:
        key = id(module)
        self.depth[key] = self.depth.get(key, 0) + 1
        if self.depth[key] > 1:
            return
        held: _Held = []
        for _owner, name, is_param, tensor in direct(module):
            data = tensor.data if is_param else tensor
            if type(data) is not torch.Tensor:  # a quantized subclass: its own storage, left as it is
                continue
            read = file_reads.file_read(data)
            if read is None:  # not a view of a mapped file (a private copy, a device tensor)
                continue
            copy = torch.empty(data.shape, dtype=data.dtype)
            file_reads.check([read])
            file_reads.copy(copy, read)
            file_reads.check([read])  # rewritten while it was read: refused, not half old, half new
            set_weight(module, name, is_param, copy)
            held.append((name, is_param, data))
        if held:
            self.held[key] = held

    def after(self, module: nn.Module, *_: object) -> None:
        key = id(module)
        self.depth[key] = max(0, self.depth.get(key, 1) - 1)
        if self.depth[key]:
            return
        for name, is_param, view in self.held.pop(key, ()):
            set_weight(module, name, is_param, view)

    def remove(self, modules: Iterable[nn.Module]) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        for module in modules:  # a forward that never ended (an interrupt): its copies go too
            self.depth.pop(id(module), None)
            self.after(module)


_INSTALLED: weakref.WeakKeyDictionary[nn.Module, _Hooks] = weakref.WeakKeyDictionary()


def install(module: nn.Module) -> int:
    """Hook every module of ``module`` that holds mapped tensors of its own (see the module docstring);
    returns how many are hooked. Installing again first removes the hooks before."""
    remove(module)
    hooks = _Hooks()
    for sub in module.modules():
        mapped = [t for _, _, is_param, t in direct(sub) if file_reads.file_read(t.data if is_param else t)]
        if not mapped:
            continue
        hooks.handles.append(sub.register_forward_pre_hook(hooks.before))
        hooks.handles.append(sub.register_forward_hook(hooks.after, always_call=True))
    if hooks.handles:
        _INSTALLED[module] = hooks
    return len(hooks.handles) // 2


def remove(module: nn.Module) -> bool:
    """Undo ``install`` on ``module``: its hooks go, every module points at what it held before."""
    hooks = _INSTALLED.pop(module, None)
    if hooks is None:
        return False
    hooks.remove(module.modules())
    return True


def installed(module: nn.Module) -> bool:
    return module in _INSTALLED
