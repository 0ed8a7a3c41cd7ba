"""Component residency at run time: the controller that applies plans, the host-side weight tiers
(pinned RAM, pageable RAM, memory-mapped safetensors) it moves components between, and the RAM guard
(``ram_budget``, ``ram_guard``) that keeps the process's private RAM within its budget."""

from .controller import Controller, Event, HostOps, Run
from .host_memory import Footprint, can_pin, footprint, pin, to_pageable
from .mapped import Binding, MappedFile, bind, open_mapped

__all__ = [
    "Binding", "Controller", "Event", "Footprint", "HostOps", "MappedFile", "Run", "bind", "can_pin",
    "footprint", "open_mapped", "pin", "to_pageable",
]  # fmt: skip
