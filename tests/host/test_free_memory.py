"""The free device memory the residency controller reads before it asks the host to load a model
(``_HostOps.room_for``) is the one the host's own sampler reads: the patcher's ``get_free_memory`` where
the host has one (0.33: the module figure plus what comfy-aimdo's VBARs can give back, which under
DynamicVRAM the module figure alone under-counts; ``comfy/samplers.py`` asks ``current_patcher``), else
``model_management.get_free_memory``.

No GPU here: the device, the module figure and aimdo's VBAR analysis are stand-ins; the patcher's
``get_free_memory`` and ``minimum_inference_memory`` are the host's own.
"""

from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host

pytestmark = pytest.mark.host
GiB = 2**30


def test_room_for_reads_the_patchers_free_memory_where_the_host_has_one(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    mm = host.model_management
    mp = importlib.import_module("comfy.model_patcher")
    residency = host.pack_module("nodes.host.residency")
    cpu = torch.device("cpu")
    patcher = mp.ModelPatcher(torch.nn.Linear(4, 4), load_device=cpu, offload_device=cpu)
    handle = SimpleNamespace(patcher=patcher)
    need = patcher.model_size() * 1.1 + mm.minimum_inference_memory()  # what load_models_gpu asks for

    def module_figure(dev: Any = None, torch_free_too: bool = False) -> Any:
        free = int(need) - 2**20  # a MiB short
        return (free, free) if torch_free_too else free

    monkeypatch.setattr(mm, "get_torch_device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(mm, "get_free_memory", module_figure)
    ops = residency._HostOps()
    if not hasattr(patcher, "get_free_memory"):  # before 0.33: the module's figure is the host's
        assert not ops.room_for(handle)
        return
    cmm = sys.modules["comfy.memory_management"]
    vbar = importlib.import_module("comfy_aimdo.model_vbar")
    monkeypatch.setattr(cmm, "aimdo_enabled", True)
    monkeypatch.setattr(vbar, "vbars_analyze", lambda device: 2 * GiB)  # reclaimable from other VBARs
    assert patcher.get_free_memory(torch.device("cuda", 0)) == module_figure() + 2 * GiB
    assert ops.room_for(handle)  # the module figure alone would say no
    monkeypatch.setattr(vbar, "vbars_analyze", lambda device: 0)
    assert not ops.room_for(handle)
