"""Compute from a mapped file without reading its pages: the "disk" tier.

Every upload Headroom itself makes reads the file (``streaming.file_reads``). What else computes from a
"disk" component's weights reads the file's pages: on a CPU compute device the kernels themselves, on a
GPU host without DynamicVRAM the host's low-VRAM layers, whose forward casts each CPU weight to the GPU.
A file truncated meanwhile kills the process (SIGBUS); one overwritten in place mixes old and new bytes.

``install`` hooks every module of a component that holds mapped tensors of its own. As a module's
forward begins, each of those tensors is read through the file (``pread``: a short file raises
FileChanged naming it; the file is checked before and after, so new bytes are refused too) into a
private copy, and as it ends the module points back at the mapping and the copies go. RAM holds one
module's weights at a time beside the page cache; each forward reads its weights once more (from the
page cache after the first step). With ``pin`` (a CUDA compute device) the copies are pinned, so the
host's cast copies them to the GPU by DMA (the caching host allocator keeps a block until the copies
queued from it are done, so letting a copy go as the forward ends is safe with non_blocking casts).
``remove`` undoes it, as a move off the disk tier does.

The host's own move of such a module (``Module.to``: its whole load onto a GPU, or a dtype cast) reads
through the file the same way, one module at a time (``_apply``, which ``to`` runs on every module, is
wrapped on the instance), on any device.

Under ``torch.compile`` (the host's TorchCompileModel on a "disk" model) the hooks and ``_apply`` run
eagerly (``streaming.streamer.eager``): dynamo breaks the graph at each hook and traces none of the file's
checks, reads or rebinding, and the compiled code reads the private copies they bound. (Traced, dynamo
compiled parts of them: the copy's allocation and the rebinding, broken at the file's ``stat``.)

The host patching a LoRA into a weight reads it outside both: ``borrow`` lends it as a private copy
read through the file for that call (nodes/host/lora_reads.py wraps the host's patch call with it).

What still reads the pages: a module's weights read outside its forward, its ``_apply`` and the host's
patch call (a tied embedding, a weight passed to a functional call): rare.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..process_state import PROCESS
from ..streaming import file_reads
from ..streaming.host_buffer import direct, set_weight
from ..streaming.streamer import eager
from .host_memory import private_copy

# (name, is_param, the mapped view put back after, the private copy in its place meanwhile)
_Held = list[tuple[str, bool, torch.Tensor, torch.Tensor]]


class _Hooks:
    """The hooks on one component, and what each module holds of its own while its forward runs."""

    def __init__(self, pin: bool = False) -> None:
        self.pin = pin  # pinned copies: the compute device is a CUDA GPU
        self.handles: list[RemovableHandle] = []
        # modules whose _apply reads through the file, held weakly: the registry's value must not keep
        # its key (the component's module) alive once the host drops it
        self.applied: list[weakref.ref[nn.Module]] = []
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
            copy = _read_copy(data, self.pin)
            if copy is not None:
                set_weight(module, name, is_param, copy)
                held.append((name, is_param, data, copy))
        if held:
            self.held[key] = held

    def after(self, module: nn.Module, *_: object) -> None:
        key = id(module)
        self.depth[key] = max(0, self.depth.get(key, 1) - 1)
        if self.depth[key]:
            return
        for name, is_param, view, copy in self.held.pop(key, ()):
            current = module._parameters[name] if is_param else module._buffers[name]
            # (``.data`` is a new object each time: the storage tells whether the copy is still there)
            if (
                current is not None
                and current.device == copy.device
                and current.data_ptr() == copy.data_ptr()
            ):
                set_weight(module, name, is_param, view)  # (a move put another tensor there: it stays)

    def wrap_apply(self, module: nn.Module) -> None:
        """Read through the file when the host moves or converts the module (``Module.to`` and the
        like run ``_apply`` on each module): the copy it makes is of the private copies."""
        original: Callable[..., Any] = type(module)._apply
        ref = weakref.ref(module)

        def apply(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            owner = ref()  # (a closure over the module itself would be a cycle through its __dict__)
            assert owner is not None  # called through the module, which is alive
            if not _copies(fn, owner):  # a move to where the weights are (the host's unload to the CPU)
                return original(owner, fn, *args, **kwargs)
            self.before(owner)
            try:
                return original(owner, fn, *args, **kwargs)
            finally:
                self.after(owner)

        module.__dict__["_apply"] = eager(apply)  # an instance attribute over the class's method
        self.applied.append(ref)

    def remove(self, modules: Iterable[nn.Module]) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        for ref in self.applied:
            module = ref()
            if module is not None:
                module.__dict__.pop("_apply", None)
        self.applied.clear()
        for module in modules:  # a forward that never ended (an interrupt): its copies go too
            self.depth.pop(id(module), None)
            self.after(module)


def _read_copy(data: torch.Tensor, pin: bool = False) -> torch.Tensor | None:
    """A private copy of ``data`` read through its file (checked before and after: no SIGBUS, never half
    old, half new) when ``data`` is a view of a mapped file; None for a copy, a device tensor or a
    quantized subclass (its own storage, left as it is)."""
    if type(data) is not torch.Tensor or file_reads.file_read(data) is None:
        return None
    return private_copy(data, pin)


def _copies(fn: Callable[..., Any], module: nn.Module) -> bool:
    """Whether ``fn`` (what ``Module._apply`` applies to each tensor) copies a CPU tensor of the module's
    dtypes: ``Module.to`` of the device and dtype a tensor has returns the tensor itself, and reading the
    file for it would be work for nothing (and a FileChanged where nothing is read)."""
    for dtype in {t.dtype for _, _, _, t in direct(module)}:
        probe = torch.empty(0, dtype=dtype)
        try:
            if fn(probe) is not probe:
                return True
        except Exception:  # an fn that cannot take the probe: assume it copies
            return True
    return False


_INSTALLED: weakref.WeakKeyDictionary[nn.Module, _Hooks] = PROCESS.hold(
    "residency.read_through: installed modules",
    weakref.WeakKeyDictionary(),
    "the undo of each module's read-through hooks; weak, it dies with the module (forgetting it would leave "
    "the hooks on a live module for good)",
)


def install(module: nn.Module, forward: bool = True, pin: bool = False) -> int:
    """Make every module of ``module`` that holds mapped tensors of its own read them through the file
    when the host moves or converts it and, with ``forward``, when it computes; with ``pin`` into pinned
    copies (see the module docstring). Returns how many modules. Installing again first removes the
    hooks."""
    remove(module)
    hooks = _Hooks(pin)
    for sub in module.modules():
        if not any(file_reads.file_read(t.data if is_param else t) for _, _, is_param, t in direct(sub)):
            continue
        hooks.wrap_apply(sub)
        if forward:  # (eager: under torch.compile dynamo breaks the graph at each hook, never traces it)
            hooks.handles.append(sub.register_forward_pre_hook(eager(hooks.before)))
            hooks.handles.append(sub.register_forward_hook(eager(hooks.after), always_call=True))
    if hooks.applied:
        _INSTALLED[module] = hooks
    return len(hooks.applied)


def remove(module: nn.Module) -> bool:
    """Undo ``install`` on ``module``: its hooks go, every module points at what it held before."""
    hooks = _INSTALLED.pop(module, None)
    if hooks is None:
        return False
    hooks.remove(module.modules())
    return True


def installed(module: nn.Module) -> bool:
    return module in _INSTALLED


def pins(module: nn.Module) -> bool:
    """Whether ``module``'s hooks make pinned copies (installed for a CUDA compute device)."""
    hooks = _INSTALLED.get(module)
    return hooks is not None and hooks.pin


