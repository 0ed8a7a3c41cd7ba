"""Component residency at run time: the controller that applies plans, the host-side weight tiers
(pinned RAM, pageable RAM, memory-mapped safetensors) it moves components between, and the RAM guard
(``ram_budget``, ``ram_guard``) that keeps the process's private RAM within its budget."""

from . import read_through
from .controller import Controller
from .host_memory import Footprint, can_pin, footprint, pin, to_pageable
from .mapped import (
    Binding,
    FileChanged,
    MappedFile,
    bind,
    file_identity,
    file_version,
    live_mappings,
    open_mapped,
)
from .run_log import Event, HostOps, Run

__all__ = [
    "Binding", "Controller", "Event", "FileChanged", "Footprint", "HostOps", "MappedFile", "Run", "bind",
    "can_pin", "file_identity", "file_version", "footprint", "live_mappings", "open_mapped", "pin",
    "read_through", "to_pageable",
]  # fmt: skip