class Borrowed:
    """A mapped weight lent out as a private copy read through the file while the host computes from it
    (``borrow``); ``give_back`` points it at the mapping again unless the host patched the copy in place."""

    def __init__(
        self, module: nn.Module, name: str, is_param: bool, view: torch.Tensor, holder: torch.Tensor
    ) -> None:
        self.module, self.name, self.is_param, self.view = module, name, is_param, view
        self.holder = holder  # the Parameter (or buffer) object whose storage is the private copy now

    def give_back(self, in_place: bool) -> None:
        """``in_place``: the host may have written its result into the copy (kept, as the stock write into
        the mapping would have kept a private page); else the copy goes, wherever the object is now (the
        host's backup of the unpatched weight holds the same object: it points at the mapping again)."""
        current = (
            self.module._parameters.get(self.name) if self.is_param else self.module._buffers.get(self.name)
        )
        if in_place and current is self.holder:
            return
        if self.is_param:
            self.holder.data = self.view
        elif current is self.holder:
            self.module._buffers[self.name] = self.view


def borrow(model: nn.Module, key: str) -> Borrowed | None:
    """Put a private copy, read through the file, in place of ``model``'s weight ``key`` (a dotted path)
    when that weight is a view of a mapped file; None for any other weight (left as it is)."""
    path, _, name = key.rpartition(".")
    try:
        module = model.get_submodule(path) if path else model
    except AttributeError:
        return None
    is_param = name in module._parameters
    holder = module._parameters.get(name) if is_param else module._buffers.get(name)
    if holder is None:
        return None
    data = holder.data if is_param else holder
    copy = _read_copy(data)
    if copy is None:
        return None
    set_weight(module, name, is_param, copy)  # (a parameter keeps its object: its data is the copy)
    return Borrowed(module, name, is_param, data, holder if is_param else copy)
